"""A packed dataset's meta (task, classes, hashing contract, columns, numeric transform) checked as it is opened: its
checksum, written by prepare beside it, and what its rows' layout says of it; and, by `prepare --verify`, against
every row (the labels against the task and classes, each column id against its feature's columns)."""
import json

import numpy as np
import xxhash

from mpinn.core.errors import MpinnError
from mpinn.data.fit.transform import NumericTransform
from mpinn.hashing import contract_problem, per_feature_nnz

PREPARE_AGAIN = "prepare it again"
CHUNK = 1 << 20         # rows' labels or column ids read at a time by verify_rows


def meta_digest(meta):
    """The xxh64 of `meta` as JSON with sorted keys (the same for the meta written and the meta read back)."""
    text = json.dumps(json.loads(json.dumps(meta)), sort_keys=True, separators=(",", ":"))
    return xxhash.xxh64(text.encode("utf-8")).hexdigest()


def check_meta(path, meta, digest, n_rows, n_columns, n_dense, row_nnz):
    """One line when `meta` is not what prepare wrote (its checksum `digest`; None in a file written before
    checksums of the meta: not checked) or does not fit the rows' layout."""
    if digest is not None and meta_digest(meta) != digest:
        raise MpinnError("%s: its meta (task, classes, hashing contract, columns) is not what prepare wrote: it does "
                         "not match its checksum (an edited or damaged file); %s" % (path, PREPARE_AGAIN))
    try:
        why = meta_problem(meta, n_rows, n_columns, n_dense, row_nnz)
    except (KeyError, TypeError, ValueError, AttributeError, MpinnError) as e:      # a damaged meta holds anything
        why = "a damaged meta (%s: %s)" % (type(e).__name__, e)
    if why:
        raise MpinnError("%s: its meta does not fit its rows: %s; %s" % (path, why, PREPARE_AGAIN))


def meta_problem(meta, n_rows, n_columns, n_dense, row_nnz):
    """What in `meta` contradicts the rows' layout (n_rows rows of n_columns hashed and n_dense numeric inputs,
    row_nnz entries each or None), else None."""
    task, classes = meta.get("task"), meta.get("classes")
    if task in ("binary", "multiclass") and not (
            isinstance(classes, list) and len(set(map(str, classes))) == len(classes) >= 2
            and (task == "multiclass" or len(classes) == 2)):
        return "a %s task with classes %s" % (task, str(classes)[:60])
    contract = meta.get("hashing")
    if isinstance(contract, dict):     # (sparse columns without one are a sparse matrix's, written as they are)
        why = contract_problem(contract)
        if why:
            return why
        features = contract["features"]
        if meta.get("categorical") is not None and list(meta["categorical"]) != features:
            return "categorical columns %s, its hashing contract's %s" % (meta["categorical"], features)
        if row_nnz is not None and row_nnz != len(features) * per_feature_nnz(contract):
            return "%d entries a row, its hashing contract gives %d" % (row_nnz,
                                                                        len(features) * per_feature_nnz(contract))
    numeric = meta.get("numeric")
    if numeric is not None and len(numeric) != n_dense:
        return "%d numeric columns named, the rows hold %d" % (len(numeric), n_dense)
    if isinstance(meta.get("transform"), dict):
        columns = NumericTransform.from_dict(meta["transform"]).columns
        if len(columns) != n_dense or (numeric is not None and columns != list(numeric)):
            return "a numeric transform of %s, the numeric columns are %s" % (columns, numeric)
    stats = meta.get("numeric_stats")
    if isinstance(stats, dict) and stats.get("rows") not in (None, n_rows):
        return "numeric statistics of %s rows, the rows are %d" % (stats.get("rows"), n_rows)
    return None


def verify_rows(path, arrays, meta, row_nnz):
    """Every row's label against the task and classes, and every column id against its feature's columns (the
    rows feature by feature: row_nnz entries each) or the contract's; one line at the first that does not fit.
    arrays: the packed file's sections."""
    task, classes, contract = meta["task"], meta.get("classes"), meta.get("hashing")
    y = arrays["y"]
    for s in range(0, y.shape[0], CHUNK):
        v = np.asarray(y[s:s + CHUNK])
        if task == "multiclass":
            bad = (v < -1) | (v >= len(classes))        # -1: no label (a file kept for predict)
        elif task == "binary":
            bad = ~np.isnan(v) & (v != 0) & (v != 1)
        else:
            bad = np.isinf(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise MpinnError("%s: row %d has label id %s, which its %s task with classes %s does not have; %s" % (
                path, s + i + 1, v[i], task, str(classes)[:60], PREPARE_AGAIN))
    if "indices" not in arrays or not isinstance(contract, dict):
        return
    lo, hi = _bounds(contract, row_nnz)
    ind = arrays["indices"]
    step = CHUNK * (row_nnz or 1)
    for s in range(0, ind.shape[0], step):
        v = np.asarray(ind[s:s + step])
        bad = (v.reshape(-1, row_nnz) < lo) | (v.reshape(-1, row_nnz) >= hi) if lo is not None else \
            (v < 0) | (v >= contract["n_columns"])
        if bad.any():
            at = np.argwhere(bad)[0]
            row = s // row_nnz + int(at[0]) if lo is not None else _row_of(arrays, s + int(at[0]))
            feature = contract["features"][int(at[1]) // per_feature_nnz(contract)] if lo is not None else None
            raise MpinnError("%s: row %d has column id %d, outside the columns its hashing contract gives %s; %s" % (
                path, row + 1, int(v.reshape(bad.shape)[tuple(at)]),
                "feature %r" % feature if feature is not None else "its features", PREPARE_AGAIN))


def _bounds(contract, row_nnz):
    """(lo, hi) of each of a row's row_nnz entries (features in order, per_feature_nnz each), or (None, None) where
    the rows are not laid out so."""
    features, per = contract["features"], per_feature_nnz(contract)
    if row_nnz is None or row_nnz != len(features) * per or not features:
        return None, None
    if contract["mode"] == "trick":         # the features share the columns
        return np.zeros(row_nnz, np.int64), np.full(row_nnz, contract["n_columns"], np.int64)
    if contract["mode"] == "split":         # feature j's i-th entry: in its i-th block of buckets[j] columns
        width = np.repeat(np.asarray(contract["buckets"], np.int64), per)
        lo = np.repeat(np.asarray(contract["offsets"], np.int64), per) + np.tile(np.arange(per), len(features)) * width
        return lo, lo + width
    lo = np.asarray(contract["offsets"], np.int64)         # onehot: its values and one column for unseen ones
    return lo, lo + np.asarray([len(v) + 1 for v in contract["vocab"]], np.int64)


def _row_of(arrays, entry):
    return int(np.searchsorted(arrays["indptr"], entry, side="right")) - 1
