"""How the suite runs mpinn's commands: in this process where a process adds nothing, as a real launch where it does.

`python -m mpinn.train ARGS` (and predict, prepare, doctor, bench, `mpiexec -n 1` of any of them) is run here, in the
test's own process, by `in_process`: the module runs as `python -m` runs it (runpy, as __main__, with its argv), its
file descriptors 1 and 2 and sys.stdout/stderr go to files, and its exit status is what SystemExit carries. The
result has the fields of subprocess.CompletedProcess. What a process start would cost (0.5-1 s: Python, numpy,
scipy, mpi4py and MPI_Init, mpinn's modules) is paid once per worker; the checks see the same exit code, lines and
files.

A real process is started where the check is about the process: more than one rank, signals, an abort, a launcher,
a hang, start-up time, the environment a module reads when it is imported. Those calls pass `process=True` (or start
more than one rank), and the test must carry the `launch` mark: `python -m pytest -m "not launch"` is the fast tier
(docs/testing.md), and a test that starts a process without the mark fails here, so the tier cannot rot."""
import contextlib
import faulthandler
import io
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the commands run in this process: mpinn's own (each ends through its main(), in one rank)
IN_PROCESS = ("mpinn", "mpinn.train", "mpinn.predict", "mpinn.prepare", "mpinn.doctor", "mpinn.bench", "mpinn.bench.w4")
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


def _started_by_mpinn():
    """Whether mpinn's own code is starting this process (the .mat reader's helper, the kernels' compiler): that
    process is the product's, not the test's."""
    package = os.path.join(ROOT, "mpinn") + os.sep
    return any(frame.filename.startswith(package) for frame in traceback.extract_stack())


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
    """A real process, its group killed on a hang: the hang becomes a test failure after `timeout` s."""
    note_launch(cmd)
    full_env = dict(os.environ, **THREADS)
    full_env.update(env or {})
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                              cwd=cwd or ROOT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail("timed out after %s s: %s\n%s" % (timeout, " ".join(cmd), e.stdout or ""))


@contextlib.contextmanager
def _environment(env):
    """os.environ with `env` laid over it for the block, then as it was."""
    before = dict(os.environ)
    os.environ.update(env or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


@contextlib.contextmanager
def _captured():
    """File descriptors 1 and 2 and sys.stdout/stderr into two files for the block: yields a function that reads
    them back as (stdout, stderr) text."""
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fds, saved_streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout = io.TextIOWrapper(open(os.dup(1), "wb"), encoding="utf-8", errors="backslashreplace",
                                  write_through=True)
    sys.stderr = io.TextIOWrapper(open(os.dup(2), "wb"), encoding="utf-8", errors="backslashreplace",
                                  write_through=True)
    texts = []

    def read():
        return texts[0], texts[1]
    try:
        yield read
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        sys.stdout, sys.stderr = saved_streams
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.close()


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


def in_process(module, argv, timeout=120, env=None, cwd=None):
    """`python -m module argv` run in this process, as a process would run it (see the module's doc)."""
    env = dict(THREADS, **(env or {}))
    cmd = [sys.executable, "-m", module] + [str(a) for a in argv]
    here, argv0 = os.getcwd(), sys.argv
    faulthandler.dump_traceback_later(timeout + 60, exit=True)      # a hang ends the worker, not the suite
    try:
        with _environment(env), _signals_kept(), _captured() as read:
            os.chdir(cwd or ROOT)
            sys.argv = [module] + cmd[3:]
            try:
                with warnings.catch_warnings():    # runpy's note that the module was imported before: it runs anew
                    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as e:
                code = exit_status(e.code)
    finally:
        faulthandler.cancel_dump_traceback_later()
        sys.argv = argv0
        os.chdir(here)
    out, err = read()
    return subprocess.CompletedProcess(cmd, code, out, err)


def run(cmd, timeout=120, env=None, cwd=None, process=False):
    """A command: in this process where module_of(cmd) names one of mpinn's (unless process), else a real launch."""
    process = process or any(k in PROCESS_SETTINGS for k in (env or {}))
    module = None if process else module_of(cmd)
    if module:
        return in_process(module, cmd[3:], timeout, env, cwd)
    return launch(cmd, timeout, env, cwd)
