"""Two runs given one output (issue 60, item 3): both exited 0 and printed `model written to same.npz`, the file held
the second run's model and the first's line was false. A run claims its outputs at its start (mpinn.files.outputs.Claims:
the model file, the metrics, curve, plot and timeline files, the checkpoint directory; prepare's and predict's
outputs): a second run given one of them is refused then, one line naming the first, exit 2, nothing written; the
claim goes when the run ends however it ends, so the same command runs again afterwards, and a crashed run's claim
blocks nothing."""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, mpirun, run
from mpinn.files.outputs import Claims

TRAIN = ["--label", "y", "--categorical", "c", "--numeric", "x", "--hash-bits", "8", "--epochs", "2", "--ensemble",
         "1", "--no-progress", "--quiet"]


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "t.csv"
    with open(path, "w") as f:
        f.write("y,c,x\n" + "".join("%d,c%d,%.3f\n" % (rng.integers(0, 2), rng.integers(0, 9), rng.standard_normal())
                                    for _ in range(300)))
    return str(path)


def train(table, *more, n=1, timeout=120):
    cmd = ["-m", "mpinn.train", "--data", table] + TRAIN + [str(a) for a in more]
    return mpirun(n, cmd, timeout) if n > 1 else run([sys.executable] + cmd, timeout)


def refused(r, option, path, holder_pid):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        r"mpinn: error: %s %s is being written by another run \(pid %d on \S+, started [0-9: -]+ UTC\); wait for "
        r"it to end, or give another (file|directory)" % (option, re.escape(path), holder_pid), lines[0]), r.stderr


def test_an_output_another_run_holds_refuses_the_run_at_its_start(tmp_path, table):
    """The test holds the claims a running run holds (this process's pid): train and prepare are refused before
    they read a row, nothing is written; released, the same commands run and leave no claim behind."""
    model, ck, packed = str(tmp_path / "m.npz"), str(tmp_path / "ck"), str(tmp_path / "t.mpinn")
    for option, path, is_dir, cmd in (
            ("--model-out", model, False, ["--model-out", model]),
            ("--metrics-out", str(tmp_path / "m.json"), False, ["--model-out", model, "--metrics-out",
                                                                str(tmp_path / "m.json")]),
            ("--checkpoint-dir", ck, True, ["--model-out", model, "--checkpoint-dir", ck])):
        with Claims([(option, path, is_dir)]):
            before = sorted(os.listdir(tmp_path))
            refused(train(table, *cmd), option, path, os.getpid())
            assert sorted(os.listdir(tmp_path)) == before and not os.path.exists(model)
    with Claims([("--out", packed, False)]):
        r = run([sys.executable, "-m", "mpinn.prepare", "--data", table, "--label", "y", "--out", packed])
        refused(r, "--out", packed, os.getpid())
    assert sorted(os.listdir(tmp_path)) == ["t.csv"]
    r = train(table, "--model-out", model, "--checkpoint-dir", ck, "--metrics-out", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", table, "--label", "y", "--out", packed, "--quiet"])
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck", "m.json", "m.npz", "t.csv", "t.mpinn"]
    assert not [f for f in os.listdir(ck) if not f.startswith("ckpt-")]
    r = train(table, "--model-out", model, "--checkpoint-dir", ck, "--overwrite-checkpoints")     # again, as before
    assert r.returncode == 0, r.stderr
    predictions = str(tmp_path / "p.csv")
    predict = [sys.executable, "-m", "mpinn.predict", "--model", model, "--data", table, "--out", predictions]
    with Claims([("--out", predictions, False)]):
        refused(run(predict), "--out", predictions, os.getpid())
    assert run(predict).returncode == 0 and not os.path.exists(predictions + ".lock")


def test_a_claim_left_by_a_process_that_died_is_taken_over(tmp_path, table):
    """A crashed run leaves its claim's file, but no lock (the kernel drops it with the process): the next run
    takes it over and removes it at its end."""
    model = tmp_path / "m.npz"
    (tmp_path / "m.npz.lock").write_text("pid 999999 on a-host-long-gone, started 2026-01-01 00:00:00 UTC")
    r = train(table, "--model-out", model)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["m.npz", "t.csv"]


def test_claims_release_what_they_made(tmp_path):
    deep = tmp_path / "a" / "b"
    with Claims([("--checkpoint-dir", str(deep / "ck"), True), ("--model-out", str(deep / "m.npz"), False)]):
        assert os.path.exists(deep / "ck" / ".lock") and os.path.exists(deep / "m.npz.lock")
        assert (deep / "m.npz.lock").read_text().startswith("pid %d on " % os.getpid())
    assert os.listdir(tmp_path) == []       # the directories made for the claims, empty, go too
    with Claims([("--model-out", str(deep / "m.npz"), False)]):
        (deep / "m.npz").write_text("written")
    assert os.listdir(deep) == ["m.npz"]


@pytest.mark.launch
@pytest.mark.mpi
def test_two_runs_on_one_model_file(tmp_path, table):
    """Run A trains (held at its second step); run B, given A's --model-out, is refused at np 1 and np 2 with one
    line naming A; A killed (kill -9, its claim's file left), B runs at np 2 and writes its model."""
    model = str(tmp_path / "same.npz")
    env = dict(os.environ, MPINN_FAULT="hang:0:2", PYTHONUNBUFFERED="1")
    talking = [x for x in TRAIN if x != "--quiet"]
    a = subprocess.Popen([sys.executable, "-m", "mpinn.train", "--data", table] + talking + ["--model-out", model],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT, text=True,
                         start_new_session=True)
    try:
        while not a.stdout.readline().startswith("config: "):      # its last line before training
            assert a.poll() is None, "run A ended early"
        refused(train(table, "--model-out", model), "--model-out", model, a.pid)
        t0 = time.time()
        refused(train(table, "--model-out", model, n=2), "--model-out", model, a.pid)
        assert time.time() - t0 < 30 and not os.path.exists(model)
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.communicate()
    assert os.path.exists(model + ".lock")
    r = train(table, "--model-out", model, n=2)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["same.npz", "t.csv"]
