"""Entry point: python -m mpinn.predict --model FILE --data FILE [--out predictions.csv]."""
import argparse
import json
import sys
from dataclasses import replace

import numpy as np

from mpinn.config import MpinnError
from mpinn.settings import messages


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m mpinn.predict",
        description="Predict with a model written by mpinn.train. The data is read with the model's own "
                    "columns and hashing contract; if it has labels, metrics are printed too.")
    p.add_argument("--model", required=True, help="model file (.npz) written by mpinn.train")
    p.add_argument("--data", help="data file (.csv, .npz, .mat); omitted for a model trained on the "
                                  "embedded click log: its held-out rows")
    p.add_argument("--out", help="write predictions here (CSV: one row per input row)")
    p.add_argument("--metrics-out", help="write the metrics as JSON here")
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
    if path.lower().endswith(".mpinn"):         # rows hashed by prepare: their contract must be the model's
        data = load_data(path, labels, hashing)
    elif meta.get("source") == "criteo":       # click-log text, with or without the label field
        data = load_data(path, replace(columns, format="criteo"), hashing)
    elif meta.get("source") in ("csv", "default", "parquet"):
        if not path.lower().endswith((".csv", ".txt", ".parquet", ".pq")):
            raise MpinnError("the model was trained on tabular data; give a .csv, .parquet or .mpinn file")
        data = load_data(path, replace(columns, label=meta.get("label")), hashing)
        if meta.get("hashing"):
            check_contract(meta["hashing"], data.meta["hashing"])
    else:
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
    model = MLP(spec)
    towers = params.reshape(-1, params.shape[-1]) if params.ndim == 2 else params[None]
    if towers.shape[1] != model.size:
        raise MpinnError("%s: %d parameters stored, the architecture needs %d"
                         % (model_path, towers.shape[1], model.size))
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
    pred, metrics, meta, data = predict_file(args.model, args.data)
    if data.meta.get("has_label", True):
        print("%d rows: %s" % (len(data), format_metrics(metrics)), flush=True)
    else:
        print("%d rows (no labels: no metrics)" % len(data), flush=True)
    if args.out:
        write_predictions(args.out, meta, pred)
        print("predictions written to %s" % args.out)
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            json.dump(metrics, f, indent=1)
    return 0


def write_predictions(path, meta, pred):
    classes = meta.get("classes")
    with open(path, "w") as f:
        if meta["task"] == "multiclass":
            f.write("prediction," + ",".join("p_%s" % c for c in classes) + "\n")
            for row in pred:
                f.write("%s,%s\n" % (classes[int(np.argmax(row))], ",".join("%.6g" % v for v in row)))
        elif meta["task"] == "binary":
            f.write("prediction,p_%s\n" % classes[1])
            for p in pred:
                f.write("%s,%.6g\n" % (classes[int(p > 0.5)], p))
        else:
            f.write("prediction\n")
            for v in pred:
                f.write("%.8g\n" % v)


def main(argv=None):
    from mpinn.process import run_one_process
    return run_one_process(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
