"""Every reader's failure is one line and exit code 2, never a traceback: truncated files of every format,
wrong types, nested columns, cell arrays, a huge CSV field; and a missing label is refused by every reader
alike, never a change of task. Model files from another version are one line naming both versions."""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, run
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, load_data


def cli(args, tmp_path):
    return run([sys.executable, "-m", "mpinn.train"] + args + ["--epochs", "1", "--no-progress",
                                                            "--model-out", str(tmp_path / "m.npz")], timeout=120)


def assert_one_line(r):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stderr.startswith("mpinn: error:") and r.stderr.count("\n") == 1, r.stderr


def good_files(d):
    """One valid small file of every format."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 3)), rng.integers(0, 2, 40)
    np.savez(d / "ok.npz", X=X, y=y)
    import scipy.io
    scipy.io.savemat(d / "ok.mat", {"X": X, "y": (y + 1).reshape(-1, 1)})
    with open(d / "ok.csv", "w") as f:
        f.write("a,x,y\n" + "".join("v%d,%.3f,%d\n" % (i % 5, X[i, 0], y[i]) for i in range(40)))
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"a": ["v%d" % (i % 5) for i in range(40)], "x": X[:, 0], "y": y}), d / "ok.parquet")
    return {"npz": d / "ok.npz", "mat": d / "ok.mat", "csv": d / "ok.csv", "parquet": d / "ok.parquet"}


LABELS = {"csv": ["--label", "y", "--categorical", "a", "--numeric", "x"],
          "parquet": ["--label", "y", "--categorical", "a", "--numeric", "x"], "npz": [], "mat": []}


@pytest.mark.parametrize("kind", ["npz", "mat", "csv", "parquet"])
@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.9])
def test_a_truncated_file_is_one_clear_error(kind, keep, tmp_path):
    src = good_files(tmp_path)[kind]
    data = src.read_bytes()
    cut = tmp_path / ("cut." + kind)
    cut.write_bytes(data[:int(len(data) * keep)])
    spec = DataSpec(label="y", categorical="a", numeric="x") if kind in ("csv", "parquet") else DataSpec()
    try:
        load_data(str(cut), spec)
    except MpinnError as e:
        assert "\n" not in str(e).strip()


@pytest.mark.parametrize("kind", ["npz", "parquet"])
def test_a_truncated_file_ends_the_cli_with_one_line(kind, tmp_path):
    src = good_files(tmp_path)[kind]
    cut = tmp_path / ("cut." + kind)
    cut.write_bytes(src.read_bytes()[:200])
    assert_one_line(cli(["--data", str(cut)] + LABELS[kind], tmp_path))


def test_wrong_types_and_nested_columns_are_one_line(tmp_path):
    np.savez(tmp_path / "text.npz", X=np.array([["a", "b"], ["c", "d"]]), y=np.array([0, 1]))
    import scipy.io
    cells = np.empty((2, 1), dtype=object)
    cells[0, 0], cells[1, 0] = np.ones(3), np.zeros(2)
    scipy.io.savemat(tmp_path / "cells.mat", {"X": cells, "y": np.array([[1], [2]])})
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"a": [[1, 2], [3]], "x": [0.5, 0.7], "y": [0, 1]}), tmp_path / "nested.parquet")
    for path, extra in ((tmp_path / "text.npz", []), (tmp_path / "cells.mat", []),
                        (tmp_path / "nested.parquet", ["--label", "y", "--categorical", "a", "--numeric", "x"])):
        assert_one_line(cli(["--data", str(path)] + extra, tmp_path))


def test_a_huge_csv_field_in_a_ragged_row_names_the_row(tmp_path):
    path = tmp_path / "huge.csv"
    with open(path, "w") as f:
        f.write("a,x,y\n" + "".join("v%d,%d,%d\n" % (i % 3, i, i % 2) for i in range(20)))
        f.write("v1,%s,1,extra\n" % ("9" * 200_000))
    r = cli(["--data", str(path), "--label", "y", "--categorical", "a", "--numeric", "x"], tmp_path)
    assert_one_line(r)
    assert "line 22" in r.stderr, r.stderr


@pytest.mark.parametrize("kind,bad", [("csv", "NaN"), ("csv", ""), ("csv", "NA"), ("parquet", None),
                                      ("npz", np.nan), ("mat", np.nan), ("npz", np.inf), ("prepare", "NaN")])
def test_a_missing_label_is_refused_by_every_reader(kind, bad, tmp_path):
    y = [1, 0, 1, 0, 1, 0] * 5
    path = tmp_path / ("lab." + ("csv" if kind == "prepare" else kind))
    if kind in ("csv", "prepare"):
        with open(path, "w") as f:
            f.write("a,x,y\n" + "".join("v%d,%d,%s\n" % (i % 3, i, bad if i == 7 else y[i]) for i in range(30)))
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"a": ["v%d" % (i % 3) for i in range(30)], "x": list(range(30)),
                                 "y": [None if i == 7 else y[i] for i in range(30)]}), path)
    elif kind == "mat":
        import scipy.io
        scipy.io.savemat(path, {"X": np.ones((30, 2)), "y": np.array([bad if i == 7 else y[i] + 1 for i in range(30)],
                                                                    dtype=float).reshape(-1, 1)})
    else:
        np.savez(path, X=np.ones((30, 2)), y=np.array([bad if i == 7 else y[i] for i in range(30)], dtype=float))
    if kind == "prepare":       # the packed format: the label is refused when the file is made
        r = run([sys.executable, "-m", "mpinn.prepare", "--data", str(path), "--out", str(tmp_path / "lab.mpinn")]
                + LABELS["csv"])
        assert not (tmp_path / "lab.mpinn").exists()
    else:
        r = cli(["--data", str(path)] + LABELS[kind], tmp_path)
    assert_one_line(r)
    assert "the label is missing or not a number in 1 of 30 rows (the first is data row 8" in r.stderr, r.stderr


def test_a_model_file_of_today_is_read(tmp_path):
    """A model file written by this version's code (kept in the tests: tests/data/model-format-1-*.npz) keeps
    predicting what its header says it scored when it was written."""
    path = os.path.join(ROOT, "tests", "data", "model-format-1-2026-11-25.npz")
    with np.load(path, allow_pickle=False) as z:
        recorded = json.loads(str(z["header"][()]))["meta"]["valid_metrics"]
    r = run([sys.executable, "-m", "mpinn.predict", "--model", path, "--metrics-out", str(tmp_path / "m.json")],
            timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.load(open(tmp_path / "m.json"))
    for k in ("accuracy", "logloss", "auc"):
        assert got[k] == pytest.approx(recorded[k], rel=1e-6), k


@pytest.mark.parametrize("change,message", [
    (lambda h: h.update(format="mpinn-model-9", version="9.0"), "written by mpinn 9.0 in format mpinn-model-9; "
                                                                "this mpinn 0.1.0 reads mpinn-model-1 and older"),
    (lambda h: h.update(format="something-else"), "is not an mpinn model file"),
    (lambda h: h["spec"].update(new_field=1), "fields it does not know: new_field"),
    (lambda h: h["spec"].pop("n_out"), "fields missing: n_out"),
    (lambda h: h["meta"].pop("task"), "has no task in its header")])
def test_a_model_file_of_another_version_is_one_line(change, message, tmp_path):
    src = os.path.join(ROOT, "tests", "data", "model-format-1-2026-11-25.npz")
    with np.load(src, allow_pickle=False) as z:
        header, params = json.loads(str(z["header"][()])), z["params"]
    change(header)
    path = tmp_path / "other.npz"
    np.savez(path, header=np.array(json.dumps(header)), params=params)
    r = run([sys.executable, "-m", "mpinn.predict", "--model", str(path)], timeout=120)
    assert_one_line(r)
    assert message in r.stderr, r.stderr
