"""mpinn.comm.guard.StopSignals on its own, in a child Python: a stop signal is put off to the next step
boundary, but never turned into a hang (the main thread waiting inside MPI runs no Python handler), never
swallowed, and a signal before training begins ends the job at once."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT

CHILD = textwrap.dedent("""
    import sys, time
    from mpi4py import MPI
    from mpinn.comm.guard import StopSignals
    stop = StopSignals()
    stop.GRACE = 0.5
    stop.install()
    what = sys.argv[1]
    if what != "starting":
        stop.beat(0.0)                          # training began; the next agreement is due now
    print("ready", flush=True)
    if what == "blocked":                       # waits inside MPI for a message that never comes
        MPI.COMM_WORLD.recv(source=0, tag=7)
    elif what == "starting":
        time.sleep(30)
    elif what == "late":                        # the handler runs (the main thread is in Python) ...
        while not stop.signal:
            time.sleep(0.01)
        stop.beat(60.0)
        print("noted", flush=True)
        stop.uninstall()                        # ... and the signal, never agreed on, is raised again here
        print("survived", flush=True)
""")


def child(what, sig=signal.SIGTERM, timeout=20):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "-c", CHILD, what], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=ROOT, start_new_session=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        t = time.monotonic()
        os.kill(p.pid, sig)
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err, time.monotonic() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.launch
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_rank_waiting_inside_mpi_is_aborted_after_the_grace(sig):
    """What `srun --kill-on-bad-exit` leaves: a peer is gone, this rank waits in a collective, SIGTERM comes.
    Python's handler cannot run there; the wakeup pipe starts the grace all the same."""
    rc, out, err, took = child("blocked", sig)
    name = signal.Signals(sig).name
    assert "%s arrived, and the ranks did not agree to stop" % name in err, err
    assert rc == 128 + sig, (rc, err)
    assert took < 10


@pytest.mark.launch
def test_a_signal_before_training_ends_the_job_at_once():
    rc, out, err, took = child("starting")
    assert "SIGTERM arrived before training began; nothing to save" in err, err
    assert rc == 128 + signal.SIGTERM and took < 10, (rc, err)


@pytest.mark.launch
def test_a_signal_never_agreed_on_is_raised_again_when_the_handlers_are_put_back():
    rc, out, err, took = child("late")
    assert "noted" in out and "survived" not in out, (out, err)
    assert rc == -signal.SIGTERM, (rc, err)      # the default action: ended by the signal itself


def test_the_stop_agreement_waits_under_the_step_deadline():
    """stop_if_asked's allreduce is a collective like a step's: a peer lost there (kill -9, no signal) must meet
    the step deadline, not leave this rank waiting for ever (tests/cluster/test_slurm.py's step-deadline case
    hung there once in this session's three full runs). The watchdog is armed while the ranks agree and disarmed after."""
    from types import SimpleNamespace

    from mpinn.comm.guard import Deadline, StopSignals
    from mpinn.training.checkpoints import stop_if_asked

    class Watchdog(Deadline):       # mpinn's guard() over a deadline that records what it is armed for
        armed = None

        def arm(self, what, seconds=None, knob=None):
            self.armed = what

        def disarm(self):
            self.armed = None

        def state(self):
            return self.armed

        def restore(self, state):
            self.armed = state

    seen = []
    watchdog = Watchdog()
    comm = SimpleNamespace(allreduce_max_obj=lambda x: seen.append(watchdog.armed) or x)
    trainer = SimpleNamespace(stop=StopSignals(), comm=comm, watchdog=watchdog, global_step=16)
    stop_if_asked(trainer, 1)
    stop_if_asked(trainer, 1, at_epoch_end=True)
    assert seen == ["the ranks' stop agreement after step 16"] * 2
    assert watchdog.armed is None
