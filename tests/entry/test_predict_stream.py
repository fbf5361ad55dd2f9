"""python -m mpinn.predict --stream (issue 36): table files predicted a block of 65536 rows at a time write the same
bytes as the files read whole (blocks cut across the files' ends, as reading whole cuts them), for a binary, a
multiclass and a regression model, with an --id column, with no label and with some labels missing (those rows
predicted, the others scored); a bad file in the middle is one line,
exit 2, and no predictions file; the memory stays bounded under a memory cgroup that the same rows read whole
exceed."""
import json
import os
import sys

import numpy as np
import pytest

from conftest import run

ROWS = 22_000           # a file; three files: 66,000 rows, two blocks of predictions, the first ending in the third file


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Three CSV files (the second gzipped) of one table: a user id, a city, two numbers, three labels."""
    import gzip
    d = tmp_path_factory.mktemp("days")
    rng = np.random.default_rng(0)
    n = 3 * ROWS
    user, city = rng.integers(0, 5000, n), rng.choice(["paris", "lyon", "nice", "metz"], n)
    x, amount = rng.normal(size=n), rng.exponential(size=n)
    clicked = (x + (city == "paris") + rng.normal(size=n) > 0.5).astype(int)
    kind = np.where(x > 0.7, "high", np.where(x < -0.7, "low", "mid"))
    value = 3 * x + amount + rng.normal(size=n)
    lines = ["user_id,city,x,amount,clicked,kind,value"] + [
        "%d,%s,%.5f,%.5f,%d,%s,%.5f" % r for r in zip(user, city, x, amount, clicked, kind, value)]
    paths = []
    for i in range(3):
        text = "\n".join(lines[:1] + lines[1 + i * ROWS:1 + (i + 1) * ROWS]) + "\n"
        path = str(d / ("day_%d.csv%s" % (i, ".gz" if i == 1 else "")))
        with (gzip.open(path, "wt") if i == 1 else open(path, "w")) as f:
            f.write(text)
        paths.append(path)
    return d, paths


@pytest.fixture(scope="module")
def models(days, tmp_path_factory):
    """model(label): a model trained on the first file for that label, trained once."""
    made, tmp = {}, tmp_path_factory.mktemp("models")

    def model(label):
        if label not in made:
            made[label] = model_for(days, tmp, label)
        return made[label]
    return model


def model_for(days, tmp, label):
    d, paths = days
    model = str(tmp / ("m-%s.npz" % label))
    r = run([sys.executable, "-m", "mpinn.train", "--data", paths[0], "--label", label, "--numeric", "x,amount",
             "--categorical", "user_id,city", "--epochs", "1", "--hidden", "8", "--no-progress", "--model-out", model],
            timeout=180)
    assert r.returncode == 0, r.stderr
    return model


def predict(model, data, tmp, stream, extra=()):
    out, metrics = str(tmp / ("p-%s.csv" % stream)), str(tmp / ("m-%s.json" % stream))
    r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", data, "--stream", stream,
             "--out", out, "--metrics-out", metrics] + list(extra), timeout=180)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        text = f.read()
    return text, json.load(open(metrics)), r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("label", ["clicked", "kind", "value"], ids=["binary", "multiclass", "regression"])
def test_a_stream_predicts_the_same_bytes_as_the_files_read_whole(days, models, tmp_path, label):
    d, paths = days
    model = models(label)
    whole, m_whole, _ = predict(model, str(d), tmp_path, "off", ["--id", "user_id"])
    streamed, m_streamed, out = predict(model, str(d), tmp_path, "on", ["--id", "user_id"])
    assert whole.count("\n") == 3 * ROWS + 1 and whole.startswith("user_id,prediction")
    assert streamed == whole
    assert "streamed a block of 65536 rows at a time; peak memory (RSS)" in out
    # the metrics: sums over two blocks (the same terms, added in another order) and the AUC over every row
    assert m_streamed.keys() == m_whole.keys()
    for k, v in m_whole.items():
        assert np.allclose(m_streamed[k], v, rtol=1e-12, atol=0), (k, m_streamed[k], v)
    # and against scikit-learn / numpy on the labels and the written predictions (rounded to 6 or 8 digits there)
    import pandas as pd
    truth = pd.concat([pd.read_csv(p) for p in paths])[label].to_numpy()
    got = pd.read_csv(tmp_path / "p-on.csv")
    assert np.array_equal(got["user_id"].to_numpy(), pd.concat([pd.read_csv(p) for p in paths])["user_id"].to_numpy())
    if label == "clicked":
        from sklearn.metrics import roc_auc_score
        assert abs(roc_auc_score(truth, got["p_1"]) - m_streamed["auc"]) < 1e-4
    elif label == "kind":
        assert np.mean(got["prediction"].to_numpy() == truth) == pytest.approx(m_streamed["accuracy"], abs=1e-12)
    else:
        rmse = np.sqrt(np.mean((got["prediction"].to_numpy() - truth) ** 2))
        assert rmse == pytest.approx(m_streamed["rmse"], rel=1e-6)


@pytest.mark.slow
def test_rows_without_a_label_are_predicted_and_not_scored(days, models, tmp_path):
    d, paths = days
    model = models("clicked")
    bare = tmp_path / "bare.csv"
    with open(paths[2]) as f:
        rows = [line.rstrip("\n").split(",") for line in f]
    keep = [i for i, c in enumerate(rows[0]) if c not in ("clicked", "kind", "value")]
    bare.write_text("\n".join(",".join(r[i] for i in keep) for r in rows) + "\n")
    whole, _, _ = predict(model, str(bare), tmp_path, "off")
    streamed, metrics, out = predict(model, str(bare), tmp_path, "on")
    assert streamed == whole and whole.count("\n") == ROWS + 1
    assert metrics == {"n": ROWS} and "%d rows (no labels: no metrics)" % ROWS in out


@pytest.mark.slow
@pytest.mark.parametrize("label", ["clicked", "kind", "value"], ids=["binary", "multiclass", "regression"])
def test_rows_whose_label_is_missing_are_predicted_and_the_others_scored(days, models, tmp_path, label):
    """A file with some labels unknown (rows not yet resolved): every row predicted, as with every label there,
    and the metrics those of the labelled rows alone, read whole or streamed (training still refuses them)."""
    import gzip
    import pandas as pd
    d, paths = days
    model = models(label)
    holey = tmp_path / "holey"
    holey.mkdir()
    column, dropped = None, 0
    for i, p in enumerate(paths):
        with (gzip.open(p, "rt") if p.endswith(".gz") else open(p)) as f:
            rows = [line.rstrip("\n").split(",") for line in f]
        column = rows[0].index(label)
        for j in range(1 + i, len(rows), 7):       # every 7th row's label blank
            rows[j][column] = ""
            dropped += 1
        (holey / os.path.basename(p).replace(".gz", "")).write_text("\n".join(",".join(r) for r in rows) + "\n")
    full, _, _ = predict(model, str(d), tmp_path, "off")
    for stream in ("off", "on"):
        got, metrics, out = predict(model, str(holey), tmp_path, stream)
        assert got == full
        assert "%d rows, %d of them without a label (predicted, not scored): " % (3 * ROWS, dropped) in out
        assert metrics["unlabelled"] == dropped and metrics["n"] == 3 * ROWS - dropped
        truth = pd.concat([pd.read_csv(p, keep_default_na=False) for p in sorted(holey.iterdir())])[label]
        known = (truth.astype(str) != "").to_numpy()
        pred = pd.read_csv(tmp_path / ("p-%s.csv" % stream))
        if label == "clicked":
            from sklearn.metrics import roc_auc_score
            assert abs(roc_auc_score(truth[known].astype(int), pred["p_1"][known]) - metrics["auc"]) < 1e-4
        elif label == "kind":
            assert np.mean(pred["prediction"].to_numpy()[known] == truth.to_numpy()[known]) == pytest.approx(
                metrics["accuracy"], abs=1e-12)
        else:
            err = pred["prediction"].to_numpy()[known] - truth[known].astype(float).to_numpy()
            assert np.sqrt(np.mean(err ** 2)) == pytest.approx(metrics["rmse"], rel=1e-6)
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(holey), "--label", label, "--model-out",
             str(tmp_path / "t.npz")])
    assert r.returncode == 2 and "the label is missing or not a number in" in r.stderr, r.stderr


def test_a_bad_file_in_the_middle_is_one_line_and_no_predictions(days, models, tmp_path):
    d, paths = days
    model = models("clicked")
    broken = tmp_path / "broken"
    broken.mkdir()
    for i, p in enumerate(paths):
        with open(p, "rb") as f:
            data = f.read()
        os.symlink(p, broken / os.path.basename(p)) if i != 1 else (broken / os.path.basename(p)).write_bytes(
            data[:len(data) // 2])          # a gzip file cut short
    out = tmp_path / "p.csv"
    r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", str(broken), "--stream", "on",
             "--out", str(out)], timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpinn: error:") and "day_1.csv.gz" in lines[0], r.stderr
    assert not out.exists() and not [f for f in os.listdir(tmp_path) if f.startswith(".p.csv")]


def test_a_stream_of_files_with_no_rows_is_one_line_naming_them(days, models, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for i in range(2):
        (empty / ("day_%d.csv" % i)).write_text("user_id,city,x,amount,clicked,kind,value\n")
    r = run([sys.executable, "-m", "mpinn.predict", "--model", models("clicked"), "--data", str(empty), "--stream",
             "on"], timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == "mpinn: error: 2 files, %s .. %s: no rows" % (
        empty / "day_0.csv", empty / "day_1.csv"), r.stderr


def test_stream_on_for_rows_that_cannot_stream_is_one_line(tmp_path):
    X = np.random.default_rng(0).normal(size=(200, 3))
    np.savez(str(tmp_path / "a.npz"), X=X, y=(X[:, 0] > 0).astype(int))
    model = str(tmp_path / "m.npz")
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(tmp_path / "a.npz"), "--epochs", "1",
             "--no-progress", "--model-out", model], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", str(tmp_path / "a.npz"),
             "--stream", "on"], timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == (
        "mpinn: error: --stream on: the model was trained on arrays, read whole"), r.stderr


@pytest.mark.launch
@pytest.mark.slow
def test_a_stream_predicts_800k_log_rows_under_a_memory_limit(tmp_path, memory_group):
    """W4 text, 800,000 rows in two files (200 MB), predicted inside a memory cgroup of 600 MiB with the files'
    pages evicted first (the group pays for every page it reads). Read whole (--stream off), the same rows take
    the process to 840 MiB, and the same limit kills it (checked by hand: --stream off). The floor, about 440 MiB,
    is the imports, the model and pyarrow's reader, whatever the rows."""
    import subprocess
    from scripts.bench.larger_than_memory.runs import evict
    d = tmp_path / "days"
    d.mkdir()
    made = [subprocess.Popen([sys.executable, "-m", "mpinn.bench.w4", "--rows", "400000", "--start", str(i * 400_000),
                              "--scale", "100", "--out", str(d / ("day_%d.tsv" % i)), "--quiet"]) for i in range(2)]
    assert [p.wait(timeout=120) for p in made] == [0, 0]
    head = tmp_path / "head.tsv"
    with open(d / "day_0.tsv") as f:
        head.write_text("".join(next(f) for _ in range(20_000)))
    model = str(tmp_path / "m.npz")
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(head), "--epochs", "1", "--hash-bits", "16",
             "--no-progress", "--model-out", model], timeout=120)
    assert r.returncode == 0, r.stderr
    group = memory_group(600 * 1024 * 1024, "mpinn-test-predict")
    evict(str(d))
    r = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", str(d), "--stream", "on",
                        "--out", str(tmp_path / "p.csv")], capture_output=True, text=True, timeout=300,
                       preexec_fn=group.enter, env=dict(os.environ, OMP_NUM_THREADS="1"))
    stats = group.stats()
    assert r.returncode == 0 and stats["oom_kills"] == 0, (r.returncode, stats, r.stderr[-2000:])
    assert "800000 rows: accuracy" in r.stdout, r.stdout
    with open(tmp_path / "p.csv") as f:
        assert sum(1 for _ in f) == 800_001
