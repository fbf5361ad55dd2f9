"""Categorical columns to CSR input columns: k-way split xxh64, the hashing trick or exact one-hot; the contract."""
import importlib.util
import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
import xxhash

from mpinn.config import MpinnError

HASHING_VERSION = 2         # 1: trick only (mode, bits, seed, features); 2 adds split and onehot
MODES = ("split", "trick", "onehot")
MISSING = ""                # the token of a missing value: empty string, None and NaN all become it
MAX_COLUMNS = 2**31 - 1     # column ids are int32
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
    import pyarrow as pa
    import pyarrow.compute as pc
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
        import pyarrow as pa
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


# ---------------------------------------------------------------- per-feature seeds, buckets, digests
def feature_seed(seed, feature):
    """Split and onehot features each hash with their own seed: xxh64(utf-8 name, seed=seed)."""
    return xxhash.xxh64_intdigest(str(feature).encode("utf-8"), int(seed) & (2**64 - 1))


def default_buckets(cardinality):
    """The seed's rule of thumb: ceil(sqrt(distinct values)) buckets per split block."""
    return max(1, math.ceil(math.sqrt(max(int(cardinality), 1))))


def token_columns(feature, values, bits, seed):
    """Trick-mode column of each value: xxh64("feature=value", seed) & (2**bits - 1)."""
    mask = (1 << bits) - 1
    h = xxhash.xxh64_intdigest
    prefix = "%s=" % feature
    return np.fromiter((h((prefix + _token(v)).encode("utf-8"), seed) & mask for v in values),
                       dtype=np.int64, count=len(values))


def _digests(tokens, seed):
    """xxh64 of each token's UTF-8 bytes (map over a C function: no Python frame per token)."""
    data = list(map(str.encode, tokens))
    return np.fromiter(map(xxhash.xxh64_intdigest, data, itertools.repeat(seed, len(data))),
                       dtype=np.uint64, count=len(data))


def _trick_tokens(contract, j, tokens):
    if contract.get("prefix", True):
        prefix = "%s=" % contract["features"][j]
        return [prefix + t for t in tokens]
    return tokens


def split_slices(digests, k, buckets):
    """(D, k) bucket of each digest in each block: slice j is bits [j*w, (j+1)*w) of the digest,
    w = 64 // k, taken modulo the bucket count."""
    w = 64 // k
    mask = np.uint64((1 << w) - 1)
    out = np.empty((len(digests), k), dtype=np.int64)
    for j in range(k):
        out[:, j] = ((digests >> np.uint64(w * j)) & mask) % np.uint64(buckets)
    return out


def feature_table(contract, j, tokens):
    """Input columns of each token of feature j: (U,) for trick and onehot, (U, k) for split."""
    mode = contract["mode"]
    if mode == "trick":
        mask = (1 << contract["bits"]) - 1
        d = _digests(_trick_tokens(contract, j, tokens), contract["seed"])
        return (d & np.uint64(mask)).astype(np.int32)
    off = contract["offsets"][j]
    if mode == "split":
        k, b = contract["k"], contract["buckets"][j]
        slices = split_slices(_digests(tokens, contract["feature_seeds"][j]), k, b)
        return (slices + (off + b * np.arange(k))).astype(np.int32)
    vocab = contract["vocab"][j]
    index = _vocab_index(contract, j)
    unseen = len(vocab)
    return np.fromiter((off + index.get(t, unseen) for t in tokens), dtype=np.int32, count=len(tokens))


_VOCAB_INDEX = []     # (vocabulary list, {token: index}) of recently used onehot features


def _vocab_index(contract, j):
    """{token: index} of feature j's vocabulary, built once and reused for every chunk."""
    vocab = contract["vocab"][j]
    for v, index in _VOCAB_INDEX:
        if v is vocab:
            return index
    index = {t: i for i, t in enumerate(vocab)}
    _VOCAB_INDEX.insert(0, (vocab, index))
    del _VOCAB_INDEX[64:]
    return index


# ---------------------------------------------------------------- contracts
def make_contract(features, bits=18, seed=0, mode="trick", k=4, buckets=None, vocab=None, prefix=True,
                  cardinality=None):
    """The hashing settings a model depends on (JSON-able); stored in the model file, checked at predict.

    trick:  one column per feature, xxh64("feature=value", seed) & (2**bits - 1), features share the space.
    split:  k columns per feature, one in each of k blocks of buckets[j] columns (split_slices);
            feature j's blocks start at offsets[j]; it hashes the value alone with feature_seeds[j].
    onehot: vocab[j] (sorted training tokens) gets columns offsets[j] + index; one more column for
            values not seen in training."""
    features = [str(f) for f in features]
    if len(set(features)) != len(features):
        raise MpinnError("a categorical column is named twice: %s" % ", ".join(features))
    seed = int(seed)
    if mode not in MODES:
        raise MpinnError("--hash-mode must be one of %s, not %r" % ("|".join(MODES), mode))
    c = {"mode": mode, "version": HASHING_VERSION, "seed": seed, "features": features}
    if mode == "trick":
        if not 1 <= int(bits) <= 30:
            raise MpinnError("--hash-bits must be in 1..30, not %s" % bits)
        c.update(bits=int(bits), prefix=bool(prefix), n_columns=1 << int(bits))
        return c
    if mode == "split":
        if not 1 <= int(k) <= 16:
            raise MpinnError("--hash-k must be in 1..16, not %s" % k)
        k = int(k)
        buckets = [int(b) for b in buckets]
        for f, b in zip(features, buckets):
            if not 1 <= b <= 1 << (64 // k):
                raise MpinnError("--buckets %s=%d: with --hash-k %d a block holds 1..%d buckets (64/k bits of "
                                 "the digest)" % (f, b, k, 1 << (64 // k)))
        widths = [k * b for b in buckets]
        c.update(feature_seeds=[feature_seed(seed, f) for f in features], k=k, buckets=buckets)
    else:
        vocab = [sorted(set(v)) for v in vocab]
        widths = [len(v) + 1 for v in vocab]
        c["vocab"] = vocab
    c["offsets"] = [int(x) for x in np.concatenate([[0], np.cumsum(widths, dtype=np.int64)[:-1]])] \
        if widths else []
    c["n_columns"] = int(sum(widths))
    if c["n_columns"] > MAX_COLUMNS:
        raise MpinnError("%d input columns: at most 2**31 - 1 fit int32 column ids" % c["n_columns"])
    if cardinality is not None:
        c["cardinality"] = [int(x) for x in cardinality]    # informative only: never compared
    return c


def parse_buckets(text):
    """--buckets: 'N' (every feature) or 'feat=N,feat=N' (the others keep the default)."""
    if text is None or isinstance(text, (int, dict)):
        return text
    text = str(text).strip()
    if not text:
        return None
    try:
        if "=" not in text:
            return int(text)
        out = {}
        for part in text.split(","):
            if part.strip():
                name, n = part.rsplit("=", 1)
                out[name.strip()] = int(n)
        return out
    except ValueError:
        raise MpinnError("--buckets wants N or feature=N,feature=N, not %r" % text)


def _merge_sorted(parts, acc):
    return np.unique(np.concatenate([acc] + parts)) if parts else acc


class ContractFitter:
    """Learns what a contract needs from training data seen chunk by chunk: the distinct values of
    each feature (as 64-bit digests for split and trick, as tokens for onehot)."""

    def __init__(self, features, mode="trick", k=4, bits=18, seed=0, buckets=None, prefix=True):
        self.features = [str(f) for f in features]
        self.mode, self.k, self.bits, self.seed, self.prefix = mode, k, bits, int(seed), prefix
        if isinstance(buckets, dict):
            unknown = sorted(set(buckets) - set(self.features))
            if unknown:
                raise MpinnError("--buckets names %s, which is not a categorical column" % ", ".join(unknown))
        self.buckets = buckets
        self._probe = make_contract(self.features, bits, seed, mode, k,
                                    buckets=[1] * len(self.features), vocab=[[]] * len(self.features),
                                    prefix=prefix)
        self._acc = [np.zeros(0, np.uint64) for _ in self.features]
        self._parts = [[] for _ in self.features]
        self._vocab = [set() for _ in self.features]
        self.rows = 0

    def update(self, columns, threads=1):
        columns = _ordered(columns, self.features)
        self.rows += _n_rows(columns)

        def one(j):
            _, tokens = factorize(columns[j])
            if self.mode == "onehot":
                self._vocab[j].update(tokens)
                return
            if self.mode == "trick":
                d = _digests(_trick_tokens(self._probe, j, tokens), self.seed)
            else:
                d = _digests(tokens, self._probe["feature_seeds"][j])
            # unique digests pile up and are merged once they outnumber the merged set: an amortised
            # sort, and memory within a small factor of the distinct values
            parts = self._parts[j]
            parts.append(np.unique(d))
            if sum(len(p) for p in parts) > max(len(self._acc[j]), 1 << 16):
                self._acc[j], self._parts[j] = _merge_sorted(parts, self._acc[j]), []
        _map(one, range(len(self.features)), threads)
        return self

    def _distinct(self, j):
        if self.mode == "onehot":
            return len(self._vocab[j])
        self._acc[j], self._parts[j] = _merge_sorted(self._parts[j], self._acc[j]), []
        return len(self._acc[j])

    def cardinality(self):
        return [self._distinct(j) for j in range(len(self.features))]

    def contract(self):
        card = self.cardinality()
        if self.mode == "trick":
            return make_contract(self.features, self.bits, self.seed, "trick", prefix=self.prefix, cardinality=card)
        if self.mode == "onehot":
            return make_contract(self.features, seed=self.seed, mode="onehot", vocab=self._vocab, cardinality=card)
        b = self.buckets
        buckets = [(b if isinstance(b, int) else (b or {}).get(f)) or default_buckets(c)
                   for f, c in zip(self.features, card)]
        return make_contract(self.features, seed=self.seed, mode="split", k=self.k, buckets=buckets,
                             cardinality=card)

    def report(self, contract):
        """The collision report of the training values under `contract` (see collision_report)."""
        out = []
        for j, f in enumerate(self.features):
            if contract["mode"] == "onehot":
                out.append(_report_row(f, len(self._vocab[j]), 0, 0.0, len(contract["vocab"][j]) + 1, 1))
                continue
            self._distinct(j)
            out.append(_collisions_of_digests(contract, j, self._acc[j]))
        return out


def fit_contract(features, columns, mode="trick", k=4, bits=18, seed=0, buckets=None, prefix=True, threads=1):
    """The contract for training columns (in feature order, or a dict name -> column): cardinalities
    give split's default bucket counts, vocabularies give onehot's columns."""
    if mode == "trick":
        return make_contract(features, bits, seed, "trick", prefix=prefix)
    return ContractFitter(features, mode, k, bits, seed, buckets, prefix).update(columns, threads).contract()


def _normalized(c):
    c = dict(c)
    if c.get("mode", "trick") == "trick":
        c.setdefault("prefix", True)
        if "bits" in c:
            c.setdefault("n_columns", 1 << int(c["bits"]))
    return c


def check_contract(stored, wanted):
    """Raise MpinnError naming the first field where two hashing contracts differ (the model's
    `stored` one and the one the data was read with)."""
    stored, wanted = _normalized(stored), _normalized(wanted)
    for key in ("version",):
        for who, c in (("model", stored), ("data", wanted)):
            if int(c.get(key, 1)) > HASHING_VERSION:
                raise MpinnError("hashing contract of the %s has version %s; this mpinn reads up to %d"
                                 % (who, c.get(key), HASHING_VERSION))
    keys = ["mode", "seed", "features"]
    keys += {"trick": ["bits", "prefix"], "split": ["k", "buckets", "feature_seeds"]}.get(stored.get("mode"), [])
    keys += ["n_columns"]
    for key in keys:
        if stored.get(key) != wanted.get(key):
            raise MpinnError("hashing contract mismatch in %r: model has %s, data has %s"
                             % (key, _short(stored.get(key)), _short(wanted.get(key))))
    if stored.get("mode") == "onehot":
        for f, a, b in zip(stored["features"], stored["vocab"], wanted.get("vocab") or []):
            if a != b:
                raise MpinnError("hashing contract mismatch in 'vocab' of feature %r: model has %d values, "
                                 "data has %d" % (f, len(a), len(b)))


def _short(v):
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def describe(contract):
    """One line for the CLIs."""
    if contract is None:
        return "no categorical columns"
    mode, nf = contract["mode"], len(contract["features"])
    if mode == "trick":
        return "trick: %d features -> 2^%d columns" % (nf, contract["bits"])
    if mode == "split":
        b = contract["buckets"]
        return "split k=%d: %d features, %s buckets per block -> %d columns" % (
            contract["k"], nf, ("%d..%d" % (min(b), max(b))) if b else "0", contract["n_columns"])
    return "onehot: %d features -> %d columns (with one unseen column each)" % (nf, contract["n_columns"])


# ---------------------------------------------------------------- encoding
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


# ---------------------------------------------------------------- collisions
def expected_colliding(distinct, cells):
    """Values expected to share their whole code with at least one other value when `distinct` values
    fall uniformly into `cells` codes (the birthday bound): D * (1 - (1 - 1/M)**(D - 1)), ~ D^2/M."""
    d, m = float(distinct), float(cells)
    if d < 2 or m <= 0:
        return 0.0
    return d * -math.expm1((d - 1) * math.log1p(-1.0 / m)) if m > 1 else d


def _report_row(feature, distinct, colliding, expected, buckets, k):
    return {"feature": feature, "distinct": int(distinct), "colliding": int(colliding),
            "expected": round(float(expected), 3), "buckets": int(buckets), "k": int(k)}


def _colliding_rows(codes2d):
    """How many rows of codes2d equal another row."""
    if len(codes2d) < 2:
        return 0
    _, counts = np.unique(codes2d, axis=0, return_counts=True)
    return int(counts[counts > 1].sum())


def _collisions_of_digests(contract, j, digests):
    f = contract["features"][j]
    if contract["mode"] == "trick":
        codes = (digests & np.uint64((1 << contract["bits"]) - 1)).reshape(-1, 1)
        cells, b, k = float(1 << contract["bits"]), 1 << contract["bits"], 1
    else:
        k, b = contract["k"], contract["buckets"][j]
        codes = split_slices(digests, k, b)
        cells = float(b) ** k
    return _report_row(f, len(digests), _colliding_rows(codes), expected_colliding(len(digests), cells), b, k)


def collision_report(columns, contract):
    """Per feature: distinct values, how many of them share ALL their columns with another value of the
    same feature (k of k for split, the one column for trick; 0 for onehot), and the number expected
    under the birthday bound for uniform hashing (expected_colliding with M = buckets**k, or 2**bits)."""
    out = []
    for j, col in enumerate(_ordered(columns, contract["features"])):
        _, tokens = factorize(col)
        f = contract["features"][j]
        if contract["mode"] == "onehot":
            out.append(_report_row(f, len(tokens), 0, 0.0, len(contract["vocab"][j]) + 1, 1))
            continue
        seed = contract["seed"] if contract["mode"] == "trick" else contract["feature_seeds"][j]
        toks = _trick_tokens(contract, j, tokens) if contract["mode"] == "trick" else tokens
        out.append(_collisions_of_digests(contract, j, _digests(toks, seed)))
    return out


def format_report(rows):
    lines = ["%-16s %10s %10s %10s %8s" % ("feature", "distinct", "colliding", "expected", "buckets")]
    for r in rows:
        lines.append("%-16s %10d %10d %10.1f %8s" % (r["feature"][:16], r["distinct"], r["colliding"],
                                                      r["expected"], "%dx%d" % (r["k"], r["buckets"])
                                                      if r["k"] > 1 else r["buckets"]))
    return "\n".join(lines)
