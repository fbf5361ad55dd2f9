"""Dense inputs: .npz (X, y) and .mat (Andrew Ng's exercise format) files, and in-memory arrays."""
import os
import subprocess
import sys
import tempfile

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.base import Dataset
from mpinn.data.fit.labels import encode_labels, missing_labels as missing_labels_of
from mpinn.data.spec import DataSpec
from mpinn.data.fit.stats import column_stats


def dense_xy(X, y, path, task, classes, require_label, positive=None, missing_labels="refuse"):
    # loadmat returns Fortran-ordered arrays: convert once, here, where they enter
    if getattr(X, "dtype", None) is not None and X.dtype.kind == "c":
        raise MpinnError("%s: X holds complex numbers (%s); mpinn reads real ones" % (path, X.dtype))
    try:
        X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    except (TypeError, ValueError) as e:
        kind = "an array of %s" % X.dtype.name if hasattr(X, "dtype") else "a %s" % type(X).__name__
        raise MpinnError("%s: X must hold numbers (it is %s: %s)" % (path, kind, str(e).splitlines()[0][:80]))
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
    if missing_labels == "drop":
        keep = ~missing_labels_of(y)
        if not keep.any():
            raise MpinnError("%s: every row's label is missing" % path)
        if not keep.all():
            X, y = X[keep], y[keep]
            meta["dropped_unlabelled"] = int((~keep).sum())
    y, task, classes = encode_labels(y, task, classes, positive, unlabelled=missing_labels == "keep")
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
    return dense_xy(X, y, path, spec.task, spec.classes, spec.require_label, spec.positive, spec.missing_labels)


# scipy.io.loadmat in a process of its own: its compiled reader crashes on some damaged files (a segmentation fault
# or a bus error on a flipped byte in a cell array's header, scipy 1.16), which no try can catch in this process
_LOADMAT = """
import sys
import numpy as np
import scipy.io
try:
    d = scipy.io.loadmat(sys.argv[1], variable_names=("X", "y"))
except Exception as e:
    sys.stdout.write("cannot read %s as a .mat file (%s: %s)" % (sys.argv[1], type(e).__name__, str(e)[:120]))
    sys.exit(3)
for k in ("X", "y"):
    if k in d and (not isinstance(d[k], np.ndarray) or d[k].dtype.hasobject):
        sys.stdout.write("%s: %s must hold numbers (it is a cell array or a struct)" % (sys.argv[1], k))
        sys.exit(3)
np.savez(sys.argv[2], **{k: d[k] for k in ("X", "y") if k in d})
"""


def load_mat(path, spec=DataSpec()):
    """Andrew Ng's exercise format: X (m, n) and y (m, 1) with labels 1..10 (10 stands for digit 0)."""
    with tempfile.TemporaryDirectory(prefix="mpinn-mat-") as tmp:
        out = os.path.join(tmp, "arrays.npz")
        r = subprocess.run([sys.executable, "-c", _LOADMAT, path, out], capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
        if r.returncode == 3:
            raise MpinnError(r.stdout.strip())
        if r.returncode:
            raise MpinnError("cannot read %s as a .mat file (scipy's reader %s on it: is it damaged?)" % (
                path, "crashed with signal %d" % -r.returncode if r.returncode < 0 else "failed, exit code %d"
                % r.returncode))
        try:
            with np.load(out, allow_pickle=False) as d:
                X, y = d["X"] if "X" in d else None, d["y"] if "y" in d else None
        except (OSError, ValueError) as e:
            raise MpinnError("cannot read %s as a .mat file (%s)" % (path, str(e)[:120]))
    if X is None:
        raise MpinnError("%s has no X matrix" % path)
    return dense_xy(X, y, path, spec.task, spec.classes, spec.require_label, spec.positive, spec.missing_labels)
