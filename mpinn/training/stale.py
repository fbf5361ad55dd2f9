"""--stale-rows 1 and 2: the sharded table's rows fetched one step ahead, their exchange overlapping the previous
batch's compute (StaleShardedStep); with 2 the gradient rows' exchange overlaps the next batch's compute too, the
rows' update landing a step late. Deterministic: batch s+1 sees the table after update s-1 (1) or s-2 (2); the dense
layers stay synchronous."""
import contextlib
import functools
import time

import numpy as np

from mpinn.comm.progress import Progress
from mpinn.core.errors import MpinnError
from mpinn.training.sharded import ShardedStep
from mpinn.training.step_base import all_finite

PROGRESS = ("thread", "none")   # who drives MPI on the posted rows while the rank computes (docs/scale.md)


class _Held:
    """A batch whose rows have arrived, waiting for the next call to be computed: its compact batch (the feed makes
    every batch's arrays anew, so holding them is safe), rows and RowPlan, and the n_global, step number and
    learning rate it was given with."""
    __slots__ = ("batch", "rows", "plan", "n_global", "step", "lr")

    def __init__(self, batch, rows, plan, n_global, step, lr):
        self.batch, self.rows, self.plan, self.n_global, self.step, self.lr = batch, rows, plan, n_global, step, lr


class _Late:
    """A rows' update on its way (--stale-rows 2): its gradient rows posted to their owners (send_back's
    PendingRows), its verdict, and the step number and learning rate it was given with."""
    __slots__ = ("rows", "ok", "step", "lr")

    def __init__(self, rows, ok, step, lr):
        self.rows, self.ok, self.step, self.lr = rows, ok, step, lr


class StaleShardedStep(ShardedStep):
    """ShardedStep pipelined by one batch, as TorchRec's TrainPipelineSemiSync: the call given batch s+1 sends its
    ids to their owners (counts and ids, small, blocking), the owners take its rows from their table at once, before
    update s (that snapshot makes it deterministic), and post the rows' Ialltoallv; then batch s, held since the
    last call with the rows it fetched then, is computed, its gradient rows sent back, the dense gradient and loss
    Allreduced, update s taken and the hot rows' replica refreshed, exactly as ShardedStep does; then the call waits
    for batch s+1's rows and holds it. So batch s+1's rows are the table after update s-1 (they miss update s; a
    hot row's too: the replica is read when the fetch is posted), its gradient rows are applied to the owners'
    current rows at update s+1, and the dense layers are synchronous.

    Results come one call late (Step.outcomes). settle_ (before an evaluation, a checkpoint, the end) computes and
    applies the held batch with no new fetch; the next call starts the pipeline again (its batch sees the table
    after the last update). One process reproduces P ranks: the rows used at step s are the table after update
    max(s - 2, r), r the last settle before s (tests/training/mpi_stale.py). The flat or the node exchange (its rows
    cross between nodes in the Ialltoallv; their hand-out inside the node is the wait's); progress: "thread" (a
    Progress thread drives MPI on the posted rows while this rank computes and updates) or "none" (MPI's own, e.g.
    MPIR_CVAR_ASYNC_PROGRESS=1, or none until the wait).

    depth 2 (--stale-rows 2): the gradient rows of batch s are posted too (send_back's Ialltoallv; the node
    exchange's hand-in and the relay's sum are done first) and travel while batch s+1 computes; the dense part of
    update s is taken at once (Optimizer.step_ on the dense region: the step counted), its rows' part after that
    compute (_land: Optimizer.rows_ at step s's rate; a lazy update's row reads only its own state, Adam's count
    too, so the order of the two parts changes no bit). So
    batch s computes on the dense layers after update s-1 and on the rows after update s-3 (its fetch was posted
    before update s-2's rows landed). The verdict rides in the dense Allreduce as before, from every rank's own
    gradient rows (a sum of finite rows that overflows on its way is an error, not a skip). One process reproduces
    P ranks with the same delay. It needs the lazy update of the table (not --hashed-update dense)."""

    def __init__(self, *args, progress="thread", depth=1, **kw):
        super().__init__(*args, **kw)
        if progress not in PROGRESS:
            raise ValueError("progress is one of %s, not %r" % (", ".join(PROGRESS), progress))
        if depth not in (1, 2):
            raise ValueError("depth is 1 or 2, not %r" % (depth,))
        if depth == 2 and not self.optimizer.sparse_ok:     # the plan refuses it (the rule stale-rows-lazy)
            raise ValueError("depth 2 needs the lazy update of the hashed table")
        self.progress = Progress() if progress == "thread" and self.comm.size > 1 else None
        self.depth, self.held, self.late, self.settled = depth, None, None, []

    def __call__(self, local, n_global, step, lr):
        rec, now = self.timeline.add, time.perf_counter
        t0 = now()
        ids, batch = self.compact(local)
        t1 = now()
        pending = self.shards.post(self.table, ids)
        t2 = now()
        rec("compute", t0, t1, step)
        rec("comm", t1, t2, step, "row ids to owners, rows posted (Ialltoallv)")
        if self.held is not None:
            held, self.held = self.held, None
            self._apply(held, pending.request)
        t3 = now()
        rows, plan = pending.wait()
        rec("comm", t3, now(), step, "wait for the next batch's rows")
        self.held = _Held(batch, rows, plan, n_global, step, lr)
        return None, None

    def _apply(self, held, request=None):
        """ShardedStep's step from the gradient on (finish_), for the held batch (its rows fetched a call ago), while
        `request` (the next batch's rows) is in flight: the progress thread drives it during the compute and the
        update (this thread's own collectives drive it between them). Depth 2: _apply_late."""
        if self.depth == 2:
            loss, ok = self._apply_late(held, request)
        else:
            busy = contextlib.nullcontext
            if self.progress is not None and request is not None:
                busy = functools.partial(self.progress.driving, request)
            loss, ok = self.finish_(held.batch, held.rows, held.plan, held.n_global, held.step, held.lr, busy)
        self.settled.append((loss, ok, held.n_global, held.step))

    def _apply_late(self, held, request):
        """Depth 2: batch s (held) computed while the next batch's rows and update s-1's gradient rows travel (the
        progress thread drives both), its gradient rows posted to their owners, its dense gradient and loss
        Allreduced (the verdict: every rank's gradient rows and dense gradient finite), the dense layers stepped;
        then update s-1's rows land and update s's wait for the next call. (mean loss, ok)."""
        model, rec, now, late = self.model, self.timeline.add, time.perf_counter, self.late
        busy = contextlib.nullcontext
        if self.progress is not None:
            busy = functools.partial(self.progress.driving, request, late.rows.request if late else None)
        t0 = now()
        with busy():
            grad_rows = self.gradient_rows(held.batch, 1.0 / (held.n_global or 1), held.rows)
            self.faults.fire(held.step, model.grad_buffer)
        t1 = now()
        sent = self.shards.send_back(held.plan, grad_rows, wait=False)
        t2 = now()
        dense = model.grad_buffer[model.dense_start:]
        if not all_finite(grad_rows):
            dense[-1] = np.nan
        self.comm.Allreduce_sum_(dense, "dense gradient and loss")
        ok, loss = all_finite(dense), float(dense[-1]) / (held.n_global or 1)
        t3 = now()
        if ok:
            self.optimizer.step_(model.params, model.grads, None, regions=[(model.dense_start, model.size)],
                                 lr=held.lr)
        t4 = now()
        rec("compute", t0, t1, held.step)
        rec("comm", t1, t2, held.step, "gradient rows posted to owners (Ialltoallv)")
        rec("comm", t2, t3, held.step, "dense Allreduce")
        rec("update", t3, t4, held.step)
        self.late = _Late(sent, ok, held.step, held.lr)
        self._land(late)
        return loss, ok

    def _land(self, late):
        """Update `late`'s rows taken once its gradient rows have arrived (skipped where its verdict said so), at its
        step's rate; the hot rows' replica refreshed."""
        if late is None:
            return
        rec, now = self.timeline.add, time.perf_counter
        t0 = now()
        mine = late.rows.wait()
        t1 = now()
        rec("comm", t0, t1, late.step, "wait for the gradient rows")
        if not late.ok:
            return
        if not all_finite(mine.rows):
            raise MpinnError("step %d: gradient rows summed on their way to their owner are not finite, though every "
                             "rank's own were (a late rows' update decides a skip before the sums)" % late.step)
        self.optimizer.rows_(self.table, mine, late.lr)
        t2 = now()
        self.shards.refresh_hot_(self.table)
        rec("update", t1, t2, late.step)
        if self.hot_rows:
            rec("comm", t2, now(), late.step, "hot rows to every rank (Allgatherv)")

    def settle_(self, step):
        """Collective: the held batch computed and applied (no new fetch), the late update taken; the next call
        starts the pipeline again."""
        if self.held is not None:
            held, self.held = self.held, None
            self._apply(held)
        if self.late is not None:
            late, self.late = self.late, None
            self._land(late)

    def outcomes(self, result, flush=False):
        """The (loss, ok, n_global, step) of the steps applied since the last call: the batch before the one just
        given (and, after a settle, the held one); a call's own result is None."""
        out, self.settled = self.settled, []
        return out

    def release_(self):
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        super().release_()

    # the parameters leave the step whole only with every batch given applied (collectives: every rank calls them)
    def saved_arrays(self):
        self.settle_(None)
        return super().saved_arrays()

    def whole_params(self):
        self.settle_(None)
        return super().whole_params()

    def final_params(self):
        self.settle_(None)
        return super().final_params()
