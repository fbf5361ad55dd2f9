#!/usr/bin/env bash
# mpinn and its training peers side by side, REPS rounds (default 3), round-robin: each round runs
# every configuration once (PyTorch DDP W1 and W2 EmbeddingBag-sparse, the DT42-style peer W1 and W3,
# mpinn W1 W2 W3 W4 (W4: mpinn only) with rank 0 scattering each batch and with --input local; np 1 and 2), so a burst of foreign load hits several rows a little rather than one
# row entirely. Every run goes through the peers' runner.py (waits for an idle machine, re-runs a
# disturbed window, keeps the cleaner attempt). Then a table of medians.  ~12 min per 3 rounds here.
#   MPINN_PYTHON=/path/to/python  (default: python3 on PATH; mpiexec from its bin/)
#   OUT=scripts/results/side-by-side-DATE.jsonl  REPS=3  NPS="1 2"  MPINN_EXTRA="" (e.g. --overlap)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEERS_DIR="${PEERS_DIR:?set PEERS_DIR to a checkout of the peers benchmark (bash setup.sh there first)}"
PY="${MPINN_PYTHON:-$(command -v python3)}"
MPIEXEC="$(dirname "$PY")/mpiexec"; [ -x "$MPIEXEC" ] || MPIEXEC="$(command -v mpiexec)"
VENV="${PEERS_VENV:-/tmp/peers-venv}"
PPY="$VENV/bin/python"
OUT="${OUT:-$ROOT/scripts/results/side-by-side-$(date +%Y-%m-%d).jsonl}"
[ -x "$PPY" ] || bash "$PEERS_DIR/setup.sh" || exit 1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1
export GLOO_SOCKET_IFNAME=lo MASTER_ADDR=127.0.0.1 PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PEERS_QUIET_WAIT="${PEERS_QUIET_WAIT:-10}" PEERS_MAX_ATTEMPTS="${PEERS_MAX_ATTEMPTS:-2}"
export PEERS_DEADLINE=$(( $(date +%s) + ${PEERS_BUDGET_S:-3000} ))
export PEERS_RESULTS="$OUT" PEERS_LOG_DIR="${PEERS_LOG_DIR:-/tmp/peers-logs}"
mkdir -p "$PEERS_LOG_DIR" "$(dirname "$OUT")"
: > "$OUT"
freeport() { "$PPY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run() { local name=$1; shift; (cd "$PEERS_DIR" && "$PPY" runner.py --name "$name" --timeout 240 -- "$@") | grep -v "^RESULT"; }
tr() { echo "$VENV/bin/torchrun" --nnodes=1 --nproc-per-node="$1" --master-addr=127.0.0.1 --master-port="$(freeport)"; }
(cd "$PEERS_DIR" && "$PPY" versions.py > /dev/null)
for rep in $(seq "${REPS:-3}"); do
  for np in ${NPS:-1 2}; do
    run "ddp_w1_np${np}_r$rep" $(tr "$np") ddp_peer.py --workload w1
    run "ddp_w2_embbag_sparse_np${np}_r$rep" $(tr "$np") ddp_peer.py --workload w2 --w2-mode embbag_sparse
    run "mpi_naive_w1_np${np}_r$rep" "$VENV/bin/mpiexec" -n "$np" "$PPY" mpi_naive_peer.py --workload w1
    run "mpi_naive_w3_np${np}_r$rep" "$VENV/bin/mpiexec" -n "$np" "$PPY" mpi_naive_peer.py --workload w3
    for wl in w1 w2 w3 w4; do      # W4: mpinn only (the peers have no reader for it)
      run "mpinn_${wl}_np${np}_r$rep" "$MPIEXEC" -n "$np" "$PY" -m mpinn.bench --workload "$wl" ${MPINN_EXTRA:-}
      run "mpinn_local_${wl}_np${np}_r$rep" "$MPIEXEC" -n "$np" "$PY" -m mpinn.bench --workload "$wl" \
          --input local ${MPINN_EXTRA:-}
    done
  done
done
echo
"$PY" "$ROOT/scripts/bench/median_table.py" "$OUT"
