"""Predicted data-parallel efficiency of W1 and W2 at 8..1024 ranks, from speeds measured here.

    python -m scripts.bench.cluster_model [--network scripts/results/multihost-probe-DATE.json]
        [--ranks-per-node 1,8] [scripts/results/bench-scaling-DATE.json [scripts/results/bench-alltoallv-DATE.json]]

Inputs (no number is taken from a table; the one assumed network is labelled "assumed"):
  * Allreduce and Allgatherv latency alpha and bandwidth B: the fit t = alpha + n / B over the
    256 B .. 16 MiB sweep that scripts/bench/scaling.py runs at np = 2 (in its JSON);
  * Alltoallv latency and bandwidth (the same fit), the latency of an Alltoall of P counts, and the
    cost of each further message in flight (persistent sends posted together), from
    scripts/bench/alltoallv.py at np = 2 (its JSON), for the sharded table;
    these two files are this machine's shared memory: the cost of a collective INSIDE a node;
  * the network between nodes: the lab's two-host probe, scripts/results/multihost-probe-*.json (the
    newest, or --network FILE): Alltoallv and Allreduce alpha/B fits and the latency of an Alltoall of
    counts, measured with MPI over TCP between network namespaces joined by veths on ONE machine, the
    link's rate shaped (its "link" entry says how); latency is NOT shaped (netem is missing from this
    kernel), so alpha is a veth's + TCP's, not a switch's or a cable's. Without that file only the
    assumed network is modelled. The assumed one: 10 GbE, alpha = 30 us, B = 1.1 GB/s for every
    collective (the model's earlier scenario, kept for before/after comparisons);
  * W2's own data (the peers' generator, hashed; w2_loads.py): P slices of 512 rows, nodes of
    R consecutive ranks: each rank's unique ids, each node's deduplicated union, the hot set of
    --hot-rows auto (ids whose count / rows counted x 512 >= 4, at most 32768, counted over all
    1024 x 512 rows), the rows the busiest owner gathers and the gradient rows it receives, and the
    bytes each node's link carries per step for each scheme (its busier direction);
  * compute time per sample: W1 and W2 at np = 1 in the bench-scaling JSON (the bench's compute_ms,
    forward, backward and update, divided by the global batch);
  * W2's update cost per gradient row, of one dense pass over the table, of gathering a row
    (np.take) and of deduplicating an id (np.unique, the relay's work): timed here.

Assumptions (the model is only as good as these):
  1. Weak scaling, as Horovod measured it: the per-rank batch stays fixed (W1 128 rows, W2 512 rows,
     the np = 2 split of the peers' global batches), so compute per rank per step is constant; all
     R ranks of a node compute at once, so a node's compute per step is one rank's.
  2. R ranks per node (--ranks-per-node), ranks numbered node by node. Inside a node a collective
     costs what it costs here over shared memory (as measured at np = 2: the R ranks' concurrent
     copies are assumed not to slow each other); between nodes it costs the network's alpha per
     message and B for the bytes, and the R ranks of a node SHARE one link: the bytes term is the
     busiest node's bytes (its busier direction; the link is full duplex) / B. The legacy table
     (the first one printed) is one rank per node with the network = this machine's shared memory,
     plus the assumed 10 GbE, as before.
  3. Ring algorithms: Allreduce of n bytes takes 2 (P-1)/P n/B + 2 (P-1) alpha; Allgather(v) of a
     total of m bytes takes (P-1)/P m/B + (P-1) alpha (with nodes: every one of the P - 1 steps waits
     for the step's inter-node hop, P - 1 network alphas). Real MPIs switch to tree/recursive-doubling
     algorithms for small messages (log P latency), so for small n this is pessimistic.
  4. No overlap of communication with compute (mpinn's --overlap measured no gain here; see the
     report): step = compute + exchange (+ W2's update beyond one rank's own rows), and efficiency =
     compute / step, against one rank with no exchange. The floor printed beside each prediction is
     physics, not a model: compute / max(compute, the busiest node's inter-node bytes per step / B),
     the best any overlap of everything could reach; every prediction is at or below it.
  5. Exchanges (legacy table): dense = float32 ring Allreduce of the whole gradient (W2: the table
     too); fp16 = a ring Allreduce of 16-bit words; fp16-allgather = mpinn's own --compress, one
     Allgather of every rank's 16-bit words; sparse (W2) = Allgatherv of every rank's touched rows
     (~3,120 rows of 64 floats + an int64 id per 512-row slice), then each rank applies all P x 3,120
     rows; the density rule switches to dense once the gathered rows exceed a quarter of the table.
  6. Unique rows per rank do not shrink with P, and no rank is slower than another (no stragglers).
  7. W2 sharded (--table sharded), per step, four schemes:
       flat      today's exchange: Alltoall of P counts (Bruck: ceil(log2 P) rounds, the first
                 ceil(log2 R) inside the node), Alltoallv of ids (8 B), rows back (256 B), gradient
                 rows (256 B): each rank has R - 1 peers on its node and P - R off it per Alltoallv;
       node      --shard-exchange node: ids to the node's relay (the rank with the owner's local
                 index; Alltoall of R counts + Alltoallv in the node); the relay sends them, per
                 asking rank, to the N - 1 other relays of its local index (Alltoall of N x R counts,
                 Alltoallv of ids), which answer each node once per distinct row (only the node's
                 unique rows cross); rows back in the node; gradient rows to the relay, then across
                 UNSUMMED along the same counts (one Alltoallv). Inter-node messages per rank 4 (N - 1)
                 against flat's 4 (P - R); at R = 1 it is the flat exchange (mpinn uses flat there);
       hot       --hot-rows auto: ids still all sent (to route gradient rows), rows back only for the
                 tail ids, hot gradient rows to their round-robin owners, then one Allgatherv of the
                 hot block (K x 256 B) by MPICH's choice: recursive doubling below 512 KiB (log2 P
                 rounds, but every rank of a node sends its blocks over the shared link, R times the
                 ring's bytes), ring above (P - 1 steps, each an inter-node hop: assumption 3);
       node+hot  both.
     Every exchange also Allreduces the 129-float dense tail (recursive doubling: ceil(log2 R)
     rounds in the node, ceil(log2 N) between nodes). Messages of one Alltoallv: in the node, the
     measured latency for the first and the measured in-flight cost for each further one; between
     nodes, the network's alpha for every one, one after another (no overlap: the probe does not
     measure messages in flight; a "per_message_s" in its alltoallv fit is used if present), and the
     intra- and inter-node messages of a flat Alltoallv do not overlap either. The busiest owner's
     work (measured per-row costs): gathering the rows it answers, updating the gradient rows beyond
     one slice's, and (node schemes) deduplicating the ids its node's ranks send it as relay.
  8. Legacy "sharded" (shared memory, one rank per node): as the flat scheme with the measured
     in-flight cost between every two messages; "sharded, no overlap": the latency for each.
Horovod's published point: ~90% scaling efficiency at 512 GPUs for Inception V3 and ResNet-101
(Sergeev & Del Balso 2018, "Horovod: fast and easy distributed deep learning in TensorFlow",
arXiv:1802.05799), on 25 GbE RoCE with NVLink-local GPUs and compute of ~100s of ms per step: a
far larger compute-to-communication ratio than W1/W2's milliseconds.
"""
import glob
import json
import os
import time

import numpy as np

from scripts import RESULTS, ROOT
from scripts.bench.cluster_model import w2_loads
from scripts.bench.scaling import fit_alpha_beta

W1_PARAMS = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
W2_TABLE, W2_H = (1 << 18) * 64, 64
W2_DENSE_TAIL = 64 + 64 + 1
W2_ROWS_PER_RANK = 3120         # unique gradient rows of a 512-row W2 slice (measured, bench data)
ROW_BYTES = W2_H * 4 + 8
PER_RANK = {"W1": 128, "W2": 512}
RANKS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CLUSTER_RANKS = [8, 16, 32, 64, 128, 256, 512, 1024]
NET_10GBE = (30e-6, 1.1e9)
ASSUMED = {"label": "10GbE (assumed)", "a2a": 30e-6, "a_v": 30e-6, "b_v": 1.1e9, "a_ar": 30e-6, "b_ar": 1.1e9,
           "per_message": None}


def ring_allreduce(nbytes, P, alpha, B):
    return 0.0 if P == 1 else 2 * (P - 1) / P * nbytes / B + 2 * (P - 1) * alpha


def ring_allgather(total_bytes, P, alpha, B):
    return 0.0 if P == 1 else (P - 1) / P * total_bytes / B + (P - 1) * alpha


def update_times():
    """(seconds per gradient row of the sparse SGD update (fancy-indexed, random rows), seconds of
    one dense SGD update of the whole 2^18 x 64 table, seconds per row of gathering random rows
    (np.take: what an owner does to answer a fetch), seconds per id of np.unique (a relay's dedup))."""
    rng = np.random.default_rng(0)
    table = np.zeros((1 << 18, W2_H), np.float32)
    ids = np.unique(rng.integers(0, 1 << 18, 4000))[:W2_ROWS_PER_RANK]
    rows = rng.standard_normal((ids.size, W2_H)).astype(np.float32)

    def median(f, n=30):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))
    t_row = median(lambda: table.__setitem__(ids, table[ids] - np.float32(0.1) * rows)) / ids.size
    t_take = median(lambda: np.take(table, ids, axis=0)) / ids.size
    mixed = rng.integers(0, 1 << 18, W2_ROWS_PER_RANK)       # a relay gets ~one slice's ids from its node
    t_unique = median(lambda: np.unique(mixed)) / mixed.size
    grad = np.ones_like(table)
    dense = median(lambda: table.__isub__(np.float32(0.1) * grad), 5)
    return t_row, dense, t_take, t_unique


def w2_sharded_terms(P, net, loads, t_take, t_row):
    """The legacy sharded step's exchange terms at P ranks, one per node (seconds), see assumption 8;
    net's per_message None: no overlap between an Alltoallv's messages."""
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


def log2(n):
    return int(np.ceil(np.log2(n))) if n > 1 else 0


def messages(n, net):
    """n messages of one Alltoallv, one after another (or overlapped at net's per_message cost)."""
    if n <= 0:
        return 0.0
    return n * net["a_v"] if net["per_message"] is None else net["a_v"] + (n - 1) * net["per_message"]


COUNT_PHASES = ("counts",)


def w2_cluster_terms(c, scheme, shm, net, t):
    """The W2 sharded step's exchange at P ranks, R per node, one scheme (assumption 7): {term: seconds}.
    c: w2_loads.step_counts; t: the measured per-row costs (take, row, unique)."""
    P, R, N = c["P"], c["R"], c["N"]
    s = c["schemes"][scheme]
    if P == 1:
        return {}
    pb = w2_loads.phase_bytes(s["inter"])
    counts_b = sum(pb.get(n, 0.0) for n in COUNT_PHASES)
    data_b = sum(v for n, v in pb.items() if n not in COUNT_PHASES + ("hot Allgatherv", "dense tail Allreduce"))
    if s["node_aware"]:
        counts = log2(R) * shm["a2a"] + log2(N) * net["a2a"]       # the counts: per asking rank, N x R
        msgs = 3 * messages(R - 1, shm) + 3 * messages(N - 1, net)
    else:
        counts = log2(R) * shm["a2a"] + (log2(P) - log2(R)) * net["a2a"]
        msgs = 3 * (messages(R - 1, shm) + messages(P - R, net))
    out = {"counts": counts + counts_b / net["b_v"], "Alltoallv messages": msgs,
           "Alltoallv bytes, inter-node": data_b / net["b_v"],
           "Alltoallv bytes, intra-node": sum(s["intra"].values()) / shm["b_v"]}
    if s["hot"]:
        m = c["hot_rows"] * w2_loads.ROW
        out["hot Allgatherv"] = hot_allgatherv(m, P, R, shm, net, pb.get("hot Allgatherv", 0.0))
    out["dense tail Allreduce"] = (log2(R) * (shm["a_ar"] + W2_DENSE_TAIL * 4 / shm["b_ar"])
                                   + log2(N) * net["a_ar"] + pb["dense tail Allreduce"] / net["b_v"])
    k = c["unique_ids_per_rank"]
    out["busiest owner's rows"] = (s["take_max"] * t["take"] + max(s["grad_max"] - k, 0) * t["row"]
                                   + s["relay_max"] * t["unique"])
    return out


def hot_allgatherv(m, P, R, shm, net, ring_bytes):
    """The hot block's refresh, an Allgatherv of m bytes in all, as MPICH picks its algorithm: recursive
    doubling (Bruck below 80 KiB if P is no power of two) for m < 512 KiB, ring above. With R ranks per
    node, a ring's P - 1 steps each wait for an inter-node hop (its link carries ring_bytes, from
    w2_loads); recursive doubling's first log2 R rounds stay in the node, and in each of the other
    log2 N rounds all R ranks of a node send their d blocks over its link (R (P - R) / P x m in all)."""
    N = P // R
    if N == 1:
        return ring_allgather(m, P, shm["a_ag"], shm["b_ag"])
    pow2 = P & (P - 1) == 0
    if m >= 512 * 1024 or (not pow2 and m >= 80 * 1024):
        return (P - 1) * net["a_v"] + ring_bytes / net["b_v"]
    intra = log2(R) * shm["a_ag"] + (R - 1) / P * m / shm["b_ag"]
    return intra + log2(N) * net["a_v"] + max(R * (P - R) / P * m, ring_bytes) / net["b_v"]


def w2_floor_bytes(c, scheme):
    return w2_loads.node_bytes(c["schemes"][scheme]["inter"])


def w1_cluster_terms(P, R, shm, net, scheme):
    """W1's dense float32 Allreduce at P ranks, R per node: flat = one ring over all P ranks (each of its
    2 (P-1) steps waits for its inter-node hop); hierarchical = ring reduce in the node, ring Allreduce
    among the N node leaders, broadcast in the node (each intra part costed as a ring Allreduce).
    Returns ({term: seconds}, the busiest node's inter-node bytes per step)."""
    n, N = W1_PARAMS * 4, P // R
    if N == 1:
        return {"intra-node Allreduce": ring_allreduce(n, P, shm["a_ar"], shm["b_ar"])}, 0.0
    if scheme == "flat":
        return ({"Allreduce messages": 2 * (P - 1) * net["a_ar"],
                 "Allreduce bytes, inter-node": 2 * (P - 1) / P * n / net["b_ar"]}, 2 * (P - 1) / P * n)
    return ({"intra-node reduce + broadcast": 2 * ring_allreduce(n, R, shm["a_ar"], shm["b_ar"]),
             "Allreduce messages": 2 * (N - 1) * net["a_ar"],
             "Allreduce bytes, inter-node": 2 * (N - 1) / N * n / net["b_ar"]}, 2 * (N - 1) / N * n)


def read_network(path):
    with open(path) as f:
        doc = json.load(f)
    fits, link = doc["fits"], doc.get("link", {})
    return {"label": "lab %s (%s)" % (link.get("rate", "?"), os.path.basename(path)),
            "a2a": fits["alltoall_counts_s"], "a_v": fits["alltoallv"]["alpha_s"],
            "b_v": fits["alltoallv"]["bandwidth_Bps"], "a_ar": fits["allreduce"]["alpha_s"],
            "b_ar": fits["allreduce"]["bandwidth_Bps"], "per_message": fits["alltoallv"].get("per_message_s"),
            "link": link}


def cluster(comp, shm, nets, counts, t, rpns):
    """{(workload, scheme, network label, R): {"eff": [..], "floor": [..], "terms": {P: {..}}}} at CLUSTER_RANKS."""
    out = {}
    for net in nets:
        for R in rpns:
            ps = [P for P in CLUSTER_RANKS if P % R == 0]
            for wl, schemes in (("W2", w2_loads.SCHEMES), ("W1", ("flat", "hierarchical"))):
                for scheme in schemes:
                    cur = out[(wl, scheme, net["label"], R)] = {"ranks": ps, "eff": [], "floor": [], "terms": {}}
                    for P in ps:
                        if wl == "W2":
                            terms = w2_cluster_terms(counts[(P, R)], scheme, shm, net, t)
                            link = w2_floor_bytes(counts[(P, R)], scheme) / net["b_v"]
                        else:
                            terms, nbytes = w1_cluster_terms(P, R, shm, net, scheme)
                            link = nbytes / net["b_ar"]
                        cur["eff"].append(comp[wl] / (comp[wl] + sum(terms.values())))
                        cur["floor"].append(comp[wl] / max(comp[wl], link))
                        cur["terms"][P] = terms
    return out


def dominant(terms):
    return max(terms, key=terms.get) if terms else "-"


def predict(compute_s, exchange_s):
    """Efficiency at each P: per-rank compute fixed, exchange_s(P) added."""
    return [compute_s / (compute_s + exchange_s(P)) for P in RANKS]


def model(doc, a2a, nets=(ASSUMED,), rpns=(1, 8)):
    rows = {(r["workload"], r["np"]): r for r in doc["rows"]}
    probe = doc["probes"].get("2") or doc["probes"].get(2)
    a_ar, b_ar = fit_alpha_beta(probe["allreduce"])
    a_ag, b_ag = fit_alpha_beta(probe["allgatherv"])
    p2 = a2a["probes"]["2"]
    a_v, b_v = fit_alpha_beta(p2["alltoallv"])
    t_row, dense_update, t_take, t_unique = update_times()
    counts = w2_loads.loads(RANKS, sorted(set(rpns) | {1}))
    loads = {P: (c["unique_ids_per_rank"], c["schemes"]["flat"]["grad_max"]) for (P, R), c in counts.items() if R == 1}
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
    shm = {"label": "shared memory (here)", "a2a": p2["alltoall"], "a_v": a_v, "b_v": b_v, "a_ar": a_ar, "b_ar": b_ar,
           "a_ag": a_ag, "b_ag": b_ag, "per_message": p2["fit"]["per_message_s"]}
    clusters = cluster(comp, shm, nets, counts, {"take": t_take, "row": t_row, "unique": t_unique}, rpns)
    inputs = {"allreduce_alpha_us": a_ar * 1e6, "allreduce_GBps": b_ar / 1e9, "allgatherv_alpha_us": a_ag * 1e6,
              "allgatherv_GBps": b_ag / 1e9, "w1_compute_ms_per_rank_step": comp["W1"] * 1e3,
              "w2_compute_ms_per_rank_step": comp["W2"] * 1e3, "w2_row_update_us": t_row * 1e6,
              "w2_dense_update_ms": dense_update * 1e3, "w2_id_unique_us": t_unique * 1e6,
              "networks": {n["label"]: {k: v for k, v in n.items() if k != "label"} for n in nets},
              "alltoallv_alpha_us": a_v * 1e6, "alltoallv_GBps": b_v / 1e9, "alltoall_counts_us": p2["alltoall"] * 1e6,
              "message_in_flight_us": p2["fit"]["per_message_s"] * 1e6, "w2_row_take_us": t_take * 1e6,
              "w2_counts": {"%d/%d" % k: count_summary(c) for k, c in counts.items()}}
    return curves, inputs, terms, clusters


def count_summary(c):
    """The JSON-able part of w2_loads.step_counts."""
    out = {k: v for k, v in c.items() if k != "schemes"}
    for s, v in c["schemes"].items():
        out[s] = {"inter_node_bytes_per_node": w2_loads.node_bytes(v["inter"]),
                  "inter_node_phase_bytes": w2_loads.phase_bytes(v["inter"]),
                  "intra_node_bytes_busiest_rank": v["intra"], "inter_node_messages_per_rank": v["inter_messages"],
                  "busiest_owner_takes": v["take_max"], "busiest_owner_gradient_rows": v["grad_max"],
                  "busiest_relay_ids": v["relay_max"]}
    return out


def latest(pattern, required=True):
    found = sorted(glob.glob(os.path.join(RESULTS, pattern)))
    if not found and required:
        raise SystemExit("no scripts/results/%s: run the script that writes it first (see the docstring)" % pattern)
    return found[-1] if found else None


def print_cluster(clusters, inputs, nets, rpns):
    comp = inputs["w2_compute_ms_per_rank_step"]
    print("\nW2 sharded data, per step (%s): unique ids per rank, each node's union (/ the sum of its ranks'), "
          "hot rows (auto) and their share of a rank's ids; inter-node MB per node per step and the busiest "
          "owner's rows (gathered / gradient) per scheme:" % "P/R")
    print("| P/R | ids/rank | node union | hot rows | hot share | " + " | ".join(w2_loads.SCHEMES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(w2_loads.SCHEMES))
    for key, c in inputs["w2_counts"].items():
        if key.split("/")[0] in ("64", "1024"):
            print("| %s | %.0f | %.0f (%.2f) | %d | %.1f%% | %s |" % (
                key, c["unique_ids_per_rank"], c["node_union_mean"], c["node_union_over_ranks"], c["hot_rows"],
                100 * c["hot_share_of_rank_ids"], " | ".join(
                    "%.2f MB, %d/%d" % (c[s]["inter_node_bytes_per_node"] / 1e6, c[s]["busiest_owner_takes"],
                                        c[s]["busiest_owner_gradient_rows"]) for s in w2_loads.SCHEMES)))
    for net in nets:
        for R in rpns:
            rows = [(k, v) for k, v in clusters.items() if k[2] == net["label"] and k[3] == R]
            ps = rows[0][1]["ranks"]
            print("\n%s, %d rank(s) per node: predicted efficiency (floor: compute / max(compute, link bytes / B))"
                  % (net["label"], R))
            print("| workload | scheme | " + " | ".join("P=%d" % P for P in ps) + " |")
            print("|---|---|" + "---|" * len(ps))
            for (wl, scheme, _, _), v in rows:
                print("| %s | %s | %s |" % (wl, scheme, " | ".join(
                    "%.0f%% (%.0f%%)" % (100 * e, 100 * f) for e, f in zip(v["eff"], v["floor"]))))
    R = max(rpns)
    print("\nW2 sharded at R = %d ranks per node, compute %.2f ms per rank per step: each scheme, its floor, "
          "its dominant term (ms)" % (R, comp))
    print("| network | P | scheme | efficiency | floor | inter msgs/rank | inter MB/node | dominant term |")
    print("|---|---|---|---|---|---|---|---|")
    for net in nets:
        for P in (64, 1024):
            c = inputs["w2_counts"]["%d/%d" % (P, R)]
            for s in w2_loads.SCHEMES:
                v = clusters[("W2", s, net["label"], R)]
                i, t = v["ranks"].index(P), v["terms"][P]
                print("| %s | %d | %s | %.1f%% | %.1f%% | %d | %.2f | %s %.2f |" % (
                    net["label"], P, s, 100 * v["eff"][i], 100 * v["floor"][i], c[s]["inter_node_messages_per_rank"],
                    c[s]["inter_node_bytes_per_node"] / 1e6, dominant(t), 1e3 * t[dominant(t)]))
    print("\nW2 sharded, before (flat) and after (the best scheme), R = %d:" % R)
    print("| network | P | before | floor | dominant | after (scheme) | floor | dominant |")
    print("|---|---|---|---|---|---|---|---|")
    for net in nets:
        for P in (64, 1024):
            got = {s: clusters[("W2", s, net["label"], R)] for s in w2_loads.SCHEMES}
            i = got["flat"]["ranks"].index(P)
            best = max(w2_loads.SCHEMES, key=lambda s: got[s]["eff"][i])
            cell = ["%.1f%% | %.1f%% | %s" % (100 * got[s]["eff"][i], 100 * got[s]["floor"][i],
                                              dominant(got[s]["terms"][P])) for s in ("flat", best)]
            print("| %s | %d | %s | %s |" % (net["label"], P, cell[0], cell[1].replace(" |", " (%s) |" % best, 1)))


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m scripts.bench.cluster_model", description=__doc__.split("\n")[0])
    p.add_argument("scaling", nargs="?", help="scripts.bench.scaling's JSON (default: the newest in scripts/results)")
    p.add_argument("alltoallv", nargs="?", help="scripts.bench.alltoallv's JSON (default: the newest)")
    p.add_argument("--network", help="the lab's multihost probe JSON (default: the newest "
                   "scripts/results/multihost-probe-*.json; without one, only the assumed 10 GbE)")
    p.add_argument("--ranks-per-node", default="1,8", help="R values, comma-separated (default 1,8)")
    args = p.parse_args(argv)
    scaling = args.scaling or latest("bench-scaling-2*.json")
    a2a_path = args.alltoallv or latest("bench-alltoallv-*.json")
    net_path = args.network or latest("multihost-probe-*.json", required=False)
    rpns = sorted({int(x) for x in args.ranks_per_node.split(",")})
    if any(R < 1 or 1024 % R for R in rpns):
        p.error("--ranks-per-node: each R must divide 1024")
    for path in (scaling, a2a_path) + ((net_path,) if net_path else ()):
        if not os.path.exists(path):
            p.error("no such measurement file: %s (run scripts.bench.scaling and scripts.bench.alltoallv)" % path)
    with open(scaling) as f:
        doc = json.load(f)
    with open(a2a_path) as f:
        a2a = json.load(f)
    nets = ([read_network(net_path)] if net_path else []) + [ASSUMED]
    curves, inputs, terms, clusters = model(doc, a2a, nets, rpns)
    print(__doc__.split("Inputs (")[0].strip())
    print("inputs (from %s, %s%s and timed now): %s" % (
        os.path.relpath(scaling, ROOT), os.path.relpath(a2a_path, ROOT), ", " + net_path if net_path else "",
        json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in inputs.items()
                    if k != "w2_counts"})))
    if not net_path:
        print("NOTE: no scripts/results/multihost-probe-*.json and no --network: only the assumed 10 GbE is modelled")
    print("assumptions: weak scaling at fixed per-rank batch, ring collectives, no overlap, no stragglers; "
          "see the docstring")
    show = [8, 64, 512, 1024]
    print("\nLegacy (one rank per node; network = this machine's shared memory, or the assumed 10 GbE):")
    print("| workload | exchange | network | " + " | ".join("P=%d" % P for P in show) + " |")
    print("|---|---|---|" + "---|" * len(show))
    for (wl, ex, net), eff in curves.items():
        print("| %s | %s | %s | %s |" % (wl, ex, net, " | ".join("%.0f%%" % (100 * eff[RANKS.index(P)]) for P in show)))
    print("| Horovod (Inception V3 / ResNet-101, 25 GbE, GPUs) | fp32 ring allreduce | published | - | - | ~90% | - |")
    print("\nW2 sharded (legacy), per step (ms) against compute %.2f ms per rank:" % inputs["w2_compute_ms_per_rank_step"])
    names = list(next(iter(next(iter(terms.values())).values())))
    print("| exchange, network | P | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for net, by_p in terms.items():
        for P, t in by_p.items():
            print("| %s | %d | %s |" % (net, P, " | ".join("%.3f" % (1e3 * t[n]) for n in names)))
    print_cluster(clusters, inputs, nets, rpns)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(13, 9), sharey=True)
    for ax, wl in zip(axes[0], ("W1", "W2")):
        for (w, ex, net), eff in curves.items():
            if w == wl:
                ax.plot(RANKS, [100 * e for e in eff], "-" if net == "measured" else "--", marker=".",
                        label="%s, %s" % (ex, net))
        ax.plot([512], [90], "k*", ms=14, label="Horovod, 512 GPUs (Sergeev & Del Balso 2018)")
        ax.set_title("%s, one rank per node (per-rank batch %d)" % (wl, PER_RANK[wl]))
    for ax, wl in zip(axes[1], ("W1", "W2")):
        for (w, s, net, R), v in clusters.items():
            if w == wl:
                ax.plot(v["ranks"], [100 * e for e in v["eff"]], "--" if "assumed" in net else "-",
                        marker="." if R == 1 else "x", label="%s, R=%d, %s" % (s, R, net))
        ax.set_title("%s, R ranks per node: shared memory inside, network between" % wl)
    for ax in axes.ravel():
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.legend(fontsize=6, loc="lower left")
        ax.grid(alpha=0.3)
        ax.set_ylabel("scaling efficiency, %")
    fig.suptitle("Cluster model: predicted efficiency, weak scaling (solid: measured, dashed: assumed 10 GbE)")
    fig.tight_layout()
    stamp = time.strftime("%Y-%m-%d")
    png = os.path.join(RESULTS, "cluster-model-%s.png" % stamp)
    fig.savefig(png, dpi=110)
    with open(os.path.join(RESULTS, "cluster-model-%s.json" % stamp), "w") as f:
        json.dump({"ranks": RANKS, "inputs": inputs,
                   "source": [os.path.relpath(p, ROOT) if p.startswith(ROOT) else p
                              for p in (scaling, a2a_path) + ((net_path,) if net_path else ())],
                   "curves": [{"workload": w, "exchange": e, "network": n, "efficiency": v}
                              for (w, e, n), v in curves.items()],
                   "w2_sharded_terms_s": {net: {str(P): t for P, t in by_p.items()} for net, by_p in terms.items()},
                   "cluster": [{"workload": w, "scheme": s, "network": n, "ranks_per_node": R, "ranks": v["ranks"],
                                "efficiency": v["eff"], "floor": v["floor"],
                                "terms_s": {str(P): t for P, t in v["terms"].items()}}
                               for (w, s, n, R), v in clusters.items()]},
                  f, indent=1)
    print("\nwrote %s and its .json" % os.path.relpath(png, ROOT))


if __name__ == "__main__":
    main()
