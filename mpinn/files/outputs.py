"""The files a run will write, checked before it reads anything: a training run must not end, hours later,
in a traceback because its model file's directory cannot be made."""
import fcntl
import os
import signal
import socket
import tempfile
import threading
import time
from contextlib import contextmanager

from mpinn.core.errors import MpinnError
from mpinn.host.launch import follow_umask


def writes_fail_not_kill():
    """A file-size limit (ulimit -f, RLIMIT_FSIZE) kills a process that writes past it with SIGXFSZ, leaving a
    partial file; ignored, the write fails with EFBIG, an OSError the writers turn into one line and clean up
    after. CPython ignores it at start-up; this makes sure where a host program or a library set it back. (Only
    the main thread may set a handler.)"""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def why_not_written(e):
    """The reason of an OSError for a message: the system's words (No space left on device, File too large)."""
    return e.strerror or str(e) or type(e).__name__


def _creatable_dir(path):
    """None if directory `path` exists and a file can be made in it, or it can be made; else why not. Tried, as the
    run will do it, not inferred from permissions: /proc and /sys pass os.access, then refuse to make anything."""
    path = os.path.abspath(path)
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return "%s is a file, not a directory" % probe
    try:
        if probe == path:       # the run makes its files in it
            fd, tmp = tempfile.mkstemp(prefix=".tmp-mpinn-check-", dir=probe)
            os.close(fd)
            os.unlink(tmp)
        else:                   # the run makes the directories below it
            os.rmdir(tempfile.mkdtemp(prefix=".tmp-mpinn-check-", dir=probe))
    except OSError as e:
        return "%s cannot be written (%s)" % (probe, why_not_written(e))
    return None


def check_file(path, what):
    """A file the run will write: not a directory, writable if it exists, its directory writable or makeable."""
    if os.path.isdir(path) or path.endswith(("/", os.sep)) or os.path.basename(path) in ("", ".", ".."):
        raise MpinnError("%s %s is a directory; give a file name" % (what, path))
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise MpinnError("%s %s exists and cannot be written" % (what, path))
    why = _creatable_dir(os.path.dirname(os.path.abspath(path)))
    if why:
        raise MpinnError("%s %s cannot be written: %s" % (what, path, why))


def check_dir(path, what):
    """A directory the run will write files into."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise MpinnError("%s %s is a file, not a directory" % (what, path))
    why = _creatable_dir(path)
    if why:
        raise MpinnError("%s %s cannot be used: %s" % (what, path, why))


def check_apart(outputs, read):
    """No output of a run overwrites what it reads, and no two outputs are one file. outputs: (option, path,
    is_dir) of what the run will write; read: (option, path) of the files and directories it reads (a data
    directory, a glob or a list expanded: mpinn.data.files.named). The same file by any name counts (./a and a, a
    link). A file written into a data directory would be read as data by the next run over it. One line naming
    both options."""
    written = []
    for what, path, is_dir in outputs:
        if not path:
            continue
        for other, p in read:
            if _same(path, p):
                raise MpinnError("%s %s is also %s: writing it would destroy what this run reads; give another name"
                                 % (what, path, other))
            if not is_dir and os.path.isdir(p) and _inside(path, p):
                raise MpinnError("%s %s is inside the data directory %s (%s): the next run over that directory "
                                 "would read it as data; write it elsewhere" % (what, path, p, other))
        for other, p in written:
            if _same(path, p):
                raise MpinnError("%s and %s are both %s: each output needs a file of its own" % (other, what, path))
        written.append((what, path))


def _same(a, b):
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)       # a hard link
    except OSError:
        return False


def _inside(path, folder):
    return os.path.realpath(path).startswith(os.path.realpath(folder).rstrip(os.sep) + os.sep)


def made_dir(path):
    """Directory path, made where missing (check_dir or check_file let the run start because it could be made): an
    OSError (the file system changed since, or refuses what it let pass) is one line naming it."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise MpinnError("the directory %s could not be made (%s)" % (path, why_not_written(e)))
    return path


def made_parent(path):
    """path, its directory made first where missing."""
    made_dir(os.path.dirname(os.path.abspath(path)))
    return path


@contextmanager
def written_whole(path, what):
    """A text file written through a temporary file in its directory and renamed into place: a write that fails (a
    full disk) leaves the file that was there and no partial one, and is one line naming `what`."""
    writes_fail_not_kill()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(os.path.abspath(made_parent(path))))
    try:
        follow_umask(fd)
        with os.fdopen(fd, "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise MpinnError("%s could not be written to %s (%s)" % (what, path, why_not_written(e)))
        raise


# ---------------------------------------------------------------- claims
class Claims:
    """Claims on the outputs a run writes, held from its start to its end: a second run given one of them (the same
    --model-out, checkpoint directory or prepare --out) is refused at its start, in one line naming the first,
    instead of both reporting the file written and one losing it. outputs: (option, path, is_dir); a path of None is
    skipped. A claim is a lock (flock) on a small file, beside a file (X.lock) or inside a directory (DIR/.lock),
    that says who holds it; the kernel drops the lock when its process ends, however it ends (killed, its node
    down: the file system's lock lease), so a crashed run's claim is taken over by the next run, and the same
    command run again after the first ended starts as before. release() removes the files (and the directories made
    for them, left empty)."""

    def __init__(self, outputs):
        self._held = []
        try:
            for what, path, is_dir in outputs:
                if path:
                    self._held.append(_claim(what, path, is_dir))
        except BaseException:
            self.release()
            raise

    def release(self):
        while self._held:
            fd, lock, made = self._held.pop()
            if fd is not None:
                try:
                    os.unlink(lock)     # while still locked: a run waiting on this file finds it gone, and retries
                except OSError:
                    pass
                os.close(fd)
            _remove_empty(made)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def claim_path(path, is_dir):
    return os.path.join(path, ".lock") if is_dir else path + ".lock"


def _claim(what, path, is_dir):
    """(fd, lock file, directories made) of a claim on one output; (None, None, made) where the file system has no
    locks (ENOLCK: the run goes on unclaimed, as before claims)."""
    lock = claim_path(path, is_dir)
    made = _made_dirs(path if is_dir else os.path.dirname(os.path.abspath(path)))
    for _ in range(100):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            _remove_empty(made)
            raise MpinnError("%s %s cannot be claimed for this run: %s cannot be made (%s)"
                             % (what, path, lock, why_not_written(e)))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "it has not said which yet"
            os.close(fd)
            raise MpinnError("%s %s is being written by another run (%s); wait for it to end, or give another %s"
                             % (what, path, holder, "directory" if is_dir else "file"))
        except OSError:
            os.close(fd)
            return None, None, made
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)        # its holder removed it between our open and our lock: claim the file there now
    else:
        raise MpinnError("%s %s: its claim %s keeps changing hands; try again" % (what, path, lock))
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("pid %d on %s, started %s UTC" % (os.getpid(), socket.gethostname(), time.strftime(
        "%Y-%m-%d %H:%M:%S", time.gmtime()))).encode(), 0)
    return fd, lock, made


def _made_dirs(d):
    """Directory d made where missing; those made, deepest first."""
    made, d = [], os.path.abspath(d)
    while not os.path.isdir(d):
        made.append(d)
        d = os.path.dirname(d)
    for m in reversed(made):
        try:
            os.mkdir(m)
        except FileExistsError:
            pass
        except OSError as e:
            raise MpinnError("%s cannot be made: %s" % (m, why_not_written(e)))
    return made


def _remove_empty(made):
    """The directories made for a claim (deepest first), where nothing was written into them."""
    for d in made:
        try:
            os.rmdir(d)
        except OSError:
            break       # it holds something: it stays, and so do those above it
