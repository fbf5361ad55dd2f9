"""Dense inputs: .npz (X, y) and .mat (Andrew Ng's exercise format) files, and in-memory arrays."""
import os

import numpy as np

from mpinn.config import MpinnError
from mpinn.data.base import Dataset
from mpinn.data.labels import encode_labels
from mpinn.data.spec import DataSpec
from mpinn.data.stats import column_stats


def dense_xy(X, y, path, task, classes, require_label, positive=None):
    # loadmat returns Fortran-ordered arrays: convert once, here, where they enter
    if getattr(X, "dtype", None) is not None and X.dtype.kind == "c":
        raise MpinnError("%s: X holds complex numbers (%s); mpinn reads real ones" % (path, X.dtype))
    try:
        X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    except (TypeError, ValueError) as e:
        raise MpinnError("%s: X must hold numbers (%s holds %s: %s)" % (
            path, "an array of" if hasattr(X, "dtype") else "a", getattr(getattr(X, "dtype", None), "name", type(X).__name__),
            str(e).splitlines()[0][:80]))
    if X.ndim != 2:
        raise MpinnError("%s: X must be 2-D, got shape %s" % (path, X.shape))
    # NaN or inf in X are missing values: the transform imputes and flags them
    meta = {"source": os.path.splitext(path)[1].lstrip("."), "n_features": X.shape[1],
            "numeric_stats": column_stats(X, ["x%d" % j for j in range(X.shape[1])])}
    if y is None:
        if require_label:
            raise MpinnError("%s has no y array" % path)
        meta.update(task=task, classes=classes, has_label=False)
        return Dataset(None, X, np.zeros(X.shape[0]), meta)
    y = np.ascontiguousarray(np.asarray(y)).ravel()
    if y.shape[0] != X.shape[0]:
        raise MpinnError("%s: X has %d rows but y has %d" % (path, X.shape[0], y.shape[0]))
    y, task, classes = encode_labels(y, task, classes, positive)
    meta.update(task=task, classes=classes, has_label=True)
    return Dataset(None, X, y, meta)


def load_npz(path, spec=DataSpec()):
    """X (n, d) and y (n,) of an .npz file; spec: the task, classes and positive class, whether y is required."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise MpinnError("%s is a single .npy array, not an .npz file with X and y" % path)
            if "X" not in z:
                raise MpinnError("%s has no X array (found: %s)" % (path, ", ".join(z.files)))
            X, y = z["X"], (z["y"] if "y" in z else None)
    except MpinnError:
        raise
    except ValueError as e:
        raise MpinnError("%s: cannot load without pickle (%s)" % (path, e))
    except Exception as e:      # a truncated or damaged file: BadZipFile, EOFError, OSError, zlib.error ...
        raise MpinnError("cannot read %s as an .npz file (%s: %s)" % (path, type(e).__name__, str(e)[:120]))
    return dense_xy(X, y, path, spec.task, spec.classes, spec.require_label, spec.positive)


def load_mat(path, spec=DataSpec()):
    """Andrew Ng's exercise format: X (m, n) and y (m, 1) with labels 1..10 (10 stands for digit 0)."""
    import scipy.io
    try:
        d = scipy.io.loadmat(path)
    except Exception as e:      # truncated, not a .mat file, an unsupported version (MatReadError, ValueError ...)
        raise MpinnError("cannot read %s as a .mat file (%s: %s)" % (path, type(e).__name__, str(e)[:120]))
    if "X" not in d:
        raise MpinnError("%s has no X matrix" % path)
    return dense_xy(d["X"], d.get("y"), path, spec.task, spec.classes, spec.require_label, spec.positive)
