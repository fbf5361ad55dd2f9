#!/bin/bash
# The GPU checks of docs/gpu.md as one prepared script for a lent GPU machine (run from the repository root).
# Where the machine has no mpiexec, carry the mpich and mpi4py wheels in .whl/ (docs/gpu.md says how); they are
# installed under /tmp/pfx. The tests come first: every test marked gpu, then mpi_gpu.py at np 1, 2 and 3. Everything it measures goes to $OUT (default ./gpu-check).
# The tests run in one process (-o addopts=-ra drops setup.cfg's -n 2): the device's python may lack pytest-xdist.
# MPI_NP="2 2 2 2 3 3" repeats mpi_gpu.py (a race shows in some runs only); PROFILE=w1,w4 adds scripts.lab.gpu_profile's
# report and pstats ($OUT/prof.tgz); PARTS=none leaves the benchmark out.
set -o pipefail
OUT=${OUT:-gpu-check}; mkdir -p "$OUT"
T0=$(date +%s); at() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
. scripts/lab/use_wheels.sh
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache}
at "GPU tests"; timeout ${TESTS_S:-200} python3 -m pytest tests -m gpu -q -p no:cacheprovider -o addopts=-ra \
  --timeout 100 -ra 2>&1 | tee "$OUT/gpu_tests.log" | tail -8
for n in ${MPI_NP:-1 2 3}; do
  at "MPI GPU tests, np $n"; timeout 60 mpiexec -n $n python3 -m mpi4py -m pytest tests -o python_files=mpi_gpu.py -q -o addopts=-ra \
    -p no:cacheprovider --timeout 50 -k "not fake_device" 2>&1 | tee -a "$OUT/mpi_gpu_$n.log" | grep -E "passed|failed"
done
at "repeatable products"; timeout 60 python3 -m scripts.lab.gpu_repeatable 2>&1 | tee "$OUT/repeatable.log"
if [ -n "$PROFILE" ]; then
  at "profile $PROFILE"; rm -rf /tmp/gpu-prof
  timeout 90 python3 -m scripts.lab.gpu_profile --out /tmp/gpu-prof --workloads "$PROFILE" > /tmp/gpu-prof.log 2>&1
  cp /tmp/gpu-prof.log /tmp/gpu-prof/ 2>/dev/null; tar czf "$OUT/prof.tgz" -C /tmp/gpu-prof .
fi
[ "${PARTS:-}" = none ] && { at "end"; exit 0; }
at "benchmark"; timeout ${BENCH_S:-200} python3 -m scripts.bench.gpu --parts ${PARTS:-workloads,shared,crossover} \
  --budget-s ${BENCH_S:-200} --out "$OUT/bench-gpu.json" --plot "$OUT/bench-gpu.png" 2>&1 | tee "$OUT/bench.log" | grep -v "^bench_gpu: /"
at "end"
