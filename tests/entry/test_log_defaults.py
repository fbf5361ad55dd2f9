"""A log's defaults (issue 37, item 3), through the CLI: the embedded click log (hashed, 108,000 training rows) is
one pass with 4 held-out checks in it (3 inside, and the end), said on the config line; with --keep best (the default) the kept
parameters are those of the best evaluation, a point inside an epoch included, and predict's held-out metrics are
that point's, as the curve file recorded them."""
import json
import re
import sys

import pytest

from conftest import mpirun, run


@pytest.mark.mpi
def test_a_log_is_one_pass_checked_four_times(tmp_path, launcher):
    r = mpirun(2, ["-m", "mpinn.train", "--default-rows", "120000", "--no-progress", "--hidden", "16",
                   "--model-out", str(tmp_path / "m.npz")], timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    config = next(line for line in r.stdout.splitlines() if line.startswith("config:"))
    assert "--epochs 1" in config.split("chosen from the data")[1] and "--eval-every 106" in config   # 422 steps of 256
    assert len([line for line in r.stdout.splitlines() if line.startswith("step ")]) == 3       # + the epoch's end
    assert "epoch 1/1" in r.stdout


@pytest.mark.mpi
def test_the_best_point_inside_an_epoch_is_the_one_kept(tmp_path, launcher):
    model, curve = str(tmp_path / "m.npz"), str(tmp_path / "curve.jsonl")
    r = mpirun(2, ["-m", "mpinn.train", "--default-rows", "40000", "--epochs", "2", "--eval-every", "10", "--lr",
                   "0.05", "--no-progress", "--curve", curve, "--model-out", model], timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    points = [json.loads(line) for line in open(curve)]
    best = min(points, key=lambda p: p["valid_logloss"])       # the first of equals, as a tie is no better
    assert best["at"] == "step", "this run's best evaluation is inside an epoch"
    line = next(x for x in r.stdout.splitlines() if x.startswith("model written"))
    assert "the parameters at step %d of epoch %d (best by held-out logloss)" % (best["step"], best["epoch"]) in line
    p = run([sys.executable, "-m", "mpinn.predict", "--model", model])
    assert p.returncode == 0, p.stderr
    got = float(re.search(r"logloss ([0-9.]+)", p.stdout).group(1))
    assert got == pytest.approx(best["valid_logloss"], abs=1e-4)
