"""--stale-rows 1 (mpinn.training.stale): the rows of step s are the table after update s-2, written out plainly here
in one process; P ranks equal one process with the same delay whose micro-batches are the ranks' shares (every
optimizer, hot rows too); it is not --stale-rows 0; a settle (an evaluation, a checkpoint and its resume) restarts
the delay and loses nothing; a skipped step changes nothing; --stale-rows 0 is the ShardedStep of before."""
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from mpi_shard_exchange import cut, cuts
from mpi_sharded import LAYOUT, data_for, make_trainer, spec_for, steps, trained
from ranks import COMM, LR, agree, make_optimizer, restore_then_start, shared_dir, write_checkpoint
from mpinn.comm.buffers import displs, split_counts
from mpinn.comm.progress import Progress
from mpinn.core.batch import Batch, SparseRows
from mpinn.device.backend import compact_csr
from mpinn.model.mlp import MLP
from mpinn.training.evaluate import evaluate
from mpinn.training.sharded import ShardedStep
from mpinn.training.stale import StaleShardedStep

N_SPARSE = 64


def batch_at(data, batch, s):
    """Step s's (1-based) global batch: the test's rows in order, wrapping."""
    Xs, Xd, y = data
    rows = np.arange((s - 1) * batch, s * batch) % len(y)
    return Batch(Xs[rows], np.ascontiguousarray(Xd[rows]), y[rows])


def plain_sgd(batch, n, data, delay=2):
    """SGD with the rows of step s taken from the table after update s - delay (2: --stale-rows 1; 1: the table as
    it is), written out: the table's history kept, the batch's unique ids compacted, its gradient at those rows,
    then p -= lr g on the dense layers and on the batch's rows."""
    model = MLP(spec_for()).init_(0)
    width, start = model.table[1], model.dense_start
    table = model.params[:N_SPARSE * width].reshape(N_SPARSE, width)
    history = [table.copy()]                    # history[u]: the table after update u (0: as initialised)
    for s in range(1, n + 1):
        seen = history[max(s - delay, 0)]
        whole = batch_at(data, batch, s)
        ids, Xc = compact_csr(np, sp, whole.Xs)
        rows_grad = model.loss_grad_(Batch(Xc, whole.Xd, whole.y), 1.0 / batch, sparse_grad=True,
                                     table=seen[ids]).rows
        model.params[start:] -= LR * model.grads[start:]
        table[ids] -= LR * rows_grad
        history.append(table.copy())
    return model.params


def one_process(optimizer, batch, n, data, ranks, settles=(), skip=(), fresh=False, model=None, rate=lambda s: LR,
                depth=1):
    """--stale-rows 1 at `ranks` ranks in one process: step s uses the table after update max(s - 2, r), r the
    last settle before s (after a settle at r every batch up to r is applied, and the next one sees that); each
    rank's share of the batch (the scatter's contiguous split) is a micro-batch over its own unique ids, its
    gradient rows one segment, the segments applied in rank order with the summed dense gradient; a step in
    `skip` is not applied (the table stays as it was). fresh: the table as it is (--stale-rows 0). rate(s): step s's
    learning rate. depth 2 (--stale-rows 2): step s uses the table after update max(s - 3, r) (the dense layers as
    they are: after update s - 1)."""
    model = model or MLP(spec_for()).init_(0)
    opt = make_optimizer(optimizer, model)
    width, start = model.table[1], model.dense_start
    table = model.params[:N_SPARSE * width].reshape(N_SPARSE, width)
    history, r = [table.copy()], 0
    for s in range(1, n + 1):
        seen = history[s - 1 if fresh else max(s - 1 - depth, r)]
        whole = batch_at(data, batch, s)
        dense, ids, grads = np.zeros_like(model.grad_buffer[start:]), [], []
        bounds = np.r_[0, np.cumsum(split_counts(batch, ranks))]
        for a, b in zip(bounds[:-1], bounds[1:]):
            part = whole.slice(a, b)
            k, Xc = compact_csr(np, sp, part.Xs)
            grads.append(model.loss_grad_(Batch(Xc, part.Xd, part.y), 1.0 / batch, sparse_grad=True,
                                          table=seen[k]).rows)
            dense += model.grad_buffer[start:]
            ids.append(k)
        model.grad_buffer[start:] = dense
        touched = SparseRows(np.concatenate(ids), np.concatenate(grads), N_SPARSE,
                             displs(np.r_[[len(k) for k in ids], 0]))
        if s not in skip and opt.sparse_ok:
            opt.step_(model.params, model.grads, touched, lr=rate(s))
        elif s not in skip:         # --hashed-update dense: the summed rows written into the table's gradient
            model.grads[:start] = 0
            summed = touched.coalesced()
            model.grads[:start].reshape(N_SPARSE, width)[summed.ids] = summed.rows
            opt.step_(model.params, model.grads, None, lr=rate(s))
        history.append(table.copy())
        if s in settles:
            r = s
    return model.params


def run_stale(optimizer, batch=12, n=6, settle_at=(), data=None, progress=None, depth=1, **kw):
    """--stale-rows `depth` trained n steps (a settle after each step in settle_at; progress="thread": the progress
    thread drives the rows in flight, not the plan's default); the trainer and the whole parameters on every rank."""
    t = make_trainer("sharded", optimizer, batch, stale_rows=depth, **kw)
    if progress == "thread" and COMM.size > 1:
        t.stepper.progress = Progress()
    t.start()
    data, done = data or data_for(), 0
    for stop in sorted(settle_at) + [n]:
        steps(t, data, batch, done, stop)
        t.settle_()
        done = stop
    return COMM.bcast(t.final_params()), t


def test_the_rows_are_the_table_two_updates_back():
    """SGD: --stale-rows 1 equals the plain reference (rows of step s from the table after update s-2) to 1e-12 at
    every rank count (the ranks' shares only change the order of the sums; at np 1 the same sums), and not the
    reference that reads the table as it is."""
    got, t = run_stale("sgd")
    assert type(t.stepper) is StaleShardedStep
    ref, fresh = plain_sgd(12, 6, data_for()), plain_sgd(12, 6, data_for(), delay=1)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs the stale reference: %g" % np.max(np.abs(got - ref)))
    agree(np.max(np.abs(got - fresh)) > 1e-6, "the delay changed nothing")


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adam-dense", "adagrad-rowwise", "ftrl"])
def test_p_ranks_equal_one_process_with_the_ranks_shares(optimizer):
    """P ranks with --stale-rows 1 equal one process with the same delay whose micro-batches are the ranks' shares
    (1e-12: the dense sums in MPI's order), and differ from --stale-rows 0."""
    got, _ = run_stale(optimizer, batch=7)      # uneven shares at np 2 and 3
    ref = one_process(optimizer, 7, 6, data_for(), COMM.size)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process: %g" % np.max(np.abs(got - ref)))
    sync, _ = trained("sharded", optimizer, 7)
    agree(np.max(np.abs(got - sync)) > 1e-6, "--stale-rows 1 equals --stale-rows 0")
    fresh = one_process(optimizer, 7, 6, data_for(), COMM.size, fresh=True)
    agree(np.max(np.abs(sync - fresh)) < 1e-12, "the reference's fresh mode is not --stale-rows 0")


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad-rowwise"])
def test_through_the_node_exchange_the_flat_exchanges_bits(optimizer):
    """Through the node exchange, on every cut of this job into nodes (consecutive ranks: the node's gradient rows
    summed where a power of two; dealt round robin: unsummed), with hot rows, --stale-rows 1 gives the flat
    exchange's parameters bit for bit (its rows cross between nodes in the posted Ialltoallv, handed out in the node
    at the wait), and so the one-process reference's; once with the progress thread driving them."""
    hot = np.array([3, 17, 40, 41, 63])
    flat, _ = run_stale(optimizer, batch=7, hot=hot)
    ref = one_process(optimizer, 7, 6, data_for(), COMM.size)
    agree(np.max(np.abs(flat - ref)) < 1e-12, "flat vs one process: %g" % np.max(np.abs(flat - ref)))
    for i, (R, dealt) in enumerate(cuts()):
        got, t = run_stale(optimizer, batch=7, hot=hot, shard_exchange="node", topology=cut(R, dealt, COMM),
                           progress="thread" if i == 0 else None)
        agree(t.stepper.exchange == ("node" if R > 1 else "flat"), "R %d: %s" % (R, t.stepper.exchange))
        agree(np.array_equal(got, flat), "R %d dealt %s: %g" % (R, dealt, np.max(np.abs(got - flat))))
        t.stepper.release_()
        t.comm.comm.Free()


def test_the_progress_thread_changes_no_bit():
    """Who drives MPI on the rows in flight (a progress thread, or nobody) changes when they move, not what moves."""
    got, t = run_stale("adam", batch=7, progress="thread")
    plain, _ = run_stale("adam", batch=7)
    agree(np.array_equal(got, plain) and (COMM.size == 1 or t.stepper.progress is not None))
    t.release_()
    agree(t.stepper.progress is None)


def test_the_held_batch_keeps_the_rate_it_was_given():
    """A rate that changes every step: the held batch is applied at the rate the trainer gave with it."""
    def rate(s):
        return LR * s / 3.0

    def schedule(global_step, plateaus=0):
        return rate(global_step + 1)
    got, _ = run_stale("adam", schedule=schedule)
    ref = one_process("adam", 12, 6, data_for(), COMM.size, rate=rate)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process: %g" % np.max(np.abs(got - ref)))


def test_hot_rows_are_read_from_the_replica_when_the_fetch_is_posted():
    """Hot rows (every rank's replica; refreshed after each update) are one update late too: the same reference."""
    hot = np.array([3, 17, 40, 41, 63])
    got, t = run_stale("adam", hot=hot)
    agree(t.stepper.hot_rows == 5)
    ref = one_process("adam", 12, 6, data_for(), COMM.size)
    agree(np.max(np.abs(got - ref)) < 1e-12, "hot rows vs one process: %g" % np.max(np.abs(got - ref)))


def test_an_evaluation_in_the_middle_settles_the_held_batch():
    """An evaluation after step 3: the held batch is applied first (the metrics are the reference's after 3
    updates), the delay restarts after it, and the run equals the reference with a settle at 3."""
    from mpinn.comm.null import NullCommunicator
    from mpinn.data.base import Dataset
    t = make_trainer("sharded", "adam", 12, stale_rows=1)
    t.start()
    data = data_for()
    steps(t, data, 12, 0, 3)
    t.settle_()
    valid = Dataset(*data, {"task": "multiclass", "classes": [0, 1, 2]})
    got = t.evaluate(valid if COMM.rank == 0 else None, chunk=13)
    steps(t, data, 12, 3, 6)
    final = COMM.bcast(t.final_params())
    ref3 = MLP(spec_for())
    one_process("adam", 12, 3, data, COMM.size, model=ref3.init_(0))
    alone = COMM.Split(COMM.rank, 0)
    want = evaluate(ref3, NullCommunicator(alone), LAYOUT, valid, chunk=13)
    alone.Free()
    agree(all(abs(got[k] - want[k]) < 1e-12 for k in ("accuracy", "logloss")), "%s vs %s" % (got, want))
    ref = one_process("adam", 12, 6, data, COMM.size, settles={3})
    agree(np.max(np.abs(final - ref)) < 1e-12, "vs one process settled at 3: %g" % np.max(np.abs(final - ref)))
    straight = one_process("adam", 12, 6, data, COMM.size)
    agree(np.max(np.abs(ref - straight)) > 1e-6, "the settle changed nothing")


@pytest.mark.parametrize("optimizer, depth", [("sgd", 1), ("adam", 1), ("adam", 2)])
def test_a_checkpoint_and_its_resume_lose_nothing(optimizer, depth):
    """A checkpoint after step 3 holds the held batch applied (the state of a settle at 3; with --stale-rows 2 the
    late rows landed too); resumed in a new trainer, the run equals the uninterrupted one settled at 3, bit for bit,
    and the one-process reference."""
    d, data = shared_dir("mpinn-stale-"), data_for()
    straight, _ = run_stale(optimizer, settle_at=(3,), depth=depth)
    t = make_trainer("sharded", optimizer, 12, stale_rows=depth)
    t.start()
    steps(t, data, 12, 0, 3)
    write_checkpoint(t, os.path.join(d, "a"))
    t = make_trainer("sharded", optimizer, 12, stale_rows=depth)
    restore_then_start(t, d, optimizer)
    steps(t, data, 12, 3, 6)
    got = COMM.bcast(t.final_params())
    agree(np.array_equal(got, straight), "resumed vs uninterrupted: %g" % np.max(np.abs(got - straight)))
    ref = one_process(optimizer, 12, 6, data, COMM.size, settles={3}, depth=depth)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process: %g" % np.max(np.abs(got - ref)))
    if COMM.rank == 0:
        shutil.rmtree(d)


def skipped_at_3(depth):
    """Six Adam steps with --stale-rows `depth`, a NaN in the last rank's dense gradient at step 3: (each step's
    verdict in the order the step reports them, the final parameters); the results must come one call late."""
    from mpinn.training import Faults
    t = make_trainer("sharded", "adam", 12, stale_rows=depth)
    t.stepper.faults = Faults("nan:%d:3" % (COMM.size - 1), COMM.rank)
    t.start()
    data, verdicts = data_for(), []
    for s in range(6):
        steps(t, data, 12, s, s + 1)
        verdicts += [(step, ok) for _, ok, _, step in t.stepper.outcomes(None)]
        agree(len(verdicts) == s, "results are one call late: %s" % verdicts)
    t.stepper.settle_(7)        # the trainer's settle_ would tally the result itself
    verdicts += [(step, ok) for _, ok, _, step in t.stepper.outcomes(None, flush=True)]
    return verdicts, COMM.bcast(t.final_params())


def test_a_skipped_step_changes_nothing():
    """A NaN in one rank's dense gradient at step 3: its verdict comes a call late, every rank skips it, and the
    run equals the reference whose update 3 is left out (the rows of step 5 are then those after update 2)."""
    verdicts, got = skipped_at_3(1)
    agree(verdicts == [(1, True), (2, True), (3, False), (4, True), (5, True), (6, True)], "%s" % verdicts)
    ref = one_process("adam", 12, 6, data_for(), COMM.size, skip={3})
    agree(np.isfinite(got).all() and np.max(np.abs(got - ref)) < 1e-12,
          "vs one process: %g" % np.max(np.abs(got - ref)))


def test_stale_rows_0_is_the_synchronous_step():
    """The default builds the synchronous ShardedStep and gives its result, bit for bit."""
    got, t = trained("sharded", "adam", 12, stale_rows=0)
    plain, _ = trained("sharded", "adam", 12)
    agree(type(t.stepper) is ShardedStep and np.array_equal(got, plain))
