cd "$(dirname "$0")/.."
tar -xJf .whl/site.tar.xz -C /tmp; export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
python3 - <<'PY'
import gc, sys
from unittest import mock
from hetserve.sim import engine
print(sys.version.split()[0], "INTERPRETER_FROZEN", engine.INTERPRETER_FROZEN, "count now", gc.get_freeze_count())
with engine.older_objects_frozen():
    print("inside a run: frozen", gc.get_freeze_count())
print("after", gc.get_freeze_count()); gc.collect(); print("after a collection", gc.get_freeze_count())
with engine.older_objects_frozen():
    print("a second run: frozen", gc.get_freeze_count())
PY
python3 -m pytest -q -n 8 -p no:cacheprovider -rfEs tests/sim/test_engine.py tests/runtime/test_threads_gpu.py tests/engine 2>&1 | tail -6
