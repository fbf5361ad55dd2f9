"""Entry point: python -m mpinn.prepare [--data FILE] --out DATA.mpinn: hash a table once into a packed file."""
import os
import sys
import time

import numpy as np

from mpinn.config import MpinnError
from mpinn.options import Parser, add_data_argument
from mpinn.settings.parse import add_options


def build_parser():
    p = Parser(
        prog="python -m mpinn.prepare",
        description="Read a CSV or Parquet file (or the embedded click log) in chunks, hash its categorical "
                    "columns once and write a packed file (.mpinn) that training reads by row through a memory "
                    "map: python -m mpinn.train --data DATA.mpinn.",
        epilog="Example: python -m mpinn.prepare --data clicks.csv --label clicked --categorical site,ad --numeric price "
               "--hash-mode split --out clicks.mpinn; then python -m mpinn.prepare --data clicks-valid.csv "
               "--like clicks.mpinn --out clicks-valid.mpinn for rows hashed with the same contract.")
    add_data_argument(p, ".csv or .parquet; omitted: the embedded click log")
    p.add_argument("--out", required=True, help="packed file to write (.mpinn)")
    d = p.add_argument_group("columns")
    d.add_argument("--label", help="label column")
    d.add_argument("--categorical", default="", help="comma-separated columns to hash")
    d.add_argument("--numeric", default="", help="comma-separated columns used as numbers")
    d.add_argument("--task", default="auto", choices=["auto", "multiclass", "binary", "regression"])
    d.add_argument("--positive-class", metavar="LABEL", help="binary: the label that is 1 (as in train)")
    d.add_argument("--numeric-transform", default="auto", choices=["auto", "standard", "none"],
                   help="the transform fitted to this file's numeric columns and stored in it (as in train; "
                        "--like: the like file's); values are stored as they are")
    d.add_argument("--default-rows", type=int, default=200_000, help="rows of the embedded click log")
    d.add_argument("--default-seed", type=int, default=0, help="seed of the embedded click log")
    h = p.add_argument_group("hashing")
    add_options(h, names=("hash_mode", "hash_k", "hash_bits", "hash_seed", "buckets"))     # as in train
    h.add_argument("--like", help="a packed file or model file: use its hashing contract, columns, task and "
                                  "classes (for validation and test files)")
    r = p.add_argument_group("run")
    # 64k rows: peak memory ~120 MB (trick) / ~160 MB (split k=4, 20 features), no slower than bigger chunks
    r.add_argument("--chunk-rows", type=int, default=65_536, help="rows per chunk (bounds memory; default 65536)")
    r.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1),
                   help="columns hashed in parallel (default min(4, cores))")
    r.add_argument("--verify", action="store_true", help="re-read the written file and check its checksums")
    r.add_argument("--report", action="store_true", help="print the collision report of every feature")
    r.add_argument("--quiet", action="store_true", help="only errors")
    return p


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


def _like(path):
    """(meta) of a packed file or a model file."""
    if path.lower().endswith(".mpinn"):
        from mpinn.data.packed import PackedDataset
        return PackedDataset(path).meta
    from mpinn.checkpoint import load_model
    return load_model(path)[2]


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


def run(args):
    from mpinn.process import steady_heap
    from mpinn.data.tables import TableSource
    steady_heap()       # memory flat in the number of rows, whatever the input's size
    from mpinn.hashing import describe, format_report, parse_buckets
    say = (lambda msg: print(msg, flush=True)) if not args.quiet else (lambda msg: None)
    like = _like(args.like) if args.like else None
    label, categorical, numeric = args.label, args.categorical, args.numeric
    if like is not None and args.data:
        label = label or like.get("label")
        if not categorical and not numeric:
            categorical, numeric = like.get("categorical") or "", like.get("numeric") or ""
    if args.data:
        if not os.path.exists(args.data):
            raise MpinnError("data file %s does not exist" % args.data)
        ext = os.path.splitext(args.data)[1].lower()
        if ext not in (".csv", ".txt", ".parquet", ".pq"):
            raise MpinnError("%s: prepare reads .csv or .parquet, not %r" % (args.data, ext))
        if not label:
            raise MpinnError("--label COLUMN is required")
    if args.chunk_rows <= 0 or args.threads <= 0 or args.default_rows <= 0:
        raise MpinnError("--chunk-rows, --threads and --default-rows must be positive")
    if not args.out.endswith(".mpinn"):
        raise MpinnError("--out %s: a packed file's name ends in .mpinn" % args.out)
    source = TableSource(args.data, label, categorical, numeric, require_label=True,
                         default_rows=args.default_rows, default_seed=args.default_seed,
                         chunk_rows=args.chunk_rows)
    s = prepare(source, args.out, args.task, args.hash_mode, args.hash_bits, args.hash_seed, args.hash_k,
                parse_buckets(args.buckets), like, args.threads, Progress(not args.quiet), args.report,
                args.numeric_transform, args.positive_class)
    if args.verify:
        from mpinn.data.packed import PackedDataset
        PackedDataset(args.out, verify=True)
    say("wrote %s: %d rows, %d input columns (%s) + %d dense, task %s, %.1f MB in %.1f s (%.0f rows/s)%s" % (
        args.out, s["rows"], s["n_columns"], describe(s["hashing"]), s["n_dense"], s["task"], s["bytes"] / 1e6,
        s["seconds"], s["rows_per_s"], ", checksums verified" if args.verify else ""))
    if s["transform"] is not None:
        from mpinn.data.transform import NumericTransform
        say("numeric transform (stored in the file, applied as rows are read): %s"
            % NumericTransform.from_dict(s["transform"]).describe())
    if "collisions" in s:
        rep = s["collisions"]
        say("collisions: %d of %d distinct values share all their columns with another value of their feature "
            "(%.1f expected for uniform hashing)" % (sum(r["colliding"] for r in rep),
                                                     sum(r["distinct"] for r in rep), sum(r["expected"] for r in rep)))
        if args.report:
            say(format_report(rep))
    return 0


def main(argv=None):
    from mpinn.process import run_one_process
    return run_one_process(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
