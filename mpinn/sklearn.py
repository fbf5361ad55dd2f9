"""scikit-learn estimators, MpinnClassifier and MpinnRegressor: mpinn.api training behind fit/predict, on numpy arrays,
scipy sparse matrices or pandas DataFrames (text columns hashed as categories), in one process or, in a script run
under mpirun, data parallel over its ranks (rank 0 alone prints; every rank returns the same fitted estimator)."""
import inspect

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d, validate_data

from mpinn import api, settings
from mpinn.core.errors import MpinnError
from mpinn.data import Dataset, DataSpec, HashSpec, split_names
from mpinn.data.fit.labels import _label_str, encode_labels
from mpinn.data.formats.dense import dense_xy
from mpinn.data.formats.frames import FrameSource
from mpinn.data.formats.tables import load_table
from mpinn.inference.load import use_transform
from mpinn.inference.predictor import Predictor
from mpinn.model.mlp import MLP
from mpinn.settings.table import OPTIONS

# options about the data file and its label, which fit(X, y) replaces, and tower mode (a model per rank: not one
# estimator); every other option of python -m mpinn.train is a parameter, with its default
NOT_PARAMETERS = ("config", "data", "format", "label", "task", "positive_class", "classes", "missing_labels", "valid",
                  "holdout_by", "default_rows", "input", "parallel", "tower_data", "tower_mix")
# an estimator is silent and writes no file unless asked
OWN_DEFAULTS = {"quiet": True, "model_out": None}
PARAMETERS = {f.name: OWN_DEFAULTS.get(f.name, f.default) for f in OPTIONS if f.name not in NOT_PARAMETERS}
TABLE_DEFAULTS = {f.name: f.default for f in OPTIONS}


def _signature():
    """__init__'s signature, made from the option table (what get_params and clone read)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] +
                             [inspect.Parameter(name, kw, default=d) for name, d in PARAMETERS.items()])


def _is_frame(X):
    return hasattr(X, "columns") and hasattr(X, "dtypes") and hasattr(X, "iloc")


class _MpinnEstimator(BaseEstimator):
    """What both estimators share: the parameters (every training option but those about the data file), fit
    through mpinn.api, and the trained network's raw outputs."""

    def __init__(self, **params):
        unknown = sorted(set(params) - set(PARAMETERS))
        if unknown:
            raise TypeError("%s() got an unknown parameter %r" % (type(self).__name__, unknown[0]))
        for name, default in PARAMETERS.items():
            setattr(self, name, params.get(name, default))

    __init__.__signature__ = _signature()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True        # a missing number is imputed and flagged by the numeric transform
        tags.input_tags.sparse = True           # a sparse matrix feeds the first layer as the hashed columns do
        return tags

    # ------------------------------------------------------------------ data
    def _options(self):
        """The parameters as keywords of mpinn.api.train: those that differ from the option's default only, so that
        the rules see an option as given where the command line would."""
        return {name: getattr(self, name) for name in PARAMETERS if getattr(self, name) != TABLE_DEFAULTS[name]}

    def _columns(self, X):
        """(categorical, numeric) column names of a DataFrame: the parameters' when named, else by dtype."""
        names = [str(c) for c in X.columns]
        if len(set(names)) != len(names):
            raise ValueError("the DataFrame's column names repeat: %s" % names)
        categorical, numeric = split_names(self.categorical), split_names(self.numeric)
        for c in categorical + numeric:
            if c not in names:
                raise ValueError("the DataFrame has no column %r (columns: %s)" % (c, ", ".join(names)))
        if not categorical and not numeric:
            for c, dtype in zip(names, X.dtypes):
                (numeric if dtype.kind in "iuf" else categorical).append(c)
        return categorical, numeric

    def _rows(self, X, labels=None, fit=False, hashing=None):
        """An in-memory mpinn data set of X (labels: the encoded y, or None to predict)."""
        task, classes = self._task()
        if _is_frame(X) and (fit or hasattr(self, "columns_")):      # fitted on arrays: a frame is read as one
            if len(X) == 0:
                raise ValueError("Found array with 0 sample(s) (shape=%s) while a minimum of 1 is required."
                                 % (X.shape,))
            validate_data(self, X, reset=fit, skip_check_array=True)       # the feature names and their number
            X = X.rename(columns=str)
            if fit:
                self.columns_ = self._columns(X)
            categorical, numeric = self.columns_
            if hashing is None:
                hashing = HashSpec(contract=self.meta_.get("hashing"))
            source = FrameSource(X, categorical, numeric, labels)
            return load_table(source, DataSpec(task=task, classes=classes, require_label=labels is not None), hashing)
        X = validate_data(self, X, reset=fit, accept_sparse="csr", dtype=np.float64, ensure_all_finite="allow-nan")
        if not hasattr(X, "tocsr"):
            return dense_xy(X, labels, "X", task, classes, labels is not None)
        X = scipy.sparse.csr_matrix(X, copy=True)       # a csr_array too: mpinn's hashed inputs are csr_matrix
        X.sum_duplicates()
        X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int64)
        y = np.zeros(X.shape[0]) if labels is None else labels
        meta = {"source": "sparse", "n_features": X.shape[1], "task": task, "classes": classes,
                "has_label": labels is not None}
        if labels is not None and task != "regression":
            y = encode_labels(labels, task, classes)[0]
        return Dataset(X, None, y, meta)

    def fit(self, X, y):
        """Train on X (n, d) and y, data parallel over the ranks of the script's MPI job (one process without
        mpirun). Every rank calls fit with the same X and y; rank 0's are read."""
        if _is_frame(X):
            if y is None:
                raise ValueError("%s requires y to be passed, but the target y is None" % type(self).__name__)
            y = column_or_1d(check_array(y, ensure_2d=False, dtype=None), warn=True)
        else:
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=None, ensure_all_finite="allow-nan",
                                 y_numeric=isinstance(self, RegressorMixin))
        if len(y) != X.shape[0]:
            raise ValueError("X has %d rows but y has %d" % (X.shape[0], len(y)))
        labels = self._labels(y)
        if not _is_frame(X):
            self.__dict__.pop("columns_", None)     # a frame's columns from an earlier fit no longer apply
        options = self._options()
        task, classes = self._task()
        try:        # scikit-learn's callers expect a ValueError for bad input
            data = self._rows(X, labels, fit=True, hashing=settings.from_keywords(None, **options).hashing)
            data.meta.update(self._file_meta())     # what a model file (model_out) says for mpinn.predict
            result = api.run(settings.from_keywords(data, task=task, **options), params_everywhere=True)
        except MpinnError as e:
            raise ValueError(str(e)) from None
        self.params_, self.spec_, self.meta_ = result.params, result.spec, result.meta
        self.history_, self.metrics_, self.summary_ = result.history, result.metrics, result.summary
        return self

    def _outputs(self, X):
        """The network's outputs for X: P(positive class) (binary), (n, classes) probabilities, or values."""
        check_is_fitted(self, "params_")
        try:
            rows = self._rows(X)
            use_transform(rows, self.meta_, "X")
        except MpinnError as e:
            raise ValueError(str(e)) from None
        return self._predictor().predict_rows(rows)

    def _predictor(self):
        """The fitted parameters (several vectors: ensemble=K, tower mode; their predictions mixed) as a Predictor:
        held in memory since fit (no model file is read). Made at each call, as the network was before: a fitted
        estimator keeps only what pickles and what predict may not change."""
        model = MLP(self.spec_)
        return Predictor(None, (model, np.reshape(self.params_, (-1, model.size)), self.meta_))


class MpinnClassifier(ClassifierMixin, _MpinnEstimator):
    """mpinn's network as a scikit-learn classifier: binary with a sigmoid head, more classes with a softmax (the
    parameters are python -m mpinn.train's options: hidden=(64,), epochs=..., lr=..., optimizer=...; quiet=False
    prints the run's lines on rank 0; model_out="m.npz" also writes the model file). Like MLPClassifier with
    early_stopping, holdout (0.1) of fit's rows are held out to pick the best epoch."""

    def _task(self):
        return ("binary" if len(self.classes_) == 2 else "multiclass"), [str(i) for i in range(len(self.classes_))]

    def _file_meta(self):
        """The classes by the names y gave them, as mpinn.predict matches a file's labels (the rows carry their
        codes 0..k-1 in that order)."""
        return {"classes": [_label_str(c) for c in self.classes_]}

    def _labels(self, y):
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            one = self.classes_[:1].tolist()[0]        # a plain value: 0.0, not np.float64(0.0)
            raise ValueError("y holds one class (%r): a classifier needs two or more" % (one,))
        return codes.ravel().astype(np.int64)

    def predict_proba(self, X):
        """(n, classes) probabilities, in the order of classes_."""
        p = np.asarray(self._outputs(X), dtype=np.float64)
        if p.ndim == 1:
            return np.column_stack([1.0 - p, p])
        return p / p.sum(axis=1, keepdims=True) if self.spec_.loss == "sigmoid" else p     # one-vs-all: normalised

    def predict(self, X):
        p = self._outputs(X)
        return self.classes_[(np.asarray(p) > 0.5).astype(int) if np.ndim(p) == 1 else np.argmax(p, axis=1)]


class MpinnRegressor(RegressorMixin, _MpinnEstimator):
    """mpinn's network as a scikit-learn regressor (a squared-loss head; the target standardised for training and
    the predictions in its units). The parameters are python -m mpinn.train's options, as for MpinnClassifier."""

    def _task(self):
        return "regression", None

    def _file_meta(self):
        return {}

    def _labels(self, y):
        y = np.asarray(y, dtype=np.float64)
        if len(y) < 2:
            raise ValueError("a regression needs 2 samples or more, got n_samples = %d" % len(y))
        return y

    def predict(self, X):
        return np.asarray(self._outputs(X), dtype=np.float64).ravel()
