"""A predictor loaded once (issue 64): Predictor(model_path) reads the model file a single time and scores a file, a
DataFrame, row dicts or one row dict with the bits of mpinn.api.predict and python -m mpinn.predict."""
import csv
import os
import sys

import numpy as np
import pytest

import mpinn.api as mp
from conftest import run
from mpinn.core.errors import MpinnError
from mpinn.inference import predictor as predictor_module
from mpinn.inference.predictor import Predictor


def write_table(path, n=400, seed=0):
    """A small click table: a text and an integer category, two numbers (one with missing cells), a yes/no label
    and a regression target."""
    rng = np.random.default_rng(seed)
    site = rng.choice(["a1", "b2", "c3", "d4"], n)
    app = rng.integers(0, 7, n)
    hour = rng.integers(0, 24, n)
    price = np.round(rng.gamma(2.0, 1.5, n), 3)
    clicked = np.where((site == "a1") | (price > 4) | (rng.random(n) < 0.1), "yes", "no")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["site", "app", "hour", "price", "clicked", "spend"])
        for i in range(n):
            w.writerow([site[i], app[i], hour[i], "" if i % 17 == 0 else price[i], clicked[i],
                        round(float(hour[i]) * 0.5 + price[i], 3)])


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("predictor")
    data = str(d / "clicks.csv")
    write_table(data)
    models = {}
    for name, label in (("binary", "clicked"), ("regression", "spend")):
        models[name] = str(d / ("%s.npz" % name))
        r = run([sys.executable, "-m", "mpinn.train", "--data", data, "--label", label, "--categorical", "site,app",
                 "--numeric", "hour,price", "--hidden", "8", "--epochs", "2", "--ensemble", "1", "--no-progress",
                 "--quiet", "--model-out", models[name]], cwd=str(d))
        assert r.returncode == 0, r.stderr
    return d, data, models


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_a_file_a_frame_and_row_dicts_score_as_the_api_does_to_the_bit(table, task):
    pd = pytest.importorskip("pandas")
    d, data, models = table
    want, metrics = mp.predict(models[task], data)
    assert metrics["n"] == 400
    p = Predictor(models[task])
    moved = models[task] + ".moved"
    os.replace(models[task], moved)         # the model file is gone: the predictor never opens it again
    try:
        frame = pd.read_csv(data)
        records = frame.to_dict("records")
        with open(data) as f:
            text_rows = list(csv.DictReader(f))     # every cell as the file's text
        for got in (p.predict(data), p.predict(frame), p.predict(records), p.predict(text_rows),
                    p.scored(data)[0]):
            assert got.dtype == want.dtype and np.array_equal(got, want), np.abs(got - want).max()
        # one row: a product of one row's shape, the same bits however the row comes (to float32's last bits
        # those of the row among 400: BLAS sums a batch's products in another order)
        one = p.predict(records[5])
        assert one.shape == want[5:6].shape and np.allclose(one, want[5:6], rtol=1e-5, atol=1e-6)
        assert np.array_equal(one, p.predict(frame.iloc[5:6])) and np.array_equal(one, p.predict(text_rows[5]))
        first = str(d / "first.csv")
        with open(data) as f, open(first, "w") as g:
            g.writelines(line for _, line in zip(range(7), f))       # the header and rows 1-6
        assert np.array_equal(p.predict(records[:6]), mp.predict(moved, first)[0])
        assert p.scored(data)[1] == metrics
    finally:
        os.replace(moved, models[task])
    if task == "binary":
        assert p.classes == ["no", "yes"]
        proba = p.predict_proba(records[:3])
        assert np.array_equal(proba[:, 1], want[:3]) and np.allclose(proba.sum(axis=1), 1.0)
    else:
        assert p.classes is None
        with pytest.raises(MpinnError, match="regression"):
            p.predict_proba(records[:1])


def test_the_predict_command_writes_the_predictors_predictions(table):
    d, data, models = table
    out = str(d / "pred.csv")
    r = run([sys.executable, "-m", "mpinn.predict", "--model", models["binary"], "--data", data, "--out", out],
            cwd=str(d))
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        written = [row["p_yes"] for row in csv.DictReader(f)]
    assert written == ["%.6g" % v for v in Predictor(models["binary"]).predict(data)]


def test_the_model_file_is_loaded_once(table, monkeypatch):
    _, data, models = table
    calls = []
    real = predictor_module.load_checked
    monkeypatch.setattr(predictor_module, "load_checked", lambda path: calls.append(path) or real(path))
    p = Predictor(models["binary"])
    for _ in range(3):
        p.predict(data)
        p.predict({"site": "a1", "app": 3, "hour": 12, "price": 2.5})
    assert calls == [models["binary"]]
    mp.predict(models["binary"], data)      # the API: a predictor made for the call, the file read once
    assert calls == [models["binary"]] * 2


def test_bad_rows_are_answered_in_one_line(table):
    pd = pytest.importorskip("pandas")
    _, _, models = table
    p = Predictor(models["binary"])
    row = {"site": "zz", "app": 99, "hour": 3, "price": None}       # unseen categories, a missing number: scored
    assert p.predict(row).shape == (1,)
    cases = [({"site": "a1", "app": 1, "hour": 3}, "row 1 has no column 'price'"),
             ([row, {"site": "a1", "app": 1, "hour": "noon", "price": 1.0}], "row 2: column 'hour' holds 'noon'"),
             (pd.DataFrame({"site": ["a1"], "app": [1], "hour": [3]}), "the DataFrame has no column 'price'"),
             (pd.DataFrame({"site": ["a1"], "app": [1], "hour": ["noon"], "price": [1.0]}),
              r"the DataFrame's column 'hour' holds \w+ values, not numbers"),
             ([], "no rows to predict"), (42, "cannot predict a int")]
    for data, message in cases:
        with pytest.raises(MpinnError, match=message) as e:
            p.predict(data)
        assert "\n" not in str(e.value)


def test_a_model_trained_on_arrays_scores_arrays_not_named_rows(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = np.where(X[:, 0] > 0, "yes", "no")
    mp.train(mp.arrays(X, y), hidden=(4,), epochs=2, ensemble=1, quiet=True, no_progress=True,
             model_out=str(tmp_path / "m.npz"))
    p = Predictor(str(tmp_path / "m.npz"))
    new = mp.arrays(X[:50], y[:50])
    assert np.array_equal(p.predict(new), mp.predict(str(tmp_path / "m.npz"), mp.arrays(X[:50], y[:50]))[0])
    with pytest.raises(MpinnError, match="trained on arrays, not on named columns"):
        p.predict({"x0": 1.0})
