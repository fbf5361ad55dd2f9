"""Shared helpers: running the CLIs (in this process where they can, tests/launch.py) and mpiexec, always with a
timeout; the launch mark checked on every process a test starts."""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import launch
from launch import in_process, mpiexec_path  # noqa: F401  (for the tests)

# numpy in this process runs its BLAS on one thread, as every process run() starts does: tests compare in-process runs
# (the estimator, mpinn.api) with CLI runs bit for bit, and a float32 product big enough for OpenBLAS to thread rounds
# otherwise on two threads (the estimator against the CLI with periodic embeddings: 5e-7 apart). Before numpy loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Where PYTHONDONTWRITEBYTECODE is set (this project's VM sets it), every process the suite starts (about 1,200: the
# CLIs, the ranks, the workers) would compile mpinn's 90 modules from source again, 0.14 s each. The suite's
# processes share one bytecode cache instead, in a temporary folder made for the session (outside the tree, as the
# setting wants), removed at the end by the process that made it. They inherit it through the environment.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    _cache = tempfile.mkdtemp(prefix="mpinn-test-pycache-")
    os.environ["PYTHONPYCACHEPREFIX"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

# the multi-rank tests (mpi_*.py beside the others) run only under mpiexec, launched by test_mpi.py
# with python_files=mpi_*.py; the plain pytest process collects test_*.py only
UNDER_MPI = any(v in os.environ for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, timeout=120, env=None, cwd=None, process=False):
    """A command, with a timeout: mpinn's own commands in this process (tests/launch.py), unless process=True (the
    test must then carry the launch mark); anything else as a real process."""
    return launch.run(cmd, timeout, env, cwd, process)


def mpirun(n, args, timeout=120, env=None, cwd=None, process=False):
    """`mpiexec -n n python ARGS`. mpinn's own commands run where a process adds nothing to the check (tests/launch.py):
    one rank in this process, several on this worker's warm ranks (tests/rank_server.py); process=True, an injected
    fault or a kernel setting (launch.PROCESS_SETTINGS), or anything else is a real launch."""
    return launch.mpirun(n, args, timeout, env, cwd, process)


def pytest_sessionfinish(session):
    launch.close_ranks()


def mpi_suite(np_, modules="mpi_*.py", timeout=400):
    """The multi-rank unit tests (tests/*/mpi_*.py, or `modules`) under a real mpiexec at np_ ranks, one pytest per rank
    (-m mpi4py: an unhandled failure on one rank aborts them all instead of hanging the rest): the run's output."""
    r = mpirun(np_, ["-m", "mpi4py", "-m", "pytest", "tests", "-o", "python_files=%s" % modules,
                     "-x", "-q", "-p", "no:cacheprovider", "--timeout", "120"], timeout=timeout)
    sys.stdout.write(r.stdout[-4000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout
    return r.stdout


def w4_text(path, rows, start=0):
    """W4's click-log text (mpinn.bench.w4, scale 100): `rows` rows from row `start`."""
    r = run([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(rows), "--start", str(start), "--out", str(path),
             "--scale", "100", "--quiet"])
    assert r.returncode == 0, r.stderr


def api_page_output():
    """docs/api.md's output of scripts/api_example.py (the text block after its command), its samples/s masked."""
    with open(os.path.join(ROOT, "docs", "api.md")) as f:
        shown = f.read().split("mpi4py scripts/api_example.py\n```\n\n```text\n", 1)[1].split("```", 1)[0]
    return masked_rates(shown)


def masked_rates(text):
    """Output with its samples/s (the machine's) masked."""
    return re.sub(r"\d+ samples/s", "N samples/s", text).strip()


@pytest.fixture(autouse=True)
def _the_running_test(request, monkeypatch):
    """Every process the test starts (subprocess.Popen, which subprocess.run uses too) is checked against its launch
    mark (launch.note_launch)."""
    launch.current_test = request.node

    class Popen(subprocess.Popen):
        def __init__(self, args, *more, **kw):
            launch.note_launch(args if isinstance(args, (list, tuple)) else [args])
            super().__init__(args, *more, **kw)
    monkeypatch.setattr(subprocess, "Popen", Popen)
    yield
    launch.current_test = None


# the longest files, collected first so that the workers start them first (pytest-xdist's loadfile hands out files in
# collection order): collected last, the multi-rank suites ran alone at the end while the other workers sat idle
FIRST = ("tests/test_mpi_np3.py", "tests/test_mpi.py", "tests/test_mpi_np2.py", "tests/data/test_larger_than_memory.py",
         "tests/data/test_stream_memory.py", "tests/entry/test_bench_gpu.py", "tests/entry/test_time_to_auc.py")


def pytest_collection_modifyitems(items):
    """The FIRST files first (otherwise pytest's order). A test that uses the launcher fixture, or any test of
    tests/cluster/ (hosts, Slurm), starts processes: it carries the launch mark without saying so."""
    first = {os.path.join(ROOT, *f.split("/")): i for i, f in enumerate(FIRST)}
    items.sort(key=lambda item: first.get(str(item.fspath), len(first)))
    cluster = os.path.join(ROOT, "tests", "cluster") + os.sep
    for item in items:
        uses_launcher = "launcher" in getattr(item, "fixturenames", ())
        if (uses_launcher or str(item.fspath).startswith(cluster)) and item.get_closest_marker("launch") is None:
            item.add_marker(pytest.mark.launch)


@pytest.fixture(scope="session")
def launcher():
    path = mpiexec_path()
    if not path:
        pytest.fail("no mpiexec found: pip install -e '.[test]' installs the mpich wheel that ships it")
    return path


if UNDER_MPI:
    @pytest.hookimpl(tryfirst=True)      # before pytest-xdist's own: it reads -n here
    def pytest_cmdline_main(config):
        """Each rank is one pytest process: setup.cfg's two workers (-n 2) are for the plain run, and workers
        started inside a rank would each try to join MPI."""
        if hasattr(config.option, "numprocesses"):
            config.option.numprocesses = 0

    def pytest_configure(config):
        """Only rank 0 speaks."""
        from ranks import COMM
        if COMM.rank > 0:
            sys.stdout = open(os.devnull, "w")
            config.option.verbose = -2


@pytest.fixture
def memory_group():
    """memory_group(limit_bytes, tag): a memory cgroup for a run to be put in (skips where there is none), closed
    after the test, and checked gone."""
    from scripts.bench.larger_than_memory.cgroup import MemoryGroup, Unavailable
    made = []

    def make(limit, tag):
        try:
            made.append(MemoryGroup(limit, tag=tag))
        except Unavailable as e:
            pytest.skip("no memory cgroup to limit the run: %s" % e)
        return made[-1]
    yield make
    for group in made:
        group.close()
        assert group.path is None, "the test's cgroup was left behind"
