cd "$(dirname "$0")/.."
python3 -c "import gc; print('plain', gc.get_freeze_count())"
python3 -S -c "import gc; print('-S', gc.get_freeze_count())"
python3 -I -c "import gc; print('-I', gc.get_freeze_count())"
python3 -c "import gc, torch; print('after torch', gc.get_freeze_count())"
python3 -c "import gc, pytest; print('after pytest', gc.get_freeze_count())"
python3 -c "import sys; print(sys.flags, sys.prefix)"; ls $(python3 -c "import site;print(site.getsitepackages()[0])")/*.pth
grep -l "freeze" $(python3 -c "import site;print(site.getsitepackages()[0])")/*.pth 2>/dev/null
python3 -c "import sitecustomize, inspect; print(inspect.getsourcefile(sitecustomize))" 2>&1 | tail -1
python3 -m pytest -q -p no:cacheprovider .whl/t/test_fc.py 2>&1 | grep "freeze count" | head -2
python3 -m pytest -q -p no:cacheprovider -n 2 .whl/t/test_fc.py 2>&1 | grep "freeze count" | head -2
tar -xJf .whl/site.tar.xz -C /tmp; export PYTHONPATH=/tmp/site:$PWD/src:$PWD
python3 - <<'PY'
import gc, sys, threading
import tests.runtime.test_threads_gpu as t
print('before', gc.get_freeze_count())
try:
    t.test_the_threads_engine_serves_on_this_gpu()
finally:
    print('after the GPU test', gc.get_freeze_count(), [th.name for th in threading.enumerate()])
t.test_gpu_workers_run_in_process_and_answer_as_the_model()
print('after the CPU-device test', gc.get_freeze_count())
PY
python3 -m pytest -q -p no:cacheprovider tests/runtime/test_threads_gpu.py tests/sim/test_engine.py -k "on_this_gpu or older_objects" 2>&1 | tail -3
