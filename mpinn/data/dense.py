"""Dense inputs: .npz (X, y) and .mat (Andrew Ng's exercise format) files, and in-memory arrays."""
import os

import numpy as np

from mpinn.config import MpinnError
from mpinn.data.base import Dataset
from mpinn.data.labels import encode_labels
from mpinn.data.stats import column_stats


def dense_xy(X, y, path, task, classes, require_label, positive=None):
    # loadmat returns Fortran-ordered arrays: convert once, here, where they enter
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
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


def load_npz(path, task="auto", classes=None, require_label=True, positive=None):
    try:
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z:
                raise MpinnError("%s has no X array (found: %s)" % (path, ", ".join(z.files)))
            X, y = z["X"], (z["y"] if "y" in z else None)
    except ValueError as e:
        raise MpinnError("%s: cannot load without pickle (%s)" % (path, e))
    except (OSError, EOFError) as e:
        raise MpinnError("cannot read %s: %s" % (path, e))
    return dense_xy(X, y, path, task, classes, require_label, positive)


def load_mat(path, task="auto", classes=None, require_label=True, positive=None):
    """Andrew Ng's exercise format: X (m, n) and y (m, 1) with labels 1..10 (10 stands for digit 0)."""
    import scipy.io
    try:
        d = scipy.io.loadmat(path)
    except (OSError, ValueError, TypeError) as e:
        raise MpinnError("cannot read %s as a .mat file: %s" % (path, e))
    if "X" not in d:
        raise MpinnError("%s has no X matrix" % path)
    return dense_xy(d["X"], d.get("y"), path, task, classes, require_label, positive)
