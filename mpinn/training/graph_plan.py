"""One training step as a fixed list of operations over preallocated memory (issue 62): the step plan a GPU runs
eagerly or captures once as a CUDA graph and replays. Forward, head, backward, the hashed block's gradient rows,
the verdict and the update, each an operation of mpinn.device.ops (numpy's on the host and the fake device,
mpinn.device.cuda_ops's kernels on a GPU), in the order and with the arithmetic of the model's own step
(mpinn.model.mlp.MLP.loss_grad_ then mpinn.training.steps.ReduceStep at one rank). Nothing in run() reads a device
value on the host or allocates: the rows, the scale and the rate come in the batch's slot (BatchSlot), Adam's count
and the ring's place live in device memory, so a replay does what an eager step would.

What it covers (mpinn.settings.plan.graph_refusal says why not, for everything else): one rank; an MLP with hashed and/or dense
inputs, no periodic embeddings, no wide part; a softmax (class ids), sigmoid (one column) or squared-error head;
SGD or Adam without weight decay, lazy on the hashed block; one gradient pass a step (no --grad-accum)."""
import numpy as np

from mpinn.device.ops import N_SCALARS

INDEX = np.int32            # a slot's column ids and row offsets


def nnz_class(nnz, least=256):
    """The capacity a batch of nnz hashed entries is staged in: the next power of two (at least `least`)."""
    return max(least, 1 << max(int(nnz) - 1, 0).bit_length())


class BatchSlot:
    """A batch's place on the device: one buffer holding, end to end and each 16-byte aligned, the step's scalars
    (float64), the labels, the dense inputs and the hashed rows' CSR (values, column ids, row offsets), for up to
    `rows` rows and `nnz` entries; one pinned host buffer laid out alike, so a batch is one copy. `views(buf)` are
    the arrays over either."""

    def __init__(self, rows, nnz, n_dense, n_sparse, dtype, label_dtype):
        self.rows, self.nnz = int(rows), int(nnz)
        parts = [("scalars", (N_SCALARS,), np.float64), ("y", (self.rows,), label_dtype)]
        if n_dense:
            parts.append(("Xd", (self.rows, n_dense), dtype))
        if n_sparse:
            parts += [("data", (self.nnz,), dtype), ("indices", (self.nnz,), INDEX),
                      ("indptr", (self.rows + 1,), INDEX)]
        self.layout, at = [], 0
        for name, shape, dt in parts:
            dt = np.dtype(dt)
            self.layout.append((name, at, shape, dt))
            at += -(-int(np.prod(shape)) * dt.itemsize // 16) * 16
        self.nbytes = at

    def views(self, buf):
        """name -> the array over buf (a uint8 buffer of nbytes: host or device)."""
        return {name: buf[at:at + int(np.prod(shape)) * dt.itemsize].view(dt).reshape(shape)
                for name, at, shape, dt in self.layout}

    def fill(self, views, batch, n_global, lr):
        """Write a host batch and its step's scalars into the (pinned) views; returns the rows and entries."""
        n = batch.n
        views["scalars"][:] = 0
        views["scalars"][:2] = (1.0 / (n_global or 1), lr)
        views["y"][:n] = batch.y.reshape(n)
        if "Xd" in views:
            views["Xd"][:n] = batch.Xd
        nnz = 0
        if "data" in views:
            X = batch.Xs
            nnz = int(X.indptr[-1])
            views["data"][:nnz] = X.data[:nnz]
            views["indices"][:nnz] = X.indices[:nnz]
            views["indptr"][:n + 1] = X.indptr
        return n, nnz


class StepPlan:
    """The operations of one step for `model` and `optimizer` (allocated), over a workspace for up to `rows` rows
    and `nnz` hashed entries on the model's device, run by `ops` (mpinn.device.ops.HostOps or CudaOps); `ring`
    and `state` (see mpinn.device.ops) outlive a plan (a larger batch makes a new one)."""

    def __init__(self, model, optimizer, ops, rows, nnz, ring, state):
        self.model, self.opt, self.ops = model, optimizer, ops
        spec, xp = model.spec, model.xp
        self.rows, self.nnz = int(rows), int(nnz)
        dt = model.dtype
        widths = [w.shape[1] for w in model.W]
        self.z = [xp.zeros((self.rows, w), dt) for w in widths]        # each layer's output, then its activation
        self.d = [xp.zeros((self.rows, w), dt) for w in widths]        # each layer's delta
        self.loss_rows = xp.zeros(self.rows, dt)
        self.hashed = (ops.hashed_workspace(spec.n_sparse, self.rows, self.nnz, widths[0], dt)
                       if spec.n_sparse else None)
        self.ring, self.state = ring, state
        self.adam = (optimizer.b1, optimizer.b2, optimizer.eps_scaled) if optimizer.name == "adam" else None

    def run(self, b, n):
        """Queue one step on batch views b (BatchSlot.views over the device buffer) with n rows."""
        ops, m, spec = self.ops, self.model, self.model.spec
        ns, nd, L, act = spec.n_sparse, spec.n_dense, m.n_layers, spec.activation
        W, bias = m.W, m.b
        z = [a[:n] for a in self.z]
        d = [a[:n] for a in self.d]
        # forward: ((0 + X W) + Xd W) + b, then act(z + b) @ W per layer (MLP.forward's order)
        if nd:
            ops.gemm(b["Xd"][:n], W[0][ns:ns + nd], z[0])
        if ns:
            ops.rows_times(b["indptr"], b["indices"], b["data"], W[0][:ns], z[0], z[0] if nd else None, bias[0])
        else:
            ops.bias_add(z[0], bias[0])
        for l in range(1, L):
            ops.bias_act(z[l - 1], bias[l - 1] if l > 1 else None, act)
            ops.gemm(z[l - 1], W[l], z[l])
        if L > 1:
            ops.bias_add(z[-1], bias[-1])
        ops.head(spec.loss, z[-1], b["y"][:n], b["scalars"], self.loss_rows[:n], d[-1])
        ops.total(self.loss_rows[:n], m.grad_buffer[-1:])
        # backward (MLP.loss_grad_'s order)
        for l in range(L - 1, 0, -1):
            ops.gemm(z[l - 1], d[l], m.gW[l], ta=True)
            ops.colsum(d[l], m.gb[l])
            ops.gemm(d[l], W[l], d[l - 1], tb=True)
            ops.act_grad(z[l - 1], d[l - 1], act)
        ops.colsum(d[0], m.gb[0])
        if nd:
            ops.gemm(b["Xd"][:n], d[0], m.gW[0][ns:ns + nd], ta=True)
        h = self.hashed
        if ns:
            ops.hashed_grad(b["indptr"], b["indices"], b["data"], ns, d[0], h)
        # the verdict over what the update reads (ReduceStep.finite), then the update it predicates
        start = m.dense_start
        ops.verdict(m.grad_buffer[start:], h["rows"] if ns else None, h["k"] if ns else None, self.ring, self.state)
        self.update(b["scalars"], start)
        ops.advance(self.state)

    def update(self, scalars, start):
        """The optimizer's step (Optimizer.step_ at one rank: the dense elements, then the touched rows)."""
        ops, m, opt, h = self.ops, self.model, self.opt, self.hashed
        p, g = m.params[start:], m.grads[start:]
        table = m.params[:start].reshape(m.table) if h is not None else None
        if self.adam is None:
            ops.sgd_dense(p, g, scalars, self.ring, self.state)
            if h is not None:
                ops.sgd_rows(table, h["ids"], h["rows"], h["k"], scalars, self.ring, self.state)
            return
        mm, vv = opt.arrays["m_scaled"], opt.arrays["v_scaled"]
        ops.adam_dense(p, g, mm[start:], vv[start:], self.state, scalars, self.ring, *self.adam)
        if h is not None:
            ops.adam_rows(table, mm[:start].reshape(m.table), vv[:start].reshape(m.table), opt.arrays["t_row"],
                          h["ids"], h["rows"], h["k"], self.state, scalars, self.ring, *self.adam)
