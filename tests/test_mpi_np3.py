"""The multi-rank tests (tests/*/mpi_*.py) under a real mpiexec at np 3 (tests/test_mpi.py: np 1 and 4)."""
import pytest

from conftest import mpi_suite


@pytest.mark.mpi
def test_mpi_suite_at_np_3(launcher):
    mpi_suite(3)
