"""Browser tests: JupyterLab in headless Chromium (a package, so its conftest is not `conftest`)."""
