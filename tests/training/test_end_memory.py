"""The end of a run holds no more memory than its training: with shared memory (several ranks on a node), the
model's parameters, gradients and optimizer state live in the node's windows, and at the end each rank used to
copy all of them out (the parameters, the optimizer state, the gradients moved into a zeroed buffer) before the
model was written: 7.5 GB a rank at the end of a 272-million-parameter run at np 2 that trained in 3.2 GB, a
kill by the kernel after the training and no model. Now the kept epoch's copy becomes the model's parameters,
the optimizer state is let go and the gradients start afresh untouched: the process's peak resident set at the
very end (getrusage) is the peak the run reports after training (`peak_rss_mib_per_rank`)."""
import pytest

from conftest import mpirun

SCRIPT = '''
import resource, sys
import mpinn.api as mp
r = mp.train(None, default_rows=4000, hash_bits=20, epochs=2, no_progress=True, quiet=True, model_out=sys.argv[1])
peak = r.summary["peak_rss_mib_per_rank"][r.rank]
end = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
from mpi4py import MPI
lines = MPI.COMM_WORLD.gather("rank %d peak %.1f end %.1f" % (r.rank, peak, end))
if r.rank == 0:
    print("\\n".join(lines))      # from rank 0 alone: the ranks end together, and their lines would interleave
'''


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_a_shared_memory_run_ends_within_the_memory_it_trained_in(tmp_path, n, launcher):
    """2^20 hashed rows x 65: 68 million parameters, 272 MB a copy. Before: the end's peak was the training's
    plus about 1,100 MiB a rank."""
    script = tmp_path / "end_memory.py"
    script.write_text(SCRIPT)
    r = mpirun(n, ["-m", "mpi4py", str(script), str(tmp_path / "m.npz")], timeout=180, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = [l.split() for l in r.stdout.splitlines() if l.startswith("rank ")]
    assert len(lines) == n, r.stdout
    for _, rank, _, peak, _, end in lines:
        assert float(end) <= float(peak) + 64, r.stdout
