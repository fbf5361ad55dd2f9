"""Tower mode's mixture: one prediction from T replicas, a plain mean or weights fitted on held-out rows."""
import numpy as np

from mpinn.model.metrics import EPS


def mix(preds, weights=None):
    """preds: (T, n, ...) predictions of T towers; the weighted mean over towers."""
    preds = np.asarray(preds, dtype=np.float64)
    w = np.full(preds.shape[0], 1.0 / preds.shape[0]) if weights is None else np.asarray(weights, np.float64)
    return np.tensordot(w, preds, axes=1)


def mixture_loss(task, y, pred):
    """The loss a mixture's weights are fitted to: log-loss, or squared error for regression."""
    if task == "regression":
        return float(np.mean((pred - np.asarray(y).reshape(pred.shape)) ** 2))
    if task == "binary":
        p = np.clip(pred, EPS, 1 - EPS)
        return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    p = pred / pred.sum(axis=1, keepdims=True)
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], EPS, 1))))


def fit_weights(task, y, preds):
    """Weights on the simplex (w = softmax(a)) that minimise the mixture's held-out loss, from the
    plain mean as the starting point. Towers with non-finite predictions get weight 0."""
    preds = np.asarray(preds, dtype=np.float64)
    T = preds.shape[0]
    good = np.array([np.isfinite(p).all() for p in preds])
    if T == 1 or good.sum() <= 1:
        return (good / max(good.sum(), 1)).astype(np.float64)
    P = preds[good]

    def loss(a):
        w = np.exp(a - a.max())
        return mixture_loss(task, y, mix(P, w / w.sum()))

    from scipy.optimize import minimize     # start-up: its import costs a fifth of a second per rank
    a = minimize(loss, np.zeros(P.shape[0]), method="L-BFGS-B").x
    w = np.exp(a - a.max())
    out = np.zeros(T)
    out[good] = w / w.sum()
    return out
