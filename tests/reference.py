"""Plain float64 references, written from the published definitions and nothing of mpinn's: the learning
rate over the steps, and each optimizer's update, coordinate by coordinate. mpinn's schedule and optimizers
are tested against these (test_optim_reference.py in one process, mpi_reference.py on 1, 2 and 3 ranks,
replicated, sharded and shared-memory state).

Lazy variants (the hashed block's rows, --hashed-update lazy) follow the definition mpinn's docstrings
give: a row's state moves only on the steps that touch it (a touched row is one the batch has a value
in, whatever its gradient), its L2 decay is applied on those steps only, and Adam counts a row's own
steps for its bias correction."""
import math

import numpy as np


def lr_at(step, lr, warmup=0, decay="none", total=0, scaling="none", ratio=1.0):
    """The rate of step `step` (0-based). Linear scaling (Goyal et al. 2017, section 2.1): lr x k for a
    batch k times the one lr was tuned for (sqrt: x sqrt(k)). Gradual warm-up (ibid. 2.2): linearly, over
    `warmup` steps, from lr up to the scaled rate (from target / warmup when nothing is scaled). Then the
    decay over the remaining total - warmup steps, s the share of them done: cosine annealing
    (Loshchilov and Hutter 2017, one cycle, eta_min = 0) target (1 + cos(pi s)) / 2; step: target, then
    / 10 at half-way and / 100 at three quarters (Goyal et al.'s schedule, counted in steps)."""
    target = lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[scaling]
    if step < warmup:
        start = lr if scaling != "none" else target / warmup
        return start + (target - start) * step / warmup
    if decay == "none":
        return target
    s = min((step - warmup) / max(total - warmup, 1), 1.0)
    if decay == "cosine":
        return target * (1.0 + math.cos(math.pi * s)) / 2.0
    return target * (0.01 if s >= 0.75 else 0.1 if s >= 0.5 else 1.0)


class Reference:
    """One optimizer on a flat float64 vector whose first n_rows x width elements are the hashed table.

    step(p, g, touched, lr): g is the whole gradient (zero where nothing flowed), touched the table rows
    the batch touched. Lazy: the step acts on the touched rows and on every element after the table;
    dense (lazy=False): on every element. weights: a mask of the elements that are weights (L2 decay,
    FTRL's l1 and l2 act on them; biases get neither)."""

    def __init__(self, name, size, weights, n_rows, width, lazy=True, weight_decay=0.0, momentum=0.9,
                 beta1=0.9, beta2=0.999, eps_adam=1e-8, eps_adagrad=1e-10, rowwise=False, l1=0.0, l2=0.0,
                 beta=1.0):
        self.name, self.n_rows, self.width, self.lazy = name, n_rows, width, lazy
        self.weights, self.wd = np.asarray(weights, bool), weight_decay
        self.mu, self.b1, self.b2, self.eps_adam, self.eps_adagrad = momentum, beta1, beta2, eps_adam, eps_adagrad
        self.rowwise, self.l1, self.l2, self.beta = rowwise, l1, l2, beta
        self.m, self.v, self.acc = np.zeros(size), np.zeros(size), np.zeros(size)
        self.t = np.zeros(size, np.int64)                   # steps that acted on each element
        self.acc_row = np.zeros(n_rows)
        self.z, self.n, self.inv_eta = np.zeros(size), np.zeros(size), np.zeros(size)

    def active(self, touched):
        a = np.ones(self.weights.shape[0], bool)
        if self.lazy:
            a[:self.n_rows * self.width] = False
            for r in touched:
                a[r * self.width:(r + 1) * self.width] = True
        return a

    def step(self, p, g, touched, lr):
        a = self.active(touched)
        g = g.copy()
        decayed = a & self.weights
        g[decayed] += self.wd * p[decayed]          # L2: lambda/2 |w|^2 adds lambda w to the gradient
        getattr(self, "_" + self.name)(p, g, a, lr)

    def _sgd(self, p, g, a, lr):
        p[a] -= lr * g[a]

    def _momentum(self, p, g, a, lr):               # PyTorch's SGD with momentum (dampening 0)
        self.v[a] = self.mu * self.v[a] + g[a]
        p[a] -= lr * self.v[a]

    def _adam(self, p, g, a, lr):
        """Kingma and Ba 2015, Algorithm 1 with the reordering of section 2 (the step size
        alpha_t = alpha sqrt(1 - b2^t) / (1 - b1^t), epsilon added to sqrt(v)); t counts each
        element's own steps."""
        b1, b2 = self.b1, self.b2
        self.t[a] += 1
        t = self.t[a]
        self.m[a] = b1 * self.m[a] + (1 - b1) * g[a]
        self.v[a] = b2 * self.v[a] + (1 - b2) * g[a] ** 2
        p[a] -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * self.m[a] / (np.sqrt(self.v[a]) + self.eps_adam)

    def _adagrad(self, p, g, a, lr):
        """Duchi, Hazan and Singer 2011 (diagonal), accumulators from 0; rowwise: one accumulator per
        table row, which adds the mean of the row's squared gradient (FBGEMM's row-wise Adagrad)."""
        table = self.n_rows * self.width
        rest = a.copy()
        if self.rowwise:
            rest[:table] = False
            for r in range(self.n_rows):
                sl = slice(r * self.width, (r + 1) * self.width)
                if a[sl].all():
                    self.acc_row[r] += np.mean(g[sl] ** 2)
                    p[sl] -= lr * g[sl] / (np.sqrt(self.acc_row[r]) + self.eps_adagrad)
        self.acc[rest] += g[rest] ** 2
        p[rest] -= lr * g[rest] / (np.sqrt(self.acc[rest]) + self.eps_adagrad)

    def _ftrl(self, p, g, a, alpha):
        """McMahan et al. 2013, Algorithm 1 (FTRL-Proximal, per coordinate), with the learning rate
        alpha of the step: 1/eta_t = (beta + sqrt(n_t)) / alpha_t and sigma_t = 1/eta_t - 1/eta_(t-1)
        (so that sigma_1 + ... + sigma_t = 1/eta_t, as the paper defines it). An element starts where
        the closed form gives the network's weight back: z = -((beta / alpha + l2) w + l1 sign(w)),
        1/eta_0 = beta / alpha."""
        l1 = np.where(self.weights, self.l1, 0.0)
        l2 = np.where(self.weights, self.l2, 0.0)
        new = a & (self.inv_eta == 0)
        self.z[new] = -((self.beta / alpha + l2[new]) * p[new] + l1[new] * np.sign(p[new]))
        self.inv_eta[new] = self.beta / alpha
        n_new = self.n[a] + g[a] ** 2
        inv_eta = (self.beta + np.sqrt(n_new)) / alpha
        sigma = inv_eta - self.inv_eta[a]
        self.z[a] += g[a] - sigma * p[a]
        self.n[a], self.inv_eta[a] = n_new, inv_eta
        z = self.z[a]
        p[a] = np.where(np.abs(z) <= l1[a], 0.0, -(z - np.sign(z) * l1[a]) / (inv_eta + l2[a]))


def tree_sum(values):
    """The pairwise (aligned binary) tree of a sum, written plainly: the values padded to a power of two with None
    (absent), then neighbours combined level by level, an absent one passing its partner through (no + 0)."""
    n = 1
    while n < len(values):
        n *= 2
    level = list(values) + [None] * (n - len(values))
    while len(level) > 1:
        level = [a if b is None else b if a is None else a + b for a, b in zip(level[0::2], level[1::2])]
    return level[0]


def int8_row(row):
    """--wire-rows int8's trip for one row (float32), written plainly: s = the row's largest magnitude / 127 and
    q = the element / s, each a float32 (a float64 quotient of float32s, rounded once to float32, is the float32
    quotient), q rounded half to even (Python's round) and kept within +-127; back as q x s (exact in float64,
    rounded once to float32). A row of zeros comes back zeros; a row holding a NaN or an Inf comes back all NaN."""
    x = [float(v) for v in np.asarray(row, np.float32)]
    top = max((abs(v) for v in x), default=0.0)
    if math.isnan(top) or math.isinf(top):
        return np.full(len(x), np.nan, np.float32)
    s = float(np.float32(top / 127.0))
    if s == 0.0:
        return np.zeros(len(x), np.float32)
    q = [max(-127, min(127, round(float(np.float32(v / s))))) for v in x]
    return np.array([np.float32(v * s) for v in q], np.float32)


def int8_edge_rows():
    """Rows for int8's rule: 200 of random scales, then ties, zeros, a subnormal, NaN, +-Inf, the largest floats."""
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(64) * 10.0 ** rng.integers(-6, 6) for _ in range(200)]
    rows += [np.r_[127.0, np.arange(-60, 3) + 0.5],       # s = 1: every x.5 a tie, to the even neighbour
             np.r_[-254.0, np.arange(63) * 2 + 1.0],      # s = 2: odd values are the ties
             np.zeros(64), -np.zeros(64), np.r_[1e-40, np.zeros(63)],        # a subnormal alone
             np.r_[np.nan, np.ones(63)], np.r_[np.inf, np.ones(63)], np.r_[-np.inf, np.zeros(63)],
             np.full(64, 3.4e38), np.r_[3.4e38, -3.4e38, np.ones(62)]]
    return np.array(rows, np.float32)
