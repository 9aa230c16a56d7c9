#!/usr/bin/env bash
# The Python packages hetserve needs that the lent GPU machines' image lacks (it has
# Python 3.12, PyTorch with CUDA, NumPy, SciPy, transformers, ... but no pydantic,
# FastAPI, uvicorn, HiGHS or Ray, and nothing can be downloaded there), at the versions of
# constraints.txt, as one folder packed for the device tool's `carry` (64 MiB at most: Ray's
# wheel alone is 79 MB, so its Java jars, RLlib, Tune, Train, Data and LLM parts are left
# out, which serving never imports, and the binaries stripped).
#
# Here:  bash benchmarks/gpu_wheels.sh     (writes .whl/site.tar.xz, ~32 MB, and
#        .whl/csrc.tar.xz, the C files Cython made for the compiled modules, ~1 MB: build
#        here first; .whl/ is listed in .git/info/exclude so it never lands in git)
# There: tar -xJf .whl/site.tar.xz -C /tmp && export PYTHONPATH=/tmp/site:$PWD/src
#        python3 benchmarks/gpu_card.py OUT --part 1|2|3|all
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
pins() { for p in "$@"; do grep -i "^${p}==" constraints.txt; done; }
mkdir -p .git/info && grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$work/wheels" $(pins highspy pydantic pydantic_core annotated-types typing-inspection \
  fastapi starlette uvicorn httptools ray jsonschema jsonschema-specifications referencing \
  rpds-py opentelemetry-api annotated-doc) 2>&1 | grep -v "^WARNING" || true
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux1_x86_64 \
  --python-version 3.12 --implementation cp --only-binary=:all: "$work"/wheels/*.whl 2>&1 \
  | grep -v "^WARNING" || true
rm -rf "$work"/site/ray/{jars,rllib,llm,tune,train,data}
find "$work/site" -type f \( -name '*.so*' -o -perm -u+x \) -print0 \
  | while IFS= read -r -d '' f; do file "$f" | grep -q ELF && strip --strip-unneeded "$f" || true; done
mkdir -p .whl
tar -cf - -C "$work" site | xz -T2 -6 > .whl/site.tar.xz
ls -la .whl/site.tar.xz
# the compiled modules' C files (made here by `make` or `setup.py build_ext`), which
# docs/results/gpu-h200/lease5/build_c.py compiles there in parallel without Cython
(cd src && find . -name '*.c' | tar -cf - -T - --transform 's,^\./,src/,' | xz -T2 -6) > .whl/csrc.tar.xz
ls -la .whl/csrc.tar.xz
