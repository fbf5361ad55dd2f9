"""Many data files read as one (mpinn.data.files, mpinn.data.many): a directory, a glob or a list, plain and .gz
mixed, in a stated order (a directory's and a glob's files by name, numbers as numbers); the result equals one
file holding the same rows, bit for bit, through load_data, train at np 1, 2 and 3, predict and prepare; a bad
file in the middle is one line naming it, exit 2, and no model."""
import gzip
import os
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, load_data
from mpinn.data.files import expand, natural_key

HEADER = "y,a,b,x,day"
SPEC = ["--label", "y", "--categorical", "a,b", "--numeric", "x"]


def rows(n=900, seed=0):
    rng = np.random.default_rng(seed)
    return ["%d,v%d,w%d,%.4f,2026-01-%02d" % (rng.integers(0, 2), rng.integers(0, 9), rng.integers(0, 5),
                                             rng.normal(), 1 + 27 * i // n) for i in range(n)]


def write(path, lines):
    text = "\n".join([HEADER] + lines) + "\n"
    if path.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)
    return path


@pytest.fixture
def days(tmp_path):
    """(the directory of day files, the one file of all their rows, the day files in time order): day_2 is
    gzipped, and day_10 comes after day_2 (by number, not as text)."""
    lines = rows()
    d = tmp_path / "days"
    d.mkdir()
    names = ["day_1.csv", "day_2.csv.gz", "day_10.csv"]
    paths = [write(str(d / n), lines[i * 300:(i + 1) * 300]) for i, n in enumerate(names)]
    return str(d), write(str(tmp_path / "all.csv"), lines), paths


def test_the_order_is_the_listed_one_or_by_name_with_numbers_as_numbers(days, tmp_path):
    d, _, paths = days
    assert expand(d) == paths
    assert expand(os.path.join(d, "day_*")) == paths
    assert expand([paths[2], paths[0]]) == [paths[2], paths[0]]          # as listed
    assert sorted(["day_10", "day_2", "day_1"], key=natural_key) == ["day_1", "day_2", "day_10"]
    (tmp_path / "empty").mkdir()
    for bad, message in ((str(tmp_path / "empty"), "holds no files"), (os.path.join(d, "hour_*"), "no data file "
                         "matches"), (str(tmp_path / "nowhere.csv"), "does not exist")):
        with pytest.raises(MpinnError, match=message):
            expand(bad)


@pytest.mark.parametrize("how", ["directory", "glob", "list"])
def test_many_files_load_as_the_one_file_of_their_rows(days, how):
    d, one, paths = days
    data = {"directory": d, "glob": os.path.join(d, "day_*"), "list": paths}[how]
    spec = DataSpec(label="y", categorical="a,b", numeric="x")
    a, b = load_data(one, spec), load_data(data, spec)
    assert (a.Xs != b.Xs).nnz == 0 and np.array_equal(a.Xd, b.Xd) and np.array_equal(a.y, b.y)
    assert a.meta["numeric_stats"] == b.meta["numeric_stats"] and a.meta["hashing"] == b.meta["hashing"]
    assert b.meta["files"] == paths


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [1, 2, 3])
def test_training_on_a_directory_equals_training_on_one_file(days, tmp_path, np_, launcher):
    d, one, paths = days
    common = SPEC + ["--holdout-by", "time:day", "--epochs", "2", "--hidden", "8", "--no-progress"]
    got = {}
    for name, data in (("dir", [d]), ("one", [one]), ("listed", paths)):
        out = str(tmp_path / ("%s-%d.npz" % (name, np_)))
        r = mpirun(np_, ["-m", "mpinn.train"] + data + common + ["--model-out", out], timeout=180)
        assert r.returncode == 0, r.stderr
        got[name] = np.load(out)["params"]
        if name != "one":
            assert "data: 3 files, %s .. %s, 810 training rows, 90 held out" % (paths[0], paths[-1]) in r.stdout
    assert np.array_equal(got["dir"], got["one"]) and np.array_equal(got["listed"], got["one"])


def test_a_bad_file_in_the_middle_is_one_line_and_no_model(days, tmp_path):
    d, _, paths = days
    with gzip.open(paths[1], "rb") as f:
        whole = f.read()
    with open(paths[1], "wb") as f:               # a gzip file cut short
        f.write(gzip.compress(whole)[:200])
    out = tmp_path / "m.npz"
    r = run([sys.executable, "-m", "mpinn.train", d] + SPEC + ["--epochs", "1", "--model-out", str(out)], timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpinn: error:") and "day_2.csv.gz" in lines[0], r.stderr
    assert not out.exists()


def test_a_file_of_other_columns_or_another_kind_is_one_line(days, tmp_path):
    d, _, paths = days
    with open(paths[2], "w") as f:
        f.write("y,a,z\n1,v1,3\n")
    r = run([sys.executable, "-m", "mpinn.train", d] + SPEC + ["--epochs", "1", "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2 and "day_10.csv has no column 'b'" in r.stderr, r.stderr
    np.savez(str(tmp_path / "arrays.npz"), X=np.zeros((3, 2)), y=np.zeros(3))
    r = run([sys.executable, "-m", "mpinn.train", paths[0], str(tmp_path / "arrays.npz")] + SPEC
            + ["--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2 and "read as one table when they are CSV, Parquet or click-log text" in r.stderr, r.stderr


def test_predict_and_prepare_read_many_files_as_one(days, tmp_path):
    d, one, paths = days
    model = str(tmp_path / "m.npz")
    r = run([sys.executable, "-m", "mpinn.train", one] + SPEC + ["--epochs", "1", "--model-out", model])
    assert r.returncode == 0, r.stderr
    preds = []
    for name, data in (("glob", os.path.join(d, "day_*")), ("one", one)):
        out = str(tmp_path / ("%s.csv" % name))
        r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", data, "--out", out])
        assert r.returncode == 0, r.stderr
        with open(out) as f:
            preds.append(f.read())
    assert preds[0] == preds[1] and preds[0].count("\n") == 901
    from mpinn.data.packed.format import PackedDataset
    packed = []
    for name, data in (("dir", d), ("one", one)):
        out = str(tmp_path / ("%s.mpinn" % name))
        r = run([sys.executable, "-m", "mpinn.prepare", "--data", data] + SPEC + ["--out", out, "--quiet"])
        assert r.returncode == 0, r.stderr
        packed.append(PackedDataset(out).take(np.arange(900)))
    a, b = packed
    assert (a.Xs != b.Xs).nnz == 0 and np.array_equal(a.Xd, b.Xd) and np.array_equal(a.y, b.y)
