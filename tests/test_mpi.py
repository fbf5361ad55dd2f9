"""Runs the multi-rank tests (tests/*/mpi_*.py) under a real mpiexec at np = 1, 2 and 3."""
import sys

import pytest

from conftest import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [1, 2, 3])
def test_mpi_suite(np_, launcher):
    # -m mpi4py: an unhandled failure on one rank aborts them all instead of hanging the rest
    r = mpirun(np_, ["-m", "mpi4py", "-m", "pytest", "tests", "-o", "python_files=mpi_*.py",
                     "-x", "-q", "-p", "no:cacheprovider", "--timeout", "120"], timeout=400)
    sys.stdout.write(r.stdout[-4000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout


@pytest.mark.mpi
def test_shard_exchanges_at_np_4(launcher):
    """The node-aware exchange and the hot rows at np 4, where 2 nodes of 2 ranks (consecutive or dealt
    round robin) can be cut: the same tests as at np 1-3 (mpi_shard_exchange.py), and the traffic count."""
    r = mpirun(4, ["-m", "mpi4py", "-m", "pytest", "tests", "-o", "python_files=mpi_shard_exchange.py",
                   "-x", "-q", "-p", "no:cacheprovider", "--timeout", "120"], timeout=300)
    sys.stdout.write(r.stdout[-4000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]
