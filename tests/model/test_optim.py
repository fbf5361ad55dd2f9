"""Optimizers against their formulas written out by hand, the lazy row update against the dense one,
and the step's memory: no temporaries the size of the parameters."""
import tracemalloc

import numpy as np
import pytest

from mpinn.batch import SparseRows, densify_
from mpinn.optim import create_optimizer

N_ROWS, WIDTH, N_DENSE = 50, 4, 30           # a hashed block of 50 x 4, then 30 dense elements
SIZE = N_ROWS * WIDTH + N_DENSE
WEIGHTS = [(0, N_ROWS * WIDTH + 20)]         # the last 10 elements are biases


def steps_of_gradients(seed=0, steps=6, touched=12):
    """Per step: the hashed block's gradient as rows (unique sorted ids, some rows exactly zero, as a
    row touched by dead units), and the dense elements' gradient."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        ids = np.sort(rng.choice(N_ROWS, touched, replace=False))
        rows = rng.standard_normal((touched, WIDTH))
        rows[0] = 0.0
        out.append((SparseRows(ids.astype(np.int64), rows, N_ROWS), rng.standard_normal(N_DENSE)))
    return out


def make(name, mode="lazy", **kw):
    return create_optimizer(name, SIZE, np, kw.pop("lr", 0.05), kw.pop("weight_decay", 0.0), WEIGHTS,
                            table=(N_ROWS, WIDTH), hashed_update=mode, **kw)


def run_lazy(opt, p, grads):
    for rows, dense in grads:
        g = np.zeros(SIZE + 1)
        g[N_ROWS * WIDTH:SIZE] = dense
        opt.step_(p, g[:SIZE], SparseRows(rows.ids, rows.rows.copy(), N_ROWS))
    return p


def run_dense(opt, p, grads):
    for rows, dense in grads:
        g = np.zeros(SIZE + 1)
        densify_(g, rows)
        g[N_ROWS * WIDTH:SIZE] = dense
        opt.step_(p, g[:SIZE])
    return p


@pytest.mark.parametrize("name,kw", [("sgd", {}), ("adagrad", {}), ("ftrl", {}),
                                     ("ftrl", {"l1": 0.02, "l2": 0.1, "ftrl_beta": 0.5})])
def test_lazy_rows_equal_the_dense_update_where_the_formula_allows(name, kw):
    """sgd without decay, adagrad and ftrl: an untouched row has zero gradient and does not move."""
    p0 = np.random.default_rng(1).standard_normal(SIZE)
    grads = steps_of_gradients()
    lazy = run_lazy(make(name, **kw), p0.copy(), grads)
    dense = run_dense(make(name, "dense", **kw), p0.copy(), grads)
    np.testing.assert_allclose(lazy, dense, rtol=0, atol=1e-12)
    assert not np.array_equal(lazy, p0)


def test_lazy_adam_follows_its_stated_semantics():
    """Each row's m and v advance only on the steps that touch it, and its bias correction uses the
    number of those steps; dense elements are ordinary Adam with the global step."""
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    p0 = np.random.default_rng(2).standard_normal(SIZE)
    grads = steps_of_gradients(seed=3)
    got = run_lazy(make("adam", lr=lr), p0.copy(), grads)

    p, m, v = p0.copy(), np.zeros(SIZE), np.zeros(SIZE)
    t_row = np.zeros(N_ROWS, dtype=int)
    table = N_ROWS * WIDTH
    for t, (rows, dense) in enumerate(grads, 1):
        for i, r in enumerate(rows.ids):
            t_row[r] += 1
            sl = slice(r * WIDTH, (r + 1) * WIDTH)
            g = rows.rows[i]
            m[sl] = b1 * m[sl] + (1 - b1) * g
            v[sl] = b2 * v[sl] + (1 - b2) * g * g
            tr = t_row[r]
            p[sl] -= lr * np.sqrt(1 - b2 ** tr) / (1 - b1 ** tr) * m[sl] / (np.sqrt(v[sl]) + eps)
        sl = slice(table, SIZE)
        m[sl] = b1 * m[sl] + (1 - b1) * dense
        v[sl] = b2 * v[sl] + (1 - b2) * dense * dense
        p[sl] -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m[sl] / (np.sqrt(v[sl]) + eps)
    np.testing.assert_allclose(got, p, rtol=1e-12, atol=1e-13)
    # and it is not dense Adam: untouched rows did not move there, they do here
    dense = run_dense(make("adam", "dense", lr=lr), p0.copy(), grads)
    assert np.abs(dense - got).max() > 1e-4


def test_lazy_momentum_and_lazy_weight_decay_touch_only_the_touched_rows():
    lr, mu, lam = 0.1, 0.9, 0.01
    p0 = np.random.default_rng(4).standard_normal(SIZE)
    grads = steps_of_gradients(seed=5)
    got = run_lazy(make("momentum", lr=lr, momentum=mu, weight_decay=lam), p0.copy(), grads)
    p, vel = p0.copy(), np.zeros(SIZE)
    table = N_ROWS * WIDTH
    for rows, dense in grads:
        for i, r in enumerate(rows.ids):
            sl = slice(r * WIDTH, (r + 1) * WIDTH)
            vel[sl] = mu * vel[sl] + rows.rows[i] + lam * p[sl]
            p[sl] -= lr * vel[sl]
        g = dense + np.r_[lam * p[table:table + 20], np.zeros(10)]      # biases are not decayed
        vel[table:] = mu * vel[table:] + g
        p[table:] -= lr * vel[table:]
    np.testing.assert_allclose(got, p, rtol=1e-13, atol=1e-13)
    untouched = np.setdiff1d(np.arange(N_ROWS), np.concatenate([r.ids for r, _ in grads]))
    assert untouched.size and all(np.array_equal(got[r * WIDTH:(r + 1) * WIDTH], p0[r * WIDTH:(r + 1) * WIDTH])
                                  for r in untouched)


def test_dense_momentum_and_adam_follow_the_formulas():
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(6)
    grads = [rng.standard_normal(6) for _ in range(3)]
    p, mom = p0.copy(), create_optimizer("momentum", 6, np, 0.1, momentum=0.9)
    q, v = p0.copy(), np.zeros(6)
    for g in grads:
        mom.step_(p, g.copy())
        v = 0.9 * v + g
        q = q - 0.1 * v
    np.testing.assert_allclose(p, q, rtol=1e-14)

    p, adam = p0.copy(), create_optimizer("adam", 6, np, 0.01)
    q, m, v = p0.copy(), np.zeros(6), np.zeros(6)
    for t, g in enumerate(grads, 1):
        adam.step_(p, g.copy())
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        q = q - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(p, q, rtol=1e-6)


def test_adagrad_and_rowwise_adagrad_follow_the_formulas():
    lr, eps = 0.1, 1e-10
    p0 = np.random.default_rng(6).standard_normal(SIZE)
    grads = steps_of_gradients(seed=7)
    got = run_lazy(make("adagrad", lr=lr, adagrad_rowwise=True), p0.copy(), grads)
    p, acc, acc_row = p0.copy(), np.zeros(SIZE), np.zeros(N_ROWS)
    table = N_ROWS * WIDTH
    for rows, dense in grads:
        for i, r in enumerate(rows.ids):
            sl, g = slice(r * WIDTH, (r + 1) * WIDTH), rows.rows[i]
            acc_row[r] += np.mean(g * g)
            p[sl] -= lr * g / (np.sqrt(acc_row[r]) + eps)
        acc[table:] += dense * dense
        p[table:] -= lr * dense / (np.sqrt(acc[table:]) + eps)
    np.testing.assert_allclose(got, p, rtol=1e-13, atol=1e-13)


def test_ftrl_follows_mcmahan_algorithm_1_and_l1_gives_exact_zeros():
    alpha, beta, l1, l2 = 0.1, 1.0, 0.3, 0.2
    rng = np.random.default_rng(8)
    w0 = rng.standard_normal(8) * 0.1
    opt = create_optimizer("ftrl", 8, np, alpha, weight_slices=[(0, 6)], l1=l1, l2=l2, ftrl_beta=beta)
    w = w0.copy()
    reg = np.r_[np.ones(6), np.zeros(2)]          # the last two are biases: no l1, no l2
    z = -((beta / alpha + l2 * reg) * w0 + l1 * reg * np.sign(w0))
    n = np.zeros(8)
    q = w0.copy()
    for _ in range(40):
        g = 3 * q + 0.1 * rng.standard_normal(8)     # a pull towards zero, as a loss that wants w = 0
        opt.step_(w, g.copy())
        sigma = (np.sqrt(n + g * g) - np.sqrt(n)) / alpha
        z += g - sigma * q
        n += g * g
        q = np.where(np.abs(z) <= l1 * reg, 0.0,
                     -(z - np.sign(z) * l1 * reg) / ((beta + np.sqrt(n)) / alpha + l2 * reg))
    np.testing.assert_allclose(w, q, rtol=1e-12, atol=1e-15)
    assert (w[:6] == 0).any(), "l1 this strong must zero some weights exactly"


def test_ftrl_starts_from_the_initial_weights():
    """Before any gradient has moved them, FTRL's z gives back the network's initial weights."""
    w0 = np.random.default_rng(9).standard_normal(SIZE)
    w = w0.copy()
    make("ftrl", l1=0.01, l2=0.1, mode="dense").step_(w, np.zeros(SIZE))
    np.testing.assert_allclose(w, w0, rtol=1e-14)


def test_weight_decay_touches_weights_only():
    p = np.ones(6)
    sgd = create_optimizer("sgd", 6, np, 0.5, weight_decay=0.2, weight_slices=[(0, 4)])
    sgd.step_(p, np.zeros(6))
    np.testing.assert_allclose(p, [0.9, 0.9, 0.9, 0.9, 1.0, 1.0])


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "adagrad", "ftrl"])
def test_a_step_makes_no_temporary_the_size_of_the_parameters(name):
    """Fused in place: after the first step (state and scratch made), a dense step of 1M elements
    allocates less than a tenth of the parameters' bytes."""
    n = 1 << 20
    opt = create_optimizer(name, n, np, 0.01, weight_decay=0.01, weight_slices=[(0, n - 100)])
    p, rng = np.zeros(n), np.random.default_rng(0)
    g = rng.standard_normal(n)
    opt.step_(p, g.copy())
    g2 = g.copy()
    tracemalloc.start()
    opt.step_(p, g2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < p.nbytes / 10, "%s allocated %.1f MB in a step of %.1f MB of parameters" % (
        name, peak / 2**20, p.nbytes / 2**20)
