"""The suite's own runner (tests/launch.py): a command run in this process, or on warm ranks, answers as the real
process or launch does, and a test that starts a process without the launch mark fails."""
import os
import signal
import sys

import numpy as np
import pytest
from _pytest.outcomes import Failed

import launch

CASES = [
    ["--data", "nowhere.csv", "--label", "y"],                    # a bad input: one line on stderr, exit 2
    ["--lr", "-1"],                                               # an option refused by the parser (argparse's exit 2)
    ["--help"],                                                   # stdout, exit 0
]


@pytest.mark.launch
@pytest.mark.parametrize("argv", CASES, ids=["bad-input", "bad-option", "help"])
def test_in_process_answers_as_the_real_process_does(argv, tmp_path):
    cmd = [sys.executable, "-m", "mpinn.train"] + argv + ["--model-out", str(tmp_path / "m.npz")]
    here = launch.run(cmd, timeout=60, cwd=str(tmp_path))
    real = launch.run(cmd, timeout=60, cwd=str(tmp_path), process=True)
    assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)
    assert here.returncode in (0, 2) and (here.stdout or here.stderr)
    assert not (tmp_path / "m.npz").exists()


def test_a_command_in_this_process_leaves_the_process_as_it_was(tmp_path):
    """Its working directory, environment, argv, signal handlers and standard streams are back afterwards."""
    before = (os.getcwd(), dict(os.environ), list(sys.argv), signal.getsignal(signal.SIGTERM), sys.stdout,
              sys.stderr)
    r = launch.in_process("mpinn.predict", ["--model", str(tmp_path / "none.npz")], cwd=str(tmp_path),
                          env={"MPINN_SOME_SETTING": "1"})
    assert r.returncode == 2 and r.stderr.startswith("mpinn: error:") and r.stdout == ""
    assert (os.getcwd(), dict(os.environ), list(sys.argv), signal.getsignal(signal.SIGTERM), sys.stdout,
            sys.stderr) == before


def test_a_process_started_without_the_launch_mark_fails_the_test(request, monkeypatch):
    monkeypatch.delenv("MPINN_TEST_LAUNCHES", raising=False)
    assert request.node.get_closest_marker("launch") is None
    with pytest.raises(Failed, match="without the launch mark"):
        launch.note_launch(["python", "-c", "pass"])
    with pytest.raises(Failed, match="without the launch mark"):
        launch.run([sys.executable, "-c", "pass"])


@pytest.mark.launch
def test_a_marked_test_may_start_one(request):
    launch.note_launch(["python", "-c", "pass"])
    assert launch.run([sys.executable, "-c", "print(6 * 7)"], process=True).stdout == "42\n"


@pytest.mark.launch
def test_warm_ranks_answer_as_a_real_launch_does(tmp_path):
    """The same two-rank commands on warm ranks and under a real mpiexec: a training run writes the same parameters
    bit for bit, and a refusal the same exit status and line."""
    from conftest import mpirun
    train = ["-m", "mpinn.train", "--default-rows", "2000", "--epochs", "1", "--hidden", "8", "--dtype", "float64",
             "--no-progress", "--ensemble", "1"]
    warm = mpirun(2, train + ["--model-out", "warm.npz"], cwd=str(tmp_path))
    real = mpirun(2, train + ["--model-out", "real.npz"], cwd=str(tmp_path), process=True)
    assert warm.returncode == real.returncode == 0, (warm.stderr, real.stderr)
    with np.load(tmp_path / "warm.npz") as w, np.load(tmp_path / "real.npz") as r:
        assert np.array_equal(w["params"], r["params"])
    refused = ["-m", "mpinn.train", "--data", "nowhere.csv", "--label", "y"]
    warm, real = mpirun(2, refused, cwd=str(tmp_path)), mpirun(2, refused, cwd=str(tmp_path), process=True)
    assert (warm.returncode, warm.stderr) == (real.returncode, real.stderr) and warm.returncode == 2
