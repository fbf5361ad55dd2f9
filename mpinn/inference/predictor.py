"""A model loaded once, for a Python service: Predictor(model_path) reads and checks the model file a single time
(load_checked), then scores a data path, in-memory rows, a pandas DataFrame, a list of row dicts or one row dict
without opening the model file again. mpinn.api.predict and the scikit-learn estimators score through it."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, Rows
from mpinn.data.formats.frames import DictSource, FrameSource
from mpinn.data.formats.tables import load_table
from mpinn.inference.load import load_checked, model_reading, use_transform
from mpinn.inference.score import metrics_of, predict_with, rows_for

# the sources whose rows are named columns: what a DataFrame or row dicts can stand for
NAMED = ("csv", "default", "parquet", "dataframe")


def _is_frame(data):
    return hasattr(data, "columns") and hasattr(data, "dtypes") and hasattr(data, "iloc")


class Predictor:
    """A model file loaded and checked once: its network, parameters (every tower's or ensemble member's), header
    (task, classes, columns), numeric transform and hashing contract, held in memory.

        p = Predictor("clicks.npz")
        p.predict({"site": "a1", "hour": 13})         # one row: an array of one prediction
        p.predict(frame)                              # a DataFrame's rows, columns by name
        p.predict("more.csv")                         # a file, read as the model's training data was

    predict() gives the predictions in the label's units, as mpinn.api.predict and python -m mpinn.predict do (the
    same bits): a binary model's P(positive class), a multiclass model's (n, classes) probabilities, a regression's
    values."""

    def __init__(self, model_path, loaded=None):
        """loaded: (model, towers, meta) already in memory (load_checked's, or a fitted estimator's): the file
        is not read."""
        self.model_path = model_path
        self.model, self.towers, self.meta = loaded if loaded is not None else load_checked(model_path)
        self.task = self.meta["task"]
        self.hashing = model_reading(self.meta)[1]      # the model's hashing contract: no refitting to new rows
        if len(self.towers) == 1:       # one parameter vector: in the network once (several: each in turn, a call)
            self.model.params[...] = self.towers[0]

    @property
    def classes(self):
        """The class labels as the model file names them (binary: [negative, positive]); None for a regression."""
        return None if self.task == "regression" else list(self.meta["classes"])

    def predict(self, data=None):
        """The predictions of `data`: a data path (read as the model's training data was), in-memory Rows
        (mpinn.api.arrays), a pandas DataFrame or row dicts (a list of them, or one) holding the model's columns by
        name, or None for a model trained on the embedded click log (its held-out rows)."""
        return self.predict_rows(self.read(data))

    def predict_proba(self, data=None):
        """(n, classes) probabilities in the order of `classes` (binary: [1 - p, p]); not for a regression."""
        if self.task == "regression":
            raise MpinnError("the model is a regression: it predicts values, not class probabilities")
        p = np.asarray(self.predict(data), dtype=np.float64)
        if p.ndim == 1:
            return np.column_stack([1.0 - p, p])
        return p / p.sum(axis=1, keepdims=True) if self.model.spec.loss == "sigmoid" else p  # one-vs-all: normalised

    def scored(self, data=None):
        """(predictions, metrics) as mpinn.api.predict gives them: metrics where the rows have labels."""
        rows = self.read(data)
        pred = self.predict_rows(rows)
        return pred, metrics_of(self.meta, rows, pred)

    def predict_rows(self, rows):
        """The predictions of rows read for this model (read(), or an estimator's rows: the transform set)."""
        return predict_with(self.model, self.towers, self.meta, rows, set_already=True)

    def read(self, data):
        """`data` read for the model, its numeric transform set: what predict_rows scores."""
        return read_rows(self.meta, self.hashing, data)


def read_rows(meta, hashing, data):
    """`data` read for a model of header `meta` as Predictor.read reads it (hashing: model_reading(meta)'s), its
    numeric transform set: a data path, Rows, a DataFrame, row dicts (a list, or one) or None (the embedded click
    log's held-out rows)."""
    if data is None or isinstance(data, (str, Rows)) or hasattr(data, "__fspath__"):
        return rows_for(meta, data if data is None or isinstance(data, Rows) else str(data))
    if isinstance(data, dict):
        data = [data]
    if not (_is_frame(data) or isinstance(data, (list, tuple))):
        raise MpinnError("cannot predict a %s: give a data path, mpinn.api.arrays(X, y), a pandas DataFrame, a "
                         "list of row dicts or one row dict" % type(data).__name__)
    if meta.get("source") not in NAMED:
        raise MpinnError("the model was trained on %s, not on named columns: give a data file or "
                         "mpinn.api.arrays(X, y)" % ("click-log text" if meta.get("source") == "criteo"
                                                      else "arrays"))
    if len(data) == 0:
        raise MpinnError("no rows to predict")
    names = (list(meta.get("categorical") or []), list(meta.get("numeric") or []))
    source = FrameSource(data.rename(columns=str), *names) if _is_frame(data) else DictSource(list(data), *names)
    rows = load_table(source, DataSpec(task=meta["task"], classes=meta.get("classes"), require_label=False,
                                       missing_labels="keep"), hashing)
    use_transform(rows, meta, source.path)
    return rows
