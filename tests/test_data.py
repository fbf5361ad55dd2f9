"""Readers: CSV, .npz, .mat, the embedded click log; labels; clear errors for bad files."""
import numpy as np
import pytest
import scipy.io

from mpinn.config import MpinnError
from mpinn.data import encode_labels, load_csv, load_data, load_default, make_clicklog


def write(path, text):
    path.write_text(text)
    return str(path)


def test_csv_reads_hashes_and_encodes(tmp_path):
    p = write(tmp_path / "d.csv", "color,x,label\nred,1.5,cat\nblue,-2,dog\n,0,cat\n")
    d = load_csv(p, "label", ["color"], ["x"], hash_bits=8)
    assert d.Xs.shape == (3, 256) and d.Xs.nnz == 3
    np.testing.assert_array_equal(d.Xd[:, 0], [1.5, -2, 0])
    assert d.task == "multiclass" and d.meta["classes"] == ["cat", "dog"]
    np.testing.assert_array_equal(d.y, [0, 1, 0])


@pytest.mark.parametrize("text,message", [
    ("a,x,y\nq,1,0\nr,2\n", "line 3: 2 fields, the header has 3"),
    ("a,x,y\nq,1,0\nr,zz,1\n", "line 3: column 'x' is not a number: 'zz'"),
    ("a,x,z\nq,1,0\n", "has no column 'y'"),
    ("", "is empty"),
    ("a,x,y\n", "no rows"),
])
def test_csv_errors_name_the_problem(tmp_path, text, message):
    p = write(tmp_path / "bad.csv", text)
    with pytest.raises(MpinnError, match=message.replace("(", r"\(")):
        load_data(p, label="y", categorical="a", numeric="x")


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
