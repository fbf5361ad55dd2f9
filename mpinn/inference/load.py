"""A model file, loaded and checked (load_checked), and data read exactly as its training data was (load_for_model):
its columns, classes, hashing contract and numeric transform."""
import numpy as np

from mpinn import __version__
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, HashSpec, load_data, load_default
from mpinn.data.files import FileSet
from mpinn.data.fit.transform import NumericTransform
from mpinn.data.inputs import set_transform
from mpinn.data.model_header import inputs_problem
from mpinn.data.spec import read_like
from mpinn.files.checkpoint import load_model
from mpinn.hashing import check_contract
from mpinn.model.mlp import MLP
from mpinn.settings import messages


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
    set_transform(data, NumericTransform.from_dict(meta["transform"]), where)


def model_reading(meta):
    """(DataSpec, HashSpec) that read rows as a model's training data was read (mpinn.data.spec.read_like): its
    columns, label (optional here: missing labels kept, unscored), task, classes and hashing contract, and the
    click-log format for a model trained on click-log text."""
    return read_like(meta, DataSpec(require_label=False, missing_labels="keep", label=meta.get("label"),
                                    format="criteo" if meta.get("source") == "criteo" else None), HashSpec())


def _read_for_model(meta, path):
    # the model's own contract hashes the rows: no refitting of buckets or vocabularies to new data
    columns, hashing = model_reading(meta)
    if path is None:
        if meta.get("source") != "default":
            raise MpinnError(messages.predict_needs_data("the model was not trained on the embedded data"))
        data = load_default(meta["default_rows"], meta["default_seed"], hashing)
        last = (meta.get("config") or {}).get("holdout_by") == "last"      # random or last (rules: a table's alone)
        _, valid = data.split(meta["holdout"], meta["default_seed"], *(("time", np.arange(len(data))) if last else ()))
        if valid is None:
            raise MpinnError(messages.predict_needs_data("the model was trained without held-out rows"))
        return valid
    labels = DataSpec(task=meta["task"], classes=meta.get("classes"), require_label=False, missing_labels="keep")
    files = FileSet.of(path)        # several files are read as one, in order
    if files[0].format == "mpinn":         # rows hashed by prepare: their contract must be the model's
        data = load_data(files, labels, hashing)
    elif meta.get("source") == "criteo":       # click-log text, with or without the label field
        data = load_data(FileSet.of(path, "criteo"), columns, hashing)
    elif meta.get("source") in ("csv", "default", "parquet", "dataframe"):    # named columns (an estimator's frame)
        if not all(f.table for f in files):
            raise MpinnError("the model was trained on tabular data; give a .csv (.csv.gz), .tsv, .parquet or .mpinn "
                             "file")
        data = load_data(files, columns, hashing)
        if meta.get("hashing"):
            check_contract(meta["hashing"], data.meta["hashing"])
    else:
        if len(files) > 1 or files[0].format not in ("npz", "mat"):
            raise MpinnError("the model was trained on dense arrays (%s features, from %s file); give an .npz (X, y) "
                             "or .mat file with %s columns" % (meta.get("n_features"), "an .npz" if meta.get("source")
                                                               == "npz" else "a ." + str(meta.get("source")),
                                                               meta.get("n_features")))
        data = load_data(files, labels)
        if data.Xd.shape[1] != meta.get("n_features"):
            raise MpinnError("%s has %d features, the model expects %d"
                             % (path, data.Xd.shape[1], meta.get("n_features")))
    return data


def load_checked(model_path):
    """(model, towers, meta) of a model file, checked: its task, classes and parameters fit its header. towers:
    one parameter vector a replica (tower mode keeps every one)."""
    params, spec, meta = load_model(model_path)
    if meta.get("task") not in ("binary", "multiclass", "regression"):
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
    why = inputs_problem(meta, spec)
    if why:
        raise MpinnError("%s: its header does not fit its parameters: %s (an edited or damaged model file: train it "
                         "again)" % (model_path, why))
    return MLP(spec), towers, meta
