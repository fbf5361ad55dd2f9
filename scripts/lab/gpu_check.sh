#!/bin/bash
# The GPU checks of docs/gpu.md as one prepared script for a lent GPU machine (run from the repository root).
# Where the machine has no mpiexec, carry the mpich and mpi4py wheels in .whl/ (docs/gpu.md says how); they are
# installed under /tmp/pfx. The tests come first: every test marked gpu, then mpi_gpu.py at np 1, 2 and 3. Everything it measures goes to $OUT (default ./gpu-check).
# The tests run in one process (-o addopts=-ra drops setup.cfg's -n 2): the device's python may lack pytest-xdist.
set -o pipefail
OUT=${OUT:-gpu-check}; mkdir -p "$OUT"
T0=$(date +%s); at() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
. scripts/lab/use_wheels.sh
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache}
at "GPU tests"; timeout ${TESTS_S:-200} python3 -m pytest tests -m gpu -q -p no:cacheprovider -o addopts=-ra \
  --timeout 100 -ra 2>&1 | tee "$OUT/gpu_tests.log" | tail -8
for n in 1 2 3; do
  at "MPI GPU tests, np $n"; timeout 60 mpiexec -n $n python3 -m mpi4py -m pytest tests -o python_files=mpi_gpu.py -q -o addopts=-ra \
    -p no:cacheprovider --timeout 50 -k "not fake_device" 2>&1 | tee "$OUT/mpi_gpu_$n.log" | grep -E "passed|failed"
done
at "repeatable products"; timeout 60 python3 -m scripts.lab.gpu_repeatable 2>&1 | tee "$OUT/repeatable.log"
at "benchmark"; timeout ${BENCH_S:-200} python3 -m scripts.bench.gpu --parts ${PARTS:-workloads,shared,crossover} \
  --budget-s ${BENCH_S:-200} --out "$OUT/bench-gpu.json" --plot "$OUT/bench-gpu.png" 2>&1 | tee "$OUT/bench.log" | grep -v "^bench_gpu: /"
at "end"
