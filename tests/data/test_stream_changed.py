"""A file that changes while a stream reads it (cut short, grown, rewritten, replaced, deleted) is one line naming the
file and what changed, raised before any row read after the change is trained; the whole job ends with exit code 2
(np 2, the file cut by the rank reading its second half)."""
import os
import re

import numpy as np
import pytest

from conftest import mpirun, w4_text
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec
from mpinn.data.files import FileSet
from mpinn.data.files import estimate_rows
from mpinn.data.stream import open_stream
from mpinn.data.stream_setup import Recipe
from mpinn.hashing import HashSpec

ROWS = 1200


@pytest.fixture
def log(tmp_path):
    d = tmp_path / "days"
    d.mkdir()
    for i in range(2):
        w4_text(d / ("day_%d.tsv" % i), ROWS, ROWS * i)
    return d


def stream_of(d):
    """The stream mpinn.data.stream_setup.open_streamed makes of a click log: its sample fitted on the first 300
    rows, no rows held out."""
    files = FileSet.of([str(d / "day_0.tsv"), str(d / "day_1.tsv")])
    recipe = Recipe(files, DataSpec())
    stream, _ = open_stream(recipe.first_sources, DataSpec(), HashSpec(), 300, 0.0, 5, files.n_estimate, 700)
    stream.make_sources = recipe.sources()
    return stream


def cut(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) * 2 // 3)      # mid-line, most likely; either way the file is shorter


def grow(path):
    with open(path) as f:
        first = f.readline()
    with open(path, "a") as f:
        f.write(first * 50)


def rewrite(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def replace(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


CHANGES = {"cut": (cut, r"it was cut short from (\d+) to (\d+) bytes"),
           "grown": (grow, r"it grew from (\d+) to (\d+) bytes \(rows appended\)"),
           "rewritten": (rewrite, r"it was rewritten \(same size, modified at another time\)"),
           "replaced": (replace, r"it was replaced by another file"),
           "deleted": (os.unlink, r"it was deleted")}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_file_changed_between_two_chunks_of_a_stream_is_one_line_and_no_row_read_after_it(log, monkeypatch,
                                                                                          change):
    """Chunks of 100 rows: day_0.tsv changed after its first chunk; the stream yields no later chunk of it and
    raises one line naming it and the change. Without the change the stream yields every row (the control)."""
    import mpinn.data.base
    monkeypatch.setattr(mpinn.data.base, "CHUNK_ROWS", 100)
    assert sum(len(p) for p in stream_of(log).pieces()) == 2 * ROWS          # the control: every row, once
    stream = stream_of(log)
    path = str(log / "day_0.tsv")
    before = os.path.getsize(path)
    pieces = stream.pieces()
    assert len(next(pieces)) == 100
    do, said = CHANGES[change]
    do(path)
    with pytest.raises(MpinnError) as e:
        for _ in pieces:
            pass
    msg = str(e.value)
    assert msg.startswith("data file %s changed while it was being read: " % path), msg
    m = re.search(said, msg)
    assert m, msg
    if m.groups():
        assert int(m.group(1)) == before and int(m.group(2)) == os.path.getsize(path)
    assert "\n" not in msg and msg.endswith("until it ends (copy a growing log, and use the copy)")


def test_a_file_that_stays_the_same_streams_every_epoch(log, monkeypatch):
    """Read again and again (each epoch) and touched by nothing: the same rows, no complaint."""
    import mpinn.data.base
    monkeypatch.setattr(mpinn.data.base, "CHUNK_ROWS", 100)
    stream = stream_of(log)
    first = np.concatenate([p.Xd for p in stream.pieces()])
    again = np.concatenate([p.Xd for p in stream.pieces()])
    assert first.shape == (2 * ROWS, 13) and np.array_equal(first, again, equal_nan=True)


CUT_BY_RANK_1 = '''
import os, runpy, sys
import mpinn.data.base
from mpi4py import MPI
from mpinn.data.formats.clicktext import ClickTextSource

mpinn.data.base.CHUNK_ROWS = 100
target, parts = sys.argv.pop(1), ClickTextSource.parts


def cut_after_the_first_chunk(self):
    for i, part in enumerate(parts(self)):
        yield part
        if i == 0 and self.file == target and MPI.COMM_WORLD.rank == 1:     # rank 1 reads the file's second half
            with open(target, "r+b") as f:
                f.truncate(os.path.getsize(target) * 5 // 6)


ClickTextSource.parts = cut_after_the_first_chunk
sys.argv[0] = "mpinn.train"
runpy.run_module("mpinn.train", run_name="__main__")
'''


@pytest.mark.mpi
@pytest.mark.launch
def test_a_file_cut_short_while_a_rank_reads_it_ends_the_job_in_one_line(log, tmp_path):
    """--readers all at np 2 under a real mpiexec: rank 1 cuts day_0.tsv (its lines in the second half of the bytes)
    after its first chunk of 100 rows; the job ends with exit code 2, one line naming the file, and no model."""
    script = tmp_path / "cut.py"
    script.write_text(CUT_BY_RANK_1)
    path, out = str(log / "day_0.tsv"), str(tmp_path / "m.npz")
    before = os.path.getsize(path)
    r = mpirun(2, [str(script), path, "--data", str(log), "--stream", "on", "--readers", "all", "--sample-rows", "300",
                   "--shuffle-window", "700", "--epochs", "1", "--hidden", "8", "--no-progress", "--quiet",
                   "--model-out", out], timeout=120, process=True)
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    want = "data file %s changed while it was being read: it was cut short from %d to %d bytes" % (
        path, before, os.path.getsize(path))
    assert len(lines) == 1 and want in lines[0], r.stderr
    assert not os.path.exists(out)


def numbers(path, n=2000):
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        f.write("y,x,z\n" + "".join("%d,%.4f,%.4f\n" % (rng.random() < 0.3, rng.normal(), rng.normal())
                                    for _ in range(n)))
    return str(path)


def test_held_out_files_read_a_block_at_a_time_are_checked_too(tmp_path):
    """A streamed run's held-out files (RowsInBlocks, read at each evaluation) must be as the run found them: grown
    before an evaluation is one line at its first block; and predict's pass over a log (blocks_of), cut between two
    blocks, is one line rather than fewer predictions."""
    from mpinn.data.many import RowsInBlocks, blocks_of
    spec = DataSpec(label="y", numeric=["x", "z"], task="binary", classes=["0", "1"])
    path = numbers(tmp_path / "held.csv")
    held = RowsInBlocks(FileSet.of(path), spec, HashSpec())
    assert sum(len(b) for b in held.blocks(300)) == 2000           # the control: every row
    grow(path)
    with pytest.raises(MpinnError, match=r"held.csv changed while it was being read: it grew from \d+ to \d+ bytes"):
        next(iter(held.blocks(300)))
    path = numbers(tmp_path / "log.csv")
    blocks = blocks_of(FileSet.of(path), spec, HashSpec(), 300)
    assert len(next(blocks)) == 300
    cut(path)
    with pytest.raises(MpinnError, match=r"log.csv changed while it was being read: it was cut short"):
        for _ in blocks:
            pass
