"""--missing-labels drop: rows whose label is missing are left out of training, and the model is, bit for bit, the
one trained on the file without those rows: in memory at np 1, 2 and 3, streamed, from several files, from .npz,
with --holdout-by time and with a --valid file. The default refuses them in one line that names the option."""
import os
import sys

import numpy as np
import pytest

from conftest import mpirun, run

N = 900


def table(seed=0):
    """Rows of (day, city, x, label) with every 6th label blank, and which rows those are."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=N)
    city = rng.choice(["paris", "lyon", "nice"], N)
    y = (x + (city == "paris") + rng.normal(size=N) > 0.5).astype(int)
    blank = np.arange(N) % 6 == 2
    rows = ["%d,%s,%.5f,%s" % (1 + i // 30, c, v, "" if b else str(t)) for i, (c, v, t, b) in
            enumerate(zip(city, x, y, blank))]
    return rows, blank


def write(path, rows):
    with open(path, "w") as f:
        f.write("day,city,x,clicked\n" + "\n".join(rows) + "\n")
    return str(path)


TRAIN = ["-m", "mpinn.train", "--label", "clicked", "--epochs", "2", "--ensemble", "1", "--hidden", "8",
         "--dtype", "float64", "--no-progress"]


def params(n, data, out, extra=()):
    r = mpirun(n, TRAIN + ["--data", data, "--model-out", out] + list(extra))
    assert r.returncode == 0, r.stderr[-2000:]
    return np.load(out)["params"], r.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_dropping_equals_training_on_the_rows_with_a_label(tmp_path, n, launcher):
    rows, blank = table()
    holey, clean = write(tmp_path / "holey.csv", rows), write(tmp_path / "clean.csv",
                                                             [r for r, b in zip(rows, blank) if not b])
    want, _ = params(n, clean, str(tmp_path / "clean.npz"))
    got, out = params(n, holey, str(tmp_path / "holey.npz"), ["--missing-labels", "drop"])
    assert np.array_equal(got, want)
    assert "labels: missing in %d rows, left out (--missing-labels drop)" % blank.sum() in out
    assert "data: %s, %d training rows" % (holey, round(0.9 * (~blank).sum())) in out


@pytest.mark.mpi
@pytest.mark.parametrize("extra", [["--stream", "on", "--sample-rows", "2000"], ["--holdout-by", "time:day"]],
                         ids=["stream", "time-holdout"])
def test_dropping_equals_removing_when_streamed_or_held_out_by_time(tmp_path, extra, launcher):
    rows, blank = table(1)
    holey, clean = write(tmp_path / "holey.csv", rows), write(tmp_path / "clean.csv",
                                                             [r for r, b in zip(rows, blank) if not b])
    want, _ = params(2, clean, str(tmp_path / "clean.npz"), extra)
    got, out = params(2, holey, str(tmp_path / "holey.npz"), extra + ["--missing-labels", "drop"])
    assert np.array_equal(got, want)
    assert out.count("labels: missing in %d rows, left out (--missing-labels drop)" % blank.sum()) == 1, out


@pytest.mark.mpi
@pytest.mark.parametrize("n,readers", [(1, "1"), (2, "all"), (3, "all"), (3, "2")])
def test_a_stream_says_how_many_rows_its_readers_left_out(tmp_path, n, readers, launcher):
    """Streamed from three day files, each reader counts the rows it left out; the sum is said once, at the first
    epoch's end, whoever read."""
    (tmp_path / "days").mkdir()
    total = 0
    for d in range(3):
        rows, blank = table(d)
        write(tmp_path / "days" / ("day_%d.csv" % d), rows)
        total += int(blank.sum())
    _, out = params(n, str(tmp_path / "days"), str(tmp_path / "m.npz"), ["--stream", "on", "--sample-rows", "500",
                                                                         "--readers", readers, "--missing-labels",
                                                                         "drop"])
    assert out.count("labels: missing in %d rows, left out (--missing-labels drop)" % total) == 1, out


def test_several_files_a_valid_file_npz_and_parquet_drop_the_same_rows(tmp_path):
    rows, blank = table(2)
    keep = [r for r, b in zip(rows, blank) if not b]
    (tmp_path / "holey").mkdir()
    (tmp_path / "clean").mkdir()
    for k in range(3):      # three day files
        write(tmp_path / "holey" / ("d%d.csv" % k), rows[k * 200:(k + 1) * 200])
        write(tmp_path / "clean" / ("d%d.csv" % k), [r for r, b in zip(rows[k * 200:(k + 1) * 200],
                                                                        blank[k * 200:(k + 1) * 200]) if not b])
    valid_holey, valid_clean = write(tmp_path / "vh.csv", rows[600:]), write(tmp_path / "vc.csv", keep[500:])
    out = {}
    for name, data, valid in (("holey", tmp_path / "holey", valid_holey), ("clean", tmp_path / "clean", valid_clean)):
        r = run([sys.executable] + TRAIN + ["--data", str(data), "--valid", valid, "--missing-labels", "drop",
                                            "--model-out", str(tmp_path / (name + ".npz"))])
        assert r.returncode == 0, r.stderr
        out[name] = np.load(tmp_path / (name + ".npz"))["params"]
    assert np.array_equal(out["holey"], out["clean"])
    x = np.random.default_rng(3).normal(size=(300, 4))
    y = (x[:, 0] > 0).astype(float)
    holes = y.copy()
    holes[::5] = np.nan
    np.savez(tmp_path / "h.npz", X=x, y=holes)
    np.savez(tmp_path / "c.npz", X=x[np.isfinite(holes)], y=y[np.isfinite(holes)])
    for name in ("h", "c"):
        r = run([sys.executable] + TRAIN[:2] + ["--data", str(tmp_path / (name + ".npz")), "--epochs", "2",
                                                "--ensemble", "1", "--missing-labels", "drop", "--model-out",
                                                str(tmp_path / (name + "-m.npz"))])
        assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(tmp_path / "h-m.npz")["params"], np.load(tmp_path / "c-m.npz")["params"])
    import pyarrow as pa
    import pyarrow.parquet as pq
    for name, part in (("hp", rows), ("cp", keep)):
        cells = [r.split(",") for r in part]
        columns = {"day": [int(c[0]) for c in cells], "city": [c[1] for c in cells], "x": [float(c[2]) for c in cells],
                   "clicked": [int(c[3]) if c[3] else None for c in cells]}
        pq.write_table(pa.table(columns), tmp_path / (name + ".parquet"))
        r = run([sys.executable] + TRAIN + ["--data", str(tmp_path / (name + ".parquet")), "--missing-labels", "drop",
                                            "--model-out", str(tmp_path / (name + "-m.npz"))])
        assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(tmp_path / "hp-m.npz")["params"], np.load(tmp_path / "cp-m.npz")["params"])


def test_the_default_refuses_them_naming_the_option_and_no_label_at_all_is_one_line(tmp_path):
    rows, blank = table()
    holey = write(tmp_path / "holey.csv", rows)
    r = run([sys.executable] + TRAIN + ["--data", holey, "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2 and "the label is missing or not a number in %d of %d rows" % (blank.sum(), N) in r.stderr
    assert "--missing-labels drop leaves them out" in r.stderr and not os.path.exists(tmp_path / "m.npz")
    empty = write(tmp_path / "empty.csv", [r.rsplit(",", 1)[0] + "," for r in rows])
    r = run([sys.executable] + TRAIN + ["--data", empty, "--missing-labels", "drop", "--model-out",
                                        str(tmp_path / "m.npz")])
    assert r.returncode == 2 and "has a header but no rows with a label (%d without)" % N in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
