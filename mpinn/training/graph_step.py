"""GraphStep: a GPU rank's step as the step plan (mpinn.training.graph_plan), captured once per staging slot as a
CUDA graph and replayed, with no host wait inside a step (issue 62).

A step: the host batch and its scalars (1/n, the rate) are written into one of two slots' pinned buffers and
copied to the device in one copy on the copy stream; the step's stream waits for that copy on the device and
replays the slot's graph (captured at its first full batch; a short batch runs the same operations eagerly).
The verdict and the loss go to a ring on the device; the host reads the ring when it is full and when the trainer
settles (before an evaluation, a checkpoint, an epoch's end): Step.outcomes gives the steps' (loss, ok) then.
A skipped step (non-finite) changes nothing on the device, Adam's count included."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.device.ops import POS, RING, T
from mpinn.training.graph_plan import BatchSlot, StepPlan, nnz_class
from mpinn.training.step_base import Step


class _Slot:
    """A staging slot: its layout, one pinned and one device buffer, their views, and its two events (made once)."""

    def __init__(self, backend, layout):
        self.layout = layout
        self.pinned = backend.pinned_empty(layout.nbytes, np.uint8)
        self.dev = backend.device_empty(layout.nbytes, np.uint8)
        self.host_views, self.dev_views = layout.views(self.pinned), layout.views(self.dev)
        self.copied, self.released = backend.new_event(), backend.new_event()
        self.used = False


class GraphStep(Step):
    """The step plan at one rank: captured per slot and batch size, replayed; the results settle later."""

    stages = True           # the trainer hands it host batches (it stages them itself: one copy a batch)

    def __init__(self, model, optimizer, comm, ops, capture=True, **kw):
        super().__init__(model, optimizer, comm, **kw)
        self.ops, self.capture = ops, bool(capture)
        b, xp = model.backend, model.xp
        self.copy_stream = b.new_stream()
        self.ring, self.state = xp.zeros((RING, 2), np.float64), xp.zeros(2, np.int64)
        self.plan, self.slots, self.turn, self.graphs = None, [None, None], 0, {}
        self.pending = []           # (n_global, step) of the steps queued since the ring was read
        self.recorded = 0           # steps recorded in the ring (state[POS] on the device)
        self.fresh = True           # the device state is written from the host before the next step
        self.captured = 0           # graphs captured (a test and the start-up line's count)

    def __call__(self, local, n_global, step, lr):
        lr = float(lr)
        if not lr >= 0 or lr == float("inf"):
            raise MpinnError("the learning rate must be a finite number >= 0, not %s" % lr)
        t1 = self.timeline.now()
        if self.fresh:
            self._begin()
        n, spec = local.n, self.model.spec
        nnz = int(local.Xs.indptr[-1]) if spec.n_sparse else 0
        plan = self._plan_for(n, nnz)
        i = self.turn
        self.turn ^= 1
        slot = self.slots[i]
        if slot is None:
            label = np.asarray(local.y).dtype
            slot = self.slots[i] = _Slot(self.model.backend, BatchSlot(
                plan.rows, plan.nnz, spec.n_dense, spec.n_sparse, self.model.dtype, label))
        self._stage(slot, local, n_global, lr)
        stream = self.ops.stream()
        stream.wait_event(slot.copied)      # on the device: the host goes on
        with stream:
            if self.capture and n == plan.rows:
                graph = self.graphs.get(i)
                if graph is None:
                    graph = self.graphs[i] = self.ops.capture(lambda: plan.run(slot.dev_views, n))
                    self.captured += 1
                graph.replay()
            else:
                plan.run(slot.dev_views, n)
        slot.released.record(stream)
        self.pending.append((n_global, step))
        self.timeline.add("compute", t1, self.timeline.now(), step)
        return None, None

    def _begin(self):
        """The device's count and ring place from the host's (a start, a restore), after the work queued so far."""
        b = self.model.backend
        b.synchronize()
        self.state[...] = self.model.xp.asarray(np.array([self.recorded, self.optimizer.t], np.int64))
        b.synchronize()
        self.fresh = False

    def _plan_for(self, n, nnz):
        """The plan for a batch of n rows and nnz hashed entries: the current one, or a larger one (its slots and
        graphs made anew) when the batch does not fit."""
        plan = self.plan
        cap = nnz_class(nnz) if self.model.spec.n_sparse else 0
        if plan is None or n > plan.rows or cap > plan.nnz:
            self.ops.synchronize()          # the old workspace may still be read by queued steps
            rows = max(n, plan.rows if plan else 0)
            self.plan = plan = StepPlan(self.model, self.optimizer, self.ops, rows, max(cap, plan.nnz if plan else 0),
                                        self.ring, self.state)
            # the plan's arrays were made (and zero-filled) on the current stream, which the step's stream, a
            # non-blocking one, does not wait for: the fills done before any step's operation can write there
            self.model.backend.synchronize()
            self.slots, self.graphs = [None, None], {}
        return plan

    def _stage(self, slot, local, n_global, lr):
        """The batch and its scalars into the slot's pinned buffer, then one copy to the device (copy stream)."""
        b = self.model.backend
        if slot.used:
            b.host_wait(slot.copied)                    # its previous copy is done (long ago: no wait)
            self.copy_stream.wait_event(slot.released)  # on the device: the step that read it is done
        slot.layout.fill(slot.host_views, local, n_global, lr)
        b.copy_to_device_async(slot.dev, slot.pinned, self.copy_stream)
        slot.copied.record(self.copy_stream)
        slot.used = True

    def outcomes(self, result, flush=False):
        """The (loss, ok, n_global, step) of the steps whose results are read now: when the ring is full or when
        asked (flush), else none."""
        if not self.pending or (not flush and len(self.pending) < RING):
            return []
        self.ops.synchronize()
        b = self.model.backend
        ring, state = b.asnumpy(self.ring), b.asnumpy(self.state)
        out = []
        for j, (n_global, step) in enumerate(self.pending):
            loss, ok = ring[(self.recorded + j) % RING]
            out.append((float(loss) / (n_global or 1), bool(ok == 1.0), n_global, step))
        self.recorded += len(self.pending)
        self.pending = []
        assert int(state[POS]) == self.recorded, "the ring's place on the device %d, on the host %d" % (
            int(state[POS]), self.recorded)
        self.optimizer.t = int(state[T])
        return out

    def restore_(self, arrays, where):
        super().restore_(arrays, where)
        self.fresh = True

    def load_params_(self, params, where="parameters"):
        super().load_params_(params, where)
        self.fresh = True
