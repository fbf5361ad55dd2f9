"""Held-out metrics: accuracy, log-loss, AUC (binary), RMSE (regression). Host numpy only."""
import numpy as np

EPS = 1e-15
# the confusion matrix (k x k counts) is kept up to this many classes: beyond, its k^2 counts would outweigh the
# model in the rank sums, the metrics file and the model file's header (10,000 classes: 10^8 counts)
MAX_CONFUSION = 100


def has_confusion(task, k):
    return task != "regression" and k <= MAX_CONFUSION


def sums_length(task, k=2):
    """The length of metric_sums' array (what the ranks add up)."""
    return 4 + (k * k if has_confusion(task, k) else 0)


def average_ranks(p):
    """The ranks of p (1 for the smallest), tied values sharing their ranks' mean: scipy.stats.rankdata's default,
    without importing scipy.stats (a third of a second at every start of every rank)."""
    order = np.argsort(p)
    sorted_p = p[order]
    starts = np.flatnonzero(np.r_[True, sorted_p[1:] != sorted_p[:-1]])     # where each run of equal values begins
    ends = np.r_[starts[1:], p.size]
    ranks = np.empty(p.size, np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def auc(y, p):
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula; ties count one half."""
    y = np.asarray(y) > 0.5
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = average_ranks(np.asarray(p, dtype=np.float64).ravel())
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def metric_sums(task, y, pred, n_classes=2):
    """Everything the metrics need, as sums over rows, so shards can be added up across ranks
    (weighted by their row counts for free): [rows scored, rows with a non-finite prediction,
    then correct, log-loss sum and the confusion counts (classification, up to MAX_CONFUSION classes) or the
    squared-error sum and element count (regression)]; sums_length(task, k) long."""
    y, pred = np.asarray(y), np.asarray(pred, dtype=np.float64)
    n = y.shape[0]
    bad = ~np.isfinite(pred.reshape(n, -1)).all(axis=1) if n else np.zeros(0, bool)
    if bad.any():   # a diverging model: score the rows it can, and count those it could not
        y, pred = y[~bad], pred[~bad]
    head = [y.shape[0], int(bad.sum())]
    if task == "regression":
        return np.array(head + [float(np.sum((pred - y.reshape(pred.shape)) ** 2)), pred.size], np.float64)
    k = n_classes
    if task == "multiclass":
        total = pred.sum(axis=1, keepdims=True)           # one-vs-all sigmoid outputs need it
        p_true = pred[np.arange(len(y)), y] / np.where(total > 0, total, 1)[:, 0]
        guess = np.argmax(pred, axis=1) if len(y) else np.zeros(0, np.int64)
        truth = y
        ll = -np.log(np.clip(p_true, EPS, 1))
    else:
        p = np.clip(pred, EPS, 1 - EPS)
        truth, guess = (y > 0.5).astype(np.int64), (pred > 0.5).astype(np.int64)
        ll = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    out = np.zeros(sums_length(task, k), np.float64)
    out[:4] = head + [float(np.sum(truth == guess)), float(np.sum(ll))]
    if has_confusion(task, k) and len(y):
        out[4:] = np.bincount(truth * k + guess, minlength=k * k)
    return out


def metrics_from_sums(task, sums, n_classes=2, auc_value=None):
    """The metrics dict from (possibly rank-summed) metric_sums."""
    n, bad = int(sums[0]), int(sums[1])
    out = {"n": n + bad}
    if bad:
        out["nonfinite"] = bad
    if n == 0:
        return out
    if task == "regression":
        out["rmse"] = float(np.sqrt(sums[2] / sums[3]))
        return out
    out["accuracy"] = float(sums[2] / n)
    out["logloss"] = float(sums[3] / n)
    if task == "binary" and auc_value is not None:
        out["auc"] = auc_value
    if has_confusion(task, n_classes):
        out["confusion"] = np.asarray(sums[4:], dtype=np.int64).reshape(n_classes, n_classes).tolist()
    return out


def compute_metrics(task, y, pred):
    """pred: class probabilities (n, k) for multiclass, P(y=1) for binary, values for regression."""
    pred = np.asarray(pred, dtype=np.float64)
    k = pred.shape[1] if task == "multiclass" else 2
    sums = metric_sums(task, y, pred, k)
    auc_value = None
    if task == "binary":
        keep = np.isfinite(pred)
        auc_value = auc(np.asarray(y)[keep], pred[keep])
    return metrics_from_sums(task, sums, k, auc_value)


HIGHER_IS_BETTER = ("auc", "accuracy")       # the held-out metrics to maximise; logloss and rmse are minimised


def stop_value(valid, metric):
    """The held-out `metric` that --keep best and --early-stop compare: NaN (none) where some held-out prediction
    was non-finite, since the metric over the rows left then flatters a diverging model."""
    value = valid.get(metric)
    return float("nan") if value is None or valid.get("nonfinite") else value


def better(metric, a, b):
    """Is held-out value a better than b by `metric`? A tie is not, nor is a NaN a; any other a is better than a
    NaN b (no metric at all: a first epoch whose every held-out prediction was non-finite)."""
    if a != a or b != b:
        return b != b and a == a
    return a > b if metric in HIGHER_IS_BETTER else a < b


def format_metrics(m):
    keys = [k for k in ("accuracy", "logloss", "auc", "rmse") if k in m]
    text = "  ".join(("%s %.4f" if abs(m[k]) < 1e6 else "%s %.5g") % (k, m[k]) for k in keys)
    if m.get("nonfinite"):
        text += "  (%d of %d predictions non-finite, left out)" % (m["nonfinite"], m["n"])
    return text
