"""Streamed training data (mpinn.data.stream, --stream): the epoch's order is the documented one (windows of the
file order, each in its seeded order), every row once; a stream whose sample and first window hold every row
trains the in-memory path's model bit for bit at np 1, 2 and 3; a stream cut in small windows and a small sample
is the same at N ranks as at 1 (float64), resumes bit for bit after a kill -9, and a bad file in its middle is one
line, exit 2 and no model; what cannot stream is refused in one line; the row estimate is close."""
import gzip
import os
import re
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.data import DataSpec
from mpinn.data.files import FileSet
from mpinn.data.many import chained_source
from mpinn.data.files import estimate_rows
from mpinn.data.stream import open_stream
from mpinn.hashing import HashSpec

HEADER = "y,a,b,x,z"


def lines(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, x = rng.integers(0, 40), rng.normal()
        y = int((a % 3 == 0) ^ (x > 0.4) ^ (rng.random() < 0.1))
        out.append("%d,v%d,w%d,%.4f,%.3f" % (y, a, rng.integers(0, 7), x, rng.exponential()))
    return out


def write(path, rows):
    text = "\n".join([HEADER] + rows) + "\n"
    with (gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")) as f:
        f.write(text)
    return path


@pytest.fixture
def days(tmp_path):
    """A directory of 3 day files (the middle one gzipped) of 1500 rows each."""
    rows = lines(4500)
    d = tmp_path / "days"
    d.mkdir()
    for i, name in enumerate(["day_1.csv", "day_2.csv.gz", "day_3.csv"]):
        write(str(d / name), rows[i * 1500:(i + 1) * 1500])
    return str(d)


def open_days(d, sample, holdout, window):
    files = FileSet.of(d)
    spec = DataSpec(label="y", categorical=["a", "b"], numeric=["x", "z"])
    return open_stream(lambda: list(enumerate(chained_source(files, spec).sources)), spec, HashSpec(), sample, holdout,
                       5, files.n_estimate, window)


def test_an_epoch_is_the_windows_of_the_file_order_each_in_its_seeded_order(days):
    stream, valid = open_days(days, 1000, 0.1, 700)
    assert len(valid) == 100
    held = np.sort(np.random.default_rng([5, 7]).permutation(1000)[:100])      # the in-memory draw, over the sample
    train_pos = np.setdiff1d(np.arange(4500), held)
    # the reference, written plainly: every training row by position, cut into windows of 700, each permuted
    order = []
    for k, lo in enumerate(range(0, len(train_pos), 700)):
        w = train_pos[lo:lo + 700]
        rng = np.random.default_rng([3, 2] if k == 0 else [3, 2, k])     # the in-memory draw for the first
        order.extend(w[rng.permutation(len(w))])
    everything = np.concatenate([p.Xd for p in _all_pieces(days)])     # raw x, z of every row, in file order
    got = np.concatenate([b.Xd for b in stream.batches(128, np.float64, seed=3, epoch=2)])
    assert got.shape == (len(train_pos), 2)
    assert np.array_equal(got, everything[np.asarray(order)])
    assert [b.n for b in stream.batches(128, np.float64, 3, 2)][-1] == len(train_pos) % 128


def _all_pieces(d):
    stream, _ = open_days(d, 10**6, 0.0, 10**6)
    return list(stream.pieces())


def train(n, data, extra, out, env=None, timeout=120):
    r = mpirun(n, ["-m", "mpinn.train", "--data", data, "--label", "y", "--epochs", "2", "--seed", "3",
                   "--hidden", "16", "--quiet", "--no-progress", "--model-out", out] + extra, timeout=timeout, env=env)
    return r


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_stream_holding_every_row_in_its_sample_and_window_is_the_in_memory_model(days, tmp_path, n, launcher):
    got = {}
    for mode in ("on", "off"):
        out = str(tmp_path / ("%s.npz" % mode))
        r = train(n, days, ["--stream", mode, "--ensemble", "1"], out)   # in memory, a small table's default is 5
        assert r.returncode == 0, r.stderr[-2000:]
        got[mode] = np.load(out)["params"]
    assert np.array_equal(got["on"], got["off"])


@pytest.mark.mpi
def test_a_windowed_stream_is_the_same_at_n_ranks_and_resumes_bit_for_bit(days, tmp_path, launcher):
    opts = ["--stream", "on", "--sample-rows", "1000", "--shuffle-window", "700", "--dtype", "float64"]
    models = {}
    for n in (1, 2, 3):
        out = str(tmp_path / ("m%d.npz" % n))
        r = train(n, days, opts, out)
        assert r.returncode == 0, r.stderr[-2000:]
        models[n] = np.load(out)["params"]
    for n in (2, 3):
        np.testing.assert_allclose(models[n], models[1], rtol=0, atol=1e-12)
    ck = str(tmp_path / "ck")
    r = train(2, days, opts + ["--checkpoint-dir", ck, "--checkpoint-every", "7"], str(tmp_path / "never.npz"),
              env={"MPINN_FAULT": "kill:1:52"})     # 35 steps an epoch: killed in the second, after step 49
    assert r.returncode != 0 and not os.path.exists(tmp_path / "never.npz")
    whole = str(tmp_path / "whole.npz")
    assert train(2, days, opts, whole).returncode == 0
    resumed = str(tmp_path / "resumed.npz")
    r = train(2, days, opts + ["--resume", ck], resumed)
    assert r.returncode == 0, r.stderr[-2000:]
    assert np.array_equal(np.load(resumed)["params"], np.load(whole)["params"])


@pytest.mark.mpi
def test_a_bad_file_in_the_middle_of_a_stream_is_one_line_and_no_model(days, tmp_path, launcher):
    bad = os.path.join(days, "day_3.csv")
    rows = open(bad).read().splitlines()
    rows[1200] = "1,v3,w2,notanumber,0.5"
    open(bad, "w").write("\n".join(rows) + "\n")
    out = str(tmp_path / "m.npz")
    r = train(2, days, ["--stream", "on", "--sample-rows", "500"], out)
    assert r.returncode == 2
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert "day_3.csv line 1201: column 'x' is not a number: 'notanumber'" in err[0], r.stderr
    assert "Traceback" not in r.stderr and not os.path.exists(out)


@pytest.mark.parametrize("extra, message", [
    (["--data", "DAYS", "--label", "y", "--holdout-by", "time:x"],
     "--stream on: --holdout-by time:x needs every row in memory"),
    (["--data", "NPZ"], "--stream on: NPZ is not a table file (CSV, Parquet, click-log text)"),
])
def test_what_cannot_stream_is_refused_in_one_line(days, tmp_path, extra, message):
    npz = str(tmp_path / "d.npz")
    np.savez(npz, X=np.random.default_rng(0).normal(size=(50, 3)), y=np.arange(50) % 2)
    extra = [npz if e == "NPZ" else days if e == "DAYS" else e for e in extra]
    r = run([sys.executable, "-m", "mpinn.train", "--stream", "on", "--model-out", str(tmp_path / "m.npz")] + extra)
    assert r.returncode == 2 and message.replace("NPZ", npz) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_row_estimate_is_close_for_plain_gzip_and_parquet(tmp_path):
    rows = lines(30000, seed=1)
    plain = write(str(tmp_path / "a.csv"), rows)
    gz = write(str(tmp_path / "a.csv.gz"), rows)
    for path in (plain, gz):
        assert abs(estimate_rows([path], ["csv"]) - 30000) < 0.05 * 30000
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    pq.write_table(pa.table({"y": np.arange(777) % 2}), str(tmp_path / "a.parquet"))
    assert estimate_rows([str(tmp_path / "a.parquet")], ["parquet"]) == 777


class FakeComm:
    """What reader_streams asks of a communicator, for rank `rank` of `size` (rank 0's objects handed over)."""

    def __init__(self, rank, size, sent):
        self.rank, self.size, self.sent = rank, size, sent

    def bcast_obj(self, obj):
        import pickle
        if self.rank == 0:
            self.sent.append(pickle.dumps(obj))
        return pickle.loads(self.sent[0])


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    """Click-log text: a plain file (read in byte ranges), a gzipped one and another plain one (made once: the tests
    only read them)."""
    d = tmp_path_factory.mktemp("clicks")
    for i, name in enumerate(["day_1.tsv", "day_2.tsv.gz", "day_3.tsv"]):
        r = run([sys.executable, "-m", "mpinn.bench.w4", "--rows", "1500", "--start", str(1500 * i), "--scale",
                 "1000", "--out", str(d / name), "--quiet"])
        assert r.returncode == 0, r.stderr
    return str(d)


@pytest.mark.parametrize("kind", ["csv", "click text"])
@pytest.mark.parametrize("size", [2, 3, 4])
def test_with_every_rank_reading_its_share_each_training_row_is_read_once_an_epoch(days, clicks, kind, size):
    """--readers all: rank r streams a byte range of every plain click-log text file (its r-th of P) and the other
    files r, r + P, ... whole; together the ranks' batches hold every training row once (the sample's held-out
    rows none, found by row in a range that starts mid-file), whatever P, even with more ranks than files."""
    from mpinn.data.stream_setup import Recipe, reader_streams
    d = days if kind == "csv" else clicks
    spec = DataSpec(label="y", categorical=["a", "b"], numeric=["x", "z"]) if kind == "csv" else DataSpec()
    files = FileSet.of(d)
    paths = files.paths
    sample = 1000 if kind == "csv" else 2000          # click text: the sample ends in the second file
    stream, valid = open_stream(lambda: list(enumerate(chained_source(files, spec).sources)), spec,
                                HashSpec(), sample, 0.1, 5, files.n_estimate, 700)
    stream.recipe = Recipe(files, spec)
    sent, seen = [], []
    for rank in range(size):
        own = reader_streams(stream if rank == 0 else None, FakeComm(rank, size, sent), None, size)
        if kind == "csv":
            assert own.files == paths[rank::size]
        else:
            assert [f.split(" (")[0] for f in own.files] == sorted(
                [paths[0], paths[2]] + ([paths[1]] if rank == 0 else []), key=paths.index)     # the one whole file
        seen.extend(b.Xd for b in own.batches(50, np.float64, seed=3, epoch=1))
    got = np.nan_to_num(np.concatenate(seen), nan=-7.0)
    whole, _ = open_stream(lambda: list(enumerate(chained_source(files, spec).sources)), spec, HashSpec(),
                           10**6, 0.0, 5, 10**6, 10**6)
    everything = np.nan_to_num(np.concatenate([p.Xd for p in whole.pieces()]), nan=-7.0)
    held = np.sort(np.random.default_rng([5, 7]).permutation(sample)[:sample // 10])
    want = np.delete(everything, held, axis=0)
    key = lambda a: a[np.lexsort(a.T[::-1])]       # noqa: E731 - rows as a sorted multiset
    assert got.shape == want.shape and np.array_equal(key(got), key(want))


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_every_rank_reading_trains_on_every_row_and_resumes_bit_for_bit(days, tmp_path, n, launcher):
    """3 day files over 2 ranks: rank 1's one file ends first, and it gives no rows while rank 0 finishes."""
    import json
    opts = ["--stream", "on", "--readers", "all", "--sample-rows", "1000", "--shuffle-window", "700"]
    whole, metrics = str(tmp_path / "whole.npz"), str(tmp_path / "metrics.json")
    r = train(n, days, opts + ["--metrics-out", metrics], whole)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.load(open(metrics))["summary"]["samples"] == 2 * (4500 - 100)
    ck = str(tmp_path / "ck")
    r = train(n, days, opts + ["--checkpoint-dir", ck, "--checkpoint-every", "7"], str(tmp_path / "never.npz"),
              env={"MPINN_FAULT": "kill:1:52"})
    assert r.returncode != 0 and not os.path.exists(tmp_path / "never.npz")
    resumed = str(tmp_path / "resumed.npz")
    r = train(n, days, opts + ["--resume", ck], resumed)
    assert r.returncode == 0, r.stderr[-2000:]
    assert np.array_equal(np.load(resumed)["params"], np.load(whole)["params"])


def test_the_readers_groups_are_consecutive_ranks_of_sizes_within_one():
    """--readers K: reader g's group is the ranks g*N//K .. (g+1)*N//K - 1, its first rank reads: every rank in one
    group, K groups of consecutive ranks, none empty, sizes within one of each other."""
    from mpinn.data.stream_setup import reading_group
    for size in range(1, 10):
        for readers in range(1, size + 1):
            groups = [reading_group(r, size, readers) for r in range(size)]
            assert groups == sorted(groups) and set(groups) == set(range(readers))
            sizes = np.bincount(groups)
            assert sizes.max() - sizes.min() <= 1
    assert [reading_group(r, 3, 2) for r in range(3)] == [0, 1, 1]


@pytest.mark.mpi
def test_k_readers_train_the_model_of_every_rank_reading_at_k_ranks(days, tmp_path, launcher):
    """--readers 2 at np 3 (rank 0 reads for itself, rank 1 for ranks 1 and 2) trains on every row, and its model is
    --readers all's at np 2 (the same batches; float64 sums in another order: within 1e-12: a resume then is
    --readers all's, tested above); more readers than ranks is one line."""
    import json
    opts = ["--stream", "on", "--sample-rows", "1000", "--shuffle-window", "700", "--dtype", "float64"]
    two, three, metrics = str(tmp_path / "two.npz"), str(tmp_path / "three.npz"), str(tmp_path / "metrics.json")
    r = train(2, days, opts + ["--readers", "all"], two)
    assert r.returncode == 0, r.stderr[-2000:]
    r = train(3, days, opts + ["--readers", "2", "--metrics-out", metrics], three)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.load(open(metrics))["summary"]["samples"] == 2 * (4500 - 100)
    a, b = np.load(two)["params"], np.load(three)["params"]
    assert np.abs(a - b).max() < 1e-12
    r = train(2, days, opts + ["--readers", "3"], str(tmp_path / "no.npz"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "mpinn: error: --readers 3: more readers than the job's 2 ranks"], r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_held_out_files_read_a_block_at_a_time_score_as_predict_reads_them_whole(clicks, tmp_path, n, launcher):
    """--stream on with --holdout-by last: the last file is read a block at a time at each evaluation (mpinn.data.many.
    RowsInBlocks), not held; the kept epoch's held-out metrics are predict's on that file read whole, at np 1, 2, 3,
    and the same through --valid (a directory of the last two files; at np 2)."""
    import json
    from mpinn.data.files import expand
    opts = ["--stream", "on", "--sample-rows", "1000", "--shuffle-window", "700", "--dtype", "float64", "--epochs", "2"]
    for how, extra, held in (("last", ["--holdout-by", "last"], expand(clicks)[-1:]),) + (
            (("valid", None, None),) if n == 2 else ()):
        if how == "valid":          # the first file trains, the last two are held out
            d = tmp_path / "valid"
            d.mkdir()
            for p in expand(clicks)[1:]:
                os.symlink(p, d / os.path.basename(p))
            extra, held = ["--valid", str(d)], expand(str(d))
        model, metrics = str(tmp_path / ("%s.npz" % how)), str(tmp_path / ("%s.json" % how))
        data = clicks if how == "last" else expand(clicks)[0]
        r = mpirun(n, ["-m", "mpinn.train", "--data", data, "--hidden", "16", "--no-progress", "--model-out", model,
                       "--metrics-out", metrics] + opts + extra, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert re.search(r"training rows, about \d+ held out", r.stdout), r.stdout      # read as it comes
        valid = json.load(open(metrics))["valid"]
        out = str(tmp_path / ("%s-pred.json" % how))
        p = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", held[0] if len(held) == 1 else
                 str(tmp_path / "valid"), "--stream", "off", "--metrics-out", out])
        assert p.returncode == 0, p.stderr
        got = json.load(open(out))
        assert got["n"] == valid["n"] == 1500 * len(held)
        for k in ("accuracy", "logloss", "auc"):
            assert got[k] == pytest.approx(valid[k], rel=1e-9, abs=1e-12), (how, k, got[k], valid[k])
