"""--ensemble K: member k is the run --seed S+k alone would be on the rows --seed S holds out (alike for every seed
with --holdout-by last), and the model's predictions are the plain mean of the members' (numpy's mean of separately
trained single models: the reference), at np 1, 2 and 3; the figures reported are the written model's; the model file
round-trips through predict and the scikit-learn estimator; what it does not combine with is refused."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mpinn.api as mp
from conftest import ROOT, mpiexec_path, mpirun, run
from mpinn.core.errors import STOPPED_EXIT


def write_table(path, n, seed, regression=False):
    """A small table: 3 numbers and a category; a binary label from them (or a price)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    cat = rng.choice(list("abcdef"), n)
    z = 1.5 * x[:, 0] - x[:, 1] * x[:, 2] + (cat == "a") - 0.5 * (cat == "b")
    label = np.round(1000 + 300 * z, 2) if regression else (z + rng.logistic(size=n) > 0).astype(int)
    with open(path, "w") as f:
        f.write("x0,x1,x2,kind,label\n")
        for i in range(n):
            f.write("%.6f,%.6f,%.6f,%s,%s\n" % (x[i, 0], x[i, 1], x[i, 2], cat[i], label[i]))


def train(np_, data, model, *extra):
    r = mpirun(np_, ["-m", "mpinn.train", "--data", str(data), "--label", "label", "--dtype", "float64",
                     "--hidden", "16", "--epochs", "4", "--early-stop", "2", "--no-progress", "--model-out",
                     str(model)] + list(extra))
    assert r.returncode == 0, r.stderr
    return r.stdout


def predict(model, data, out):
    r = run([sys.executable, "-m", "mpinn.predict", "--model", str(model), "--data", str(data), "--out", str(out)])
    assert r.returncode == 0, r.stderr
    return np.genfromtxt(str(out), delimiter=",", names=True)


@pytest.mark.mpi
@pytest.mark.parametrize("regression,nps", [(False, (1, 2, 3)), (True, (2,))], ids=["binary", "regression"])
def test_an_ensemble_predicts_the_mean_of_its_members_trained_alone_at_np_1_2_3(tmp_path, regression, nps,
                                                                                 launcher):
    data, test = tmp_path / "train.csv", tmp_path / "test.csv"
    write_table(data, 1200, 0, regression)
    write_table(test, 300, 1, regression)
    column = "prediction" if regression else "p_1"
    alone = []      # each member trained alone, in this process (one rank), and its predictions
    for s in (7, 8, 9):
        path = str(tmp_path / ("s%d.npz" % s))
        mp.train(str(data), label="label", dtype="float64", hidden=(16,), epochs=4, early_stop=2, seed=s,
                 ensemble=1, holdout_by="last", model_out=path, quiet=True)
        alone.append(np.ravel(mp.predict(path, str(test))[0]))
    assert np.abs(alone[0] - alone[1]).max() > 1e-3        # the members differ: the mean is not any one of them
    reference = np.mean(alone, axis=0)
    for np_ in nps:
        model = tmp_path / ("e%d.npz" % np_)
        out = train(np_, data, model, "--seed", "7", "--ensemble", "3", "--numeric-embedding", "off", "--holdout-by",
                    "last")
        assert "model written to %s: 3 members (--seed 7 to 9), their predictions averaged" % model in out
        assert out.count("ensemble: member ") == 3 and "done (the first of 3 members): " in out
        got = predict(model, test, tmp_path / ("e%d.csv" % np_))[column]
        np.testing.assert_allclose(got, reference, rtol=1e-5, atol=2e-6)     # the CSV's 6 decimals
    header = json.loads(str(np.load(str(tmp_path / ("e%d.npz" % nps[0])))["header"]))
    assert header["meta"]["ensemble"]["seeds"] == [7, 8, 9]


def test_the_estimator_averages_its_members_as_separate_estimators_would(tmp_path):
    pytest.importorskip("sklearn")
    import pandas as pd
    from mpinn.sklearn import MpinnClassifier
    write_table(tmp_path / "train.csv", 800, 2)
    write_table(tmp_path / "test.csv", 200, 3)
    frame, test = pd.read_csv(tmp_path / "train.csv"), pd.read_csv(tmp_path / "test.csv")
    X, y, Xt = frame.drop(columns="label"), frame["label"], test.drop(columns="label")
    options = dict(hidden=(16,), epochs=3, dtype="float64", quiet=True, numeric_embedding="off", holdout=0)
    est = MpinnClassifier(ensemble=2, seed=4, **options).fit(X, y)
    assert est.params_.shape[0] == 2
    alone = [MpinnClassifier(seed=s, ensemble=1, **options).fit(X, y).predict_proba(Xt)[:, 1] for s in (4, 5)]
    np.testing.assert_allclose(est.predict_proba(Xt)[:, 1], np.mean(alone, axis=0), rtol=1e-9)


@pytest.mark.mpi
@pytest.mark.parametrize("extra,message", [
    (["--parallel", "tower"], "--ensemble trains its members with --parallel data"),
    (["--ensemble", "0"], "--ensemble: must be"),
])
def test_an_ensemble_refuses_what_it_does_not_combine_with(tmp_path, extra, message, launcher):
    write_table(tmp_path / "train.csv", 200, 4)
    r = mpirun(2, ["-m", "mpinn.train", "--data", str(tmp_path / "train.csv"), "--label", "label", "--ensemble",
                   "2", "--model-out", str(tmp_path / "m.npz")] + extra, cwd=str(tmp_path))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and not (tmp_path / "m.npz").exists()


@pytest.mark.mpi
def test_an_ensemble_stopped_in_its_second_member_resumes_to_the_model_it_would_have_made(tmp_path, launcher):
    """Checkpoints carry the members: member k writes into member-(k+1) below --checkpoint-dir; a signal during
    member 2 stops the run resumably (the line and STOPPED name the run's directory), and --resume DIR ends bit
    for bit where the run without checkpoints ends (member 1 restored from its last checkpoint, member 2 resumed,
    member 3 begun afresh)."""
    data, ck = tmp_path / "train.csv", tmp_path / "ck"
    write_table(data, 600, 5)
    common = ["-m", "mpinn.train", "--data", str(data), "--label", "label", "--dtype", "float64", "--hidden", "16",
              "--epochs", "3", "--batch-size", "64", "--seed", "3", "--ensemble", "3", "--no-progress"]
    r = mpirun(2, common + ["--model-out", str(tmp_path / "plain.npz")])
    assert r.returncode == 0, r.stderr
    cmd = [mpiexec_path(), "-n", "2", sys.executable] + common + [
        "--checkpoint-dir", str(ck), "--checkpoint-every", "4", "--model-out", str(tmp_path / "x.npz")]
    env = dict(os.environ, MPINN_FAULT="slow:0:1+", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                         start_new_session=True)
    try:
        t0, member2 = time.time(), ck / "member-2"
        while not (member2.exists() and any(f.startswith("ckpt-") for f in os.listdir(member2))) \
                and time.time() - t0 < 90:
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == STOPPED_EXIT, (p.returncode, err[-2000:])
    assert "member 1 of 3" in out and "member 2 of 3" not in out       # stopped inside member 2
    assert "continue with --resume %s\n" % ck in err and (ck / "STOPPED").exists()
    assert not (ck / "member-3").exists() and not (tmp_path / "x.npz").exists()
    r = mpirun(2, common + ["--resume", str(ck), "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr
    assert "resumed from %s" % (ck / "ckpt-") in r.stdout and "resumed from %s" % (ck / "member-2" / "ckpt-") \
        in r.stdout and "member-3" not in r.stdout, r.stdout     # member 3 had not begun
    assert not (ck / "STOPPED").exists() and list((ck / "member-3").glob("ckpt-*.npz"))
    with np.load(str(tmp_path / "m.npz")) as got, np.load(str(tmp_path / "plain.npz")) as want:
        assert got["params"].shape[0] == 3 and np.array_equal(got["params"], want["params"])     # bitwise
    for f in ck.glob("ckpt-*.npz"):     # the members' checkpoints alone still make the directory an earlier run's
        f.unlink()
    r = mpirun(2, common + ["--checkpoint-dir", str(ck), "--model-out", str(tmp_path / "y.npz")])
    assert r.returncode == 2 and "holds" in r.stderr and "--overwrite-checkpoints" in r.stderr, r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("regression", [False, True], ids=["binary", "regression"])
def test_with_the_same_held_out_rows_the_ensemble_reports_its_averaged_predictions_metrics(tmp_path, regression,
                                                                                           launcher):
    """With --valid every member holds out the same rows, and the metrics reported (the line, the metrics file) are
    the averaged predictions', equal to what predict computes from the model file on that file (another path:
    mpinn.predict mixes the members' predictions in the label's units), not the first member's."""
    data, valid = tmp_path / "train.csv", tmp_path / "valid.csv"
    write_table(data, 1500, 6, regression)
    write_table(valid, 400, 7, regression)
    model, metrics = tmp_path / "m.npz", tmp_path / "m.json"
    out = train(2, data, model, "--valid", str(valid), "--metrics-out", str(metrics))
    assert "(--seed 0 to 4, the same held-out rows)" in out and "averaged predictions on the held-out rows" in out
    reported = json.load(open(metrics))["valid"]
    r = run([sys.executable, "-m", "mpinn.predict", "--model", str(model), "--data", str(valid), "--out",
             str(tmp_path / "p.csv"), "--metrics-out", str(tmp_path / "p.json")])
    assert r.returncode == 0, r.stderr
    again = json.load(open(tmp_path / "p.json"))
    keys = ("rmse",) if regression else ("accuracy", "logloss", "auc")
    for k in keys:
        assert reported[k] == pytest.approx(again[k], rel=1e-9), (k, reported[k], again[k])
    with np.load(str(model)) as z:
        first = json.loads(str(z["header"]))["meta"]["ensemble"]["valid"][0]
    assert first[keys[0]] != pytest.approx(reported[keys[0]], rel=1e-6)       # not the first member's
    # an independent reference: scikit-learn's metrics of the written predictions (6 decimals) against the labels
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    y = np.genfromtxt(str(valid), delimiter=",", names=True)["label"]
    pred = np.genfromtxt(str(tmp_path / "p.csv"), delimiter=",", names=True)
    if regression:
        rmse = np.sqrt(sklearn_metrics.mean_squared_error(y, pred["prediction"]))
        assert reported["rmse"] == pytest.approx(rmse, rel=1e-6)
    else:
        assert reported["auc"] == pytest.approx(sklearn_metrics.roc_auc_score(y, pred["p_1"]), abs=1e-4)
        assert reported["logloss"] == pytest.approx(sklearn_metrics.log_loss(y, pred["p_1"]), abs=1e-5)


def test_with_a_random_holdout_every_figure_reported_is_the_written_models(tmp_path):
    """The defaults' case (a random holdout): every member holds out the rows --seed S holds out (the seeded draw
    of mpinn.data.base's split), and the figures reported (the closing line, --metrics-out, the API's metrics, the
    curve's last row) are those of the model written: scikit-learn's AUC and log-loss of its predictions on those
    rows; the curve's other rows are the first model's, labelled so."""
    import csv
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    data, model, metrics, curve = (tmp_path / "train.csv", tmp_path / "m.npz", tmp_path / "m.json",
                                   tmp_path / "curve.csv")
    write_table(data, 1500, 8)
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(data), "--label", "label", "--dtype", "float64",
             "--hidden", "16", "--epochs", "4", "--early-stop", "2", "--ensemble", "3", "--numeric-embedding", "off",
             "--seed", "5", "--no-progress", "--model-out", str(model), "--metrics-out", str(metrics), "--curve",
             str(curve), "--log-dir", str(tmp_path / "tb")])
    assert r.returncode == 0, r.stderr
    held = np.sort(np.random.default_rng([5, 7]).permutation(1500)[:150])
    y = np.genfromtxt(str(data), delimiter=",", names=True)["label"][held]
    p = np.ravel(mp.predict(str(model), str(data))[0])[held]      # the written model's predictions on those rows
    auc, logloss = sklearn_metrics.roc_auc_score(y, p), sklearn_metrics.log_loss(y, p)
    reported = json.load(open(metrics))["valid"]
    assert reported["n"] == 150 and reported["auc"] == pytest.approx(auc, abs=1e-9)
    assert reported["logloss"] == pytest.approx(logloss, abs=1e-9)
    (closing,) = [line for line in r.stdout.splitlines() if line.startswith("model written to %s: 3 members" % model)]
    assert closing.endswith(
        "; held-out, the averaged model: accuracy %.4f  logloss %.4f  auc %.4f" % (
            reported["accuracy"], logloss, auc)), closing
    rows = list(csv.DictReader(open(curve)))
    assert {row["model"] for row in rows[:-1]} == {"first"} and rows[-1]["model"] == "averaged"
    assert float(rows[-1]["valid_auc"]) == pytest.approx(auc, rel=1e-5)      # the curve's 6 digits
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = accumulator.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "valid/auc" not in tags and "first_model/valid/auc" in tags
    (point,) = events.Scalars("ensemble/valid/auc")
    assert point.step == int(rows[-1]["step"]) and point.value == pytest.approx(auc, rel=1e-6)   # float32
    first = json.load(open(metrics))["ensemble"]["valid"][0]
    assert first["auc"] != pytest.approx(auc, abs=1e-6)         # not the first member's
    api = mp.train(str(data), label="label", dtype="float64", hidden=(16,), epochs=4, early_stop=2, ensemble=3,
                   numeric_embedding="off", seed=5, quiet=True)
    assert api.metrics["auc"] == pytest.approx(auc, abs=1e-9)
