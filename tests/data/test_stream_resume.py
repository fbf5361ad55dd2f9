"""A stream read by several readers (--readers all or K) resumed on another number of ranks: which rows each step
trains depends on the number of readers, so a checkpoint continues only under the readers that wrote it (--readers all
at N ranks is --readers N on N or more ranks); any other is one line and exit code 2, the checkpoints untouched."""
import os
import shutil

import numpy as np
import pytest

from conftest import mpirun, w4_text
from mpinn.core.errors import MpinnError
from mpinn.settings.resume import check_resume, readers_meant

OPTS = ["--stream", "on", "--sample-rows", "1000", "--shuffle-window", "700", "--batch-size", "128", "--epochs", "2",
        "--seed", "3", "--hidden", "16", "--dtype", "float64", "--ensemble", "1", "--quiet", "--no-progress"]


def train(n, data, extra, out):
    return mpirun(n, ["-m", "mpinn.train", "--data", data, "--model-out", out] + OPTS + extra, timeout=180)


@pytest.mark.mpi
def test_a_stream_read_by_every_rank_resumes_only_under_the_same_number_of_readers(tmp_path, launcher):
    """A click log (two plain files, each read in byte ranges) trained at np 2 with --readers all, checkpointed every
    7 steps; a mid-epoch checkpoint resumed at np 1 or np 3 (--readers all: 1 or 3 readers) is refused in one line
    naming the saved and the current readers and how to resume; at np 3 with --readers 2 it ends where the
    uninterrupted run does (float64 sums in another order: within 1e-12)."""
    data = tmp_path / "days"
    data.mkdir()
    for i in range(2):
        w4_text(data / ("day_%d.tsv" % i), 1500, 1500 * i)
    ck = str(tmp_path / "ck")
    whole = str(tmp_path / "whole.npz")
    r = train(2, str(data), ["--readers", "all", "--checkpoint-dir", ck, "--checkpoint-every", "7",
                             "--keep-checkpoints", "100"], whole)
    assert r.returncode == 0, r.stderr[-2000:]
    found = sorted(os.listdir(ck))
    mid = [f for f in found if f.endswith("-000000028.npz")]     # epoch 2's batch 5 or so: a mid-epoch position
    assert mid, found
    for f in found[found.index(mid[0]) + 1:]:
        os.unlink(os.path.join(ck, f))
    for n, readers, want in ((1, "all", "1 reader (--readers all at 1 rank)"), (3, "all", "3 readers")):
        again = str(tmp_path / ("ck-%d" % n))
        shutil.copytree(ck, again)
        out = str(tmp_path / ("r%d.npz" % n))
        r = train(n, str(data), ["--readers", readers, "--resume", again], out)
        assert r.returncode == 2, (n, r.stderr[-2000:])
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mpinn: error: --resume %s" % again), r.stderr
        assert ("the checkpoint's stream was read by 2 readers (--readers all at 2 ranks, or --readers 2), this "
                "run's by %s" % want) in lines[0], lines[0]
        assert lines[0].endswith("resume with --readers all on 2 ranks, or with --readers 2 on 2 or more ranks")
        assert sorted(os.listdir(again)) == sorted(os.listdir(ck)) and not os.path.exists(out)
    again = str(tmp_path / "ck-3-two")
    shutil.copytree(ck, again)
    resumed = str(tmp_path / "resumed.npz")
    r = train(3, str(data), ["--readers", "2", "--resume", again], resumed)
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_allclose(np.load(resumed)["params"], np.load(whole)["params"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("saved, ranks, now, size, ok", [
    ("1", 2, "1", 1, True), ("1", 1, "1", 3, True),        # rank 0 reads, at any number of ranks
    ("all", 2, "2", 3, True), ("2", 2, "all", 2, True),     # --readers all at 2 ranks is --readers 2
    ("all", 2, "all", 1, False), ("all", 2, "all", 3, False), ("all", 1, "1", 1, False), ("1", 1, "all", 1, False),
    ("2", 3, "3", 3, False)])
def test_a_checkpoint_names_the_readers_it_was_read_by(saved, ranks, now, size, ok):
    """readers_meant: --readers all at N ranks means N readers, except at 1 rank, where its one reader reads in
    another order than --readers 1's rank 0; a checkpoint's saved value is read so too (one written with 'all')."""
    class Spec:
        def to_dict(self):
            return {"hidden": [8]}
    header = {"path": "ck/x.npz", "config": {"readers": saved}, "ranks": ranks, "spec": {"hidden": [16]}}
    config = {"readers": readers_meant(now, size)}
    with pytest.raises(MpinnError, match="architecture" if ok else "the checkpoint's stream was read by"):
        check_resume(header, config, Spec(), {}, 1, 1)         # ok: past the options, to the next check
