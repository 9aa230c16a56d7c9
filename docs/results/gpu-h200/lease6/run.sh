#!/usr/bin/env bash
# issue 41 session 36, 2026-12-04 (the sixth lease): the CUDA tests on the current tree
# (pure Python), while the compiled parts (14 modules now) are built from carried C files
# on the card's Python in a copy; then the engine, scheduler, simulator tests and the threads
# engine on the GPU against that compiled copy. Run in the repository's root, with `.whl`
# carried (benchmarks/gpu_wheels.sh's site.tar.xz and csrc.tar.xz: the C files).
L=docs/results/gpu-h200/lease5  # (its build_c.py, unchanged)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
SITE=/tmp/site
if [ -n "$DRY" ]; then SITE=/nonexistent; else tar -xJf .whl/site.tar.xz -C /tmp; fi
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
python3 -c "import sys,torch;print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
rm -rf /tmp/b; mkdir -p /tmp/b; cp -r setup.py pyproject.toml README.md src /tmp/b/
find /tmp/b/src \( -name '*.so' -o -name '*.c' \) -delete
tar -xJf .whl/csrc.tar.xz -C /tmp/b
( timeout ${BUILD_S:-240} python3 $L/build_c.py /tmp/b > "$OUT/build.log" 2>&1; echo "build rc $? after $(( $(date +%s) - t0 )) s" >> "$OUT/build.log" ) &
set -o pipefail
PYTHONPATH=$SITE:$PWD/src timeout ${TESTS_S:-220} python3 -m pytest -q -n ${NPROC:-8} -p no:cacheprovider -rfEs \
  tests/runtime/test_streams.py tests/runtime/test_stage.py tests/profiling tests/zoo/test_leaves.py \
  tests/runtime/test_coldload.py tests/cli/test_serve_profile_device.py tests/runtime/test_threads_gpu.py \
  2>&1 | tee "$OUT/cuda-tests.log" | tail -12
echo "cuda tests rc $? after $(( $(date +%s) - t0 )) s"
wait; cat "$OUT/build.log"
export PYTHONPATH=$SITE:/tmp/b/src
python3 -W error::RuntimeWarning -c "
import hetserve; print(hetserve.__file__)
from hetserve.core import heaps
from hetserve.engine import deadlines, entities, kernel, modelled
from hetserve.scheduling import coldstart, edf_adaptive, fixed_batch, flex, reservation_table
from hetserve.sim import result
m = dict(heaps=heaps, deadlines=deadlines, entities=entities, kernel=kernel, modelled=modelled, coldstart=coldstart, edf_adaptive=edf_adaptive, fixed_batch=fixed_batch, flex=flex, reservation=reservation_table)
c = {k: v.COMPILED for k, v in m.items()}
print('COMPILED', c, 'ledger', result.LEDGER_COMPILED, 'csv_cells', result.CSV_CELLS is not None)
print('ALL COMPILED' if all(c.values()) and result.LEDGER_COMPILED and result.CSV_CELLS is not None else 'NOT ALL COMPILED')" 2>&1 | tee "$OUT/compiled.txt"
timeout ${TESTS2_S:-200} python3 -m pytest -q -n ${NPROC:-8} -p no:cacheprovider -rfEs \
  tests/runtime/test_threads_gpu.py tests/engine tests/core tests/sim tests/scheduling \
  --deselect tests/core/test_provenance.py::test_versions_commit_and_command 2>&1 | tee "$OUT/compiled-tests.log" | tail -12
echo "compiled tests rc $? after $(( $(date +%s) - t0 )) s"
# the threads engine serving resnet50 on the card (shipped H200 profiles) under Poisson load,
# beside the simulator's attainment for the same trace, on the compiled copy
timeout ${SERVE_S:-150} python3 benchmarks/gpu_card.py /tmp/card --part 4 --only threads_served \
  --deadline-s ${SERVE_S:-150} --device ${DEVICE:-cuda} > "$OUT/served.log" 2>&1
echo "served rc $? after $(( $(date +%s) - t0 )) s"; tail -30 "$OUT/served.log"
cp /tmp/card/results.tgz "$OUT/served.tgz" 2>/dev/null
