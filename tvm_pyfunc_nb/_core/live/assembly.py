"""Contributions in, one checked `IRModule` out: the live module's assembly.

`propose` builds the module that a new contribution (a cell run, an `add`,
a schedule) or a removal would make, and checks it whole: references,
`R.call_py_func` targets, Relax well-formedness, TIR checks of the fresh
PrimFuncs. Nothing changes until `commit`; a proposal that fails to check
raises and leaves the module as it was (transactional update).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import GlobalVar

from ...errors import IllFormedModuleError, last_reason, native_stderr_silenced
from ..build.crash_guards import out_of_bounds
from .cells import PRIMFUNC, PYFUNC, RELAX
from .contributions import Contribution, FunctionEntry, owners
from .fault_lines import call_line, calls_py_func, refers_to
from .pyfunc_loader import forget_cell_text
from .relax_rewrite import (
    py_func_calls,
    rebind_global_vars,
    referenced_global_vars,
    relax_closure,
    sub_module,
)


@dataclass(frozen=True)
class ModuleState:
    """One version of the module: contributions in run order, each name's owner, the IRModule."""

    contributions: Mapping[object, Contribution] = field(default_factory=dict)
    entries: Mapping[str, FunctionEntry] = field(default_factory=dict)
    ir_mod: tvm.IRModule = field(default_factory=lambda: tvm.IRModule({}))

    @property
    def functions(self) -> dict[str, str]:
        return {name: e.kind for name, e in self.entries.items()}


@dataclass
class UpdateResult:
    """What a cell run (or an `add`, a schedule...) changed, for the notices a user reads."""

    module: str
    by: str = "this cell"  # what made the change: a cell, or `demo.add_torch(MLP)`...
    defined: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # kind of each defined function
    removed: list[str] = field(default_factory=list)
    # name -> where the earlier one came from
    replaced: dict[str, str] = field(default_factory=dict)
    restored: dict[str, str] = field(default_factory=dict)  # name -> the earlier definition back
    waiting: dict[str, list[str]] = field(default_factory=dict)  # Relax fn -> pyfuncs not there yet
    compiled: list = field(default_factory=list)  # CompileRecords of an eager compile
    # defined names that one of the live module's own attributes hides
    shadowed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # changes made on the way in (repairs)

    def __repr__(self) -> str:
        return notices_text(self)


class Markup:
    """How notices mark what they mention; plain text marks nothing (views mark it as HTML)."""

    def name(self, name: str) -> str:
        return name

    def text(self, text: str) -> str:
        return text

    def kind(self, kind: str) -> str:
        return f"({kind})"

    def module(self, module: str) -> str:
        return module


PLAIN = Markup()


def notice_lines(result: UpdateResult, by: str | None = None, markup=PLAIN) -> list[str]:
    """What a change did, a line per notice: the one source of its text and its HTML."""
    m, module = markup, result.module

    def names(ns) -> str:
        return ", ".join(m.name(n) for n in ns)

    defined = ", ".join(f"{m.name(n)} {m.kind(result.kinds.get(n, '?'))}" for n in result.defined)
    lines = [f"{m.module(module)}: {m.text(by or result.by)} defines {defined or 'nothing'}"]
    lines += [m.text(note) for note in result.notes]
    lines += [
        f"{m.name(n)} replaces the definition from {m.text(o)}" for n, o in result.replaced.items()
    ]
    lines += [
        f"{m.name(n)} is the definition from {m.text(o)} again" for n, o in result.restored.items()
    ]
    if result.removed:
        lines.append(f"removed from {m.text(module)}: {names(result.removed)}")
    lines += [
        f"{m.name(fn)} calls pyfunc {names(pyfuncs)} with R.call_py_func, which is not defined yet "
        "(define it before calling; nothing will need recompiling)"
        for fn, pyfuncs in result.waiting.items()
    ]
    lines += [
        f"{m.name(n)} is also the name of a live module attribute: "
        f"call it with {m.name(f'{module}.get_function({n!r})')}"
        for n in result.shadowed
    ]
    if result.compiled:
        lines.append("compiled now: " + ", ".join(m.text(str(c)) for c in result.compiled))
    return lines


def notices_text(result: UpdateResult, by: str | None = None) -> str:
    """What a change did, in lines a user reads (the cell view's text, `add`'s output)."""
    return "\n  ".join(notice_lines(result, by))


@dataclass(frozen=True)
class Proposal:
    """A checked module not yet committed, and what committing it would change."""

    state: ModuleState
    result: UpdateResult
    fresh: tuple[str, ...]  # the names the new contribution defines (a new definition each)


class Assembly:
    """The contributions of one live module and the checked `IRModule` they make."""

    def __init__(self, module_name: str, *, relax_may_call_python: bool = True):
        self.module_name = module_name
        self.relax_may_call_python = relax_may_call_python
        self.state = ModuleState()

    def propose(
        self,
        contribution: Contribution | None = None,
        *,
        drop: Iterable[object] = (),
        reset: bool = False,
    ) -> Proposal:
        """The module with `contribution` run last (replacing its key's earlier run), `drop` gone.

        Contributions derived from a replaced or dropped one (a schedule of a
        cell's kernel) go with it. Raises `IllFormedModuleError` if the result
        does not check.
        """
        gone = set(drop) | ({contribution.key} if contribution else set())
        kept = {} if reset else dict(self.state.contributions)
        for key in list(kept):
            if key in gone or kept[key].derived_from in gone:
                del kept[key]
        if contribution is not None:
            kept[contribution.key] = contribution
        fresh = tuple(contribution.functions) if contribution else ()
        entries = owners(kept.values())
        try:
            entries, ir_mod = self._assemble(entries, kept.values(), fresh=set(fresh))
        except IllFormedModuleError as err:
            key = contribution.key if contribution else None
            raise self._blame_other(err, entries, key) from err.__cause__
        contributions = {key: c.with_entries(entries) for key, c in kept.items()}
        state = ModuleState(contributions, entries, ir_mod)
        return Proposal(state, self._describe(state, contribution), fresh)

    def commit(self, proposal: Proposal) -> None:
        """Make `proposal` the module; forget the cell text of contributions that left."""
        before = self.state.contributions
        now = proposal.state.contributions
        for key, contribution in before.items():
            if (
                contribution.filename
                and now.get(key, contribution).filename != contribution.filename
            ) or key not in now:
                forget_cell_text(contribution.filename)
        self.state = proposal.state

    # -- checking ------------------------------------------------------------------
    def _assemble(self, entries: dict[str, FunctionEntry], contributions, fresh: set[str]):
        """Bind every cross-function reference to the callee's one GlobalVar and check the module.

        PrimFuncs are self-contained, so only the `fresh` ones need TIR's own checks again.
        """
        canonical = {name: e.gvar for name, e in entries.items()}
        pyfuncs = {n for n, e in entries.items() if e.kind == PYFUNC}
        bound = {}
        for name, entry in entries.items():
            if entry.kind == RELAX:
                self._check_references(entry, canonical, pyfuncs)
                try:
                    func = rebind_global_vars(entry.func, canonical)
                except (
                    Exception
                ) as err:  # TVM normalizes while rebinding and refuses what does not fit
                    raise IllFormedModuleError(
                        f"does not fit the module: {last_reason(err)}",
                        function=name,
                        line=_stale_call_line(entry, canonical),
                    ) from err
                if not func.same_as(entry.func):
                    entry = entry.with_func(func)
            bound[name] = entry
        attrs, infos = _module_attrs(contributions)
        ir_mod = tvm.IRModule({e.gvar: e.func for e in bound.values()}, attrs=attrs)
        for key, value in infos.items():
            ir_mod.update_global_info(key, value)
        _check_well_formed(ir_mod, bound, fresh)
        return bound, ir_mod

    def _check_references(
        self, entry: FunctionEntry, canonical: Mapping[str, GlobalVar], pyfuncs: set[str]
    ) -> None:
        def fault(message: str, at) -> IllFormedModuleError:
            line = (call_line(entry.func, at) or entry.line) if entry.line else None
            return IllFormedModuleError(message, function=entry.name, line=line)

        for gv in referenced_global_vars(entry.func):
            if gv.name_hint in pyfuncs:
                raise fault(
                    f"refers to pyfunc `{gv.name_hint}` directly; Relax calls a pyfunc with "
                    f'R.call_py_func("{gv.name_hint}", ..., out_ty=...)',
                    refers_to(gv.name_hint),
                )
            if gv.name_hint not in canonical:
                raise fault(
                    f"calls `{gv.name_hint}`, which the module does not define",
                    refers_to(gv.name_hint),
                )
        for pyname, _ in py_func_calls(entry.func):
            if not self.relax_may_call_python:
                raise fault(
                    f"calls pyfunc `{pyname}` with R.call_py_func, but this module runs its Relax "
                    "functions on a remote device, whose VM cannot call back into this notebook's "
                    "Python; call the pyfunc from a pyfunc instead",
                    calls_py_func(pyname),
                )
            if pyname in canonical and pyname not in pyfuncs:
                raise fault(
                    f"R.call_py_func calls `{pyname}`, which is not a pyfunc of this module",
                    calls_py_func(pyname),
                )

    def _blame_other(self, err: IllFormedModuleError, entries, key) -> IllFormedModuleError:
        """An error about another contribution's function: its line is not a line of this cell."""
        culprit = entries.get(err.function)
        if culprit is None or culprit.contribution == key or err.line is None:
            return err
        other = self.state.contributions.get(culprit.contribution)
        origin = other.origin if other else "an earlier cell"
        return IllFormedModuleError(
            f"{err.detail} (`{err.function}` is defined in {origin}, line {err.line})",
            function=err.function,
        )

    # -- notices -------------------------------------------------------------------
    def _describe(self, state: ModuleState, contribution: Contribution | None) -> UpdateResult:
        before = self.state.entries
        defined = list(contribution.functions) if contribution else []
        result = UpdateResult(
            self.module_name,
            by=contribution.origin if contribution else "removing functions",
            defined=defined,
            kinds={name: state.entries[name].kind for name in defined if name in state.entries},
            notes=list(contribution.notes) if contribution else [],
        )
        for name in defined:
            earlier = before.get(name)
            rerun = earlier is not None and earlier.contribution == contribution.key
            if earlier is not None and (not rerun or contribution.reports_rerun):
                result.replaced[name] = self._origin(earlier.contribution)
        for name, entry in before.items():
            now = state.entries.get(name)
            if now is None:
                result.removed.append(name)
            elif name not in defined and now.contribution != entry.contribution:
                result.restored[name] = state.contributions[now.contribution].origin
        result.waiting = waiting_pyfuncs(state)
        return result

    def _origin(self, key: object) -> str:
        contribution = self.state.contributions.get(key)
        return contribution.origin if contribution else "an earlier cell"


def waiting_pyfuncs(state: ModuleState) -> dict[str, list[str]]:
    """`{relax function: [pyfunc names]}`: `R.call_py_func` targets that nothing defines yet."""
    waiting = {}
    for name, entry in state.entries.items():
        if entry.kind == RELAX:
            missing = sorted({py for py, _ in py_func_calls(entry.func)} - set(state.entries))
            if missing:
                waiting[name] = missing
    return waiting


def _module_attrs(contributions: Iterable[Contribution]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The module attrs and global infos every contribution brings (later ones win)."""
    attrs: dict[str, Any] = {"base_py_module": True}
    infos: dict[str, Any] = {}
    for contribution in contributions:
        attrs.update(contribution.attrs)
        infos.update(contribution.global_infos)
    return attrs, infos


def _stale_call_line(entry: FunctionEntry, canonical: Mapping[str, GlobalVar]) -> int | None:
    """The line of the first call to a function that another cell has since defined anew."""

    def stale(call) -> bool:
        return any(
            isinstance(node, GlobalVar) and not node.same_as(canonical.get(node.name_hint, node))
            for node in [call.op, *call.args]
        )

    return (call_line(entry.func, stale) or entry.line) if entry.line else None


def _check_well_formed(
    ir_mod: tvm.IRModule, entries: Mapping[str, FunctionEntry], fresh: set[str]
) -> None:
    try:
        relax.analysis.well_formed(ir_mod)
    except Exception as err:
        culprit = _ill_formed_function(ir_mod, entries)
        line = None
        if culprit is not None and culprit.line is not None:  # a cell's: spans are cell lines
            line = _ill_formed_binding_line(ir_mod, culprit.name) or culprit.line
        raise IllFormedModuleError(
            f"the module is not well formed: {last_reason(err)}",
            function=culprit.name if culprit else None,
            line=line,
        ) from err
    for name in fresh:
        entry = entries.get(name)
        if entry is not None and entry.kind == PRIMFUNC:
            _check_prim_func(entry)


def _check_prim_func(entry: FunctionEntry) -> None:
    """The checks TVMScript's own parser runs on a PrimFunc, and TVM's static bounds check."""
    try:
        tvm.s_tir.analysis.verify_well_formed(entry.func)
        if not entry.func.attrs.get("s_tir", False):
            tirx.analysis.verify_tirx_well_formed(entry.func)
    except Exception as err:
        sblock = _first_sblock_line(entry.func) if "SBlock" in str(err) else None
        if sblock is not None:
            raise IllFormedModuleError(
                "uses T.sblock, which a plain @T.prim_func does not allow: write "
                "@T.prim_func(s_tir=True) for a kernel with blocks (blocks are what schedules "
                "work on), or plain loops without T.sblock",
                function=entry.name,
                line=sblock if entry.line else None,
            ) from err
        raise IllFormedModuleError(
            f"not a well-formed PrimFunc: {last_reason(err)}", function=entry.name, line=entry.line
        ) from err
    with native_stderr_silenced():  # TVM's printer warns while it formats the report
        outside = out_of_bounds(entry.func)  # running it could corrupt memory or segfault
    if outside:
        raise IllFormedModuleError(outside[0], function=entry.name, line=outside[1] or entry.line)


def _first_sblock_line(func: tirx.PrimFunc) -> int | None:
    lines: list[int] = []

    def visit(node) -> None:
        span = getattr(node, "span", None)
        if span is not None and span.line > 0:
            lines.append(span.line)

    tvm_ffi.structural_walk(func.body, [((tvm.s_tir.SBlock, tvm.s_tir.SBlockRealize), visit)])
    return min(lines) if lines else None


def _ill_formed_binding_line(ir_mod: tvm.IRModule, name: str) -> int | None:
    """The source line of the first binding of Relax function `name` after which it is ill formed.

    Found by checking the function cut after its first k bindings (a binary search), each cut
    returning its last binding; the bindings keep their parse spans, so the line is a cell line.
    """
    func = ir_mod[name]
    spans = [b.value.span for block in func.body.blocks for b in block.bindings]
    plain = relax.transform.ToNonDataflow()(tvm.IRModule({name: func}))[name]
    bindings = [b for block in plain.body.blocks for b in block.bindings]

    def well_formed_up_to(k: int) -> bool:
        last = bindings[k - 1].var
        body = relax.BlockBuilder().normalize(
            relax.SeqExpr([relax.BindingBlock(bindings[:k])], last)
        )
        cut = relax.Function(plain.params, body, last.ty, plain.is_pure, plain.attrs)
        functions = {gv: cut if gv.name_hint == name else f for gv, f in ir_mod.functions_items()}
        return relax.analysis.check_well_formed(tvm.IRModule(functions, attrs=ir_mod.attrs))

    try:
        low, high = 1, len(bindings)
        if not bindings or well_formed_up_to(high):
            return None
        while low < high:  # the first k with an ill-formed cut
            middle = (low + high) // 2
            low, high = (middle + 1, high) if well_formed_up_to(middle) else (low, middle)
    except Exception:  # a cut TVM cannot even build: no binding to point at
        return None
    span = spans[low - 1] if len(spans) == len(bindings) else None
    return span.line if span is not None and span.line > 0 else None


def _ill_formed_function(ir_mod: tvm.IRModule, entries: Mapping[str, FunctionEntry]):
    for name, entry in entries.items():
        if entry.kind == RELAX:
            alone = sub_module(ir_mod, relax_closure([name], ir_mod))
            if not relax.analysis.check_well_formed(alone):
                return entry
    return None
