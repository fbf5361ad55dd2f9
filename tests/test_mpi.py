"""Runs the multi-rank tests (tests/*/mpi_*.py) under a real mpiexec at np = 1, 2 and 3: np 1 and the sharded
exchanges at np 4 here, np 2 and np 3 in test_mpi_np2.py and test_mpi_np3.py (one file each, so that the workers
run the three launches side by side)."""
import pytest

from conftest import mpi_suite


@pytest.mark.mpi
def test_mpi_suite_at_np_1(launcher):
    mpi_suite(1)


@pytest.mark.mpi
def test_shard_exchanges_at_np_4(launcher):
    """The node-aware exchange and the hot rows at np 4, where 2 nodes of 2 ranks (consecutive or dealt
    round robin) can be cut: the same tests as at np 1-3 (mpi_shard_exchange.py), and the traffic count."""
    out = mpi_suite(4, "mpi_shard_exchange.py", timeout=300)
    assert "skipped" not in out, out[-2000:]
