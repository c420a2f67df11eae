"""Finding the fault: builds that crash or change the numbers, found and written down.

- `bisecting.py`, `bisect_repro.py`: `bisect`, the first pass at fault, and its repro;
- `isolation.py`: `--isolate`, imports and compiles in the build worker.
"""
