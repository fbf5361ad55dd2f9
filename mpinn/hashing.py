"""Categorical features to hashed CSR columns (xxh64 of each distinct value, the hashing trick)."""
import numpy as np
import scipy.sparse as sp
import xxhash

HASHING_VERSION = 1


def make_contract(features, bits=18, seed=0):
    """The hashing settings a model depends on; stored in the model file, checked at predict time."""
    if not 1 <= int(bits) <= 30:
        from mpinn.config import MpinnError
        raise MpinnError("--hash-bits must be in 1..30, not %s" % bits)
    return {"mode": "trick", "bits": int(bits), "seed": int(seed),
            "features": [str(f) for f in features], "version": HASHING_VERSION}


def token_columns(feature, values, bits, seed):
    """Column of each value: xxh64("feature=value", seed) & (2**bits - 1)."""
    mask = (1 << bits) - 1
    h = xxhash.xxh64_intdigest
    prefix = "%s=" % feature
    return np.fromiter((h((prefix + str(v)).encode("utf-8"), seed) & mask for v in values),
                       dtype=np.int64, count=len(values))


def hash_column(feature, column, bits, seed):
    """Hash the DISTINCT values of one column once, then map every row through the codes.
    Integer codes and their text hash alike (the token is str(value))."""
    column = np.asarray(column)
    uniques, inverse = np.unique(column, return_inverse=True)
    return token_columns(feature, uniques, bits, seed)[inverse.ravel()]


def hashed_csr(columns, contract, dtype=np.float32):
    """CSR (n_rows, 2**bits): row i has one entry of 1.0 per feature, in feature order.
    Two features of a row that land in the same column are kept as two entries (summed)."""
    bits, seed = contract["bits"], contract["seed"]
    features = contract["features"]
    if len(columns) != len(features):
        raise ValueError("expected %d categorical columns, got %d" % (len(features), len(columns)))
    n = len(columns[0]) if columns else 0
    f = len(features)
    idx = np.empty((n, f), dtype=np.int32)
    for j, (name, col) in enumerate(zip(features, columns)):
        idx[:, j] = hash_column(name, col, bits, seed)
    return sp.csr_matrix((np.ones(n * f, dtype=dtype), idx.ravel(),
                          np.arange(0, n * f + 1, f, dtype=np.int64)), shape=(n, 1 << bits))


def check_contract(stored, wanted):
    """Raise MpinnError naming the first field where two hashing contracts differ."""
    from mpinn.config import MpinnError
    for key in ("mode", "bits", "seed", "features", "version"):
        if stored.get(key) != wanted.get(key):
            raise MpinnError("hashing contract mismatch in %r: model has %r, data has %r"
                             % (key, stored.get(key), wanted.get(key)))
