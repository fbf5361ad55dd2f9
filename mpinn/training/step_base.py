"""What every step strategy shares (Step): this rank's gradient, the finiteness verdict, the phases on
the timeline, and the parameters' way in and out (start, checkpoints, the model file)."""
import numpy as np

from mpinn.core.batch import coalesce
from mpinn.comm import split_counts
from mpinn.core.errors import MpinnError


def all_finite(a):
    """Is every element of a finite? A NaN or Inf anywhere makes the sum of |a| non-finite (so does
    a sum of |a| past the float range: a gradient no step should take either). On the host the sum
    is BLAS's asum, 5x faster than numpy's sum: 10 against 54 us for W1's gradient."""
    if isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64) and a.flags.c_contiguous and a.size:
        from scipy.linalg import blas  # memory: scipy.linalg (8 MiB, 50 ms) only for a host array, never on a GPU
        return bool(np.isfinite((blas.sasum if a.dtype == np.float32 else blas.dasum)(a.reshape(-1))))
    return bool(np.isfinite(float(a.sum())))


def agree_on(comm, ok, loss):
    """(every rank's verdict, the summed loss) in one 16-byte Allreduce, before anything is stepped: a step one
    rank found not finite is skipped on every rank. (A reduced gradient is the same on every rank, which needs no
    message: Communicator.agree_; a sharded table's verdict rides in its dense Allreduce as a NaN.)"""
    verdict = np.array([0.0 if ok else 1.0, loss])
    comm.Allreduce_sum_(verdict, "step verdict and loss")
    return verdict[0] == 0, float(verdict[1])


class Step:
    """What every strategy shares: this rank's gradient (in micro-batches with grad_accum), the
    finiteness verdict, and the step's phases on the timeline."""

    shares_params = False       # do the node's ranks hold one copy of the parameters?
    stages = False              # does it stage its host batches onto the device itself (GraphStep)?

    def __init__(self, model, optimizer, comm, faults, timeline, grad_accum=1, towers=None):
        self.model, self.optimizer, self.comm = model, optimizer, comm
        self.faults, self.timeline = faults, timeline
        self.grad_accum, self._acc = int(grad_accum), None
        self.towers = towers        # tower mode: None (data parallel), "shard" or "same" data
        self.want_rows = bool(model.spec.n_sparse) and (not comm.wants_dense or optimizer.needs_touched_rows)
        self._loss = None           # the step's loss sum, where finite() read it with the verdict (on a device)

    def __call__(self, local, n_global, step, lr):
        raise NotImplementedError

    def outcomes(self, result, flush=False):
        """The settled steps' (loss, ok, n_global, step): the one just taken, at once (a GraphStep's later)."""
        return [result] if result is not None else []

    def broadcast_params_(self):
        """At start: every rank takes rank 0's parameters (initial or restored)."""
        if not self.towers:         # towers start different on purpose (a seed per rank)
            self.comm.Bcast_(self.model.params, root=0, what="initial parameters")

    def release_(self):
        """Collective, after training: free what the strategy made for its exchanges."""

    def settle_(self, step):
        """Before an evaluation or a checkpoint: make the parameters the ones to evaluate and save."""

    def predict(self, local):
        """Predictions for this rank's held-out rows (collective where the model is spread over ranks)."""
        return self.model.predict(local)

    def load_params_(self, params, where="parameters"):
        """Before start(): rank 0's whole flat parameters (None elsewhere) become the model's; start()
        gives them to every rank (broadcast_params_)."""
        if self.comm.rank == 0:
            check_params(params, self.model, where)
            self.model.params[...] = self.model.xp.asarray(params)

    def restore_(self, arrays, where):
        """Before start(): a checkpoint's parameters and optimizer state (arrays on rank 0 only)."""
        rank0 = self.comm.rank == 0
        self.load_params_(arrays["params"] if rank0 else None, where)
        shapes = self.comm.bcast_obj({k[4:]: (v.shape, str(v.dtype)) for k, v in arrays.items()
                                      if k.startswith("opt_")} if rank0 else None)
        state = {}
        for k, (shape, dt) in shapes.items():
            buf = np.ascontiguousarray(arrays["opt_" + k]) if rank0 else np.empty(shape, dtype=dt)
            state[k] = self.comm.Bcast_(buf, root=0, what="optimizer state %s" % k)
        self.optimizer.load_state(state)

    def saved_arrays(self):
        """Collective: a checkpoint's arrays (the flat parameters, the optimizer state as opt_*) on
        rank 0, None elsewhere."""
        if self.comm.rank != 0:
            return None
        arrays = {"params": self.model.params}
        arrays.update({"opt_" + k: v for k, v in self.optimizer.state().items()})
        return arrays

    def final_params(self):
        """Collective: the whole flat parameters on rank 0 (for the model file), None elsewhere."""
        return self.model.params if self.comm.rank == 0 else None

    def adopt_params(self, whole):
        """The model takes `whole` (whole_params' copy, on every rank here) as its parameters; returns
        final_params'."""
        self.model.params[...] = whole
        return self.final_params()

    def restore_whole(self, whole):
        """Collective: a checkpoint's whole flat parameters (e.g. its best epoch's; given on rank 0) held as
        whole_params holds them: on every rank here."""
        model = self.model
        buf = np.ascontiguousarray(whole) if self.comm.rank == 0 else np.empty_like(model.backend.asnumpy(model.params))
        return model.xp.asarray(self.comm.Bcast_(buf, root=0, what="best parameters"))

    def whole_params(self):
        """Collective: a copy of the whole flat parameters (e.g. the best epoch's) on every rank that
        holds them all: every rank here."""
        return self.model.params.copy()

    def local_gradient(self, local, scale, want_rows):
        """This rank's share of the step's gradient (the sparse block's rows, or None)."""
        model = self.model
        if self.grad_accum == 1:
            return model.loss_grad_(local, scale, sparse_grad=want_rows)
        start = model.dense_start if want_rows else 0    # a rows-exchange leaves the sparse block stale
        parts = self.micro_batches(local, start, lambda mb: model.loss_grad_(mb, scale, sparse_grad=want_rows))
        if not parts:
            return None
        return coalesce([(p.ids, p.rows) for p in parts], parts[0].n_rows)

    def micro_batches(self, local, start, gradient):
        """--grad-accum K: gradient(micro-batch) over K micro-batches one after another (activations for a
        K-th of the rows at a time); the flat gradient buffer from `start` on is their sum, added in
        order, which equals the gradient of the whole slice up to the order of the additions. Returns
        what gradient returned for each (its sparse part), in order, Nones left out."""
        model = self.model
        if self._acc is None or self._acc.shape[0] != model.grad_buffer.shape[0] - start:
            self._acc = np.zeros_like(model.grad_buffer[start:])
        acc = self._acc
        acc.fill(0)
        parts = []
        bounds = np.r_[0, np.cumsum(split_counts(local.n, self.grad_accum))]
        for a, b in zip(bounds[:-1], bounds[1:]):
            part = gradient(local.slice(a, b))
            acc += model.grad_buffer[start:]
            if part is not None:
                parts.append(part)
        model.grad_buffer[start:] = acc
        return parts

    def finite(self, reduced):
        """Is the reduced gradient (and the loss in its last slot) finite? One pass per buffer. On a device, one
        read to the host brings the verdict and the loss together (loss() then reads nothing): a sum of the
        buffer (and of the rows) is finite only where every element is, as all_finite's."""
        buf, rows = self.model.grad_buffer, None
        if reduced is not None:   # the sparse block travelled as rows; its slice of the buffer is stale
            buf, rows = buf[reduced.n_rows * reduced.width:], reduced.rows
        backend = self.model.backend
        if backend.device is None:
            return (rows is None or all_finite(rows)) and all_finite(buf)
        total = buf.sum() if rows is None else buf.sum() + rows.sum()
        total, self._loss = (float(v) for v in backend.asnumpy(self.model.xp.stack([total, buf[-1]])))
        return bool(np.isfinite(total))

    def loss(self):
        """This step's loss sum (the gradient buffer's last slot): as finite() read it on a device, else read now."""
        loss, self._loss = self._loss, None
        return float(self.model.grad_buffer[-1]) if loss is None else loss

    def account(self, step, t1, t2, t3, t4, t5):
        """A step's phases on the timeline: compute t1-t2, communication t2-t3 and t4-t5, update t3-t4."""
        rec = self.timeline.add
        rec("compute", t1, t2, step)
        rec("comm", t2, t3, step)
        rec("update", t3, t4, step)
        rec("comm", t4, t5, step)


def check_params(params, model, where):
    """Do the whole flat parameters params (a checkpoint's, a model file's) fit this model?"""
    if params.shape != model.params.shape or params.dtype != model.params.dtype:
        raise MpinnError("%s: parameters %s %s do not fit this model (%s %s)" % (
            where, params.dtype, params.shape, model.params.dtype, model.params.shape))
