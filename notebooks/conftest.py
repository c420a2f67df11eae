"""Each tutorial is checked twice by `pytest --nbval`: as it was saved, in a kernel whose modules
compile for this machine's CPU, and again in a kernel as on an AVX2 CPU: its modules compile for
`AVX2_TARGET` (set as `$TVM_PYFUNC_NB_TARGET`, the default target of every module), and PyTorch
runs its AVX2 kernels. On an AVX-512 machine, what an AVX2 one would show shows here.

A kernel takes its environment when it starts, so the second run is a second collection of the
same notebook (`notebooks/NN_name.ipynb[x86-64-v3]`), whose kernel starts with the variable set:
one pytest run, and the two kernels of a notebook may run on two workers at once. Its outputs
must be the saved ones, the target's name aside: what a module prints as its target is compared
as `llvm`. What differs by CPU must never reach an output (see nbval_sanitize.cfg).
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
from collections import OrderedDict

from nbval.plugin import IPyNbFile

from tvm_pyfunc_nb._core.options import TARGET_ENV
from tvm_pyfunc_nb.testing import AVX2_TARGET, second_run_here

MCPU = json.loads(AVX2_TARGET)["mcpu"]
OPTIONS = "tvm_pyfunc_nb._core.options"  # where the kernel's default target is


def pytest_collect_file(file_path, parent):
    """The second collection of a tutorial (nbval makes the first), on a CPU that runs AVX2 code
    and whose own vectors are wider (on an AVX2 CPU the first run is the second)."""
    options = parent.config.option
    if (
        file_path.suffix == ".ipynb"
        and file_path.name[:2] in RUN_TWICE
        and options.nbval
        and second_run_here(AVX2_TARGET) is None
    ):
        name = f"{file_path.name}[{MCPU}]"
        nodeid = f"{parent.nodeid}/{name}".lstrip("/")
        return OnAnAVX2CPU.from_parent(parent, path=file_path, name=name, nodeid=nodeid)
    return None


# The tutorials whose outputs hang on what the CPU's vectors do: kernels with checks vectorized
# (01, 04), models imported and compared op by op and kernel by kernel (07, 10, 12). The others
# compile the same few small kernels and show verdicts. 08 (schedules, generated code) is left
# out for time alone: at 45 s its second run would take `make test` past its 12 minutes; on an
# AVX2 machine its one run is the AVX2 check.
RUN_TWICE = {"01", "04", "07", "10", "12"}


# What the kernel's environment says: its modules compile for AVX2, and PyTorch, whose numbers
# the tutorials compare with, runs its own AVX2 kernels (ATen's, oneDNN's, MKL's) too.
AVX2_ENVIRONMENT = {
    TARGET_ENV: AVX2_TARGET,
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


class OnAnAVX2CPU(IPyNbFile):
    """A tutorial run in a kernel started as on an AVX2 CPU (`AVX2_ENVIRONMENT`)."""

    def setup(self):
        before = {name: os.environ.get(name) for name in AVX2_ENVIRONMENT}
        os.environ.update(AVX2_ENVIRONMENT)  # what the kernel, started now, inherits
        try:
            super().setup()
        finally:
            for name, value in before.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value
        seen = self._in_kernel(
            target=f"__import__({OPTIONS!r}, fromlist=['x']).ModuleOptions().target",
            torch="__import__('torch').backends.cpu.get_cpu_capability()",
        )
        assert seen == {"target": AVX2_TARGET, "torch": "AVX2"}, f"the kernel runs as {seen}"
        as_saved = [(re.escape(form), "llvm") for form in (AVX2_TARGET, html.escape(AVX2_TARGET))]
        self.sanitize_patterns = OrderedDict([*as_saved, *self.sanitize_patterns.items()])

    def _in_kernel(self, **expressions: str) -> dict:
        """The values of `expressions` in the kernel (its default target, PyTorch's kernels), as
        the kernel itself reports them."""
        client = self.kernel.kc
        msg_id = client.execute("", silent=True, user_expressions=expressions)
        reply = client.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = client.get_shell_msg(timeout=60)
        found = reply["content"]["user_expressions"]
        assert all(value["status"] == "ok" for value in found.values()), found
        return {name: ast.literal_eval(found[name]["data"]["text/plain"]) for name in found}
