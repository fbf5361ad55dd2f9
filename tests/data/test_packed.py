"""Packed files: prepare's output equals the in-memory Dataset row for row; damaged files are refused."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpinn.data.packed.format as packed
import mpinn.data.packed.writing as packing
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, Dataset, HashSpec, load_csv, load_data, load_default
from mpinn.data.formats.tables import TableSource
from mpinn.data.packed.format import PackedDataset
from mpinn.data.packed.writing import write_dataset
from mpinn.data.fit.transform import NumericTransform
from mpinn.prepare import prepare


def same_batch(a, b):
    assert a.Xs.shape == b.Xs.shape and a.Xs.dtype == b.Xs.dtype
    for x, y in ((a.Xs.indices, b.Xs.indices), (a.Xs.indptr, b.Xs.indptr), (a.Xs.data, b.Xs.data),
                 (a.Xd, b.Xd), (a.y, b.y)):
        assert (x is None and y is None) or (x.dtype == y.dtype and np.array_equal(x, y))


def without_transform(meta):
    """A packed file's meta less the transform prepare fitted (an in-memory data set gets it in training)."""
    return {k: v for k, v in meta.items() if k != "transform"}


def make_csv(path, n, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("site,ad,x,label\n")
        for i in range(n):
            f.write("%s,%d,%.5f,%s\n" % (rng.choice(["a", "b", "", "c,d"]).replace("c,d", '"c,d"'),
                                         rng.integers(0, 500), rng.standard_normal(), rng.choice(["u", "v", "w"])))
    return str(path)


@pytest.mark.parametrize("mode", ["trick", "split", "onehot"])
def test_prepared_file_equals_the_in_memory_dataset(tmp_path, mode):
    csv_path = make_csv(tmp_path / "t.csv", 1500)
    kw = dict(label="label", categorical=["site", "ad"], numeric=["x"])
    mem = load_csv(csv_path, DataSpec(**kw), HashSpec(mode))
    out = str(tmp_path / "t.mpinn")
    s = prepare(TableSource(csv_path, chunk_rows=100, **kw), out, hashing=HashSpec(mode))
    assert s["rows"] == 1500
    p = load_data(out)
    assert isinstance(p, PackedDataset) and len(p) == 1500 and without_transform(p.meta) == mem.meta
    # the statistics prepare took in 100-row chunks are the reader's, bit for bit: the same transform
    assert p.meta["transform"] == NumericTransform.fit(mem.numeric_stats()).to_dict()
    assert p.layout("float32") == mem.layout("float32") and p.sparse_fan_in == mem.sparse_fan_in
    rng = np.random.default_rng(1)
    for rows in (rng.permutation(1500)[:257], np.arange(300, 700), np.sort(rng.choice(1500, 100, replace=False)),
                 np.array([1499]), np.arange(1500)):
        same_batch(p.take(rows, "float32"), mem.take(rows, "float32"))
        same_batch(p.take(rows), mem.take(rows))
    # split views read the same rows as the in-memory split
    (pt, pv), (mt, mv) = p.split(0.2, 3), mem.split(0.2, 3)
    assert len(pt) == len(mt) and np.array_equal(pv.y, mv.y)
    rows = rng.permutation(len(pt))[:300]
    same_batch(pt.take(rows, "float64"), mt.take(rows, "float64"))
    assert pt.Xs.shape == mt.Xs.shape and pt.Xs.getnnz() == mt.Xs.getnnz() and pt.Xd.shape == mt.Xd.shape


def test_default_data_prepared_in_chunks_equals_load_default(tmp_path):
    out = str(tmp_path / "d.mpinn")
    prepare(TableSource(None, default_rows=3000, chunk_rows=700), out, hashing=HashSpec("split"))
    p, mem = PackedDataset(out, verify=True), load_default(3000, hashing=HashSpec("split"))
    assert without_transform(p.meta) == mem.meta
    same_batch(p.take(np.arange(3000)), mem.take(np.arange(3000)))


def random_dataset(draw_lengths, n_dense, multiclass, seed):
    rng = np.random.default_rng(seed)
    n = len(draw_lengths)
    lengths = np.array(draw_lengths, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, 50, indptr[-1]).astype(np.int32)
    Xs = sp.csr_matrix((rng.standard_normal(indptr[-1]).astype(np.float32), indices, indptr), shape=(n, 50))
    Xd = rng.standard_normal((n, n_dense)) if n_dense else None
    if multiclass:
        y, meta = rng.integers(0, 3, n), {"task": "multiclass", "classes": ["a", "b", "c"]}
    else:
        y, meta = rng.standard_normal(n), {"task": "regression", "classes": None}
    return Dataset(Xs, Xd, y, meta)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=60), n_dense=st.integers(0, 3),
       multiclass=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_any_row_range_read_by_offset_equals_the_slice(tmp_path, lengths, n_dense, multiclass, seed, data):
    d = random_dataset(lengths, n_dense, multiclass, seed)
    path = str(tmp_path / "h.mpinn")
    write_dataset(path, d)
    p = PackedDataset(path, verify=True)
    n = len(d)
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo + 1, n))
    same_batch(p.take(np.arange(lo, hi)), d.take(np.arange(lo, hi)))
    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    same_batch(p.take(rows, "float64"), d.take(rows, "float64"))


def test_pages_are_released_and_reads_stay_right(tmp_path, monkeypatch):
    monkeypatch.setattr(packed, "RELEASE_BYTES", 4096)
    d = load_default(2000)
    write_dataset(str(tmp_path / "r.mpinn"), d)
    p = PackedDataset(str(tmp_path / "r.mpinn"))
    for s in range(0, 2000, 128):
        rows = np.random.default_rng(s).permutation(2000)[:128]
        same_batch(p.take(rows), d.take(rows))
    assert p._file.unread < 4096 * 10


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "g.mpinn"
    write_dataset(str(path), load_default(500))
    return path


def one_line_error(path, match, verify=False):
    with pytest.raises(MpinnError, match=match) as e:
        PackedDataset(str(path), verify=verify)
    assert "\n" not in str(e.value)


def test_truncated_file_is_refused_with_one_line(tmp_path, good_file):
    raw = good_file.read_bytes()
    for cut in (len(raw) - 1, len(raw) // 2, 5000, 100, 10, 0):
        bad = tmp_path / ("cut%d.mpinn" % cut)
        bad.write_bytes(raw[:cut])
        one_line_error(bad, "truncated|not an mpinn packed file")
    with pytest.raises(MpinnError, match="truncated"):
        load_data(str(tmp_path / "cut5000.mpinn"))


def test_damaged_files_are_refused(tmp_path, good_file):
    raw = bytearray(good_file.read_bytes())
    bad = tmp_path / "b.mpinn"
    bad.write_bytes(raw + b"x")
    one_line_error(bad, "damaged: .* bytes, its header says")
    flipped = bytearray(raw)
    flipped[-3] ^= 0xFF
    bad.write_bytes(flipped)
    PackedDataset(str(bad))                          # sizes are right: only the checksum can tell
    one_line_error(bad, "section dense does not match its checksum", verify=True)
    header = bytearray(raw)
    header[20:30] = b"@@@@@@@@@@"
    bad.write_bytes(header)
    one_line_error(bad, "damaged header")
    (tmp_path / "text.mpinn").write_text("hello")
    one_line_error(tmp_path / "text.mpinn", "not an mpinn packed file")
    one_line_error(tmp_path / "missing.mpinn", "cannot read")


def test_a_packed_file_with_another_contract_is_refused(tmp_path, good_file):
    other = load_default(100, hashing=HashSpec(bits=12)).meta["hashing"]
    with pytest.raises(MpinnError, match="hashing contract mismatch in 'bits'"):
        load_data(str(good_file), hashing=HashSpec(contract=other))
    with pytest.raises(MpinnError, match="classes"):
        load_data(str(good_file), DataSpec(classes=["x", "y"]))


def test_an_interrupted_write_leaves_no_file(tmp_path):
    out = tmp_path / "x.mpinn"
    with pytest.raises(RuntimeError):
        with packing.PackedWriter(str(out), 10, 5, 10, 0, "float64", {"task": "regression"}, 1) as w:
            w.append(np.zeros(5, np.int32), 1, np.zeros(5))
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(MpinnError, match="5 rows written, 10 announced"):
        with packing.PackedWriter(str(out), 10, 5, 10, 0, "float64", {"task": "regression"}, 1) as w:
            w.append(np.zeros(5, np.int32), 1, np.zeros(5))
            w.close()
