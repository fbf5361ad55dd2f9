"""Readers: CSV, .npz, .mat, the embedded click log; labels; clear errors for bad files."""
import re

import numpy as np
import pytest
import scipy.io

from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, HashSpec, load_csv, load_data, load_default
from mpinn.data.formats.clicklog import make_clicklog
from mpinn.data.fit.labels import encode_labels


def write(path, text):
    path.write_text(text)
    return str(path)


def test_csv_reads_hashes_and_encodes(tmp_path):
    p = write(tmp_path / "d.csv", "color,x,label\nred,1.5,cat\nblue,-2,dog\n,0,cat\n")
    d = load_csv(p, DataSpec("label", ["color"], ["x"]), HashSpec(bits=8))
    assert d.Xs.shape == (3, 256) and d.Xs.nnz == 3
    np.testing.assert_array_equal(d.Xd[:, 0], [1.5, -2, 0])
    assert d.task == "binary" and d.meta["classes"] == ["cat", "dog"]       # two labels of any kind: binary
    np.testing.assert_array_equal(d.y, [0, 1, 0])


@pytest.mark.parametrize("text,message", [
    ("a,x,y\nq,1,0\nr,2\n", "line 3: 2 fields, the header has 3"),
    ('a,x,y\n"q,1,0\nr,2,1\ns,3,0\n', "lines 2 to 4 are one row of 1 fields (the header has 3): is a quote opened on "
                                       "line 2 never closed?"),
    ('a,x,y\n"q\nz",1,0\nr,2\n', "line 4: 2 fields, the header has 3"),        # a closed quote's line break
    ("a,x,y\nq,1,0\nr,zz,1\n", "line 3: column 'x' is not a number: 'zz'"),
    ("a,x,z\nq,1,0\n", "has no column 'y'"),
    ("a;x;y\nq;1;0\n", "has no column 'a' (columns: 'a;x;y'): its header is one column holding semicolons; mpinn "
                       "reads values separated by commas, or by tabs"),
    ("a|x|y\nq|1|0\n", "its header is one column holding bars"),
    ("", "is empty"),
    ("a,x,y\n", "no rows"),
])
def test_csv_errors_name_the_problem(tmp_path, text, message):
    p = write(tmp_path / "bad.csv", text)
    with pytest.raises(MpinnError, match=re.escape(message)):
        load_data(p, DataSpec("y", categorical="a", numeric="x"))


def test_a_compressed_file_under_a_text_name_is_named_as_such(tmp_path):
    import gzip
    import zipfile
    text = b"a,x,y\n" + b"q,1,0\nr,2,1\n" * 50
    (tmp_path / "g.csv").write_bytes(gzip.compress(text))
    with zipfile.ZipFile(tmp_path / "z.csv", "w") as z:
        z.writestr("inside.csv", text)
    for name, message in (("g.csv", "g.csv is gzip-compressed, not text: name it .csv.gz"),
                          ("z.csv", "z.csv is a zip archive, not text: unzip it and give the file inside")):
        with pytest.raises(MpinnError, match=re.escape(message)):
            load_data(str(tmp_path / name), DataSpec("y", categorical="a", numeric="x"))
    (tmp_path / "g.csv.gz").write_bytes(gzip.compress(text))     # named as it is: read
    assert len(load_data(str(tmp_path / "g.csv.gz"), DataSpec("y", categorical="a", numeric="x"))) == 100


def test_npz_with_pickled_objects_is_refused(tmp_path):
    p = str(tmp_path / "evil.npz")
    np.savez(p, X=np.array([[1, {"a": 1}]], dtype=object), y=np.array([0]))
    with pytest.raises(MpinnError, match="pickle"):
        load_data(p)


def test_mat_in_ng_format(tmp_path):
    p = str(tmp_path / "ex.mat")
    X = np.arange(20.0).reshape(5, 4)
    scipy.io.savemat(p, {"X": X, "y": np.array([[10], [1], [2], [10], [3]])})
    d = load_data(p)
    assert d.Xd.flags.c_contiguous and np.array_equal(d.Xd, X)
    assert d.meta["classes"] == ["1", "2", "3", "10"]
    np.testing.assert_array_equal(d.y, [3, 0, 1, 3, 2])


def test_labels_outside_the_model_classes_are_refused():
    with pytest.raises(MpinnError, match="not one of the model's classes"):
        encode_labels(np.array([1, 2, 7]), "multiclass", ["1", "2"])


def test_binary_and_regression_detection():
    assert encode_labels(np.array([0.0, 1.0, 1.0]))[1] == "binary"
    assert encode_labels(np.array([0.5, 1.0, 2.5]))[1] == "regression"


def test_clicklog_is_deterministic_and_shaped():
    a, b = make_clicklog(2000, 0), make_clicklog(2000, 0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    codes, numeric, y = a
    assert codes.shape == (2000, 20) and numeric.shape == (2000, 4)
    assert 0.2 < y.mean() < 0.8
    d = load_default(2000)
    assert d.Xs.shape == (2000, 2**18) and np.all(np.diff(d.Xs.indptr) == 20)


def test_holdout_split_is_seeded_and_disjoint():
    d = load_default(1000)
    t1, v1 = d.split(0.2, 3)
    t2, v2 = d.split(0.2, 3)
    assert len(t1) == 800 and len(v1) == 200
    assert np.array_equal(v1.y, v2.y) and np.array_equal(v1.Xd, v2.Xd)


# ---------------------------------------------------------------- chunked readers
def engines():
    out = ["python"]
    try:
        import pyarrow  # noqa: F401
        out.append("arrow")
    except ImportError:
        pass
    return out


def table_text(n, seed=0):
    """A CSV with quoted commas and newlines, empty categorical cells and three label values."""
    rng = np.random.default_rng(seed)
    lines = ["site,kind,x,z,label"]
    for i in range(n):
        site = rng.choice(["a.com", '"b, inc"', '"line\nbreak"', "", "d"])
        lines.append("%s,%d,%.6g,%d,%s" % (site, rng.integers(0, 50), rng.standard_normal(),
                                           rng.integers(0, 3), rng.choice(["yes", "no", "maybe"])))
    return "\n".join(lines) + "\n"


def same_dataset(a, b):
    assert a.meta == b.meta
    for x, y in ((a.Xs.indices, b.Xs.indices), (a.Xs.indptr, b.Xs.indptr), (a.Xd, b.Xd), (a.y, b.y)):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("mode", ["trick", "split", "onehot"])
def test_csv_in_chunks_equals_csv_at_once_with_either_engine(tmp_path, mode):
    p = write(tmp_path / "t.csv", table_text(700))
    kw = dict(spec=DataSpec("label", categorical=["site", "kind"], numeric=["x", "z"]), hashing=HashSpec(mode))
    whole = load_csv(p, chunk_rows=10**6, engine="python", **kw)
    assert len(whole) == 700 and whole.meta["classes"] == ["maybe", "no", "yes"]
    for engine in engines():
        for chunk in (1, 64, 10**6):
            same_dataset(load_csv(p, chunk_rows=chunk, engine=engine, **kw), whole)


@pytest.mark.parametrize("engine", engines())
def test_a_bad_line_deep_in_a_streamed_csv_is_named(tmp_path, engine):
    text = table_text(300).splitlines()
    text[250] = "d,3,oops,1,yes"            # quoted newlines above it: its line number is not its row number
    p = write(tmp_path / "bad.csv", "\n".join(text) + "\n")
    physical = open(p).read().split("\n").index("d,3,oops,1,yes") + 1
    with pytest.raises(MpinnError, match=r"bad.csv line %d: column 'x' is not a number: 'oops'" % physical):
        load_csv(p, DataSpec("label", ["site"], ["x", "z"]), chunk_rows=32, engine=engine)
    text[250] = "d,3,1.5,yes"
    p = write(tmp_path / "short.csv", "\n".join(text) + "\n")
    with pytest.raises(MpinnError, match=r"line %d: 4 fields, the header has 5" % physical):
        load_csv(p, DataSpec("label", ["site"], ["x", "z"]), chunk_rows=32, engine=engine)


def test_parquet_in_batches_equals_the_same_table_as_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(1)
    n = 900
    site = rng.choice(["a.com", "b.org", "", "c.net"], n).tolist()
    site[5] = None                                   # a null is a missing value, like an empty cell
    table = pa.table({"site": site, "kind": rng.integers(0, 50, n), "x": rng.standard_normal(n),
                      "label": rng.integers(0, 2, n)})
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=200)   # dictionary-encoded pages, several row groups
    with open(tmp_path / "t.csv", "w") as f:
        f.write("site,kind,x,label\n")
        for s, k, x, y in zip(site, table["kind"].to_pylist(), table["x"].to_pylist(), table["label"].to_pylist()):
            f.write("%s,%d,%r,%d\n" % (s or "", k, x, y))
    ref = load_data(str(tmp_path / "t.csv"), DataSpec("label", "site,kind", "x"), HashSpec("split"))
    from mpinn.data import load_parquet
    for chunk in (64, 10**6):
        d = load_parquet(path, DataSpec("label", ["site", "kind"], ["x"]), HashSpec("split"), chunk_rows=chunk)
        assert d.meta["source"] == "parquet" and d.task == "binary"
        for x, y in ((d.Xs.indices, ref.Xs.indices), (d.Xd, ref.Xd), (d.y, ref.y)):
            assert np.array_equal(x, y)
    from mpinn.data.formats.tables import TableSource
    part = next(TableSource(path, "label", ["site"], [], chunk_rows=100).parts())
    assert pa.types.is_dictionary(part.cats[0].type)          # hashed through the dictionary


def test_parquet_errors_are_one_line(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": ["x", "y"], "x": [1.0, None], "y": [0, 1]}), path)
    d = load_data(path, DataSpec("y", categorical="a", numeric="x"))     # a null is a missing value
    assert np.isnan(d.Xd[1, 0]) and d.meta["numeric_stats"]["missing"] == [1]
    with pytest.raises(MpinnError, match="column 'a' is not numeric"):
        load_data(path, DataSpec("y", numeric="a"))
    with pytest.raises(MpinnError, match="has no column 'q'"):
        load_data(path, DataSpec("y", categorical="q"))
    (tmp_path / "not.parquet").write_bytes(b"PAR1 nonsense")
    with pytest.raises(MpinnError, match="cannot read .*not.parquet as Parquet"):
        load_data(str(tmp_path / "not.parquet"), DataSpec("y"))


def test_clicklog_in_chunks_equals_the_whole():
    from mpinn.data.formats.clicklog import iter_clicklog
    whole = make_clicklog(3000, 5)
    for chunk in (3000, 1000, 777):
        parts = list(iter_clicklog(3000, 5, chunk))
        for k in range(3):
            assert np.array_equal(np.concatenate([p[k] for p in parts]), whole[k])


def test_a_given_contract_is_used_not_refitted(tmp_path):
    tr = write(tmp_path / "tr.csv", "c,y\n" + "".join("v%d,%d\n" % (i % 30, i % 2) for i in range(300)))
    va = write(tmp_path / "va.csv", "c,y\nv1,0\nnew,1\n")
    train = load_data(tr, DataSpec("y", categorical="c"), HashSpec("split"))
    valid = load_data(va, DataSpec("y", categorical="c"), HashSpec(contract=train.meta["hashing"]))
    assert valid.meta["hashing"] == train.meta["hashing"] and valid.Xs.shape[1] == train.Xs.shape[1]
    assert np.array_equal(valid.Xs[0].indices, train.Xs[1].indices)     # v1 -> the same columns
    other = write(tmp_path / "other.csv", "d,y\nx,0\n")
    with pytest.raises(MpinnError, match="contract is for categorical columns"):
        load_data(other, DataSpec("y", categorical="d"), HashSpec(contract=train.meta["hashing"]))


def test_label_scan_in_chunks_decides_like_encode_labels():
    from mpinn.data.fit.labels import LabelScan
    cases = [np.array(["1", "0", "1", "0"] * 50, dtype=object), np.array(["a", "b", "c"] * 30, dtype=object),
             np.arange(3000) * 0.5, np.array([3, 1, 2, 7] * 25)]
    for raw in cases:
        scan = LabelScan()
        for s in range(0, len(raw), 37):
            scan.update(raw[s:s + 37])
        _, task, classes = encode_labels(raw)
        assert scan.result() == (task, classes)
        y_chunks = np.concatenate([encode_labels(raw[s:s + 37], task, classes)[0] for s in range(0, len(raw), 37)])
        assert np.array_equal(y_chunks, encode_labels(raw)[0])


def test_default_data_in_every_hash_mode():
    for mode, cols in (("trick", 2**18), ("split", None), ("onehot", None)):
        d = load_default(5000, hashing=HashSpec(mode))
        c = d.meta["hashing"]
        assert c["mode"] == mode and d.Xs.shape == (5000, c["n_columns"])
        assert cols is None or c["n_columns"] == cols
        assert np.all(np.diff(d.Xs.indptr) == 20 * (4 if mode == "split" else 1))
