# The two quickstart commands (README): `make demo` and `make test`.
# Both create .venv with the Python 3.11 on PATH and install into it.
PYTHON ?= python3.11
VENV   := .venv
PIP    := $(VENV)/bin/pip
# The CPU build of PyTorch; an unpinned `torch` would pull the CUDA build (gigabytes).
TORCH  := torch==2.13.0
# The compiled part (setup.py): installing again rebuilds it when its source changes.
CORE   := src/hetserve/core/heaps_core.py src/hetserve/core/heaps_core_c.pxd \
          src/hetserve/core/timeline_core.py src/hetserve/core/timeline_core_c.pxd \
          src/hetserve/engine/deadlines_core.py src/hetserve/engine/deadlines_core_c.pxd \
          src/hetserve/engine/entities_core.py src/hetserve/engine/entities_core_c.pxd \
          src/hetserve/engine/kernel_core.py src/hetserve/engine/kernel_core_c.pxd \
          src/hetserve/engine/modelled_core.py src/hetserve/engine/modelled_core_c.pxd \
          src/hetserve/scheduling/policy_core.py src/hetserve/scheduling/policy_core_c.pxd \
          src/hetserve/scheduling/coldstart_core.py src/hetserve/scheduling/coldstart_core_c.pxd \
          src/hetserve/scheduling/flex_core.py src/hetserve/scheduling/flex_core_c.pxd \
          src/hetserve/scheduling/edf_adaptive_core.py \
          src/hetserve/scheduling/edf_adaptive_core_c.pxd \
          src/hetserve/scheduling/fixed_batch_core.py \
          src/hetserve/scheduling/fixed_batch_core_c.pxd \
          src/hetserve/scheduling/reservation_core.py src/hetserve/scheduling/reservation_core_c.pxd \
          src/hetserve/scheduling/reservation_slots.py src/hetserve/scheduling/reservation_slots_c.pxd \
          src/hetserve/sim/recorder_core.py src/hetserve/sim/recorder_core_c.pxd \
          src/hetserve/sim/csv_cells.pyx setup.py
# Exact versions of everything installed (pip -c): the suite and the shipped results were
# made with them. `make lock` regenerates the file from pyproject's ranges.
CONSTRAINTS := constraints.txt
# Held by `make lock`: HiGHS decides among equal optima and its node counts, so the shipped
# results (docs/results) depend on its version; bump it only with those results re-run.
LOCK_PINS   := highspy==1.15.1

.PHONY: demo test lint bench bench-sim graphs clean lock

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 2; }
	$(PYTHON) -m venv $(VENV)

# The demo serves a model for real (step 10): PyTorch (CPU build, pinned) and the serving extras,
# and transformers, so that the Hugging Face folder a newcomer serves next just works.
$(VENV)/.demo-installed: $(VENV)/bin/python pyproject.toml $(CONSTRAINTS) $(CORE)
	$(PIP) install --quiet -c $(CONSTRAINTS) $(TORCH)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[torch,serve,transformers]"
	touch $@

$(VENV)/.test-installed: $(VENV)/bin/python pyproject.toml $(CONSTRAINTS) $(CORE)
	$(PIP) install --quiet -c $(CONSTRAINTS) $(TORCH)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[torch,test]"
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
	$(VENV)/bin/python benchmarks/sim_scaling.py
	$(VENV)/bin/python benchmarks/scaling_control.py
	$(VENV)/bin/python benchmarks/bench_planner.py
	$(VENV)/bin/python benchmarks/bench_reservation.py
	$(VENV)/bin/python benchmarks/bench_serving.py overhead frontend
	$(VENV)/bin/python benchmarks/bench_deepplan.py
	$(VENV)/bin/python benchmarks/bench_magicbatch.py
	$(VENV)/bin/python benchmarks/bench_rampa.py
	$(VENV)/bin/python benchmarks/bench_cluster.py
	$(VENV)/bin/python benchmarks/bench_repository.py
	$(VENV)/bin/python benchmarks/bench_control.py
	$(VENV)/bin/python benchmarks/bench_replan.py
	$(VENV)/bin/python benchmarks/bench_switch_live.py
	$(VENV)/bin/python benchmarks/bench_switch_ray.py
	$(VENV)/bin/python benchmarks/bench_loadtool.py
	$(VENV)/bin/python benchmarks/ray_path.py
	$(MAKE) bench-sim

# Issue 41's simulator benchmarks, side by side with the code before it (SIM_BASE, checked
# out and built into a temporary worktree) in one sitting: speed on the DeepPlan run and
# the whole studies, and with PPIPE=CHECKOUT (a local copy of github.com/JonnyKong/PPipe:
# nothing is downloaded) the PPipe and NP plans, a 30-second point phase by phase and the
# Python-policy boundary; instructions per request where valgrind is installed.
SIM_BASE ?= a002e38
comma := ,
bench-sim: $(VENV)/.test-installed
	$(VENV)/bin/python benchmarks/against_base.py speed studies --base $(SIM_BASE) --build-base \
	  --only DeepPlan,issue41 $(if $(PPIPE),--ppipe $(PPIPE))
	$(VENV)/bin/python benchmarks/sim_scaling.py --gpus 10,100,1000 --bases resnet18 \
	  --requests 200000 --paired 10 --controls heap,calendar
	$(if $(PPIPE),$(VENV)/bin/python benchmarks/sim_point.py --ppipe $(PPIPE))
	$(if $(PPIPE),$(VENV)/bin/python benchmarks/policy_boundary.py $(PPIPE))
	$(if $(shell command -v valgrind),$(VENV)/bin/python benchmarks/sim_instructions.py x \
	  --planner deepplan --seconds 60$(comma)120)
	$(if $(and $(PPIPE),$(shell command -v valgrind)),$(VENV)/bin/python \
	  benchmarks/sim_instructions.py $(PPIPE) --seconds 1$(comma)4)

# Re-export the model graphs shipped as package data (needs torch).
graphs: $(VENV)/.test-installed
	$(VENV)/bin/hetserve zoo export --out src/hetserve/data/graphs
	$(VENV)/bin/hetserve zoo layers --out src/hetserve/data/layers

# Regenerate constraints.txt: a throwaway virtualenv resolves pyproject's ranges afresh
# (every extra), holding LOCK_PINS, and its `pip freeze` becomes the file. Run the suite
# (and re-run the studies if a solver moved) before committing the result.
lock:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 2; }
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet $(TORCH)
	printf '%s\n' $(LOCK_PINS) > .lock-venv/pins.txt
	.lock-venv/bin/pip install --quiet -c .lock-venv/pins.txt ".[all]"
	{ printf '%s\n' \
	  "# Exact versions that make demo, make test and CI install (pip -c constraints.txt)." \
	  "# The suite and the shipped results (docs/results) were made with these; pyproject.toml" \
	  "# keeps its ranges for people who embed hetserve. Regenerate with 'make lock' (README," \
	  "# \"Dependencies\"): it resolves pyproject's ranges afresh, holding LOCK_PINS (Makefile)."; \
	  .lock-venv/bin/pip freeze --exclude-editable | grep -v '^hetserve' \
	    | sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf .lock-venv
	@echo "wrote $(CONSTRAINTS); run make test (and the studies if a solver moved) before committing"

clean:
	rm -rf $(VENV) demo-out .pytest_cache .ruff_cache
