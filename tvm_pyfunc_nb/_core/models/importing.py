"""Functions from outside a cell: `NAME.add(...)` and `NAME.add_torch(model, args)`.

`add` takes what TVM users hold: an `IRModule` (from TVM's PyTorch or ONNX
importers, or another tool), a `PrimFunc`, a Relax `Function`, or a Python
callable; a list of them is one contribution. Constants (weights) travel
inside the functions; module attributes and global infos come along.

Every Relax function added has the known defects of TVM's importers
repaired first (`model_repairs`); the notices say what changed.

`add_torch` exports a `torch.nn.Module` with `torch.export`, decomposes it
as TVM's `from_exported_program` does, and translates it with TVM's own
`ExportedProgramImporter`, whose environment (FX node -> Relax var) gives
each binding of the imported function the FX node it came from, and with it
the user's module and source line (`source_sites`). That map is kept by
binding name, with the exported program, so that `compare` can go op by op,
and every row can say where a binding came from, even after the function was
edited in a cell. Ops the importer has no translation for run as PyTorch
calls (`torch_fallback`): pyfuncs that come in with the function.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import tvm
import tvm_ffi
from torch.utils import _pytree as pytree
from tvm import relax
from tvm.ir import GlobalVar

from ...errors import CallError, ModelImportError, last_reason, native_stderr_silenced
from ..live.cells import PRIMFUNC, PYFUNC, RELAX, FunctionSource
from ..live.contributions import (
    Contribution,
    FunctionEntry,
    is_pyfunc_extern,
    next_run,
    pyfunc_entry,
)
from ..live.pyfunc_loader import CellGlobals, load_pyfunc, register_cell_text, runtime_pyfunc_source
from .dynamic_shapes import bounded_slices, check_known_shapes, data_dependent_ops
from .import_failures import export_failure, stderr_kept_if_it_works, translation_failure
from .input_writes import with_input_writes, written_inputs
from .model_repairs import repair_imported
from .source_sites import SourceSite, site_of
from .torch_fallback import fallbacks, install, pyfunc_externs

ADDABLE = "an IRModule, a PrimFunc, a Relax Function or a Python callable (or a list of them)"


def added_contribution(
    obj: Any,
    *,
    name: str | None,
    module_name: str,
    namespace: Mapping[str, Any],
    origin: str,
    notes: Iterable[str] = (),
) -> Contribution:
    """One contribution of every function `obj` brings, keyed by their names (a re-add replaces);
    `notes` say what was done on the way in."""
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    if name is not None and len(items) != 1:
        raise CallError("add: name= names one function; give a list of named functions instead")
    found: dict[str, tuple[Any, Mapping[str, Callable]]] = {}
    repairs: list[str] = list(notes)
    attrs: dict[str, Any] = {}
    infos: dict[str, Any] = {}
    for item in items:
        if isinstance(item, tvm.IRModule):
            if name is not None:
                raise CallError("add: name= is for one function; an IRModule brings its own names")
            named = [(gv.name_hint, func) for gv, func in item.functions_items()]
            attrs.update({k: v for k, v in (item.attrs or {}).items() if k != "base_py_module"})
            infos.update(dict(item.global_infos))
            pyfuncs = getattr(item, "pyfuncs", None) or {}
        else:
            named, pyfuncs = [(_name_of(item, name), item)], {}
        for fn_name, func in named:
            if fn_name in found:
                raise CallError(
                    f"add: two functions named `{fn_name}` in one add", function=fn_name
                )
            if isinstance(func, relax.Function):
                func, repaired = repair_imported(func, fn_name)
                repairs += repaired
            found[fn_name] = (func, pyfuncs)
    if not found:
        raise CallError(f"add: nothing to add in {type(obj).__name__}")
    key, run = ("add", tuple(sorted(found))), next_run()
    functions = {
        fn_name: _entry(fn_name, func, pyfuncs, key, run, namespace, module_name)
        for fn_name, (func, pyfuncs) in found.items()
    }
    return Contribution(
        key, origin, functions, attrs=attrs, global_infos=infos, reports_rerun=True, notes=repairs
    )


def _name_of(item: Any, name: str | None) -> str:
    if name is not None:
        if not isinstance(name, str) or not name.isidentifier():
            raise CallError(f"add: `{name}` is not a valid function name")
        return name
    if isinstance(item, (tvm.tirx.PrimFunc, relax.Function)):
        symbol = (item.attrs or {}).get("global_symbol") if item.attrs is not None else None
        if symbol is None:
            kind = "PrimFunc" if isinstance(item, tvm.tirx.PrimFunc) else "Relax function"
            raise CallError(f"add: this {kind} has no global symbol; give it one with name=...")
        return str(symbol)
    if callable(item):
        fn_name = getattr(item, "__name__", "")
        if not fn_name.isidentifier():
            raise CallError(
                f"add: this callable has no usable name ({fn_name!r}); give one with name=..."
            )
        return fn_name
    raise CallError(f"add takes {ADDABLE}, not {type(item).__name__}")


def _entry(
    name: str,
    func: Any,
    pyfuncs: Mapping[str, Callable],
    key: object,
    run: int,
    namespace: Mapping[str, Any],
    module_name: str,
) -> FunctionEntry:
    if not name.isidentifier():
        raise CallError(f"add: `{name}` is not a valid function name", function=name)
    for kind, of_kind in ((PRIMFUNC, tvm.tirx.PrimFunc), (RELAX, relax.Function)):
        if isinstance(func, of_kind):
            if kind == RELAX:  # its own variables: the same function may be added twice
                func = relax.utils.copy_with_new_vars(func)
            func = func.with_attr("global_symbol", name)
            source = FunctionSource(name, kind, "", 0)
            return FunctionEntry(source, key, "", typed_global_var(name, func), func, run=run)
    if is_pyfunc_extern(func):
        return _pyfunc_from_module(name, func, pyfuncs.get(name), key, run, namespace, module_name)
    if isinstance(func, relax.ExternFunc):
        raise CallError(
            f"add: `{name}` is an external function ({func.global_symbol}); only "
            "pyfuncs, PrimFuncs and Relax functions can be added",
            function=name,
        )
    if callable(func):
        source = FunctionSource(name, PYFUNC, runtime_pyfunc_source(name, func), 0)
        return pyfunc_entry(source, key, "", func, run)
    raise CallError(f"add takes {ADDABLE}, not {type(func).__name__}", function=name)


def typed_global_var(name: str, func) -> GlobalVar:
    """A `GlobalVar` that carries `func`'s type, as the parser's do: calls to it then check."""
    return relax.BlockBuilder().add_func(func, name)


def _pyfunc_from_module(
    name: str,
    extern,
    func: Callable | None,
    key: object,
    run: int,
    namespace: Mapping[str, Any],
    module_name: str,
) -> FunctionEntry:
    """A pyfunc of an `@I.ir_module` IRModule: the function the module kept, else its source's."""
    text = str(extern.attrs["python_source"])
    source = FunctionSource(name, PYFUNC, text, 0)
    if func is None:
        filename = f"<tvmmodule {module_name} added {name} {run}>"
        register_cell_text(filename, f"# {name}, added to {module_name}", text)
        func = load_pyfunc(FunctionSource(name, PYFUNC, text, 2), filename, CellGlobals(namespace))
    return pyfunc_entry(source, key, "", func, run)


# -- PyTorch ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeRef:
    """The FX node a binding came from: its name, its op, whether the binding *is* its value,
    and where in the user's code the node was made."""

    node: str
    op: str
    exact: bool  # False: one of several bindings a node became (e.g. the matmul inside addmm)
    aliases: tuple[str, ...] = ()  # later nodes the importer gave the same value (a getitem)
    site: SourceSite | None = None  # the nn.Module and the line (None: torch.export made it)


@dataclass
class TorchOrigin:
    """What `compare` needs to go op by op: the model, its exported graph, binding -> FX node."""

    model: Callable  # what runs the model: the `nn.Module`, or an ExportedProgram's `.module()`
    exported: Any  # torch.export.ExportedProgram, decomposed as the importer translated it
    bindings: dict[str, NodeRef] = field(default_factory=dict)
    constant_names: dict[Any, str] = field(default_factory=dict)  # constant -> parameter name
    brought: Any = None  # what add_torch was given, where that is not `model` (ExportedProgram)

    def site(self, binding: str) -> SourceSite | None:
        """Where binding `binding` came from in the model's code (None: nowhere known)."""
        node = self.bindings.get(binding)
        return node.site if node is not None else None

    def is_from(self, reference: Any) -> bool:
        """Whether `reference` is the model this function was imported from."""
        return reference is self.model or (self.brought is not None and reference is self.brought)

    def fx_values(self, args: Iterable[Any]) -> tuple[dict[str, Any], Any]:
        """Every FX node's value (by node name) for one run on `args`, with the model's weights
        as they are now, and the graph's outputs."""
        values: dict[str, Any] = {}

        class Recorder(torch.fx.Interpreter):
            def run_node(self, node):
                out = super().run_node(node)
                values[node.name] = out
                return out

        with torch.no_grad():
            outputs = Recorder(self.exported.graph_module).run(*self._graph_inputs(args))
        return values, outputs

    def binding_values(self, args: Iterable[Any]) -> dict[str, torch.Tensor]:
        """Each binding's value in the PyTorch model (one run on `args`), where it has one of
        its own: its FX node's, or a later node's the importer gave the same value (the
        `getitem` of a tuple op)."""
        values, _ = self.fx_values(args)
        found = {}
        for binding, node in self.bindings.items():
            if node.exact:
                for name in (node.node, *node.aliases):
                    if isinstance(values.get(name), torch.Tensor):
                        found[binding] = values[name]
                        break
        return found

    def outputs_in_float64(self, args: Iterable[Any]) -> Any:
        """The model's outputs (as the model returns them) computed in float64 from the same
        inputs and weights: how far PyTorch's own float32 outputs are from these is the
        rounding a whole chain of ops carries."""

        def wider(value):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value.to(torch.float64)
            return value

        class InFloat64(torch.fx.Interpreter):
            def run_node(self, node):
                if str(node.target).startswith("aten._assert"):  # "a float32 tensor here"
                    return None
                return pytree.tree_map(wider, super().run_node(node))

        with torch.no_grad():
            flat = InFloat64(self.exported.graph_module).run(
                *[wider(v) for v in self._graph_inputs(args)]
            )
        return pytree.tree_unflatten(self._user_outputs(flat), self.exported.call_spec.out_spec)

    def _user_outputs(self, flat: Iterable[Any]) -> list[Any]:
        """The graph's outputs that the model returns (not the inputs it writes into)."""
        from torch.export.graph_signature import OutputKind

        specs = self.exported.graph_signature.output_specs
        return [v for v, s in zip(flat, specs, strict=True) if s.kind == OutputKind.USER_OUTPUT]

    def _graph_inputs(self, args: Iterable[Any]) -> list[Any]:
        """The exported graph's inputs for a call on `args`: the model's weights as they are
        now (a model that trains on, or edited weights, is what compare sees), its constants,
        and `args`."""
        from torch.export.graph_signature import InputKind

        exported, user = self.exported, iter(args)
        weights = dict(self.model.named_parameters(remove_duplicate=False))
        weights.update(self.model.named_buffers(remove_duplicate=False))
        flat = []
        for spec in exported.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                flat.append(next(user))
            elif spec.target in weights:
                flat.append(weights[spec.target])
            elif spec.target in exported.state_dict:
                flat.append(exported.state_dict[spec.target])
            else:
                flat.append(exported.constants[spec.target])
        return [t.detach() if isinstance(t, torch.Tensor) else t for t in flat]


@dataclass
class ImportedModel:
    """What `add_torch` brings: the function (and the pyfuncs running what TVM cannot
    translate), where each binding came from, and what was done on the way in."""

    functions: tvm.IRModule
    origin: TorchOrigin
    notes: list[str]


def import_torch(
    model: Any,
    example_args: Any,
    *,
    name: str,
    dynamic_shapes: Any = None,
    custom_convert_map: dict | None = None,
    translate_first: Callable | None = None,
) -> ImportedModel:
    """`model` (a `torch.nn.Module`, or the `ExportedProgram` that `torch.export.load` gives
    back) as one Relax function named `name` (weights as constants), the pyfuncs that run
    the ops TVM's importer lacks, and where each binding came from. `custom_convert_map` is
    TVM's own (`{op name: converter(node, importer)}`). `translate_first(exported, name,
    model name, custom_convert_map)` translates the exported program before this process does
    (the build worker, with --isolate: a crash there is the import's error)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise CallError(f"add_torch: `{name}` is not a valid function name")
    exported = _exported(model, example_args, dynamic_shapes)
    # TVM's importer takes weights through DLPack, sharing their memory: with copies, training
    # the model on (or editing its weights) never silently changes what the module computes
    for key, value in list(exported.state_dict.items()):
        exported.state_dict[key] = value.detach().clone()
    if translate_first is not None:
        translate_first(exported, name, type(model).__name__, custom_convert_map)
    try:
        importer, mod, found = translate(exported, name, type(model).__name__, custom_convert_map)
    except ModelImportError:  # an op that cannot come in even as a PyTorch call: said already
        raise
    except TranslationFailed as failed:
        raise translation_failure(model, failed.error, exported, failed.env) from failed.error
    translated = importer.env
    made = _named_after(mod, name)
    func = made.pop(name)
    check_known_shapes(func, exported, type(model).__name__)
    before_binding_params = importer.block_builder.get()["main"]
    bindings = _binding_nodes(func, translated.first)
    func = with_input_writes(func, written_inputs(exported, translated))
    is_program = isinstance(model, torch.export.ExportedProgram)
    origin = TorchOrigin(
        model.module() if is_program else model,
        exported,
        bindings,
        _constant_names(before_binding_params, func, exported),
        brought=model if is_program else None,
    )
    functions = tvm.IRModule({name: func, **made, **pyfunc_externs(found)})
    return ImportedModel(functions, origin, found.notices(name))


class TranslationFailed(Exception):
    """TVM's importer raised `error` where no PyTorch call can stand in; `env` is what it
    translated before (FX node -> Relax value)."""

    def __init__(self, error: Exception, env: Mapping):
        super().__init__(str(error))
        self.error, self.env = error, env


def translate(exported, name: str, model_name: str, custom_convert_map=None):
    """TVM's `ExportedProgramImporter` on `exported`, as `import_torch` runs it: bounded slices,
    the data-dependent ops it lacks, the user's converters, and as PyTorch calls the ops it
    cannot translate or translates wrong. A node one of TVM's own converters fails on runs as a
    PyTorch call too: the translation starts again with it among them. Returns the importer,
    the module and those calls (`Fallbacks`); raises `TranslationFailed` (or a
    `ModelImportError` for a call that cannot be made)."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    refused: dict[str, str] = {}  # node name -> what TVM's converter raised
    failure = None  # what it raised last, and what it had translated then
    while True:
        importer = ExportedProgramImporter()
        importer.env = _Translated()
        for op, convert in bounded_slices(exported).items():
            importer.convert_map[op] = functools.partial(convert, importer=importer)
        for op, convert in data_dependent_ops().items():  # unless TVM translates them itself
            importer.convert_map.setdefault(op, functools.partial(convert, importer=importer))
        if custom_convert_map:
            importer.update_convert_map(custom_convert_map)
        try:
            found = fallbacks(exported, importer.convert_map, name, model_name, refused)
        except ModelImportError:
            if failure is None:
                raise
            raise TranslationFailed(*failure) from failure[0]  # no call can stand in: TVM's word
        install(importer, found)
        converting = _watched(importer)
        try:
            mod = importer.from_exported_program(exported, False, True, False, custom_convert_map)
            return importer, mod, found
        except ModelImportError:
            raise
        except Exception as err:  # TVM's converters raise any type on a node they cannot take
            node = converting.get("node")
            own = custom_convert_map or {}
            if node is None or node.name in refused or node.target.__name__ in own:
                raise TranslationFailed(err, importer.env) from err
            refused[node.name] = last_reason(err)
            failure = (err, importer.env)


def _watched(importer) -> dict:
    """`{"node": the FX node a converter of `importer` is translating}`, kept up to date (left
    set when the converter raises)."""
    current: dict = {}

    def watch(convert):
        def converting(node, *rest):
            current["node"] = node
            value = convert(node, *rest)
            current.pop("node", None)
            return value

        return converting

    for op, convert in list(importer.convert_map.items()):
        importer.convert_map[op] = watch(convert)
    return current


def _named_after(mod: tvm.IRModule, name: str) -> dict[str, relax.Function]:
    """The importer's functions by the names they take in the live module: `main` as `name`,
    the others it made (the branches of a `torch.cond`) as `<name>_<theirs>`, so that two
    models' never clash; the calls between them follow."""
    renamed = {
        gv.name_hint: name if gv.name_hint == "main" else f"{name}_{gv.name_hint}"
        for gv in mod.get_global_vars()
    }
    if len(renamed) == 1:
        return {name: mod["main"].with_attr("global_symbol", name)}
    typed = {new: typed_global_var(new, mod[old]) for old, new in renamed.items()}

    def call(gv, _mutator):
        return typed.get(renamed.get(gv.name_hint, ""), gv)

    return {
        new: tvm_ffi.structural_mutate(mod[old], [(GlobalVar, call)]).with_attr(
            "global_symbol", new
        )
        for old, new in renamed.items()
    }


def _exported(model: Any, example_args: Any, dynamic_shapes: Any):
    """`model` exported by `torch.export` (as it is, for an `ExportedProgram`), decomposed as
    TVM's `from_exported_program` does."""
    is_program = isinstance(model, torch.export.ExportedProgram)
    if not is_program and not isinstance(model, torch.nn.Module):
        raise CallError(
            "add_torch needs a torch.nn.Module or a torch.export.ExportedProgram, "
            f"got {type(model).__name__}"
        )
    if is_program and dynamic_shapes is not None:
        raise CallError(
            "add_torch: an ExportedProgram keeps the dynamic shapes it was exported with; "
            "dynamic_shapes= is for a torch.nn.Module"
        )
    if not is_program and example_args is None:
        raise CallError("add_torch needs example arguments for a torch.nn.Module: (x, ...)")
    try:
        with (
            torch.no_grad(),
            warnings.catch_warnings(),
            stderr_kept_if_it_works(),
            native_stderr_silenced(),  # a failed parse's IR builder collected meanwhile says so
            _torch_export_log_quiet(),
        ):
            # torch 2.13's own deprecation inside torch.export: nothing a user can act on
            warnings.simplefilter("ignore", FutureWarning)
            program = model
            if not is_program:
                args = example_args if isinstance(example_args, (tuple, list)) else (example_args,)
                program = torch.export.export(model, tuple(args), dynamic_shapes=dynamic_shapes)
            return program.run_decompositions()  # as from_exported_program does
    except Exception as err:  # torch raises many types for a model it cannot export
        raise export_failure(model, err) from err


class _Translated(dict):
    """The importer's environment (FX node -> Relax value), remembering each node's value as
    its own translation gave it: an in-place write (`h[:, 0] = 0`, a `copy_`) later makes the
    node it writes into stand for the written value, which is what the write computes, not
    what that node did."""

    def __init__(self):
        super().__init__()
        self.first: dict[Any, Any] = {}

    def __setitem__(self, node, value) -> None:
        if value is not None:
            self.first.setdefault(node, value)
        super().__setitem__(node, value)


def _bindings(func: relax.Function) -> list:
    return [b for block in func.body.blocks for b in block.bindings]


def _binding_nodes(func: relax.Function, env: Mapping[Any, Any]) -> dict[str, NodeRef]:
    """Binding name -> the FX node it came from.

    The importer emits bindings in FX order and records, for each node, the
    last var it emitted: every binding up to and including that var, not yet
    claimed, belongs to the node. Bindings after the last node's (the output
    tuple) belong to none and are left out: never guessed. A node whose value is memory never
    written (`torch.empty`) has no value to compare with: its binding is not its value.
    """
    nodes_of: dict[Any, list] = {}  # var -> the nodes whose value it is, in FX order
    for node, value in env.items():
        if isinstance(value, relax.Var):
            nodes_of.setdefault(value, []).append(node)
    found: dict[str, NodeRef] = {}
    pending: list[Any] = []
    for binding in _bindings(func):
        pending.append(binding.var)
        nodes = nodes_of.get(binding.var)
        if nodes:
            first, aliases = nodes[0], tuple(n.name for n in nodes[1:])
            site = site_of(first)
            for var in pending:
                exact = var.same_as(binding.var) and not _unwritten(first)
                found[var.name] = NodeRef(
                    first.name, str(first.target), exact, aliases if exact else (), site
                )
            pending = []
    return found


# ATen ops whose value is memory they never write (what PyTorch holds there is any bytes), and
# ops whose value is (a part of) some of their inputs', by position: views, copies, part writes
_UNWRITTEN = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty"})
_VIEWS = ("slice", "select", "view", "reshape", "permute", "transpose", "expand", "alias")
_CARRIED = {
    **dict.fromkeys((*_VIEWS, "squeeze", "unsqueeze", "clone", "narrow", "_unsafe_view"), (0,)),
    "copy": (1,),
    "slice_scatter": (0, 1),
    "select_scatter": (0, 1),
}


def _unwritten(node) -> bool:
    """Whether `node`'s value holds memory never written: an `empty`, or a view, copy or part
    write of such a value (a circular pad writes its border in pieces, from itself)."""
    op = str(getattr(node.target, "__name__", "")).split(".")[0]
    if op in _UNWRITTEN:
        return True
    return any(
        isinstance(node.args[i], torch.fx.Node) and _unwritten(node.args[i])
        for i in _CARRIED.get(op, ())
        if i < len(node.args)
    )


def _constant_names(before: relax.Function, after: relax.Function, exported) -> dict[Any, str]:
    """Each constant -> the model parameter it holds (`fc1.weight` as `fc1_weight`, a name
    Python can read: `0.weight` as `p0_weight`)."""
    targets = {
        spec.arg.name: spec.target
        for spec in exported.graph_signature.input_specs
        if getattr(spec.arg, "name", None) and spec.target
    }
    names: dict[Any, str] = {}  # TVM objects hash and compare by identity of what they wrap

    def walk(a, b) -> None:
        if isinstance(a, relax.Var) and isinstance(b, tvm.ir.Constant):
            target = targets.get(a.name, a.name)
            name = re.sub(r"\W", "_", target)  # `0.weight` of an nn.Sequential: `p0_weight`
            names.setdefault(b, name if name.isidentifier() else f"p{name}")
        elif isinstance(a, relax.Call) and isinstance(b, relax.Call):
            for x, y in zip(a.args, b.args, strict=False):
                walk(x, y)
        elif isinstance(a, relax.Tuple) and isinstance(b, relax.Tuple):
            for x, y in zip(a.fields, b.fields, strict=False):
                walk(x, y)

    for x, y in zip(_bindings(before), _bindings(after), strict=False):
        walk(x.value, y.value)
    return names


def runnable(reference: Any) -> Any:
    """What runs `reference`: itself, or an ExportedProgram's `.module()` (an ExportedProgram
    cannot be called)."""
    if isinstance(reference, torch.export.ExportedProgram):
        return reference.module()
    return reference


def binding_site(origins: Mapping[str, TorchOrigin], function: str, binding: str):
    """Where `binding` of `function` came from in the PyTorch model it was imported from (a
    `SourceSite`), if it was."""
    origin = origins.get(function)
    return origin.site(binding) if origin is not None else None


def constant_names(origins) -> dict:
    """The weights' names as the importer knew them (`fc1_weight`), by constant, of models
    imported (`TorchOrigin`s)."""
    return {c: n for o in origins for c, n in o.constant_names.items()}


@contextlib.contextmanager
def _torch_export_log_quiet():
    """torch.export logs a warning of its own before it raises for a data-dependent branch
    ("Unable to find user code..."), straight to the notebook's stderr: the error it raises
    says it better, with the user's line."""
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
