"""The node exchange's gradient rows summed in the node (mpinn.comm.shard_node): on every cut of this job into nodes
of a power of two of consecutive ranks, what an owner receives sums to the canonical tree over world ranks
(tests/reference.tree_sum, written plainly) bit for bit, as the flat exchange's does; with --wire-rows bf16 or
int8 each rank's rows are rounded once and its node's sum once more; the gradient rows that cross between nodes are one per
(node, distinct id), hot rows included; other placements send every rank's rows apart. Run at np 1-4."""
import numpy as np
import pytest

from ranks import COMM, agree
from reference import int8_row, tree_sum
from mpinn.comm import create_communicator
from mpinn.comm.shard import RowOwners, TableShards
from mpinn.comm.shard_node import NodeShards
from mpinn.comm.topology import Topology
from mpi_shard import nearest_bf16

N_ROWS, W = 40, 3


def batch_of(rank, seed):
    """Rank `rank`'s sorted unique ids and gradient rows: neighbours share many ids; magnitudes spread over
    16 decades, so a sum's order shows in its bits."""
    rng = np.random.default_rng(seed * 100 + rank)
    ids = np.sort(rng.choice(N_ROWS, rng.integers(0, 25), replace=False)).astype(np.int64)
    rows = (rng.standard_normal((ids.size, W)) * 10.0 ** rng.integers(-8, 8, (ids.size, 1))).astype(np.float32)
    return ids, rows


def blocks():
    """Node sizes R (a power of two dividing the job): nodes of R consecutive ranks, summed."""
    return [R for R in (1, 2, 4, 8) if R <= COMM.size and COMM.size % R == 0]


def exchange(R, seed, wire="fp32", hot=(), dealt=False):
    c = create_communicator("allreduce", transport="mpi")
    N = c.size // R
    topo = Topology.of_nodes([r % N if dealt else r // R for r in range(c.size)])
    owners = RowOwners(N_ROWS, c.size, hot)
    sh = NodeShards(c, N_ROWS, W, owners, topo, wire=wire) if R > 1 else \
        TableShards(c, N_ROWS, W, owners, node_of=topo.node_of, wire=wire)
    ids, rows = batch_of(c.rank, seed)
    _, plan = sh.fetch(np.zeros((N_ROWS, W), np.float32), ids)
    got = sh.send_back(plan, rows).coalesced()
    traffic = sh.traffic.as_dict()
    sh.free()
    c.comm.Free()
    return got, owners, topo, traffic


ROUND = {"bf16": nearest_bf16, "int8": int8_row}     # the rounding written plainly, each


def expected(owners, topo, seed, wire):
    """Every owned row's sum from every rank's batch: fp32, the tree over world ranks; bf16 or int8, each rank's row
    rounded, its node's (tree) sum rounded again, then the tree over the nodes."""
    me, grads = COMM.rank, wire.split("-")[-1]        # the gradient rows' format (bf16-int8: int8)
    mine = {}
    for r in range(COMM.size):
        ids, rows = batch_of(r, seed)
        for i, row in zip(ids, rows):
            if owners.of(np.array([i]))[0] == me:
                mine.setdefault(int(i), [None] * COMM.size)[r] = row if wire == "fp32" else ROUND[grads](row)
    if wire == "fp32":
        return {i: tree_sum(v) for i, v in mine.items()}
    N, R = topo.nodes, COMM.size // topo.nodes
    out = {}
    for i, v in mine.items():
        nodes = [tree_sum(v[n * R:(n + 1) * R]) for n in range(N)]
        out[i] = tree_sum([None if s is None else ROUND[grads](s) for s in nodes])
    return out


def same(got, want):
    return list(got.ids) == sorted(want) and all(
        got.rows[k].tobytes() == want[int(i)].tobytes() for k, i in enumerate(got.ids))


@pytest.mark.parametrize("hot", [(), (5, 17, 2, 33)])
@pytest.mark.parametrize("seed", [0, 1])
def test_summed_in_the_node_is_the_tree_over_world_ranks(seed, hot):
    if len(hot) and COMM.size < 2:
        pytest.skip("hot rows need 2 ranks")
    for R in blocks():
        got, owners, topo, _ = exchange(R, seed, hot=hot)
        agree(same(got, expected(owners, topo, seed, "fp32")), "R=%d" % R)


@pytest.mark.parametrize("wire", ["bf16", "int8", "bf16-int8", "int8-bf16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_rounded_node_sums_are_rounded_once_more(seed, wire):
    for R in blocks():
        got, owners, topo, _ = exchange(R, seed, wire=wire)
        agree(same(got, expected(owners, topo, seed, wire)), "R=%d" % R)


def test_one_gradient_row_crosses_per_node_and_distinct_id():
    """The bytes this rank's relay sends between nodes: one count a node, and one id and one gradient row per
    distinct (owner's node, id) of its node, not one per asking rank (and the rows it owns, once per node)."""
    for R in [R for R in blocks() if 1 < R < COMM.size]:
        got, owners, topo, traffic = exchange(R, 0)
        node_of, local_of = np.asarray(topo.node_of), np.asarray(topo.local_of)
        N, node, local = topo.nodes, node_of[COMM.rank], local_of[COMM.rank]
        asked = [batch_of(r, 0)[0] for r in range(COMM.size) if node_of[r] == node]
        ids = np.unique(np.concatenate(asked))
        owner = owners.of(ids)
        relayed = ids[(local_of[owner] == local) & (node_of[owner] != node)]
        answered = 0
        for n in set(node_of.tolist()) - {node}:     # the rows this rank owns that node n asked for, once each
            theirs = np.unique(np.concatenate([batch_of(r, 0)[0] for r in range(COMM.size) if node_of[r] == n]))
            answered += int((owners.of(theirs) == COMM.rank).sum())
        # fetch: one count to each other node (int64), the node's distinct ids once each (int64), the rows this
        # rank owns once per asking node (fp32); return: the relay's summed rows, once per (node, distinct id)
        want = (N - 1) * 8 + relayed.size * 8 + answered * W * 4 + relayed.size * W * 4
        agree(traffic["inter_node_bytes"] == want, "R=%d: %s bytes, counted %d" % (R, traffic, want))


def test_other_placements_send_every_ranks_rows_apart_with_the_same_sums():
    """Ranks dealt round robin over nodes (not blocks): unsummed, and the owner's tree gives the same bits."""
    if COMM.size < 4:
        pytest.skip("needs 2 nodes of 2 ranks dealt round robin (np 4)")
    got, owners, topo, _ = exchange(2, 0, dealt=True)
    agree(topo.unsummable is not None and same(got, expected(owners, topo, 0, "fp32")))
