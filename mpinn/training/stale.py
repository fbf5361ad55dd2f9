"""--stale-rows 1: the sharded table's rows fetched one step ahead, their exchange overlapping the previous batch's
compute (StaleShardedStep); deterministic: batch s+1 sees the table as it was after update s-1."""
import contextlib
import functools
import time

from mpinn.comm.progress import Progress
from mpinn.training.sharded import ShardedStep

PROGRESS = ("thread", "none")   # who drives MPI on the posted rows while the rank computes (docs/scale.md)


class _Held:
    """A batch whose rows have arrived, waiting for the next call to be computed: its compact batch (the feed makes
    every batch's arrays anew, so holding them is safe), rows and RowPlan, and the n_global, step number and
    learning rate it was given with."""
    __slots__ = ("batch", "rows", "plan", "n_global", "step", "lr")

    def __init__(self, batch, rows, plan, n_global, step, lr):
        self.batch, self.rows, self.plan, self.n_global, self.step, self.lr = batch, rows, plan, n_global, step, lr


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
    cross between nodes in the Ialltoallv; their hand-out inside the node is the wait's); progress: "thread" (a Progress thread drives MPI on the posted rows while this rank computes
    and updates) or "none" (MPI's own, e.g. MPIR_CVAR_ASYNC_PROGRESS=1, or none until the wait)."""

    def __init__(self, *args, progress="thread", **kw):
        super().__init__(*args, **kw)
        if progress not in PROGRESS:
            raise ValueError("progress is one of %s, not %r" % (", ".join(PROGRESS), progress))
        self.progress = Progress() if progress == "thread" and self.comm.size > 1 else None
        self.held, self.settled = None, []

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
        update (this thread's own collectives drive it between them)."""
        busy = contextlib.nullcontext
        if self.progress is not None and request is not None:
            busy = functools.partial(self.progress.driving, request)
        loss, ok = self.finish_(held.batch, held.rows, held.plan, held.n_global, held.step, held.lr, busy)
        self.settled.append((loss, ok, held.n_global, held.step))

    def settle_(self, step):
        """Collective: the held batch computed and applied (no new fetch); the next call starts the pipeline
        again."""
        if self.held is not None:
            held, self.held = self.held, None
            self._apply(held)

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
