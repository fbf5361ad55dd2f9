"""One training step once this rank has its rows: gradient, exchange, verdict, update. One strategy
object per way of doing it, chosen once (choose_step) so the trainer's loop has no branches for them:

    ReduceStep    gradients combined by the communicator (allreduce, gather, tower, null), then the step
    OverlapStep   the same, with the dense Allreduce posted in buckets during backward (--overlap)
    SharedStep    one parameter copy per node: each rank sums and steps its part (SGD, hashed inputs)
    LocalSGDStep  each rank steps on its own gradient, parameters averaged every K steps (--average-every)
    ShardedStep   the hashed table split by rows over the ranks (--table sharded; training/sharded.py)

Every strategy returns (mean loss, ok); ok is False when the step was skipped for a non-finite loss or
gradient on some rank, and every rank reaches the same verdict, so a skipped step changes nothing. Which one a
run takes is its plan's (mpinn.settings.plan); mpinn.training.build makes it."""

import numpy as np

from mpinn.core.batch import RowParts
from mpinn.training.step_base import Step, agree_on, all_finite  # noqa: F401 (all_finite: for the step modules)


class ReduceStep(Step):
    """The communicator combines every rank's gradient (reduce_gradients_); the ranks that update
    (all, or rank 0 for gather) step; sync_params_ makes the parameters equal again (gather's Bcast)."""

    def __call__(self, local, n_global, step, lr):
        model, comm, opt = self.model, self.comm, self.optimizer
        t1 = self.timeline.now()
        # data parallel: a row's share of the global mean; a tower: of its own rows' mean
        n_mean = (local.n if self.towers else n_global) or 1
        t2, reduced = self.gradient(local, 1.0 / n_mean, step)
        ok = comm.agree_(self.finite(reduced) if comm.updates_here else True)
        t3 = self.timeline.now()
        if comm.updates_here and ok and (local.n or not self.towers):   # a tower with no rows has no step
            if reduced is not None and not opt.sparse_ok:
                model.densify_(reduced)
                reduced = None
            opt.step_(model.params, model.grads, reduced, lr=lr)
        t4 = self.timeline.now()
        comm.sync_params_(model.params)
        self.account(step, t1, t2, t3, t4, self.timeline.now())
        return self.loss() / n_mean, ok         # the mean loss is right on rank 0 for every strategy

    def gradient(self, local, scale, step):
        """(end of compute, the reduced gradient's sparse rows or None)."""
        model = self.model
        sparse = self.local_gradient(local, scale, self.want_rows)
        self.faults.fire(step, model.grad_buffer)
        t2 = self.timeline.now()
        return t2, self.comm.reduce_gradients_(model.grad_buffer, sparse)


class OverlapStep(ReduceStep):
    """--overlap: backward with the later layers' Iallreduce posted as each layer finishes
    (comm.overlap_), then the rest, in buckets of `bucket` elements."""

    bucket = 1 << 16

    def gradient(self, local, scale, step):
        model = self.model
        overlap = self.comm.overlap_(model.grad_buffer, model.offsets[2::2], self.bucket)
        fired = []

        def ready(start):
            if not fired:       # the test hooks act on the finished gradient, before any of it is sent
                fired.append(self.faults.fire(step, model.grad_buffer))
            overlap.ready(start)

        sparse = model.loss_grad_(local, scale, sparse_grad=self.want_rows, on_ready=ready)
        if not fired:
            self.faults.fire(step, model.grad_buffer)
        t2 = self.timeline.now()
        return t2, overlap.finish(sparse)


class SharedStep(Step):
    """One copy of the parameters and of the optimizer state per node: the gradients are summed in
    shared memory, each rank summing and stepping only its part of the dense buffer and of the sparse
    block's rows (ids split in P ranges), so the update work is split P ways and the state (momentum,
    Adam's moments, Adagrad's and FTRL's accumulators) is held once on the node, each rank updating
    its part of it (ZeRO-1's partition, inside the node). The verdict and the loss travel in one
    16-byte Allreduce before anything is stepped, so a skipped step changes nothing anywhere; a
    Barrier after the update keeps every rank from reading parameters that are still being stepped.
    Element by element, the same arithmetic as the other paths. On several nodes (every node with as
    many ranks), each rank's part of the sum is completed with one Allreduce among the ranks with the
    same part on the other nodes, and every node steps its own copy the same way."""

    shares_params = True

    def __init__(self, model, optimizer, comm, shared, **kw):
        super().__init__(model, optimizer, comm, **kw)
        self.shared = shared        # the node's window (mpinn.comm.shm.SharedGradients): slots, parameters, state

    def broadcast_params_(self):
        self.shared.bcast_params_()     # one copy per node: rank 0's (a restore) to the other nodes

    def __call__(self, local, n_global, step, lr):
        model, comm, opt = self.model, self.comm, self.optimizer
        t1 = self.timeline.now()
        n_mean = n_global or 1
        sparse = self.local_gradient(local, 1.0 / n_mean, self.want_rows and opt.sparse_ok)
        self.faults.fire(step, model.grad_buffer)
        t2 = self.timeline.now()
        loss = float(model.grad_buffer[-1])
        start, mine, block = 0, [], (0, 0)
        if sparse is not None:
            reduced = comm.exchange_rows(sparse)
            if reduced is None:
                model.densify_(sparse)
            else:
                start, block = reduced.n_rows * reduced.width, (reduced.n_rows, reduced.width)
                lo_id, hi_id = self.shared.part(0, reduced.n_rows)
                for ids, rows in reduced.leaves():       # every rank's leaf, empty or not: the tree's places
                    a, b = np.searchsorted(ids, (lo_id, hi_id))
                    mine.append((ids[a:b], rows[a:b]))
        lo, hi = self.shared.sum_own_(start)
        ok_here = all_finite(model.grad_buffer[lo:hi]) and all(all_finite(r) for _, r in mine if r.shape[0])
        ok, loss = agree_on(comm, ok_here, loss)
        t3 = self.timeline.now()
        if ok:
            rows = RowParts(mine, *block) if block[0] else None
            opt.step_(model.params, model.grads, rows, lo=lo, hi=min(hi, model.size), lr=lr)
        t4 = self.timeline.now()
        self.shared.fence_params()
        self.account(step, t1, t2, t3, t4, self.timeline.now())
        return loss / n_mean, ok


class LocalSGDStep(Step):
    """--average-every K (local SGD): each rank steps on its own gradient, and every K steps the
    parameters are averaged. A rank's rows count as a P-th of the step (scale P/N, not 1/n_r), so
    that the mean over ranks of the local gradients is the global mean gradient even when the
    slices are uneven: with K = 1 and plain SGD, averaging the parameters after each step equals
    averaging the gradients (all ranks start equal: mean_r(p - lr g_r) = p - lr mean_r(g_r)).
    Only 16 bytes travel on the other steps: the skip verdict and the loss, which keeps the
    ranks in lockstep on a non-finite step. Optimizer state (momentum, Adam moments) stays per rank."""

    def __init__(self, model, optimizer, comm, average_every=1, **kw):
        super().__init__(model, optimizer, comm, **kw)
        self.average_every, self.local_steps = int(average_every), 0

    def __call__(self, local, n_global, step, lr):
        model, comm, opt, rec = self.model, self.comm, self.optimizer, self.timeline.add
        t1 = self.timeline.now()
        rows = self.local_gradient(local, comm.size / (n_global or 1), self.want_rows)
        self.faults.fire(step, model.grad_buffer)
        t2 = self.timeline.now()
        ok, loss = agree_on(comm, self.finite(rows), self.loss())
        t3 = self.timeline.now()
        if ok:
            if rows is not None and not opt.sparse_ok:
                model.densify_(rows)
                rows = None
            opt.step_(model.params, model.grads, rows, lr=lr)
        t4 = self.timeline.now()
        rec("compute", t1, t2, step)
        rec("comm", t2, t3, step)
        rec("update", t3, t4, step)
        self.local_steps += 1
        if self.local_steps >= self.average_every:
            self.average_params_(step)
        return loss / (n_global or 1), ok

    def settle_(self, step):
        """A checkpoint or an evaluation sees the averaged parameters."""
        if self.local_steps:
            self.average_params_(step)

    def average_params_(self, step):
        """Every rank's parameters become their mean (one Allreduce of the parameters)."""
        t0 = self.timeline.now()
        self.comm.Allreduce_sum_(self.model.params, "parameters")
        if self.comm.size > 1:
            self.model.params /= self.comm.size
        self.local_steps = 0
        self.timeline.add("comm", t0, self.timeline.now(), step)
