#!/bin/bash
# Issue 62's GPU checks as one prepared script for a lent GPU machine (run from the repository root; ~5 minutes):
#   1. the step plan's kernels against their numpy definitions (tests/comm/test_cuda_ops.py and test_cuda_bits.py,
#      marked gpu), first:
#      a kernel that is wrong stops nothing else but says so at once;
#   2. the launch-cost probe: eager against graph, us a step, host waits inside a step, bitwise
#      (python -m scripts.lab.graph_probe);
#   3. python -m scripts.bench.gpu --parts workloads: W1-W4 on the GPU with graphs (--graph auto), eagerly
#      (--graph off) and on one CPU core, in the same call;
#   4. the GPU tests of the CLI, the model and the API (their GPU runs take the graph step now), then mpi_gpu.py at
#      np 1 (MPI_NP="1 2" for more). Budgets add up to about 6 minutes at most.
# Everything goes to $OUT (default ./graph-check). Where the machine has no mpiexec, carry the mpich and mpi4py
# wheels in .whl/ (scripts/lab/use_wheels.sh). Budgets: CUDA_OPS_S, PROBE_S, BENCH_S, TESTS_S (seconds).
set -o pipefail
OUT=${OUT:-graph-check}; mkdir -p "$OUT"
T0=$(date +%s); at() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
. scripts/lab/use_wheels.sh
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
at "step plan kernels"; timeout ${CUDA_OPS_S:-60} python3 -m pytest tests/comm/test_cuda_ops.py tests/comm/test_cuda_bits.py \
  -q -p no:cacheprovider -o addopts=-ra -x 2>&1 | tee "$OUT/cuda_ops.log" | tail -6
at "launch-cost probe"; timeout ${PROBE_S:-70} python3 -m scripts.lab.graph_probe --steps ${PROBE_STEPS:-200} \
  --out "$OUT/graph-probe.json" 2>&1 | tee "$OUT/probe.log"
at "workloads"; timeout ${BENCH_S:-150} python3 -m scripts.bench.gpu --parts workloads --workloads ${WORKLOADS:-w1,w2,w4} \
  --budget-s ${BENCH_S:-150} --out "$OUT/bench-gpu.json" --plot "$OUT/bench-gpu.png" 2>&1 | tee "$OUT/bench.log" \
  | grep -v "^bench_gpu: /"
at "GPU tests"; timeout ${TESTS_S:-70} python3 -m pytest tests/comm/test_gpu_cli.py tests/comm/test_gpu.py \
  tests/entry/test_api.py -m gpu -q -p no:cacheprovider -o addopts=-ra --timeout 50 2>&1 | tee "$OUT/gpu_tests.log" | tail -8
for n in ${MPI_NP:-1}; do
  at "MPI GPU tests, np $n"; timeout 30 mpiexec -n $n python3 -m mpi4py -m pytest tests -o python_files=mpi_gpu.py -q \
    -o addopts=-ra -p no:cacheprovider --timeout 30 -k "not fake_device" 2>&1 | tee -a "$OUT/mpi_gpu_$n.log" \
    | grep -E "passed|failed"
done
at "end"
