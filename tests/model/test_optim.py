"""The lazy row update against the dense one, FTRL's start and exact zeros, decay on weights only, and the
step's memory: no temporaries the size of the parameters. (Every optimizer against its published update
rule, with every schedule: test_optim_reference.py.)"""
import tracemalloc

import numpy as np
import pytest

from mpinn.core.batch import SparseRows, densify_
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


LR = 0.05


def make(name, mode="lazy", **kw):
    return create_optimizer(name, SIZE, np, kw.pop("weight_decay", 0.0), WEIGHTS, table=(N_ROWS, WIDTH),
                            hashed_update=mode, **kw)


def run_lazy(opt, p, grads, lr=LR):
    for rows, dense in grads:
        g = np.zeros(SIZE + 1)
        g[N_ROWS * WIDTH:SIZE] = dense
        opt.step_(p, g[:SIZE], SparseRows(rows.ids, rows.rows.copy(), N_ROWS), lr=lr)
    return p


def run_dense(opt, p, grads, lr=LR):
    for rows, dense in grads:
        g = np.zeros(SIZE + 1)
        densify_(g, rows)
        g[N_ROWS * WIDTH:SIZE] = dense
        opt.step_(p, g[:SIZE], lr=lr)
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


def test_ftrl_starts_from_the_initial_weights():
    """Before any gradient has moved them, FTRL's z gives back the network's initial weights."""
    w0 = np.random.default_rng(9).standard_normal(SIZE)
    w = w0.copy()
    make("ftrl", l1=0.01, l2=0.1, mode="dense").step_(w, np.zeros(SIZE), lr=LR)
    np.testing.assert_allclose(w, w0, rtol=1e-14)


def test_weight_decay_touches_weights_only():
    p = np.ones(6)
    sgd = create_optimizer("sgd", 6, np, weight_decay=0.2, weight_slices=[(0, 4)])
    sgd.step_(p, np.zeros(6), lr=0.5)
    np.testing.assert_allclose(p, [0.9, 0.9, 0.9, 0.9, 1.0, 1.0])


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "adagrad", "ftrl"])
def test_a_step_makes_no_temporary_the_size_of_the_parameters(name):
    """Fused in place: after the first step (state and scratch made), a dense step of 1M elements
    allocates less than a tenth of the parameters' bytes."""
    n = 1 << 20
    opt = create_optimizer(name, n, np, weight_decay=0.01, weight_slices=[(0, n - 100)])
    p, rng = np.zeros(n), np.random.default_rng(0)
    g = rng.standard_normal(n)
    opt.step_(p, g.copy(), lr=0.01)
    opt.step_(p, g.copy(), lr=0.009)    # a changing rate (FTRL's second term) has its scratch too
    g2 = g.copy()
    tracemalloc.start()
    opt.step_(p, g2, lr=0.008)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < p.nbytes / 10, "%s allocated %.1f MB in a step of %.1f MB of parameters" % (
        name, peak / 2**20, p.nbytes / 2**20)
