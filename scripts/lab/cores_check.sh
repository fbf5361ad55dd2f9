#!/bin/bash
# Issue 36's two 1.7x targets need more cores than this project's 2-core VM: a prepared script for a lent machine
# with many (the device machines have 16 CPU cores), run from the repository root. Where the machine has no mpiexec,
# carry the mpich and mpi4py wheels in .whl/ (as scripts/lab/gpu_check.sh does). It needs numpy, scipy and xxhash
# there (pyarrow too, for the fast text reader: without it the plain reader runs, slower, and the script says so).
# About 3 minutes at the sizes below; everything it measures goes to $OUT (default ./cores-check).
set -o pipefail
OUT=${OUT:-cores-check}; mkdir -p "$OUT"
T0=$(date +%s); at() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
. scripts/lab/use_wheels.sh
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
at "the machine"; python3 -c "import os; print(os.cpu_count(), 'CPU cores')"; python3 -c "import numpy, scipy, xxhash, mpi4py; print('numpy', numpy.__version__, 'scipy', \
scipy.__version__, 'mpi4py', mpi4py.__version__)" || exit 1
python3 -c "import pyarrow; print('pyarrow', pyarrow.__version__)" || echo "no pyarrow: the plain text reader runs"
at "read-bound training, --readers all"; timeout ${READ_S:-240} python3 -m scripts.bench.read_scaling --rows ${ROWS:-5000000} \
  --files 8 --nps ${NPS:-1,2,4} --reps ${REPS:-2} --jobs 8 --workdir /tmp/mpinn-read-scaling 2>&1 | tee "$OUT/read.log"
at "prepare in parallel"; timeout ${PREP_S:-200} python3 -m scripts.bench.prepare_parallel --rows ${PREP_ROWS:-2000000} \
  --nps ${NPS:-1,2,4} --reps ${REPS:-2} --workdir /tmp/mpinn-prepare-parallel 2>&1 | tee "$OUT/prepare.log"
cp scripts/results/read-scaling-$(date +%F).json scripts/results/prepare-parallel-$(date +%F).json "$OUT/" 2>/dev/null
at "end"
