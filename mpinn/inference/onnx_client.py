"""A client of an ONNX model written by mpinn.export: rows (a data path, a DataFrame, row dicts) read and hashed as the
Predictor reads them (mpinn.inference.predictor.read_rows, with the contract and header in the model's metadata),
then scored by ONNX Runtime. python -m mpinn.predict --model M.onnx scores through it."""
import json

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data import Dataset
from mpinn.inference.load import model_reading
from mpinn.inference.predictor import Predictor, read_rows
from mpinn.inference.score import metrics_of
from mpinn.model.mlp import PREDICT_ROWS


def open_predictor(path):
    """A Predictor for a model file, an OnnxPredictor for an .onnx file."""
    return OnnxPredictor(path) if str(path).lower().endswith(".onnx") else Predictor(path)


def ids_of(Xs, pad):
    """(n, width) int64 hashed column ids of a hashed CSR (every entry 1.0): each row's ids in its order, a row with
    fewer than the widest row's padded with `pad` (the id of the graph's zero row)."""
    if Xs.nnz and not np.all(Xs.data == 1):
        raise MpinnError("the rows' hashed columns carry values other than 1: not rows hashed by a contract")
    counts = np.diff(Xs.indptr)
    width = int(counts.max()) if counts.size else 0
    if counts.size and np.all(counts == width):
        return np.ascontiguousarray(Xs.indices.reshape(-1, width), dtype=np.int64)
    ids = np.full((Xs.shape[0], width), pad, dtype=np.int64)
    ids[np.arange(width)[None, :] < counts[:, None]] = Xs.indices
    return ids


class OnnxPredictor:
    """An ONNX model written by mpinn.export, loaded once into an ONNX Runtime session; its metadata (the model's
    header: task, classes, columns, hashing contract, numeric transform) says how rows are read.

        p = OnnxPredictor("clicks.onnx")
        p.predict({"site": "a1", "hour": 13})       # what Predictor("clicks.npz").predict gives, to 1e-6
        p.predict(frame); p.predict("more.csv")
        p.run(ids=..., numeric=...)                 # the graph on arrays: hashed ids (int64), raw numbers (float64)

    threads: ONNX Runtime's threads within an operator (None: its default, every core)."""

    def __init__(self, path, threads=None):
        try:
            import onnxruntime as ort  # optional: onnxruntime (the [onnx] extra)
        except ImportError:
            raise MpinnError("%s: scoring an ONNX model needs onnxruntime (pip install onnxruntime, or mpinn's onnx "
                             "extra)" % path) from None
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        try:
            self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime's errors (a missing, foreign or broken file) as one line
            raise MpinnError("%s: ONNX Runtime cannot load it (%s)" % (path, str(e).strip().splitlines()[0][:300]))
        props = self.session.get_modelmeta().custom_metadata_map
        if "mpinn_meta" not in props or "inputs" not in props:
            raise MpinnError("%s is an ONNX model without mpinn's metadata: not one written by mpinn.export" % path)
        self.model_path = str(path)
        self.meta, self.inputs = json.loads(props["mpinn_meta"]), json.loads(props["inputs"])
        self.task = self.meta["task"]
        self.hashing = model_reading(self.meta)[1]       # the model's contract: no refitting to new rows

    @property
    def classes(self):
        return None if self.task == "regression" else list(self.meta["classes"])

    def predict(self, data=None):
        """Predictions of `data` as Predictor.predict takes it (a path, Rows, a DataFrame, row dicts, None)."""
        return self.predict_rows(self.read(data))

    def scored(self, data=None):
        """(predictions, metrics), as Predictor.scored."""
        rows = self.read(data)
        pred = self.predict_rows(rows)
        return pred, metrics_of(self.meta, rows, pred)

    def read(self, data):
        return read_rows(self.meta, self.hashing, data)

    def predict_rows(self, rows, chunk=PREDICT_ROWS):
        """The graph's predictions of rows read for the model: their hashed ids and raw numbers, chunk rows at a
        time."""
        out = [self.run(**self.feeds(rows, s, min(s + chunk, len(rows)))) for s in range(0, len(rows), chunk)]
        return np.concatenate(out) if out else np.zeros(0)

    def feeds(self, rows, lo, hi):
        """The graph's inputs for rows lo:hi: ids (the hashed CSR's columns) and numeric (the stored values, which
        the graph transforms)."""
        out = {}
        if "ids" in self.inputs:
            Xs = rows.Xs[lo:hi] if isinstance(rows, Dataset) else rows.take(np.arange(lo, hi)).Xs   # a slice: faster
            out["ids"] = ids_of(Xs, self.inputs["ids"]["padding_id"])
        if "numeric" in self.inputs:
            out["numeric"] = np.ascontiguousarray(rows.dense_rows(lo, hi), dtype=np.float64)
        return out

    def run(self, ids=None, numeric=None):
        """The graph on arrays: ids (rows, ids per row) int64, numeric (rows, columns) float64 (NaN: missing)."""
        feeds = {}
        if "ids" in self.inputs:
            feeds["ids"] = np.ascontiguousarray(ids, dtype=np.int64)
        if "numeric" in self.inputs:
            feeds["numeric"] = np.ascontiguousarray(numeric, dtype=np.float64)
        return self.session.run(["prediction"], feeds)[0]
