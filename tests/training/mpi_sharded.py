"""--table sharded: the same parameters as the replicated table (bit for bit: the same sums in the same
order) and as one process; every optimizer; uneven splits, a rank owning no rows, a batch touching one
rank's rows only; a NaN on one owner skips the step everywhere; checkpoints across rank counts;
evaluation; and no rank writes another rank's rows."""
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from ranks import COMM, LR, OPTIMIZERS, agree, make_optimizer, restore_then_start, shared_dir, toy_data, write_checkpoint
from ranks import make_trainer as trainer_of
from mpinn.core.batch import Batch, Layout
from mpinn.host.memory import resident_bytes
from mpinn.core.spec import ModelSpec
from mpinn.model.mlp import MLP
from mpinn.training.evaluate import evaluate
from mpinn.training.sharded import own_rows

LAYOUT = Layout(64, 3, "float64", "int64")


def spec_for(n_sparse=64):
    return ModelSpec(n_sparse, 3, (8, 6), 3, "tanh", "softmax", "float64", sparse_fan_in=2.5, wide=True)   # wide and deep


def data_for(n_sparse=64, only=None):
    """The toy rows, over a table of n_sparse rows; only=(a, b): every column id moved into a:b."""
    Xs, Xd, y = toy_data(n_sparse=n_sparse)
    if only is not None:
        Xs = sp.csr_matrix((Xs.data, only[0] + Xs.indices % (only[1] - only[0]), Xs.indptr), shape=Xs.shape)
    return Xs, Xd, y


def make_trainer(table, optimizer, batch, mpi_comm=None, n_sparse=64, grad_accum=1, **kw):
    spec = spec_for(n_sparse)
    c = mpi_comm or COMM
    # sharded: each rank makes only its own rows, as training does (the other rows stay zero)
    model = MLP(spec).init_(0, rows=own_rows(c.Get_size(), c.Get_rank(), n_sparse) if table == "sharded" else None)
    return trainer_of(model, make_optimizer(optimizer, model), Layout(n_sparse, 3, "float64", "int64"), batch,
                      mpi_comm=mpi_comm, table=table, grad_accum=grad_accum, comm="mpi", sparse_threshold=10.0, **kw)


def steps(trainer, data, batch, start, stop, skip=()):
    Xs, Xd, y = data
    verdicts = []
    for s in range(start, stop):
        if s + 1 in skip:
            continue
        rows = np.arange(s * batch, (s + 1) * batch) % len(y)
        trainer.global_step = s
        _, ok = trainer.step(Batch(Xs[rows], Xd[rows], y[rows]) if trainer.rank0 else None, batch)
        verdicts.append(ok)
    trainer.global_step = stop
    return verdicts


def one_process(optimizer, batch, n, data, n_sparse=64):
    model = MLP(spec_for(n_sparse)).init_(0)
    opt = make_optimizer(optimizer, model)
    Xs, Xd, y = data
    for s in range(n):
        rows = np.arange(s * batch, (s + 1) * batch) % len(y)
        touched = model.loss_grad_(Batch(Xs[rows], np.ascontiguousarray(Xd[rows]), y[rows]), 1.0 / batch,
                                   sparse_grad=opt.sparse_ok)
        opt.step_(model.params, model.grads, touched, lr=LR)
    return model.params


def one_process_wire(optimizer, batch, n, data, ranks, n_sparse=64, wire="bf16"):
    """--wire-rows bf16 (or int8) at `ranks` ranks, reproduced in one process: each rank's share of a batch (the
    scatter's contiguous split) is a micro-batch over its own unique ids, whose rows it sees rounded as they travel
    and whose gradient rows leave it rounded; the rows' segments are applied in rank order, the dense gradients
    summed."""
    from mpinn.comm.buffers import displs, split_counts
    from mpinn.comm.wire import wires
    from mpinn.core.batch import SparseRows
    from mpinn.device.backend import compact_csr
    model = MLP(spec_for(n_sparse)).init_(0)
    opt, (wire, grad_wire), Xs, Xd, y = make_optimizer(optimizer, model), wires(wire, n_sparse), *data
    width = model.table[1]
    table = model.params[:n_sparse * width].reshape(n_sparse, width)
    start = model.dense_start
    for s in range(n):
        rows = np.arange(s * batch, (s + 1) * batch) % len(y)
        whole = Batch(Xs[rows], np.ascontiguousarray(Xd[rows]), y[rows])
        dense, ids, grads = np.zeros_like(model.grad_buffer[start:]), [], []
        bounds = np.r_[0, np.cumsum(split_counts(batch, ranks))]
        for a, b in zip(bounds[:-1], bounds[1:]):
            part = whole.slice(a, b)
            k, Xc = compact_csr(np, sp, part.Xs)
            g = model.loss_grad_(Batch(Xc, part.Xd, part.y), 1.0 / batch, sparse_grad=True,
                                 table=wire.round(table[k])).rows
            dense += model.grad_buffer[start:]
            ids.append(k)
            grads.append(grad_wire.round(g))
        model.grad_buffer[start:] = dense
        touched = SparseRows(np.concatenate(ids), np.concatenate(grads), n_sparse, displs(np.r_[[len(k) for k in ids], 0]))
        opt.step_(model.params, model.grads, touched, lr=LR)
    return model.params


def trained(table, optimizer, batch, n=6, n_sparse=64, data=None, **kw):
    """The whole parameters after n steps, on every rank (gathered to rank 0, then broadcast)."""
    t = make_trainer(table, optimizer, batch, n_sparse=n_sparse, **kw)
    t.start()
    steps(t, data or data_for(n_sparse), batch, 0, n)
    return COMM.bcast(t.final_params()), t


def only_own_rows_written(t):
    """Every rank's flat buffers (parameters, gradient, optimizer state) are zero outside its own rows
    of the table: no rank ever wrote another rank's rows (those pages stay untouched)."""
    lo, hi = t.stepper.own
    size = t.model.dense_start
    arrays = [t.model.params, t.model.grad_buffer] + [a for k, a in t.optimizer.arrays.items()
                                                      if k in t.optimizer.element_state]
    outside = [np.r_[a[:lo], a[hi:size]] for a in arrays]
    rows = [a for k, a in t.optimizer.arrays.items() if k in t.optimizer.row_state]
    rlo, rhi = t.stepper.shards.lo, t.stepper.shards.hi
    return all(not o.any() for o in outside) and all(not np.r_[r[:rlo], r[rhi:]].any() for r in rows)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("batch", [7, 12])          # uneven at np 2 and 3; 64 rows split 22/21/21 at np 3
def test_sharded_equals_replicated_and_one_process(optimizer, batch):
    got, t = trained("sharded", optimizer, batch)
    if COMM.size > 1:       # the final gather made rank 0's model whole: look at the other ranks' buffers
        agree(COMM.rank == 0 or only_own_rows_written(t), "a rank wrote rows it does not own")
    rep, _ = trained("replicated", optimizer, batch)
    ref = one_process(optimizer, batch, 6, data_for())
    # the lazy update sums each row's gradient rows in rank order on the owner, as the replicated
    # exchange does on every rank: the same bits. --hashed-update dense (adam-dense) sums the
    # replicated table's rows inside MPI_Allreduce, in MPI's order
    same = np.array_equal(got, rep) if optimizer != "adam-dense" else np.max(np.abs(got - rep)) < 1e-12
    agree(same, "sharded vs replicated: max diff %g" % np.max(np.abs(got - rep)))
    agree(np.max(np.abs(got - ref)) < 1e-12, "sharded vs one process: max diff %g" % np.max(np.abs(got - ref)))


@pytest.mark.parametrize("case", ["one-owner", "empty-slice", "no-rows", "micro-batches"])
def test_one_owner_an_empty_slice_and_micro_batches(case):
    """one-owner: every id in rank 0's rows (0..1: rank 0's at any np <= 3), the others asked for
    nothing; empty-slice: a 2-row table, so at np 3 rank 2 owns no row; no-rows: 2-row batches, so at
    np 3 rank 2 has no rows to train on (it still answers for its rows); micro-batches: --grad-accum 3
    (the fetched rows' gradient summed over micro-batches) against the replicated --grad-accum 3."""
    n_sparse, only, accum, batch = {"one-owner": (5, (0, 2), 1, 12), "empty-slice": (2, None, 1, 12),
                                    "no-rows": (64, None, 1, 2), "micro-batches": (64, None, 3, 12)}[case]
    data = data_for(n_sparse, only)
    got, t = trained("sharded", "adam", batch, n_sparse=n_sparse, data=data, grad_accum=accum)
    rep, _ = trained("replicated", "adam", batch, n_sparse=n_sparse, data=data, grad_accum=accum)
    ref = one_process("adam", batch, 6, data, n_sparse)
    if case == "empty-slice" and COMM.size == 3:
        agree(t.stepper.shards.hi == t.stepper.shards.lo if COMM.rank == 2 else True)
    agree(np.max(np.abs(got - rep)) <= (0 if accum == 1 else 1e-12), "vs replicated %g" % np.max(np.abs(got - rep)))
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process %g" % np.max(np.abs(got - ref)))


@pytest.mark.parametrize("where", ["rows", "dense"])
def test_a_nan_on_one_rank_skips_the_step_everywhere(where):
    """A NaN in the gradient rows one rank sends (its owners see it, the others do not), or in its dense
    gradient: the step is skipped on every rank, exactly as if the batch had not been seen."""
    def poison(t):
        if where == "dense":
            from mpinn.training import Faults
            t.stepper.faults = Faults("nan:%d:3" % (COMM.size - 1), COMM.rank)
        elif COMM.rank == COMM.size - 1:
            real = t.model.loss_grad_

            def loss_grad_(batch, scale, **kw):
                rows = real(batch, scale, **kw)
                if t.global_step == 2 and rows.rows.shape[0]:
                    rows.rows[-1, 0] = np.nan
                return rows
            t.model.loss_grad_ = loss_grad_
        return t
    data = data_for()
    t = poison(make_trainer("sharded", "adam", 7))
    t.start()
    verdicts = steps(t, data, 7, 0, 6)
    poisoned = COMM.bcast(t.final_params())
    c = make_trainer("sharded", "adam", 7)
    c.start()
    steps(c, data, 7, 0, 6, skip=(3,))
    clean = COMM.bcast(c.final_params())
    agree(verdicts == [True, True, False, True, True, True], "verdicts %s" % verdicts)
    agree(np.isfinite(poisoned).all() and np.array_equal(poisoned, clean))


def test_evaluation_fetches_the_rows_it_needs():
    """Held-out metrics with a sharded table (every rank fetching its rows, chunk by chunk, uneven
    shares) equal one process's."""
    from mpinn.comm.null import NullCommunicator
    from mpinn.data.base import Dataset
    t = make_trainer("sharded", "sgd", 12)
    t.start()
    steps(t, data_for(), 12, 0, 4)
    Xs, Xd, y = data_for()
    data = Dataset(Xs, Xd, y, {"task": "multiclass", "classes": [0, 1, 2]})
    got = t.evaluate(data if COMM.rank == 0 else None, chunk=13)     # 13, 13, 13, 1: ranks with no rows
    one = MLP(spec_for())
    one.params[...] = COMM.bcast(t.final_params())
    alone = COMM.Split(COMM.rank, 0)
    ref = evaluate(one, NullCommunicator(alone), LAYOUT, data, chunk=13)
    alone.Free()
    agree(all(abs(got[k] - ref[k]) < 1e-12 for k in ("accuracy", "logloss")), "%s vs %s" % (got, ref))


@pytest.mark.parametrize("optimizer", ["adam", "adam-dense"])
def test_no_rank_touches_another_ranks_rows(optimizer):
    """A 2^19 x 8 table (32 MiB, float64: above the 32 MiB from which the heap maps fresh pages, see
    process.reusing_heap, so no page comes in touched by an earlier test), Adam, sharded: each rank's parameter pages in memory are its
    own rows' (to a few pages), its gradient buffer's table part (lazy; with --hashed-update dense, but
    for its own rows) and its moments' other rows are never touched (with 4 KiB pages: numpy's
    huge-page advice is turned off here to count exactly)."""
    from numpy._core.multiarray import _set_madvise_hugepage
    was = _set_madvise_hugepage(False)
    try:
        n_rows, page = 1 << 19, 4096
        t = make_trainer("sharded", optimizer, 12, n_sparse=n_rows)
        t.start()
        steps(t, data_for(n_rows), 12, 0, 4)
        lo, hi = t.stepper.own
        own = (hi - lo) * 8
        table = slice(0, t.model.dense_start)
        got = [resident_bytes(t.model.params[table]), resident_bytes(t.model.grad_buffer[table])]
        got += [resident_bytes(t.optimizer.arrays[k][table]) for k in ("m_scaled", "v_scaled")]
        # slack: the partial pages at the ends of the own rows, the allocator's header page at the start
        # and the page the table shares with the dense layers at the end
        agree(own <= got[0] <= own + 4 * page, "parameters: %d resident bytes, own rows %d" % (got[0], own))
        dense = optimizer == "adam-dense"
        agree(got[1] <= own * dense + 4 * page and max(got[2:]) <= own + 4 * page,
              "gradient %d, moments %s" % (got[1], got[2:]))
    finally:
        _set_madvise_hugepage(was)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad-rowwise", "ftrl"])
def test_checkpoint_on_p_ranks_resumes_on_fewer_exactly(optimizer):
    """At np 3: 3 steps sharded over 3 ranks, a checkpoint (the whole table and state, gathered),
    resumed sharded over 2 ranks (re-sharded from the file): the restored state is the saved one bit
    for bit, and the rest of the run equals an uninterrupted run on 2 ranks (1e-10: the first steps
    summed over 3 ranks). At np 2: 2 -> 1; at np 1: 1 -> 1."""
    second = max(COMM.size - 1, 1)
    d, data = shared_dir("mpinn-shard-"), data_for()
    sub = COMM.Split(0 if COMM.rank < second else 1, COMM.rank)
    ref = None
    if COMM.rank < second:
        t = make_trainer("sharded", optimizer, 12, sub)
        t.start()
        steps(t, data, 12, 0, 6)
        ref = t.final_params()
    sub.Free()
    t = make_trainer("sharded", optimizer, 12)
    t.start()
    steps(t, data, 12, 0, 3)
    write_checkpoint(t, os.path.join(d, "a"))
    sub = COMM.Split(0 if COMM.rank < second else 1, COMM.rank)
    if COMM.rank < second:
        t = make_trainer("sharded", optimizer, 12, sub)
        restore_then_start(t, d, optimizer)
        steps(t, data, 12, 3, 6)
        got = t.final_params()
        if t.rank0:
            assert np.max(np.abs(got - ref)) < 1e-10, np.max(np.abs(got - ref))
    sub.Free()
    agree(True)
    if COMM.rank == 0:
        shutil.rmtree(d)


@pytest.mark.parametrize("wire", ["bf16", "int8", "bf16-int8", "int8-bf16"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad"])
def test_rounded_rows_on_the_wire_equal_one_process_rounding_each_ranks_share(optimizer, wire):
    """--wire-rows bf16, int8, bf16-int8 or int8-bf16 at P ranks equals one process whose micro-batches are the ranks' shares,
    each rounding its rows and its gradient rows as a rank does (the dense sums within MPI's order: 1e-12); and it is not
    the fp32 run (the rounding happened)."""
    got, _ = trained("sharded", optimizer, 12, wire_rows=wire)
    ref = one_process_wire(optimizer, 12, 6, data_for(), COMM.size, wire=wire)
    agree(np.max(np.abs(got - ref)) < 1e-12, "%s vs one process: max diff %g" % (wire, np.max(np.abs(got - ref))))
    fp32, _ = trained("sharded", optimizer, 12)
    agree(np.max(np.abs(got - fp32)) > 1e-6, "%s rows changed nothing" % wire)
