"""What the trainer uses of a data set: Rows (the interface) and Dataset (rows held in memory)."""
from dataclasses import dataclass, field

import numpy as np

from mpinn.batch import Batch, Layout
from mpinn.config import MpinnError

TASKS = ("multiclass", "binary", "regression")
CHUNK_ROWS = 262_144        # rows per chunk when reading tables: bounds memory while streaming


class Rows:
    """What the trainer uses of a data set, whether its rows are in memory (Dataset) or in a packed
    file (mpinn.data.packed.PackedDataset): len(), meta, task, layout(dtype), take(rows, dtype) -> Batch,
    subset(rows), split(holdout, seed), y, n_sparse, n_dense, sparse_fan_in."""

    @property
    def task(self):
        return self.meta["task"]

    def layout(self, dtype):
        return Layout(self.n_sparse, self.n_dense, dtype, "int64" if self.task == "multiclass" else dtype)

    def batch(self, Xs, Xd, y, dtype=None):
        """A Batch of rows already read, cast to the model dtype (labels stay ids for multiclass)."""
        if dtype is not None:
            if Xs is not None and Xs.dtype != dtype:
                Xs = Xs.astype(dtype)
            if Xd is not None:
                Xd = np.ascontiguousarray(Xd, dtype=dtype)
            if self.task != "multiclass":
                y = y.astype(dtype, copy=False)
        return Batch(Xs, Xd, y)

    def split(self, holdout, seed):
        """(train, valid): a seeded random share `holdout` of the rows is held out."""
        n = len(self)
        n_valid = int(round(n * holdout))
        if holdout <= 0 or n_valid == 0:
            return self, None
        if n_valid >= n:
            raise MpinnError("--holdout %.3g leaves no training rows" % holdout)
        perm = np.random.default_rng([seed, 7]).permutation(n)
        return self.subset(np.sort(perm[n_valid:])), self.subset(np.sort(perm[:n_valid]))


@dataclass
class Dataset(Rows):
    """Rows held in memory on rank 0: hashed CSR input, dense input and encoded labels."""
    Xs: object                      # CSR (n, n_columns) or None
    Xd: object                      # (n, d) C-contiguous or None
    y: np.ndarray                   # int64 class ids (multiclass), float 0/1 (binary) or float values
    meta: dict = field(default_factory=dict)   # task, classes, columns, hashing contract, source

    def __len__(self):
        return int(self.y.shape[0])

    @property
    def n_sparse(self):
        return self.Xs.shape[1] if self.Xs is not None else 0

    @property
    def n_dense(self):
        return self.Xd.shape[1] if self.Xd is not None else 0

    @property
    def sparse_fan_in(self):
        """Mean non-zeros per row of the sparse input (the first layer's effective fan-in)."""
        return float(self.Xs.getnnz() / max(len(self), 1)) if self.Xs is not None else 1.0

    def take(self, rows, dtype=None):
        """The batch of the given rows (in that order), cast to the model dtype."""
        Xs = self.Xs[rows] if self.Xs is not None else None
        Xd = self.Xd[rows] if self.Xd is not None else None
        return self.batch(Xs, Xd, self.y[rows], dtype)

    def subset(self, rows):
        b = self.take(rows)
        return Dataset(b.Xs, b.Xd, b.y, self.meta)
