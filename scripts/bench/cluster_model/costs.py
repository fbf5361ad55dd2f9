"""The cluster model's formulas: what each exchange costs at P ranks, R per node, on a network (the package
docstring's assumptions), and the efficiency they predict."""
import numpy as np

from scripts.bench.cluster_model import w2_loads

W1_PARAMS = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
W2_TABLE, W2_H = (1 << 18) * 64, 64
W2_DENSE_TAIL = 64 + 64 + 1
W2_ROWS_PER_RANK = 3120         # unique gradient rows of a 512-row W2 slice (measured, bench data)
ROW_BYTES = W2_H * 4 + 8
PER_RANK = {"W1": 128, "W2": 512}
RANKS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CLUSTER_RANKS = [8, 16, 32, 64, 128, 256, 512, 1024]
WIRES = ("fp32", "bf16")        # the sharded table's rows on the wire (--wire-rows; mpinn/comm/wire.py)
NET_10GBE = (30e-6, 1.1e9)
ASSUMED = {"label": "10GbE (assumed)", "a2a": 30e-6, "a_v": 30e-6, "b_v": 1.1e9, "a_ar": 30e-6, "b_ar": 1.1e9,
           "per_message": None}


def ring_allreduce(nbytes, P, alpha, B):
    return 0.0 if P == 1 else 2 * (P - 1) / P * nbytes / B + 2 * (P - 1) * alpha


def ring_allgather(total_bytes, P, alpha, B):
    return 0.0 if P == 1 else (P - 1) / P * total_bytes / B + (P - 1) * alpha


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
    c: w2_loads.step_counts (its wire's bytes); t: the measured per-row costs (take, row, unique), for a summing
    scheme the relay's sum (per element), and for a 16-bit wire per-element casts (encode, decode)."""
    return w2_cluster_split(c, scheme, shm, net, t)[0]


FETCH_PHASES = ("rows",)        # what a one-step-stale exchange (--stale-rows 1) moves while the step computes
LATE_PHASES = ("rows", "gradient rows")     # and --stale-rows 2 (the gradient rows' exchange posted too)


def w2_cluster_split(c, scheme, shm, net, t, phases=FETCH_PHASES):
    """({term: seconds}, {term: the seconds of it that travel posted}): the terms of w2_cluster_terms, and of each
    the part a stale exchange overlaps with the compute (stale_step), as mpinn posts it. --stale-rows 1 (phases
    FETCH_PHASES; TableShards.post, NodeShards.post): the rows' Ialltoallv, its messages and bytes (flat: in the
    node and between nodes; node schemes: between nodes, the rows' hand-out inside the node is at the wait).
    --stale-rows 2 (LATE_PHASES): the gradient rows' Ialltoallv too (send_back(wait=False): flat, all of it; node
    schemes, between nodes: the hand-in to the relays and their sum come first, blocking). The counts and the ids
    travel before them, blocking, and the exchange's CPU work (the owner's gather, the relay's dedup and sum, the
    casts) runs on the compute core: they stay in the rest."""
    P, R, N = c["P"], c["R"], c["N"]
    s = c["schemes"][scheme]
    if P == 1:
        return {}, {}
    pb = w2_loads.phase_bytes(s["inter"])
    counts_b = sum(pb.get(n, 0.0) for n in COUNT_PHASES)
    data_b = sum(v for n, v in pb.items() if n not in COUNT_PHASES + ("hot Allgatherv", "dense tail Allreduce"))
    fetch_b = sum(pb[n] for n in phases)
    if s["node_aware"]:
        counts = log2(R) * shm["a2a"] + log2(N) * net["a2a"]       # the counts: per asking rank, N x R
        across = messages(N - 1, net)
        msgs = messages(R - 1, shm) + across                       # one Alltoallv (ids, rows, gradient rows)
        ahead_msgs, ahead_intra = across, 0.0                      # between nodes; inside the node: blocking
    else:
        counts = log2(R) * shm["a2a"] + (log2(P) - log2(R)) * net["a2a"]
        msgs = messages(R - 1, shm) + messages(P - R, net)
        ahead_msgs, ahead_intra = msgs, sum(s["intra"][n] for n in phases)
    intra = s["intra"]
    out = {"counts": counts + counts_b / net["b_v"], "Alltoallv messages": 3 * msgs,
           "Alltoallv bytes, inter-node": data_b / net["b_v"],
           "Alltoallv bytes, intra-node": sum(intra.values()) / shm["b_v"]}
    fetch = {"Alltoallv messages": len(phases) * ahead_msgs, "Alltoallv bytes, inter-node": fetch_b / net["b_v"],
             "Alltoallv bytes, intra-node": ahead_intra / shm["b_v"]}
    if s["hot"]:
        m = c["hot_rows"] * w2_loads.ROW
        out["hot Allgatherv"] = hot_allgatherv(m, P, R, shm, net, pb.get("hot Allgatherv", 0.0))
    out["dense tail Allreduce"] = (log2(R) * (shm["a_ar"] + W2_DENSE_TAIL * 4 / shm["b_ar"])
                                   + log2(N) * net["a_ar"] + pb["dense tail Allreduce"] / net["b_v"])
    k = c["unique_ids_per_rank"]
    out["busiest owner's rows"] = s["take_max"] * t["take"] + max(s["grad_max"] - k, 0) * t["row"]
    out["ids' bookkeeping"] = bookkeeping(c, s, t)
    if s["summed"]:
        out["relay's sum"] = s["relay_max"] * W2_H * t["sum"]
    if c["wire"] != "fp32":
        out["casts (%s)" % c["wire"]] = wire_casts(c, s, t)
    return out, fetch


def bookkeeping(c, s, t):
    """The busiest rank's CPU on the exchange's ids (locating owners, grouping, deduplicating, counting, placing):
    t["book_flat"] or t["book_node"], (fixed seconds, seconds an id) of mpinn's own fetch and send_back at np 1 on
    rows one element wide (scripts/bench/exchange_cpu.py), where each id passes once as an asking rank's, a relay's
    and an owner's; at P ranks counted for the largest of the busiest rank's ids in those roles (an upper bound)."""
    fixed, per_id = t["book_node"] if s["node_aware"] else t["book_flat"]
    return fixed + per_id * max(c["unique_ids_per_rank"], s["take_max"], s["relay_max"])


def stale_step(compute_s, terms, fetch):
    """A stale step: what is posted (fetch: batch s+1's rows, and with --stale-rows 2 batch s-1's gradient rows)
    travels while batch s computes (a progress thread moves the messages), so the step is max(compute, fetch) + the
    rest (the counts and ids, the gradient rows' return where not posted, the dense Allreduce, the hot refresh,
    every CPU term); the synchronous step is compute + fetch + the rest."""
    f = sum(fetch.values())
    return max(compute_s, f) + sum(terms.values()) - f


def wire_casts(c, s, t):
    """The busiest owner's casts for rows rounded on the wire, bf16 or int8 (t: seconds per element to encode,
    decode; per row to gather and encode, take_bf16 or take_int8, beside take, the gather alone, which the owner's
    rows term counts): it encodes the
    rows it answers (as it gathers them: what take_bf16 takes more than take) and its own gradient rows (and rounds
    its replicas of the hot rows it uses), and decodes the rows it receives and the gradient rows it owns. A relay
    passes 16-bit rows on as they came; a summing relay (node-sum) decodes the gradient rows its node's ranks send
    it and encodes the sums it sends on."""
    k = c["unique_ids_per_rank"]
    rows, grads = c["wire"].split("-") if "-" in c["wire"] else (c["wire"],) * 2      # bf16-int8: rows, gradients
    (enc, dec, take), (g_enc, g_dec, _) = cast_times(t, rows), cast_times(t, grads)
    replicas = k * c["hot_share_of_rank_ids"] if s["hot"] else 0.0
    relay = s["relay_max"] * g_dec + s["sum_out_max"] * g_enc if s["summed"] else 0.0
    answer = s["take_max"] * max(take - t["take"], 0.0)
    return answer + W2_H * (replicas * enc + k * g_enc + k * dec + s["grad_max"] * g_dec + relay)


def cast_times(t, fmt):
    """(encode, decode a element, gather and encode a row) of a wire format from t's keys: encode, decode, take_bf16
    (bf16); encode_int8, decode_int8, take_int8 (int8); fp32 casts nothing."""
    if fmt == "fp32":
        return 0.0, 0.0, t["take"]
    sfx = "" if fmt == "bf16" else "_" + fmt
    return t["encode" + sfx], t["decode" + sfx], t["take_" + fmt]


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


def w2_stale_floor_bytes(c, scheme, phases=FETCH_PHASES):
    """(the busiest node's posted bytes, the rest's) a step: what a stale step's floor overlaps and not."""
    inter = c["schemes"][scheme]["inter"]
    return (w2_loads.node_bytes({n: v for n, v in inter.items() if n in phases}),
            w2_loads.node_bytes({n: v for n, v in inter.items() if n not in phases}))


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


def cluster(comp, shm, nets, counts, t, rpns, ranks=None, w1=True):
    """{(workload, scheme, wire, network label, R): {"ranks", "eff": [..], "floor": [..], "terms": {P: {..}}, and
    for W2 "eff_stale", "floor_stale", "fetch": {P: {..}} and the same of --stale-rows 2, "eff_late", "floor_late",
    "posted": {P: {..}}}} at `ranks` (default CLUSTER_RANKS); counts: {wire:
    w2_loads.loads(.., wire=wire)} (W1's wire is fp32: its Allreduce, as today); comp: seconds a rank computes a
    step. The floors: synchronous, compute / max(compute, the node's link bytes / B) (any overlap of everything);
    one-step-stale, compute / (max(compute, fetch bytes / B) + the rest's bytes / B) (stale_step's overlap)."""
    out = {}
    runs = [("W2", scheme, wire) for wire in counts for scheme in w2_loads.SCHEMES]
    runs += [("W1", scheme, "fp32") for scheme in ("flat", "hierarchical")] if w1 else []
    for net in nets:
        for R in rpns:
            ps = [P for P in (CLUSTER_RANKS if ranks is None else ranks) if P % R == 0]
            for wl, scheme, wire in runs:
                cur = out[(wl, scheme, wire, net["label"], R)] = {"ranks": ps, "eff": [], "floor": [], "terms": {}}
                for P in ps:
                    if wl == "W2":
                        c = counts[wire][(P, R)]
                        terms, fetch = w2_cluster_split(c, scheme, shm, net, t)
                        link = w2_floor_bytes(c, scheme) / net["b_v"]
                        for sfx, key, phases in (("_stale", "fetch", FETCH_PHASES), ("_late", "posted", LATE_PHASES)):
                            posted = w2_cluster_split(c, scheme, shm, net, t, phases)[1]
                            f_b, rest_b = w2_stale_floor_bytes(c, scheme, phases)
                            cur.setdefault("eff" + sfx, []).append(comp[wl] / stale_step(comp[wl], terms, posted))
                            cur.setdefault("floor" + sfx, []).append(
                                comp[wl] / (max(comp[wl], f_b / net["b_v"]) + rest_b / net["b_v"]))
                            cur.setdefault(key, {})[P] = posted
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

