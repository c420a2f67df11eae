"""Finding the fault: builds that crash or change the numbers, found, cut down and written down.

- `bisecting.py`, `bisect_repro.py`: `bisect`, the first pass at fault, and its repro;
- `minimizing.py`: `minimize`, the fewest bindings that still show the fault: `cutting.py`
  (a cut of a function), `reference_run.py` (the values entering it), `cut_judging.py` (does
  it still show the fault), `shrinking.py` (the search), `minimize_repro.py` (its repro);
- `repro_files.py`: what every repro file shares;
- `reporting.py`, `report_page.py`: `report`, everything in one HTML file;
- `isolation.py`: `--isolate`, imports and compiles in the build worker.
"""
