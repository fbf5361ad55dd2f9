"""Ctrl-C during training stops as SIGTERM does (the ranks agree at a step boundary, a checkpoint, the --resume line),
with the exit code a shell expects after a Ctrl-C (130); a second Ctrl-C ends the run at once."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, mpiexec_path, mpirun

BASE = ["-m", "mpinn.train", "--default-rows", "6000", "--hash-bits", "12", "--hidden", "16", "--batch-size", "256",
        "--dtype", "float64", "--no-progress", "--ensemble", "1", "--epochs", "2"]


def params(path):
    with np.load(path, allow_pickle=False) as z:
        return z["params"]


def _ctrl_c_as_at_a_terminal():
    """The child's SIGINT at its default, as a shell gives it: a process inherits an ignored signal, and mpinn leaves
    an ignored SIGINT ignored (as under nohup); the test's worker may have it ignored (CI timed out here twice when the
    suite's files were dealt to the workers otherwise)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started(cmd, ck, fault):
    """cmd as a process of its own group, returned once its first checkpoint is in ck."""
    env = dict(os.environ, MPINN_FAULT=fault, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                         start_new_session=True, preexec_fn=_ctrl_c_as_at_a_terminal)
    t0 = time.time()
    while not (ck.exists() and any(f.startswith("ckpt-") for f in os.listdir(ck))) and time.time() - t0 < 60:
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.05)
    return p


def ended(p):
    try:
        return p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.mpi
def test_ctrl_c_checkpoints_says_how_to_resume_and_the_resume_is_exact(tmp_path, launcher):
    """Before: `mpinn: error on rank 0 of 2: interrupted`, exit 130, nothing saved at the stop and no word of
    --resume. mpiexec passes a terminal's Ctrl-C on to the ranks, as it is sent here."""
    r = mpirun(2, BASE + ["--model-out", str(tmp_path / "ref.npz")])
    assert r.returncode == 0, r.stderr
    ck = tmp_path / "ck"
    p = started([mpiexec_path(), "-n", "2", sys.executable] + BASE + [
        "--checkpoint-dir", str(ck), "--checkpoint-every", "4", "--model-out", str(tmp_path / "x.npz")], ck, "slow:0:1+")
    os.kill(p.pid, signal.SIGINT)
    out, err = ended(p)
    assert p.returncode == 130, (p.returncode, err[-2000:])
    assert err.startswith("mpinn: stopped by SIGINT (Ctrl-C) at step ") and err.count("\n") == 1, err[-2000:]
    assert err.rstrip("\n").endswith("written; continue with --resume %s" % ck), err
    assert not (tmp_path / "x.npz").exists()
    r = mpirun(2, BASE + ["--resume", str(ck), "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr
    assert np.array_equal(params(tmp_path / "m.npz"), params(tmp_path / "ref.npz"))     # bitwise


@pytest.mark.launch
def test_a_second_ctrl_c_ends_the_run_at_once(tmp_path):
    """The first Ctrl-C asks for a stop at the next step boundary; a rank stuck before it (here: asleep in step 6)
    never gets there, and a second Ctrl-C ends it now, as Ctrl-C does without mpinn."""
    ck = tmp_path / "ck"
    p = started([sys.executable] + BASE + ["--checkpoint-dir", str(ck), "--checkpoint-every", "4",
                                           "--model-out", str(tmp_path / "x.npz")], ck, "hang:0:6")
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)         # the first one seen (the process sleeps in Python: its handler runs at once)
    p.send_signal(signal.SIGINT)
    out, err = ended(p)
    assert p.returncode == 130, (p.returncode, err[-2000:])
    assert err == "mpinn: error: interrupted\n", err[-2000:]
