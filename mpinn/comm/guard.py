"""Ending a job: one clear line, a clean collective exit or an abort of every rank; the step deadline."""
import os
import signal
import sys
import threading
import time
import traceback

from mpi4py import MPI

from mpinn.config import MpinnError, Stopped


def say_error(line):
    """One whole line to stderr in a single write: the process may be aborted right after, and a
    line split over two writes can lose its end on the way through the launcher."""
    sys.stderr.flush()
    os.write(2, (line + "\n").encode("utf-8", "replace"))


# ---------------------------------------------------------------- the step deadline
DEADLINE_EXIT = 3


class Watchdog:
    """Turns a hang into an abort: arm(what) starts a deadline, disarm() ends it. A daemon thread
    checks it; past the deadline it prints which rank was waiting on what and calls
    COMM_WORLD.Abort, which (unlike a plain exit) also ends the launcher and the other ranks.
    mpi4py releases the GIL inside blocking MPI calls, so the thread runs while the rank waits."""

    def __init__(self, seconds, poll=0.1):
        self.seconds = float(seconds)
        self.poll = min(poll, self.seconds / 4)
        self._deadline, self._what, self._started = None, None, 0.0
        self._stop = threading.Event()
        self._thread = None

    def arm(self, what, seconds=None):
        self._what = what
        self._started = time.monotonic()
        self._deadline = self._started + (self.seconds if seconds is None else float(seconds))
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="mpinn-watchdog", daemon=True)
            self._thread.start()

    def disarm(self):
        self._deadline = None

    def stop(self):
        self._deadline = None
        self._stop.set()

    def _watch(self):
        while not self._stop.wait(self.poll):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                rank, size = world_rank_size()
                say_error("mpinn: error on rank %d of %d: %s did not finish within %.0f s; aborting the job "
                          "(a rank is stuck, crashed or unreachable; if steps are legitimately this slow, "
                          "raise --step-timeout)" % (rank, size, self._what, deadline - self._started))
                time.sleep(0.2)     # let the launcher forward the line before the abort tears it down
                MPI.COMM_WORLD.Abort(DEADLINE_EXIT)


class NoWatchdog:
    """--step-timeout 0: no deadline."""

    def arm(self, what, seconds=None):
        pass

    def disarm(self):
        pass

    def stop(self):
        pass


# ---------------------------------------------------------------- stopping on a signal
class StopSignals:
    """SIGTERM (Slurm's, before the time limit and on preemption; a launcher's, when it is told to stop) and
    SIGUSR1 (what `sbatch --signal=USR1@120` sends ahead of the limit) are remembered, not obeyed at once:
    the trainer asks every rank at its next step boundary (stop_agreed), writes a checkpoint and ends
    with mpinn.config.STOPPED_EXIT. A second signal of the same kind is remembered too (it changes
    nothing: the first already asked for a stop)."""

    SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGUSR1: "SIGUSR1"}

    def __init__(self):
        self.signal, self._previous = 0, {}

    def install(self):
        for s in self.SIGNALS:
            try:
                self._previous[s] = signal.signal(s, self._note)
            except ValueError:          # not the main thread (an API call from a thread): not caught
                pass
        return self

    def _note(self, signum, frame):
        self.signal = self.signal or signum

    def uninstall(self):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def name(self, signum):
        return self.SIGNALS.get(signum, "signal %d" % signum)


# ---------------------------------------------------------------- ending a job
def world_rank_size():
    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def fail(message, code=2, collective=False):
    """End the job with one line on stderr. A collective error exits every rank cleanly (rank 0
    prints); an error on one rank prints with its rank and aborts the whole job, so no rank hangs."""
    rank, size = world_rank_size()
    if collective or size == 1:
        if rank == 0:
            say_error("mpinn: error: %s" % message)
        sys.exit(code)
    say_error("mpinn: error on rank %d of %d: %s" % (rank, size, message))
    MPI.COMM_WORLD.Abort(code)


def run_guarded(fn, *args):
    """Call fn; turn MpinnError into a clean exit 2 and any other exception into an abort of the
    whole job that names the rank and the exception."""
    try:
        return fn(*args)
    except Stopped as e:            # every rank agreed; rank 0 says so
        if world_rank_size()[0] == 0:
            say_error("mpinn: %s" % e)
        sys.exit(e.code)
    except MpinnError as e:
        fail(str(e), e.code, e.collective)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - any failure must end every rank
        rank, size = world_rank_size()
        tb = traceback.format_exc()
        say_error(tb.rstrip("\n"))
        if size == 1:
            say_error("mpinn: error: %s: %s" % (type(e).__name__, e))
            sys.exit(1)
        say_error("mpinn: rank %d of %d failed with %s: %s; aborting the job"
                  % (rank, size, type(e).__name__, e))
        time.sleep(0.2)     # let the launcher forward the lines before the abort tears it down (a CI run
        MPI.COMM_WORLD.Abort(1)     # once got the exit status and none of them)
