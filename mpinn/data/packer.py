"""Packing a table source into a packed file: one streaming pass when nothing needs a scan before writing,
else two (statistics, then hashing and writing).
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
            like=None, threads=1, progress=None, report=False, numeric_transform="auto", positive=None, passes=None):
    """`source` (a data.TableSource, or a click-log text file's ClickTextSource) into a packed file at `out`.

    One streaming pass whenever nothing has to be known before the first row is written: the hashing
    contract is fixed (trick mode with --hash-bits, or a source's default: 2^18 for the click logs, the
    embedded one and click-log text, whose auto result that is at their sizes; or --like's) and the task and
    classes are known (the click logs: binary, "0"/"1"; or --like's). The row count may be unknown, and the
    numeric columns' statistics are taken while writing (the meta that holds them, with the fitted numeric
    transform, is written at close): StreamingPackedWriter. Otherwise two passes: the first counts rows,
    learns the task and classes, fits the hashing contract (e.g. --hash-mode split, auto bits, --report) and
    takes the statistics; the second hashes each chunk and appends it to the packed file. Both write the same
    bytes for the same rows (numbers as they are: the transform is applied as rows are read).
    passes: None (one when it can), 2 (two, as above, whatever the source). Returns a summary dict (rows,
    columns, passes, seconds, rows_per_s, collision report)."""
    from mpinn.data.labels import LabelScan, binary_classes, encode_labels
    from mpinn.data.tables import hashing_fitter
    from mpinn.hashing import encode_indices, make_contract, per_feature_nnz
    from mpinn.data.packing import PackedWriter, StreamingPackedWriter
    from mpinn.data.stats import ColumnStats
    from mpinn.data.transform import NumericTransform
    if passes not in (None, 1, 2):
        raise ValueError("passes: None, 1 or 2")
    progress = progress or Progress(False)
    t0 = time.perf_counter()
    contract, classes = None, None
    click_text = getattr(source, "kind", None) == "criteo"
    if like is not None:
        contract, task, classes = like.get("hashing"), like["task"], like.get("classes")
        if contract is not None and contract["features"] != source.categorical:
            raise MpinnError("--like: its categorical columns are %s, this input's are %s"
                             % (contract["features"], source.categorical))
    elif source.kind == "default":
        task, classes = "binary", ["0", "1"]
    elif click_text and source.has_label and task in ("auto", "binary") and passes != 2:
        # the reader lets no label but 0 and 1 through: the task is known before any row is read
        task, classes = "binary", binary_classes(["0", "1"], positive)
    if buckets not in (None, "") and hash_mode != "split" and like is None:
        raise MpinnError("--buckets is for --hash-mode split (this is %s)" % hash_mode)
    fitter = None
    if source.categorical and contract is None:
        if source.kind in ("default", "criteo") and hash_bits is None:
            # what auto gives for the click logs' 10^5+ values (auto needs every distinct value of every
            # column first: a pass of its own, and memory that grows with the log)
            hash_bits = 18
        if hash_mode == "trick" and not report and hash_bits is not None:
            contract = make_contract(source.categorical, hash_bits, hash_seed)
        else:
            fitter = hashing_fitter(source, hash_mode, hash_bits, hash_seed, hash_k, buckets)
    labels = LabelScan(task, positive) if source.has_label and task != "regression" and classes is None else None
    stats = ColumnStats(source.numeric) if source.numeric else None
    n = source.n_rows
    one_pass = passes != 2 and fitter is None and labels is None
    if passes == 1 and not one_pass:
        raise MpinnError("prepare cannot write %s in one pass: %s needs a scan first" % (
            source.path, "the hashing contract" if fitter is not None else "the task and classes"))
    scan = not one_pass and (n is None or fitter is not None or labels is not None or stats is not None)
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

    def finish_meta():
        if stats is not None:
            meta["numeric_stats"] = stats.result()
            if like is not None and like.get("transform") is not None:
                transform = NumericTransform.from_dict(like["transform"])
                transform.check_columns(source.numeric, "--like")
                meta["transform"] = transform.to_dict()
            else:
                transform = NumericTransform.fit(meta["numeric_stats"], numeric_transform)
                meta["transform"] = transform.to_dict() if transform is not None else None
        return meta
    y_dtype = np.int64 if task == "multiclass" else np.float64
    n_columns = contract["n_columns"] if contract else 0
    streaming = one_pass and (n is None or stats is not None)     # else the size is known before writing
    if streaming:
        writer = StreamingPackedWriter(out, n_columns, len(source.numeric), y_dtype, row_nnz=per)
        n = None
    else:
        if n == 0:
            raise MpinnError("%s has a header but no rows" % source.path)
        writer = PackedWriter(out, n, n_columns, n * per, len(source.numeric), y_dtype, finish_meta(), row_nnz=per)
    progress.start("one pass (read + hash + write)" if one_pass else "pass 2/2 (hash + write)")
    rows = 0
    with writer as w:
        for part in source.parts():
            idx = encode_indices(part.cats, contract, threads) if contract else None
            if source.has_label:
                y = encode_labels(part.labels, task, classes)[0]
            else:
                y = np.zeros(part.n)
            if streaming and stats is not None:
                stats.update(part.Xd)
            w.append(idx, per, y, part.Xd)
            rows += part.n
            progress.add(part.n, n)
        if streaming:
            if rows == 0:
                raise MpinnError("%s has no rows" % source.path)
            w.close(finish_meta())
    progress.add(0, rows, force=True)
    seconds = time.perf_counter() - t0
    summary = {"out": out, "rows": rows, "n_columns": n_columns, "n_dense": len(source.numeric), "nnz": rows * per,
               "task": task, "classes": classes, "bytes": os.path.getsize(out), "seconds": seconds,
               "rows_per_s": rows / seconds if seconds else 0.0, "hashing": contract,
               "transform": meta.get("transform"), "passes": 2 if scan else 1}
    if fitter is not None and contract is not None:
        summary["collisions"] = fitter.report(contract)
    return summary
