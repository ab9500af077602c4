# Every target creates the virtual environment on first use; .ci/run calls the same commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?= $(abspath ../shared/data)

$(BIN)/grepvi: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,numpyro,arviz]'
	@touch $@

.PHONY: demo test test-all lint format bench peers
demo: $(BIN)/grepvi  ## the main job on the embedded default data
	$(BIN)/grepvi demo

test: $(BIN)/grepvi  ## the test suite CI runs (slow tier excluded; one worker per core, at most 4)
	GREPVI_DATA_DIR=$(DATA_DIR) $(BIN)/pytest -m "not slow" -q -n auto --maxprocesses=4 --dist loadfile

test-all: $(BIN)/grepvi  ## the fast tier, then the slow tier one file per process (per-test timeout)
	GREPVI_DATA_DIR=$(DATA_DIR) $(BIN)/pytest -m "not slow" -q -n auto --maxprocesses=4 --dist loadfile
	GREPVI_DATA_DIR=$(DATA_DIR) $(BIN)/python scripts/slow_tier.py

lint: $(BIN)/grepvi
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/grepvi
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

peers: $(BIN)/grepvi  ## optional benchmark peers (CPU torch wheel on this machine's disk)
	$(BIN)/pip install -q -e '.[peers]'

bench: $(BIN)/grepvi  ## issue 6's CPU tables (make peers first for Pyro and NumPyro)
	mkdir -p benchmarks/results
	GREPVI_DATA_DIR=$(DATA_DIR) $(BIN)/python -m benchmarks.bench_def_peers --sections def --repeats 10 --csv benchmarks/results/def_cpu.csv
	GREPVI_DATA_DIR=$(DATA_DIR) $(BIN)/python -m benchmarks.bench_def_peers --sections mf --mf-repeats 3 --csv benchmarks/results/mf_cpu.csv
