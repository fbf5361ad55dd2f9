"""--shard-exchange node and --hot-rows: the node-aware exchange and the hot rows' replica give the flat
sharded table's parameters bit for bit (and so the replicated table's), for every optimizer, on every
way of cutting this job into "nodes" (blocks of ranks: the node communicator is passed in, so one
machine plays several nodes; tests/cluster/test_multihost.py runs it across real network namespaces);
checkpoints written with one exchange and hot set resume with another, on the same ranks bit for bit;
each rank writes only its own rows and the hot rows; the node exchange sends fewer inter-node messages
and bytes than the flat one. Run at np 1, 2, 3 and 4 (tests/test_mpi.py)."""
import os
import shutil

import numpy as np
import pytest

from ranks import COMM, OPTIMIZERS, agree, restore_then_start, shared_dir, write_checkpoint
from mpinn.comm.topology import Topology
from mpi_sharded import data_for, make_trainer, one_process, steps

HOT = np.array([7, 60, 3, 41, 22, 15, 33, 1, 50, 12], dtype=np.int64)      # "most frequent first"


def node_sizes():
    """Every node size R that cuts this job into equal nodes."""
    return [r for r in range(1, COMM.size + 1) if COMM.size % r == 0]


def cuts():
    """(R, dealt): nodes of R consecutive ranks, and (dealt) nodes of the ranks dealt round robin (rank r
    on node r % N, as a launcher placing ranks by node does: world rank order is not node order)."""
    return [(R, False) for R in node_sizes()] + [(R, True) for R in node_sizes() if 1 < R < COMM.size]


MADE = []


@pytest.fixture(autouse=True)
def release_exchanges():
    """Every trainer's communicators freed after each test, in the order made: MPI has only so many
    (2048 context ids in MPICH), and the suite's other modules make theirs after these."""
    yield
    while MADE:
        t = MADE.pop(0)
        t.stepper.release_()
        t.comm.comm.Free()


def cut(R, dealt, c):
    """This job (on communicator c) cut into nodes of R ranks: consecutive, or dealt round robin."""
    return Topology.of_nodes([r % (c.size // R) if dealt else r // R for r in range(c.size)])


def trainer(optimizer, exchange="flat", R=None, hot=(), batch=12, sub=None, dealt=False, **kw):
    """A sharded trainer whose plan sees the job cut into nodes of R ranks (R None: as it is), with `exchange`
    asked for (the plan takes the flat one where a node holds one rank) and `hot` rows."""
    topo = cut(R, dealt, sub or COMM) if R is not None else None
    t = make_trainer("sharded", optimizer, batch, mpi_comm=sub, shard_exchange=exchange, topology=topo, hot=hot, **kw)
    MADE.append(t)
    return t


def trained(optimizer, n=6, **kw):
    t = trainer(optimizer, **kw)
    t.start()
    steps(t, data_for(), 12, 0, n)
    return COMM.bcast(t.final_params()), t


def written_outside(t, hot):
    """Does any of this rank's buffers hold a non-zero outside the rows it may write: the parameters
    outside its range and the hot rows; its optimizer state outside its range and the hot rows it owns."""
    shards, w, n_rows = t.stepper.shards, t.stepper.width, t.stepper.n_rows
    allowed = np.zeros(n_rows, bool)
    allowed[shards.lo:shards.hi] = True
    params_ok = allowed.copy()
    params_ok[hot] = True
    allowed[shards.owners.hot_of(COMM.rank)] = True
    bad = t.model.params[:n_rows * w].reshape(n_rows, w)[~params_ok].any()
    opt = t.optimizer
    for k, a in opt.arrays.items():
        if k in opt.element_state:
            bad |= a[:n_rows * w].reshape(n_rows, w)[~allowed].any()
        elif k in opt.row_state:
            bad |= a[~allowed].any()
    return bool(bad)


@pytest.mark.parametrize("wire, near", [("bf16", 1e-3), ("int8", 0.1), ("bf16-int8", 0.1),
                                        ("int8-bf16", 0.1)])   # int8: Adam moves ~the rate
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_rounded_rows_give_the_flat_exchanges_bits_through_the_node_exchange_and_hot_rows(optimizer, wire, near):
    """--wire-rows bf16 or int8: each row is rounded once, by its sender, whichever way it travels (relays forward
    the words as they came) and a hot row's replica the same way: every cut into nodes, with and without hot rows,
    the flat bits; except where the node sums its gradient rows (nodes of a power of two of consecutive ranks): the
    node's sum is rounded once more as it crosses (tests/comm/mpi_shard_sum.py checks those bits), here within
    `near`."""
    def bf16(**kw):
        t = trainer(optimizer, wire_rows=wire, **kw)
        t.start()
        steps(t, data_for(), 12, 0, 6)
        return COMM.bcast(t.final_params())
    ref = bf16()
    for exchange, R, dealt, hot in [("node", R, dealt, ()) for R, dealt in cuts()] + [("flat", None, False, HOT)] + [
            ("node", R, dealt, HOT[:5]) for R, dealt in cuts()]:
        got = bf16(exchange=exchange, R=R, hot=hot, dealt=dealt)
        summed = exchange == "node" and 1 < R and cut(R, dealt, COMM).unsummable is None
        agree(np.max(np.abs(got - ref)) < near if summed else np.array_equal(got, ref),
              "%s R=%s dealt=%s hot=%d: max diff %g" % (exchange, R, dealt, len(hot), np.max(np.abs(got - ref))))


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_node_exchange_and_hot_rows_give_the_flat_tables_bits(optimizer):
    ref, _ = trained(optimizer)
    one = one_process(optimizer, 12, 6, data_for())
    agree(np.max(np.abs(ref - one)) < 1e-12, "flat vs one process %g" % np.max(np.abs(ref - one)))
    cases = [("node", R, dealt, ()) for R, dealt in cuts()]
    if optimizer != "adam-dense":          # hot rows need the lazy update (refused otherwise, see below)
        cases += [("flat", None, False, HOT)] + [("node", R, dealt, HOT[:5]) for R, dealt in cuts()]
    for exchange, R, dealt, hot in cases:
        got, t = trained(optimizer, exchange=exchange, R=R, hot=hot, dealt=dealt)
        agree(np.array_equal(got, ref), "%s R=%s dealt=%s hot=%d: max diff %g" % (
            exchange, R, dealt, len(hot), np.max(np.abs(got - ref))))
        if COMM.size > 1 and len(hot):     # rank 0's model was made whole by the final gather
            agree(COMM.rank == 0 or not written_outside(t, hot), "a rank wrote rows it may not write")


def test_hot_rows_refuse_the_dense_update():
    with pytest.raises(ValueError, match="lazy update"):
        trainer("adam-dense", hot=HOT)
    agree(True)


def test_evaluation_through_the_node_exchange_and_the_replica():
    """Held-out metrics with the node exchange and hot rows equal the flat exchange's (predict fetches
    the cold rows and reads the hot ones from the replica)."""
    from mpinn.data.base import Dataset
    Xs, Xd, y = data_for()
    data = Dataset(Xs, Xd, y, {"task": "multiclass", "classes": [0, 1, 2]})
    got = {}
    for name, kw in (("flat", {}), ("node", dict(exchange="node", R=node_sizes()[-1 if COMM.size < 4 else 1],
                                                 hot=HOT))):
        t = trainer("adam", **kw)
        t.start()
        steps(t, data_for(), 12, 0, 4)
        got[name] = t.evaluate(data if COMM.rank == 0 else None, chunk=13)
    agree(got["flat"] == got["node"], "%s vs %s" % (got["flat"], got["node"]))


def test_uneven_nodes_are_refused_with_a_reason():
    from mpinn.core.errors import MpinnError
    if COMM.size < 3:
        pytest.skip("needs 3 ranks to cut unevenly")
    topo = Topology.of_nodes([0 if r < 2 else 1 for r in range(COMM.size)])     # 2 + 1 (+ 1 at np 4: 2, 2 is even)
    uneven = COMM.size == 3
    try:
        MADE.append(make_trainer("sharded", "sgd", 12, shard_exchange="node", topology=topo))
        raised = None
    except MpinnError as e:
        raised = str(e)
    agree((raised is not None and "different numbers of ranks" in raised) if uneven else raised is None, raised)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad-rowwise", "ftrl"])
def test_checkpoint_with_hot_rows_resumes_with_another_exchange(optimizer):
    """3 steps with the node exchange and 10 hot rows, a checkpoint (the hot rows' state gathered from
    their owners), then resumed: on the same ranks with the flat exchange and another hot set, the rest
    of the run equals the uninterrupted flat run bit for bit, and so does a replicated table resumed from
    it; on one rank fewer (re-sharded, hot rows
    dealt to other owners) it equals the uninterrupted run on that many (1e-10: the first steps were
    summed over more ranks). restore_then_start checks that the state read is the state written."""
    R = node_sizes()[1] if len(node_sizes()) > 1 else 1
    ref, _ = trained(optimizer)
    d, data = shared_dir("mpinn-hot-"), data_for()
    second = max(COMM.size - 1, 1)
    sub = COMM.Split(0 if COMM.rank < second else 1, COMM.rank)
    fewer = None
    if COMM.rank < second:
        t = trainer(optimizer, sub=sub)
        t.start()
        steps(t, data, 12, 0, 6)
        fewer = t.final_params()
    t = trainer(optimizer, exchange="node", R=R, hot=HOT)
    t.start()
    steps(t, data, 12, 0, 3)
    write_checkpoint(t, os.path.join(d, "a"))
    t = trainer(optimizer, hot=HOT[3:8])
    restore_then_start(t, d, optimizer)
    steps(t, data, 12, 3, 6)
    got = COMM.bcast(t.final_params())
    agree(np.array_equal(got, ref), "same ranks: max diff %g" % np.max(np.abs(got - ref)))
    if COMM.rank == 0:
        shutil.rmtree(os.path.join(d, "b"))
    COMM.Barrier()
    # the same checkpoint into a replicated table: the replicated exchange sums in rank order too
    t = make_trainer("replicated", optimizer, 12)
    MADE.append(t)
    restore_then_start(t, d, optimizer)
    steps(t, data, 12, 3, 6)
    got = COMM.bcast(t.final_params())
    agree(np.array_equal(got, ref), "replicated: max diff %g" % np.max(np.abs(got - ref)))
    if COMM.rank == 0:
        shutil.rmtree(os.path.join(d, "b"))
    COMM.Barrier()
    if COMM.rank < second:
        t = trainer(optimizer, exchange="node", R=1, hot=HOT[:4], sub=sub)
        restore_then_start(t, d, optimizer)
        steps(t, data, 12, 3, 6)
        got = t.final_params()
        if t.rank0:
            assert np.max(np.abs(got - fewer)) < 1e-10, np.max(np.abs(got - fewer))
    sub.Free()
    agree(True)
    if COMM.rank == 0:
        shutil.rmtree(d)


def test_the_node_exchange_sends_fewer_messages_and_bytes_between_nodes():
    """Nodes of 2 ranks (np 4: 2 nodes), every rank's batch the same rows, so a node's two ranks ask
    for the same ids: between nodes, the node exchange sends each row once per node (the flat one
    twice), and each rank at most 6 (N - 1) messages a step (fetch: counts, ids, rows; return: counts,
    ids, rows) against the flat exchange's 4 (P - R) (counts, ids, rows, gradient rows)."""
    if COMM.size != 4:
        pytest.skip("needs 2 nodes of 2 ranks (np 4)")
    R, N, P, n = 2, 2, 4, 5
    Xs, Xd, y = data_for()
    from mpinn.core.batch import Batch
    got = {}
    for exchange in ("flat", "node"):
        t = trainer("sgd", exchange=exchange, R=R)
        t.start()
        for s in range(n):
            rows = np.arange(s * 3, s * 3 + 3) % len(y)         # the same 3 rows on every rank
            t.global_step = s
            t.step_slice(Batch(Xs[rows], np.ascontiguousarray(Xd[rows]), y[rows]), 12)
        got[exchange] = t.stepper.shards.traffic.as_dict()
    f, d = got["flat"], got["node"]
    agree(d["inter_node_messages"] <= 6 * (N - 1) * n and f["inter_node_messages"] <= 4 * (P - R) * n, got)
    agree(d["inter_node_bytes"] < f["inter_node_bytes"] and d["inter_node_messages"] < f["inter_node_messages"], got)
