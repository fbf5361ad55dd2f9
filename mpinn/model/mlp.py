"""The MLP: parameters and gradients in one flat buffer each, layers hold views; no ranks here."""
import math

import numpy as np

from mpinn.device.backend import get_backend
from mpinn.device.ops import act_grad_
from mpinn.core.batch import SparseRows, densify_
from mpinn.model.periodic import Periodic
from mpinn.host.heap import fresh_zeros, small_pages_at


def _act(name, xp, z):
    if name == "relu":
        return xp.maximum(z, 0, out=z)
    if name == "tanh":
        return xp.tanh(z, out=z)
    # sigmoid, written to stay finite for large |z|
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1 / (1 + e), e / (1 + e))


class MLP:
    """x -> [act(x W_l + b_l)]* -> x W_L + b_L, with a softmax, sigmoid or squared-error head.

    Wide and deep (spec.wide, with hidden layers): W0 has n_out more columns, whose outputs skip the
    hidden layers and are added to the output: output = deep(x) + x W0[:, h:] + b0[h:], a linear model
    on every input trained jointly with the network (Cheng et al. 2016). Its weights are extra columns
    of the same table rows, so the hashed table's row machinery (sparse rows, their exchange, sharding,
    lazy updates, checkpoints, the fused kernels) serves both parts unchanged; they start at zero.

    Periodic embeddings (spec.periodic, mpinn.model.periodic): the first `columns` dense inputs also enter through
    them, as the first layer's last inputs; their parameters sit between b0 and W1.

    Buffer layout: W0, b0, [periodic], W1, b1, ..., W0 first so that its sparse block W0[:n_sparse] is a prefix.
    Everything after `dense_start` is what a dense exchange moves when the sparse block goes as rows.
    """

    def __init__(self, spec, backend=None):
        self.spec = spec
        self.backend = backend or get_backend("numpy")
        xp = self.xp = self.backend.xp
        self.dtype = np.dtype(spec.dtype)
        sizes = spec.layer_sizes
        outs = (spec.first_width,) + sizes[2:]          # each layer's output columns
        self.deep_width = sizes[1] if spec.has_wide else None     # the first layer's columns that go on
        self.periodic = Periodic(spec.periodic, xp, self.dtype) if spec.periodic else None
        self.shapes, offsets, n = [], [], 0
        for l, (fin, fout) in enumerate(zip(sizes[:-1], outs)):
            for shape in ((fin, fout), (fout,)):
                self.shapes.append(shape)
                offsets.append(n)
                n += math.prod(shape)
            if l == 0 and self.periodic is not None:
                self.periodic_at = (n, n + self.periodic.size)
                n += self.periodic.size
        self.offsets, self.size = offsets, n
        zeros = (lambda k: fresh_zeros(k, self.dtype)) if xp is np else (lambda k: xp.zeros(k, dtype=self.dtype))
        self.params = zeros(n)
        # one extra trailing slot carries the local loss sum through the same reduction
        self.grad_buffer = zeros(n + 1)
        self.grads = self.grad_buffer[:n]
        self.W, self.b = self._views(self.params)
        self.gW, self.gb = self._views(self.grads)
        self.dense_start = spec.n_sparse * outs[0]
        self.table = (spec.n_sparse, outs[0]) if spec.n_sparse else (0, 0)    # the hashed block's rows x width
        self.weight_slices = [(o, o + math.prod(s)) for o, s in zip(offsets, self.shapes) if len(s) == 2]

    def use_grad_buffer(self, buf, move=True):
        """Keep the gradients (and the loss slot) in buf, e.g. a slot of a shared-memory window,
        which starts zeroed, instead of the model's own array. The current contents move along
        (move=False: they are dropped), only the nonzero ones: a zero page written is a page made
        resident, and most of a hashed layer's gradient block is never written when its rows travel apart.
        A model's fresh buffer holds none: one look (any) instead of a mask of its length."""
        if buf.shape != self.grad_buffer.shape or buf.dtype != self.grad_buffer.dtype:
            raise ValueError("gradient buffer of %s %s given for %s %s" % (
                buf.shape, buf.dtype, self.grad_buffer.shape, self.grad_buffer.dtype))
        if move and self.grad_buffer.any():
            np.copyto(buf, self.grad_buffer, where=self.grad_buffer != 0)
        self.grad_buffer = buf
        self.grads = buf[:self.size]
        self.gW, self.gb = self._views(self.grads)

    def use_param_buffer(self, buf):
        """Read and write the parameters in buf (e.g. one copy shared by a node's ranks), which
        already holds their values."""
        if buf.shape != self.params.shape or buf.dtype != self.params.dtype:
            raise ValueError("parameter buffer of %s %s given for %s %s" % (
                buf.shape, buf.dtype, self.params.shape, self.params.dtype))
        self.params = buf
        self.W, self.b = self._views(buf)

    def _views(self, flat):
        vs = [flat[o:o + math.prod(s)].reshape(s) for o, s in zip(self.offsets, self.shapes)]
        return vs[0::2], vs[1::2]

    @property
    def n_layers(self):
        return len(self.W)

    def layout(self):
        """What must match on every rank and in every model file."""
        out = {"shapes": [list(s) for s in self.shapes], "size": self.size, "dtype": self.dtype.name}
        if self.periodic is not None:
            out["periodic"] = [list(s) for s in self.periodic.shapes]
        return out

    def _periodic_slice(self, flat):
        return flat[self.periodic_at[0]:self.periodic_at[1]]

    def init_(self, seed, rows=None, chunk=1 << 20):
        """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, drawn in float64 from seed.
        The sparse block's fan-in is the number of active inputs per row, not its column count.
        rows=(lo, hi): of the hashed block, only rows lo:hi are written (a sharded table: the other
        rows' pages are never touched), with the values a whole init gives them (the generator is
        advanced past the others: one 64-bit draw per value). Written chunk values at a time, so no
        temporary is the size of the parameters."""
        rng = np.random.default_rng(seed)
        width = self.table[1]
        if rows is not None and isinstance(self.params, np.ndarray):
            small_pages_at(self.params, (rows[0] * width, rows[1] * width))     # resident: the rows, to a page
        for l, (o, s) in enumerate(zip(self.offsets, self.shapes)):
            fan_in = self.shapes[2 * (l // 2)][0]
            if l < 2 and self.spec.n_sparse:
                fan_in = self.spec.sparse_fan_in + self.spec.n_dense + self.spec.periodic_width
            bound = 1.0 / math.sqrt(max(fan_in, 1))
            n = math.prod(s)
            keep = [(0, n)]
            if l == 0 and rows is not None:     # this rank's table rows, then W0's dense-input rows
                keep = [(rows[0] * width, rows[1] * width), (self.dense_start, n)]
            at = 0
            for a, b in keep:
                rng.bit_generator.advance(a - at)
                for c in range(a, b, chunk):
                    d = min(c + chunk, b)
                    self.params[o + c:o + d] = self.xp.asarray(rng.uniform(-bound, bound, d - c).astype(self.dtype))
                at = b
            rng.bit_generator.advance(n - at)
        if self.periodic is not None:
            self.periodic.init_(self._periodic_slice(self.params), seed)
        if self.deep_width is not None:     # the linear part starts at zero (a logistic regression's start)
            W0, h = self.W[0], self.deep_width
            for a, b in ([(rows[0], rows[1]), (self.spec.n_sparse, W0.shape[0])] if rows is not None
                         else [(0, W0.shape[0])]):
                W0[a:b, h:] = 0
            self.b[0][h:] = 0
        return self

    def set_params(self, arrays):
        """Copy a list of (W0, b0, W1, b1, ...) arrays into the flat buffer."""
        for o, s, a in zip(self.offsets, self.shapes, arrays):
            a = self.xp.asarray(a, dtype=self.dtype)
            if tuple(a.shape) != tuple(s):
                raise ValueError("parameter of shape %s given for a slot of shape %s" % (a.shape, s))
            self.params[o:o + math.prod(s)] = a.ravel()
        return self

    # ---------------------------------------------------------------- forward
    def dense_inputs(self, batch):
        """The batch's dense inputs in the parameters' dtype. Rows read on this rank (no scatter, which sends
        them typed) come as float64; float64 inputs against float32 weights fall off BLAS into numpy's generic
        loop: the first layer's dense product took 5x the whole step of W4's benchmark at np 1."""
        Xd = batch.Xd
        return Xd if Xd.dtype == self.dtype else Xd.astype(self.dtype)

    def _first_layer(self, batch, table=None, kept=None):
        spec, xp = self.spec, self.xp
        n = batch.n
        if self.backend.fused and self.periodic is None and n:    # one kernel: ((0 + X W) + Xd W) + b
            dense = None
            if spec.n_dense:
                dense = self.dense_inputs(batch) @ self.W[0][spec.n_sparse:spec.n_sparse + spec.n_dense]
            if spec.n_sparse:
                return self.backend.sparse_matmul(batch.Xs, self.W[0][:spec.n_sparse] if table is None else table,
                                                  dense, self.b[0])
            dense += self.b[0]
            return dense
        z = xp.zeros((n, spec.first_width), dtype=self.dtype)
        if spec.n_sparse:
            z += self.backend.sparse_matmul(batch.Xs, self.W[0][:spec.n_sparse] if table is None else table)
        if spec.n_dense:
            Xd = self.dense_inputs(batch)
            dense_end = spec.n_sparse + spec.n_dense
            z += Xd @ self.W[0][spec.n_sparse:dense_end]
            if self.periodic is not None:
                H, keep = self.periodic.forward(self._periodic_slice(self.params), Xd[:, :self.periodic.m],
                                                keep=kept is not None)
                z += H @ self.W[0][dense_end:]
                if kept is not None:
                    kept.update(H=H, periodic=keep)
        z += self.b[0]
        return z

    def forward(self, batch, table=None, kept=None):
        """Activations of every layer; the last is the head's raw output (logits / values).
        table: the hashed block's rows this batch uses, in place of W0[:n_sparse], when batch.Xs's
        columns number those rows 0..k-1 (a compact CSR: a sharded table's fetched rows).
        kept: a dict that receives what the periodic embeddings' backward pass needs (when there are any)."""
        acts = []
        z = self._first_layer(batch, table, kept)
        wide = None
        if self.deep_width is not None:     # the linear part's columns go straight to the output
            z, wide = z[:, :self.deep_width], z[:, self.deep_width:]
        for l in range(1, self.n_layers):
            if l == 1:          # the first layer's bias is in z already
                a = _act(self.spec.activation, self.xp, z)
            elif self.backend.fused:
                a = self.backend.bias_act_(z, self.b[l - 1], self.spec.activation)
            else:
                z += self.b[l - 1]
                a = _act(self.spec.activation, self.xp, z)
            acts.append(a)
            z = a @ self.W[l]
        if self.n_layers > 1:
            z += self.b[-1]
        if wide is not None:
            z += wide
        acts.append(z)
        return acts

    def predict(self, batch, table=None):
        """Class probabilities (softmax / one-vs-all sigmoid), P(y=1) for binary, or values; on
        the host (an edge: the rows may come from the host, the predictions go back there).
        table: see forward."""
        z = self.forward(self.backend.batch_to_device(batch), table)[-1]
        return self.backend.asnumpy(head_output(self.spec.loss, self.xp, z))

    # ---------------------------------------------------------------- loss and backward
    def loss_sum(self, batch):
        """Sum over rows of the data loss (no weight decay)."""
        if batch.n == 0:
            return 0.0
        batch = self.backend.batch_to_device(batch)
        loss, _ = head_loss_delta(self.spec.loss, self.xp, self.forward(batch)[-1], batch.y, False)
        return float(loss)

    def loss_grad_(self, batch, scale, sparse_grad=False, on_ready=None, table=None):
        """Write scale * d(sum of row losses)/d(params) into self.grads, and the row-loss sum into
        the buffer's trailing slot. With sparse_grad, the sparse block of W0 is returned as
        SparseRows instead of being written (its slice of self.grads is then left untouched).
        on_ready(start), if given, is called as soon as grad_buffer[start:] holds its final values:
        after each layer's gW/gb, from the last layer down (start = that layer's offset; the loss
        slot is already written), so a caller can reduce the later layers while the earlier ones
        back-propagate. Not called for a rank with no rows.
        table (with sparse_grad): the batch's rows of the hashed block, batch.Xs a compact CSR over
        them (see forward); the gradient rows then come back for all k of them, ids 0..k-1."""
        spec, xp = self.spec, self.xp
        batch = self.backend.batch_to_device(batch)     # the same batch unless it is still on the host
        if batch.n == 0:            # a rank with no rows this step still takes part in the step
            self.grad_buffer[-1] = 0
            self.grads[self.dense_start if sparse_grad else 0:] = 0
            return (SparseRows(xp.zeros(0, np.int64), xp.zeros((0, spec.first_width), self.dtype),
                               spec.n_sparse) if sparse_grad and spec.n_sparse else None)
        kept = {}
        acts = self.forward(batch, table, kept)
        fused = self.backend.head(spec.loss, acts[-1], batch.y, scale) if self.backend.fused else None
        if fused is not None:       # one kernel: the rows' losses and d * scale
            loss, d = fused
        else:
            loss, d = head_loss_delta(spec.loss, xp, acts[-1], batch.y, True)
            if scale != 1:
                d *= self.dtype.type(scale)
        self.grad_buffer[-1] = loss
        d_out = d                   # the linear part's delta: the output's (d is rebound below, never written)
        for l in range(self.n_layers - 1, 0, -1):
            a = acts[l - 1]
            xp.matmul(a.T, d, out=self.gW[l])
            xp.sum(d, axis=0, out=self.gb[l])
            if on_ready is not None:
                on_ready(self.offsets[2 * l])
            d = d @ self.W[l].T
            if self.backend.fused:
                self.backend.act_grad_(a, d, spec.activation)
            else:
                act_grad_(spec.activation, a, d)
        if self.deep_width is not None:
            d = xp.concatenate([d, d_out], axis=1)
        xp.sum(d, axis=0, out=self.gb[0])
        if spec.n_dense:
            dense_end = spec.n_sparse + spec.n_dense
            xp.matmul(self.dense_inputs(batch).T, d, out=self.gW[0][spec.n_sparse:dense_end])
            if self.periodic is not None:
                xp.matmul(kept["H"].T, d, out=self.gW[0][dense_end:])
                self.periodic.backward_(self._periodic_slice(self.params), self._periodic_slice(self.grads),
                                        kept["periodic"], d @ self.W[0][dense_end:].T)
        if not spec.n_sparse:
            if on_ready is not None:
                on_ready(0)
            return None
        if table is not None:       # the columns are the rows already: X^T d, as sparse_rows_grad's
            if on_ready is not None:
                on_ready(self.dense_start)
            grad = self.backend.sparse_t_matmul(batch.Xs, d)
            return SparseRows(xp.arange(table.shape[0]), xp.ascontiguousarray(grad), spec.n_sparse)
        rows = sparse_rows_grad(self.backend, batch.Xs, d, spec.n_sparse)
        if sparse_grad:
            if on_ready is not None:
                on_ready(self.dense_start)
            return rows
        self.densify_(rows)
        if on_ready is not None:
            on_ready(0)
        return None

    def densify_(self, rows):
        """Write SparseRows into the dense gradient of the sparse block (zeros elsewhere)."""
        densify_(self.grad_buffer, rows)


def sparse_rows_grad(backend, Xs, d, n_rows):
    """X^T d restricted to the columns X touches, without a dense (n_rows, width) temporary."""
    ids, compact = backend.compact(Xs)
    return SparseRows(ids, backend.compact_t_matmul(compact, d), n_rows)


def head_output(loss, xp, z):
    if loss == "softmax":
        z = z - z.max(axis=1, keepdims=True)
        e = xp.exp(z)
        return e / e.sum(axis=1, keepdims=True)
    if loss == "sigmoid":
        p = _act("sigmoid", xp, z.copy())
        return p[:, 0] if p.shape[1] == 1 else p
    return z[:, 0] if z.shape[1] == 1 else z


def _targets(loss, xp, z, y):
    """Targets shaped like z: one-hot for class ids, a column for a vector."""
    if y.ndim == 1 and np.issubdtype(y.dtype, np.integer) and z.shape[1] > 1:
        t = xp.zeros_like(z)
        t[xp.arange(z.shape[0]), y] = 1
        return t
    return y.reshape(z.shape).astype(z.dtype, copy=False)


def head_loss_delta(loss, xp, z, y, want_delta):
    """(sum over rows of the loss, d loss_sum / d z)."""
    n = z.shape[0]
    if loss == "softmax":
        m = z.max(axis=1, keepdims=True)
        e = xp.exp(z - m)
        s = e.sum(axis=1, keepdims=True)
        rows = xp.arange(n)
        total = xp.sum(xp.log(s[:, 0]) + m[:, 0] - z[rows, y])
        if not want_delta:
            return total, None
        e /= s
        e[rows, y] -= 1
        return total, e
    t = _targets(loss, xp, z, y)
    if loss == "sigmoid":
        # log(1 + e^z) - t z, stable for any z
        total = xp.sum(xp.maximum(z, 0) - t * z + xp.log1p(xp.exp(-xp.abs(z))))
        return total, (_act("sigmoid", xp, z.copy()) - t) if want_delta else None
    r = z - t
    return 0.5 * xp.sum(r * r), r if want_delta else None


PREDICT_ROWS = 65536        # rows predicted at once: predict_rows's chunk, and a streamed predict's block


def predict_rows(model, data, chunk=PREDICT_ROWS):
    """The model's predictions for every row of a data set, a chunk at a time (this process alone)."""
    out = [model.predict(data.take(np.arange(s, min(s + chunk, len(data))), model.dtype))
           for s in range(0, len(data), chunk)]
    return np.concatenate(out) if out else np.zeros(0)
