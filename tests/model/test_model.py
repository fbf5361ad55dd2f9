"""Analytic gradients against central finite differences (float64), for every layer kind,
activation, head, the sparse input and the L2 term; the flat-buffer layout."""
import numpy as np
import pytest
import scipy.sparse as sp

from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.core.batch import Batch
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer


def make_batch(loss, n=9, n_sparse=12, n_dense=3, n_out=3, seed=0):
    rng = np.random.default_rng(seed)
    Xs = Xd = None
    if n_sparse:
        Xs = sp.random(n, n_sparse, density=0.3, random_state=seed, format="csr") * 2.0
        Xs.data -= 0.5
    if n_dense:
        Xd = rng.standard_normal((n, n_dense))
    if loss == "softmax" or (loss == "sigmoid" and n_out > 1):
        y = rng.integers(0, n_out, n)
    elif loss == "sigmoid":
        y = rng.integers(0, 2, n).astype(np.float64)
    else:
        y = rng.standard_normal((n, n_out)) if n_out > 1 else rng.standard_normal(n)
    return Batch(Xs, Xd, y)


def objective(model, batch, lam):
    """J = mean row loss + lam/2 * sum of squared weights (biases not decayed)."""
    w2 = sum(float(np.sum(model.params[s:e] ** 2)) for s, e in model.weight_slices)
    return model.loss_sum(batch) / batch.n + 0.5 * lam * w2


def analytic(model, batch, lam):
    model.loss_grad_(batch, 1.0 / batch.n)
    g = model.grads.copy()
    for s, e in model.weight_slices:
        g[s:e] += lam * model.params[s:e]
    return g


def numeric(model, batch, lam, eps=1e-6):
    g = np.empty(model.size)
    for i in range(model.size):
        old = model.params[i]
        model.params[i] = old + eps
        up = objective(model, batch, lam)
        model.params[i] = old - eps
        down = objective(model, batch, lam)
        model.params[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


CASES = [  # (n_sparse, n_dense, hidden, n_out, activation, loss)
    (12, 3, (5,), 3, "relu", "softmax"),
    (12, 0, (4, 3), 1, "tanh", "sigmoid"),
    (0, 4, (5,), 4, "sigmoid", "sigmoid"),        # Ng's one-vs-all head
    (12, 3, (4,), 2, "sigmoid", "squared"),
    (0, 3, (), 1, "relu", "squared"),             # no hidden layer: linear regression
    (12, 2, (3, 3, 3), 3, "tanh", "softmax"),
]


@pytest.mark.parametrize("wide", [False, True], ids=["deep", "wide-and-deep"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("lam", [0.0, 0.1])
def test_gradients_match_finite_differences(case, lam, wide):
    n_sparse, n_dense, hidden, n_out, act, loss = case
    model = MLP(ModelSpec(n_sparse, n_dense, hidden, n_out, act, loss, "float64", sparse_fan_in=3, wide=wide)).init_(1)
    if act == "relu":          # keep pre-activations away from the kink at 0
        model.params += 0.05
    elif wide:                 # the linear part starts at zero: move it off
        model.params += 0.01
    batch = make_batch(loss, n_sparse=n_sparse, n_dense=n_dense, n_out=n_out)
    a, f = analytic(model, batch, lam), numeric(model, batch, lam)
    assert np.max(np.abs(a - f)) < 1e-7 * max(1.0, np.max(np.abs(f)))


@pytest.mark.parametrize("wide", [False, True], ids=["deep", "wide-and-deep"])
def test_sparse_rows_equal_dense_gradient(wide):
    model = MLP(ModelSpec(50, 2, (6,), 3, "relu", "softmax", "float64", wide=wide)).init_(3)
    batch = make_batch("softmax", n=20, n_sparse=50, n_dense=2)
    model.loss_grad_(batch, 0.05)
    dense = model.grads.copy()
    model.grads[...] = np.nan            # the sparse path must not read the block it does not write
    rows = model.loss_grad_(batch, 0.05, sparse_grad=True)
    assert np.array_equal(rows.ids, np.unique(batch.Xs.indices))
    np.testing.assert_allclose(model.grads[model.dense_start:], dense[model.dense_start:], rtol=1e-13)
    model.densify_(rows)
    np.testing.assert_allclose(model.grads, dense, rtol=1e-12, atol=1e-15)


def test_the_wide_part_is_a_linear_model_beside_the_network():
    """Wide and deep: the output is the deep network's plus x W0[:, h:] + b0[h:] (the table's extra columns),
    which start at zero; with the hidden layers' output layer zeroed, the model is exactly that linear model."""
    spec = ModelSpec(30, 4, (6,), 2, "tanh", "softmax", "float64", wide=True)
    model = MLP(spec).init_(2)
    assert model.table == (30, 8) and model.W[0].shape == (34, 8) and model.W[1].shape == (6, 2)
    assert not model.W[0][:, 6:].any() and not model.b[0][6:].any()
    rng = np.random.default_rng(4)
    model.W[0][:, 6:] = rng.standard_normal((34, 2))
    model.b[0][6:] = rng.standard_normal(2)
    model.W[1][...] = 0
    model.b[1][...] = 0
    batch = make_batch("softmax", n=7, n_sparse=30, n_dense=4, n_out=2)
    X = np.hstack([batch.Xs.toarray(), batch.Xd])
    z = X @ model.W[0][:, 6:] + model.b[0][6:]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    np.testing.assert_allclose(model.predict(batch), p / p.sum(axis=1, keepdims=True), rtol=1e-12)
    linear = MLP(ModelSpec(30, 4, (), 2, "tanh", "softmax", "float64", wide=True))
    assert linear.table == (30, 2) and linear.deep_width is None      # no hidden layers: linear already


def test_parameters_are_views_of_one_flat_buffer():
    model = MLP(ModelSpec(10, 3, (4,), 2, "relu", "softmax", "float64"))
    assert model.params.flags.c_contiguous and model.grads.flags.c_contiguous
    assert model.size == (13 * 4 + 4) + (4 * 2 + 2)
    for v in model.W + model.b + model.gW + model.gb:
        assert v.base is not None
    model.W[1][0, 0] = 7.0
    assert model.params[model.offsets[2]] == 7.0
    assert model.dense_start == 10 * 4


def test_sparse_sgd_update_equals_dense_update():
    model = MLP(ModelSpec(40, 0, (5,), 1, "relu", "sigmoid", "float32")).init_(0)
    batch = make_batch("sigmoid", n=16, n_sparse=40, n_dense=0, n_out=1)
    batch = Batch(batch.Xs.astype(np.float32), None, batch.y.astype(np.float32))
    twin = MLP(model.spec)
    twin.params[...] = model.params
    sgd, sgd2 = (create_optimizer("sgd", model.size, np) for _ in range(2))
    rows = model.loss_grad_(batch, 1 / 16, sparse_grad=True)
    sgd.step_(model.params, model.grads, rows, lr=0.5)
    twin.loss_grad_(batch, 1 / 16)
    sgd2.step_(twin.params, twin.grads, lr=0.5)
    assert np.array_equal(model.params, twin.params)


def test_zero_rows_give_zero_gradient():
    model = MLP(ModelSpec(0, 3, (4,), 2, "tanh", "softmax", "float64")).init_(0)
    model.grads[...] = 1.0
    model.loss_grad_(Batch(None, np.zeros((0, 3)), np.zeros(0, np.int64)), 1.0)
    assert not model.grads.any() and model.grad_buffer[-1] == 0


def test_spec_rejects_bad_values():
    with pytest.raises(MpinnError, match="activation"):
        ModelSpec(0, 3, (4,), 2, "swish")
    with pytest.raises(MpinnError, match="no input"):
        ModelSpec(0, 0, (4,), 2)
    with pytest.raises(MpinnError, match="learning rate"):
        create_optimizer("sgd", 3, np).step_(np.zeros(3), np.zeros(3), lr=-0.1)
    with pytest.raises(MpinnError, match="alpha"):
        create_optimizer("ftrl", 3, np).step_(np.zeros(3), np.zeros(3), lr=0.0)


def test_the_linear_model_alone_is_a_logistic_regression():
    """--hidden '' (the wide part alone) on one-hot features, trained to convergence with L2 lambda = 1/(C n),
    reaches scikit-learn's LogisticRegression(C) log-loss on the same rows to 1e-3 (sklearn's penalty is
    ||w||^2 / 2 on the sum of the losses; mpinn's lambda/2 ||w||^2 on their mean; neither decays the bias)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    rng = np.random.default_rng(7)
    n, card = 600, (5, 8, 3)
    codes = np.column_stack([rng.integers(0, c, n) for c in card])
    offsets = np.r_[0, np.cumsum(card)[:-1]]
    cols = (codes + offsets).ravel()
    Xs = sp.csr_matrix((np.ones(cols.size), cols, np.arange(0, cols.size + 1, len(card))), shape=(n, sum(card)))
    teacher = rng.standard_normal(sum(card)) * 1.5
    y = (rng.random(n) < 1 / (1 + np.exp(-(Xs @ teacher)))).astype(np.float64)
    C = 1.0
    ref = LogisticRegression(C=C, tol=1e-12, max_iter=10000).fit(Xs, y)
    want = log_loss(y, ref.predict_proba(Xs)[:, 1])
    model = MLP(ModelSpec(sum(card), 0, (), 1, "relu", "sigmoid", "float64", wide=True)).init_(0)
    opt = create_optimizer("sgd", model.size, np, weight_decay=1.0 / (C * n), weight_slices=model.weight_slices)
    batch = Batch(Xs, None, y)
    for _ in range(4000):
        model.loss_grad_(batch, 1.0 / n)
        opt.step_(model.params, model.grads, lr=2.0)
    got = log_loss(y, model.predict(batch))
    assert abs(got - want) < 1e-3, (got, want)
