"""JupyterLab and Notebook 7 in headless Chromium, offline, as /work/shared/BROWSER_TESTING.md
describes.

`lab` starts an isolated JupyterLab (its own config, data, runtime and IPython
dirs; news pop-up off) on a free port with a token, serving a temp copy of the
notebooks; `notebook7` does the same with Jupyter Notebook 7. `browser` is
Debian's Chromium through Playwright; every request that does not go to
127.0.0.1 is aborted and recorded, and the test fails if there was any: a test
that needs the internet is a broken test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


@dataclass
class Lab:
    """A running Jupyter server: JupyterLab (`app == "jupyterlab"`) or Notebook 7."""

    url: str
    token: str
    root: Path
    app: str = "jupyterlab"

    def notebook_url(self, notebook: str, workspace: str) -> str:
        """A named workspace per scenario (JupyterLab), so no earlier notebook stays in view;
        Notebook 7 opens each notebook in a page of its own."""
        if self.app == "notebook":
            return f"{self.url}/notebooks/{notebook}?token={self.token}"
        return f"{self.url}/lab/workspaces/{workspace}/tree/{notebook}?token={self.token}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_up(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Jupyter server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"the Jupyter server did not answer {url} within {timeout} s")


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """An isolated JupyterLab serving a copy of `notebooks/`; stopped with SIGTERM at the end."""
    yield from _serve(tmp_path_factory, "jupyterlab")


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory):
    """The same, in Jupyter Notebook 7 (`notebook`, the other front end most users have)."""
    yield from _serve(tmp_path_factory, "notebook")


def _serve(tmp_path_factory, app: str):
    """Jupyter `app` (the module `python -m` runs) on its own dirs, a free port and a token."""
    home = tmp_path_factory.mktemp(app)
    names = ("config", "data", "runtime", "ipython", "workspaces", "root")
    dirs = {name: home / name for name in names}
    for path in dirs.values():
        path.mkdir()
    settings = dirs["config"] / "lab/user-settings/@jupyterlab/apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    shutil.copytree(NOTEBOOKS, dirs["root"], dirs_exist_ok=True)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "IPYTHONDIR": str(dirs["ipython"]),
    }
    port, token = _free_port(), secrets.token_hex(16)
    workspaces = [f"--LabApp.workspaces_dir={dirs['workspaces']}"] if app == "jupyterlab" else []
    log = open(home / f"{app}.log", "wb")  # noqa: SIM115 (open for the server's lifetime, closed below)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            app,
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={dirs['root']}",
            *workspaces,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(f"{url}/api/status?token={token}", process)
        yield Lab(url, token, dirs["root"], app)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
def browser(tmp_path):
    """Chromium on a fresh profile; fails afterwards if anything tried to leave 127.0.0.1."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)  # a loaded machine takes longer than the default 5 s

    assert Path(CHROMIUM).exists(), "Debian's Chromium is missing: run `make browser-deps`"
    blocked: list[str] = []

    def offline(route) -> None:
        url = route.request.url
        if url.startswith(("http://127.0.0.1", "data:", "blob:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        context.route("**/*", offline)
        try:
            yield context
        finally:
            context.close()
    assert not blocked, f"the page tried to reach the internet: {blocked}"
