"""Predicted data-parallel efficiency of W1 and W2 at 8..1024 ranks, from speeds measured here.

    python scripts/cluster_model.py [scripts/results/bench-scaling-DATE.json [scripts/results/bench-alltoallv-DATE.json]]

Inputs, all measured on this machine (no number is taken from a table):
  * Allreduce and Allgatherv latency alpha and bandwidth B: the fit t = alpha + n / B over the
    256 B .. 16 MiB sweep that scripts/bench_scaling.py runs at np = 2 (in its JSON);
  * Alltoallv latency and bandwidth (the same fit), the latency of an Alltoall of P counts, and the
    cost of each further message in flight (persistent sends posted together), from
    scripts/bench_alltoallv.py at np = 2 (its JSON), for the sharded table;
  * the rows a sharded table's owners receive per step: W2's own data (the peers' generator, hashed),
    P slices of 512 rows, each slice's unique ids sent to their owners, counted at every P (the hot
    rows of the Zipf-distributed columns are asked for by every rank, so the busiest owner gets more
    than the mean);
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
  7. sharded (W2, --table sharded): per step an Alltoall of P counts (MPICH's Bruck algorithm for short
     messages: ceil(log2 P) rounds of the measured Alltoall latency), three Alltoallv (ids, rows,
     gradient rows), the dense tail's Allreduce by recursive doubling (ceil(log2 P) x (alpha + 520 B /
     B), MPICH's algorithm for short messages), and on the busiest owner the gather of the rows it
     sends (measured per-row np.take) and the update of the rows beyond one slice's (measured per-row
     update). An Alltoallv costs the busiest rank's bytes (max(own ids, rows its owner part receives)
     x 8 or 256 bytes) at the measured Alltoallv bandwidth, plus its messages to the P - 1 peers:
       sharded              the measured Alltoallv latency for the first peer and the measured cost of
                            a further message in flight for each other: MPICH posts an Alltoallv's
                            messages together (blocks of 32), so they overlap as in the probe
       sharded, no overlap  the measured Alltoallv latency for every peer, one after another (the
                            bound: no two messages overlap; the ring terms above assume the same)
     Rows per rank per step and bytes per rank stay flat in P; the per-peer message costs and the
     hot-row imbalance (the busiest owner's rows, from W2's data) are what grows.
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
    one dense SGD update of the whole 2^18 x 64 table, seconds per row of gathering random rows
    (np.take: what an owner does to answer a fetch))."""
    rng = np.random.default_rng(0)
    table = np.zeros((1 << 18, W2_H), np.float32)
    ids = np.unique(rng.integers(0, 1 << 18, 4000))[:W2_ROWS_PER_RANK]
    rows = rng.standard_normal((ids.size, W2_H)).astype(np.float32)
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        table[ids] -= np.float32(0.1) * rows
        ts.append(time.perf_counter() - t)
    takes = []
    for _ in range(30):
        t = time.perf_counter()
        np.take(table, ids, axis=0)
        takes.append(time.perf_counter() - t)
    grad, dense = np.ones_like(table), []
    for _ in range(5):
        t = time.perf_counter()
        table -= np.float32(0.1) * grad
        dense.append(time.perf_counter() - t)
    return float(np.median(ts)) / ids.size, float(np.median(dense)), float(np.median(takes)) / ids.size


def owner_loads(ranks, per_rank=512):
    """{P: (mean unique ids per rank, the most rows one owner receives)} for W2's data at P ranks,
    each rank a slice of per_rank rows, owners by contiguous id ranges (mpinn.comm.shard)."""
    sys.path.insert(0, ROOT)
    from mpinn.comm.buffers import split_counts
    from mpinn.bench.workloads import make_w2_codes, w2_hashed_indices
    n = max(ranks) * per_rank
    idx = w2_hashed_indices(make_w2_codes(n)[0])
    out = {}
    for P in ranks:
        bounds = np.r_[0, np.cumsum(split_counts(1 << 18, P))]
        got, ks = np.zeros(P, np.int64), []
        for r in range(P):
            ids = np.unique(idx[r * per_rank:(r + 1) * per_rank])
            ks.append(ids.size)
            got += np.diff(np.searchsorted(ids, bounds))
        out[P] = (float(np.mean(ks)), int(got.max()))
    return out


def w2_sharded_terms(P, net, loads, t_take, t_row):
    """The sharded step's exchange terms at P ranks (seconds), see assumption 7; net's per_message
    None: no overlap between an Alltoallv's messages."""
    if P == 1:
        return {}
    a_a2a, a_v, b_v, a_ar, b_ar, per_message = net
    k, r_max = loads[P]
    busiest = max(k, r_max)
    rounds = int(np.ceil(np.log2(P)))
    peers = (P - 1) * a_v if per_message is None else a_v + (P - 2) * per_message
    return {"counts (Alltoall)": rounds * a_a2a,
            "Alltoallv messages (3 calls x P-1 peers)": 3 * peers,
            "Alltoallv bytes (ids, rows, gradient rows)": busiest * (8 + 2 * W2_H * 4) / b_v,
            "dense Allreduce": rounds * (a_ar + W2_DENSE_TAIL * 4 / b_ar),
            "busiest owner's rows (gather, update beyond a slice's)": r_max * t_take + max(r_max - k, 0) * t_row}


def predict(compute_s, exchange_s):
    """Efficiency at each P: per-rank compute fixed, exchange_s(P) added."""
    return [compute_s / (compute_s + exchange_s(P)) for P in RANKS]


def model(doc, a2a):
    rows = {(r["workload"], r["np"]): r for r in doc["rows"]}
    probe = doc["probes"].get("2") or doc["probes"].get(2)
    a_ar, b_ar = fit_alpha_beta(probe["allreduce"])
    a_ag, b_ag = fit_alpha_beta(probe["allgatherv"])
    p2 = a2a["probes"]["2"]
    a_v, b_v = fit_alpha_beta(p2["alltoallv"])
    t_row, dense_update, t_take = update_times()
    loads = owner_loads(RANKS)
    # compute per rank per step at the fixed per-rank batch, from np = 1 (compute_ms covers the global batch)
    comp = {wl: rows[(wl, 1)]["compute_ms_median"] / 1e3 * PER_RANK[wl] / {"W1": 256, "W2": 1024}[wl]
            for wl in ("W1", "W2")}
    # W2 at np = 1 updates ~one slice's worth of rows inside compute_ms; the model adds the rest per P
    nets = {"measured": (a_ar, b_ar, a_ag, b_ag), "10GbE (assumed)": NET_10GBE * 2}
    measured = (p2["alltoall"], a_v, b_v, a_ar, b_ar)
    sharded_nets = {("sharded", "measured"): measured + (p2["fit"]["per_message_s"],),
                    ("sharded, no overlap", "measured"): measured + (None,),
                    ("sharded, no overlap", "10GbE (assumed)"): (NET_10GBE[0], NET_10GBE[0], NET_10GBE[1])
                    + NET_10GBE + (None,)}
    curves, terms = {}, {}
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
        for (how, n), sn in sharded_nets.items():
            if n == net:
                curves[("W2", how, net)] = predict(
                    comp["W2"], lambda P: sum(w2_sharded_terms(P, sn, loads, t_take, t_row).values()))
                terms["%s, %s" % (how, net)] = {P: w2_sharded_terms(P, sn, loads, t_take, t_row) for P in (64, 1024)}
    inputs = {"allreduce_alpha_us": a_ar * 1e6, "allreduce_GBps": b_ar / 1e9, "allgatherv_alpha_us": a_ag * 1e6,
              "allgatherv_GBps": b_ag / 1e9, "w1_compute_ms_per_rank_step": comp["W1"] * 1e3,
              "w2_compute_ms_per_rank_step": comp["W2"] * 1e3, "w2_row_update_us": t_row * 1e6,
              "w2_dense_update_ms": dense_update * 1e3,
              "net_10gbe_assumed": {"alpha_us": NET_10GBE[0] * 1e6, "GBps": NET_10GBE[1] / 1e9},
              "alltoallv_alpha_us": a_v * 1e6, "alltoallv_GBps": b_v / 1e9, "alltoall_counts_us": p2["alltoall"] * 1e6,
              "message_in_flight_us": p2["fit"]["per_message_s"] * 1e6, "w2_row_take_us": t_take * 1e6,
              "w2_owner_loads": {str(P): {"unique_ids_per_rank": k, "busiest_owner_rows": m}
                                 for P, (k, m) in loads.items()}}
    return curves, inputs, terms


def latest(pattern):
    found = sorted(glob.glob(os.path.join(RESULTS, pattern)))
    if not found:
        raise SystemExit("no scripts/results/%s: run the script that writes it first (see the docstring)" % pattern)
    return found[-1]


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("scaling", nargs="?", help="bench_scaling.py's JSON (default: the newest in scripts/results)")
    p.add_argument("alltoallv", nargs="?", help="bench_alltoallv.py's JSON (default: the newest)")
    args = p.parse_args(argv)
    scaling = args.scaling or latest("bench-scaling-2*.json")
    a2a_path = args.alltoallv or latest("bench-alltoallv-*.json")
    for path in (scaling, a2a_path):
        if not path or not os.path.exists(path):
            p.error("no such measurement file: %s (run scripts/bench_scaling.py and bench_alltoallv.py)" % path)
    with open(scaling) as f:
        doc = json.load(f)
    with open(a2a_path) as f:
        a2a = json.load(f)
    curves, inputs, terms = model(doc, a2a)
    print(__doc__.split("Inputs,")[0].strip())
    print("inputs (from %s, %s and timed now): %s" % (
        os.path.relpath(scaling, ROOT), os.path.relpath(a2a_path, ROOT),
        json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in inputs.items()
                    if k != "w2_owner_loads"})))
    print("W2 owner loads (mean unique ids per rank, busiest owner's rows): %s" % ", ".join(
        "P=%s %.0f/%d" % (P, v["unique_ids_per_rank"], v["busiest_owner_rows"])
        for P, v in inputs["w2_owner_loads"].items()))
    print("assumptions: weak scaling at fixed per-rank batch, ring collectives, no overlap, no stragglers; "
          "see the docstring")
    show = [8, 64, 512, 1024]
    print("\n| workload | exchange | network | " + " | ".join("P=%d" % P for P in show) + " |")
    print("|---|---|---|" + "---|" * len(show))
    for (wl, ex, net), eff in curves.items():
        print("| %s | %s | %s | %s |" % (wl, ex, net, " | ".join("%.0f%%" % (100 * eff[RANKS.index(P)]) for P in show)))
    print("| Horovod (Inception V3 / ResNet-101, 25 GbE, GPUs) | fp32 ring allreduce | published | - | - | ~90% | - |")
    print("\nW2 sharded, per step (ms) against compute %.2f ms per rank:" % inputs["w2_compute_ms_per_rank_step"])
    names = list(next(iter(next(iter(terms.values())).values())))
    print("| exchange, network | P | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for net, by_p in terms.items():
        for P, t in by_p.items():
            print("| %s | %d | %s |" % (net, P, " | ".join("%.3f" % (1e3 * t[n]) for n in names)))

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
        json.dump({"ranks": RANKS, "inputs": inputs, "source": [os.path.relpath(p, ROOT) for p in (scaling, a2a_path)],
                   "curves": [{"workload": w, "exchange": e, "network": n, "efficiency": v}
                              for (w, e, n), v in curves.items()],
                   "w2_sharded_terms_s": {net: {str(P): t for P, t in by_p.items()} for net, by_p in terms.items()}},
                  f, indent=1)
    print("\nwrote %s and its .json" % os.path.relpath(png, ROOT))


if __name__ == "__main__":
    main()
