"""Predictions of a loaded model: for rows in memory (predict_with; mpinn.inference.predictor.Predictor reads and
scores a file or in-memory rows with their metrics), and a chunk at a time for files too big to read whole
(streamed_files, predict_stream)."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data import Dataset, Rows
from mpinn.data.files import FileSet
from mpinn.data.fit.labels import labelled
from mpinn.data.many import blocks_of
from mpinn.inference.load import load_for_model, model_reading, use_transform
from mpinn.model.metrics import compute_metrics
from mpinn.model.mlp import PREDICT_ROWS, predict_rows
from mpinn.settings import messages
from mpinn.training.towers import mix


def predict_with(model, towers, meta, rows, set_already=False):
    """The predictions for every row of `rows` (read for the model: its transform set), in the label's units.
    set_already: the model's parameters are the one tower's already (a Predictor's: copying a large table's
    parameters in at every call would cost more than scoring a few rows)."""
    preds = []
    for p in towers:            # tower mode keeps every replica: mix their predictions
        if not (set_already and len(towers) == 1):
            model.params[...] = p
        preds.append(predict_rows(model, rows))
    pred = preds[0] if len(preds) == 1 else mix(preds, meta.get("towers", {}).get("weights"))
    if rows.transform is not None:
        pred = rows.transform.unscale_target(pred)      # regression: back in the label's units
    return pred


def rows_for(meta, data):
    """`data` read for the model as Predictor.read reads it: a path as its training data was read, in-memory Rows
    with their labels re-expressed in the model's classes, None: the embedded data's held-out rows; the model's
    numeric transform set."""
    if not isinstance(data, Rows):
        return load_for_model(meta, data)
    rows = data
    if meta["task"] != "regression" and rows.meta.get("classes") != meta.get("classes"):
        rows = _relabel(rows, meta)
    use_transform(rows, meta, "the data")
    return rows


def metrics_of(meta, rows, pred):
    """The metrics of the predictions `pred` of `rows`: {"n": rows} where they have no labels."""
    metrics = {"n": len(rows)}
    if rows.meta.get("has_label", True):
        known = labelled(rows.y)
        metrics = compute_metrics(meta["task"], rows.y[known], pred[known]) if known.any() else {"n": 0}
        metrics["unlabelled"] = int((~known).sum())
    return metrics


def streamed_files(choice, meta, path):
    """The FileSet of `path` when its rows are predicted a chunk at a time (--stream), else None."""
    if choice == "off" or path is None or meta.get("source") not in ("csv", "default", "parquet", "criteo"):
        why = None if choice == "off" or path is None else "the model was trained on arrays, read whole"
    else:
        files = FileSet.of(path, "criteo" if meta.get("source") == "criteo" else None)
        odd = files.odd()
        why = "%s is not a table file (CSV, Parquet, click-log text)" % odd if odd else None
        if not why and files.streams(choice):
            return files
    if choice == "on":
        raise MpinnError(messages.predict_cannot_stream(why or "no data file given"))
    return None


def predict_stream(score, meta, files):
    """(predictions, rows) of the files' rows in turn, read as the model's training data was, PREDICT_ROWS at a
    time: predict_rows's blocks, so that every product has the shape it has when the files are read whole, and
    the predictions the same bits. score(rows): their predictions (a Predictor's or an OnnxPredictor's
    predict_rows)."""
    for rows in blocks_of(files, *model_reading(meta), PREDICT_ROWS):
        use_transform(rows, meta, files.paths[0])
        yield score(rows), rows


def _relabel(rows, meta):
    """In-memory rows encoded with their own classes: re-express their label ids in the model's."""
    theirs, ours = list(rows.meta.get("classes") or []), list(meta.get("classes") or [])
    unknown = sorted(set(theirs) - set(ours))
    if unknown:
        raise MpinnError("labels %s are not among the model's classes %s" % (unknown[:5], ours[:10]))
    to_ours = np.array([ours.index(c) for c in theirs], dtype=np.int64)
    y = to_ours[np.asarray(rows.y, dtype=np.int64)]
    if meta["task"] == "binary":
        y = y.astype(np.float64)
    return Dataset(rows.Xs, rows.Xd, y, dict(rows.meta, classes=ours), rows.transform)
