"""Run only under mpiexec (tests/test_mpi.py launches it). Output is silenced on ranks > 0, and
`agree` makes every rank fail a test together so the next test's collectives stay aligned."""
import os
import sys

import pytest
from mpi4py import MPI

COMM = MPI.COMM_WORLD


def pytest_configure(config):
    if COMM.rank > 0:
        sys.stdout = open(os.devnull, "w")
        config.option.verbose = -2


def agree(ok, message=""):
    """Assert on every rank that `ok` holds on every rank."""
    verdicts = COMM.allgather((bool(ok), message))
    bad = [(r, m) for r, (v, m) in enumerate(verdicts) if not v]
    assert not bad, "failed on ranks %s" % bad


@pytest.fixture
def comm():
    return COMM
