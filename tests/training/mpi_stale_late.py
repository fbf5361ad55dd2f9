"""--stale-rows 2 (mpinn.training.stale, depth 2): the gradient rows' exchange overlaps the next batch's compute, so
the rows of update s land after batch s+1's compute (its dense layers at once). Written out plainly here in one
process: step s computes on the dense layers after update s-1 and on the rows after update s-3. P ranks equal one
process with the same delay (every lazy optimizer, hot rows, the node exchange bit for bit with the flat one); a
settle loses nothing; a skipped step changes nothing; it is neither --stale-rows 1 nor 0; --hashed-update dense is
refused."""
import numpy as np
import pytest
import scipy.sparse as sp

from mpi_shard_exchange import cut, cuts
from mpi_sharded import data_for, make_trainer, spec_for, steps
from mpi_stale import N_SPARSE, batch_at, one_process, run_stale, skipped_at_3
from ranks import COMM, LR, agree
from mpinn.core.batch import Batch
from mpinn.device.backend import compact_csr
from mpinn.model.mlp import MLP
from mpinn.training.stale import StaleShardedStep


def plain_late_sgd(batch, n, data):
    """SGD whose step s computes on the dense layers as they are and on the rows after update s-3, each update
    p -= lr g taken on the parameters as they are: the table's history kept, written out."""
    model = MLP(spec_for()).init_(0)
    width, start = model.table[1], model.dense_start
    table = model.params[:N_SPARSE * width].reshape(N_SPARSE, width)
    history = [table.copy()]                    # history[u]: the table after update u (0: as initialised)
    for s in range(1, n + 1):
        whole = batch_at(data, batch, s)
        ids, Xc = compact_csr(np, sp, whole.Xs)
        rows = history[max(s - 3, 0)][ids]
        rows_grad = model.loss_grad_(Batch(Xc, whole.Xd, whole.y), 1.0 / batch, sparse_grad=True, table=rows).rows
        model.params[start:] -= LR * model.grads[start:]
        table[ids] -= LR * rows_grad
        history.append(table.copy())
    return model.params


def test_the_rows_of_update_s_land_after_the_next_compute():
    """SGD: --stale-rows 2 equals the plain reference to 1e-12 at every rank count, and neither --stale-rows 1 nor
    the reference's depth-1 mode."""
    got, t = run_stale("sgd", depth=2)
    agree(type(t.stepper) is StaleShardedStep and t.stepper.depth == 2)
    ref = plain_late_sgd(12, 6, data_for())
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs the plain reference: %g" % np.max(np.abs(got - ref)))
    one, _ = run_stale("sgd")
    agree(np.max(np.abs(got - one)) > 1e-6, "--stale-rows 2 equals --stale-rows 1")
    agree(np.max(np.abs(ref - one_process("sgd", 12, 6, data_for(), COMM.size))) > 1e-6, "the reference's depth")


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad", "adagrad-rowwise", "ftrl"])
def test_p_ranks_equal_one_process_with_the_same_delay(optimizer):
    """P ranks with --stale-rows 2 equal one process with the same delay whose micro-batches are the ranks' shares
    (uneven at np 2 and 3): a row's update taken a step late, at its own step's count and rate (Adam's bias
    correction, FTRL's rate), changes no bit of what the reference's in-order updates give."""
    got, _ = run_stale(optimizer, batch=7, depth=2)
    ref = one_process(optimizer, 7, 6, data_for(), COMM.size, depth=2)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process: %g" % np.max(np.abs(got - ref)))


def test_the_rate_of_a_late_row_is_its_own_steps():
    """A rate that changes every step: the rows of update s land a call later at step s's rate (Adam)."""
    def schedule(global_step, plateaus=0):
        return LR * (global_step + 1) / 3.0
    got, _ = run_stale("adam", schedule=schedule, depth=2)
    ref = one_process("adam", 12, 6, data_for(), COMM.size, rate=lambda s: LR * s / 3.0, depth=2)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process: %g" % np.max(np.abs(got - ref)))


def test_the_dense_update_of_the_table_is_refused():
    """--hashed-update dense steps every row every step with the dense layers: no late rows' update for it (the
    step refuses it; the options' rule stale-rows-lazy says so first, tests/entry/test_rules.py)."""
    with pytest.raises(ValueError, match="^depth 2 needs the lazy update of the hashed table"):
        run_stale("adam-dense", depth=2)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad-rowwise"])
def test_through_the_node_exchange_the_flat_exchanges_bits(optimizer):
    """On every cut of this job into nodes (summed in the node, or dealt round robin: unsummed), with hot rows, the
    node exchange's posted gradient rows give the flat exchange's parameters bit for bit; once with the progress
    thread driving the rows and the gradient rows in flight."""
    hot = np.array([3, 17, 40, 41, 63])
    flat, _ = run_stale(optimizer, batch=7, hot=hot, depth=2)
    ref = one_process(optimizer, 7, 6, data_for(), COMM.size, depth=2)
    agree(np.max(np.abs(flat - ref)) < 1e-12, "flat vs one process: %g" % np.max(np.abs(flat - ref)))
    for i, (R, dealt) in enumerate(cuts()):
        got, t = run_stale(optimizer, batch=7, hot=hot, shard_exchange="node", topology=cut(R, dealt, COMM),
                           progress="thread" if i == 0 else None, depth=2)
        agree(np.array_equal(got, flat), "R %d dealt %s: %g" % (R, dealt, np.max(np.abs(got - flat))))
        t.stepper.release_()
        t.comm.comm.Free()


def test_a_settle_lands_every_update():
    """Settles after steps 2 and 4 (an evaluation's, a checkpoint's): every update given is taken, the delays
    restart, and the run equals the reference settled there (and differs from the straight one)."""
    got, _ = run_stale("adam", settle_at=(2, 4), depth=2)
    ref = one_process("adam", 12, 6, data_for(), COMM.size, settles={2, 4}, depth=2)
    agree(np.max(np.abs(got - ref)) < 1e-12, "vs one process settled: %g" % np.max(np.abs(got - ref)))
    straight = one_process("adam", 12, 6, data_for(), COMM.size, depth=2)
    agree(np.max(np.abs(ref - straight)) > 1e-6, "the settles changed nothing")


def test_a_skipped_step_changes_nothing():
    """A NaN in one rank's dense gradient at step 3: every rank skips update 3, its dense layers and its rows (its
    verdict rides in its own dense Allreduce), the results still come one call late, and the run equals the
    reference without update 3."""
    verdicts, got = skipped_at_3(2)
    agree(verdicts == [(1, True), (2, True), (3, False), (4, True), (5, True), (6, True)], "%s" % verdicts)
    ref = one_process("adam", 12, 6, data_for(), COMM.size, skip={3}, depth=2)
    agree(np.isfinite(got).all() and np.max(np.abs(got - ref)) < 1e-12,
          "vs one process: %g" % np.max(np.abs(got - ref)))


def test_a_sum_that_overflows_on_its_way_is_an_error_not_a_silent_step():
    """Finite gradient rows whose sum at their owner is not (the update would write Inf into the table): the owner
    raises a clear error rather than take it. The sum's overflow is made by hand: update 1's rows, as they arrive,
    set to Inf (every rank waits for them; those that own some raise)."""
    from mpinn.core.errors import MpinnError
    t = make_trainer("sharded", "sgd", 12, stale_rows=2)
    t.start()
    steps(t, data_for(), 12, 0, 2)
    late, t.stepper.late = t.stepper.late, None
    arrived = late.rows.finish

    def overflowing(p):
        mine = arrived(p)
        mine.rows[...] = np.inf
        return mine
    late.rows.finish = overflowing
    before = t.stepper.table.copy()
    if late.rows.plan.wanted.size:
        with pytest.raises(MpinnError, match="^step 1: gradient rows summed on their way to their owner are not"):
            t.stepper._land(late)
    else:
        t.stepper._land(late)
    agree(late.step == 1 and np.array_equal(t.stepper.table, before), "the table was stepped")
    agree(COMM.allreduce(int(late.rows.plan.wanted.size > 0)) > 0, "no rank owned a row of step 1")
