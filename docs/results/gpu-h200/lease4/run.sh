#!/usr/bin/env bash
# issue 41 session, 2026-11-26: the CUDA tests on the current tree (pure Python), while the
# compiled parts build on the card's Python in a copy; then the engine tests and the threads
# engine on the GPU again against that compiled copy.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
[ -n "$DRY" ] || tar -xJf .whl/site.tar.xz -C /tmp
[ -n "$DRY" ] || python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/cy .whl/cython-*.whl 2>&1 | grep -v WARNING
SITE=/tmp/site; [ -n "$DRY" ] && SITE=/nonexistent
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import sys,torch;print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
rm -rf /tmp/b; mkdir -p /tmp/b; cp -r setup.py pyproject.toml README.md src /tmp/b/
find /tmp/b/src -name '*.so' -delete
( cd /tmp/b && PYTHONPATH=/tmp/cy:$SITE timeout ${BUILD_S:-300} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; echo "build rc $? after $(( $(date +%s) - t0 )) s" >> "$OUT/build.log" ) &
set -o pipefail
PYTHONPATH=$SITE:$PWD/src timeout ${TESTS_S:-240} python3 -m pytest -q -n ${NPROC:-8} -p no:cacheprovider -rfEs \
  tests/runtime/test_streams.py tests/runtime/test_stage.py tests/profiling tests/zoo/test_leaves.py \
  tests/runtime/test_coldload.py tests/cli/test_serve_profile_device.py tests/runtime/test_threads_gpu.py \
  2>&1 | tee "$OUT/cuda-tests.log" | tail -25
echo "cuda tests rc $? after $(( $(date +%s) - t0 )) s"
wait; tail -3 "$OUT/build.log"; grep -i "was not built" "$OUT/build.log" | head -3
export PYTHONPATH=$SITE:/tmp/b/src
python3 -W error::RuntimeWarning -c "
import hetserve; print(hetserve.__file__)
from hetserve.core import heaps
from hetserve.engine import entities, kernel, modelled
from hetserve.scheduling import coldstart, reservation_table
print('COMPILED', dict(heaps=heaps.COMPILED, entities=entities.COMPILED, kernel=kernel.COMPILED, modelled=modelled.COMPILED, coldstart=coldstart.COMPILED, reservation=reservation_table.COMPILED))"
timeout ${TESTS2_S:-150} python3 -m pytest -q -n ${NPROC:-8} -p no:cacheprovider -rfEs \
  tests/runtime/test_threads_gpu.py tests/engine tests/core tests/sim/test_engine.py --deselect tests/core/test_provenance.py::test_versions_commit_and_command 2>&1 | tee "$OUT/compiled-tests.log" | tail -15
echo "compiled tests rc $? after $(( $(date +%s) - t0 )) s"
