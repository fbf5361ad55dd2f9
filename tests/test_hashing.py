"""Hashing: fixed digests across processes, distinct values hashed once, the contract."""
import subprocess
import sys

import numpy as np
import pytest
import xxhash

from mpinn.config import MpinnError
from mpinn.hashing import check_contract, hashed_csr, make_contract, token_columns


def test_columns_are_xxh64_of_feature_equals_value():
    # fixed expected values: a change of token format or seed handling breaks every saved model
    assert xxhash.xxh64_intdigest(b"c3=1234", seed=0) & (2**18 - 1) == token_columns("c3", [1234], 18, 0)[0]
    assert token_columns("c3", ["1234"], 18, 0)[0] == token_columns("c3", [1234], 18, 0)[0]
    assert token_columns("c3", ["x"], 18, 1)[0] != token_columns("c3", ["x"], 18, 0)[0]


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
