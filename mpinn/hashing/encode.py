"""Categorical columns to CSR input columns under a contract."""
import numpy as np
import scipy.sparse as sp

from mpinn.hashing.columns import feature_table
from mpinn.hashing.tokens import _map, _n_rows, _ordered, factorize


# ---------------------------------------------------------------- encoding
def per_feature_nnz(contract):
    return contract["k"] if contract["mode"] == "split" else 1


def encode_indices(columns, contract, threads=1):
    """(n, F * per) int32 input columns of every row, feature by feature (per = k for split, else 1).
    Each distinct value of a column is hashed once; rows are mapped through its codes."""
    features = contract["features"]
    columns = _ordered(columns, features)
    n, F, per = _n_rows(columns), len(features), per_feature_nnz(contract)
    # a split value's k columns move as one opaque 4k-byte item: np.take on rows is slower
    item = np.dtype((np.void, 4 * per)) if per > 1 else np.dtype(np.int32)

    def codes_and_table(j):
        codes, tokens = factorize(columns[j])
        table = np.ascontiguousarray(feature_table(contract, j, tokens).reshape(len(tokens), per))
        return codes, table.view(item).reshape(len(tokens))
    coded = _map(codes_and_table, range(F), threads)
    out = np.empty((n, F * per), dtype=np.int32)
    rows_of = out.view(item).reshape(n, F)
    # rows are filled a block at a time: each feature's items go to a small buffer that one transposing
    # copy interleaves (scattering straight into the row-major output is ~3x slower: strided writes)
    block = max(4096, (8 << 20) // (F * item.itemsize))

    def fill(span):
        buf = np.empty((F, block), dtype=item)
        for s in range(span[0], span[1], block):
            m = min(block, span[1] - s)
            for j, (codes, table) in enumerate(coded):
                np.take(table, codes[s:s + m], out=buf[j, :m])
            rows_of[s:s + m] = buf[:, :m].T
    pieces = max(1, min(threads or 1, -(-n // block)))
    edges = np.linspace(0, n, pieces + 1).astype(np.int64) // block * block
    edges[-1] = n
    _map(fill, [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a], pieces)
    return out


def csr_from_indices(idx, n_columns, dtype=np.float32):
    """CSR (n, n_columns) with one 1.0 per entry of idx (n, m); duplicates in a row are kept (summed)."""
    n, m = idx.shape
    return sp.csr_matrix((np.ones(n * m, dtype=dtype), idx.reshape(-1),
                          np.arange(0, n * m + 1, m, dtype=np.int64)), shape=(n, n_columns))


def encode(columns, contract, dtype=np.float32, threads=1):
    """CSR (n_rows, contract['n_columns']): every row has per_feature_nnz entries of 1.0 per feature,
    in feature order. Two values of a row that land in one column are kept as two entries (summed)."""
    return csr_from_indices(encode_indices(columns, contract, threads), contract["n_columns"], dtype)


def hashed_csr(columns, contract, dtype=np.float32):
    """The name the first version had for encode."""
    return encode(columns, contract, dtype)
