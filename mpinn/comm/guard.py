"""Ending a job: one clear line, a clean collective exit or an abort of every rank; the step deadline."""
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager

from mpi4py import MPI

from mpinn.core.errors import STOPPED_EXIT, MpinnError, Stopped
from mpinn.host.exits import stopped_line


def say_error(line):
    """One whole line to stderr in a single write: the process may be aborted right after, and a
    line split over two writes can lose its end on the way through the launcher."""
    sys.stderr.flush()
    os.write(2, (line + "\n").encode("utf-8", "replace"))


# ---------------------------------------------------------------- the step deadline
DEADLINE_EXIT = 3
STEP_KNOB, START_KNOB = "--step-timeout", "--start-timeout"     # the options that set the two deadlines


class Deadline:
    """What both watchdogs share: guard(what), a with-block under the deadline."""

    @contextmanager
    def guard(self, what, seconds=None, knob=STEP_KNOB):
        """arm(what, seconds, knob) for the block, and after it (also when it raises) the deadline as it was
        before: a collective outside the steps (the run's start and end, an averaging, a stream readers' group)
        meets the deadline as a step does, and a guard inside another leaves the outer one armed."""
        before = self.state()
        self.arm(what, seconds, knob)
        try:
            yield
        finally:
            self.restore(before)

    def state(self):
        return None

    def restore(self, state):
        pass


class Watchdog(Deadline):
    """Turns a hang into an abort: arm(what) starts a deadline, disarm() ends it. A daemon thread
    checks it; past the deadline it prints which rank was waiting on what and calls
    COMM_WORLD.Abort, which (unlike a plain exit) also ends the launcher and the other ranks.
    mpi4py releases the GIL inside blocking MPI calls, so the thread runs while the rank waits."""

    def __init__(self, seconds, poll=0.1):
        self.seconds = float(seconds)
        self.poll = min(poll, self.seconds / 4)
        self._deadline, self._what, self._started, self._knob = None, None, 0.0, STEP_KNOB
        self._stop = threading.Event()
        self._thread = None

    def arm(self, what, seconds=None, knob=STEP_KNOB):
        """A deadline for `what`: `seconds` from now (default: the step deadline's); knob: the option that sets it,
        which the abort's line tells the user to raise."""
        self._what, self._knob = what, knob
        self._started = time.monotonic()
        self._deadline = self._started + (self.seconds if seconds is None else float(seconds))
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="mpinn-watchdog", daemon=True)
            self._thread.start()

    def disarm(self):
        self._deadline = None

    def state(self):
        return self._what, self._started, self._deadline, self._knob

    def restore(self, state):
        self._what, self._started, self._deadline, self._knob = state

    def stop(self):
        self._deadline = None
        self._stop.set()

    def _watch(self):
        while not self._stop.wait(self.poll):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                rank, size = world_rank_size()
                say_error("mpinn: error on rank %d of %d: %s did not finish within %.0f s; aborting the job "
                          "(a rank is stuck, crashed or unreachable; if it is legitimately this slow, "
                          "raise %s)" % (rank, size, self._what, deadline - self._started, self._knob))
                time.sleep(0.2)     # let the launcher forward the line before the abort tears it down
                abort_job(DEADLINE_EXIT)


class NoWatchdog(Deadline):
    """--step-timeout 0: no deadline."""

    def arm(self, what, seconds=None, knob=None):
        pass

    def disarm(self):
        pass

    def stop(self):
        pass


# ---------------------------------------------------------------- stopping on a signal
class StopSignals:
    """SIGTERM (Slurm's, before the time limit and on preemption; a launcher's, when it is told to stop), SIGUSR1
    (what `sbatch --signal=USR1@120` sends ahead of the limit) and SIGINT (Ctrl-C; mpiexec passes it on to the
    ranks) are remembered, not obeyed at once: the trainer asks every rank at its next step boundary
    (stop_agreed), writes a checkpoint and ends with code(signal): mpinn.core.errors.STOPPED_EXIT, or 130 after a
    Ctrl-C, as a shell expects. A second SIGTERM or SIGUSR1 changes nothing: the first already asked for a stop; a
    second Ctrl-C ends the process at once (KeyboardInterrupt), as without mpinn. A SIGINT the process was started
    ignoring (a background job's) stays ignored.

    If the ranks do not agree in time (a peer is gone, and this rank waits in a collective for it: what
    `srun --kill-on-bad-exit` leaves when it sends SIGTERM to the survivors), the job is aborted: a stop
    that cannot happen must not turn a failure into a hang. The trainer says at each boundary how long the
    work before its next agreement may take (beat: STOP_EVERY steps, or the step deadline before an
    evaluation); the job is aborted GRACE seconds after that, or after the signal, whichever is later.

    Python runs a signal handler only when the main thread is back in the interpreter, never while it
    waits inside an MPI call; so the signal is also seen through signal.set_wakeup_fd, whose byte the
    C-level handler writes at once, and a thread reading that pipe starts the grace."""

    SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGUSR1: "SIGUSR1", signal.SIGINT: "SIGINT (Ctrl-C)"}
    GRACE = 5.0
    STOP_EVERY = 8      # steps between the ranks' agreement on a stop (the trainer asks every STOP_EVERY steps)

    def __init__(self):
        self.signal, self._previous, self._wakeup = 0, {}, None
        self.agreed, self._at, self._due = False, None, None     # _due: None until the training loop begins
        self._took, self._began = {}, None                        # expect(): seconds each kind of work took
        self._lock = threading.Lock()

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return self                 # an API call from a thread: signals are not caught
        for s in self.SIGNALS:
            if signal.getsignal(s) is not signal.SIG_IGN:
                self._previous[s] = signal.signal(s, self._caught)
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._wakeup = (read, write, signal.set_wakeup_fd(write, warn_on_full_buffer=False))
        threading.Thread(target=self._wake, args=(read,), name="mpinn-stop", daemon=True).start()
        return self

    def _caught(self, signum, frame):
        """The handler (in the main thread, once it is back in the interpreter)."""
        self._note(signum)
        if signum == signal.SIGINT:     # the next Ctrl-C ends the process at once
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def code(self, signum):
        """The exit code of a run stopped by signum: 130 after a Ctrl-C (128 + SIGINT, what a shell expects)."""
        return 128 + signum if signum == signal.SIGINT else STOPPED_EXIT

    def _note(self, signum, frame=None):
        with self._lock:
            if self.signal:
                return
            self.signal, self._at = signum, time.monotonic()
        threading.Thread(target=self._watch, name="mpinn-stop-grace", daemon=True).start()

    def _wake(self, read):
        """The wakeup pipe's reader: each byte is a signal number, written even while the main thread waits."""
        while True:
            try:
                got = os.read(read, 64)
            except OSError:
                return
            if not got:                 # uninstall closed the pipe
                return
            for signum in got:
                if signum in self.SIGNALS:
                    self._note(signum)

    def beat(self, allow):
        """The trainer is at a boundary; its next agreement on a stop comes within `allow` seconds."""
        self._due = time.monotonic() + allow

    def expect(self, kind, first, cap):
        """The trainer begins work of a kind ("evaluation", "epoch end") before its next agreement. It is
        allowed twice what that work took the last time plus 2 s, or `first` seconds the first time; never
        more than cap (the step deadline). Not the deadline itself: a peer killed while this rank scores the
        held-out rows would otherwise keep it waiting 300 s after Slurm's SIGTERM, past Slurm's SIGKILL."""
        took = self._took.get(kind)
        self._began = (kind, time.monotonic())
        self.beat(min(cap, first if took is None else 2 * took + 2.0))

    def done(self):
        """The work expect() announced is over: its time is what the next of its kind is allowed from."""
        if self._began is not None:
            kind, t = self._began
            self._took[kind], self._began = time.monotonic() - t, None

    def _watch(self):
        while not self.agreed:
            if self._due is None:       # still starting (reading, hashing): nothing trained, nothing to save
                rank, size = world_rank_size()
                say_error("mpinn: rank %d of %d: %s arrived before training began; nothing to save, ending the job"
                          % (rank, size, self.name(self.signal)))
                abort_job(128 + self.signal)
            deadline = max(self._at, self._due) + self.GRACE
            if time.monotonic() > deadline:
                rank, size = world_rank_size()
                say_error("mpinn: error on rank %d of %d: %s arrived, and the ranks did not agree to stop within "
                          "%.0f s (a rank is gone, or stuck); aborting the job"
                          % (rank, size, self.name(self.signal), deadline - self._at))
                time.sleep(0.2)
                abort_job(128 + self.signal)
            time.sleep(0.1)

    def uninstall(self):
        """The previous handlers back. A signal that came after the last agreement (while the model was
        written, say) is raised again now, under them: it was put off, not swallowed."""
        late = self.signal if not self.agreed else 0
        self.agreed = True              # the grace watch ends
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
        if self._wakeup is not None:
            read, write, previous = self._wakeup
            signal.set_wakeup_fd(previous)
            os.close(write)             # the reader sees the end of the pipe and returns
            self._wakeup = None
        if late:
            signal.raise_signal(late)

    def name(self, signum):
        return self.SIGNALS.get(signum, "signal %d" % signum)


# ---------------------------------------------------------------- ending a job
def abort_job(code):
    """MPI_Abort: the launcher ends every rank. If it returns (seen under srun when the step is already being
    torn down: PMI's abort is ignored), this process ends anyway, and the launcher notices a rank gone."""
    MPI.COMM_WORLD.Abort(code)
    time.sleep(1.0)
    os._exit(code)


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
    if rank > 0:        # rank 0's line first: when it fails too (every rank reading the same bad file), its abort
        time.sleep(1.0)     # ends this rank before a second line
    say_error("mpinn: error on rank %d of %d: %s" % (rank, size, message))
    time.sleep(0.2)     # let the launcher forward the line before the abort tears it down
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 2)   # MPICH's own "Abort(2) on node 0 ..." would be a second line saying less
    abort_job(code)


def run_guarded(fn, *args):
    """Call fn; turn MpinnError into a clean exit 2 and any other exception into an abort of the
    whole job that names the rank and the exception."""
    try:
        return fn(*args)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - any failure must end every rank
        end_on(e)


def end_alone(error, size):
    """An exception this rank raised alone (anything but an error every rank raised together) in a collective call
    over `size` ranks: the others wait for this rank in a collective, so it ends the job now with run_guarded's line
    (a script under `python -m mpi4py` would otherwise leave them there: its abort comes after Python's exit
    handlers, one of which frees shared memory collectively). One rank, or an error the ranks agreed on: nothing
    (the caller raises it)."""
    if size > 1 and not isinstance(error, SystemExit) and not getattr(error, "collective", False):
        end_on(error)


def end_on(e):
    """End this process, or the whole job, on exception e: a Stopped run's line (rank 0), a MpinnError's or a
    stop's one line (fail), any other exception its traceback and the rank that raised it, then an abort."""
    if isinstance(e, Stopped):            # every rank agreed; rank 0 says so
        if world_rank_size()[0] == 0:
            say_error("mpinn: %s" % e)
        sys.exit(e.code)
    if isinstance(e, MpinnError):
        fail(str(e), e.code, e.collective)
    if isinstance(e, KeyboardInterrupt):      # Ctrl-C, or SIGTERM where a command made it one (process.Terminated)
        fail(*stopped_line(e))
    rank, size = world_rank_size()
    say_error("".join(traceback.format_exception(e)).rstrip("\n"))
    if size == 1:
        say_error("mpinn: error: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
    say_error("mpinn: rank %d of %d failed with %s: %s; aborting the job" % (rank, size, type(e).__name__, e))
    time.sleep(0.2)     # let the launcher forward the lines before the abort tears it down (a CI run
    abort_job(1)                # once got the exit status and none of them)
