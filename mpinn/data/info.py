"""DataInfo: what every rank learns of the training data from the rank that read it (shapes, task, the hashing
contract and the numeric transform), for the configuration's resolution, the plan and the model."""
from dataclasses import dataclass

import numpy as np

from mpinn.core.batch import Layout


@dataclass(frozen=True)
class DataInfo:
    meta: dict              # task, classes, hashing contract, numeric transform, source columns (the model file's)
    layout: Layout          # the batches' input widths and dtypes
    n_out: int              # the model's outputs: classes (multiclass) or 1
    fan_in: float           # mean non-zeros of a hashed row: the first layer's effective fan-in
    n_train: int            # training rows
    has_valid: bool         # are there held-out rows?
    streamed: bool = False  # read as a stream (n_train is then an estimate)
    held_out_rarest: object = None  # held-out rows of the rarest class (binary, multiclass; rows held), else None
    reading: tuple = ("rank0", 1)   # who reads the training rows, and how many readers (the InputPlan's)

    @property
    def task(self):
        return self.meta["task"]

    @property
    def n_sparse(self):
        return self.layout.n_sparse

    @classmethod
    def of(cls, train, valid, dtype, reading=("rank0", 1)):
        """The DataInfo of a training set (mpinn.data Rows) and its held-out rows (or None), batches in dtype, read
        as `reading` says (InputPlan.reading, .readers)."""
        return cls({k: v for k, v in train.meta.items() if k != "numeric_stats"}, train.layout(dtype),
                   len(train.meta["classes"]) if train.task == "multiclass" else 1, train.sparse_fan_in, len(train),
                   valid is not None, bool(train.streamed), rarest_class(valid, train.meta), tuple(reading))


COUNTED_HELD_OUT = 2_000_000     # rarest_class counts held-out sets up to this many rows


def rarest_class(valid, meta, enough=10_000, chunk=1 << 20):
    """How many held-out rows the rarest class has (binary: 0/1 labels; multiclass: class ids), counted in chunks
    until every class has `enough`; or None: a regression, no held-out rows, rows not held (a stream's, read a
    block at a time), or more than COUNTED_HELD_OUT of them (a packed file's held-out labels would be gathered
    whole: 8 bytes a row). For --numeric-embedding auto (mpinn.settings.shapes.embedding_trial)."""
    if valid is None or meta.get("task") not in ("binary", "multiclass") or len(valid) > COUNTED_HELD_OUT:
        return None
    y = getattr(valid, "y", None)
    if y is None:
        return None
    counts = np.zeros(len(meta.get("classes") or ()) if meta["task"] == "multiclass" else 2, np.int64)
    for start in range(0, len(y), chunk):
        part = np.bincount(np.asarray(y[start:start + chunk]).astype(np.int64).ravel(), minlength=len(counts))
        counts[:len(part)] += part[:len(counts)]
        if counts.min() >= enough:
            break
    return int(counts.min())
