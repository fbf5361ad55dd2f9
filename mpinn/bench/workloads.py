"""The peers' benchmark workloads W1, W2, W3 (the shared peers benchmark's README): exact data, initial weights and
steps, as mpinn models. python -m mpinn.bench trains them; the tests check them against the peers' checksums.
W4 is mpinn's own (the click-log shape of mpinn.bench.w4): the peers' harness has no reader for it."""
import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mpinn.core.batch import Batch, Layout
from mpinn.core.spec import ModelSpec
from mpinn.hashing import token_columns


# ---------------------------------------------------------------- workload generators (peers README)
W1_LAYERS = (784, 256, 256, 10)
W2_N, W2_F, W2_BITS, W2_H = 262144, 20, 18, 64
W2_CARDS = [10 ** (1 + j % 5) for j in range(W2_F)]


def make_w1(n=60000):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, 784), dtype=np.float32)
    A = rng.standard_normal((784, 64))
    B = rng.standard_normal((64, 10))
    y = np.argmax(np.tanh((X.astype(np.float64) @ A) / np.sqrt(784)) @ B, axis=1).astype(np.int64)
    return X, y


def init_w1():
    rng = np.random.default_rng(101)
    out = []
    for fin, fout in zip(W1_LAYERS[:-1], W1_LAYERS[1:]):
        b = 1.0 / np.sqrt(fin)
        W = rng.uniform(-b, b, (fin, fout)).astype(np.float32)
        out += [W, rng.uniform(-b, b, fout).astype(np.float32)]
    return out


def make_w2_codes(n=W2_N):
    rng = np.random.default_rng(2)
    teacher = [rng.standard_normal(c) * (2.0 / np.sqrt(W2_F)) for c in W2_CARDS]
    codes = np.empty((n, W2_F), dtype=np.int64)
    for j, c in enumerate(W2_CARDS):
        cdf = np.cumsum(1.0 / np.power(np.arange(1, c + 1, dtype=np.float64), 1.1))
        cdf /= cdf[-1]
        codes[:, j] = np.searchsorted(cdf, rng.random(n), side="right")
    logit = np.zeros(n)
    for j in range(W2_F):
        logit += teacher[j][codes[:, j]]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return codes, y


def w2_hashed_indices(codes):
    """(n, 20) int64 columns: the token "c{j}={v}" is mpinn's "feature=value" with feature "c{j}"."""
    idx = np.empty_like(codes)
    for j, c in enumerate(W2_CARDS):
        idx[:, j] = token_columns("c%d" % j, np.arange(c), W2_BITS, 0)[codes[:, j]]
    return idx


def init_w2():
    rng = np.random.default_rng(102)
    a = 1.0 / np.sqrt(W2_F)
    E = rng.uniform(-a, a, (1 << W2_BITS, W2_H)).astype(np.float32)
    w2 = rng.uniform(-1 / 8, 1 / 8, (W2_H, 1)).astype(np.float32)
    return [E, np.zeros(W2_H, np.float32), w2, np.zeros(1, np.float32)]


def make_w3():
    rng = np.random.default_rng(3)
    P = rng.random((10, 400))
    y = np.repeat(np.arange(10, dtype=np.int64), 500)
    return P[y] + rng.standard_normal((5000, 400)), y


def init_w3():
    """Ng's theta1 (25, 401), theta2 (10, 26), bias column first."""
    rng = np.random.default_rng(103)
    return rng.random((25, 401)) * 0.24 - 0.12, rng.random((10, 26)) * 0.24 - 0.12


def thetas_to_params(thetas):
    out = []
    for t in thetas:
        out += [np.ascontiguousarray(t[:, 1:].T), t[:, 0].copy()]
    return out


def fingerprint(a):
    """First 16 hex digits of the SHA-256 of the raw C-order bytes (the peers' checksums)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


# ---------------------------------------------------------------- workloads as mpinn models
def _dense_rows(data, lo, hi):
    X, y = data
    return Batch(None, X[lo:hi], y[lo:hi])


def _w2_data():
    codes, y = make_w2_codes()
    return w2_hashed_indices(codes).astype(np.int32), y    # int32: what the scatter sends


def _w2_rows(data, lo, hi):
    idx, y = data
    n = hi - lo
    Xs = sp.csr_matrix((np.ones(n * W2_F, np.float32), idx[lo:hi].ravel(),
                        np.arange(0, n * W2_F + 1, W2_F, dtype=np.int32)), shape=(n, 1 << W2_BITS))
    return Batch(Xs, None, y[lo:hi])


W4_N, W4_BITS, W4_H, W4_SCALE = 262144, 20, 64, 100


def _w4_data(n=W4_N):
    """W4 rows 0..n of seed 0 at --scale 100: (hashed column of each C<j>=<hex> token (n, 26) int32, the missing
    value a token of its own; log1p counts standardised and 13 missing flags (n, 26) float32; labels)."""
    # start-up: `python -m mpinn.bench.w4` imports this package first; w4 imported by it then would make runpy warn
    from mpinn.bench.w4 import MISSING_INT, N_CAT, W4
    gen = W4(0, W4_SCALE)
    ids, ints, y = [np.concatenate(a) for a in zip(*((i, c, t) for i, c, t, _ in gen.rows(0, n)))]
    hexes = gen.hex_codes(ids)
    idx = np.empty((n, N_CAT), dtype=np.int32)
    for j in range(N_CAT):
        values, inverse = np.unique(hexes[:, j], return_inverse=True)
        idx[:, j] = token_columns("C%d" % (j + 1), [v.decode() for v in values], W4_BITS, 0)[inverse.ravel()]
    missing = ints == MISSING_INT
    logs = np.where(missing, np.nan, np.log1p(np.maximum(ints, 0).astype(np.float64)))
    logs = (logs - np.nanmean(logs, axis=0)) / np.maximum(np.nanstd(logs, axis=0), 1e-9)     # over the present
    dense = np.hstack([np.where(missing, 0.0, logs), missing]).astype(np.float32)
    return idx, dense, y.astype(np.float32)


def init_w4():
    rng = np.random.default_rng(104)
    a = 1.0 / np.sqrt(26 + 26)
    W0 = np.empty(((1 << W4_BITS) + 26, W4_H), np.float32)   # the hashed rows, then the 26 dense inputs' rows
    W0[:] = rng.uniform(-a, a, W0.shape)
    return [W0, np.zeros(W4_H, np.float32), rng.uniform(-1 / 8, 1 / 8, (W4_H, 1)).astype(np.float32),
            np.zeros(1, np.float32)]


def _w4_rows(data, lo, hi):
    idx, dense, y = data
    n, f = hi - lo, idx.shape[1]
    Xs = sp.csr_matrix((np.ones(n * f, np.float32), idx[lo:hi].ravel(), np.arange(0, n * f + 1, f, dtype=np.int32)),
                       shape=(n, 1 << W4_BITS))
    return Batch(Xs, dense[lo:hi], y[lo:hi])


@dataclass
class Workload:
    spec: ModelSpec
    y_dtype: str
    n: int
    batch: int
    lr: float
    steps: int
    warmup: int
    eval_rows: int
    make: object        # () -> data (rank 0 only)
    init: object        # () -> [W0, b0, W1, b1, ...] in mpinn's x @ W layout (rank 0 only)
    rows: object        # (data, lo, hi) -> Batch
    what: str

    @property
    def task(self):
        """What training would call the workload's labels."""
        return "binary" if self.spec.loss == "sigmoid" and self.spec.n_out == 1 else "multiclass"

    @property
    def layout(self):
        return Layout(self.spec.n_sparse, self.spec.n_dense, self.spec.dtype, self.y_dtype)


WORKLOADS = {
    "w1": Workload(ModelSpec(0, 784, (256, 256), 10, "relu", "softmax", "float32"), "int64",
                   60000, 256, 0.05, 300, 30, 8192, make_w1, init_w1, _dense_rows,
                   "MLP 784-256-256-10 float32"),
    "w2": Workload(ModelSpec(1 << W2_BITS, 0, (W2_H,), 1, "relu", "sigmoid", "float32", sparse_fan_in=W2_F),
                   "float32", W2_N, 1024, 0.1, 300, 30, 16384, _w2_data, init_w2, _w2_rows,
                   "CSR(2^18)-64-1 float32, sparse-row SGD"),
    "w3": Workload(ModelSpec(0, 400, (25,), 10, "sigmoid", "sigmoid", "float64"), "int64",
                   5000, 5000, 0.8, 100, 10, 5000, make_w3, lambda: thetas_to_params(init_w3()), _dense_rows,
                   "Ng 400-25-10 sigmoid float64 full-batch GD"),
    "w4": Workload(ModelSpec(1 << W4_BITS, 26, (W4_H,), 1, "relu", "sigmoid", "float32", sparse_fan_in=26),
                   "float32", W4_N, 1024, 0.1, 300, 30, 16384, _w4_data, init_w4, _w4_rows,
                   "W4 click log (scale 100): CSR(2^20) + 26 dense -> 64 -> 1 float32, sparse-row SGD"),
}
