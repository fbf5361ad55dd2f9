"""W2's sharded-table exchange counted from W2's own data, for the cluster model (scripts/bench/cluster_model).

    python -m scripts.bench.cluster_model.w2_loads [--ranks 64,1024] [--ranks-per-node 1,8] [--per-rank 512]
        [--wire fp32|bf16] [--steps FIRST:STOP]

P slices of per_rank rows (rank r: rows r*per_rank ..), contiguous nodes of R ranks (rank r on node
r // R, local index r % R), owners by contiguous id ranges (mpinn.comm.shard.TableShards) except the
hot rows (hot row i, most frequent first, owned by rank i % P). Counted per step: each rank's unique
ids, each node's deduplicated union, the hot set (the auto rule), the busiest owner's rows, and for
each scheme (flat, node, node-sum, hot, node+hot) the bytes each node sends and receives over its network link
(out, in per node) and each rank's shared-memory bytes inside its node. Counts are int64 (8 B); ids and rows
as --wire-rows sends them (mpinn/comm/wire.py): fp32, ids int64 (8 B) and rows of 64 float32 (256 B), or bf16,
ids int32 (4 B) and rows of 64 bfloat16 (128 B); the hot rows' refresh and the dense tail stay float32.
--steps: the bytes all nodes send a step over the steps of a benchmark run (its batches, in its order), to set
beside the bytes a lab run measures on its hosts' links (scripts/bench/multihost.py).
"""
import numpy as np

TABLE_ROWS, WIDTH, COUNT = 1 << 18, 64, 8
ROW = WIDTH * 4                  # a float32 row: the hot rows' refresh (and the fp32 wire's rows)
HOT_CAP = 32768                  # auto's ceiling: 8 MiB of float32 rows at width 64
TAIL = 64 + 64 + 1               # W2's dense parameters (Allreduce'd as today)
SCHEMES = ("flat", "node", "node-sum", "hot", "node+hot")


def w2_index(n):
    """W2's hashed ids, (n, 20) int64, from the peers' generator."""
    from mpinn.bench.workloads import make_w2_codes, w2_hashed_indices
    return w2_hashed_indices(make_w2_codes(n)[0])


def wire_bytes(wire="fp32"):
    """(id bytes, row bytes, gradient row bytes) of W2's table on the wire --wire-rows names (mpinn/comm/wire.py)."""
    from mpinn.comm.wire import wires
    rows, grads = wires(wire, TABLE_ROWS)
    return rows.id_bytes, rows.row_bytes(WIDTH, np.float32), grads.row_bytes(WIDTH, np.float32)


HOT_EXPECT = 4                   # auto's threshold (mpinn/training/hot.py)


def auto_hot(idx, per_rank, cap=HOT_CAP, expect=HOT_EXPECT):
    """--hot-rows auto: the ids whose count / rows counted x per_rank >= expect (expected that often in
    a rank's slice per step), most frequent first (ties: smaller id first), at most cap."""
    ids, c = np.unique(np.asarray(idx).ravel(), return_counts=True)
    keep = c * per_rank >= expect * np.asarray(idx).shape[0]          # integers: no rounding at the boundary
    ids, c = ids[keep], c[keep]
    return ids[np.lexsort((ids, -c))][:cap]


def owner_table(P, hot=(), n_rows=TABLE_ROWS):
    """The owner rank of every row id: contiguous ranges (split_counts), hot row i -> rank i % P."""
    from mpinn.comm.buffers import split_counts
    own = np.repeat(np.arange(P, dtype=np.int64), split_counts(n_rows, P))
    hot = np.asarray(hot, np.int64)
    own[hot] = np.arange(hot.size) % P
    return own


def rank_ids(idx, P, per_rank):
    """(rank, id) of every rank's unique ids, rank-major, each rank's ids sorted."""
    s = np.sort(np.asarray(idx)[:P * per_rank].reshape(P, -1), axis=1)
    keep = np.ones(s.shape, bool)
    keep[:, 1:] = s[:, 1:] != s[:, :-1]
    return np.nonzero(keep)[0].astype(np.int64), s[keep]


def _flow(src, dst, n, w, on=None):
    """(bytes out, bytes in) per endpoint for transfers src -> dst of w bytes each (where `on`)."""
    if on is not None:
        src, dst = src[on], dst[on]
    return (np.bincount(src, minlength=n) * float(w), np.bincount(dst, minlength=n) * float(w))


def step_counts(rank, ids, P, R, hot=(), n_rows=TABLE_ROWS, wire="fp32"):
    """One step's exchange at P ranks, R per node (P % R == 0), from the (rank, id) pairs of rank_ids, its ids and
    rows as `wire` sends them (wire_bytes).

    Returns counts (per-rank unique ids, per-node union, hot share, the busiest owner's rows) and for
    each scheme: 'inter' {phase: (out, in) bytes per node}, 'intra' {phase: bytes of the busiest rank
    (max of sent, received) to/from the other ranks of its node}, 'inter_messages' per rank per step,
    'take_max' (rows the busiest owner gathers), 'grad_max' (gradient rows the busiest owner receives),
    'relay_max' (ids the busiest relay deduplicates, node schemes), 'summed' and 'sum_out_max' (node-sum: the
    gradient rows the busiest relay sends across once summed, one per distinct row of its node owned off it).

    node-sum is the node exchange with the gradient rows summed at the relay before they cross: between nodes the
    ids and gradient rows go once per (distinct row of the node, owner node), as the rows fetched do, and the
    counts once per relay pair (R x (N - 1) a node, not R x R x (N - 1)); inside the node nothing changes."""
    assert P % R == 0, (P, R)
    N, hot = P // R, np.asarray(hot, np.int64)
    id_bytes, row_bytes, grad_bytes = wire_bytes(wire)
    k = np.bincount(rank, minlength=P)
    ishot = np.zeros(n_rows, bool)
    ishot[hot] = True
    h = ishot[ids]
    # node-level dedup: the unique (node, id) pairs, what the relays send over the network
    node_s = rank // R
    _, first = np.unique(node_s * n_rows + ids, return_index=True)
    union = np.bincount(node_s[first], minlength=N)
    out = {"P": P, "R": R, "N": N, "unique_ids_per_rank": float(k.mean()), "unique_ids_max": int(k.max()),
           "node_union_mean": float(union.mean()), "node_union_over_ranks": float(union.sum() / k.sum()),
           "hot_rows": int(hot.size), "hot_share_of_rank_ids": float(h.mean()),
           "tail_ids_per_rank": float((~h).sum() / P), "wire": wire, "schemes": {}}
    for scheme in SCHEMES:
        with_hot = "hot" in scheme and hot.size > 0 and P > 1
        node = scheme.startswith("node") and R > 1        # at R = 1 node-aware is the flat exchange
        summed = node and "sum" in scheme
        own = owner_table(P, hot if with_hot else (), n_rows)
        o = own[ids]
        cold = ~h if with_hot else np.ones(ids.size, bool)
        off = node_s != o // R
        inter, intra = {}, {}
        per_node = np.full(N, 1.0)
        if not node:
            inter["counts"] = (per_node * R * (P - R) * COUNT,) * 2
            inter["ids"] = _flow(node_s, o // R, N, id_bytes, off)
            inter["rows"] = _flow(o // R, node_s, N, row_bytes, off & cold)
            inter["gradient rows"] = _flow(node_s, o // R, N, grad_bytes, off)
            near = ~off & (rank != o)
            intra["ids"] = _flow(rank, o, P, id_bytes, near)
            intra["rows"] = _flow(o, rank, P, row_bytes, near & cold)
            intra["gradient rows"] = _flow(rank, o, P, grad_bytes, near)
            messages = 4 * (P - R)
            take = np.bincount(o[cold], minlength=P)
            relay_max = sum_out = 0
        else:
            relay = node_s * R + o % R                     # the rank of the node with the owner's local index
            near = relay != rank
            intra["ids"] = _flow(rank, relay, P, id_bytes, near)
            intra["rows"] = _flow(relay, rank, P, row_bytes, near & cold)
            intra["gradient rows"] = _flow(rank, relay, P, grad_bytes, near)
            fo, fs, fcold = o[first], node_s[first], cold[first]
            foff = fs != fo // R
            # between nodes, 4 exchanges as the flat one's, each with N - 1 peers: counts per asking rank
            # (R x R per node pair), the ids once per asking rank, the rows once per node, the gradient
            # rows once per asking rank (unsummed: the owner sums them in rank order)
            inter["counts"] = (per_node * R * R * (N - 1) * COUNT,) * 2
            inter["ids"] = _flow(node_s, o // R, N, id_bytes, off)
            inter["rows"] = _flow(fo // R, fs, N, row_bytes, foff & fcold)
            inter["gradient rows"] = _flow(node_s, o // R, N, grad_bytes, off)
            if summed:                                     # summed at the relay: one per distinct row of the node
                inter["counts"] = (per_node * R * (N - 1) * COUNT,) * 2
                inter["ids"] = _flow(fs, fo // R, N, id_bytes, foff)
                inter["gradient rows"] = _flow(fs, fo // R, N, grad_bytes, foff)
            messages = 4 * (N - 1)
            take = np.bincount(fo[fcold], minlength=P)
            relay_max = int(np.bincount(relay, minlength=P).max())
            sum_out = int(np.bincount((fs * R + fo % R)[foff], minlength=P).max()) if summed else 0
        if with_hot and N > 1:
            # the refreshed hot block: a ring Allgatherv over the P ranks (ordered by node); a node's
            # link brings in every other node's hot rows, and passes on all but the next node's
            mine = np.bincount(own[hot] // R, minlength=N)
            inter["hot Allgatherv"] = ((hot.size - np.roll(mine, -1)) * ROW, (hot.size - mine) * ROW)
        rounds = int(np.ceil(np.log2(N))) if N > 1 else 0
        inter["dense tail Allreduce"] = (per_node * rounds * TAIL * 4,) * 2
        grad = np.bincount(fo if summed else o, minlength=P)
        out["schemes"][scheme] = {
            "inter": {n: (np.asarray(a, float), np.asarray(b, float)) for n, (a, b) in inter.items()},
            "intra": {n: float(np.maximum(a, b).max()) for n, (a, b) in intra.items()},
            "inter_messages": messages, "hot": bool(with_hot), "node_aware": bool(node),
            "take_max": int(take.max()), "grad_max": int(grad.max()), "relay_max": relay_max,
            "summed": bool(summed), "sum_out_max": sum_out}
    return out


def phase_bytes(inter):
    """{phase: bytes of the busiest node's busier direction} for one scheme's 'inter'."""
    return {n: float(np.maximum(a, b).max()) for n, (a, b) in inter.items()}


def node_bytes(inter):
    """What crosses the busiest node's link per step, its busier direction (the link is full duplex)."""
    a = sum(v[0] for v in inter.values())
    b = sum(v[1] for v in inter.values())
    return float(np.maximum(a, b).max())


def link_bytes(inter):
    """{phase: bytes all nodes send over their links} (each crosses one link out: what the hosts' tx counts)."""
    return {n: float(a.sum()) for n, (a, _) in inter.items()}


def bench_steps(P, R, per_rank, steps, wire="fp32"):
    """{scheme: {phase: bytes all nodes send a step}}, the mean over mpinn.bench's steps `steps` at P ranks, R per
    node, per_rank rows a rank: step s takes W2's rows [k B, k B + B), B = P per_rank, k = s mod (W2_N // B) (the
    bench's BenchOrder), the hot set by the auto rule over all W2_N rows (the bench counts it over them too)."""
    from mpinn.bench.workloads import W2_N
    idx, B = w2_index(W2_N), P * per_rank
    hot = auto_hot(idx, per_rank)
    total = {}
    for s in steps:
        k = s % (W2_N // B)
        c = step_counts(*rank_ids(idx[k * B:(k + 1) * B], P, per_rank), P, R, hot, wire=wire)
        for scheme, v in c["schemes"].items():
            for phase, nbytes in link_bytes(v["inter"]).items():
                total.setdefault(scheme, {}).setdefault(phase, 0.0)
                total[scheme][phase] += nbytes / len(steps)
    return total


def loads(ranks, rpns, per_rank=512, idx=None, wire="fp32"):
    """{(P, R): step_counts} for W2's data on `wire`, the hot set by the auto rule over the whole data."""
    idx = w2_index(max(ranks) * per_rank) if idx is None else idx
    hot = auto_hot(idx, per_rank)
    out = {}
    for P in ranks:
        rank, ids = rank_ids(idx, P, per_rank)
        for R in rpns:
            if P % R == 0 and P >= R:
                out[(P, R)] = step_counts(rank, ids, P, R, hot if P > 1 else (), wire=wire)
    return out


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="64,1024")
    p.add_argument("--ranks-per-node", default="1,8")
    p.add_argument("--per-rank", type=int, default=512)
    p.add_argument("--wire", default="fp32", choices=("fp32", "bf16", "int8", "bf16-int8", "int8-bf16"),
                   help="ids and rows as --wire-rows sends them")
    p.add_argument("--steps", metavar="FIRST:STOP",
                   help="instead: all nodes' bytes a step, the mean over mpinn.bench's steps FIRST..STOP-1 (its "
                        "batches of P x per-rank rows in its order: a lab run's timed steps, e.g. 30:300)")
    a = p.parse_args(argv)
    if a.steps:
        first, stop = (int(x) for x in a.steps.split(":"))
        for P in (int(x) for x in a.ranks.split(",")):
            for R in (int(x) for x in a.ranks_per_node.split(",")):
                for s, by in bench_steps(P, R, a.per_rank, range(first, stop), a.wire).items():
                    ex = sum(v for n, v in by.items() if n != "dense tail Allreduce")
                    print("P=%d R=%d %s %-8s bytes a step sent between nodes, all nodes: exchange %.0f (%s), "
                          "dense tail %.0f" % (P, R, a.wire, s, ex, ", ".join(
                              "%s %.0f" % (n, v) for n, v in by.items() if n != "dense tail Allreduce"),
                              by["dense tail Allreduce"]))
        return
    for (P, R), c in loads([int(x) for x in a.ranks.split(",")], [int(x) for x in a.ranks_per_node.split(",")],
                           a.per_rank, wire=a.wire).items():
        print("P=%d R=%d: unique ids/rank %.0f, node union %.0f (%.2f of the ranks' ids), hot %d rows = %.1f%% of "
              "a rank's ids" % (P, R, c["unique_ids_per_rank"], c["node_union_mean"], c["node_union_over_ranks"],
                                c["hot_rows"], 100 * c["hot_share_of_rank_ids"]))
        for s, v in c["schemes"].items():
            print("   %-8s inter-node MB/node/step %.3f, messages/rank %d, busiest owner takes %d / gets %d "
                  "gradient rows" % (s, node_bytes(v["inter"]) / 1e6, v["inter_messages"], v["take_max"], v["grad_max"]))


if __name__ == "__main__":
    main()
