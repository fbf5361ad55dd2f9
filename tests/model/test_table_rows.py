"""What a sharded table needs of the model, in one process: an init that writes only some rows (with the
whole init's values), and forward/backward on a batch's fetched rows equal, bit for bit, to the same on
the whole table."""
import numpy as np
import pytest
import scipy.sparse as sp

from mpinn.core.batch import Batch
from mpinn.core.spec import ModelSpec
from mpinn.model.mlp import MLP


def spec(dtype="float32", n_dense=3):
    return ModelSpec(1000, n_dense, (8, 6), 3, "tanh", "softmax", dtype, sparse_fan_in=2.5)


@pytest.mark.parametrize("n_dense", [0, 3])
def test_init_of_some_rows_gives_the_whole_inits_values(n_dense):
    whole = MLP(spec(n_dense=n_dense)).init_(4)
    w = whole.table[1]
    for lo, hi in [(0, 333), (333, 1000), (500, 500)]:
        part = MLP(spec(n_dense=n_dense)).init_(4, rows=(lo, hi), chunk=97)      # chunks cut rows anywhere
        keep = np.zeros(whole.size, bool)
        keep[lo * w:hi * w] = keep[whole.dense_start:] = True
        assert np.array_equal(part.params[keep], whole.params[keep])
        assert not part.params[~keep].any()


def compact(Xs):
    ids, inverse = np.unique(Xs.indices, return_inverse=True)
    return ids, sp.csr_matrix((Xs.data, inverse.astype(Xs.indices.dtype), Xs.indptr), shape=(Xs.shape[0], ids.size))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fetched_rows_give_the_same_bits_as_the_whole_table(dtype):
    rng = np.random.default_rng(1)
    n = 30
    indptr = np.r_[0, np.cumsum(rng.integers(0, 5, n))].astype(np.int32)
    Xs = sp.csr_matrix((rng.random(indptr[-1]).astype(dtype), rng.integers(0, 1000, indptr[-1]).astype(np.int32),
                        indptr), shape=(n, 1000))
    b = Batch(Xs, rng.standard_normal((n, 3)).astype(dtype), rng.integers(0, 3, n))
    m = MLP(spec(dtype)).init_(2)
    ids, Xc = compact(Xs)
    rows = m.W[0][:1000][ids].copy()
    ref = m.loss_grad_(b, 0.1, sparse_grad=True)
    ref_dense, ref_loss = m.grads[m.dense_start:].copy(), m.grad_buffer[-1]
    got = m.loss_grad_(Batch(Xc, b.Xd, b.y), 0.1, sparse_grad=True, table=rows)
    assert np.array_equal(ids[got.ids], ref.ids) and np.array_equal(got.rows, ref.rows)
    assert np.array_equal(m.grads[m.dense_start:], ref_dense) and m.grad_buffer[-1] == ref_loss
    assert np.array_equal(m.predict(Batch(Xc, b.Xd, b.y), table=rows), m.predict(b))
