"""Every collective of a run is under a deadline, and a run's deadline ends with the run.

A collective outside any deadline is where a lost peer (kill -9 under srun without --kill-on-bad-exit, an
unreachable host; MPICH does not notice either) leaves the other ranks waiting for ever: the Slurm kill test
hung so once in three full runs, in the stop agreement (tests/comm/test_stop_signals.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, mpirun
from mpinn.device.backend import gpu_probe

PROBE = os.path.join(ROOT, "tests", "comm", "deadline_probe.py")
GPUS, NO_GPU = gpu_probe()


def click_log(path, n=3000, seed=0):
    """A small log: a time, two id columns, a number and a click (a few labels missing)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    user, item = rng.integers(0, 300, n), rng.integers(0, 50, n)
    click = (rng.random(n) < 1 / (1 + np.exp(-(x + (user % 3) - 1)))).astype(int).astype(str)
    click[rng.random(n) < 0.01] = ""
    with open(path, "w") as f:
        f.write("t,user,item,x,click\n")
        for i in range(n):
            f.write("2020-01-01T%02d:%02d:%02d,u%d,i%d,%.3f,%s\n" % (i // 3600, i // 60 % 60, i % 60, user[i], item[i],
                                                                    x[i], click[i]))
    return str(path)


@pytest.mark.mpi
def test_every_collective_of_a_run_is_under_a_deadline(tmp_path, launcher):
    """The loop's pieces (steps, evaluations inside and at the end of epochs, checkpoints, the stop agreement), and
    what lies between them: the job's probe, a stream readers' group, the rows a stream left out, local SGD's
    averaging, keeping the best of a sharded table, an ensemble's members, the run's end and the parameters sent to
    every rank. Three runs at np 2 cover them; any collective started with no deadline armed is named."""
    data = click_log(tmp_path / "log.csv")
    base = "--data %s --label click --missing-labels drop --epochs 2" % data
    runs = [base + " --stream on --readers all --eval-every 4 --keep best --checkpoint-dir %s --checkpoint-every 3"
            % (tmp_path / "ck"),
            base + " --average-every 3 --eval-every 4 --ensemble 2 --params-everywhere",
            base + " --table sharded --keep best --timeline %s" % (tmp_path / "trace.json")]
    r = mpirun(2, ["-m", "mpi4py", PROBE] + runs, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines.count("done") == 2, r.stdout[-3000:]
    assert [line for line in lines if line.startswith("UNGUARDED")] == []



@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU: %s" % NO_GPU)
def test_every_collective_of_a_gpu_run_is_under_a_deadline(tmp_path, launcher):
    """The same on the GPU path, whose communicator stages the gradient through the host (two ranks share the one
    GPU here): binding each rank to its GPU, the device feed, the evaluations, the checkpoints, an ensemble."""
    data = click_log(tmp_path / "log.csv")
    base = "--data %s --label click --missing-labels drop --epochs 2 --device gpu" % data
    runs = [base + " --stream on --readers all --eval-every 4 --keep best --checkpoint-dir %s --checkpoint-every 3"
            % (tmp_path / "ck"),
            base + " --eval-every 4 --ensemble 2 --params-everywhere"]
    r = mpirun(2, ["-m", "mpi4py", PROBE] + runs, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines.count("done") == 2, r.stdout[-3000:]
    assert [line for line in lines if line.startswith("UNGUARDED")] == []

@pytest.mark.launch
def test_a_caught_error_leaves_no_deadline_behind(tmp_path):
    """The API raises MpinnError for bad input, and a caller (a notebook, the scikit-learn estimator's user) may
    catch it and go on: the start-up's deadline must end with the run, not abort the process later."""
    (tmp_path / "d.csv").write_text("a,b,click\n1,2,0\n3,4,1\n")
    code = ("import time, mpinn.api as mp\n"
            "try:\n    mp.train('d.csv', label='nosuch', start_timeout=1, quiet=True)\n"
            "except mp.MpinnError as e:\n    print('caught:', e, flush=True)\n"
            "time.sleep(2.5)\nprint('alive', flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "no column 'nosuch'" in r.stdout and r.stdout.endswith("alive\n"), (r.stdout,
                                                                                                 r.stderr[-2000:])


def test_a_guard_inside_another_leaves_the_outer_deadline_armed():
    """Run.finish's guard holds final_params', an averaging's inside an evaluation's: after the inner block (also
    when it raises) the outer deadline is the one armed, with its own start and length."""
    from mpinn.comm.guard import NoWatchdog, Watchdog
    w = Watchdog(300)
    try:
        w.arm("outer", 50)
        outer = w.state()
        with w.guard("inner"):
            assert w.state()[0] == "inner" and w.state()[2] > outer[2]
        assert w.state() == outer
        with pytest.raises(KeyError), w.guard("inner"):
            raise KeyError("x")
        assert w.state() == outer
        w.disarm()
        with w.guard("alone"):
            assert w.state()[0] == "alone"
        assert w.state()[2] is None
    finally:
        w.stop()
    with NoWatchdog().guard("nothing"):
        pass


@pytest.mark.launch
@pytest.mark.parametrize("knob", ["--step-timeout", "--start-timeout"])
def test_the_abort_names_the_option_that_sets_its_deadline(knob):
    """A start-up past --start-timeout (reading a big file) is not helped by raising --step-timeout: the line
    names the deadline's own option."""
    code = ("import time\nfrom mpinn.comm.guard import Watchdog\n"
            "Watchdog(300, poll=0.05).arm('the work', 1.0, %r)\ntime.sleep(20)\n" % knob)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
    assert ("the work did not finish within 1 s; aborting the job (a rank is stuck, crashed or unreachable; if it "
            "is legitimately this slow, raise %s)" % knob) in r.stderr, r.stderr[-2000:]
