#!/bin/bash
# A short recheck on a lent GPU after a fix to the GPU step: every test marked gpu, then mpi_gpu.py at np 2 (REPS_2
# times) and np 3 (REPS_3 times), where a race between the feed's copy stream and the compute stream showed once.
OUT=${OUT:-gpu-recheck}; mkdir -p "$OUT"
. scripts/lab/use_wheels.sh
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache}
timeout ${TESTS_S:-90} python3 -m pytest tests -m gpu -q -p no:cacheprovider -o addopts=-ra --timeout 80 2>&1 \
  | tail -15 > "$OUT/tests.log"; tail -2 "$OUT/tests.log"
for n in $(yes 2 | head -${REPS_2:-4}) $(yes 3 | head -${REPS_3:-2}); do
  timeout 30 mpiexec -n $n python3 -m mpi4py -m pytest tests -o python_files=mpi_gpu.py -q -o addopts=-ra \
    -p no:cacheprovider --timeout 25 -k "not fake_device" 2>&1 | grep -v "^\.*s*\.*  *\[" | tail -30 >> "$OUT/mpi.log"
  echo "np $n: $(tail -1 "$OUT/mpi.log")"
done
