"""Each tutorial is checked twice by `pytest --nbval`: as it was saved, in a kernel whose modules
compile for this machine's CPU, and again in a kernel whose modules compile for an AVX2 CPU
(`AVX2_TARGET`, set as `$TVM_PYFUNC_NB_TARGET`, the default target of every module).

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


def pytest_collect_file(file_path, parent):
    """The second collection of a tutorial (nbval makes the first), on a CPU that runs AVX2 code
    and whose own vectors are wider (on an AVX2 CPU the first run is the second)."""
    options = parent.config.option
    if file_path.suffix == ".ipynb" and options.nbval and second_run_here(AVX2_TARGET) is None:
        name = f"{file_path.name}[{MCPU}]"
        nodeid = f"{parent.nodeid}/{name}".lstrip("/")
        return OnAnAVX2CPU.from_parent(parent, path=file_path, name=name, nodeid=nodeid)
    return None


class OnAnAVX2CPU(IPyNbFile):
    """A tutorial run in a kernel started with `$TVM_PYFUNC_NB_TARGET` set to `AVX2_TARGET`."""

    def setup(self):
        before = os.environ.get(TARGET_ENV)
        os.environ[TARGET_ENV] = AVX2_TARGET  # what the kernel, started now, inherits
        try:
            super().setup()
        finally:
            if before is None:
                del os.environ[TARGET_ENV]
            else:
                os.environ[TARGET_ENV] = before
        assert self._kernel_default_target() == AVX2_TARGET, "the kernel ignored the variable"
        as_saved = [(re.escape(form), "llvm") for form in (AVX2_TARGET, html.escape(AVX2_TARGET))]
        self.sanitize_patterns = OrderedDict([*as_saved, *self.sanitize_patterns.items()])

    def _kernel_default_target(self) -> str:
        """The default target of a module made in the kernel, as the kernel itself reports it."""
        client = self.kernel.kc
        expression = (
            "__import__('tvm_pyfunc_nb._core.options', fromlist=['ModuleOptions'])"
            ".ModuleOptions().target"
        )
        msg_id = client.execute("", silent=True, user_expressions={"target": expression})
        reply = client.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = client.get_shell_msg(timeout=60)
        found = reply["content"]["user_expressions"]["target"]
        assert found["status"] == "ok", found
        return ast.literal_eval(found["data"]["text/plain"])
