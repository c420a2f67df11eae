"""`R.call_py_func` from compiled Relax code into the live module's current pyfuncs.

TVM's VM looks a pyfunc up by name in one process-global registry. Each call
site of a module's VM calls a name of its own (`prefix.caller.pyfunc.index.
types`), under which a `PyFuncTrampoline` is registered: it calls whatever
the pyfunc is *now* (so editing a pyfunc recompiles nothing), checks what it
returns against the call site's `out_ty`, and converts zero-copy. The name
depends only on the call site, so the same VM module always gets the same
names, and a VM kept from an earlier version still finds its trampolines.
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from collections.abc import Callable, Sequence

import torch
import tvm
import tvm_ffi
from tvm import relax

from ...errors import CallError, PyFuncError, UnknownFunctionError
from ..live.relax_rewrite import rename_dps_packed_calls, rename_py_func_calls
from . import py_registry
from .arguments import TensorSpec, mismatch, spec_from_type
from .call_errors import pending_error
from .tensors import TORCH_DTYPES, to_torch, to_tvm_arg, to_tvm_tensor


class PyFuncBridge:
    """The registry names of one live module's call sites, and the trampolines behind them."""

    def __init__(self, calls, module: str):
        self.calls = calls
        self.module = module
        self.prefix = py_registry.new_prefix(module)
        self.names: dict[str, str] = {}  # registered name of a call site -> the pyfunc it calls
        self.forwarders: set[str] = set()  # global functions standing in for R.call_dps_packed

    def vm_module(self, mod: tvm.IRModule) -> tvm.IRModule:
        """`mod` with every `R.call_py_func` site calling a registered trampoline of its own, and
        every `R.call_dps_packed` one a forwarder that finds the packed function at each call."""
        functions = {}
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                caller = gv.name_hint
                func = rename_dps_packed_calls(
                    func, lambda packed, caller=caller: self._forwarder(caller, packed)
                )
                counter = itertools.count()
                func = rename_py_func_calls(
                    func,
                    lambda py, out_ty, in_ty, caller=gv.name_hint, c=counter: self._register(
                        caller, py, out_ty, in_ty, next(c)
                    ),
                )
            functions[gv] = func
        return tvm.IRModule(functions, attrs=mod.attrs)

    def _register(self, caller: str, pyfunc: str, out_ty: list, in_ty: list, index: int) -> str:
        types = hashlib.sha1(repr((out_ty, in_ty)).encode()).hexdigest()[:8]
        name = f"{self.prefix}.{caller}.{pyfunc}.{index}.{types}"
        if name not in self.names:
            trampoline = PyFuncTrampoline(self.calls, self.module, caller, pyfunc, out_ty, in_ty)
            py_registry.register(name, trampoline.ffi_function())
            self.names[name] = pyfunc
        return name

    def _forwarder(self, caller: str, packed: str) -> str:
        """A global function that calls packed function `packed` as registered *now*.

        The VM resolves the global functions it calls once, when it loads; going through
        this forwarder, a function registered again (or only later) from the notebook is
        the one that runs, with nothing recompiled, and a missing one is an error at the
        call that names both functions.
        """
        name = f"{self.prefix}.packed.{caller}.{packed}"
        if name not in self.forwarders:
            message = (
                f"calls packed function `{packed}` with R.call_dps_packed, "
                "but no global function has that name; register it (e.g. with "
                "tvm.register_global_func) and call again"
            )

            def forward(*args):
                func = tvm_ffi.get_global_func(packed, allow_missing=True)
                if func is None:
                    error = CallError(message, function=caller)
                    pending_error.error = error
                    raise error
                return func(*args)

            tvm_ffi.register_global_func(name, forward, override=True)
            self.forwarders.add(name)
        return name

    def close(self) -> None:
        py_registry.unregister(set(self.names))
        self.names = {}
        for name in self.forwarders:
            tvm_ffi.remove_global_func(name)
        self.forwarders = set()


class PyFuncTrampoline:
    """What `R.call_py_func` really calls: the module's *current* pyfunc, checked against `out_ty`.

    It holds the module's call table weakly, so the registry never keeps a dropped module alive.
    """

    def __init__(
        self, calls, module: str, caller: str, pyfunc: str, out_ty: list, in_ty: Sequence = ()
    ):
        self.calls_ref = weakref.ref(calls)
        self.module, self.caller, self.pyfunc = module, caller, pyfunc
        if len(out_ty) == 1 and isinstance(out_ty[0], relax.TupleType):
            out_ty = list(out_ty[0].fields)
        self.expected = [spec_from_type(f"output {i}", ty) for i, ty in enumerate(out_ty)]
        if len(in_ty) == 1 and isinstance(in_ty[0], relax.TupleType):  # the op's argument tuple
            in_ty = list(in_ty[0].fields)
        # `R.call_py_func("f", (x, y), ...)`, upstream's tutorial's form: the arguments travel as
        # one more tuple, which the pyfunc gets unpacked, as upstream's BasePyModule gives it
        self.unpack = len(in_ty) == 1 and isinstance(in_ty[0], relax.TupleType)
        if self.unpack:
            in_ty = list(in_ty[0].fields)
        self.inputs = [spec_from_type(f"input {i}", ty) for i, ty in enumerate(in_ty)]
        self._quick = _quick_check_of(self.expected)
        self._shared = _shared_sizes(self.inputs, self.expected)

    def ffi_function(self) -> tvm_ffi.Function:
        """This trampoline as TVM calls it: tensors arrive as torch tensors, converted in C (no
        `from_dlpack`). The common case (torch tensors in, one contiguous tensor out as declared)
        runs in one closure, with what it checks bound to its locals."""
        calls_ref, name, unpack, shared, tensor = (
            self.calls_ref,
            self.pyfunc,
            self.unpack,
            self._shared,
            torch.Tensor,
        )
        dtype, ndim, static_sizes = self._quick or (None, -1, ())
        general = self.__call__

        def trampoline(*args):
            calls = calls_ref()
            if calls is None or unpack:
                return general(*args)
            for arg in args:
                if arg.__class__ is not tensor:
                    return general(*args)
            try:
                pyfunc = calls.handles.get(name) or self._pyfunc(calls)
                result = pyfunc(*args)
                if (
                    result.__class__ is tensor
                    and result.dtype is dtype
                    and result.dim() == ndim
                    and result.is_contiguous()
                ):
                    shape = result.shape
                    for axis, size in static_sizes:
                        if shape[axis] != size:
                            break
                    else:
                        for _, axis, i, in_axis in shared:
                            if shape[axis] != args[i].shape[in_axis]:
                                break
                        else:
                            return result  # handed back as it is: no check failed, no copy
                return self._returned(result, args)
            except Exception as err:  # an interrupt crosses TVM as itself (interrupts.py)
                pending_error.error = err
                raise

        return tvm_ffi.convert_func(trampoline, tensor_cls=torch.Tensor)

    def __call__(self, *args):
        """The general path: tuples unpacked, arguments converted, every result checked."""
        calls = self.calls_ref()
        try:
            if calls is None:
                raise CallError(f"the module that defined pyfunc `{self.pyfunc}` was dropped")
            if self.unpack and len(args) == 1:
                args = tuple(args[0])
            args = tuple(a if a.__class__ is torch.Tensor else to_torch(a) for a in args)
            return self._returned(self._pyfunc(calls)(*args), args)
        except Exception as err:
            pending_error.error = err
            raise

    def _returned(self, result, args: Sequence):
        """`result` checked against `out_ty` and converted for TVM."""
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        self._check(outputs, args)
        converted = [to_tvm_tensor(to_tvm_arg(o)) for o in outputs]
        return converted[0] if len(converted) == 1 else converted

    def _pyfunc(self, calls) -> Callable:
        """The current pyfunc; it may not exist yet (a Relax function may name one a later cell
        adds).
        """
        try:
            return calls.handle(self.pyfunc)
        except UnknownFunctionError:
            raise CallError(
                f"calls pyfunc `{self.pyfunc}` through R.call_py_func, but module "
                f"`{self.module}` has no function `{self.pyfunc}` yet; define it in a cell or with "
                "add_python_function, then call again (nothing needs recompiling)",
                function=self.caller,
            ) from None

    def _check(self, outputs: Sequence, args: Sequence) -> None:
        if len(outputs) != len(self.expected):
            raise PyFuncError(
                f"returned {len(outputs)} value(s) but R.call_py_func declares "
                f"{len(self.expected)} in out_ty",
                function=self.pyfunc,
            )
        bindings = {dim: int(args[i].shape[axis]) for i, axis, dim in _symbolic_axes(self.inputs)}
        for spec, out in zip(self.expected, outputs, strict=False):
            problem = mismatch(spec, out, bindings)
            if problem:
                raise PyFuncError(
                    f"returned a value that does not match out_ty: expected {spec}, {problem}",
                    function=self.pyfunc,
                )


def _symbolic_axes(specs: list[TensorSpec]) -> list[tuple[int, int, str]]:
    """`(index, axis, name)` of every symbolic size in `specs`."""
    return [
        (i, axis, d)
        for i, spec in enumerate(specs)
        for axis, d in enumerate(spec.dims or ())
        if isinstance(d, str)
    ]


def _shared_sizes(
    inputs: list[TensorSpec], outputs: list[TensorSpec]
) -> tuple[tuple[int, int, int, int], ...]:
    """`(output, axis, input, input axis)` for each symbolic output size that an input's shape
    determines.
    """
    known = {}
    for i, axis, dim in _symbolic_axes(inputs):
        known.setdefault(dim, (i, axis))
    return tuple((o, axis, *known[dim]) for o, axis, dim in _symbolic_axes(outputs) if dim in known)


def _quick_check_of(expected: list[TensorSpec]) -> tuple[torch.dtype, int, tuple] | None:
    """For one declared tensor output of known dtype and rank: torch dtype, rank, `(axis, size)` of
    each static size (symbolic sizes are not checked, as in `_check`)."""
    if len(expected) != 1 or expected[0].dims is None or expected[0].dtype not in TORCH_DTYPES:
        return None
    spec = expected[0]
    static_sizes = tuple((axis, d) for axis, d in enumerate(spec.dims) if isinstance(d, int))
    return TORCH_DTYPES[spec.dtype], len(spec.dims), static_sizes
