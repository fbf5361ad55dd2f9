"""Values to tokens: each distinct value of a column once (factorize), and the column helpers."""
import importlib.util
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mpinn.core.errors import MpinnError

MISSING = ""                # the token of a missing value: empty string, None and NaN all become it
_ARROW_MIN_ROWS = 4096      # below this, converting a str column to arrow costs more than it saves
_HAS_ARROW = None


# ---------------------------------------------------------------- values to tokens, once per distinct value
def arrow_available():
    global _HAS_ARROW
    if _HAS_ARROW is None:
        _HAS_ARROW = importlib.util.find_spec("pyarrow") is not None
    return _HAS_ARROW


def _token(v):
    """The text a value is hashed as: str(v); None and NaN are missing."""
    if v is None:
        return MISSING
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, (float, np.floating)) and v != v:
        return MISSING
    return str(v)


def _dedupe(codes, tokens):
    """Distinct raw values can share a token (None and "", two NaN objects): merge them."""
    if len(set(tokens)) == len(tokens):
        return codes, tokens
    first = {}
    remap = np.array([first.setdefault(t, len(first)) for t in tokens], dtype=np.int32)
    return remap[codes], list(first)


def _is_arrow(column):
    return type(column).__module__.startswith("pyarrow")


def _factorize_arrow(column):
    import pyarrow as pa  # optional: pyarrow (the column is arrow's, so it is there)
    import pyarrow.compute as pc  # optional: pyarrow
    if isinstance(column, pa.ChunkedArray):
        if pa.types.is_dictionary(column.type) and column.num_chunks > 1:
            column = column.unify_dictionaries()
            dictionary = column.chunk(0).dictionary
            indices = pa.concat_arrays([c.indices for c in column.chunks])
            column = pa.DictionaryArray.from_arrays(indices, dictionary)
        else:
            column = column.combine_chunks()
    if not pa.types.is_dictionary(column.type):
        # dictionary_encode is a C++ hash table and releases the GIL: cheap, and parallel across columns
        column = column.dictionary_encode()
    indices, dictionary = column.indices, column.dictionary
    textual = (pa.types.is_string(dictionary.type) or pa.types.is_large_string(dictionary.type)) \
        and not dictionary.null_count
    # a dictionary of strings is distinct already and its values are their own tokens
    tokens = dictionary.to_pylist() if textual else [_token(v) for v in dictionary.to_pylist()]
    if indices.null_count:
        missing = tokens.index(MISSING) if MISSING in tokens else len(tokens)
        if missing == len(tokens):
            tokens.append(MISSING)
        indices = pc.fill_null(indices, missing)
    codes = indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return (codes, tokens) if textual else _dedupe(codes, tokens)


def _factorize_objects(column):
    n = len(column)
    if n >= _ARROW_MIN_ROWS and arrow_available():
        import pyarrow as pa  # optional: pyarrow (arrow_available said it is)
        try:    # all-str columns (what CSV readers give): arrow dictionary-encodes them faster than a dict
            return _factorize_arrow(pa.array(column, type=pa.dictionary(pa.int32(), pa.string())))
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            pass
    first = dict.fromkeys(column)               # distinct values in order of first appearance
    keys = list(first)
    first.update(zip(keys, range(len(keys))))
    codes = np.fromiter(map(first.__getitem__, column), dtype=np.int32, count=n)
    return _dedupe(codes, [_token(k) for k in keys])


def _factorize_ints(column):
    n = column.shape[0]
    if column.dtype.kind == "b":
        column = column.view(np.uint8)
        as_text = lambda u: str(bool(u))    # noqa: E731
    else:
        as_text = str
    lo, hi = (int(column.min()), int(column.max())) if n else (0, -1)
    span = hi - lo + 1
    if span <= max(1 << 16, 2 * n) and hi < 2**63:
        # codes in a small range (the usual case: ids): a presence table instead of a sort
        shifted = column.astype(np.int64) - lo if lo or column.dtype != np.int64 else column
        present = np.zeros(span, dtype=bool)
        present[shifted] = True
        uniques = np.flatnonzero(present)
        rank = np.cumsum(present, dtype=np.int32) - 1
        codes = rank[shifted]
        return codes, [as_text(int(u) + lo) for u in uniques.tolist()]
    uniques, inverse = np.unique(column, return_inverse=True)
    return inverse.ravel().astype(np.int32), [as_text(int(u)) for u in uniques.tolist()]


def factorize(column):
    """(codes, tokens): codes[i] is the index in `tokens` of row i's value; tokens are distinct.
    A column is a list, a numpy array or a pyarrow (dictionary) array."""
    if _is_arrow(column):
        return _factorize_arrow(column)
    if isinstance(column, np.ndarray):
        column = column.ravel()
        if column.dtype.kind in "iub":
            return _factorize_ints(column)
        if column.dtype.kind == "f":
            uniques, inverse = np.unique(column, return_inverse=True, equal_nan=True)
            return _dedupe(inverse.ravel().astype(np.int32), [_token(float(u)) for u in uniques.tolist()])
        if column.dtype.kind in "US":
            column = column.tolist()
    return _factorize_objects(column)


# ---------------------------------------------------------------- columns in feature order
def _ordered(columns, features):
    if isinstance(columns, dict):
        missing = [f for f in features if f not in columns]
        if missing:
            raise MpinnError("no column %r to hash" % missing[0])
        return [columns[f] for f in features]
    columns = list(columns)
    if len(columns) != len(features):
        raise ValueError("expected %d categorical columns, got %d" % (len(features), len(columns)))
    return columns


def _n_rows(columns):
    n = len(columns[0]) if columns else 0
    for c in columns:
        if len(c) != n:
            raise ValueError("categorical columns differ in length: %d and %d" % (n, len(c)))
    return n


def _map(fn, items, threads):
    items = list(items)
    if threads and threads > 1 and len(items) > 1:
        with ThreadPoolExecutor(min(threads, len(items))) as ex:
            return list(ex.map(fn, items))
    return [fn(i) for i in items]
