#!/usr/bin/env bash
# mpinn vs its peers on the same workloads: runs the peers harness (PyTorch DDP, DT42-style mpi4py,
# ...), then mpinn's benchmark for W1, W2, W3 at np 1 and 2 into the same JSONL file, then prints
# one side-by-side table.  About 10 minutes on 2 cores (plus the peers' venv setup the first time).
#   MPINN_PYTHON=/path/to/python  the Python with mpinn installed (default: python3 on PATH);
#                                 mpiexec is taken from its bin/ (the mpich wheel's), else PATH
#   PEERS_DIR=/work/shared/peers  the peers harness
#   BENCH_OUT=/tmp/bench-vs-peers.jsonl   results (truncated at the start)
#   SKIP_PEERS=1                  do not run the peers; copy PEERS_FROM (default: the harness's
#                                 results-last-run.jsonl) into BENCH_OUT instead
#   MPINN_NPS="1 2"  MPINN_REDUCE="allreduce"  (e.g. "allreduce gather")
#   PEERS_SKIP_NP4=1 PEERS_SKIP_W2_ALT=1 (defaults here) and the other PEERS_* of run_all.sh apply
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS_DIR="${PEERS_DIR:-/work/shared/peers}"
PY="${MPINN_PYTHON:-$(command -v python3)}"
MPIEXEC="$(dirname "$PY")/mpiexec"; [ -x "$MPIEXEC" ] || MPIEXEC="$(command -v mpiexec)"
OUT="${BENCH_OUT:-/tmp/bench-vs-peers.jsonl}"
export PEERS_SKIP_NP4="${PEERS_SKIP_NP4:-1}" PEERS_SKIP_W2_ALT="${PEERS_SKIP_W2_ALT:-1}"
export PEERS_QUIET_WAIT="${PEERS_QUIET_WAIT:-5}" PEERS_LOG_DIR="${PEERS_LOG_DIR:-/tmp/peers-logs}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1

"$PY" -c "import mpinn.bench" || { echo "no mpinn at $PY (set MPINN_PYTHON)" >&2; exit 1; }
if [ "${SKIP_PEERS:-0}" = 1 ]; then
  cp "${PEERS_FROM:-$PEERS_DIR/results-last-run.jsonl}" "$OUT" || exit 1
else
  bash "$PEERS_DIR/setup.sh" || exit 1
  PEERS_OUT="$OUT" bash "$PEERS_DIR/run_all.sh" || exit 1     # truncates $OUT first
fi

# runner.py (peers harness) waits for a quiet machine, enforces a timeout, re-runs a benchmark
# whose timed window was disturbed and appends its record (mpinn.bench writes to $PEERS_RESULTS)
export PEERS_RESULTS="$OUT"
cd "$ROOT"
for reduce in ${MPINN_REDUCE:-allreduce}; do
  for wl in w1 w2 w3; do
    for np in ${MPINN_NPS:-1 2}; do
      "$PY" "$PEERS_DIR/runner.py" --name "mpinn_${wl}_np${np}_${reduce}" --timeout 180 -- \
        "$MPIEXEC" -n "$np" "$PY" -m mpinn.bench --workload "$wl" --reduce "$reduce"
    done
  done
done
echo
"$PY" -m mpinn.bench --table "$OUT"
