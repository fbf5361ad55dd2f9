"""End to end on data shaped like real tables: heavy-tailed and missing numbers, string labels, bad input,
early stopping and the best epoch, under a real mpiexec."""
import json
import re

import numpy as np
import pytest

from conftest import mpirun, run
import sys


def income_csv(path, n, seed, rows_with_text=()):
    """A census-like table: a job (string), age, money (non-negative, heavy-tailed, up to 1e6), hours
    with missing cells; the label '<=50K' / '>50K' depends on all of them."""
    rng = np.random.default_rng(seed)
    job = rng.choice(["clerk", "sales", "exec", "farming", "tech"], n)
    age = rng.integers(17, 90, n)
    money = np.where(rng.random(n) < 0.3, np.minimum(rng.lognormal(8, 2.5, n), 1e6), 0.0)
    hours = rng.normal(40, 12, n)
    logit = (np.log1p(money) - 4) * 0.6 + (age - 40) / 15 + (job == "exec") * 1.5 + (hours - 40) / 20 - 0.5
    label = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), ">50K", "<=50K")
    with open(path, "w") as f:
        f.write("job,age,money,hours,income\n")
        for i in range(n):
            h = "" if i % 17 == 3 else ("NA" if i % 23 == 5 else "%.1f" % hours[i])
            f.write("%s,%d,%s,%s,%s\n" % (job[i], age[i], "lots" if i in rows_with_text else "%.2f" % money[i],
                                          h, label[i]))
    return str(path)


COLUMNS = ["--label", "income", "--categorical", "job", "--numeric", "age,money,hours"]


def train(n, args, tmp_path, timeout=180, env=None):
    model, metrics = str(tmp_path / "model.npz"), str(tmp_path / "metrics.json")
    r = mpirun(n, ["-m", "mpinn.train", "--model-out", model, "--metrics-out", metrics] + list(args),
               timeout, env=env)
    return r, model, metrics


def first_step_loss(r):
    return float(re.search(r"step 1/\d+ loss (\S+)", r.stderr).group(1))


@pytest.mark.mpi
def test_heavy_tailed_numbers_and_a_string_label_train_and_predict_applies_the_transform(tmp_path, launcher,
                                                                                         monkeypatch):
    tr, va = income_csv(tmp_path / "tr.csv", 3000, 1), income_csv(tmp_path / "va.csv", 800, 2)
    r, model, metrics = train(2, ["--data", tr, "--valid", va, "--epochs", "4", "--hidden", "8", "--ensemble", "1"] +
                              COLUMNS, tmp_path)       # one model: its held-out metrics are predict's
    assert r.returncode == 0, r.stderr
    assert "task binary (positive class '>50K')" in r.stdout
    assert ("preprocessing: 3 numeric columns standardised; log1p first for 1 heavy-tailed: money; missing "
            "values imputed with the mean and flagged in 1 column (hours)") in r.stdout
    loss = first_step_loss(r)
    assert np.isfinite(loss) and loss < 1.0, loss           # about log 2: the inputs are on one scale
    reported = json.load(open(metrics))["valid"]
    assert reported["auc"] > 0.8 and reported["accuracy"] > 0.7, reported
    p = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", va, "--metrics-out",
             str(tmp_path / "p.json"), "--out", str(tmp_path / "p.csv")])
    assert p.returncode == 0, p.stderr
    again = json.load(open(tmp_path / "p.json"))
    for k in ("accuracy", "logloss", "auc"):
        assert again[k] == pytest.approx(reported[k], abs=1e-12)
    assert open(tmp_path / "p.csv").readline().strip() == "prediction,p_>50K"
    # a predict that skipped the transform would be far from what training reported
    from mpinn.data.fit.transform import NumericTransform
    from mpinn.inference import load, score
    from mpinn.inference.predictor import Predictor
    for module in (load, score):        # where a file is read (load_for_model) and where rows are given (rows_for)
        monkeypatch.setattr(module, "use_transform", lambda data, meta, where: None)
    with pytest.raises(ValueError, match="mismatch"):      # the indicator input is missing: 3 inputs for 4
        Predictor(model).scored(va)
    for module in (load, score):
        monkeypatch.setattr(module, "use_transform", lambda data, meta, where: setattr(
            data, "transform", NumericTransform.fit(data.numeric_stats(), "none")))    # the raw numbers, imputed
    untransformed = Predictor(model).scored(va)[1]
    assert abs(untransformed["logloss"] - reported["logloss"]) > 0.1, untransformed
    # the same run with the numbers as they are: the money column swamps the first step
    r, _, _ = train(2, ["--data", tr, "--valid", va, "--epochs", "1", "--hidden", "8",
                        "--numeric-transform", "none"] + COLUMNS, tmp_path)
    assert r.returncode == 0, r.stderr
    assert not first_step_loss(r) < 10


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_tables_are_one_line_and_exit_2_on_every_rank_count(tmp_path, n, launcher):
    text = income_csv(tmp_path / "text.csv", 300, 1, rows_with_text=(41,))
    missing = tmp_path / "missing.csv"
    missing.write_text("job,age,money,hours,income\n" + "".join("x,%d,,NA,%s\n" % (i, "a" if i % 2 else "b")
                                                                for i in range(30)))
    one = tmp_path / "one.csv"
    one.write_text("job,age,money,hours,income\n" + "".join("x,%d,1,2,yes\n" % i for i in range(30)))
    for data, message in ((text, "line 43: column 'money' is not a number: 'lots'"),
                          (str(missing), "numeric column 'money' has no values (all 30 rows missing"),
                          (str(one), "the label column 'income' holds one value ('yes') in all")):
        r, model, _ = train(n, ["--data", data, "--epochs", "1"] + COLUMNS, tmp_path, timeout=60)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert r.returncode == 2 and len(lines) == 1, (data, r.returncode, r.stderr)
        assert lines[0].startswith("mpinn: error: ") and message in lines[0], lines
        assert not (tmp_path / "model.npz").exists()


def overfitting_csv(path, n, seed):
    """Few rows, a unique id per row and noisy labels: held-out log-loss turns up after a few epochs."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-2 * x)), "b", "a")
    with open(path, "w") as f:
        f.write("id,x,y\n")
        for i in range(n):
            f.write("r%d_%d,%.5f,%s\n" % (seed, i, x[i], y[i]))
    return str(path)


@pytest.mark.mpi
def test_early_stop_keeps_the_best_epoch_bitwise_and_resume_stays_exact(tmp_path, launcher):
    data = overfitting_csv(tmp_path / "d.csv", 600, 1)
    common = ["--data", data, "--label", "y", "--categorical", "id", "--numeric", "x", "--hidden", "32",
              "--lr", "1", "--batch-size", "60", "--dtype", "float64", "--hash-bits", "12", "--no-progress",
              "--ensemble", "1", "--epochs", "15", "--lr-decay", "none"]
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    r, model, metrics = train(2, common + ["--early-stop", "2", "--checkpoint-dir", str(tmp_path / "ck0")], ref_dir)
    assert r.returncode == 0, r.stderr
    out = json.load(open(metrics))
    best, ran = out["summary"]["kept_epoch"], len(out["history"])
    assert "early stop" in r.stdout and ran == best + 2 and ran < 15, (best, ran, r.stdout)
    logloss = [h["valid"]["logloss"] for h in out["history"]]
    assert logloss[best - 1] == min(logloss) and out["valid"] == out["history"][best - 1]["valid"]
    with np.load(model) as z:
        kept = z["params"]
    # a run told to stop at that epoch, keeping its last, holds the same bits
    stop_dir = tmp_path / "stop"
    stop_dir.mkdir()
    r, model2, _ = train(2, common[:-4] + ["--epochs", str(best), "--keep", "last", "--early-stop", "0"], stop_dir)
    assert r.returncode == 0, r.stderr
    with np.load(model2) as z:
        assert np.array_equal(z["params"], kept)
    # killed an epoch after the best one (the checkpoint holds the best parameters apart from the current
    # ones), then resumed: the same end
    steps = 540 // 60                             # 600 rows, 10% held out, 60 a step
    ck = tmp_path / "ck"
    kill_dir = tmp_path / "kill"
    kill_dir.mkdir()
    r, _, _ = train(2, common + ["--early-stop", "2", "--checkpoint-dir", str(ck)], kill_dir,
                    env={"MPINN_FAULT": "kill:1:%d" % ((best + 1) * steps + 3)})
    assert r.returncode != 0
    r, model3, metrics3 = train(2, common + ["--early-stop", "2", "--resume", str(ck)], kill_dir)
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr
    with np.load(model3) as z:
        assert np.array_equal(z["params"], kept)
    again = json.load(open(metrics3))
    assert again["summary"]["kept_epoch"] == best and [h["valid"] for h in again["history"]] == \
        [h["valid"] for h in out["history"]]
