"""The ranks of a job agree on their options before anything else (mpinn.settings.agree), and an error on one rank of a
run made through the Python API or the estimators ends the whole job (mpinn.comm.guard.end_alone), as the command line
does: neither leaves a rank waiting in a collective until a deadline."""
import sys

import pytest

from conftest import mpirun
from launch import launch
from mpinn.core.errors import MpinnError
from mpinn.settings import agree, from_keywords
from mpinn.settings.agree import compared, digest

TRAIN = ["-m", "mpinn.train", "--default-rows", "3000", "--hash-bits", "10", "--hidden", "8", "--ensemble", "1",
         "--no-progress"]


def gathered(cfgs):
    """allgather as rank 0 of len(cfgs) ranks sees it: rank k's digest or options made from cfgs[k]."""
    def allgather(obj):
        return [digest(compared(c)) if isinstance(obj, str) else compared(c) for c in cfgs]
    return allgather


def test_the_first_option_that_differs_is_named_with_its_value_on_which_ranks():
    same = from_keywords(None, epochs=2, hidden=(8,))
    agree(same, gathered([same, from_keywords(None, epochs=2, hidden=(8,))]))       # equal: nothing said
    other = from_keywords(None, epochs=5, hidden=(16,))
    with pytest.raises(MpinnError) as e:
        agree(same, gathered([same, other, other, same, other]))
    assert e.value.collective and e.value.code == 2
    assert str(e.value) == ("the ranks were started with different options: --hidden is 8 on ranks 0, 3, 16 on "
                            "ranks 1-2, 4 (and --epochs); give every rank the same options")
    with pytest.raises(MpinnError, match="--quiet is off on rank 0, on on rank 1;"):
        agree(same, gathered([same, from_keywords(None, epochs=2, hidden=(8,), quiet=True)]))


def test_in_memory_data_is_rank_0s_and_not_compared():
    """The API's contract: rank 0's rows are read, the others' are not looked at."""
    import numpy as np
    from mpinn.api import arrays
    a, b = arrays(np.zeros((10, 2)), np.arange(10) % 2), arrays(np.ones((7, 2)), np.arange(7) % 2)
    agree(from_keywords(a), gathered([from_keywords(a), from_keywords(b)]))
    with pytest.raises(MpinnError, match="--data is t.csv on rank 0, not given on rank 1"):
        agree(from_keywords("t.csv"), gathered([from_keywords("t.csv"), from_keywords(b)]))


@pytest.mark.mpi
def test_ranks_launched_with_different_options_end_at_start_up_naming_the_option(tmp_path, launcher):
    """mpiexec -n 1 ... --epochs 2 : -n 1 ... --epochs 5: before, rank 0 trained 2 epochs and waited in a collective
    for rank 1 until --step-timeout (exit 3)."""
    rank = [sys.executable] + TRAIN + ["--step-timeout", "10", "--model-out", str(tmp_path / "m.npz")]
    r = launch([launcher, "-n", "1"] + rank + ["--epochs", "2", ":", "-n", "1"] + rank + ["--epochs", "5"], timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr == ("mpinn: error: the ranks were started with different options: --epochs is 2 on rank 0, 5 on "
                        "rank 1; give every rank the same options\n"), r.stderr[-2000:]
    assert not (tmp_path / "m.npz").exists()


def test_a_rank_that_could_not_read_its_options_is_named_on_every_rank():
    ok = from_keywords(None)
    with pytest.raises(MpinnError, match=r"^rank 1: argument --epochs: must be") as e:
        agree(ok, lambda obj: [obj, ("error", "argument --epochs: must be a positive integer, not x")])
    assert e.value.collective
    with pytest.raises(MpinnError, match=r"^unknown option --epoch$"):        # every rank's: said once, as it is
        agree(None, lambda obj: [obj, obj], error="unknown option --epoch")


@pytest.mark.mpi
def test_a_bad_option_on_one_rank_ends_every_rank_at_start_up(tmp_path, launcher):
    """Before, the parser spoke on rank 0 only and rank 1 exited 2 silently before MPI began; rank 0 waited for it in
    the job's first collective until the start-up deadline (an hour), its launcher too."""
    rank = [sys.executable] + TRAIN + ["--model-out", str(tmp_path / "m.npz")]
    r = launch([launcher, "-n", "1"] + rank + ["--epochs", "2", ":", "-n", "1"] + rank + ["--epochs", "x"], timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr == ("mpinn: error: rank 1: argument --epochs: must be a positive integer, not x (see python -m "
                        "mpinn.train --help)\n"), r.stderr[-2000:]


ESTIMATOR = '''
import numpy as np
from mpi4py import MPI
from mpinn.sklearn import MpinnClassifier
rank = MPI.COMM_WORLD.rank
rng = np.random.default_rng(0)
X = rng.normal(size=(400, 5))
y = (X[:, 0] > 0).astype(int)
try:
    MpinnClassifier(hidden=(8,) if rank == 0 else (16,), epochs=2).fit(X, y)
except ValueError as e:
    print("rank %%d: %%s" %% (rank, e), flush=True)
MpinnClassifier(hidden=(8,), epochs=2, step_timeout=%s).fit(X, y)
print("rank %%d fitted" %% rank, flush=True)
'''


@pytest.mark.mpi
def test_an_estimator_given_other_parameters_on_one_rank_is_told_so_on_every_rank(tmp_path, launcher):
    """Before, rank 1 failed alone (a buffer too small in the shared gradients) and rank 0 waited in a collective
    until the start-up deadline (an hour): now every rank's fit raises, naming the parameter, and the job goes on."""
    (tmp_path / "sk.py").write_text(ESTIMATOR % 300)
    r = mpirun(2, ["-m", "mpi4py", "sk.py"], cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        assert ("rank %d: the ranks were started with different options: --hidden is 8 on rank 0, 16 on rank 1; "
                "give every rank the same options" % rank) in r.stdout, r.stdout
        assert "rank %d fitted" % rank in r.stdout


@pytest.mark.mpi
def test_a_failure_on_one_rank_in_fit_ends_the_job_with_one_line(tmp_path, launcher):
    """A failure the agreement cannot foresee (an exception in rank 1's step 3): before, rank 1's `python -m mpi4py`
    abort came only after Python's exit handlers, one of which frees the shared gradients collectively, and both ranks
    spun until --step-timeout (600 s here, beyond this test's guard). Now rank 1 ends the job at once, as the
    command line does."""
    (tmp_path / "sk.py").write_text(ESTIMATOR % 600)
    r = mpirun(2, ["-m", "mpi4py", "sk.py"], cwd=str(tmp_path), env={"MPINN_FAULT": "raise:1:3"}, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    assert "mpinn: rank 1 of 2 failed with RuntimeError: injected failure at step 3; aborting the job" in r.stderr
    assert "fitted" not in r.stdout
