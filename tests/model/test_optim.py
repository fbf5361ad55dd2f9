"""Optimizers against their textbook update written out by hand."""
import numpy as np

from mpinn.optim import create_optimizer


def test_momentum_and_adam_follow_the_formulas():
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


def test_weight_decay_touches_weights_only():
    p = np.ones(6)
    sgd = create_optimizer("sgd", 6, np, 0.5, weight_decay=0.2, weight_slices=[(0, 4)])
    sgd.step_(p, np.zeros(6))
    np.testing.assert_allclose(p, [0.9, 0.9, 0.9, 0.9, 1.0, 1.0])
