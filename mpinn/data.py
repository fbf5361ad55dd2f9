"""Data sources read on rank 0: the embedded click log, CSV, .npz and .mat; labels and task."""
import csv
import math
import os
from dataclasses import dataclass, field

import numpy as np

from mpinn.config import MpinnError
from mpinn.hashing import hashed_csr, make_contract
from mpinn.model import Batch

TASKS = ("multiclass", "binary", "regression")


@dataclass
class Layout:
    """What every rank must know to receive a batch: input widths and dtypes."""
    n_sparse: int
    n_dense: int
    dtype: str
    y_dtype: str


@dataclass
class Dataset:
    """Rows held in memory on rank 0: hashed CSR input, dense input and encoded labels."""
    Xs: object                      # CSR (n, 2**bits) or None
    Xd: object                      # (n, d) C-contiguous or None
    y: np.ndarray                   # int64 class ids (multiclass), float 0/1 (binary) or float values
    meta: dict = field(default_factory=dict)   # task, classes, columns, hashing contract, source

    def __len__(self):
        return int(self.y.shape[0])

    @property
    def task(self):
        return self.meta["task"]

    def layout(self, dtype):
        return Layout(self.Xs.shape[1] if self.Xs is not None else 0,
                      self.Xd.shape[1] if self.Xd is not None else 0,
                      dtype, "int64" if self.task == "multiclass" else dtype)

    def take(self, rows, dtype=None):
        """The batch of the given rows (in that order), cast to the model dtype."""
        Xs = self.Xs[rows] if self.Xs is not None else None
        Xd = self.Xd[rows] if self.Xd is not None else None
        y = self.y[rows]
        if dtype is not None:
            if Xs is not None and Xs.dtype != dtype:
                Xs = Xs.astype(dtype)
            if Xd is not None:
                Xd = np.ascontiguousarray(Xd, dtype=dtype)
            if self.task != "multiclass":
                y = y.astype(dtype, copy=False)
        return Batch(Xs, Xd, y)

    def subset(self, rows):
        b = self.take(rows)
        return Dataset(b.Xs, b.Xd, b.y, self.meta)

    def split(self, holdout, seed):
        """(train, valid): a seeded random share `holdout` of the rows is held out."""
        n = len(self)
        n_valid = int(round(n * holdout))
        if holdout <= 0 or n_valid == 0:
            return self, None
        if n_valid >= n:
            raise MpinnError("--holdout %.3g leaves no training rows" % holdout)
        perm = np.random.default_rng([seed, 7]).permutation(n)
        return self.subset(np.sort(perm[n_valid:])), self.subset(np.sort(perm[:n_valid]))


# ---------------------------------------------------------------- labels
def encode_labels(raw, task="auto", classes=None):
    """(y, task, classes). Multiclass labels become ids 0..k-1 in the order of `classes`."""
    raw = np.asarray(raw).ravel()
    numeric = raw.dtype.kind in "iufb"
    if not numeric:
        try:
            raw_num = raw.astype(np.float64)
            numeric, raw = True, raw_num
        except ValueError:
            pass
    if classes is None:
        if task == "auto":
            if not numeric:
                task = "multiclass"
            else:
                distinct = np.unique(raw)
                integral = np.all(np.mod(distinct, 1) == 0)
                if len(distinct) == 2 and set(distinct.tolist()) <= {0.0, 1.0}:
                    task = "binary"
                elif integral and len(distinct) <= 1000:
                    task = "multiclass"
                else:
                    task = "regression"
        if task == "regression":
            if not numeric:
                raise MpinnError("regression needs numeric labels")
            return raw.astype(np.float64), task, None
        classes = [_label_str(c) for c in np.unique(raw)]
        if task == "binary" and len(classes) != 2:
            raise MpinnError("binary task needs exactly 2 label values, found %d" % len(classes))
    if task == "regression":
        return raw.astype(np.float64), task, None
    lookup = {c: i for i, c in enumerate(classes)}
    keys = [_label_str(v) for v in raw]
    bad = [k for k in keys if k not in lookup]
    if bad:
        raise MpinnError("label %r is not one of the model's classes %s" % (bad[0], classes[:10]))
    ids = np.fromiter((lookup[k] for k in keys), dtype=np.int64, count=len(keys))
    if task == "binary":
        return ids.astype(np.float64), task, classes
    return ids, task, classes


def _label_str(v):
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


# ---------------------------------------------------------------- the embedded click log
DEFAULT_CARDS = (2, 3, 4, 7, 10, 12, 24, 31, 50, 100, 300, 1000, 3000, 10000, 20000, 50000,
                 100000, 100000, 200000, 300000)   # 20 categorical features, Zipf-distributed values
DEFAULT_NUMERIC = 4


def make_clicklog(n_rows=200_000, seed=0):
    """A deterministic synthetic click log: (categorical codes (n, 20) int64, numeric (n, 4), y 0/1).
    A logistic teacher over the categorical values and the numeric columns makes it learnable."""
    rng = np.random.default_rng([seed, 2024])
    teacher = [rng.standard_normal(c) * (1.5 / math.sqrt(len(DEFAULT_CARDS))) for c in DEFAULT_CARDS]
    codes = np.empty((n_rows, len(DEFAULT_CARDS)), dtype=np.int64)
    for j, c in enumerate(DEFAULT_CARDS):
        p = 1.0 / np.arange(1, c + 1, dtype=np.float64) ** 1.1
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        codes[:, j] = np.minimum(np.searchsorted(cdf, rng.random(n_rows), side="right"), c - 1)
    numeric = rng.standard_normal((n_rows, DEFAULT_NUMERIC))
    logit = numeric @ np.array([0.8, -0.5, 0.3, 0.0]) - 0.4
    for j in range(len(DEFAULT_CARDS)):
        logit += teacher[j][codes[:, j]]
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    return codes, numeric, y


def load_default(n_rows=200_000, seed=0, hash_bits=18, hash_seed=0):
    codes, numeric, y = make_clicklog(n_rows, seed)
    names = ["c%d" % j for j in range(codes.shape[1])]
    contract = make_contract(names, hash_bits, hash_seed)
    Xs = hashed_csr([codes[:, j] for j in range(codes.shape[1])], contract)
    meta = {"source": "default", "default_rows": n_rows, "default_seed": seed, "task": "binary",
            "classes": ["0", "1"], "hashing": contract,
            "numeric": ["n%d" % j for j in range(numeric.shape[1])], "label": "click"}
    return Dataset(Xs, np.ascontiguousarray(numeric), y, meta)


# ---------------------------------------------------------------- files
def _split_names(s):
    return [c.strip() for c in s.split(",") if c.strip()] if s else []


def load_csv(path, label, categorical=(), numeric=(), hash_bits=18, hash_seed=0, task="auto",
             classes=None, require_label=True):
    """A CSV file with a header row. Categorical columns are hashed; numeric ones go in as dense
    features; an empty categorical cell is its own token, an empty numeric cell is an error."""
    categorical, numeric = list(categorical), list(numeric)
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise MpinnError("cannot read %s: %s" % (path, e.strerror))
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise MpinnError("%s is empty (no header row)" % path)
        except (csv.Error, UnicodeDecodeError) as e:
            raise MpinnError("%s line 1: %s" % (path, e))
        header = [h.strip() for h in header]
        col = {h: i for i, h in enumerate(header)}
        if not categorical and not numeric:     # default: every other column, numeric if it parses
            categorical = [h for h in header if h != label]
        for name in categorical + numeric + ([label] if require_label else []):
            if name not in col:
                raise MpinnError("%s has no column %r (columns: %s)" % (path, name, ", ".join(header)))
        has_label = label in col
        want = [col[c] for c in categorical], [col[c] for c in numeric]
        cats = [[] for _ in categorical]
        nums = []
        labels = []
        try:
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise MpinnError("%s line %d: %d fields, the header has %d"
                                     % (path, line, len(row), len(header)))
                for lst, i in zip(cats, want[0]):
                    lst.append(row[i])
                try:
                    nums.append([float(row[i]) for i in want[1]])
                except ValueError:
                    bad = next(numeric[k] for k, i in enumerate(want[1]) if not _is_float(row[i]))
                    raise MpinnError("%s line %d: column %r is not a number: %r"
                                     % (path, line, bad, row[col[bad]]))
                if has_label:
                    labels.append(row[col[label]].strip())
        except (csv.Error, UnicodeDecodeError) as e:
            raise MpinnError("%s line %d: %s" % (path, reader.line_num, e))
    if not labels and not any(cats) and not nums:
        raise MpinnError("%s has a header but no rows" % path)
    n = len(nums)
    contract = make_contract(categorical, hash_bits, hash_seed)
    Xs = hashed_csr([np.array(c, dtype=object) for c in cats], contract) if categorical else None
    Xd = np.array(nums, dtype=np.float64).reshape(n, len(numeric)) if numeric else None
    if Xd is not None and not np.all(np.isfinite(Xd)):
        raise MpinnError("%s: numeric columns hold inf or nan" % path)
    meta = {"source": "csv", "label": label, "categorical": categorical, "numeric": numeric,
            "hashing": contract if categorical else None}
    if has_label:
        y, task, classes = encode_labels(np.array(labels, dtype=object), task, classes)
    else:
        y = np.zeros(n)
    meta.update(task=task, classes=classes, has_label=has_label)
    return Dataset(Xs, Xd, y, meta)


def _is_float(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def _dense_xy(X, y, path, task, classes, require_label):
    # loadmat returns Fortran-ordered arrays: convert once, here, where they enter
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    if X.ndim != 2:
        raise MpinnError("%s: X must be 2-D, got shape %s" % (path, X.shape))
    if not np.all(np.isfinite(X)):
        raise MpinnError("%s: X holds inf or nan" % path)
    meta = {"source": os.path.splitext(path)[1].lstrip("."), "n_features": X.shape[1]}
    if y is None:
        if require_label:
            raise MpinnError("%s has no y array" % path)
        meta.update(task=task, classes=classes, has_label=False)
        return Dataset(None, X, np.zeros(X.shape[0]), meta)
    y = np.ascontiguousarray(np.asarray(y)).ravel()
    if y.shape[0] != X.shape[0]:
        raise MpinnError("%s: X has %d rows but y has %d" % (path, X.shape[0], y.shape[0]))
    y, task, classes = encode_labels(y, task, classes)
    meta.update(task=task, classes=classes, has_label=True)
    return Dataset(None, X, y, meta)


def load_npz(path, task="auto", classes=None, require_label=True):
    try:
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z:
                raise MpinnError("%s has no X array (found: %s)" % (path, ", ".join(z.files)))
            X, y = z["X"], (z["y"] if "y" in z else None)
    except ValueError as e:
        raise MpinnError("%s: cannot load without pickle (%s)" % (path, e))
    except (OSError, EOFError) as e:
        raise MpinnError("cannot read %s: %s" % (path, e))
    return _dense_xy(X, y, path, task, classes, require_label)


def load_mat(path, task="auto", classes=None, require_label=True):
    """Andrew Ng's exercise format: X (m, n) and y (m, 1) with labels 1..10 (10 stands for digit 0)."""
    import scipy.io
    try:
        d = scipy.io.loadmat(path)
    except (OSError, ValueError, TypeError) as e:
        raise MpinnError("cannot read %s as a .mat file: %s" % (path, e))
    if "X" not in d:
        raise MpinnError("%s has no X matrix" % path)
    return _dense_xy(d["X"], d.get("y"), path, task, classes, require_label)


def load_data(path=None, label=None, categorical="", numeric="", hash_bits=18, hash_seed=0,
              task="auto", classes=None, default_rows=200_000, default_seed=0, require_label=True):
    """Dispatch on the file extension; no path means the embedded click log."""
    if path is None:
        return load_default(default_rows, default_seed, hash_bits, hash_seed)
    if not os.path.exists(path):
        raise MpinnError("data file %s does not exist" % path)
    ext = os.path.splitext(path)[1].lower()
    if ext in (".csv", ".txt"):
        if not label:
            raise MpinnError("a CSV needs --label COLUMN")
        return load_csv(path, label, _split_names(categorical), _split_names(numeric),
                        hash_bits, hash_seed, task, classes, require_label)
    if ext == ".npz":
        return load_npz(path, task, classes, require_label)
    if ext == ".mat":
        return load_mat(path, task, classes, require_label)
    raise MpinnError("%s: unknown data format %r (use .csv, .npz or .mat)" % (path, ext))


