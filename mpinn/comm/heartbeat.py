"""A lost peer where no deadline fits: prepare at several ranks (python -m mpinn.prepare under mpirun or srun).

A rank that has packed its share waits for the slowest, which may legitimately take hours, so the step-style
deadline of training (mpinn.comm.guard) cannot tell a slow peer from a lost one. MPICH does not notice a peer
killed by the kernel (out of memory, kill -9) either: under srun without --kill-on-bad-exit the others would wait
for ever. So every rank shows that it is alive instead: a thread of its own rewrites a small file, a counter,
every few seconds, whatever the rank is doing (the thread makes no MPI call). A rank that waits (the asleep
barriers of prepare, mpinn.comm.base.Communicator.barrier_asleep) reads its peers' files; one whose counter has
not changed for --peer-timeout seconds, as this rank's own clock measures it, is lost, and the waiting rank
aborts the job with one line that names it. The files live beside the output (which every node must share for
prepare to work at all), under .OUT.alive/, and go at the end.
"""
import os
import threading
import time

from mpinn.comm.guard import DEADLINE_EXIT, abort_job, say_error
from mpinn.core.errors import MpinnError

KNOB = "--peer-timeout"


class Heartbeat:
    """Rank `rank` of `size` beats into folder/rank-R every `every` seconds (default: a sixth of `seconds`, at
    most 5 s); check() ends the job when a peer's beat has stood still for `seconds`. lost: what check() calls
    with the line (default: print it and abort the job)."""

    def __init__(self, folder, rank, size, seconds, every=None, lost=None):
        self.folder, self.rank, self.size, self.seconds = folder, rank, size, float(seconds)
        self.every = every if every is not None else min(5.0, self.seconds / 6)
        self.lost = lost or _abort
        self.path = os.path.join(folder, "rank-%d" % rank)
        self._count, self._stop = 0, threading.Event()
        self._seen = {}         # peer -> (its last content, when it changed here: time.monotonic())
        self._since = None      # when this rank first looked
        self._thread = None
        self._checked = None
        self.rows = 0           # this rank's rows done, in its beat (prepare: packed so far)
        self.peer_rows = {}     # peer -> its rows done, as its beat last said
        self._shown = None      # when progress_line last gave a line

    def start(self):
        """The first beat, then the thread; MpinnError where the folder cannot be written."""
        try:
            os.makedirs(self.folder, exist_ok=True)
            self._write()
        except OSError as e:
            raise MpinnError("cannot write into %s: %s" % (os.path.dirname(self.folder), e.strerror or e))
        self._thread = threading.Thread(target=self._run, name="mpinn-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """No more beats; this rank's file goes (and the folder with the last one)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for remove in (lambda: os.remove(self.path), lambda: os.rmdir(self.folder)):
            try:
                remove()
            except OSError:     # gone already; or a peer's file still there
                pass

    def _run(self):
        while not self._stop.wait(self.every):
            self._beat()

    def _beat(self):
        try:
            self._write()
        except OSError:     # a full or vanished folder: peers will see this rank stand still and say where
            pass

    def _write(self):
        self._count += 1
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d %d %d\n" % (os.getpid(), self._count, self.rows))
        os.replace(tmp, self.path)      # whole: a reader never sees half a count

    def check(self, now=None):
        """Called while this rank waits (at most once a second does any work): a peer whose file has not changed
        for `seconds` is lost, and the job ends."""
        now = time.monotonic() if now is None else now
        if self._checked is not None and now - self._checked < 1.0:
            return
        self._checked = now
        if self._since is None:
            self._since = now
        for peer in range(self.size):
            if peer == self.rank:
                continue
            content = _read(os.path.join(self.folder, "rank-%d" % peer))
            last = self._seen.get(peer)
            if last is None or (content is not None and content != last[0]):
                self._seen[peer] = last = (content, now if content is not None else self._since)
                fields = (content or "").split()
                if len(fields) == 3 and fields[2].isdigit():
                    self.peer_rows[peer] = int(fields[2])
            if now - last[1] > self.seconds:
                self.lost(self._line(peer, last[0] is None))
                return

    def progress_line(self, every, now=None):
        """'rank 1 1,234,567 rows, rank 2 ...': the peers' rows done as their beats say, at most once every `every`
        seconds of waiting (None before that: a short wait says nothing)."""
        now = time.monotonic() if now is None else now
        if self._shown is None:
            self._shown = now
        if now - self._shown < every or not self.peer_rows:
            return None
        self._shown = now
        return ", ".join("rank %d %s rows" % (peer, format(rows, ",")) for peer, rows in sorted(self.peer_rows.items()))

    def _line(self, peer, never):
        where = os.path.join(self.folder, "rank-%d" % peer)
        why = ("never seen: is %s on a filesystem every node shares?" % self.folder if never
               else "killed, out of memory, or its node is down?")
        return ("mpinn: error on rank %d of %d: rank %d gave no sign of life for %.0f s (%s did not change; %s); "
                "aborting the job (raise %s if a rank may stall that long, or 0 for no check)"
                % (self.rank, self.size, peer, self.seconds, where, why, KNOB))


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _abort(line):
    say_error(line)
    time.sleep(0.2)     # let the launcher forward the line before the abort tears it down
    abort_job(DEADLINE_EXIT)


def folder_for(out):
    """Where the heartbeats of a prepare writing `out` go: beside it, hidden."""
    here, name = os.path.split(os.path.abspath(out))
    return os.path.join(here, ".%s.alive" % name)
