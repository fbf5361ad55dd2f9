"""Tower mode: the mixture of replicas, and tower = data parallel when there is one tower."""
import json

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.training.towers import fit_weights, mix, mixture_loss
import sys


def test_fitted_weights_favour_the_better_tower_and_never_lose_to_the_mean():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400).astype(float)
    good = np.clip(y * 0.8 + 0.1 + rng.normal(0, 0.05, 400), 0.01, 0.99)
    noise = rng.uniform(0.01, 0.99, 400)
    w = fit_weights("binary", y, [noise, good])
    assert w.sum() == pytest.approx(1) and w[1] > 0.9
    assert mixture_loss("binary", y, mix([noise, good], w)) <= mixture_loss("binary", y, mix([noise, good]))
    bad = np.full(400, np.nan)
    assert list(fit_weights("binary", y, [bad, good])) == [0.0, 1.0]


BASE = ["-m", "mpinn.train", "--default-rows", "6000", "--hash-bits", "12", "--hidden", "16",
        "--batch-size", "256", "--dtype", "float64", "--no-progress", "--epochs", "2"]


@pytest.mark.mpi
def test_one_tower_equals_data_parallel_on_one_rank(tmp_path, launcher):
    out = {}
    for mode in ("data", "tower"):
        one = ["--ensemble", "1"] if mode == "data" else []     # a small table's default: 5 members
        r = mpirun(1, BASE + one + ["--parallel", mode, "--model-out", str(tmp_path / (mode + ".npz")),
                                    "--metrics-out", str(tmp_path / (mode + ".json"))])
        assert r.returncode == 0, r.stderr
        with np.load(tmp_path / (mode + ".npz")) as z:
            out[mode] = (z["params"].reshape(-1), json.load(open(tmp_path / (mode + ".json")))["valid"])
    assert np.array_equal(out["data"][0], out["tower"][0])
    for k in ("accuracy", "logloss", "auc"):
        assert out["data"][1][k] == pytest.approx(out["tower"][1][k], abs=1e-12)


@pytest.mark.mpi
@pytest.mark.parametrize("mix_", ["mean", "fit"])
def test_towers_are_saved_and_predict_mixes_them_as_training_reported(tmp_path, mix_, launcher):
    model, metrics = str(tmp_path / "t.npz"), str(tmp_path / "t.json")
    r = mpirun(3, BASE + ["--parallel", "tower", "--tower-mix", mix_, "--model-out", model, "--metrics-out", metrics])
    assert r.returncode == 0, r.stderr
    assert "towers: " in r.stdout
    with np.load(model) as z:
        params = z["params"]
    assert params.shape[0] == 3 and not np.array_equal(params[0], params[1])   # three different replicas
    valid = json.load(open(metrics))["valid"]
    assert len(valid["towers"]) == 3 and sum(valid["weights"]) == pytest.approx(1)
    p = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--metrics-out", str(tmp_path / "p.json")])
    assert p.returncode == 0, p.stderr
    again = json.load(open(tmp_path / "p.json"))
    for k in ("accuracy", "logloss", "auc"):
        assert again[k] == pytest.approx(valid[k], abs=1e-9)


@pytest.mark.mpi
def test_a_regressions_held_out_rmse_in_tower_mode_is_in_the_labels_units(tmp_path, launcher):
    """The towers' held-out RMSE is what predict finds on the same rows, in the label's units (it was once the
    standardised predictions against the raw labels: about the labels' root mean square)."""
    rng = np.random.default_rng(0)
    for name, n in (("train", 3000), ("valid", 600)):
        x = rng.normal(size=(n, 3))
        price = 4000 + 3000 * x[:, 0] - 1000 * x[:, 1] * x[:, 2] + 300 * rng.normal(size=n)
        np.savetxt(str(tmp_path / (name + ".csv")), np.column_stack([x, price]), delimiter=",", fmt="%.6f",
                   header="a,b,c,price", comments="")
    model, metrics = str(tmp_path / "t.npz"), str(tmp_path / "t.json")
    r = mpirun(2, ["-m", "mpinn.train", "--data", str(tmp_path / "train.csv"), "--valid", str(tmp_path / "valid.csv"),
                   "--label", "price", "--parallel", "tower", "--tower-data", "same", "--dtype", "float64",
                   "--epochs", "3", "--no-progress", "--model-out", model, "--metrics-out", metrics])
    assert r.returncode == 0, r.stderr
    valid = json.load(open(metrics))["valid"]
    p = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", str(tmp_path / "valid.csv"),
             "--metrics-out", str(tmp_path / "p.json"), "--out", str(tmp_path / "p.csv")])
    assert p.returncode == 0, p.stderr
    assert json.load(open(tmp_path / "p.json"))["rmse"] == pytest.approx(valid["rmse"], rel=1e-9)
    # numpy's RMSE of the written predictions against the file's labels
    truth = np.loadtxt(str(tmp_path / "valid.csv"), delimiter=",", skiprows=1)[:, 3]
    pred = np.loadtxt(str(tmp_path / "p.csv"), delimiter=",", skiprows=1)
    assert np.sqrt(np.mean((pred - truth) ** 2)) == pytest.approx(valid["rmse"], rel=1e-6)
    assert valid["rmse"] < 2000 and all(t["rmse"] < 2000 for t in valid["towers"])     # the labels' RMS is 5000


@pytest.mark.mpi
def test_towers_refuse_checkpoints_clearly(tmp_path, launcher):
    r = mpirun(2, BASE + ["--parallel", "tower", "--checkpoint-dir", str(tmp_path / "ck")])
    assert r.returncode == 2 and "--parallel tower does not write or resume checkpoints yet" in r.stderr


@pytest.mark.mpi
def test_local_sgd_refuses_checkpoints_clearly(tmp_path, launcher):
    r = mpirun(2, BASE + ["--average-every", "3", "--checkpoint-dir", str(tmp_path / "ck")])
    assert r.returncode == 2 and "--average-every does not write or resume checkpoints yet" in r.stderr
