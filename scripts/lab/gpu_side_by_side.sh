#!/bin/bash
# One call on a lent GPU machine for a change to the GPU step: every test marked gpu and mpi_gpu.py at np 1, 2, 3,
# then mpinn.bench on the GPU for the committed tree in $OLD (git archive HEAD mpinn | tar -x -C $OLD; carry it)
# against this tree, alternating, REPS times each (W1, W2, W4), then scripts.bench.gpu's workloads part (the GPU
# against one CPU core) with what is left of DEADLINE_S; PROFILE=w1,w4 adds a profile (prof.tgz) before it. Everything
# goes to $OUT (at most 8 files come back).
set -o pipefail
OUT=${OUT:-gpu-sbs}; OLD=${OLD:-.old}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
T0=$(date +%s); at() { echo "== [$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/tests.log"; }
left() { echo $(( ${DEADLINE_S:-420} - ($(date +%s) - T0) )); }
. scripts/lab/use_wheels.sh
SITE=${PYTHONPATH%%:*}
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache} OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
at "GPU tests"
timeout ${TESTS_S:-150} python3 -m pytest tests -m gpu -q -p no:cacheprovider -o addopts=-ra --timeout 100 2>&1 \
  | tail -40 >> "$OUT/tests.log"
tail -3 "$OUT/tests.log"
at "side by side"
for rep in $(seq ${REPS:-3}); do
  for w in ${WORKLOADS:-w1 w2 w4}; do
    (cd "$OLD" && PYTHONPATH=$SITE timeout 40 python3 -m mpinn.bench --workload $w --device gpu --timing-steps 0 \
      --out "$OUT/old.jsonl" 2>&1 | grep "^mpinn" | sed "s/^/old /" | tee -a "$OUT/sbs.log")
    timeout 40 python3 -m mpinn.bench --workload $w --device gpu --timing-steps 0 --out "$OUT/new.jsonl" 2>&1 \
      | grep "^mpinn" | sed "s/^/new /" | tee -a "$OUT/sbs.log"
  done
done
for n in 1 2 3; do
  at "MPI GPU tests, np $n"
  timeout 45 mpiexec -n $n python3 -m mpi4py -m pytest tests -o python_files=mpi_gpu.py -q -o addopts=-ra \
    -p no:cacheprovider --timeout 40 -k "not fake_device" 2>&1 | grep -v "^\.*s*\.*  *\[" | tail -40 >> "$OUT/tests.log"
  tail -1 "$OUT/tests.log"
done
if [ -n "$PROFILE" ]; then       # e.g. PROFILE=w1,w4: scripts.lab.gpu_profile's report and pstats, as one archive
  at "profile $PROFILE"; rm -rf /tmp/gpu-prof
  timeout 90 python3 -m scripts.lab.gpu_profile --out /tmp/gpu-prof --workloads "$PROFILE" > /tmp/gpu-prof.log 2>&1
  cp /tmp/gpu-prof.log /tmp/gpu-prof/ 2>/dev/null; tar czf "$OUT/prof.tgz" -C /tmp/gpu-prof .
fi
B=$(( $(left) - 10 ))
if [ "$B" -gt 60 ]; then
  at "benchmark, $B s"
  timeout $B python3 -m scripts.bench.gpu --parts ${PARTS:-workloads} --budget-s $B --out "$OUT/bench-gpu.json" \
    --plot "$OUT/bench-gpu.png" > "$OUT/bench.log" 2>&1
  grep -v "^bench_gpu: /" "$OUT/bench.log" | tail -12
fi
at "end"
