"""Tokens to input columns: per-feature seeds, xxh64 digests, split slices, onehot vocabularies."""
import itertools
import math

import numpy as np
import xxhash

from mpinn.hashing.tokens import _token


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
