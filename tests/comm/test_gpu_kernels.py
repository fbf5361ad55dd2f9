"""The GPU's fused kernels (mpinn.device.kernels, called through CupyBackend) against the numpy arithmetic they
replace, written out plainly here: the softmax and sigmoid heads, bias + activation, the activations' gradients,
the first layer's product with its dense part and bias, and the compact form of a batch's hashed rows with its
transposed product. Non-finite values travel as numpy's do (a NaN loss is a skipped step). Marked gpu: skipped
where cupy finds no GPU; the whole model's oracles are tests/comm/test_gpu.py's."""
import numpy as np
import pytest
import scipy.sparse as sp

from fake_device import messy_csr
from mpinn.device.backend import gpu_probe, to_host
from mpinn.core.batch import Batch

GPUS, NO_GPU = gpu_probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU: %s" % NO_GPU)]
DTYPES = ["float32", "float64"]


@pytest.fixture(scope="module")
def gpu():
    from mpinn.device.backend import get_backend
    return get_backend("cupy")


def close(got, want, dtype):
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 1e-5
    np.testing.assert_allclose(to_host(got), want, rtol=tol, atol=tol)


def softmax_reference(z, y, scale):
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    loss = np.log(s[:, 0]) + m[:, 0] - z[np.arange(len(y)), y]
    onehot = np.zeros_like(z)
    onehot[np.arange(len(y)), y] = 1
    return loss.sum(), (e / s - onehot) * z.dtype.type(scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_softmax_head_is_the_published_cross_entropy(gpu, dtype):
    rng = np.random.default_rng(0)
    z = (rng.standard_normal((37, 7)) * 20).astype(dtype)
    y = rng.integers(0, 7, 37)
    total, d = gpu.head("softmax", gpu.xp.asarray(z), gpu.xp.asarray(y), 1 / 37)
    want_total, want_d = softmax_reference(z, y, 1 / 37)
    close(total, want_total, dtype)
    close(d, want_d, dtype)
    z[5, 3] = np.nan                        # a NaN logit: a NaN loss (the step is skipped), as numpy's max gives
    total, d = gpu.head("softmax", gpu.xp.asarray(z), gpu.xp.asarray(y), 1.0)
    assert np.isnan(float(total)) and np.isnan(to_host(d)[5]).all() and np.isfinite(to_host(d)[6]).all()
    z[5, 3] = 0
    y[2] = 7                                # a class id the head does not have
    total, _ = gpu.head("softmax", gpu.xp.asarray(z), gpu.xp.asarray(y), 1.0)
    assert np.isnan(float(total))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_sigmoid_head_is_the_stable_logistic_loss(gpu, dtype):
    z = np.array([[-800.], [-50.], [-3.], [-0.5], [0.], [0.25], [4.], [60.], [700.]], dtype)
    y = np.array([0, 1, 1, 0, 1, 0, 1, 0, 1], dtype)
    total, d = gpu.head("sigmoid", gpu.xp.asarray(z), gpu.xp.asarray(y), 0.5)
    zz = z[:, 0].astype(np.float64)
    loss = np.maximum(zz, 0) - y * zz + np.log1p(np.exp(-np.abs(zz)))
    p = np.where(zz >= 0, 1 / (1 + np.exp(-np.abs(zz))), np.exp(-np.abs(zz)) / (1 + np.exp(-np.abs(zz))))
    close(total, loss.sum().astype(dtype), dtype)
    close(d, ((p - y) * 0.5).astype(dtype)[:, None], dtype)
    assert np.isfinite(float(total))
    assert gpu.head("squared", gpu.xp.asarray(z), gpu.xp.asarray(y), 1.0) is None     # not fused: numpy's code


ACTS = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh,
        "sigmoid": lambda v: np.where(v >= 0, 1 / (1 + np.exp(-np.abs(v))), np.exp(-np.abs(v)) / (1 + np.exp(-np.abs(v))))}
GRADS = {"relu": lambda a: (a > 0), "tanh": lambda a: 1 - a * a, "sigmoid": lambda a: a * (1 - a)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", sorted(ACTS))
def test_bias_and_activation_in_one_kernel(gpu, act, dtype):
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((13, 6)) * 30).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    z[4, 1] = np.nan
    out = gpu.bias_act_(gpu.xp.asarray(z), gpu.xp.asarray(b), act)
    want = ACTS[act](z + b)
    assert np.isnan(to_host(out)[4, 1])
    got = to_host(out)
    got[4, 1] = want[4, 1] = 0
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", sorted(GRADS))
def test_the_activations_gradient_in_one_kernel(gpu, act, dtype):
    rng = np.random.default_rng(2)
    a = ACTS[act](rng.standard_normal((9, 5)) * 3).astype(dtype)
    d = rng.standard_normal((9, 5)).astype(dtype)
    d[0, 0], a[0, 0] = np.nan, 0            # relu: d * 0 stays NaN, so a non-finite step is still seen
    got = to_host(gpu.act_grad_(gpu.xp.asarray(a), gpu.xp.asarray(d), act))
    want = d * GRADS[act](a)
    assert np.isnan(got[0, 0])
    got[0, 0] = want[0, 0] = 0
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_first_layer_is_sparse_then_dense_then_bias_to_the_bit(gpu, dtype):
    """z = 0; z += X W; z += Xd Wd; z += b, as the CPU's first layer adds them, from one kernel."""
    rng = np.random.default_rng(3)
    X = messy_csr(50, 300, rng, dtype)
    W = rng.standard_normal((300, 8)).astype(dtype)
    base, bias = rng.standard_normal((50, 8)).astype(dtype), rng.standard_normal(8).astype(dtype)
    want = np.zeros((50, 8), dtype)
    want += X @ W
    want += base
    want += bias
    dev = gpu.batch_to_device(Batch(X, None, np.zeros(50)))
    got = gpu.sparse_matmul(dev.Xs, gpu.xp.asarray(W), gpu.xp.asarray(base), gpu.xp.asarray(bias))
    assert np.array_equal(to_host(got), want)
    assert np.array_equal(to_host(gpu.sparse_matmul(dev.Xs, gpu.xp.asarray(W))), X @ W)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [0, 1, 7, 400])
def test_the_compact_rows_and_their_gradient_equal_numpys(gpu, rows, dtype):
    """The sorted unique ids and the renumbered columns as np.unique gives them; C^T @ D as scipy's, to the bit
    (the transpose's order is X's rows in order within each column, duplicates included)."""
    rng = np.random.default_rng(4 + rows)
    X = messy_csr(rows, 1 << 16, rng, dtype, per_row=30)
    D = rng.standard_normal((rows, 5)).astype(dtype)
    ids, inverse = np.unique(X.indices, return_inverse=True)       # the compact form, written plainly
    C = sp.csr_matrix((X.data, inverse.astype(X.indices.dtype), X.indptr), shape=(rows, len(ids)))
    dev = gpu.batch_to_device(Batch(X, None, np.zeros(rows))).Xs
    got_ids, got = gpu.compact(dev)
    assert np.array_equal(to_host(got_ids), ids) and to_host(got_ids).dtype == np.int64
    assert np.array_equal(to_host(got.indices), C.indices) and got.shape == C.shape
    assert np.array_equal(to_host(gpu.compact_t_matmul(got, gpu.xp.asarray(D))), C.T @ D)
