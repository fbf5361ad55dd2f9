"""Optimizers on the flat parameter buffer: SGD, momentum, Adam; L2 decay on weights only."""
import numpy as np

from mpinn.config import MpinnError


class Optimizer:
    """step_(params, grads, sparse=None): grads is the mean-loss gradient already reduced over ranks
    (scratch: a step may overwrite it, and the rows of sparse).
    The L2 term lam * W is added here, once, to the weight slices only (biases are not decayed)."""

    def __init__(self, size, xp, lr, weight_decay=0.0, weight_slices=()):
        if not lr > 0:
            raise MpinnError("learning rate must be > 0, not %s" % lr)
        if weight_decay < 0:
            raise MpinnError("weight decay must be >= 0, not %s" % weight_decay)
        self.size, self.xp, self.lr = size, xp, float(lr)
        self.weight_decay, self.weight_slices = float(weight_decay), list(weight_slices)
        self.t = 0

    @property
    def sparse_ok(self):
        """Can the update take the sparse block as rows (exactly equal to the dense update)?"""
        return False

    def _decay_(self, params, grads, offset=0):
        """grads += lam * params on the weights; params and grads may be the window of the flat
        buffers that starts at element `offset`."""
        if self.weight_decay:
            for s, e in self.weight_slices:
                s, e = max(s - offset, 0), min(e - offset, params.size)
                if s < e:
                    grads[s:e] += self.weight_decay * params[s:e]

    def state(self):
        return {"t": np.array([self.t], dtype=np.int64)}

    def load_state(self, state):
        self.t = int(state["t"][0])


class SGD(Optimizer):
    name = "sgd"

    @property
    def sparse_ok(self):
        # untouched rows have zero gradient and, without decay, do not move
        return not self.weight_decay

    def step_(self, params, grads, sparse=None):
        self.t += 1
        if sparse is None:
            self._dense_(params, grads)
            return
        start = sparse.n_rows * sparse.width
        self._dense_(params[start:], grads[start:], start)      # no decay here: sparse_ok
        self._rows_(params[:start].reshape(sparse.n_rows, sparse.width), sparse.parts())

    def step_part_(self, params, grads, lo, hi, rows=(), block_shape=(0, 0)):
        """Shared parameters: this rank's part of one step, which the node's other ranks complete:
        elements lo:hi of the flat buffers, and the sparse block's rows given as (ids, rows) parts
        in rank order. The same arithmetic, element by element, as step_."""
        self.t += 1
        if hi > lo:
            self._dense_(params[lo:hi], grads[lo:hi], lo)
        if rows:
            self._rows_(params[:block_shape[0] * block_shape[1]].reshape(block_shape), rows)

    def _dense_(self, params, grads, offset=0):
        """params -= lr * grads on a window of the flat buffers starting at element offset. The
        gradient is scratch once applied: scaled in place (no temporary; the same roundings)."""
        self._decay_(params, grads, offset)
        grads *= params.dtype.type(self.lr)
        params -= grads

    def _rows_(self, block, parts):
        """Each rank's rows in rank order, no coalescing: the ids are unique within a part, so the
        fancy-indexed update is exact; rounding differs from p - lr (a + b) only in summation order."""
        lr = block.dtype.type(self.lr)
        for ids, rows in parts:
            rows *= lr
            block[ids] -= rows


class Momentum(Optimizer):
    name = "momentum"

    def __init__(self, size, xp, lr, momentum=0.9, **kw):
        super().__init__(size, xp, lr, **kw)
        self.mu = float(momentum)
        self.v = None

    def step_(self, params, grads, sparse=None):
        assert sparse is None, "momentum updates every row: densify sparse gradients first"
        self.t += 1
        self._decay_(params, grads)
        if self.v is None:
            self.v = self.xp.zeros_like(params)
        self.v *= params.dtype.type(self.mu)
        self.v += grads
        params -= params.dtype.type(self.lr) * self.v

    def state(self):
        s = super().state()
        if self.v is not None:
            s["v"] = self.v
        return s

    def load_state(self, state):
        super().load_state(state)
        self.v = self.xp.asarray(state["v"]) if "v" in state else None


class Adam(Optimizer):
    name = "adam"

    def __init__(self, size, xp, lr, beta1=0.9, beta2=0.999, eps=1e-8, **kw):
        super().__init__(size, xp, lr, **kw)
        self.b1, self.b2, self.eps = float(beta1), float(beta2), float(eps)
        self.m = self.v = None

    def step_(self, params, grads, sparse=None):
        assert sparse is None, "Adam updates every row: densify sparse gradients first"
        xp, f = self.xp, params.dtype.type
        self.t += 1
        self._decay_(params, grads)
        if self.m is None:
            self.m, self.v = xp.zeros_like(params), xp.zeros_like(params)
        self.m *= f(self.b1)
        self.m += f(1 - self.b1) * grads
        self.v *= f(self.b2)
        self.v += f(1 - self.b2) * grads * grads
        step = self.lr * np.sqrt(1 - self.b2 ** self.t) / (1 - self.b1 ** self.t)
        denom = xp.sqrt(self.v)
        denom += f(self.eps)
        params -= f(step) * self.m / denom

    def state(self):
        s = super().state()
        if self.m is not None:
            s["m"], s["v"] = self.m, self.v
        return s

    def load_state(self, state):
        super().load_state(state)
        if "m" in state:
            self.m, self.v = self.xp.asarray(state["m"]), self.xp.asarray(state["v"])


def create_optimizer(name, size, xp, lr, weight_decay=0.0, weight_slices=(), momentum=0.9):
    kw = dict(weight_decay=weight_decay, weight_slices=weight_slices)
    if name == "sgd":
        return SGD(size, xp, lr, **kw)
    if name == "momentum":
        return Momentum(size, xp, lr, momentum=momentum, **kw)
    if name == "adam":
        return Adam(size, xp, lr, **kw)
    raise MpinnError("optimizer must be sgd, momentum or adam, not %r" % name)


def lr_schedule(lr, global_batch, base_batch=None, scaling="none", warmup_steps=0):
    """(global step -> learning rate, the target rate). `lr` is tuned for a global batch of
    `base_batch`; linear scaling multiplies it by global_batch / base_batch (Goyal et al. 2017:
    k small steps ~ one k-times larger step while the gradient changes little over k steps), sqrt
    by the square root of that. Warm-up ramps linearly over `warmup_steps` steps from `lr` (from
    lr / warmup_steps when there is no scaling) up to the target, as Goyal et al. do."""
    if scaling not in ("none", "linear", "sqrt"):
        raise MpinnError("--lr-scaling must be none, linear or sqrt, not %r" % scaling)
    if scaling != "none" and not base_batch:
        raise MpinnError("--lr-scaling %s needs the batch the learning rate was tuned for: give "
                         "--lr-base-batch, or --batch-per-rank (then it is that batch)" % scaling)
    ratio = global_batch / base_batch if base_batch else 1.0
    target = lr * {"none": 1.0, "linear": ratio, "sqrt": ratio ** 0.5}[scaling]
    start = lr if scaling != "none" else target / max(warmup_steps, 1)
    warmup_steps = int(warmup_steps)

    def lr_at(step):
        if step >= warmup_steps:
            return target
        return start + (target - start) * step / warmup_steps

    return lr_at, target
