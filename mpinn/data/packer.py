"""Packing a table source: two streaming passes (statistics, then hashing and writing) into a packed file.
What python -m mpinn.prepare runs, and what the W4 generator writes packed files with."""
import os
import sys
import time

import numpy as np

from mpinn.config import MpinnError


class Progress:
    """rows/s on stderr every few seconds."""

    def __init__(self, enabled, every=2.0):
        self.enabled, self.every = enabled, every
        self.t0 = self.last = time.perf_counter()

    def start(self, what):
        self.what, self.t0, self.last, self.rows = what, time.perf_counter(), time.perf_counter(), 0

    def add(self, rows, total=None, force=False):
        self.rows += rows
        now = time.perf_counter()
        if self.enabled and (force or now - self.last >= self.every):
            self.last = now
            of = " of %d" % total if total else ""
            sys.stderr.write("prepare: %s %d rows%s, %.0f rows/s\n"
                             % (self.what, self.rows, of, self.rows / max(now - self.t0, 1e-9)))
            sys.stderr.flush()


def prepare(source, out, task="auto", hash_mode="trick", hash_bits=18, hash_seed=0, hash_k=4, buckets=None,
            like=None, threads=1, progress=None, report=False, numeric_transform="auto", positive=None):
    """Two passes over `source` (a data.TableSource): the first counts rows, learns the task and classes,
    fits the hashing contract (each skipped when already known) and takes the numeric columns' statistics,
    from which the numeric transform is fitted (or taken from `like`); the second hashes each chunk and
    appends it to the packed file (numbers as they are: the transform is applied as rows are read). Returns a summary dict (rows, columns, seconds, collision report)."""
    from mpinn.data.labels import LabelScan, encode_labels
    from mpinn.data.tables import hashing_fitter
    from mpinn.hashing import encode_indices, make_contract, per_feature_nnz
    from mpinn.data.packing import PackedWriter
    from mpinn.data.stats import ColumnStats
    from mpinn.data.transform import NumericTransform
    progress = progress or Progress(False)
    t0 = time.perf_counter()
    contract, classes = None, None
    if like is not None:
        contract, task, classes = like.get("hashing"), like["task"], like.get("classes")
        if contract is not None and contract["features"] != source.categorical:
            raise MpinnError("--like: its categorical columns are %s, this input's are %s"
                             % (contract["features"], source.categorical))
    elif source.kind == "default":
        task, classes = "binary", ["0", "1"]
    if buckets not in (None, "") and hash_mode != "split" and like is None:
        raise MpinnError("--buckets is for --hash-mode split (this is %s)" % hash_mode)
    fitter = None
    if source.categorical and contract is None:
        if source.kind == "default" and hash_bits is None:
            hash_bits = 18          # what auto gives for the click log's 10^5+ values
        if hash_mode == "trick" and not report and hash_bits is not None:
            contract = make_contract(source.categorical, hash_bits, hash_seed)
        else:
            fitter = hashing_fitter(source, hash_mode, hash_bits, hash_seed, hash_k, buckets)
    labels = LabelScan(task, positive) if source.has_label and task != "regression" and classes is None else None
    stats = ColumnStats(source.numeric) if source.numeric else None
    n = source.n_rows
    scan = n is None or fitter is not None or labels is not None or stats is not None
    if scan:
        progress.start("pass 1/2 (scan)")
        n = 0
        for part in source.parts():
            n += part.n
            if fitter is not None:
                fitter.update(part.cats, threads)
            if labels is not None:
                labels.update(part.labels)
            if stats is not None:
                stats.update(part.Xd)
            progress.add(part.n)
        if labels is not None:
            task, classes = labels.result()
        if fitter is not None:
            contract = fitter.contract()
    if n == 0:
        raise MpinnError("%s has a header but no rows" % source.path)
    if not source.has_label and task == "auto":
        task = "regression"     # nothing to learn from; predict only needs the columns
    per = len(source.categorical) * per_feature_nnz(contract) if contract else 0
    meta = dict(source.meta, hashing=contract, task=task, classes=classes, has_label=source.has_label)
    if stats is not None:
        meta["numeric_stats"] = stats.result()
        if like is not None and like.get("transform") is not None:
            transform = NumericTransform.from_dict(like["transform"])
            transform.check_columns(source.numeric, "--like")
            meta["transform"] = transform.to_dict()
        else:
            transform = NumericTransform.fit(meta["numeric_stats"], numeric_transform)
            meta["transform"] = transform.to_dict() if transform is not None else None
    y_dtype = np.int64 if task == "multiclass" else np.float64
    n_columns = contract["n_columns"] if contract else 0
    progress.start("pass 2/2 (hash + write)" if scan else "hash + write")
    rows = 0
    with PackedWriter(out, n, n_columns, n * per, len(source.numeric), y_dtype, meta, row_nnz=per) as w:
        for part in source.parts():
            idx = encode_indices(part.cats, contract, threads) if contract else None
            if source.has_label:
                y = encode_labels(part.labels, task, classes)[0]
            else:
                y = np.zeros(part.n)
            w.append(idx, per, y, part.Xd)
            rows += part.n
            progress.add(part.n, n)
    progress.add(0, n, force=True)
    seconds = time.perf_counter() - t0
    summary = {"out": out, "rows": rows, "n_columns": n_columns, "n_dense": len(source.numeric), "nnz": rows * per,
               "task": task, "classes": classes, "bytes": os.path.getsize(out), "seconds": seconds,
               "rows_per_s": rows / seconds if seconds else 0.0, "hashing": contract, "transform": meta.get("transform")}
    if fitter is not None and contract is not None:
        summary["collisions"] = fitter.report(contract)
    return summary
