"""Predicted data-parallel efficiency of W1 and W2 at 8..1024 ranks, from speeds measured here.

    python scripts/cluster_model.py [scripts/results/bench-scaling-DATE.json]

Inputs, all measured on this machine (no number is taken from a table):
  * Allreduce and Allgatherv latency alpha and bandwidth B: the fit t = alpha + n / B over the
    256 B .. 16 MiB sweep that scripts/bench_scaling.py runs at np = 2 (in its JSON);
  * compute time per sample: W1 and W2 at np = 1 in the same JSON (the bench's compute_ms, forward,
    backward and update, divided by the global batch);
  * W2's update cost per gradient row and of one dense pass over the table: timed here (the
    sparse SGD update applies every rank's rows; the dense one sweeps all 2^18 x 64).

Assumptions (the model is only as good as these):
  1. Weak scaling, as Horovod measured it: the per-rank batch stays fixed (W1 128 rows, W2 512 rows,
     the np = 2 split of the peers' global batches), so compute per rank per step is constant.
  2. One rank per node (or per GPU), and the network between them behaves like the measured
     collective: alpha and B from this machine's shared-memory MPI (an optimistic interconnect:
     ~GB/s, microseconds). A second scenario uses 10 GbE, alpha = 30 us and B = 1.1 GB/s
     (assumed, not measured), to show how sensitive the prediction is.
  3. Ring algorithms: Allreduce of n bytes takes 2 (P-1)/P n/B + 2 (P-1) alpha; Allgather(v) of a
     total of m bytes takes (P-1)/P m/B + (P-1) alpha. Real MPIs switch to tree/recursive-doubling
     algorithms for small messages (log P latency), so for small n this is pessimistic.
  4. No overlap of communication with compute (mpinn's --overlap measured no gain here; see the
     report): step = compute + exchange (+ W2's update beyond one rank's own rows, which grows
     with P, or the dense update of the whole table), and efficiency = compute / step, i.e. against
     one rank with no exchange (W2's dense and fp16 curves pay the dense update even at P = 1).
  5. Exchanges: dense = float32 ring Allreduce of the whole gradient (W2: the 2^18 x 64 table too);
     fp16 = a ring Allreduce of 16-bit words (half the bytes, as NCCL/Horovod's fp16 compression);
     fp16-allgather = mpinn's own --compress, one Allgather of every rank's 16-bit words, summed in
     float32 ((P-1) x 2 bytes per element received: fine at 2-3 ranks, hopeless at 1000);
     sparse (W2) = Allgatherv of every rank's touched rows (~3,120 rows of 64 floats + an int64 id
     per 512-row slice, measured), then each rank applies all P x 3,120 rows; the density rule
     switches to dense once the gathered rows exceed a quarter of the table, as mpinn does.
  6. Unique rows per rank do not shrink with P (each rank's slice touches ~3,120 rows whatever P
     is), and no rank is slower than another (no stragglers, no noise).
Horovod's published point: ~90% scaling efficiency at 512 GPUs for Inception V3 and ResNet-101
(Sergeev & Del Balso 2018, "Horovod: fast and easy distributed deep learning in TensorFlow",
arXiv:1802.05799), on 25 GbE RoCE with NVLink-local GPUs and compute of ~100s of ms per step: a
far larger compute-to-communication ratio than W1/W2's milliseconds.
"""
import glob
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "scripts", "results")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_scaling import fit_alpha_beta  # noqa: E402

W1_PARAMS = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
W2_TABLE, W2_H = (1 << 18) * 64, 64
W2_DENSE_TAIL = 64 + 64 + 1
W2_ROWS_PER_RANK = 3120         # unique gradient rows of a 512-row W2 slice (measured, bench data)
ROW_BYTES = W2_H * 4 + 8
PER_RANK = {"W1": 128, "W2": 512}
RANKS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
NET_10GBE = (30e-6, 1.1e9)


def ring_allreduce(nbytes, P, alpha, B):
    return 0.0 if P == 1 else 2 * (P - 1) / P * nbytes / B + 2 * (P - 1) * alpha


def ring_allgather(total_bytes, P, alpha, B):
    return 0.0 if P == 1 else (P - 1) / P * total_bytes / B + (P - 1) * alpha


def update_times():
    """(seconds per gradient row of the sparse SGD update (fancy-indexed, random rows), seconds of
    one dense SGD update of the whole 2^18 x 64 table)."""
    rng = np.random.default_rng(0)
    table = np.zeros((1 << 18, W2_H), np.float32)
    ids = np.unique(rng.integers(0, 1 << 18, 4000))[:W2_ROWS_PER_RANK]
    rows = rng.standard_normal((ids.size, W2_H)).astype(np.float32)
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        table[ids] -= np.float32(0.1) * rows
        ts.append(time.perf_counter() - t)
    grad, dense = np.ones_like(table), []
    for _ in range(5):
        t = time.perf_counter()
        table -= np.float32(0.1) * grad
        dense.append(time.perf_counter() - t)
    return float(np.median(ts)) / ids.size, float(np.median(dense))


def predict(compute_s, exchange_s):
    """Efficiency at each P: per-rank compute fixed, exchange_s(P) added."""
    return [compute_s / (compute_s + exchange_s(P)) for P in RANKS]


def model(doc):
    rows = {(r["workload"], r["np"]): r for r in doc["rows"]}
    probe = doc["probes"].get("2") or doc["probes"].get(2)
    a_ar, b_ar = fit_alpha_beta(probe["allreduce"])
    a_ag, b_ag = fit_alpha_beta(probe["allgatherv"])
    t_row, dense_update = update_times()
    # compute per rank per step at the fixed per-rank batch, from np = 1 (compute_ms covers the global batch)
    comp = {wl: rows[(wl, 1)]["compute_ms_median"] / 1e3 * PER_RANK[wl] / {"W1": 256, "W2": 1024}[wl]
            for wl in ("W1", "W2")}
    # W2 at np = 1 updates ~one slice's worth of rows inside compute_ms; the model adds the rest per P
    nets = {"measured": (a_ar, b_ar, a_ag, b_ag), "10GbE (assumed)": NET_10GBE * 2}
    curves = {}
    for net, (aa, ba, ag, bg) in nets.items():
        w1 = W1_PARAMS * 4
        curves[("W1", "dense", net)] = predict(comp["W1"], lambda P: ring_allreduce(w1, P, aa, ba))
        curves[("W1", "fp16", net)] = predict(comp["W1"], lambda P: ring_allreduce(w1 / 2, P, aa, ba))
        curves[("W1", "fp16-allgather", net)] = predict(
            comp["W1"], lambda P: ring_allgather(P * w1 / 2, P, ag, bg))
        dense2 = (W2_TABLE + W2_DENSE_TAIL) * 4

        def w2_sparse(P):
            gathered = P * W2_ROWS_PER_RANK
            if gathered > 0.25 * (1 << 18):               # mpinn's density rule: dense instead
                return ring_allreduce(dense2, P, aa, ba) + dense_update
            return (ring_allgather(gathered * ROW_BYTES, P, ag, bg) + ring_allreduce(W2_DENSE_TAIL * 4, P, aa, ba)
                    + (gathered - W2_ROWS_PER_RANK) * t_row)
        curves[("W2", "dense", net)] = predict(comp["W2"], lambda P: ring_allreduce(dense2, P, aa, ba) + dense_update)
        curves[("W2", "fp16", net)] = predict(comp["W2"], lambda P: ring_allreduce(dense2 / 2, P, aa, ba) + dense_update)
        curves[("W2", "sparse", net)] = predict(comp["W2"], w2_sparse)
    inputs = {"allreduce_alpha_us": a_ar * 1e6, "allreduce_GBps": b_ar / 1e9, "allgatherv_alpha_us": a_ag * 1e6,
              "allgatherv_GBps": b_ag / 1e9, "w1_compute_ms_per_rank_step": comp["W1"] * 1e3,
              "w2_compute_ms_per_rank_step": comp["W2"] * 1e3, "w2_row_update_us": t_row * 1e6,
              "w2_dense_update_ms": dense_update * 1e3,
              "net_10gbe_assumed": {"alpha_us": NET_10GBE[0] * 1e6, "GBps": NET_10GBE[1] / 1e9}}
    return curves, inputs


def main():
    paths = sys.argv[1:] or sorted(glob.glob(os.path.join(RESULTS, "bench-scaling-*.json")))
    if not paths:
        raise SystemExit("no scripts/results/bench-scaling-*.json: run python scripts/bench_scaling.py first")
    with open(paths[-1]) as f:
        doc = json.load(f)
    curves, inputs = model(doc)
    print(__doc__.split("Inputs,")[0].strip())
    print("inputs (from %s and timed now): %s" % (os.path.relpath(paths[-1], ROOT),
                                                   json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                                               for k, v in inputs.items()})))
    print("assumptions: weak scaling at fixed per-rank batch, ring collectives, no overlap, no stragglers; "
          "see the docstring")
    show = [8, 64, 512, 1024]
    print("\n| workload | exchange | network | " + " | ".join("P=%d" % P for P in show) + " |")
    print("|---|---|---|" + "---|" * len(show))
    for (wl, ex, net), eff in curves.items():
        print("| %s | %s | %s | %s |" % (wl, ex, net, " | ".join("%.0f%%" % (100 * eff[RANKS.index(P)]) for P in show)))
    print("| Horovod (Inception V3 / ResNet-101, 25 GbE, GPUs) | fp32 ring allreduce | published | - | - | ~90% | - |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, wl in zip(axes, ("W1", "W2")):
        for (w, ex, net), eff in curves.items():
            if w == wl:
                ax.plot(RANKS, [100 * e for e in eff], "-" if net == "measured" else "--", marker=".",
                        label="%s, %s" % (ex, net))
        ax.plot([512], [90], "k*", ms=14, label="Horovod, 512 GPUs (Sergeev & Del Balso 2018)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_title("%s predicted (per-rank batch %d)" % (wl, PER_RANK[wl]))
        ax.legend(fontsize=7, loc="lower left")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("scaling efficiency, %")
    fig.suptitle("Cluster model: ring collectives at this machine's measured alpha/B (solid) and assumed 10 GbE (dashed)")
    fig.tight_layout()
    stamp = time.strftime("%Y-%m-%d")
    png = os.path.join(RESULTS, "cluster-model-%s.png" % stamp)
    fig.savefig(png, dpi=110)
    with open(os.path.join(RESULTS, "cluster-model-%s.json" % stamp), "w") as f:
        json.dump({"ranks": RANKS, "inputs": inputs, "source": os.path.relpath(paths[-1], ROOT),
                   "curves": [{"workload": w, "exchange": e, "network": n, "efficiency": v}
                              for (w, e, n), v in curves.items()]}, f, indent=1)
    print("\nwrote %s and its .json" % os.path.relpath(png, ROOT))


if __name__ == "__main__":
    main()
