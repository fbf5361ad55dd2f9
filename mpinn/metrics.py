"""Held-out metrics: accuracy, log-loss, AUC (binary), RMSE (regression). Host numpy only."""
import numpy as np
from scipy.stats import rankdata

EPS = 1e-15


def auc(y, p):
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula; ties count one half."""
    y = np.asarray(y) > 0.5
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(p)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def compute_metrics(task, y, pred):
    """pred: class probabilities (n, k) for multiclass, P(y=1) for binary, values for regression."""
    y, pred = np.asarray(y), np.asarray(pred, dtype=np.float64)
    out = {"n": int(y.shape[0])}
    if y.shape[0] == 0:
        return out
    bad = ~np.isfinite(pred.reshape(y.shape[0], -1)).all(axis=1)
    if bad.any():   # a diverging model: score the rows it can, and say how many it could not
        out["nonfinite"] = int(bad.sum())
        y, pred = y[~bad], pred[~bad]
        if y.shape[0] == 0:
            return out
    if task == "multiclass":
        p = pred / pred.sum(axis=1, keepdims=True)       # one-vs-all sigmoid outputs need it
        out["accuracy"] = float(np.mean(np.argmax(pred, axis=1) == y))
        out["logloss"] = float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], EPS, 1))))
    elif task == "binary":
        p = np.clip(pred, EPS, 1 - EPS)
        out["accuracy"] = float(np.mean((pred > 0.5) == (y > 0.5)))
        out["logloss"] = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        out["auc"] = auc(y, pred)
    else:
        out["rmse"] = float(np.sqrt(np.mean((pred - y) ** 2)))
    return out


def format_metrics(m):
    keys = [k for k in ("accuracy", "logloss", "auc", "rmse") if k in m]
    text = "  ".join("%s %.4f" % (k, m[k]) for k in keys)
    if m.get("nonfinite"):
        text += "  (%d of %d predictions non-finite, left out)" % (m["nonfinite"], m["n"])
    return text
