# The two quickstart commands (README): `make demo` and `make test`.
# Both create .venv with the Python 3.11 on PATH and install into it.
PYTHON ?= python3.11
VENV   := .venv
PIP    := $(VENV)/bin/pip
# The CPU build of PyTorch; an unpinned `torch` would pull the CUDA build (gigabytes).
TORCH  := torch==2.13.0

.PHONY: demo test lint bench graphs clean

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 2; }
	$(PYTHON) -m venv $(VENV)

# The demo serves a model for real (step 10): PyTorch (CPU build, pinned) and the serving extras.
$(VENV)/.demo-installed: $(VENV)/bin/python pyproject.toml
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e ".[torch,serve]"
	touch $@

$(VENV)/.test-installed: $(VENV)/bin/python pyproject.toml
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e ".[torch,test]"
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(VENV)/bin/hetserve demo --out demo-out

test: $(VENV)/.test-installed
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadgroup

bench: $(VENV)/.test-installed
	$(VENV)/bin/python benchmarks/bench_workload.py
	$(VENV)/bin/python benchmarks/bench_sim.py
	$(VENV)/bin/python benchmarks/bench_planner.py
	$(VENV)/bin/python benchmarks/bench_reservation.py
	$(VENV)/bin/python benchmarks/bench_serving.py overhead frontend
	$(VENV)/bin/python benchmarks/bench_deepplan.py
	$(VENV)/bin/python benchmarks/bench_magicbatch.py
	$(VENV)/bin/python benchmarks/bench_rampa.py

# Re-export the model graphs shipped as package data (needs torch).
graphs: $(VENV)/.test-installed
	$(VENV)/bin/hetserve zoo export --out src/hetserve/data/graphs
	$(VENV)/bin/hetserve zoo layers --out src/hetserve/data/layers

clean:
	rm -rf $(VENV) demo-out .pytest_cache .ruff_cache
