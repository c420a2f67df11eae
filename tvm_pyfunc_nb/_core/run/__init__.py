"""Running compiled code: here or on a remote device, with tensors in and out.

- `runner.py`: where compiled code runs (here or remote), chosen once;
- `call_table.py`, `callables.py`, `arguments.py`: the fast callables and their arguments;
- `tensors.py`: torch <-> TVM through DLPack;
- `remote.py`, `rpc_connection.py`: TVM's RPC, bounded and recoverable;
- `trampolines.py`, `py_registry.py`: compiled Relax calling pyfuncs (`R.call_py_func`);
- `call_errors.py`, `guard_sites.py`: what a failed call says;
- `compiled_module.py`: `NAME.module`, TVM's own `BasePyModule`.
"""
