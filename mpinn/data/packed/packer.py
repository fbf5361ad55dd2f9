"""A table source into a packed file (python -m mpinn.prepare, the W4 generator): one streaming pass, or two."""
import os
import sys
import time
from dataclasses import replace

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.fit.chunks import TablePass
from mpinn.data.fit.labels import binary_classes
from mpinn.data.fit.transform import NumericTransform
from mpinn.data.packed.writing import PackedWriter, StreamingPackedWriter
from mpinn.data.spec import DataSpec
from mpinn.hashing import HashSpec, per_feature_nnz


class Progress:
    """rows/s on stderr every few seconds."""

    def __init__(self, enabled, every=2.0, report=None, whose=""):
        self.enabled, self.every, self.report = enabled, every, report      # report(rows so far): after each add
        self.whose = whose      # whose rows they are, where several ranks pack ("rank 0's files: ")
        self.t0 = self.last = time.perf_counter()

    def start(self, what):
        self.what, self.t0, self.last, self.rows = what, time.perf_counter(), time.perf_counter(), 0

    def add(self, rows, total=None, force=False):
        self.rows += rows
        if self.report is not None:
            self.report(self.rows)
        now = time.perf_counter()
        if self.enabled and (force or now - self.last >= self.every):
            self.last = now
            of = " of %d" % total if total else ""
            sys.stderr.write("prepare: %s%s %d rows%s, %.0f rows/s\n"
                             % (self.whose, self.what, self.rows, of, self.rows / max(now - self.t0, 1e-9)))
            sys.stderr.flush()


def finished_meta(meta, numeric_stats, numeric, transform=None, numeric_transform="auto", where="the data"):
    """`meta` with the numeric columns' statistics and the transform: `transform` (a fitted NumericTransform's
    dict, checked against the columns `numeric`) as it is, else one fitted to the statistics in mode
    `numeric_transform` (prepare's, and a multi-part dataset's manifest: mpinn.data.packed.pack_parts)."""
    if numeric_stats is None:
        return meta
    meta["numeric_stats"] = numeric_stats
    if transform is not None:
        fixed = NumericTransform.from_dict(transform)
        fixed.check_columns(numeric, where)
        meta["transform"] = fixed.to_dict()
    else:
        fitted = NumericTransform.fit(numeric_stats, numeric_transform)
        meta["transform"] = fitted.to_dict() if fitted is not None else None
    return meta


def known_up_front(source, spec, hashing, passes=None):
    """(spec, hashing) with what a source's kind tells before any row is read: the click logs' task and
    classes, and their hash bits when auto."""
    if spec.classes is None and source.kind == "default":
        spec = replace(spec, task="binary", classes=["0", "1"])        # as training reads it (load_default)
    elif spec.classes is None and source.kind == "criteo" and source.has_label and spec.task in ("auto", "binary") \
            and passes != 2:
        # the reader lets no label but 0 and 1 through: the task is known before any row is read
        spec = replace(spec, task="binary", classes=binary_classes(["0", "1"], spec.positive))
    if source.kind in ("default", "criteo") and hashing.contract is None and hashing.bits is None:
        # what auto gives for the click logs' 10^5+ values (auto needs every distinct value of every column
        # first: a pass of its own, and memory that grows with the log)
        hashing = replace(hashing, bits=18)
    return spec, hashing


def prepare(source, out, spec=DataSpec(), hashing=HashSpec(), transform=None, numeric_transform="auto", threads=1,
            progress=None, report=False, passes=None, stats="meta"):
    """`source` (a data.TableSource, or a click-log text file's ClickTextSource) into a packed file at `out`,
    through the TablePass training reads tables with: hashed under `hashing` (a given contract, e.g. a
    training file's for its held-out file, or one fitted to these rows), the labels under `spec`'s task and
    classes (given, or learnt), the numeric columns' statistics taken on the way; `transform` (a fitted
    NumericTransform's dict, e.g. the training file's) is stored as it is, else one is fitted with
    `numeric_transform` (a mode).

    One streaming pass whenever nothing has to be known before the first row is written: the contract is
    fixed (given; trick mode with bits; a source's default: 2^18 for the click logs, the embedded one and
    click-log text, whose auto result that is at their sizes) and the task and classes are known (given;
    the click logs: binary, "0"/"1"). The row count may be unknown, and the statistics are taken while
    writing (the meta that holds them, with the fitted transform, is written at close):
    StreamingPackedWriter. Otherwise two passes: the first counts rows, learns the task and classes, fits
    the contract (e.g. split or onehot mode, auto bits, report) and takes the statistics; the second hashes
    each chunk and appends it to the packed file. Both write the same bytes for the same rows (numbers as
    they are: the transform is applied as rows are read).
    passes: None (one when it can), 2 (two, as above, whatever the source). stats: "meta" (the statistics and
    the transform go into the file's meta); None (not taken: a part of a multi-part dataset, whose statistics
    mpinn.data.packed.pack_parts folds afterwards). Returns a summary dict (rows, columns, passes,
    seconds, rows_per_s, collision report)."""
    if passes not in (None, 1, 2) or stats not in ("meta", None):
        raise ValueError("passes: None, 1 or 2; stats: meta or None")
    progress = progress or Progress(False)
    t0 = time.perf_counter()
    spec, hashing = known_up_front(source, spec, hashing, passes)
    table = TablePass(source, spec, hashing, threads, count_values=report)
    if stats is None:
        table.stats = None
    n = source.n_rows
    one_pass = passes != 2 and not table.needs_scan
    if passes == 1 and not one_pass:
        raise MpinnError("prepare cannot write %s in one pass: %s needs a scan first" % (
            source.path, "the hashing contract" if table.fitter is not None else "the task and classes"))
    scan = not one_pass and (n is None or table.needs_scan or table.stats is not None)
    if scan:
        progress.start("pass 1/2 (scan)")
        n = 0
        for part in source.parts():
            n += part.n
            table.learn(part)
            progress.add(part.n)
        table.settle()
        if n == 0:
            raise MpinnError("%s has a header but no rows" % source.path)
    task, classes, contract = table.task, table.classes, table.contract
    if not source.has_label and task == "auto":
        task = table.task = "regression"    # nothing to learn from; predict only needs the columns
    per = len(source.categorical) * per_feature_nnz(contract) if contract else 0
    meta = dict(source.meta, hashing=contract, task=task, classes=classes, has_label=source.has_label)

    def finish_meta():
        if stats == "meta" and table.stats is not None:
            finished_meta(meta, table.numeric_stats(), source.numeric, transform, numeric_transform,
                          source.path or "the embedded click log")
        return meta
    y_dtype = np.int64 if task == "multiclass" else np.float64
    n_columns = contract["n_columns"] if contract else 0
    streaming = one_pass and (n is None or table.stats is not None)     # else the size is known before writing
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
            idx, y = table.chunk(part)
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
    if table.fitter is not None and contract is not None:
        summary["collisions"] = table.fitter.report(contract)
    return summary
