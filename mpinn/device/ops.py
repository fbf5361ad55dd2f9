"""Leaf module: the operations of a training step's plan (mpinn.training.graph), each written here in numpy: what
the GPU's kernel of the same name computes (mpinn.device.cuda_ops), element by element in the same order, and
what the plan runs on the host's arrays (the fake device of the tests). Nothing here reads a device value on the
host: every number that changes from one step to the next (the batch's rows and scale, the learning rate,
Adam's count, where the step's loss goes) is read from device memory by the operation itself, so that a
captured graph's replay computes what an eager step would (a Python number passed in is frozen into a graph).

The conventions shared with the kernels:
- `scalars` (float64, the batch's slot): SCALE the step's 1/n, LR the rate.
- `state` (int64, two values): POS the steps recorded so far (the ring's next place), T the steps taken (not
  skipped): the optimizer's count, Adam's bias correction.
- `ring` (float64, RING x 2): a step's (loss sum, verdict) at ring[POS % RING]; verdict 1.0 for a finite step.
  Every update reads the verdict and changes nothing (parameters, optimizer state, counts) when it is 0.
- A batch's hashed rows: CSR over capacity-sized arrays (indptr has n + 1 entries; the rows' entries are the
  first indptr[n]; the rest is padding no operation reads)."""
import numpy as np
import scipy.sparse

SCALE, LR, N_SCALARS = 0, 1, 2
POS, T = 0, 1
RING = 64


def act_(name, z):
    """z = activation(z), in place (sigmoid as mpinn.model.mlp writes it, stable for large |z|)."""
    if name == "relu":
        np.maximum(z, 0, out=z)
    elif name == "tanh":
        np.tanh(z, out=z)
    else:
        e = np.exp(-np.abs(z))
        z[...] = np.where(z >= 0, 1 / (1 + e), e / (1 + e))
    return z


def act_grad_(name, a, d):
    """d *= activation'(z), written in a = activation(z), in place, on numpy or cupy arrays (relu: d * (a > 0), so a
    NaN in d stays): the model's backward (mpinn.model.mlp) and the plan's."""
    if name == "relu":
        d *= (a > 0)
    elif name == "tanh":
        d *= 1 - a * a
    else:
        d *= a * (1 - a)
    return d


def ok_at(ring, state):
    """This step's verdict (a device read on the device)."""
    return ring[state[POS] % RING, 1] == 1.0


class HostOps:
    """The operations on numpy arrays (the host's, or the fake device's)."""

    def gemm(self, a, b, out, ta=False, tb=False):
        """out = op(a) @ op(b), op the transpose where ta / tb (all 2-D)."""
        np.matmul(a.T if ta else a, b.T if tb else b, out=out)

    def bias_add(self, z, b):
        """z += b (a row added to every row)."""
        z += b

    def bias_act(self, z, b, name):
        """z = activation(z + b) in place; b None: activation(z)."""
        if b is not None:
            z += b
        act_(name, z)

    def act_grad(self, a, d, name):
        """d *= activation'(z), written in a = activation(z)."""
        act_grad_(name, a, d)

    def rows_times(self, indptr, indices, data, B, out, base=None, bias=None):
        """out = ((0 + X B) + base) + bias, X the CSR rows (len(out) of them; duplicates summed in order); base may be
        out itself (each element is read, then written)."""
        n = out.shape[0]
        nnz = int(indptr[n])
        X = scipy.sparse.csr_matrix((data[:nnz], indices[:nnz], indptr[:n + 1]), shape=(n, B.shape[0]))
        s = np.zeros(out.shape, out.dtype)      # base may be out itself: each element read before it is written
        s += X @ B
        if base is not None:
            s += base
        if bias is not None:
            s += bias
        out[...] = s

    def head(self, loss, z, y, scalars, rows, d):
        """rows[r] = row r's loss, d = d loss / d z times scalars[SCALE]: softmax (y class ids), sigmoid (one
        column, y in {0, 1}) or squared error (0.5 r^2), the formulas of mpinn.model.mlp.head_loss_delta."""
        n = z.shape[0]
        if loss == "softmax":
            m = z.max(axis=1, keepdims=True)
            e = np.exp(z - m)
            s = e.sum(axis=1, keepdims=True)
            at = np.arange(n)
            rows[...] = np.log(s[:, 0]) + m[:, 0] - z[at, y]
            e /= s
            e[at, y] -= 1
            d[...] = e
        else:
            t = y.reshape(z.shape).astype(z.dtype, copy=False)
            if loss == "sigmoid":
                rows[...] = (np.maximum(z, 0) - t * z + np.log1p(np.exp(-np.abs(z))))[:, 0]
                d[...] = act_("sigmoid", z.copy()) - t
            else:
                r = z - t
                rows[...] = (0.5 * (r * r)).sum(axis=1)
                d[...] = r
        scale = float(scalars[SCALE])
        if scale != 1:
            d *= d.dtype.type(scale)

    def total(self, rows, out):
        """out[0] = the sum of rows."""
        out[0] = rows.sum()

    def colsum(self, d, out):
        """out[j] = sum over rows of d[:, j]: numpy's np.sum(d, axis=0) (rows added in order from 0; one column: numpy's
        pairwise sum of a contiguous run)."""
        np.sum(d, axis=0, out=out)

    def hashed_workspace(self, n_cols, n_rows, nnz_cap, width, dtype):
        """What hashed_grad writes: the unique ids (sorted), their gradient rows, and how many (k, on the device)."""
        return {"ids": np.zeros(nnz_cap, np.int64), "rows": np.zeros((nnz_cap, width), dtype),
                "k": np.zeros(1, np.int64)}

    def hashed_grad(self, indptr, indices, data, n_cols, d, ws):
        """The gradient rows of the hashed block: X^T d on the columns X touches (their sorted ids), each column's
        entries added in the rows' order (scipy's X.T @ d); ws["k"][0] = how many."""
        n = d.shape[0]
        nnz = int(indptr[n])
        ids, inverse = np.unique(indices[:nnz], return_inverse=True)
        k = ids.shape[0]
        C = scipy.sparse.csr_matrix((data[:nnz], inverse.ravel().astype(indices.dtype), indptr[:n + 1]),
                                    shape=(n, k))
        ws["ids"][:k] = ids
        ws["rows"][:k] = C.T @ d
        ws["k"][0] = k

    def verdict(self, buf, rows, k, ring, state):
        """ring[POS] = (buf's last value: the loss sum, 1.0 when every element of buf and of rows[:k] is finite);
        a finite step counts: T += 1 (the optimizer's step count, Adam's bias correction reads it)."""
        ok = bool(np.isfinite(buf).all()) and (rows is None or bool(np.isfinite(rows[:int(k[0])]).all()))
        at = state[POS] % RING
        ring[at, 0] = buf[-1]
        ring[at, 1] = 1.0 if ok else 0.0
        if ok:
            state[T] += 1

    def advance(self, state):
        """The step is recorded: the ring's next place."""
        state[POS] += 1

    # ---------------------------------------------------------------- updates (a skipped step changes nothing)
    def sgd_dense(self, p, g, scalars, ring, state):
        """p -= lr g (the rounding of mpinn/optim/fused_kernels.h: d = g lr; p = p - d)."""
        if ok_at(ring, state):
            p -= g * p.dtype.type(scalars[LR])

    def sgd_rows(self, table, ids, rows, k, scalars, ring, state):
        """table[ids[r]] -= lr rows[r] for r < k (ids unique)."""
        if ok_at(ring, state):
            k = int(k[0])
            table[ids[:k]] -= rows[:k] * table.dtype.type(scalars[LR])

    def adam_dense(self, p, g, m, v, state, scalars, ring, b1, b2, eps):
        """Adam on scaled moments (mpinn.optim.adam), T already counting this step: m = b1 m + g; v = b2 v + g^2;
        p -= (lr c(T)) m / (sqrt(v) + eps), c(T) = (1 - b1) / sqrt(1 - b2) sqrt(1 - b2^T) / (1 - b1^T) in float64."""
        if not ok_at(ring, state):
            return
        f = p.dtype.type
        step = f(float(scalars[LR]) * adam_factor(b1, b2, np.float64(state[T])))
        _adam(p, g, m, v, f(b1), f(b2), f(eps), step)

    def adam_rows(self, table, m, v, t_row, ids, rows, k, state, scalars, ring, b1, b2, eps):
        """The touched rows (ids unique), each at its own count: t_row[i] += 1, then Adam at step lr c(t_row[i])."""
        if not ok_at(ring, state):
            return
        k = int(k[0])
        at = ids[:k]
        t_row[at] += 1
        f = table.dtype.type
        step = (float(scalars[LR]) * adam_factor(b1, b2, t_row[at].astype(np.float64))).astype(table.dtype)
        p, mm, vv = table[at], m[at], v[at]
        _adam(p, rows[:k], mm, vv, f(b1), f(b2), f(eps), step[:, None])
        table[at], m[at], v[at] = p, mm, vv


def adam_factor(b1, b2, t):
    """c(t) (float64), as mpinn.optim.adam.Adam.factor writes it."""
    return (1 - b1) / np.sqrt(1 - b2) * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)


def _adam(p, g, m, v, b1, b2, eps, step):
    """One Adam update in place, each operation rounded as fused_kernels.h's adam."""
    m *= b1
    m += g
    v *= b2
    v += g * g
    d = np.sqrt(v)
    d += eps
    np.divide(m, d, out=d)
    d *= step
    p -= d
