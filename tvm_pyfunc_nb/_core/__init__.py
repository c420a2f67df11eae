"""The live-module core: contributions, assembly, build, calls. Internal; no IPython, no views."""
