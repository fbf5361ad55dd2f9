"""Tab-separated values with a header (.tsv, .tab, maybe .gz; or tabs and no comma in a .csv or .txt file's first
line) are read as CSV is, with a tab between fields: the same rows, so the same model, read whole or streamed, at
np 1, 2 and 3; predict and prepare read them; a value may hold a comma; click-log text named .tsv stays click-log
text."""
import gzip
import os
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.data import DataSpec, load_data
from mpinn.data.files import data_format
from mpinn.data.formats.csvtext import separator

HEADER = ["y", "city", "x", "n", "day"]


def table(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    cities = ["Paris, TX", "Lyon", "Nice", "Bergen", "Oslo"]       # a comma inside a value
    rows = []
    for i in range(n):
        c = rng.integers(0, len(cities))
        x = rng.normal()
        rows.append([str(int(x + 0.3 * c + rng.normal() > 0.5)), cities[c], "%.4f" % x, str(rng.integers(0, 50)),
                     "2026-03-%02d" % (1 + 28 * i // n)])
    return rows


def write(path, rows, sep):
    quote = (lambda v: '"%s"' % v if "," in v else v) if sep == "," else (lambda v: v)
    text = "\n".join(sep.join(quote(v) for v in r) for r in [HEADER] + rows) + "\n"
    with (gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")) as f:
        f.write(text)
    return path


@pytest.fixture
def files(tmp_path):
    rows = table()
    out = {"csv": write(str(tmp_path / "t.csv"), rows, ",")}
    for name in ("t.tsv", "t.tab", "t.tsv.gz", "tabs.csv", "tabs.txt"):
        out[name] = write(str(tmp_path / name), rows, "\t")
    return out


def test_tab_separated_files_load_as_the_csv(files):
    spec = DataSpec(label="y", categorical=["city"], numeric=["x", "n"])
    want = load_data(files["csv"], spec)
    for name in ("t.tsv", "t.tab", "t.tsv.gz", "tabs.csv", "tabs.txt"):
        assert separator(files[name]) == "\t" and data_format(files[name]) == "csv", name
        got = load_data(files[name], spec)
        assert (got.Xs != want.Xs).nnz == 0 and np.array_equal(got.Xd, want.Xd) and np.array_equal(got.y, want.y)
    assert separator(files["csv"]) == ","


def test_pyarrows_reader_reads_them_without_falling_back(files, monkeypatch):
    """The fast reader is given the tab: a chunk it cannot parse goes to the csv module, the same rows but slower."""
    pytest.importorskip("pyarrow")
    from mpinn.data.formats.tables import TableSource
    monkeypatch.setattr(TableSource, "_csv_python_parts", lambda self, skip=0: pytest.fail("fell back: " + self.path))
    for name in ("csv", "t.tsv", "t.tsv.gz", "tabs.csv"):
        source = TableSource(files[name], "y", ["city"], ["x", "n"])
        assert sum(part.n for part in source.parts()) == 1200, name


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_tsv_trains_the_csvs_model_whole_and_streamed(files, tmp_path, n, launcher):
    base = ["-m", "mpinn.train", "--label", "y", "--epochs", "2", "--hidden", "8", "--ensemble", "1", "--no-progress",
            "--dtype", "float64"]
    for stream in ("off", "on"):
        models = []
        for name in ("csv", "t.tsv.gz"):
            out = str(tmp_path / ("%s-%s-%d.npz" % (name, stream, n)))
            more = ["--stream", "on", "--sample-rows", "500"] if stream == "on" else ["--holdout-by", "time:day"]
            r = mpirun(n, base + ["--data", files[name], "--model-out", out] + more)
            assert r.returncode == 0, r.stderr[-2000:]
            with np.load(out) as z:
                models.append(z["params"])
        assert np.array_equal(models[0], models[1]), stream


def test_predict_and_prepare_read_a_tsv(files, tmp_path):
    model, pred_csv, pred_tsv = (str(tmp_path / f) for f in ("m.npz", "p1.csv", "p2.csv"))
    r = run([sys.executable, "-m", "mpinn.train", "--data", files["csv"], "--label", "y", "--epochs", "1",
             "--hidden", "8", "--ensemble", "1", "--no-progress", "--model-out", model])
    assert r.returncode == 0, r.stderr
    for data, out in ((files["csv"], pred_csv), (files["t.tsv"], pred_tsv)):
        r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", data, "--out", out])
        assert r.returncode == 0, r.stderr
    assert open(pred_csv).read() == open(pred_tsv).read()
    packed = str(tmp_path / "t.mpinn")
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", files["t.tab"], "--label", "y", "--out", packed,
             "--quiet"])
    assert r.returncode == 0 and os.path.exists(packed), r.stderr
    assert len(load_data(packed)) == 1200


def test_click_log_text_named_tsv_stays_click_log_text(tmp_path):
    path = str(tmp_path / "day.tsv")
    r = run([sys.executable, "-m", "mpinn.bench.w4", "--rows", "50", "--scale", "1000", "--out", path, "--quiet"])
    assert r.returncode == 0, r.stderr
    assert data_format(path) == "criteo"
    r = run([sys.executable, "-m", "mpinn.train", "--data", path, "--holdout-by", "time:day", "--no-progress"])
    assert r.returncode == 2 and "--holdout-by" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
