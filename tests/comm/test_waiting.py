"""Ranks that wait for rank 0 sleep: MPI's blocking calls spin a core, which a waiting rank takes from the ranks still
working where they share the cores (several ranks to a node's cores, a test machine's two)."""
import pytest

from conftest import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_the_other_ranks_sleep_while_rank_0_reads(n, launcher):
    """root_call (rank 0 reading the data, a checkpoint, the outputs' checks): the others use next to no CPU until it
    is done, and an error there is every rank's (a bug's too: no rank is left waiting)."""
    code = ("import time; from mpinn.comm import Communicator; from mpinn.core.errors import MpinnError; "
            "c = Communicator(); t = time.process_time(); x = c.root_call(lambda: time.sleep(1.5) or 7); "
            "cpu = time.process_time() - t\n"
            "try:\n    c.root_call(lambda: (_ for _ in ()).throw(MpinnError('bad file')))\n"
            "except MpinnError as e:\n    err = str(e)\n"
            "try:\n    c.root_call(lambda: {}['key'])\n"       # a bug on rank 0: its own error, a line elsewhere
            "except (KeyError, MpinnError) as e:\n    err += ' | %s %s' % (type(e).__name__, e)\n"
            "out = c.comm.gather((cpu, x, err))\n"
            "if c.rank == 0: print(repr(out))")
    r = mpirun(n, ["-c", code], timeout=60)
    assert r.returncode == 0, r.stderr
    out = eval(r.stdout)
    assert [x for _, x, _ in out] == [7] + [None] * (n - 1)
    assert [e for _, _, e in out] == ["bad file | KeyError 'key'"] + [
        "bad file | MpinnError rank 0 failed: KeyError: 'key'"] * (n - 1)
    assert all(cpu < 0.5 for cpu, _, _ in out[1:]), out      # a blocking bcast spins the whole 1.5 s
