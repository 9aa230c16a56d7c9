#!/usr/bin/env bash
# issue 41 session 36, 2026-12-04 (the sixth lease, second call): does the compiled engine
# change what hetserve serves on the card? The third lease (pure Python, 2026-11-26) saw the
# threads engine match PyTorch alone at 100-200 req/s and fall behind at 300 (223.5 against
# 304.6 req/s of goodput), the suspect being the server's Python work per request. Here, in
# one call: the compiled modules built from the carried C files (lease5/build_c.py), then
# benchmarks/peer_torch.py twice on the same card -- the peer and hetserve (threads) on the
# pure-Python tree, then the peer and hetserve (threads) on the compiled tree. The peer runs
# in both, so its two runs show the call's own noise. Run in the repository's root, with
# `.whl` carried (benchmarks/gpu_wheels.sh).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
tar -xJf .whl/site.tar.xz -C /tmp
export PYTHONUNBUFFERED=1
rm -rf /tmp/b; mkdir -p /tmp/b; cp -r setup.py pyproject.toml README.md src /tmp/b/
find /tmp/b/src \( -name '*.so' -o -name '*.c' \) -delete
tar -xJf .whl/csrc.tar.xz -C /tmp/b
timeout ${BUILD_S:-200} python3 docs/results/gpu-h200/lease5/build_c.py /tmp/b > "$OUT/build2.log" 2>&1
echo "build rc $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/build2.log"
PEER="benchmarks/peer_torch.py --device cuda --seconds 8 --rates ${RATES:-200,300} --engines threads --profiles src/hetserve/data/profiles/h200"
HETSERVE_PURE_PYTHON=1 PYTHONPATH=/tmp/site:$PWD/src timeout ${RUN_S:-150} python3 $PEER > "$OUT/peers-pure.log" 2>&1
echo "pure rc $? after $(( $(date +%s) - t0 )) s"; tail -6 "$OUT/peers-pure.log"
PYTHONPATH=/tmp/site:/tmp/b/src python3 -W error::RuntimeWarning -c "
from hetserve.engine import kernel, modelled; from hetserve.scheduling import flex
print('compiled:', kernel.COMPILED, modelled.COMPILED, flex.COMPILED)" 2>&1 | tee -a "$OUT/peers-compiled.log"
PYTHONPATH=/tmp/site:/tmp/b/src timeout ${RUN_S:-150} python3 $PEER >> "$OUT/peers-compiled.log" 2>&1
echo "compiled rc $? after $(( $(date +%s) - t0 )) s"; tail -6 "$OUT/peers-compiled.log"
