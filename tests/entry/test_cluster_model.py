"""The cluster model (scripts/bench/cluster_model: costs.py and w2_loads.py): the counts against brute force on
small id sets, the auto hot rule against a hand count, the schemes' message formulas, and the floor's bounds
(no MPI)."""
import numpy as np
import pytest

from scripts.bench.cluster_model import costs, w2_loads


def small_idx(rows, cols=3, seed=0, high=1 << 18):
    """Zipf-ish ids: a few very common, most rare (so dedup and the hot rule both have something to do)."""
    rng = np.random.default_rng(seed)
    common = rng.integers(0, high, 12)
    idx = rng.integers(0, high, (rows, cols))
    pick = rng.random((rows, cols)) < 0.5
    idx[pick] = common[rng.integers(0, common.size, int(pick.sum()))]
    return idx


def contiguous_owner(i, P):
    """Plain: rows split as evenly as possible, the first n % P ranks one more (split_counts)."""
    base, extra = divmod(w2_loads.TABLE_ROWS, P)
    edge = extra * (base + 1)
    return i // (base + 1) if i < edge else extra + (i - edge) // base


def test_unique_ids_and_node_union_against_sets():
    P, R, per = 8, 4, 6
    idx = small_idx(P * per)
    rank, ids = w2_loads.rank_ids(idx, P, per)
    c = w2_loads.step_counts(rank, ids, P, R)
    slices = [set(idx[r * per:(r + 1) * per].ravel().tolist()) for r in range(P)]
    unions = [set().union(*slices[n * R:(n + 1) * R]) for n in range(P // R)]
    assert c["unique_ids_per_rank"] == pytest.approx(np.mean([len(s) for s in slices]))
    assert c["node_union_mean"] == pytest.approx(np.mean([len(u) for u in unions]))
    assert c["node_union_over_ranks"] < 1        # the common ids are shared inside a node
    # the node scheme's fetched rows: each node's union, less the ids its own ranks own, one row each
    _, into = c["schemes"]["node"]["inter"]["rows"]
    want = [w2_loads.ROW * sum(1 for i in u if contiguous_owner(i, P) // R != n) for n, u in enumerate(unions)]
    assert into.tolist() == want
    # flat: every rank's ids owned off its node
    out, _ = c["schemes"]["flat"]["inter"]["ids"]
    want = [8 * sum(1 for r in range(n * R, (n + 1) * R) for i in slices[r] if contiguous_owner(i, P) // R != n)
            for n in range(P // R)]
    assert out.tolist() == want


def test_auto_hot_rule_by_hand():
    # 6 rows counted, a rank's slice 3 rows, expected once: hot = count x 3 >= 6, i.e. seen at least twice
    idx = np.array([[5, 9], [5, 7], [5, 9], [2, 7], [8, 1], [4, 3]])
    # counts: 5:3, 9:2, 7:2, the rest 1; most frequent first, ties by the smaller id
    assert w2_loads.auto_hot(idx, 3, expect=1).tolist() == [5, 7, 9]
    assert w2_loads.auto_hot(idx, 2, expect=1).tolist() == [5]                 # count x 2 >= 6: only 5
    assert w2_loads.auto_hot(idx, 3, cap=2, expect=1).tolist() == [5, 7]
    assert w2_loads.auto_hot(idx, 6, expect=1).tolist() == [5, 7, 9, 1, 2, 3, 4, 8]
    # auto's own rule: expected 4 times in a slice: count x 12 >= 4 x 6, i.e. seen at least twice
    assert w2_loads.auto_hot(idx, 12).tolist() == [5, 7, 9]
    assert w2_loads.auto_hot(idx, 8).tolist() == [5]                             # count x 8 >= 24


def test_hot_owners_round_robin_and_the_busiest_owner():
    P, per = 4, 5
    idx = small_idx(P * per, seed=3)
    hot = w2_loads.auto_hot(idx, per, expect=1)
    assert hot.size > 0
    own = w2_loads.owner_table(P, hot)
    for i, h in enumerate(hot):
        assert own[h] == i % P
    rank, ids = w2_loads.rank_ids(idx, P, per)
    c = w2_loads.step_counts(rank, ids, P, 1, hot)
    hs = set(hot.tolist())
    owner = lambda i: int(own[i]) if i in hs else contiguous_owner(i, P)  # noqa: E731
    grad, take = np.zeros(P, int), np.zeros(P, int)
    for r in range(P):
        for i in set(idx[r * per:(r + 1) * per].ravel().tolist()):
            grad[owner(i)] += 1
            take[owner(i)] += i not in hs
    assert c["schemes"]["hot"]["grad_max"] == grad.max()
    assert c["schemes"]["hot"]["take_max"] == take.max()
    assert c["hot_share_of_rank_ids"] == pytest.approx(
        np.mean([i in hs for r in range(P) for i in set(idx[r * per:(r + 1) * per].ravel().tolist())]))


@pytest.mark.parametrize("P,R", [(16, 4), (64, 8), (8, 8)])
def test_inter_node_message_counts(P, R):
    idx = small_idx(P * 4)
    rank, ids = w2_loads.rank_ids(idx, P, 4)
    c = w2_loads.step_counts(rank, ids, P, R)
    N = P // R
    assert c["schemes"]["node"]["inter_messages"] == 4 * (N - 1)
    assert c["schemes"]["flat"]["inter_messages"] == 4 * (P - R)
    # the cost model sends that many inter-node messages: 3 Alltoallv of N - 1 (plus Bruck's log2 N for
    # the counts) against flat's 3 of P - R (plus its counts' rounds off the node)
    shm = dict(costs.ASSUMED, a2a=0.0, a_v=0.0, a_ar=0.0, per_message=None, a_ag=0.0, b_ag=1e30,
               b_v=1e30, b_ar=1e30)
    net = dict(costs.ASSUMED, a_v=1.0, a2a=1.0, a_ar=0.0, b_v=1e30, b_ar=1e30)
    t = {"take": 0.0, "row": 0.0, "book_flat": (0.0, 0.0), "book_node": (0.0, 0.0), "sum": 0.0}
    node = costs.w2_cluster_terms(c, "node", shm, net, t)
    flat = costs.w2_cluster_terms(c, "flat", shm, net, t)
    lg = lambda n: int(np.ceil(np.log2(n))) if n > 1 else 0  # noqa: E731
    assert node["counts"] + node["Alltoallv messages"] == pytest.approx(3 * (N - 1) + lg(N))
    assert flat["counts"] + flat["Alltoallv messages"] == pytest.approx(3 * (P - R) + lg(P) - lg(R))


def test_at_one_rank_per_node_node_aware_adds_nothing():
    P = 16
    idx = small_idx(P * 4, seed=5)
    rank, ids = w2_loads.rank_ids(idx, P, 4)
    hot = w2_loads.auto_hot(idx, 4, expect=1)
    c = w2_loads.step_counts(rank, ids, P, 1, hot)
    for a, b in (("flat", "node"), ("flat", "node-sum"), ("hot", "node+hot")):
        x, y = c["schemes"][a], c["schemes"][b]
        assert w2_loads.phase_bytes(x["inter"]) == w2_loads.phase_bytes(y["inter"])
        assert (x["take_max"], x["grad_max"], x["inter_messages"]) == (y["take_max"], y["grad_max"], y["inter_messages"])
        t = {"take": 1e-7, "row": 1e-7, "book_flat": (0.0, 0.0), "book_node": (0.0, 0.0), "sum": 1e-9}
        shm = dict(costs.ASSUMED, a_ag=1e-6, b_ag=1e9)
        assert (costs.w2_cluster_terms(c, a, shm, costs.ASSUMED, t)
                == costs.w2_cluster_terms(c, b, shm, costs.ASSUMED, t))
    assert c["node_union_over_ranks"] == 1.0


def test_floor_bounds_every_prediction():
    per = 4
    idx = small_idx(max(costs.CLUSTER_RANKS) * per, cols=20, seed=7)
    counts = w2_loads.loads(costs.CLUSTER_RANKS, [1, 8], per, idx)
    shm = {"label": "shm", "a2a": 4e-6, "a_v": 6e-6, "b_v": 5e9, "a_ar": 4e-6, "b_ar": 4e9, "a_ag": 3e-6,
           "b_ag": 3e9, "per_message": 1e-6}
    fast = dict(costs.ASSUMED, label="fast", a_v=1e-7, a2a=1e-7, a_ar=1e-7)
    got = costs.cluster({"W1": 1.5e-3, "W2": 1.4e-3}, shm, [costs.ASSUMED, fast], {"fp32": counts},
                        {"take": 1e-8, "row": 1e-7, "book_flat": (0.0, 0.0), "book_node": (0.0, 0.0), "sum": 1e-9}, [1, 8])
    assert len(got) == 2 * 2 * (len(w2_loads.SCHEMES) + 2)
    seen_below = seen_faster = False
    for key, v in got.items():
        for e, f in zip(v["eff"], v["floor"]):
            assert 0 < e <= f <= 1.0, (key, e, f)
            seen_below |= f < 1.0
        # one-step-stale: never slower than synchronous, at or below its own floor, which the overlap-all floor bounds
        for e, es, fs, f in zip(v["eff"], v.get("eff_stale", []), v.get("floor_stale", []), v["floor"]):
            assert e <= es <= fs <= f, (key, e, es, fs, f)
            seen_faster |= es > e
    assert seen_below                     # the floor bites somewhere (R = 8: a node's 8 ranks share a link)
    assert seen_faster and all("eff_stale" in v for k, v in got.items() if k[0] == "W2")


def synthetic_probe(B_true, alpha=20e-6, P=2, per_message=3e-6):
    """A probe's points made from a known crossing bandwidth: an Alltoallv of n bytes a rank (split over the
    P ranks, itself included) sends n (P - 1) / P across; an Allreduce of n sends 2 (P - 1) / P n."""
    sizes = [1 << k for k in range(8, 25)]
    return {"np": P, "alltoall_counts": 10e-6,
            "alltoallv": {str(n): alpha + n * (P - 1) / P / B_true for n in sizes},
            "allreduce": {str(n): alpha + 2 * (P - 1) / P * n / B_true for n in sizes},
            "in_flight": {str(m): 5e-6 + m * per_message for m in (1, 2, 4, 8, 16, 32, 64)}}


def test_the_probe_fit_gives_back_the_crossing_bandwidth(tmp_path):
    """Issue 63: at P = 2 only half of an Alltoallv's n crosses; a fit against n measured twice the link."""
    import json
    from mpinn.bench import crossing
    from scripts.bench.cluster_model.model import read_network
    B = 0.84e9
    pts = synthetic_probe(B)
    f = crossing.probe_fits(pts, 1)
    assert f["alltoallv"]["crossing_Bps"] == pytest.approx(B)
    assert f["alltoallv"]["link_Bps"] == pytest.approx(B)               # one rank a host: the same bytes
    assert f["allreduce"]["crossing_Bps"] == pytest.approx(B)
    assert f["alltoallv"]["per_message_s"] == pytest.approx(3e-6)
    # 2 hosts x 2 ranks: a host's link carries R n (P - R) / P of an Alltoallv, a rank n (P - 1) / P
    pts4 = synthetic_probe(B, P=4)
    assert crossing.probe_fits(pts4, 2)["alltoallv"]["crossing_Bps"] == pytest.approx(B)
    assert crossing.probe_fits(pts4, 2)["alltoallv"]["link_Bps"] == pytest.approx(B * 4 / 3)
    # the model reads the points, not the file's old-convention fit (bandwidth_Bps was per byte of n: 2 B)
    path = tmp_path / "multihost-probe-x.json"
    path.write_text(json.dumps({"link": {"rate": "10gbit"}, "points": {"2x1": pts},
                                "fits": {"alltoallv": {"alpha_s": 20e-6, "bandwidth_Bps": 2 * B}}}))
    net = read_network(str(path))
    assert net["b_v"] == pytest.approx(B) and net["b_ar"] == pytest.approx(B)
    assert net["per_message"] == pytest.approx(3e-6)
    # the shared-memory sweep (scripts/bench/alltoallv.py) under the same convention
    assert crossing.fit_crossing(pts["alltoallv"], "alltoallv", 2)[1] == pytest.approx(B)
    assert crossing.crossing_bytes("alltoallv", 1000, 2) == 500
    assert crossing.crossing_bytes("allgatherv", 1000, 3) == 2000


def test_link_terms_and_floor_divide_crossing_bytes_by_the_fitted_B(monkeypatch):
    """w2's inter-node bytes term and the floor: the node's crossing bytes / the probe's crossing B, not 2 B."""
    from mpinn.bench import crossing
    B = 0.84e9
    f = crossing.probe_fits(synthetic_probe(B), 1)
    net = dict(costs.ASSUMED, label="lab", a2a=0.0, a_v=0.0, a_ar=0.0, per_message=None,
               b_v=f["alltoallv"]["crossing_Bps"], b_ar=f["allreduce"]["crossing_Bps"])
    shm = dict(net, label="shm", b_v=1e30, b_ar=1e30, a_ag=0.0, b_ag=1e30)
    P, R, per = 64, 8, 4
    idx = small_idx(P * per, cols=20, seed=11)
    counts = w2_loads.loads([P], [R], per, idx)
    c = counts[(P, R)]
    t = {"take": 0.0, "row": 0.0, "book_flat": (0.0, 0.0), "book_node": (0.0, 0.0), "sum": 0.0}
    terms = costs.w2_cluster_terms(c, "flat", shm, net, t)
    pb = w2_loads.phase_bytes(c["schemes"]["flat"]["inter"])
    data = pb["ids"] + pb["rows"] + pb["gradient rows"]
    assert terms["Alltoallv bytes, inter-node"] == pytest.approx(data / B)
    comp = 1e-3
    monkeypatch.setattr(costs, "CLUSTER_RANKS", [P])
    got = costs.cluster({"W1": comp, "W2": comp}, shm, [net], {"fp32": counts}, t, [R])
    floor = got[("W2", "flat", "fp32", "lab", R)]["floor"][0]
    assert floor == pytest.approx(comp / max(comp, w2_loads.node_bytes(c["schemes"]["flat"]["inter"]) / B))


@pytest.mark.parametrize("P,R", [(16, 4), (4, 2), (4, 1)])
def test_the_bf16_wire_halves_rows_and_ids_and_costs_its_casts(P, R):
    """--wire-rows bf16 (mpinn/comm/wire.py): ids 4 B and rows 128 B, in every phase and inside the node; the counts,
    the hot rows' refresh and the dense tail as on fp32; the busiest owner's casts one term, per element."""
    per = 4
    idx = small_idx(P * per, seed=13)
    rank, ids = w2_loads.rank_ids(idx, P, per)
    hot = w2_loads.auto_hot(idx, per, expect=1)
    fp32, bf16 = (w2_loads.step_counts(rank, ids, P, R, hot, wire=w) for w in ("fp32", "bf16"))
    assert w2_loads.wire_bytes("fp32") == (8, 256, 256) and w2_loads.wire_bytes("bf16") == (4, 128, 128)
    for scheme in w2_loads.SCHEMES:
        a, b = fp32["schemes"][scheme], bf16["schemes"][scheme]
        for phase, (out, into) in a["inter"].items():
            half = 0.5 if phase in ("ids", "rows", "gradient rows") else 1.0
            assert b["inter"][phase][0].tolist() == (half * out).tolist(), (scheme, phase)
            assert b["inter"][phase][1].tolist() == (half * into).tolist(), (scheme, phase)
        assert b["intra"] == {n: v / 2 for n, v in a["intra"].items()}
        # what all nodes send over their links (the lab's eth0 tx) is what they all receive
        assert w2_loads.link_bytes(b["inter"]) == {n: float(into.sum()) for n, (_, into) in b["inter"].items()}
        assert (a["take_max"], a["grad_max"], a["relay_max"]) == (b["take_max"], b["grad_max"], b["relay_max"])
        t = {"take": 0.0, "take_bf16": 3e-8, "row": 0.0, "book_flat": (0.0, 0.0), "book_node": (0.0, 0.0), "sum": 0.0, "encode": 1e-9, "decode": 1e-10}
        shm = dict(costs.ASSUMED, a_ag=1e-6, b_ag=1e9)
        t32 = costs.w2_cluster_terms(fp32, scheme, shm, costs.ASSUMED, t)
        t16 = costs.w2_cluster_terms(bf16, scheme, shm, costs.ASSUMED, t)
        k = bf16["unique_ids_per_rank"]
        replicas = k * bf16["hot_share_of_rank_ids"] if b["hot"] else 0.0
        # the rows it answers gathered and cast in one pass (3e-8 a row more than the gather alone)
        want = b["take_max"] * 3e-8 + 64 * ((k + replicas) * 1e-9 + (k + b["grad_max"]) * 1e-10)
        if scheme == "node-sum" and R > 1:     # the relay decodes what its ranks send, encodes the sums it sends on
            assert b["summed"] and b["sum_out_max"] > 0
            want += 64 * (b["relay_max"] * 1e-10 + b["sum_out_max"] * 1e-9)
        assert t16.pop("casts (bf16)") == pytest.approx(want)
        assert set(t16) == set(t32)
        assert t16["Alltoallv bytes, inter-node"] == pytest.approx(t32["Alltoallv bytes, inter-node"] / 2)
        assert t16["Alltoallv bytes, intra-node"] == pytest.approx(t32["Alltoallv bytes, intra-node"] / 2)
        for same in ("counts", "Alltoallv messages", "dense tail Allreduce", "hot Allgatherv"):
            assert t16.get(same) == t32.get(same), same
