"""Quantile bins of numeric columns, entered piecewise-linearly (Gorishniy et al., NeurIPS 2022): edges fitted
from ColumnStats' quantiles, stored in the model with the numeric transform."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.fit.stats import QUANTILES

MAX_BINS = QUANTILES    # edges are picked from the statistics' quantile grid
# auto, from scripts/bench/real_data.py and numeric_bins.py (docs/data.md): 32 bins per column on tables of at least
# 10,000 rows (census income +0.005 to +0.006 test AUC on each of 3 seeds, diamonds -1.2% RMSE on their mean, the
# rest within noise); none on smaller ones (cells, 1,009 training rows of 56 columns: -0.007 AUC on the mean of 3
# seeds) nor on more than 64 numeric columns (pixels, embeddings: the first layer would grow 32-fold); none from a
# million rows nor on click logs (the embedded one, Criteo's text, W4): a log is streamed by default, bins were not
# measured to help there (the embedded log: -0.002 held-out AUC), and the wider first layer costs every step
CLICK_LOGS = ("default", "criteo", "w4")      # their meta["source"]
AUTO_BINS = 32
AUTO_MIN_ROWS = 10_000
AUTO_MAX_ROWS = 1_000_000
AUTO_MAX_COLUMNS = 64
# nor on one numeric column beside hashed ones: movielens (year beside user, movie and genres, tested by time) fell
# from 0.6906 to 0.6673 test AUC with it, below the logistic regression's 0.6810 (scripts/bench/real_data.py)
AUTO_MIN_COLUMNS = 2


def parse(spec):
    """--numeric-bins: "auto", "off" or a number of bins per column, 2..MAX_BINS."""
    s = str(spec).strip().lower()
    if s in ("auto", "off"):
        return s
    try:
        n = int(s)
    except ValueError:
        n = None
    if n is None or not 2 <= n <= MAX_BINS:
        raise MpinnError("--numeric-bins wants auto, off or a number of bins 2..%d, not %r" % (MAX_BINS, spec))
    return n


def fit_edges(stats, spec="auto", source=None):
    """Each column's bin edges b_0 < ... < b_T (a list; [] for a column without bins) from the statistics'
    quantiles: b_0 and b_T the training minimum and maximum, the others at equal shares of the rows; tied
    quantiles (a column of few values, a mass at 0) merge, and a column left with one bin (linear in the value
    itself, so nothing new) or none gets no bins. auto: AUTO_BINS per column when the statistics saw at least
    AUTO_MIN_ROWS and fewer than AUTO_MAX_ROWS rows of AUTO_MIN_COLUMNS to AUTO_MAX_COLUMNS numeric columns, and the
    data
    (source: its meta["source"]) is not a click log, else none."""
    n = parse(spec)
    names = list(stats["columns"]) if stats else []
    if n == "off" or not names:
        return [[] for _ in names]
    if n == "auto":
        if (not AUTO_MIN_COLUMNS <= len(names) <= AUTO_MAX_COLUMNS
                or not AUTO_MIN_ROWS <= stats["rows"] < AUTO_MAX_ROWS
                or source in CLICK_LOGS):
            return [[] for _ in names]
        n = AUTO_BINS
    grid = stats.get("quantiles")
    if grid is None:
        raise MpinnError("the numeric statistics hold no quantiles (a file packed by an older mpinn): prepare it "
                         "again, or train with --numeric-bins off")
    picks = np.round(np.arange(n + 1) * (QUANTILES / n)).astype(int)
    out = []
    for q in grid:
        edges = np.unique(np.asarray(q, dtype=np.float64)[picks]) if q is not None else np.zeros(0)
        out.append([float(e) for e in edges] if edges.size >= 3 else [])
    return out


class Bins:
    """The piecewise-linear encoding of the binned columns: for edges b_0 < ... < b_T of a column and bin t,
    e_t(x) = 0 below b_{t-1} (t > 1), 1 from b_t on (t < T), (x - b_{t-1}) / (b_t - b_{t-1}) between, with x
    first clipped to [b_0, b_T] (the training range); T inputs per column, all 0 for a missing value (its
    indicator says so)."""

    def __init__(self, edges):
        self.edges = [[float(e) for e in col] for col in edges]
        cols, left, width, below, above = [], [], [], [], []
        for j, e in enumerate(self.edges):
            if not e:
                continue
            e = np.asarray(e)
            t = e.size - 1
            cols += [j] * t
            left.append(e[:-1])
            width.append(np.diff(e))
            lo, hi = np.zeros(t), np.ones(t)
            lo[0], hi[-1] = -np.inf, np.inf      # the first bin has no floor, the last no ceiling
            below.append(lo)
            above.append(hi)
        self.cols = np.asarray(cols, dtype=np.int64)
        cat = (lambda parts: np.concatenate(parts)) if cols else (lambda parts: np.zeros(0))
        self.left, self.width, self.below, self.above = cat(left), cat(width), cat(below), cat(above)
        firsts = [e[0] for e in self.edges if e]
        lasts = [e[-1] for e in self.edges if e]
        self.x_lo = np.repeat(firsts, [len(e) - 1 for e in self.edges if e]) if cols else np.zeros(0)
        self.x_hi = np.repeat(lasts, [len(e) - 1 for e in self.edges if e]) if cols else np.zeros(0)

    @property
    def n_out(self):
        return int(self.cols.size)

    @property
    def binned(self):
        """The columns that have bins."""
        return [j for j, e in enumerate(self.edges) if e]

    def encode(self, X, missing, out):
        """Write the encoding of raw values X (m, columns) into out (m, n_out); missing (m, columns): the
        cells that are missing (their bins are 0)."""
        if not self.n_out:
            return out
        E = X[:, self.cols]
        missing = missing[:, self.cols]
        np.clip(E, self.x_lo, self.x_hi, out=E)
        E -= self.left
        E /= self.width
        np.clip(E, self.below, self.above, out=E)
        E[missing] = 0.0
        out[...] = E
        return out
