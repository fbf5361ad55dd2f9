"""How the suite runs mpinn's commands: in this process where a process adds nothing, as a real launch where it does.

`python -m mpinn.train ARGS` (and predict, prepare, doctor, bench, `mpiexec -n 1` of any of them) is run here, in the
test's own process, by `in_process`: the module runs as `python -m` runs it (runpy, as __main__, with its argv), its
file descriptors 1 and 2 and sys.stdout/stderr go to files, and its exit status is what SystemExit carries. The
result has the fields of subprocess.CompletedProcess. What a process start would cost (0.5-1 s: Python, numpy,
scipy, mpi4py and MPI_Init, mpinn's modules) is paid once per worker; the checks see the same exit code, lines and
files.

`mpiexec -n N python -m mpinn.X ARGS` with N of 2 or more runs on warm ranks (Ranks, tests/rank_server.py): N ranks
started by a real mpiexec once per worker and rank count, each command run on every rank as on a launch's ranks.

A real process is started where the check is about the process: signals, a launcher's options or hostfile, an
injected fault (which kills or hangs its process), the environment a module reads once per process
(PROCESS_SETTINGS). Those calls pass `process=True` or such an environment, and the test must carry the `launch`
mark, as must one that uses warm ranks: `python -m pytest -m "not launch"` is the fast tier (docs/testing.md), and a
test that starts a process without the mark fails here, so the tier cannot rot."""
import contextlib
import faulthandler
import io
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the commands run in this process: mpinn's own (each ends through its main(), in one rank)
IN_PROCESS = ("mpinn", "mpinn.train", "mpinn.predict", "mpinn.export", "mpinn.prepare", "mpinn.doctor", "mpinn.bench",
              "mpinn.bench.w4",
              "mpinn.bench.tour")
# a command whose environment sets one of these runs as a real process: an injected fault kills or hangs its process,
# and the optimizer's kernels are chosen once per process, from the environment it starts with
PROCESS_SETTINGS = ("MPINN_FAULT", "MPINN_FUSED", "MPINN_CACHE_DIR", "CC", "XDG_CACHE_HOME", "HOME")
THREADS = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

current_test = None         # the running test's item (set by conftest's autouse fixture): its marks say launch or not


def module_of(cmd):
    """The module of [python, '-m', MODULE, ...] when it is one run in this process, else None."""
    if len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m" and cmd[2] in IN_PROCESS:
        return cmd[2]
    return None


def served(cmd, env=None, process=False):
    """The module of `cmd` when it needs no process of its own (not process=True, no PROCESS_SETTINGS), else None:
    the one place that decides where a command runs."""
    if process or set(env or {}) & set(PROCESS_SETTINGS):
        return None
    return module_of(cmd)


def mpiexec_path():
    """The launcher next to this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def _started_by_mpinn():
    """Whether mpinn's own code is starting this process (the .mat reader's helper, the kernels' compiler): that
    process is the product's, not the test's."""
    package = os.path.join(ROOT, "mpinn") + os.sep
    return any(frame.f_code.co_filename.startswith(package) for frame, _ in traceback.walk_stack(None))


def note_launch(cmd):
    """A real process is about to start: the test must say so with its `launch` mark."""
    item = current_test
    if item is not None and item.get_closest_marker("launch") is None and not _started_by_mpinn():
        if os.environ.get("MPINN_TEST_LAUNCHES"):       # a census instead of a failure: the file to append to
            with open(os.environ["MPINN_TEST_LAUNCHES"], "a") as f:
                f.write("%s\t%s\n" % (item.nodeid, " ".join(str(c) for c in cmd[:6])))
            return
        pytest.fail("%s starts a process (%s) without the launch mark: mark it @pytest.mark.launch, or let the "
                    "command run in this process" % (item.nodeid, " ".join(str(c) for c in cmd[:6])), pytrace=False)


def launch(cmd, timeout=120, env=None, cwd=None):
    """A real process, its group killed on a hang: the hang becomes a test failure after `timeout` s (conftest's
    Popen checks the test's launch mark)."""
    full_env = dict(os.environ, **THREADS)
    full_env.update(env or {})
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                              cwd=cwd or ROOT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail("timed out after %s s: %s\n%s" % (timeout, " ".join(cmd), e.stdout or ""))


@contextlib.contextmanager
def _environment(env):
    """os.environ with `env` laid over it for the block, then as it was; tempfile's directory read again from it (a
    process reads TMPDIR once, at its first temporary file: a warm rank or this process had read another's)."""
    before, before_tmp = dict(os.environ), tempfile.tempdir
    os.environ.update(env or {})
    tempfile.tempdir = None
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
        tempfile.tempdir = before_tmp


def _fd_stream(fd):
    """A text stream that writes to whatever file descriptor fd is at the time: a module that keeps sys.stderr from
    one command (a default argument bound at import) writes where the next command's output goes, as it would in
    a process of its own."""
    return io.TextIOWrapper(io.FileIO(fd, "wb", closefd=False), encoding="utf-8", errors="backslashreplace",
                            write_through=True)


FD_STREAMS = []        # (stdout, stderr) over descriptors 1 and 2: made once, never closed


@contextlib.contextmanager
def _captured(out_path, err_path):
    """File descriptors 1 and 2 and sys.stdout/stderr into the two files for the block (unbuffered, as the suite's
    processes run: PYTHONUNBUFFERED)."""
    if not FD_STREAMS:
        FD_STREAMS.extend((_fd_stream(1), _fd_stream(2)))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fds, saved_streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout, sys.stderr = FD_STREAMS
    try:
        yield
    finally:
        for stream in FD_STREAMS:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        sys.stdout, sys.stderr = saved_streams


@contextlib.contextmanager
def _signals_kept():
    """The commands set handlers for SIGTERM, SIGUSR1 and SIGINT and a wake-up fd: back as they were afterwards."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    try:
        yield
    finally:
        for s, handler in kept.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(wakeup)


def exit_status(code):
    """A process's exit status for SystemExit(code): None 0, an integer itself, anything else 1 (printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_here(module, argv, env, cwd, out_path, err_path):
    """`python -m module argv` run in this process with its output in the two files: its exit status. The working
    directory, environment, argv, signal handlers and streams are as they were afterwards."""
    here, argv0 = os.getcwd(), sys.argv
    try:
        with _environment(dict(THREADS, **(env or {}))), _signals_kept(), _captured(out_path, err_path):
            os.chdir(cwd or ROOT)
            sys.argv = [module] + [str(a) for a in argv]
            try:
                with warnings.catch_warnings():    # runpy's note that the module was imported before: it runs anew
                    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                return 0
            except SystemExit as e:
                return exit_status(e.code)
    finally:
        sys.argv = argv0
        os.chdir(here)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def in_process(module, argv, timeout=120, env=None, cwd=None):
    """`python -m module argv` run in this process, as a process would run it (see the module's doc)."""
    cmd = [sys.executable, "-m", module] + [str(a) for a in argv]
    with tempfile.TemporaryDirectory(prefix="mpinn-run-") as d:
        out, err = os.path.join(d, "out"), os.path.join(d, "err")
        faulthandler.dump_traceback_later(timeout + 60, exit=True)      # a hang ends the worker, not the suite
        try:
            code = run_here(module, argv, env, cwd, out, err)
        finally:
            faulthandler.cancel_dump_traceback_later()
        return subprocess.CompletedProcess(cmd, code, _read(out), _read(err))


class Ranks:
    """N ranks kept warm (tests/rank_server.py) for `mpiexec -n N python -m MODULE ARGS`: each command runs on every
    rank in the ranks' own processes, its output and exit status what the real launch gives (the ranks' streams one
    after another, rank 0 first; the first non-zero status of the ranks, or the launcher's when the command ended the
    job). Started on first use, once per worker and rank count, and again after a command that ends the job."""

    def __init__(self, n):
        self.n, self.proc, self.dir, self.k = n, None, None, 0

    def _start(self):
        self.dir = tempfile.mkdtemp(prefix="mpinn-ranks-%d-" % self.n)
        self.k = 0
        self.log = open(os.path.join(self.dir, "launcher.err"), "w+")
        self.proc = subprocess.Popen([mpiexec_path(), "-n", str(self.n), sys.executable,
                                      os.path.join(ROOT, "tests", "rank_server.py"), self.dir],
                                     stdout=subprocess.DEVNULL, stderr=self.log, cwd=ROOT,
                                     env=dict(os.environ, **THREADS), start_new_session=True)

    def run(self, module, argv, timeout=120, env=None, cwd=None):
        cmd = ["mpiexec", "-n", str(self.n), sys.executable, "-m", module] + [str(a) for a in argv]
        note_launch(cmd)
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.k += 1
        stem = os.path.join(self.dir, str(self.k))
        request = dict(module=module, argv=[str(a) for a in argv], env=env or {}, cwd=str(cwd or ROOT))
        with open(stem + ".tmp", "w") as f:
            json.dump(request, f)
        os.replace(stem + ".tmp", stem + ".json")
        rcs = ["%s.%d.rc" % (stem, r) for r in range(self.n)]
        end = time.monotonic() + timeout
        while not all(os.path.exists(p) for p in rcs):
            if self.proc.poll() is not None:            # the command ended the job (an abort), as a launch would end
                code = self.proc.returncode
                self.log.seek(0)
                return self._result(cmd, stem, code, self.log.read())
            if time.monotonic() > end:
                self.close()
                pytest.fail("timed out after %s s: %s" % (timeout, " ".join(cmd)))
            time.sleep(0.005)
        codes = [int(_read(p)) for p in rcs]
        return self._result(cmd, stem, next((c for c in codes if c), 0), "")

    def _result(self, cmd, stem, code, launcher_err):
        out = "".join(_read("%s.%d.out" % (stem, r)) for r in range(self.n))
        err = "".join(_read("%s.%d.err" % (stem, r)) for r in range(self.n)) + launcher_err
        return subprocess.CompletedProcess(cmd, code, out, err)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            with open(os.path.join(self.dir, "%d.json" % (self.k + 1)), "w") as f:
                json.dump({"stop": True}, f)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


RANKS = {}          # n: Ranks, this worker's


def on_ranks(n, module, argv, timeout=120, env=None, cwd=None):
    """`mpiexec -n n python -m module argv` on this worker's warm ranks."""
    if n not in RANKS:
        RANKS[n] = Ranks(n)
    return RANKS[n].run(module, argv, timeout, env, cwd)


def close_ranks():
    for ranks in RANKS.values():
        ranks.close()
    RANKS.clear()


def run(cmd, timeout=120, env=None, cwd=None, process=False):
    """A command: in this process where served(cmd) names one of mpinn's, else a real launch."""
    module = served(cmd, env, process)
    if module:
        return in_process(module, cmd[3:], timeout, env, cwd)
    return launch(cmd, timeout, env, cwd)


def mpirun(n, args, timeout=120, env=None, cwd=None, process=False):
    """`mpiexec -n n python ARGS`: where served() names one of mpinn's commands, one rank in this process and several
    on this worker's warm ranks; anything else a real launch."""
    module = served([sys.executable] + list(args), env, process)
    if module and n == 1:
        return in_process(module, args[2:], timeout, env, cwd)
    if module:
        return on_ranks(n, module, args[2:], timeout, env, cwd)
    return launch([mpiexec_path(), "-n", str(n), sys.executable] + list(args), timeout, env, cwd)
