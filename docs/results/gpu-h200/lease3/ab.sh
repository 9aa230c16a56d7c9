tar -xJf .whl/site.tar.xz -C /tmp
export PYTHONUNBUFFERED=1 HETSERVE_CACHE=/tmp/hc
for i in 1 2; do
  for t in old new; do
    if [ $t = old ]; then P=_old/src; S=_old/benchmarks/coldstart_real.py; else P=src; S=benchmarks/coldstart_real.py; fi
    echo "=== $t round $i"
    PYTHONPATH=/tmp/site:$PWD/$P timeout 100 python3 $S --device cuda --models resnet50,bert-base --kinds pipeswitch,dha --repeats 5 --warmup 2 --out /tmp/ab-$t-$i 2>&1 | grep -E "^\| (resnet|bert)|Error|error" 
  done
done
