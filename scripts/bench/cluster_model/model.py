"""What the cluster model reads (the benchmarks' JSON, the lab's probe, per-row costs timed now) and the curves
it draws from them."""
import glob
import json
import os
import time

import numpy as np

from scripts import RESULTS
from scripts.bench import exchange_cpu
from scripts.bench.cluster_model import w2_loads
from scripts.bench.cluster_model.costs import (ASSUMED, NET_10GBE, PER_RANK, RANKS, ROW_BYTES, W1_PARAMS,
                                               W2_DENSE_TAIL, W2_H, W2_ROWS_PER_RANK, W2_TABLE, WIRES, cluster,
                                               predict, ring_allgather, ring_allreduce, w2_sharded_terms)
from mpinn.bench.crossing import CONVENTION, fit_crossing, probe_fits


def update_times():
    """Seconds, timed now, each of what mpinn calls for it: "row" per gradient row of the sparse SGD update (the
    SGD optimizer's rows kernel, mpinn.optim.fused.rows, random rows; numpy's fancy-indexed pass where no kernel
    is built), "dense" for one dense SGD update of the whole 2^18 x 64 table, "take" per row of gathering random
    rows (np.take: what an owner does to answer a fetch in fp32) and "take_bf16" of gathering them as bfloat16
    words (Wire.take: the gather and the cast in one pass), "book_flat" and "book_node" the ids' bookkeeping of
    the flat and the node exchange (scripts/bench/exchange_cpu.py: (fixed seconds, seconds an id) of mpinn's own
    fetch and send_back in one process), "encode" and "decode" per element of a slice's rows cast to
    bfloat16 words and back (mpinn.comm.wire.Wire with the kernels' codec, what --wire-rows bf16 does to every row
    it sends and receives), and the same three for --wire-rows int8 ("take_int8", "encode_int8", "decode_int8"), and "sum" per element of the gradient rows a relay sums (what the node exchange's relay
    calls, mpinn.optim.fused.coalesce_rows: the canonical tree in the kernels, on the rows its node's 8 ranks send
    one relay at 64 ranks, W2's ids, 512 rows a rank: what node-sum adds)."""
    from mpinn.comm.wire import Wire
    from mpinn.optim import fused
    rng = np.random.default_rng(0)
    table = np.zeros((1 << 18, W2_H), np.float32)
    ids = np.unique(rng.integers(0, 1 << 18, 4000))[:W2_ROWS_PER_RANK]
    rows = rng.standard_normal((ids.size, W2_H)).astype(np.float32)
    wire, int8 = Wire("bf16", 1 << 18, fused.CODECS["bf16"]), Wire("int8", 1 << 18, fused.CODECS["int8"])
    words, bytes8 = wire.out(rows), int8.out(rows)
    lib, lr = fused.library(), fused.consts("sgd", lr=0.1, wd=0.0)

    def sgd_rows():
        if lib is None:
            table[ids] -= np.float32(0.1) * rows
        else:
            fused.rows(lib, "sgd", table, ids, rows, consts=lr)

    def median(f, n=30):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))
    t = {"row": median(sgd_rows) / ids.size,
         "take": median(lambda: np.take(table, ids, axis=0)) / ids.size,
         "take_bf16": median(lambda: wire.take(table, ids)) / ids.size,
         "encode": median(lambda: wire.out(rows)) / rows.size,
         "decode": median(lambda: wire.back(words, np.float32)) / rows.size,
         "take_int8": median(lambda: int8.take(table, ids)) / ids.size,
         "encode_int8": median(lambda: int8.out(rows)) / rows.size,
         "decode_int8": median(lambda: int8.back(bytes8, np.float32)) / rows.size}
    book = exchange_cpu.bookkeeping()
    t["book_flat"], t["book_node"] = book["flat"], book["node"]
    parts = relay_parts()
    t["sum"] = median(lambda: fused.coalesce_rows(parts, 1 << 18, W2_H, np.float32)) / sum(r.size for _, r in parts)
    grad = np.ones_like(table)
    t["dense"] = median(lambda: table.__isub__(np.float32(0.1) * grad), 5)
    return t


def relay_parts(P=64, R=8, per_rank=512):
    """The gradient rows one relay of the first node gets from each of its R ranks (local index 0's rows) on W2's
    ids at P ranks, per_rank rows a rank: [(ids, rows)], one per rank."""
    idx = w2_loads.w2_index(R * per_rank)
    rank, ids = w2_loads.rank_ids(idx, R, per_rank)
    mine = w2_loads.owner_table(P)[ids] % R == 0
    rng = np.random.default_rng(1)
    return [(ids[mine & (rank == r)], rng.standard_normal((int((mine & (rank == r)).sum()), W2_H)).astype(np.float32))
            for r in range(R)]


def read_network(path):
    """A network probe (the lab's, or mpinn.bench.netprobe's from a cluster) as the model's network: its 2x1 points (one rank a host) re-fitted under
    mpinn/bench/crossing.py's convention (the file's own fits may be older: bandwidth_Bps was per byte of n)."""
    with open(path) as f:
        doc = json.load(f)
    link = doc.get("link", {})
    fits = probe_fits(doc["points"]["2x1"], 1)
    where = "" if "measured" in link else "lab "      # mpinn.bench.netprobe's files say where they were measured
    return {"label": "%s%s (%s)" % (where, link.get("rate", "?"), os.path.basename(path)),
            "a2a": fits["alltoall_counts_s"], "a_v": fits["alltoallv"]["alpha_s"],
            "b_v": fits["alltoallv"]["crossing_Bps"], "a_ar": fits["allreduce"]["alpha_s"],
            "b_ar": fits["allreduce"]["crossing_Bps"], "per_message": fits["alltoallv"].get("per_message_s"),
            "link": link}


def shared_memory(doc, a2a):
    """This machine's shared memory as the model's network inside a node: the scaling JSON's np 2 Allreduce and
    Allgatherv sweeps, the alltoallv JSON's np 2 Alltoallv sweep, counts latency and in-flight cost."""
    probe = doc["probes"].get("2") or doc["probes"].get(2)
    a_ar, b_ar = fit_crossing(probe["allreduce"], "allreduce", 2)      # bytes that cross, a second, one way
    a_ag, b_ag = fit_crossing(probe["allgatherv"], "allgatherv", 2)
    p2 = a2a["probes"]["2"]
    a_v, b_v = fit_crossing(p2["alltoallv"], "alltoallv", 2)
    return {"label": "shared memory (here)", "a2a": p2["alltoall"], "a_v": a_v, "b_v": b_v, "a_ar": a_ar, "b_ar": b_ar,
            "a_ag": a_ag, "b_ag": b_ag, "per_message": p2["fit"]["per_message_s"]}


def model(doc, a2a, nets=(ASSUMED,), rpns=(1, 8)):
    rows = {(r["workload"], r["np"]): r for r in doc["rows"]}
    shm = shared_memory(doc, a2a)
    p2 = a2a["probes"]["2"]
    a_ar, b_ar, a_ag, b_ag, a_v, b_v = (shm[k] for k in ("a_ar", "b_ar", "a_ag", "b_ag", "a_v", "b_v"))
    t = update_times()
    t_row, dense_update, t_take = t["row"], t["dense"], t["take"]
    idx = w2_loads.w2_index(max(RANKS) * PER_RANK["W2"])
    counts = {wire: w2_loads.loads(RANKS, sorted(set(rpns) | {1}), idx=idx, wire=wire) for wire in WIRES}
    loads = {P: (c["unique_ids_per_rank"], c["schemes"]["flat"]["grad_max"])
             for (P, R), c in counts["fp32"].items() if R == 1}
    # compute per rank per step at the fixed per-rank batch, from np = 1 (compute_ms covers the global batch)
    comp = {wl: rows[(wl, 1)]["compute_ms_median"] / 1e3 * PER_RANK[wl] / {"W1": 256, "W2": 1024}[wl]
            for wl in ("W1", "W2")}
    # W2 at np = 1 updates ~one slice's worth of rows inside compute_ms; the model adds the rest per P
    legacy = {"measured": (a_ar, b_ar, a_ag, b_ag), "10GbE (assumed)": NET_10GBE * 2}
    measured = (p2["alltoall"], a_v, b_v, a_ar, b_ar)
    sharded_nets = {("sharded", "measured"): measured + (p2["fit"]["per_message_s"],),
                    ("sharded, no overlap", "measured"): measured + (None,)}
    curves, terms = {}, {}
    for net, (aa, ba, ag, bg) in legacy.items():
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
    clusters = cluster(comp, shm, nets, counts, t, rpns)
    inputs = {"allreduce_alpha_us": a_ar * 1e6, "allreduce_GBps": b_ar / 1e9, "allgatherv_alpha_us": a_ag * 1e6,
              "allgatherv_GBps": b_ag / 1e9, "w1_compute_ms_per_rank_step": comp["W1"] * 1e3,
              "w2_compute_ms_per_rank_step": comp["W2"] * 1e3, "w2_row_update_us": t_row * 1e6,
              "w2_dense_update_ms": dense_update * 1e3, "exchange_bookkeeping_flat_us_and_ns_an_id": [t["book_flat"][0] * 1e6, t["book_flat"][1] * 1e9],
              "exchange_bookkeeping_node_us_and_ns_an_id": [t["book_node"][0] * 1e6, t["book_node"][1] * 1e9],
              "bf16_encode_ns_per_element": t["encode"] * 1e9, "bf16_decode_ns_per_element": t["decode"] * 1e9,
              "relay_sum_ns_per_element": t["sum"] * 1e9,
              "networks": {n["label"]: {k: v for k, v in n.items() if k != "label"} for n in nets},
              "alltoallv_alpha_us": a_v * 1e6, "alltoallv_GBps": b_v / 1e9, "bandwidth_convention": CONVENTION,
              "alltoall_counts_us": p2["alltoall"] * 1e6,
              "message_in_flight_us": p2["fit"]["per_message_s"] * 1e6, "w2_row_take_us": t_take * 1e6,
              "w2_counts": {"%d/%d" % k: count_summary(c, counts["bf16"][k]) for k, c in counts["fp32"].items()}}
    return curves, inputs, terms, clusters


def count_summary(c, bf16):
    """The JSON-able part of w2_loads.step_counts (c on the fp32 wire; bf16 the same step on the bf16 wire: its
    bytes beside fp32's)."""
    out = {k: v for k, v in c.items() if k not in ("schemes", "wire")}
    for s, v in c["schemes"].items():
        out[s] = {"inter_node_bytes_per_node": w2_loads.node_bytes(v["inter"]),
                  "inter_node_bytes_per_node_bf16": w2_loads.node_bytes(bf16["schemes"][s]["inter"]),
                  "inter_node_phase_bytes": w2_loads.phase_bytes(v["inter"]),
                  "inter_node_phase_bytes_bf16": w2_loads.phase_bytes(bf16["schemes"][s]["inter"]),
                  "intra_node_bytes_busiest_rank": v["intra"], "inter_node_messages_per_rank": v["inter_messages"],
                  "busiest_owner_takes": v["take_max"], "busiest_owner_gradient_rows": v["grad_max"],
                  "busiest_relay_ids": v["relay_max"]}
    return out


def latest(pattern, required=True):
    found = sorted(glob.glob(os.path.join(RESULTS, pattern)))
    if not found and required:
        raise SystemExit("no scripts/results/%s: run the script that writes it first (see the docstring)" % pattern)
    return found[-1] if found else None

