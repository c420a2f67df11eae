"""The search of `minimize`: the fewest bindings that still show the fault, by their indices.

A fault in a dataflow graph is local: it takes a binding, and a few before it.
So the search first narrows the bindings to a window, then cuts inside it:
1. the shortest prefix (bindings 0..e) that shows the fault, by binary search:
   binding e is where it shows first;
2. the shortest window e'..e of that prefix that still shows it, likewise: the
   values that enter it come from the reference run, so what came before
   binding e' is no longer needed;
3. delta debugging inside the window (Zeller's ddmin, on complements): remove
   a half, a quarter... of the bindings while the fault still shows, down to
   single bindings. What it returns is 1-minimal: without any one of its
   bindings, the fault does not show.
Each set asked about is first `closed` (the bindings that make values which
cannot enter a cut come along) and asked about once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Shows = Callable[[frozenset[int]], bool]
Closed = Callable[[Iterable[int]], frozenset[int]]


def smallest(count: int, shows: Shows, closed: Closed) -> frozenset[int]:
    """The smallest set of bindings 0..count-1 found to show the fault (`shows`), given that
    all of them do."""
    lo, hi = -1, count - 1  # the prefix 0..hi shows the fault, 0..lo was not seen to
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if shows(closed(range(mid + 1))):
            hi = mid
        else:
            lo = mid
    end = hi
    lo, hi = 0, end + 1  # the window lo..end shows the fault, hi..end was not seen to
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if shows(closed(range(mid, end + 1))):
            lo = mid
        else:
            hi = mid
    return delta_debugged(closed(range(lo, end + 1)), shows, closed)


def delta_debugged(kept: frozenset[int], shows: Shows, closed: Closed) -> frozenset[int]:
    """`kept` (which shows the fault) cut by ddmin on complements to a 1-minimal set."""
    parts = 2
    while len(kept) > 1:
        items = sorted(kept)
        for chunk in _chunks(items, parts):
            rest = closed(set(items) - set(chunk))
            if rest and rest != kept and shows(rest):
                kept, parts = rest, max(parts - 1, 2)
                break
        else:
            if parts >= len(items):
                return kept
            parts = min(2 * parts, len(items))
    return kept


def _chunks(items: list[int], parts: int) -> list[list[int]]:
    """`items` in `parts` runs of (nearly) equal length, in order."""
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]
