"""The hashing contract: the settings a model depends on; made, fitted from data, checked, described."""
import math

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.hashing.collisions import _collisions_of_digests, _report_row
from mpinn.hashing.columns import _digests, _trick_tokens, default_buckets, feature_seed
from mpinn.hashing.tokens import _map, _n_rows, _ordered, factorize

HASHING_VERSION = 2         # 1: trick only (mode, bits, seed, features); 2 adds split and onehot
MODES = ("split", "trick", "onehot")
MAX_COLUMNS = 2**31 - 1     # column ids are int32
MAX_BITS = 30               # trick: 2**bits columns
MAX_K = 16                  # split: slices of the 64-bit digest (at least 4 bits each)


# ---------------------------------------------------------------- contracts
def make_contract(features, bits=18, seed=0, mode="trick", k=4, buckets=None, vocab=None, prefix=True,
                  cardinality=None):
    """The hashing settings a model depends on (JSON-able); stored in the model file, checked at predict.

    trick:  one column per feature, xxh64("feature=value", seed) & (2**bits - 1), features share the space.
    split:  k columns per feature, one in each of k blocks of buckets[j] columns (split_slices);
            feature j's blocks start at offsets[j]; it hashes the value alone with feature_seeds[j].
    onehot: vocab[j] (sorted training tokens) gets columns offsets[j] + index; one more column for
            values not seen in training.
    The option rules (mpinn.settings) keep bad modes, bits and k from the command line: here they are
    API misuse (ValueError)."""
    features = [str(f) for f in features]
    if len(set(features)) != len(features):
        raise MpinnError("a categorical column is named twice: %s" % ", ".join(features))
    seed = int(seed)
    if mode not in MODES:
        raise ValueError("hash mode must be one of %s, not %r" % ("|".join(MODES), mode))
    c = {"mode": mode, "version": HASHING_VERSION, "seed": seed, "features": features}
    if mode == "trick":
        if not 1 <= int(bits) <= MAX_BITS:
            raise ValueError("trick mode's bits must be in 1..%d, not %s" % (MAX_BITS, bits))
        c.update(bits=int(bits), prefix=bool(prefix), n_columns=1 << int(bits))
        return c
    if mode == "split":
        if not 1 <= int(k) <= MAX_K:
            raise ValueError("split mode's k must be in 1..%d, not %s" % (MAX_K, k))
        k = int(k)
        buckets = [int(b) for b in buckets]
        for f, b in zip(features, buckets):
            if not 1 <= b <= max_buckets(k):
                # given counts are checked with the options; a default one (ceil(sqrt(distinct))) comes from the data
                raise MpinnError("feature %r: %d buckets a block; with k=%d a block holds 1..%d buckets (64/k bits of "
                                 "the digest)" % (f, b, k, max_buckets(k)))
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


def auto_bits(distinct):
    """--hash-bits auto (trick): room for 16 columns per distinct training value of all features together
    (about 3% of values then share a column), at least 2^10 and at most 2^18 columns. A small table trains
    fast with any optimizer; the cap is the hashing trick's usual 2^18."""
    return int(min(18, max(10, math.ceil(math.log2(max(16 * int(distinct), 1))))))


def max_buckets(k):
    """The most buckets a split block holds: a slice of 64 // k bits of the digest."""
    return 1 << (64 // int(k))


def parse_buckets(text):
    """Bucket counts (the --buckets option's text): 'N' (every feature) or 'feat=N,feat=N' (the others keep
    the default) -> N or {feat: N}; None for none. ValueError for text of another shape."""
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
        raise ValueError("bucket counts are N or feature=N,feature=N, not %r" % text)


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
                raise MpinnError("bucket counts are given for %s, which is not a categorical column (they are %s)"
                                 % (", ".join(unknown), ", ".join(self.features)))
        self.buckets = buckets
        self._probe = make_contract(self.features, 18 if bits is None else bits, seed, mode, k,
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
            bits = auto_bits(sum(card)) if self.bits is None else self.bits
            return make_contract(self.features, bits, self.seed, "trick", prefix=self.prefix, cardinality=card)
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


def contract_problem(c):
    """None when contract `c` (a model file's, a packed file's) is one make_contract gives for its own settings
    (its columns, offsets and seeds follow from its mode, bits, k, buckets or vocabulary), else what is wrong: an
    edited bits or bucket count would hash to columns the model or the rows do not have."""
    try:
        c = _normalized(c)
        if int(c.get("version", 1)) > HASHING_VERSION:
            return None         # check_contract names the version where the contract is used
        made = make_contract(c["features"], c.get("bits", 18), c["seed"], c["mode"], c.get("k", 4), c.get("buckets"),
                             c.get("vocab"), c.get("prefix", True))
    except (KeyError, TypeError, ValueError, AttributeError, MpinnError) as e:
        return "its hashing contract is not valid (%s: %s)" % (type(e).__name__, e)
    for key in ("n_columns", "offsets", "feature_seeds"):
        if c.get(key) != made.get(key):
            return "its hashing contract's %s (%s) is not what its settings give (%s)" % (
                key, _short(c.get(key)), _short(made.get(key)))
    return None


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
