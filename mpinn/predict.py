"""Entry point: python -m mpinn.predict --model FILE --data FILE [--out predictions.csv]."""
import json
import resource
import sys
from contextlib import nullcontext

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.files import STREAM_FROM, FileSet, named
from mpinn.data.fit.labels import labelled
from mpinn.data.many import read_column_of
from mpinn.data.progress import reading
from mpinn.files.outputs import Claims, check_apart, check_file, written_whole
from mpinn.host.exits import run_one_process
from mpinn.host.launch import launched_ranks
from mpinn.inference.onnx_client import open_predictor
from mpinn.inference.score import metrics_of, predict_stream, streamed_files
from mpinn.model.metrics import auc, format_metrics, metric_sums, metrics_from_sums
from mpinn.model.mlp import PREDICT_ROWS
from mpinn.settings import messages
from mpinn.settings.options import Parser, add_data_argument


def build_parser():
    p = Parser(
        prog="python -m mpinn.predict",
        description="Predict with a model written by mpinn.train, in one process. The data is read with the model's "
                    "own columns, numeric transform and hashing contract; if it has labels, metrics are printed too.",
        epilog="Output (--out): CSV with a header and one row per input row, in the data's order: [the --id column,] "
               "prediction (the predicted class; for a regression, the value in the label's units), then p_CLASS, "
               "the probability of each class (binary: p_POSITIVE only). The metrics (accuracy, logloss, auc; rmse) "
               "are printed when the data has the label.")
    p.add_argument("--model", required=True, metavar="FILE", help="model file (.npz) written by mpinn.train, or an "
                                                                 "ONNX model (.onnx) written by mpinn.export: scored "
                                                                 "by ONNX Runtime")
    add_data_argument(p, "rows to predict, in the model's input: .csv (.csv.gz), .tsv, .parquet or a packed .mpinn file "
                         "(python -m mpinn.prepare, with the model's hashing) for a model trained on a table; click-log "
                         "text for one trained on it; .npz (X) or .mat for one trained on arrays; omitted for a model "
                         "trained on the embedded click log: its held-out rows. The label column is optional")
    p.add_argument("--out", metavar="FILE", help="write the predictions here (CSV: one row per input row, see below)")
    p.add_argument("--metrics-out", metavar="FILE", help="write the metrics as JSON here")
    p.add_argument("--stream", choices=("auto", "on", "off"), default="auto",
                   help="read table files (CSV, Parquet, click-log text; several read as one) a chunk at a time and "
                        "write each chunk's predictions as they come, so memory holds a chunk and not the data (but a "
                        "binary model's AUC, which ranks every row's score: about 50 bytes a row at its peak, at "
                        "the end; and an --id column's values, read first); auto: for more than "
                        "%s rows (estimated from the files' sizes) (default auto)" % format(STREAM_FROM, ","))
    p.add_argument("--id", metavar="COLUMN", help="begin each output row with the data's column COLUMN (a CSV or "
                                                  "Parquet file's: a user or request id), or with `row`, where the "
                                                  "data has no column of that name, the row's number from 1")
    return p


def run(args):
    outputs = [("--out", args.out, False), ("--metrics-out", args.metrics_out, False)]
    for what, path, _ in outputs:
        if path:
            check_file(path, what)      # before the model and the data are read
    check_apart(outputs, named([("--model", args.model), ("--data", args.data)]))
    if args.id and not args.out:
        raise MpinnError(messages.predict_id_needs_out())
    with Claims(outputs):       # another command given one of them is refused (mpinn.files.outputs.Claims)
        return _predict(args)


def _predict(args):
    ids = row_ids(args.id, args.data) if args.id else None
    scorer = open_predictor(args.model)     # a model file loaded once, or an ONNX model in ONNX Runtime
    meta = scorer.meta
    streamed = streamed_files(args.stream, meta, args.data)
    if streamed:
        n, metrics, has_label = run_stream(args, scorer, meta, streamed, ids)
    else:
        data = scorer.read(args.data)
        pred = scorer.predict_rows(data)
        metrics = metrics_of(meta, data, pred)
        n, has_label = len(data), data.meta.get("has_label", True)
        if ids is not None and len(ids) != n:
            raise MpinnError("%s: %d values in column %r for %d rows read" % (args.data, len(ids), args.id, n))
        if args.out:
            with written_whole(args.out, "the predictions") as f:
                out = Predictions(f, meta, args.id)
                out.write(pred, ids)
    if has_label and metrics.get("unlabelled"):
        print("%d rows, %d of them without a label (predicted, not scored): %s" % (
            n, metrics["unlabelled"], format_metrics(metrics) if metrics["unlabelled"] < n else "no metrics"),
            flush=True)
    elif has_label:
        print("%d rows: %s" % (n, format_metrics(metrics)), flush=True)
    else:
        print("%d rows (no labels: no metrics)" % n, flush=True)
    if args.out:
        print("predictions written to %s" % args.out)
    if streamed:
        print("streamed a block of %d rows at a time; peak memory (RSS) %.0f MiB"
              % (PREDICT_ROWS, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0), flush=True)
    if args.metrics_out:
        with written_whole(args.metrics_out, "the metrics") as f:
            json.dump(metrics, f, indent=1)
    return 0


def run_stream(args, scorer, meta, streamed, ids):
    """Predict the files a block at a time, each block's rows written as they come (to a temporary file, in
    place at the end: an error leaves nothing). The metrics are sums over the blocks, but for a binary model's
    AUC, which ranks every row: its scores and labels are kept (9 bytes a row) and ranked at the end. Returns (rows, metrics, whether
    the data had labels)."""
    files = streamed
    task = meta["task"]
    k = len(meta["classes"]) if task == "multiclass" else 2
    sums, scores, labels, n, has_label, unknown = 0, [], [], 0, True, 0
    with reading(files.describe()), (written_whole(args.out, "the predictions") if args.out else nullcontext()) as f:
        out = Predictions(f, meta, args.id) if f is not None else None
        for pred, rows in predict_stream(scorer.predict_rows, meta, files):
            if ids is not None and len(ids) < n + len(rows):
                raise MpinnError("%s: %d values in column %r for more rows" % (args.data, len(ids), args.id))
            if out is not None:
                out.write(pred, ids[n:n + len(rows)] if ids is not None else None, first=n + 1)
            has_label = rows.meta.get("has_label", True)
            if has_label:
                known = labelled(rows.y)
                unknown += int((~known).sum())
                sums = sums + metric_sums(task, rows.y[known], pred[known], k)
                if task == "binary":
                    keep = known & np.isfinite(pred)
                    scores.append(pred[keep])
                    labels.append(rows.y[keep] > 0.5)
            n += len(rows)
        if ids is not None and len(ids) != n:
            raise MpinnError("%s: %d values in column %r for %d rows read" % (args.data, len(ids), args.id, n))
        if n == 0:
            raise MpinnError("%s: no rows" % files.describe())
    if not has_label:
        return n, {"n": n}, False
    if unknown == n:
        return n, {"n": 0, "unlabelled": n}, True
    value = auc(np.concatenate(labels), np.concatenate(scores)) if task == "binary" else None
    return n, dict(metrics_from_sums(task, sums, k, value), unlabelled=unknown), True


def row_ids(name, path):
    """--id: the values of the data's column `name` (a CSV or Parquet file's), or None for `row` where the data has no
    such column (the rows are numbered from 1 as they are written)."""
    files = FileSet.of(path) if path else []
    if files and all(f.format in ("csv", "parquet") for f in files):
        try:
            return read_column_of(files.paths, name, "to begin the predictions' rows with")
        except MpinnError:
            if name != "row":
                raise
    elif name != "row":
        raise MpinnError("%s has no named columns: `row` numbers the rows" % (path or "the held-out rows"))
    return None


def _csv_cell(v):
    s = str(v)
    return '"%s"' % s.replace('"', '""') if any(c in s for c in ',"\r\n') else s


class Predictions:
    """The predictions as CSV, written a chunk at a time: [the id,] the predicted class (or value), the class
    probabilities. id_name: the --id column (None: no id; `row` with no such column: the rows numbered from 1)."""

    def __init__(self, f, meta, id_name=None):
        self.f, self.task, self.classes, self.id_name = f, meta["task"], meta.get("classes"), id_name
        first = "" if id_name is None else _csv_cell(id_name) + ","
        if self.task == "multiclass":
            f.write(first + "prediction," + ",".join("p_%s" % c for c in self.classes) + "\n")
        elif self.task == "binary":
            f.write(first + "prediction,p_%s\n" % self.classes[1])
        else:
            f.write(first + "prediction\n")

    def write(self, pred, ids=None, first=1):
        """pred's rows; ids: their --id values (None with --id: numbered from `first`)."""
        f, classes = self.f, self.classes
        if self.id_name is None:
            lead = lambda i: ""                                         # noqa: E731
        elif ids is None:
            lead = lambda i: "%d," % (first + i)                        # noqa: E731
        else:
            lead = lambda i: _csv_cell(ids[i]) + ","                    # noqa: E731
        if self.task == "multiclass":
            for i, row in enumerate(pred):
                f.write("%s%s,%s\n" % (lead(i), classes[int(np.argmax(row))], ",".join("%.6g" % v for v in row)))
        elif self.task == "binary":
            for i, p in enumerate(pred):
                f.write("%s%s,%.6g\n" % (lead(i), classes[int(p > 0.5)], p))
        else:
            for i, v in enumerate(pred):
                f.write("%s%.8g\n" % (lead(i), v))


def main(argv=None):
    args = build_parser().parse_args(argv)
    rank, size = launched_ranks()
    if size is not None and size > 1:        # each rank would predict the whole file and write the same --out
        if rank == 0:
            print("mpinn: error: predict runs in one process, and mpirun started %d: run python -m mpinn.predict "
                  "without mpirun" % size, file=sys.stderr)
        return 2
    return run_one_process(run, args)


if __name__ == "__main__":
    sys.exit(main())
