"""Which columns are inputs when none are named (mpinn.data.formats.kinds), the label never one of them, and how
the held-out rows are chosen (--holdout-by random, time:COLUMN, group:COLUMN)."""
import sys

import numpy as np
import pytest

from conftest import run
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, Dataset, load_csv
from mpinn.data.many import read_column


def write(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def table(tmp_path, n=300, seed=0):
    rng = np.random.default_rng(seed)
    rows = [(rng.choice(["red", "green", "blue"]), "%.3f" % rng.standard_normal(), int(rng.integers(1, 13)),
             "" if i % 17 == 0 else "%.1f" % rng.random(), int(rng.integers(0, 5000)), i, "", int(rng.integers(0, 2)))
            for i in range(n)]
    return write(tmp_path / "t.csv", ["colour", "x", "month", "gappy", "big_int", "day", "blank", "y"], rows)


def test_numbers_are_numeric_text_is_hashed_and_a_few_integers_are_both(tmp_path):
    d = load_csv(table(tmp_path), DataSpec("y"))
    assert d.meta["numeric"] == ["x", "month", "gappy", "big_int", "day"]
    assert d.meta["categorical"] == ["colour", "month"]               # month: 12 integer values, both
    note = d.meta["columns_chosen"]
    assert "5 numeric (x, month, gappy, big_int, day)" in note and "left out, no values: blank" in note
    assert "month, a few integers, both" in note


def test_named_columns_are_taken_as_given(tmp_path):
    d = load_csv(table(tmp_path), DataSpec("y", categorical=["colour", "day"], numeric=["x"]))
    assert d.meta["categorical"] == ["colour", "day"] and d.meta["numeric"] == ["x"]
    assert "columns_chosen" not in d.meta


def test_the_label_is_never_an_input(tmp_path):
    path = table(tmp_path)
    with pytest.raises(MpinnError, match="the label column 'y' is also named as an input"):
        load_csv(path, DataSpec("y", categorical=["colour", "y"]))
    rows = [(i % 2, i % 2, i) for i in range(50)]
    copy = write(tmp_path / "copy.csv", ["answer", "y", "z"], rows)
    with pytest.raises(MpinnError, match="the input column 'answer' repeats the label 'y'"):
        load_csv(copy, DataSpec("y"))                                # chosen from the values
    with pytest.raises(MpinnError, match="repeats the label"):
        load_csv(copy, DataSpec("y", numeric=["answer", "z"]))      # or named


def small(n, seed=1):
    rng = np.random.default_rng(seed)
    return Dataset(None, rng.standard_normal((n, 2)), rng.integers(0, 2, n).astype(float), {"task": "binary"})


def test_a_time_holdout_holds_out_exactly_the_last_rows_by_that_column():
    n = 200
    data = small(n)
    t = np.random.default_rng(2).permutation(n)         # the rows are not in time order
    train, valid = data.split(0.1, 0, "time", [str(v) for v in t])
    assert len(valid) == 20 and len(train) == 180
    held = set(np.flatnonzero(t >= n - 20))             # the 20 latest
    got = {int(np.flatnonzero((data.Xd == row).all(axis=1))[0]) for row in valid.Xd}
    assert got == held
    dates = ["2026-%02d-%02d" % (1 + i // 28, 1 + i % 28) for i in range(n)][::-1]    # text that sorts by date
    _, valid = data.split(0.25, 0, "time", dates)
    assert np.array_equal(valid.Xd, data.Xd[:50])       # the first 50 rows hold the latest dates


def test_a_group_holdout_keeps_every_group_on_one_side():
    n = 1000
    data = small(n)
    users = ["u%d" % (i % 40) for i in range(n)]
    train, valid = data.split(0.25, 3, "group", users)
    side = {}
    for i, u in enumerate(users):
        row_in_valid = any((valid.Xd == data.Xd[i]).all(axis=1))
        assert side.setdefault(u, row_in_valid) == row_in_valid, "group %s split" % u
    assert 0 < len(valid) < n and len(train) + len(valid) == n
    assert data.split(0.25, 3, "group", users)[1].Xd.tobytes() == valid.Xd.tobytes()    # seeded


def test_the_holdout_column_is_read_in_the_readers_order(tmp_path):
    path = write(tmp_path / "h.csv", ["t", "y"], [(5, 1), (3, 0), (9, 1)])
    with open(path, "a") as f:
        f.write("\n7,0\n")                              # an empty line: skipped, as the readers skip it
    assert read_column(path, "t") == ["5", "3", "9", "7"]
    with pytest.raises(MpinnError, match="no column 'when'"):
        read_column(path, "when")


def test_training_holds_out_the_last_rows_by_time_and_says_so(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    t = rng.permutation(n)
    x = rng.standard_normal(n)
    rows = [(int(t[i]), "%.4f" % x[i], int(x[i] + 0.002 * t[i] > 0.5)) for i in range(n)]
    path = write(tmp_path / "ts.csv", ["t", "x", "y"], rows)
    r = run([sys.executable, "-m", "mpinn.train", "--data", path, "--label", "y", "--holdout-by", "time:t",
             "--holdout", "0.2", "--epochs", "1", "--no-progress", "--model-out", str(tmp_path / "m.npz")], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "320 training rows, 80 held out (the last 20% by t)" in r.stdout, r.stdout
    assert "1 numeric (x)" in r.stdout          # the time column is not chosen as an input
