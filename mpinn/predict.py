"""Entry point: python -m mpinn.predict --model FILE --data FILE [--out predictions.csv]."""
import json
import os
import sys
from dataclasses import replace

import numpy as np

from mpinn.config import MpinnError
from mpinn.outputs import written_whole
from mpinn.settings import messages


def build_parser():
    from mpinn.settings.options import Parser
    p = Parser(
        prog="python -m mpinn.predict",
        description="Predict with a model written by mpinn.train, in one process. The data is read with the model's "
                    "own columns, numeric transform and hashing contract; if it has labels, metrics are printed too.",
        epilog="Output (--out): CSV with a header and one row per input row, in the data's order: [the --id column,] "
               "prediction (the predicted class; for a regression, the value in the label's units), then p_CLASS, "
               "the probability of each class (binary: p_POSITIVE only). The metrics (accuracy, logloss, auc; rmse) "
               "are printed when the data has the label.")
    p.add_argument("--model", required=True, metavar="FILE", help="model file (.npz) written by mpinn.train")
    p.add_argument("--data", metavar="FILE",
                   help="rows to predict, in the model's input: .csv (.csv.gz), .parquet or a packed .mpinn file "
                        "(python -m mpinn.prepare, with the model's hashing) for a model trained on a table; click-log "
                        "text for one trained on it; .npz (X) or .mat for one trained on arrays; omitted for a model "
                        "trained on the embedded click log: its held-out rows. The label column is optional")
    p.add_argument("--out", metavar="FILE", help="write the predictions here (CSV: one row per input row, see below)")
    p.add_argument("--metrics-out", metavar="FILE", help="write the metrics as JSON here")
    p.add_argument("--id", metavar="COLUMN", help="begin each output row with the data's column COLUMN (a CSV or "
                                                  "Parquet file's: a user or request id), or with `row`, where the "
                                                  "data has no column of that name, the row's number from 1")
    return p


def load_for_model(meta, path):
    """Read `path` exactly as the model's training data was read (columns, classes, hashing), through
    the model's numeric transform."""
    data = _read_for_model(meta, path)
    use_transform(data, meta, path or "the held-out rows")
    return data


def use_transform(data, meta, where):
    """The model's numeric transform on `data` (its columns checked); a model written before the transform
    existed (no "transform" in its header) reads numbers as they are."""
    if "transform" not in meta:
        data.transform = None
        return
    from mpinn.data.inputs import set_transform
    from mpinn.data.transform import NumericTransform
    set_transform(data, NumericTransform.from_dict(meta["transform"]), where)


def _read_for_model(meta, path):
    from mpinn.data import DataSpec, HashSpec, load_data
    from mpinn.hashing import check_contract
    # the model's own contract hashes the rows: no refitting of buckets or vocabularies to new data
    hashing = HashSpec().using(meta.get("hashing"))
    if path is None:
        if meta.get("source") != "default":
            raise MpinnError(messages.predict_needs_data("the model was not trained on the embedded data"))
        from mpinn.data import load_default
        data = load_default(meta["default_rows"], meta["default_seed"], hashing)
        _, valid = data.split(meta["holdout"], meta["default_seed"])
        if valid is None:
            raise MpinnError(messages.predict_needs_data("the model was trained without held-out rows"))
        return valid
    labels = DataSpec(task=meta["task"], classes=meta.get("classes"), require_label=False)
    columns = replace(labels, categorical=meta.get("categorical") or (), numeric=meta.get("numeric") or ())
    from mpinn.data import files
    paths = files.expand(path) if files.is_many(path) else [path]     # several files are read as one, in order
    path = paths[0] if len(paths) == 1 else paths
    if paths[0].lower().endswith(".mpinn"):         # rows hashed by prepare: their contract must be the model's
        data = load_data(path, labels, hashing)
    elif meta.get("source") == "criteo":       # click-log text, with or without the label field
        data = load_data(path, replace(columns, format="criteo"), hashing)
    elif meta.get("source") in ("csv", "default", "parquet"):
        if not all(p.lower().endswith((".csv", ".txt", ".csv.gz", ".txt.gz", ".parquet", ".pq")) for p in paths):
            raise MpinnError("the model was trained on tabular data; give a .csv (.csv.gz), .parquet or .mpinn file")
        data = load_data(path, replace(columns, label=meta.get("label")), hashing)
        if meta.get("hashing"):
            check_contract(meta["hashing"], data.meta["hashing"])
    else:
        if len(paths) > 1 or not paths[0].lower().endswith((".npz", ".mat")):
            raise MpinnError("the model was trained on dense arrays (%s features, from %s file); give an .npz (X, y) "
                             "or .mat file with %s columns" % (meta.get("n_features"), "an .npz" if meta.get("source")
                                                               == "npz" else "a ." + str(meta.get("source")),
                                                               meta.get("n_features")))
        data = load_data(path, labels)
        if data.Xd.shape[1] != meta.get("n_features"):
            raise MpinnError("%s has %d features, the model expects %d"
                             % (path, data.Xd.shape[1], meta.get("n_features")))
    return data


def predict_file(model_path, data=None):
    """(predictions, metrics, meta, rows) for a model file and a data path (or in-memory Rows, or
    None for a model trained on the embedded data: its held-out rows). Metrics need labels."""
    from mpinn.checkpoint import load_model
    from mpinn.data import Rows
    from mpinn.metrics import compute_metrics
    from mpinn.model import MLP, predict_rows
    from mpinn.training.towers import mix
    params, spec, meta = load_model(model_path)
    if meta.get("task") not in ("binary", "multiclass", "regression"):
        from mpinn import __version__
        raise MpinnError("%s (written by mpinn %s) has no task in its header: not a model file this mpinn %s can "
                         "predict with" % (model_path, meta.get("written_by", "?"), __version__))
    classes = meta.get("classes")
    if meta["task"] != "regression" and not (isinstance(classes, list) and len(classes) == (
            2 if meta["task"] == "binary" else spec.n_out)):
        raise MpinnError("%s: the classes in its header (%s) do not fit its %s head of %d outputs"
                         % (model_path, str(classes)[:60], meta["task"], spec.n_out))
    if params.dtype.kind != "f" or params.ndim not in (1, 2):
        raise MpinnError("%s: its parameters are not a vector of numbers (%s, shape %s)"
                         % (model_path, params.dtype, params.shape))
    towers = params.reshape(-1, params.shape[-1]) if params.ndim == 2 else params[None]
    if towers.shape[1] != spec.n_params:        # checked before the model is allocated from the header's sizes
        raise MpinnError("%s: %d parameters stored, the architecture in its header needs %d"
                         % (model_path, towers.shape[1], spec.n_params))
    model = MLP(spec)
    rows = data if isinstance(data, Rows) else load_for_model(meta, data)
    if isinstance(data, Rows):
        if meta["task"] != "regression" and rows.meta.get("classes") != meta.get("classes"):
            rows = _relabel(rows, meta)
        use_transform(rows, meta, "the data")
    preds = []
    for p in towers:            # tower mode keeps every replica: mix their predictions
        model.params[...] = p
        preds.append(predict_rows(model, rows))
    pred = preds[0] if len(preds) == 1 else mix(preds, meta.get("towers", {}).get("weights"))
    if rows.transform is not None:
        pred = rows.transform.unscale_target(pred)      # regression: back in the label's units
    metrics = {"n": len(rows)}
    if rows.meta.get("has_label", True):
        metrics = compute_metrics(meta["task"], rows.y, pred)
    return pred, metrics, meta, rows


def _relabel(rows, meta):
    """In-memory rows encoded with their own classes: re-express their label ids in the model's."""
    from mpinn.data import Dataset
    theirs, ours = list(rows.meta.get("classes") or []), list(meta.get("classes") or [])
    unknown = sorted(set(theirs) - set(ours))
    if unknown:
        raise MpinnError("labels %s are not among the model's classes %s" % (unknown[:5], ours[:10]))
    to_ours = np.array([ours.index(c) for c in theirs], dtype=np.int64)
    y = to_ours[np.asarray(rows.y, dtype=np.int64)]
    if meta["task"] == "binary":
        y = y.astype(np.float64)
    return Dataset(rows.Xs, rows.Xd, y, dict(rows.meta, classes=ours), rows.transform)


def run(args):
    from mpinn.metrics import format_metrics
    from mpinn.outputs import check_file
    for path, what in ((args.out, "--out"), (args.metrics_out, "--metrics-out")):
        if path:
            check_file(path, what)      # before the model and the data are read
    if args.id and not args.out:
        raise MpinnError(messages.predict_id_needs_out())
    ids = row_ids(args.id, args.data) if args.id else None
    pred, metrics, meta, data = predict_file(args.model, args.data)
    if ids is not None and len(ids) != len(data):
        raise MpinnError("%s: %d values in column %r for %d rows read" % (args.data, len(ids), args.id, len(data)))
    if data.meta.get("has_label", True):
        print("%d rows: %s" % (len(data), format_metrics(metrics)), flush=True)
    else:
        print("%d rows (no labels: no metrics)" % len(data), flush=True)
    if args.out:
        write_predictions(args.out, meta, pred, ids if ids is not None or not args.id else range(1, len(data) + 1),
                          args.id)
        print("predictions written to %s" % args.out)
    if args.metrics_out:
        with written_whole(args.metrics_out, "the metrics") as f:
            json.dump(metrics, f, indent=1)
    return 0


def row_ids(name, path):
    """--id: the values of the data's column `name` (a CSV or Parquet file's), or None for `row` where the data has no
    such column (the rows are numbered from 1 as they are written)."""
    from mpinn.data import data_format, files
    paths = (files.expand(path) if files.is_many(path) else [path]) if path else []
    if paths and all(os.path.exists(p) and data_format(p) in ("csv", "parquet") for p in paths):
        from mpinn.data.many import read_column_of
        try:
            return read_column_of(paths, name, "to begin the predictions' rows with")
        except MpinnError:
            if name != "row":
                raise
    elif name != "row":
        raise MpinnError("%s has no named columns: `row` numbers the rows" % (path or "the held-out rows"))
    return None


def _csv_cell(v):
    s = str(v)
    return '"%s"' % s.replace('"', '""') if any(c in s for c in ',"\r\n') else s


def write_predictions(path, meta, pred, ids=None, id_name="row"):
    """The predictions as CSV: [the id,] the predicted class (or value), the class probabilities."""
    classes = meta.get("classes")
    first = "" if ids is None else _csv_cell(id_name) + ","
    lead = (lambda i: "") if ids is None else (lambda i: _csv_cell(ids[i]) + ",")
    with written_whole(path, "the predictions") as f:
        if meta["task"] == "multiclass":
            f.write(first + "prediction," + ",".join("p_%s" % c for c in classes) + "\n")
            for i, row in enumerate(pred):
                f.write("%s%s,%s\n" % (lead(i), classes[int(np.argmax(row))], ",".join("%.6g" % v for v in row)))
        elif meta["task"] == "binary":
            f.write(first + "prediction,p_%s\n" % classes[1])
            for i, p in enumerate(pred):
                f.write("%s%s,%.6g\n" % (lead(i), classes[int(p > 0.5)], p))
        else:
            f.write(first + "prediction\n")
            for i, v in enumerate(pred):
                f.write("%s%.8g\n" % (lead(i), v))


def main(argv=None):
    from mpinn.process import run_one_process
    return run_one_process(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
