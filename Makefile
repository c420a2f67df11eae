# Every target sets itself up: a venv in .venv with pinned installs (CPU torch first).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-10)
PORT   ?= 8888

.PHONY: install lab run-notebooks notebooks lint test bench models ops verdicts browser-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## JupyterLab on the tutorials (no browser is opened; the URL is printed)
lab: install
	$(BIN)/jupyter lab --no-browser --allow-root --ServerApp.port=$(PORT) --ServerApp.root_dir=notebooks

## The tutorials run headless, start to finish, in a real kernel
run-notebooks: install
	$(BIN)/jupyter execute notebooks/*.ipynb

## Run the tutorials again and save them with their outputs (do this after changing the package or a tutorial)
notebooks: install
	$(BIN)/python notebooks/save_outputs.py

## Debian's Chromium for the browser tests (never a downloaded browser)
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

## ruff's lint and format checks over the package, tests and benchmarks
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## Every test: lint, unit and IPython-shell, kernel, notebooks (nbval), Binder check, browser.
## One worker per core; a test file or a notebook stays on one worker (its cells share a kernel,
## its module fixtures are made once), the longest first (tests/conftest.py orders them, and
## --no-loadscope-reorder keeps that order), and the 15 slowest tests are listed at the end.
test: lint browser-deps
	$(BIN)/python -m pytest -n auto --dist loadscope --no-loadscope-reorder --durations=15 \
	  tests notebooks --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

bench: install
	$(BIN)/python benchmarks/run.py

## Every model of the corpus (tests/real_models.py) through each step a user takes: a table of
## model x step (import, call, compare, trace, edit, export, profile), in benchmarks/MODELS.md.
## MODELS="bert swin" for some of them; OPTIONS="--offload torch" under other options.
models: install
	$(BIN)/python benchmarks/models_report.py $(MODELS) $(if $(OPTIONS),--options "$(OPTIONS)")

## Every op of TVM's PyTorch importer (its convert map: tests/op_corpus.py has a model for each)
## through plain TVM and through a live module, against PyTorch, for this CPU and for x86-64-v3:
## a table per op in benchmarks/OPS.md. Tens of minutes: JOBS worker processes (2) at nice 10.
## CASES="cosh pad_circular" runs some of them again, updating build/ops.json (the results);
## `python benchmarks/ops_report.py --from-json build/ops.json` then writes the table again.
ops: install
	mkdir -p build
	nice -n 10 $(BIN)/python benchmarks/ops_report.py $(CASES) --jobs $(or $(JOBS),2) --json build/ops.json

## compare's verdicts on the whole corpus (tests/test_verdicts.py; make test runs a fast slice):
## every model of the test zoo, ResNet-18 and a deep conv/BN chain, on this CPU and compiled for
## an AVX2 CPU, with and without --offload torch, flag nothing; an error of one part in a
## thousand planted in one op of ResNet, BERT and GPT-2 is flagged at that op. About 14 minutes
## on two busy cores.
verdicts: install
	TVM_PYFUNC_NB_VERDICTS=1 $(BIN)/python -m pytest -n auto tests/test_verdicts.py

clean:
	rm -rf $(VENV) build .pytest_cache
