"""A stream's memory is bounded (issue 36): every process of an np 2 run (mpiexec, its proxy, the ranks) in a memory
cgroup of 450 MiB streams 800,000 W4 text rows in two files (200 MB), their pages evicted first so that the group
is charged for every page it reads; the run ends normally, with no OOM kill, having trained on every row. Read into
memory, the same rows take rank 0 to 854 MiB, and the same limit kills that run (checked by hand: --stream off)."""
import sys

import pytest

from conftest import run
from scripts.bench.larger_than_memory.cgroup import MIB
from scripts.bench.larger_than_memory.runs import run_training

LIMIT = 450 * MIB
ROWS = 400_000          # a file; two files
TRAIN = ["--stream", "on", "--epochs", "1", "--hidden", "8", "--hash-bits", "12", "--sample-rows", "50000",
         "--shuffle-window", "16384", "--holdout", "0.02", "--no-progress"]


@pytest.mark.mpi
@pytest.mark.slow
def test_a_stream_of_800k_rows_trains_under_450_mib(tmp_path, memory_group, launcher):
    limited_group = memory_group(LIMIT, "mpinn-test-stream")
    d = tmp_path / "days"
    d.mkdir()
    for i in range(2):
        r = run([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(ROWS), "--start", str(i * ROWS), "--scale",
                 "100", "--out", str(d / ("day_%d.tsv" % i)), "--quiet"], timeout=120)
        assert r.returncode == 0, r.stderr
    limited = run_training(str(d), str(tmp_path / "limited"), TRAIN, 2, timeout=240, group=limited_group,
                           say=lambda msg: None)
    stats = limited["group"]
    assert limited["file_cached_before"] < 0.01         # the group pays for every page of the files it reads
    assert not limited["timed_out"] and limited["exit"] == 0 and stats["oom_kills"] == 0, (stats, limited["log_tail"])
    assert limited["rows"] == 2 * ROWS - 1000           # every row but the sample's 2% held out
    assert max(limited["peak_rss_mib"]) < LIMIT / MIB
