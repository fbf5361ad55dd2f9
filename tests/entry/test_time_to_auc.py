"""scripts/bench/time_to_auc.py: its reading of the curves and its table's two goals, against points written by
hand; and one real mpinn run whose points come from the curve's clock (peers need their own venv: not here)."""
import json
import os
import sys

import pytest

from conftest import in_process, run
from scripts.bench import time_to_auc as tta

TIME_TO_AUC = [sys.executable, "-m", "scripts.bench.time_to_auc"]


def pt(system, seconds, auc, np_=1):
    return {"system": system, "np": np_, "seconds": seconds, "auc": auc, "rows_seen": 0}


def test_time_to_reach_and_auc_at_read_a_run_as_a_step_function():
    run_ = [pt("m", 1.0, 0.70), pt("m", 2.0, 0.76), pt("m", 3.0, 0.74), pt("m", 4.0, 0.78)]
    assert tta.time_to_reach(run_, 0.75) == 2.0          # the first time, not the last
    assert tta.time_to_reach(run_, 0.77) == 4.0
    assert tta.time_to_reach(run_, 0.79) is None
    assert tta.auc_at(run_, 0.5) is None                  # before the first point
    assert tta.auc_at(run_, 2.9) == 0.76 and tta.auc_at(run_, 3.0) == 0.74 and tta.auc_at(run_, 99) == 0.78


def test_the_goals_are_judged_against_the_peers_final_points():
    points = [pt("hidden model", 0, 0.85, 0),
              pt("vw", 1.0, 0.70), pt("vw", 5.0, 0.75),
              pt("lightgbm", 2.0, 0.72), pt("lightgbm", 8.0, 0.78),
              pt("mpinn a", 1.5, 0.74, 2), pt("mpinn a", 4.0, 0.776, 2),       # VW's 0.75 at 4.0 < 5.0; 0.776 >= 0.775
              pt("mpinn b", 6.0, 0.76, 2), pt("mpinn b", 9.0, 0.80, 2)]        # VW's 0.75 at 6.0 > 5.0; 0.76 at 8.0
    text = tta.table(points, 0.85)
    assert "mpinn a np 2 reaches VW's final AUC 0.7500 in 4.0 s against VW's 5.0 s: met" in text
    assert "mpinn a np 2 at LightGBM's 8.0 s: AUC 0.7760 against LightGBM's 0.7800 (goal: at least 0.7750): met" in text
    assert "mpinn b np 2 reaches VW's final AUC 0.7500 in 6.0 s against VW's 5.0 s: NOT met" in text
    assert "mpinn b np 2 at LightGBM's 8.0 s: AUC 0.7600" in text and text.count("NOT met") == 2
    assert "| mpinn b np 2 | 6.0 s | 9.0 s |" in text                    # time to VW's 0.75, LightGBM's 0.78


def test_a_run_of_several_epochs_ends_on_the_model_it_wrote(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("epoch 1/3 ...\nmodel written to m.npz: the parameters of epoch 2 (best by held-out logloss), auc 0.8\n")
    run_ = [dict(pt("mpinn d", s, a, 2), point=p) for s, a, p in (
        (1.0, 0.70, "epoch 1 step 10"), (2.0, 0.75, "epoch 1 epoch 20"), (3.0, 0.80, "epoch 2 epoch 40"),
        (4.0, 0.77, "epoch 3 epoch 60"))]
    (last,) = tta.written_point(str(log), run_)
    assert last["auc"] == 0.80 and last["seconds"] == 4.0 and last["point"] == "model written: epoch 2's parameters"
    log.write_text("model written to m.npz: the parameters of epoch 3 (the last)\n")
    assert tta.written_point(str(log), run_) == []          # the last point is the written model already


@pytest.mark.launch
def test_mpinn_points_come_from_the_curves_clock(tmp_path):
    out, png = str(tmp_path / "p.json"), str(tmp_path / "p.png")
    r = run(TIME_TO_AUC + ["--rows", "3000", "--test-rows", "600",
             "--systems", "mpinn", "--np", "1,2", "--points", "3", "--mpinn-best", "--epochs 1 --hidden 8",
             "--workdir", str(tmp_path / "w"), "--out", out, "--plot", png], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    points = [json.loads(line) for line in open(out)]
    hidden = points[0]
    assert hidden["system"] == "hidden model" and 0.7 < hidden["auc"] < 1
    runs = tta.runs_of(points)
    assert set(runs) == {("mpinn defaults", 1), ("mpinn tuned", 1), ("mpinn defaults", 2), ("mpinn tuned", 2)}
    for key, run_ in runs.items():
        seconds = [p["seconds"] for p in run_]
        rows = [p["rows_seen"] for p in run_]
        assert 0 < seconds[0] and seconds == sorted(seconds), key      # after the launch, in training order
        assert rows == sorted(rows) and all(0.3 < p["auc"] < 1 for p in run_), key
    tuned = runs[("mpinn tuned", 2)]
    assert tuned[-1]["rows_seen"] == 3000 and tuned[-1]["point"].startswith("epoch 1 epoch")     # its end
    assert len(tuned) == 3      # 24 steps of 128 rows, an evaluation every 8: at steps 8 and 16, and the end
    curve = [json.loads(line) for line in open(tmp_path / "w" / "mpinn-tuned-np2.curve.jsonl")]
    ev = [c["eval_seconds"] for c in curve]
    assert ev[0] == 0 and all(b > a for a, b in zip(ev, ev[1:]))     # each record: the evaluations before it
    for a, b in zip(curve, curve[1:]):          # an evaluation lies between two records' clocks
        assert b["time"] - a["time"] >= b["eval_seconds"] - a["eval_seconds"] > 0
        assert b["elapsed"] - a["elapsed"] >= b["eval_seconds"] - a["eval_seconds"]
    assert os.path.getsize(png) > 10000
    assert "mpinn's seconds to reach" in r.stdout and "hidden model AUC" in r.stdout
    again = run(TIME_TO_AUC + ["--summarize", out], timeout=60)
    assert again.returncode == 0 and again.stdout.split("\n")[:12] == r.stdout.split("points written")[1].split("\n")[1:13]


def test_a_bad_option_is_one_line_and_exit_2(tmp_path):
    r = in_process("scripts.bench.time_to_auc", ["--rows", "3000", "--test-rows", "600", "--systems", "mpinn,xgboost",
                                                 "--out", str(tmp_path / "o")], timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--systems" in r.stderr
