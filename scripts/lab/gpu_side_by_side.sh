#!/bin/bash
# A change to the GPU step, measured on a lent GPU machine: python -m mpinn.bench --device gpu for the committed tree
# in $OLD (git archive REV mpinn | tar -x -C $OLD; carry it) against this tree, alternating, REPS times each
# (WORKLOADS, default W1, W2, W4), into $OUT/old.jsonl and $OUT/new.jsonl. The tests and the GPU-against-CPU
# benchmark are scripts/lab/gpu_check.sh's; run it in the same call.
set -o pipefail
OUT=${OUT:-gpu-sbs}; OLD=${OLD:-.old}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
. scripts/lab/use_wheels.sh
SITE=${PYTHONPATH%%:*}
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache} OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for rep in $(seq ${REPS:-3}); do
  for w in ${WORKLOADS:-w1 w2 w4}; do
    (cd "$OLD" && PYTHONPATH=$SITE timeout 40 python3 -m mpinn.bench --workload $w --device gpu --timing-steps 0 \
      --out "$OUT/old.jsonl" 2>&1 | grep "^mpinn" | sed "s/^/old /" | tee -a "$OUT/sbs.log")
    timeout 40 python3 -m mpinn.bench --workload $w --device gpu --timing-steps 0 --out "$OUT/new.jsonl" 2>&1 \
      | grep "^mpinn" | sed "s/^/new /" | tee -a "$OUT/sbs.log"
  done
done
