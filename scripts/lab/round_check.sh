#!/bin/bash
# One call on a lent device machine (16 CPU cores, one GPU) for this round: issue 36's two 1.7x targets
# (scripts/lab/cores_check.sh), then the GPU tests (tests/comm/test_gpu*.py, mpi_gpu.py at np 1, 2 and 3), since
# the GPU last ran before the streaming readers, the bins, the periodic embeddings and the ensemble landed. The
# logs and result files go into one archive, $OUT/round.tgz (the device tool brings back at most 8 files).
set -o pipefail
FINAL=${OUT:-round-check}; mkdir -p "$FINAL"; W=/tmp/round-check; rm -rf $W; mkdir -p $W/cores $W/gpu
T0=$(date +%s); at() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
at "cores"; OUT=$W/cores READ_S=${READ_S:-200} PREP_S=${PREP_S:-150} bash scripts/lab/cores_check.sh
. scripts/lab/use_wheels.sh
export PYTHONUNBUFFERED=1 MPINN_CACHE_DIR=${MPINN_CACHE_DIR:-/tmp/mpinn-cache}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import cupy; print('cupy', cupy.__version__)"
at "GPU tests"; timeout ${GPU_S:-200} python3 -m pytest tests/comm/test_gpu.py tests/comm/test_gpu_cli.py -m gpu -q -o addopts=-ra \
  -p no:cacheprovider --timeout 150 -ra 2>&1 | tee $W/gpu/gpu_tests.log | tail -12
for n in 1 2 3; do
  at "MPI GPU tests, np $n"; timeout 60 mpiexec -n $n python3 -m mpi4py -m pytest tests -o python_files=mpi_gpu.py -q -o addopts=-ra \
    -p no:cacheprovider --timeout 50 -k "not fake_device" 2>&1 | tee $W/gpu/mpi_gpu_$n.log | grep -E "passed|failed"
done
at "end"; tar czf "$FINAL/round.tgz" -C $W .
