"""Fuzzing the readers: whatever the bytes, a Dataset or one clear MpinnError, never anything else."""
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, HashSpec, load_csv
from mpinn.data.fit.transform import NumericTransform

CELL = st.text(alphabet=string.ascii_letters + string.digits + " .,-+\"'\n\teE", max_size=6)


def csv_text():
    header = st.lists(st.sampled_from(["a", "x", "y", "z", "", "a"]), min_size=0, max_size=5)
    rows = st.lists(st.lists(CELL, min_size=0, max_size=6), max_size=8)
    return st.tuples(header, rows).map(
        lambda hr: "\n".join([",".join(hr[0])] + [",".join(r) for r in hr[1]]))


def check(path, text_or_bytes):
    mode = "wb" if isinstance(text_or_bytes, bytes) else "w"
    with open(path, mode) as f:
        f.write(text_or_bytes)
    try:
        data = load_csv(str(path), DataSpec("y", categorical=["a"], numeric=["x"]))
    except MpinnError as e:
        assert str(e) and "\n" not in str(e).strip()
        return
    assert len(data) > 0 and data.y.shape[0] == len(data)
    if data.Xd is not None:     # missing cells are NaN as read; what the network sees is finite
        try:
            transform = NumericTransform.fit(data.numeric_stats())
        except MpinnError as e:     # a column with no value at all
            assert str(e) and "\n" not in str(e).strip()
            return
        assert np.isfinite(transform.apply(data.Xd)).all()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(csv_text())
def test_csv_reader_text(tmp_path, text):
    check(tmp_path / "f.csv", text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_csv_reader_bytes(tmp_path, data):
    check(tmp_path / "f.csv", b"a,x,y\n" + data)


# ---------------------------------------------------------------- the packed-file reader
@pytest.fixture(scope="module")
def packed_bytes(tmp_path_factory):
    from mpinn.data import load_default
    from mpinn.data.packed.writing import write_dataset
    path = tmp_path_factory.mktemp("fuzz") / "good.mpinn"
    write_dataset(str(path), load_default(300, hashing=HashSpec(bits=10)))
    return path          # (a path, not the bytes: hypothesis prints its arguments on failure)


def read_all(path, verify):
    from mpinn.data.packed.format import PackedDataset
    data = PackedDataset(str(path), verify=verify)
    return data, data.take(np.arange(len(data)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.one_of(st.none(), st.integers(0, 10**6)),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=4),
       verify=st.booleans())
def test_packed_reader_damaged_bytes(tmp_path, packed_bytes, cut, flips, verify):
    original = packed_bytes.read_bytes()
    raw = bytearray(original)
    if cut is not None:
        raw = raw[:cut % (len(raw) + 1)]
    for pos, mask in flips:
        if raw:
            raw[pos % len(raw)] ^= mask
    path = tmp_path / "f.mpinn"
    path.write_bytes(bytes(raw))
    try:
        data, batch = read_all(path, verify)
    except MpinnError as e:
        assert str(e) and "\n" not in str(e).strip()
        return
    # what reads without complaint is well-formed: every column id inside the table
    if batch.Xs is not None and batch.Xs.nnz:
        assert 0 <= batch.Xs.indices.min() and batch.Xs.indices.max() < data.n_sparse
    if verify:      # checksums on: only damage to padding can pass, so the rows are the original's
        good = tmp_path / "g.mpinn"
        good.write_bytes(original)
        _, ref = read_all(good, False)
        assert np.array_equal(batch.Xs.indices, ref.Xs.indices) and np.array_equal(batch.y, ref.y)
