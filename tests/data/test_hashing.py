"""Hashing: fixed digests across processes, split/trick/onehot layouts, the contract, collision reports."""
import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
import xxhash

from mpinn.core.errors import MpinnError
from mpinn.hashing import (ContractFitter, check_contract, collision_report, encode, expected_colliding, feature_seed,
                           fit_contract, hashed_csr, make_contract, parse_buckets, split_slices, token_columns)


def test_columns_are_xxh64_of_feature_equals_value():
    # fixed expected values: a change of token format or seed handling breaks every saved model
    assert xxhash.xxh64_intdigest(b"c3=1234", seed=0) & (2**18 - 1) == token_columns("c3", [1234], 18, 0)[0]
    assert token_columns("c3", ["1234"], 18, 0)[0] == token_columns("c3", [1234], 18, 0)[0]
    assert token_columns("c3", ["x"], 18, 1)[0] != token_columns("c3", ["x"], 18, 0)[0]


@pytest.mark.launch
def test_same_columns_in_another_process():
    code = ("from mpinn.hashing import token_columns; "
            "print(list(token_columns('city', ['paris', 'oslo', ''], 20, 42)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == str(list(token_columns("city", ["paris", "oslo", ""], 20, 42)))


def test_hashed_csr_shape_order_and_duplicates():
    c = make_contract(["a", "b"], bits=4, seed=0)
    cols = [np.array(["x", "y", "x"], dtype=object), np.array(["x", "x", "z"], dtype=object)]
    X = hashed_csr(cols, c)
    assert X.shape == (3, 16) and X.nnz == 6
    assert list(X.indptr) == [0, 2, 4, 6]
    assert X.indices[0] == token_columns("a", ["x"], 4, 0)[0]       # feature order kept
    assert X.indices[1] == token_columns("b", ["x"], 4, 0)[0]
    assert X[0].sum() == 2.0


def test_contract_mismatch_is_refused():
    a = make_contract(["a", "b"], 18, 0)
    check_contract(a, make_contract(["a", "b"], 18, 0))
    with pytest.raises(MpinnError, match="'bits'"):
        check_contract(a, make_contract(["a", "b"], 16, 0))
    with pytest.raises(MpinnError, match="'features'"):
        check_contract(a, make_contract(["b", "a"], 18, 0))


# ---------------------------------------------------------------- split, onehot, contracts, collisions
@pytest.mark.launch
def test_split_columns_are_fixed_across_processes():
    # fixed expected values: the per-feature seed, the digest slices and the block layout are all
    # part of every saved split model
    c = make_contract(["city", "device"], seed=7, mode="split", k=4, buckets=[5, 3])
    assert c["feature_seeds"][0] == feature_seed(7, "city") == xxhash.xxh64_intdigest(b"city", 7)
    assert c["offsets"] == [0, 20] and c["n_columns"] == 32
    expected = [[3, 7, 14, 17, 21, 25, 28, 31], [4, 5, 14, 15, 20, 25, 27, 29], [3, 8, 13, 15, 20, 25, 26, 30]]
    cols = [["paris", "oslo", ""], ["ios", None, "android"]]
    assert encode(cols, c).indices.reshape(3, -1).tolist() == expected
    code = ("from mpinn.hashing import make_contract, encode; "
            "c = make_contract(['city', 'device'], seed=7, mode='split', k=4, buckets=[5, 3]); "
            "print(encode([['paris', 'oslo', ''], ['ios', None, 'android']], c).indices.reshape(3, -1).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == str(expected)


def test_split_slices_are_digest_bits_mod_buckets():
    d = np.array([xxhash.xxh64_intdigest(b"paris", feature_seed(7, "city"))], dtype=np.uint64)
    v = int(d[0])
    assert split_slices(d, 4, 5).tolist() == [[((v >> (16 * j)) & 0xFFFF) % 5 for j in range(4)]]
    assert split_slices(d, 2, 1000).tolist() == [[(v & 0xFFFFFFFF) % 1000, (v >> 32) % 1000]]


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_split_turns_on_k_columns_one_per_block(k):
    rng = np.random.default_rng(k)
    cols = [rng.integers(0, 50, 300), rng.choice(["a", "b", "c", ""], 300), rng.integers(0, 5000, 300)]
    c = fit_contract(["x", "y", "z"], cols, mode="split", k=k, buckets={"y": 2})
    X = encode(cols, c)
    assert X.shape == (300, c["n_columns"]) and X.indices.dtype == np.int32
    idx = X.indices.reshape(300, 3, k)
    for j, (off, b) in enumerate(zip(c["offsets"], c["buckets"])):
        block = (idx[:, j, :] - off) // b                   # which block each entry lies in
        assert (block == np.arange(k)).all()                # entry i of feature j in block i
    assert c["offsets"][1:] == list(np.cumsum([k * b for b in c["buckets"]])[:-1])


def test_bucket_count_defaults_to_sqrt_of_cardinality_and_can_be_overridden():
    cols = [np.arange(1000) % 97, np.arange(1000) % 10, np.arange(1000)]
    c = fit_contract(["a", "b", "c"], cols, mode="split")
    assert c["buckets"] == [math.ceil(math.sqrt(97)), math.ceil(math.sqrt(10)), math.ceil(math.sqrt(1000))]
    assert c["cardinality"] == [97, 10, 1000]
    c = fit_contract(["a", "b", "c"], cols, mode="split", buckets=parse_buckets("b=7,c=100"))
    assert c["buckets"] == [10, 7, 100]
    assert fit_contract(["a", "b", "c"], cols, mode="split", buckets=parse_buckets("9"))["buckets"] == [9, 9, 9]
    with pytest.raises(MpinnError, match="not a categorical column"):
        fit_contract(["a", "b", "c"], cols, mode="split", buckets={"nope": 3})
    with pytest.raises(MpinnError, match="1..65536"):
        make_contract(["a"], mode="split", k=4, buckets=[70000])
    with pytest.raises(ValueError, match="bucket counts are N or feature=N"):
        parse_buckets("a=x")        # the option's type refuses it on the command line (mpinn.settings.hashing)


def test_missing_values_share_one_token_in_every_mode():
    cols = [np.array(["", None, float("nan"), "x"], dtype=object)]
    for mode in ("trick", "split", "onehot"):
        c = fit_contract(["f"], cols, mode=mode)
        rows = encode(cols, c).indices.reshape(4, -1)
        assert (rows[0] == rows[1]).all() and (rows[0] == rows[2]).all() and (rows[0] != rows[3]).any(), mode
    # trick mode hashes a missing value as the empty string, as the first version did
    assert encode(cols, make_contract(["f"], 18)).indices[1] == token_columns("f", [""], 18, 0)[0]


def test_onehot_is_exact_and_unseen_values_get_their_own_column():
    train = [np.array(["b", "a", "c", "a", ""], dtype=object), np.array([3, 1, 3, 2, 1])]
    c = fit_contract(["s", "n"], train, mode="onehot")
    assert c["vocab"] == [["", "a", "b", "c"], ["1", "2", "3"]]
    assert c["offsets"] == [0, 5] and c["n_columns"] == 9          # each feature: vocabulary + 1 unseen
    assert encode(train, c).indices.reshape(5, 2).tolist() == [[2, 7], [1, 5], [3, 7], [1, 6], [0, 5]]
    new = [np.array(["zz", "a", None], dtype=object), np.array([99, 2, 3])]
    assert encode(new, c).indices.reshape(3, 2).tolist() == [[4, 8], [1, 6], [0, 7]]


def test_unseen_values_still_hash_at_predict_time():
    c = fit_contract(["f"], [np.array(["a", "b"], dtype=object)], mode="split", buckets=50)
    X = encode([np.array(["never seen", "a"], dtype=object)], c)
    assert X.nnz == 8 and not np.array_equal(X.indices[:4], X.indices[4:])


def test_every_column_layout_gives_the_same_columns():
    pa = pytest.importorskip("pyarrow")
    values = ["x%d" % (i % 37) for i in range(5000)] + [None, ""]
    c = fit_contract(["f"], [values], mode="split")
    ref = encode([values], c).indices
    layouts = [np.array(values, dtype=object), pa.array(values), pa.array(values).dictionary_encode(),
               pa.chunked_array([pa.array(values[:100]).dictionary_encode(), pa.array(values[100:]).dictionary_encode()]),
               pa.chunked_array([pa.array(values[:3000]), pa.array(values[3000:])])]
    for col in layouts:
        assert np.array_equal(encode([col], c).indices, ref), type(col)
    ints = np.arange(3000) % 101
    c = fit_contract(["g"], [ints], mode="split")
    assert np.array_equal(encode([ints], c).indices, encode([[str(v) for v in ints]], c).indices)
    assert np.array_equal(encode([ints * 10**12], c).indices,          # sparse ids: the sort path
                          encode([[str(v) for v in ints * 10**12]], c).indices)


def test_threads_give_the_same_columns():
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 10**j, 20000) for j in range(1, 6)]
    c = fit_contract(list("abcde"), cols, mode="split")
    assert np.array_equal(encode(cols, c, threads=3).indices, encode(cols, c).indices)


def test_trick_without_prefix_is_the_peers_reference():
    toks = ["c3=1234", "c0=7", "c3=1234"]
    c = make_contract(["c3"], 18, 0, prefix=False)
    ref = [xxhash.xxh64_intdigest(t.encode(), 0) & (2**18 - 1) for t in toks]
    assert encode([toks], c).indices.tolist() == ref


def test_contract_round_trips_through_a_model_file_and_mismatch_is_refused(tmp_path):
    from mpinn.files.checkpoint import load_model, save_model
    from mpinn.core.spec import ModelSpec
    cols = [np.arange(500) % 40, np.array(["u", "v"] * 250, dtype=object)]
    for mode in ("trick", "split", "onehot"):
        c = fit_contract(["a", "b"], cols, mode=mode)
        path = str(tmp_path / ("m-%s.npz" % mode))
        save_model(path, np.zeros(3, np.float32), ModelSpec(c["n_columns"], 0, (), 1, loss="sigmoid"), {"hashing": c})
        stored = load_model(path)[2]["hashing"]
        check_contract(stored, c)
        assert np.array_equal(encode(cols, stored).indices, encode(cols, c).indices)
    split = fit_contract(["a", "b"], cols, mode="split")
    for change, key in ((dict(k=2), "'k'"), (dict(buckets={"a": 3}), "'buckets'"), (dict(seed=1), "'seed'")):
        other = fit_contract(["a", "b"], cols, mode="split", **change)
        with pytest.raises(MpinnError, match="hashing contract mismatch in %s" % key):
            check_contract(split, other)
    with pytest.raises(MpinnError, match="'mode'"):
        check_contract(split, fit_contract(["a", "b"], cols, mode="trick"))
    onehot = fit_contract(["a", "b"], cols, mode="onehot")
    with pytest.raises(MpinnError, match="'vocab' of feature 'a'|'n_columns'"):
        check_contract(onehot, fit_contract(["a", "b"], [cols[0] + 1, cols[1]], mode="onehot"))
    future = dict(split, version=99)
    with pytest.raises(MpinnError, match="version 99"):
        check_contract(future, split)


def test_first_version_trick_contracts_are_still_accepted():
    v1 = {"mode": "trick", "bits": 18, "seed": 0, "features": ["a", "b"], "version": 1}
    check_contract(v1, make_contract(["a", "b"], 18, 0))


def brute_force_colliding(codes):
    """Values whose whole code equals another value's, counted pair by pair."""
    hit = set()
    for i, j in itertools.combinations(range(len(codes)), 2):
        if tuple(codes[i]) == tuple(codes[j]):
            hit.update((i, j))
    return len(hit)


@pytest.mark.parametrize("mode,kw", [("split", dict(k=2, buckets=6)), ("split", dict(k=3, buckets=4)),
                                     ("trick", dict(bits=6))])
def test_collision_report_against_brute_force(mode, kw):
    values = ["v%d" % i for i in range(120)]
    c = fit_contract(["f"], [values], mode=mode, **kw)
    per = c.get("k", 1)
    codes = encode([values], c).indices.reshape(len(values), per).tolist()
    report = collision_report([values + values[:10]], c)[0]       # repeats do not count twice
    assert report["distinct"] == 120
    assert report["colliding"] == brute_force_colliding(codes) > 0
    cells = kw["buckets"] ** kw["k"] if mode == "split" else 2 ** kw["bits"]
    assert report["expected"] == pytest.approx(120 * (1 - (1 - 1 / cells) ** 119), abs=1e-3)
    fitter = ContractFitter(["f"], mode, kw.get("k", 4), kw.get("bits", 18), 0, kw.get("buckets"))
    fitter.update([values[:70]]).update([values[50:]])                 # chunks overlap: distinct once
    assert fitter.report(c) == [report]


def test_expected_colliding_is_the_birthday_bound():
    assert expected_colliding(1, 10) == 0.0
    assert expected_colliding(2, 4) == pytest.approx(2 * 0.25)
    assert expected_colliding(1000, 1e12) == pytest.approx(1000 * 999 / 1e12, rel=1e-6)


def test_fitting_in_chunks_equals_fitting_at_once():
    rng = np.random.default_rng(3)
    cols = [rng.integers(0, 3000, 10000), rng.choice(["p", "q", "r"], 10000)]
    for mode in ("split", "onehot"):
        whole = fit_contract(["a", "b"], cols, mode=mode)
        f = ContractFitter(["a", "b"], mode)
        for s in range(0, 10000, 777):
            f.update([c[s:s + 777] for c in cols])
        assert f.contract() == whole
