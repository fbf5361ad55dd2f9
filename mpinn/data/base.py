"""What the trainer uses of a data set: Rows (the interface) and Dataset (rows held in memory)."""
from dataclasses import dataclass, field

import numpy as np

from mpinn.core.batch import Batch, Layout
from mpinn.core.errors import MpinnError
from mpinn.data.fit.stats import ColumnStats, column_stats
from mpinn.data.formats.times import sort_keys

TASKS = ("multiclass", "binary", "regression")
CHUNK_ROWS = 262_144        # rows per chunk when reading tables: bounds memory while streaming


class Rows:
    """What the trainer uses of a data set, whether its rows are in memory (Dataset) or in a packed
    file (mpinn.data.packed.format.PackedDataset): len(), meta, task, layout(dtype), take(rows, dtype) -> Batch,
    subset(rows), split(holdout, seed), y, n_sparse, n_dense, sparse_fan_in."""

    transform = None        # a NumericTransform applied to every batch taken, or None (inputs as stored)
    streamed = False        # read at each epoch as the rows come (mpinn.data.stream), not taken by position

    @property
    def task(self):
        return self.meta["task"]

    @property
    def n_dense(self):
        """Dense inputs the model sees: the numeric columns after the transform (indicators included)."""
        return self.transform.n_out if self.transform is not None else self.raw_dense

    @property
    def numeric_names(self):
        names = self.meta.get("numeric")
        return list(names) if names and len(names) == self.raw_dense else ["x%d" % j for j in range(self.raw_dense)]

    def numeric_stats(self):
        """ColumnStats of the stored numeric columns over every row (None without any): those the
        reader computed in its pass when it did, else one pass now, a chunk at a time."""
        if not self.raw_dense:
            return None
        stats = self.meta.get("numeric_stats")
        if stats is not None and stats.get("rows") == len(self) and "quantiles" in stats:   # older files: none
            return stats
        acc = ColumnStats(self.numeric_names)
        for s in range(0, len(self), CHUNK_ROWS):
            acc.update(self.dense_rows(s, min(s + CHUNK_ROWS, len(self))))
        return acc.result()

    def target_stats(self):
        """ColumnStats of a regression label (None for classification)."""
        if self.task != "regression":
            return None
        return column_stats(np.asarray(self.y, dtype=np.float64).reshape(-1, 1), ["label"])

    def known_length(self):
        """The number of rows, where it is known before they are read (rows by position: len()); None where their
        end is found by reading them (a stream, whose len() is an estimate)."""
        return len(self)

    def first_rows(self, limit, chunk=65536):
        """The hashed input (CSR) of the first `limit` rows (all of them, if fewer), in file order, a block of at
        most `chunk` rows at a time (mpinn.training.hot counts the ids in them)."""
        n = min(len(self), int(limit))
        for a in range(0, n, chunk):
            yield self.take(np.arange(a, min(a + chunk, n))).Xs

    def in_order(self, chunk, dtype=None):
        """Every row, in file order, as Batches of `chunk` rows (the last one shorter), through the transform, cast
        to dtype (the held-out rows scored: mpinn.training.evaluate)."""
        for s in range(0, len(self), chunk):
            yield self.take(np.arange(s, min(s + chunk, len(self))), dtype)

    def layout(self, dtype):
        return Layout(self.n_sparse, self.n_dense, dtype, "int64" if self.task == "multiclass" else dtype)

    def batch(self, Xs, Xd, y, dtype=None):
        """A Batch of rows already read, through the transform, cast to the model dtype (labels stay
        ids for multiclass)."""
        if self.transform is not None:
            if Xd is not None:
                Xd = self.transform.apply(Xd)
            if self.task == "regression":
                y = self.transform.apply_target(y)
        if dtype is not None:
            if Xs is not None and Xs.dtype != dtype:
                Xs = Xs.astype(dtype)
            if Xd is not None:
                Xd = np.ascontiguousarray(Xd, dtype=dtype)
            if self.task != "multiclass":
                y = y.astype(dtype, copy=False)
        return Batch(Xs, Xd, y)

    def split(self, holdout, seed, by=None, values=None):
        """(train, valid): a share `holdout` of the rows held out, each side in file order. by None: a
        seeded random share. by "time": the last rows by `values` (one per row: numbers, or text such as
        ISO dates, which sorts the same way), ties kept in file order. by "group": whole groups (rows with
        the same value), each group held out with probability `holdout` (seeded)."""
        n = len(self)
        n_valid = int(round(n * holdout))
        if holdout <= 0 or n_valid == 0:
            return self, None
        if n_valid >= n:
            raise MpinnError("--holdout %s leaves no training rows" % holdout)
        if by is None:
            perm = np.random.default_rng([seed, 7]).permutation(n)
            return self.subset(np.sort(perm[n_valid:])), self.subset(np.sort(perm[:n_valid]))
        if len(values) != n:
            raise MpinnError("the --holdout-by column has %d values for %d rows" % (len(values), n))
        if by == "time":
            keys = _sort_keys(values)
            if n > 1 and np.all(keys == keys[0]):
                raise MpinnError("--holdout-by time: every row has the same time (%s): there is no last time to hold "
                                 "out; give --holdout-by last (the file's last rows) or random" % values[0])
            order = np.argsort(keys, kind="stable")
            held = np.zeros(n, bool)
            held[order[n - n_valid:]] = True
        else:
            groups, member = np.unique(np.asarray(values, dtype=str), return_inverse=True)
            held = (np.random.default_rng([seed, 11]).random(len(groups)) < holdout)[member.ravel()]
            if held.all() or not held.any():
                raise MpinnError("--holdout-by group: %d groups, and the draw held out %s of them: give a larger "
                                 "--holdout or a column with more groups" % (len(groups), "all" if held.all() else
                                                                              "none"))
        return self.subset(np.flatnonzero(~held)), self.subset(np.flatnonzero(held))


@dataclass
class Dataset(Rows):
    """Rows held in memory on rank 0: hashed CSR input, dense input and encoded labels."""
    Xs: object                      # CSR (n, n_columns) or None
    Xd: object                      # (n, d) C-contiguous or None
    y: np.ndarray                   # int64 class ids (multiclass), float 0/1 (binary) or float values
    meta: dict = field(default_factory=dict)   # task, classes, columns, hashing contract, source
    transform: object = None                   # NumericTransform applied by take(), or None

    def __len__(self):
        return int(self.y.shape[0])

    @property
    def n_sparse(self):
        return self.Xs.shape[1] if self.Xs is not None else 0

    @property
    def raw_dense(self):
        return self.Xd.shape[1] if self.Xd is not None else 0

    @property
    def sparse_fan_in(self):
        """Mean non-zeros per row of the sparse input (the first layer's effective fan-in)."""
        return float(self.Xs.getnnz() / max(len(self), 1)) if self.Xs is not None else 1.0

    def raw_rows(self, rows):
        """(Xs, Xd, y) of the given rows as stored: no transform, no cast."""
        return (self.Xs[rows] if self.Xs is not None else None, self.Xd[rows] if self.Xd is not None else None,
                self.y[rows])

    def dense_rows(self, lo, hi):
        """Stored numeric values of rows lo:hi."""
        return self.Xd[lo:hi]

    def take(self, rows, dtype=None):
        """The batch of the given rows (in that order), through the transform, cast to the model dtype."""
        return self.batch(*self.raw_rows(rows), dtype)

    def subset(self, rows):
        return Dataset(*self.raw_rows(rows), self.meta, self.transform)


def _sort_keys(values, column=None):
    """Comparable times of a --holdout-by time column: numbers (epoch seconds, or any), or dates and times in one
    format (mpinn.data.formats.times), a missing value first; any other column is one line naming it."""
    return sort_keys(values, column)
