"""Which bindings of the user's Relax function each kernel of the pipeline computes.

The pipeline renames everything a user could look for: `LegalizeOps` turns
each binding into a call of a kernel (`lv28 = R.call_tir(matmul, ...)`, the
binding keeps its variable), `FuseOps` groups calls into one function per
group (`fused_matmul_add2`), one function for all the groups that look
alike, whose inside keeps the variable names of the first group only, and
`FuseTIR` turns each into one kernel. So the call sites of a fused function
are matched back, op by op, to the legalized calls they replace: the same
kernel on the same arguments (constants, which folding may have replaced, on
any), each claimed once, in order. A `KernelSites` then says, for each
kernel, the bindings of each of its call sites (`("lv28", "lv29")`), by the
names the user's text has.

The modules are seen through a pass instrument while the pipeline runs, so
nothing is lowered twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..models.source_sites import where_of
from .pass_contexts import with_instruments

LEGALIZE = "LegalizeOps"
FUSE_TIR = "FuseTIR"


@dataclass(frozen=True)
class KernelSites:
    """`{function: {kernel: [bindings of one call site, ...]}}` for the Relax functions lowered
    (kernels by name; PyTorch calls and pyfuncs by the name the lowered function calls)."""

    functions: dict[str, dict[str, list[tuple[str, ...]]]] = field(default_factory=dict)

    def of(self, function: str) -> dict[str, list[tuple[str, ...]]]:
        """Each kernel `function` calls -> the bindings each of its call sites computes."""
        return self.functions.get(function, {})

    def kernel_of(self, kernel: str) -> list[tuple[str, tuple[str, ...]]]:
        """`(function, bindings)` of every call site of `kernel`, in every function."""
        return [
            (function, site)
            for function, kernels in self.functions.items()
            for site in kernels.get(kernel, ())
        ]


@tvm.ir.instrument.pass_instrument
class _Recorder:
    """Keeps the module after the first legalization and around each `FuseTIR`."""

    def __init__(self):
        self.legalized: tvm.IRModule | None = None
        self.fusions: list[tuple[tvm.IRModule, tvm.IRModule | None]] = []

    def run_before_pass(self, mod, info) -> None:
        if info.name == FUSE_TIR and self.legalized is not None:
            self.fusions.append((mod, None))

    def run_after_pass(self, mod, info) -> None:
        if info.name == LEGALIZE and self.legalized is None:
            self.legalized = mod
        elif info.name == FUSE_TIR and self.fusions and self.fusions[-1][1] is None:
            self.fusions[-1] = (self.fusions[-1][0], mod)


class Recording:
    """What one lowering showed of its modules; `sites()` works out the kernels' bindings."""

    def __init__(self, recorder: _Recorder | None, sites: KernelSites | None = None):
        self._recorder = recorder  # None: `sites` were worked out elsewhere (the build worker)
        self._sites = sites

    def sites(self) -> KernelSites:
        """The bindings of each kernel's call sites (worked out once, when first asked for)."""
        if self._sites is None:
            self._sites = _sites(self._recorder)
        return self._sites


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record the pipeline run inside, in the pass context already in force (its options and
    instruments kept)."""
    recorder = _Recorder()
    with with_instruments(recorder):
        yield Recording(recorder)


def _sites(recorder: _Recorder) -> KernelSites:
    legalized = recorder.legalized
    if legalized is None:  # a pipeline that legalizes nothing: no kernels it made
        return KernelSites()
    found = {}
    for gv, func in legalized.functions_items():
        if not isinstance(func, relax.Function):
            continue
        name = gv.name_hint
        # each variable of the current stage -> the user's bindings it stands for, by the names
        # trace and the script give them (`h`, `h_1` where the text binds `h` twice)
        variables = [b.var for b in _bindings(func)]
        names = {var: (name,) for var, name in zip(variables, unique_names(variables), strict=True)}
        final = legalized
        for before, after in recorder.fusions:
            if after is None or name not in before or name not in after:
                continue
            names = _through_fusion(before, name, final[name], names)
            final = after
        found[name] = _call_sites(final[name], names)
    return KernelSites(found)


def _through_fusion(before: tvm.IRModule, name: str, previous, names: dict) -> dict:
    """`names` for the variables of `before[name]`: a fused group's call stands for the calls of
    `previous` it replaces, matched op by op; any other binding is the very variable it was."""
    stage = _Stage(previous)
    now: dict = {}
    for binding in _bindings(before[name]):
        value = binding.value
        op = getattr(value, "op", None)
        group = before[op] if isinstance(op, tvm.ir.GlobalVar) else None
        if isinstance(group, relax.Function):
            inside = dict(zip(group.params, value.args, strict=True))
            matched = [stage.match(inner, inside) for inner in _bindings(group)]
            matched = [var for var in matched if var is not None]
            output = inside.get(group.body.body)
            if isinstance(output, relax.Var):
                stage.stands_for[binding.var] = output
            now[binding.var] = tuple(n for var in matched for n in names.get(var, ()))
        elif isinstance(value, relax.Var):  # `gv = lv`: later passes may bind the call to `gv`
            now[binding.var] = (*now.get(value, ()), *names.get(binding.var, ()))
        else:
            stage.match(binding, {})
            now[binding.var] = names.get(binding.var, ())
    return now


class _Stage:
    """The previous stage's function, as the calls of the next are matched back to it."""

    def __init__(self, func: relax.Function):
        self.vars: set = set()
        self.calls: dict[str, list] = {}  # kernel -> [[variable or None once claimed, args]]
        self.items: dict = {}  # (tuple variable, index) -> the variable of that item
        self.stands_for: dict = {}  # a variable of the next stage -> the one it is here
        for binding in _bindings(func):
            self.vars.add(binding.var)
            value = binding.value
            if isinstance(value, relax.TupleGetItem):
                self.items[(value.tuple_value, value.index)] = binding.var
            call = _kernel_call(value, lambda e: e if isinstance(e, relax.Var) else None)
            if call is not None:
                self.calls.setdefault(call[0], []).append([binding.var, call[1]])

    def previous(self, expr, inside: dict):
        """The variable of this stage an argument is; None for a constant (or what folding
        made of one)."""
        expr = inside.get(expr, expr)
        if not isinstance(expr, relax.Var):
            return None
        if expr in self.stands_for:
            return self.stands_for[expr]
        return expr if expr in self.vars else None

    def match(self, binding, inside: dict):
        """The variable of this stage that `binding` (of the next stage, or inside a group whose
        arguments are `inside`) computes, claimed; None if it computes no kernel's call here."""
        value = binding.value
        if isinstance(value, relax.TupleGetItem):
            found = self.items.get((self.previous(value.tuple_value, inside), value.index))
        else:
            call = _kernel_call(value, lambda e: self.previous(e, inside))
            found = self._claim(*call) if call is not None else None
        if found is not None:
            inside[binding.var] = found
            if binding.var not in self.vars:
                self.stands_for[binding.var] = found
        return found

    def _claim(self, kernel: str, args: tuple):
        """The first call of `kernel` not claimed yet whose arguments are `args`; a constant
        (None) in `args` stands for any argument, since folding made constants of bindings."""
        for entry in self.calls.get(kernel, ()):
            var, theirs = entry
            if var is not None and all(
                a is None or (b is not None and a.same_as(b))
                for a, b in zip(args, theirs, strict=True)
            ):
                entry[0] = None
                return var
        return None


def _kernel_call(value, arg) -> tuple[str, tuple] | None:
    """`(kernel, (arg(argument), ...))` of a kernel call (`R.call_tir`), else None."""
    if not (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir"):
        return None
    fields = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else [value.args[1]]
    return value.args[0].name_hint, tuple(arg(f) for f in fields)


def _call_sites(func: relax.Function, names: dict) -> dict[str, list[tuple[str, ...]]]:
    """What each call site of `func` calls -> the bindings of each: a kernel by its name, a
    packed function (`R.call_dps_packed`) by its global symbol, a pyfunc (`R.call_py_func`) by
    the name it is called by."""
    sites: dict[str, list[tuple[str, ...]]] = {}
    for binding in _bindings(func):
        callee = _callee(binding.value)
        if callee is not None:
            sites.setdefault(callee, []).append(names.get(binding.var, ()))
    return sites


def _callee(value) -> str | None:
    op = getattr(getattr(value, "op", None), "name", "") if isinstance(value, relax.Call) else ""
    if op == "relax.call_tir":
        return value.args[0].name_hint
    if op == "relax.call_dps_packed" and isinstance(value.args[0], relax.ExternFunc):
        return str(value.args[0].global_symbol)
    if op == "relax.call_py_func":
        return str(value.args[0].value)
    return None


def unique_names(variables: Iterable[relax.Var]) -> list[str]:
    """Each variable's name, a name used twice made unique as TVM's printer shows it (`lv_1`)."""
    names, seen = [], set()
    for var in variables:
        name, k = var.name, 1
        while name in seen:
            name, k = f"{var.name}_{k}", k + 1
        seen.add(name)
        names.append(name)
    return names


def _bindings(func: relax.Function) -> list:
    return [b for block in func.body.blocks for b in block.bindings]


def describe_kernel(sites: KernelSites, kernel: str, site_of=None) -> str:
    """`kernel `fused_conv1d_add_gelu` (bindings lv3, lv4, lv5 of `main`, from conv1 (Conv1d),
    modeling_whisper.py:612: ...)`: the kernel, the bindings of its first call site, and the
    places in the model's code they came from (`site_of(function, binding)`)."""
    calls = sites.kernel_of(kernel)
    if not calls:
        return f"kernel `{kernel}`"
    function, bindings = calls[0]
    which = f"bindings {', '.join(bindings)}" if len(bindings) > 1 else f"binding {bindings[0]}"
    others = len(calls) - 1
    more = f"; {others} more call site{'s' * (others > 1)}" if others else ""
    found = (site_of(function, b) for b in bindings) if site_of else ()
    places = list(dict.fromkeys(str(s) for s in found if s))
    where = "; ".join(places[:MAX_PLACES]) + (
        f"; +{len(places) - MAX_PLACES} more" if len(places) > MAX_PLACES else ""
    )
    return f"kernel `{kernel}` ({which} of `{function}`{f', from {where}' if where else ''}{more})"


MAX_PLACES = 3  # places in the model's code a message names for one kernel


def site_cells(calls: list[tuple[str, ...]], site_of) -> tuple[str, str]:
    """A table row's `bindings` and `where` for a kernel's call sites: the first site's bindings
    (`lv28, lv29 (+7 sites)`) and where they came from (`site_of(binding)`, a `SourceSite`)."""
    if not calls:
        return "", ""
    first = ", ".join(calls[0]) or "?"
    more = len(calls) - 1
    bindings = first + (f" (+{more} site{'s' * (more > 1)})" if more else "")
    return bindings, where_of(site_of(b) for site in calls for b in site)
