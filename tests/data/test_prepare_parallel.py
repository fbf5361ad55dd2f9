"""Prepare in parallel (issue 36, item 4; mpinn.data.packed.pack_parts, mpinn.data.packed.parts): `mpirun -np N python -m
mpinn.prepare` packs many files as a multi-part dataset, each rank its share, and the parts read as the one file
np 1 prepares from the same files: the same meta (contract, classes, numeric statistics and transform, to the
bit), the same rows in the same order, the same trained parameters (scatter and --input local) and the same
predictions; click-log text (one pass everywhere) and CSV (rank 0 scans first), plain and .gz mixed; a bad file in
the middle is one line, exit 2, and nothing left behind (an older dataset under the name stays as it was)."""
import gzip
import os
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.bench.w4 import W4, write_text
from mpinn.data.packed.pack_parts import shares
from mpinn.data.packed.format import PackedDataset
from mpinn.data.packed.parts import is_manifest, open_packed

ROWS = 1000             # per file
TRAIN = ["--epochs", "2", "--hidden", "8", "--batch-size", "256", "--no-progress", "--ensemble", "1"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """(the directory of 8 W4 text files, every other one gzipped, and the one file np 1 prepares from them)."""
    d = tmp_path_factory.mktemp("logs")
    (d / "logs").mkdir()
    for i in range(8):
        write_text(W4(0, 1000), str(d / "logs" / ("day_%d.tsv%s" % (i + 1, ".gz" if i % 2 else ""))), i * ROWS, ROWS)
    one = str(d / "one.mpinn")
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", str(d / "logs"), "--hash-bits", "12", "--out", one,
             "--quiet"])
    assert r.returncode == 0, r.stderr
    assert not is_manifest(one) and len(PackedDataset(one)) == 8 * ROWS     # np 1: one file, as before
    return str(d / "logs"), one


def prepare_at(n, data, out, *more, timeout=180):
    return mpirun(n, ["-m", "mpinn.prepare", "--data", data] + list(more) + ["--out", out], timeout=timeout)


def same_rows(a, b, seed=0):
    """a and b hold the same rows in the same order: every row, then a shuffled draw, a split's views."""
    assert len(a) == len(b) and a.meta == b.meta
    assert np.array_equal(a.y, b.y)
    rows = np.random.default_rng(seed).permutation(len(a))[:3000]
    for x, y in ((a.take(np.arange(len(a))), b.take(np.arange(len(b)))), (a.take(rows), b.take(rows))):
        assert (x.Xs != y.Xs).nnz == 0 and np.array_equal(x.Xs.indices, y.Xs.indices)
        assert np.array_equal(x.Xd, y.Xd, equal_nan=True) and np.array_equal(x.y, y.y)
    (ta, va), (tb, vb) = a.split(0.2, 5), b.split(0.2, 5)
    assert np.array_equal(va.take(np.arange(len(va))).Xd, vb.take(np.arange(len(vb))).Xd, equal_nan=True)
    assert ta.numeric_stats() == tb.numeric_stats() and a.numeric_stats() == b.numeric_stats()


def test_shares_are_runs_of_files_in_order_balanced_by_bytes():
    assert shares([10] * 8, 2) == [0] * 4 + [1] * 4
    assert shares([10] * 8, 3) == [0, 0, 0, 1, 1, 2, 2, 2]
    assert shares([90, 5, 5], 3) == [0, 1, 1]           # rank 0 always has the first file (it decides the columns)
    assert shares([1, 1], 4) == [0, 2]                  # more ranks than files: some pack nothing
    for sizes in ([3, 1, 4, 1, 5, 9, 2, 6], [0, 0, 7], [100]):
        s = shares(sizes, 3)
        assert s == sorted(s) and s[0] == 0


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_the_parts_are_the_one_file(logs, tmp_path, n, launcher):
    data, one = logs
    out = str(tmp_path / "logs.mpinn")
    r = prepare_at(n, data, out, "--hash-bits", "12", "--verify")
    assert r.returncode == 0, r.stderr
    assert "8000 rows in %d parts" % n in r.stdout and "one pass on every rank" in r.stdout, r.stdout
    assert sorted(os.listdir(tmp_path)) == ["logs.mpinn", "logs.mpinn.parts"]      # no temporary file left
    assert sorted(os.listdir(out + ".parts")) == ["part-%05d.mpinn" % k for k in range(n)]
    parts = open_packed(out)
    assert sum(len(p) for p in parts.parts) == 8 * ROWS and all(len(p) % ROWS == 0 for p in parts.parts)
    same_rows(parts, PackedDataset(one), seed=n)


@pytest.mark.mpi
def test_the_lines_say_how_many_ranks_packed(logs, tmp_path, launcher):
    """One file at np 2: one rank packs it, and the line says so (it said `in 1 parts ..., by 2 ranks`)."""
    data, _ = logs
    r = prepare_at(2, os.path.join(data, "day_1.tsv"), str(tmp_path / "one.mpinn"), "--hash-bits", "12")
    assert r.returncode == 0, r.stderr
    assert "%d rows in 1 part (one.mpinn.parts/, by 1 of the 2 ranks: a rank packs whole files, and there is only 1 " \
           "file)" % ROWS in r.stdout and "one pass on each rank with files" in r.stdout, r.stdout
    assert os.listdir(str(tmp_path / "one.mpinn.parts")) == ["part-00000.mpinn"]


@pytest.mark.mpi
def test_parts_of_many_blocks_fold_their_statistics_on_their_own_ranks(tmp_path, launcher):
    """Parts longer than the statistics' blocks of 4096 rows (each later rank folds the blocks wholly inside its
    part, rank 0 joins them in order), a numeric column whose first value comes in such a block: the statistics
    are one prepared file's, bit for bit."""
    (tmp_path / "big").mkdir()
    for i in range(3):
        write_text(W4(i, 1000), str(tmp_path / "big" / ("day_%d.tsv" % i)), i * 7000, 7000)
    for name, upto in (("day_0.tsv", 7000), ("day_1.tsv", 2000)):    # I2, the second numeric column, empty up to
        lines = (tmp_path / "big" / name).read_text().splitlines()      # row 9000: in a block inside rank 1's part
        (tmp_path / "big" / name).write_text("".join("\t".join(f if k != 2 or i >= upto else "" for k, f in enumerate(
            line.split("\t"))) + "\n" for i, line in enumerate(lines)))
    one, out = str(tmp_path / "one.mpinn"), str(tmp_path / "parts.mpinn")
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", str(tmp_path / "big"), "--hash-bits", "12", "--out",
             one, "--quiet"])
    assert r.returncode == 0, r.stderr
    r = prepare_at(3, str(tmp_path / "big"), out, "--hash-bits", "12", "--quiet")
    assert r.returncode == 0, r.stderr
    a, b = open_packed(out), PackedDataset(one)
    assert [len(p) for p in a.parts] == [7000] * 3
    assert 0 < a.meta["numeric_stats"]["count"][1] <= 12000 and a.numeric_stats() == b.numeric_stats()
    assert a.meta == b.meta


@pytest.mark.mpi
def test_the_parts_train_and_predict_as_the_one_file(logs, tmp_path, launcher):
    data, one = logs
    for n in (2, 3):
        out = str(tmp_path / ("p%d.mpinn" % n))
        r = prepare_at(n, data, out, "--hash-bits", "12", "--quiet")
        assert r.returncode == 0, r.stderr
        for mode in ([], ["--input", "local"]):
            got = []
            for rows in (one, out):
                model = str(tmp_path / "m.npz")
                r = mpirun(n, ["-m", "mpinn.train", rows] + mode + TRAIN + ["--model-out", model], timeout=180)
                assert r.returncode == 0, r.stderr
                assert "7200 training rows, 800 held out" in r.stdout, r.stdout
                with np.load(model) as z:
                    got.append(z["params"])
            assert np.array_equal(got[0], got[1]), (n, mode)
    preds = []
    for rows in (one, out):
        r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", rows,
                 "--out", str(tmp_path / "p.csv")])
        assert r.returncode == 0, r.stderr
        preds.append((r.stdout, open(tmp_path / "p.csv").read()))
    assert preds[0] == preds[1] and "8000 rows" in preds[0][0]


def write_csv(path, lines):
    text = "y,site,ad,price,age\n" + "".join(lines)
    with (gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")) as f:
        f.write(text)
    return path


@pytest.mark.mpi
def test_csv_files_are_scanned_by_rank_0_then_packed_in_parallel(tmp_path, launcher):
    """CSV: the classes of a text label, the columns chosen from the first file's values and the auto hash
    bits need every file first (rank 0's scan); the parts then equal np 1's file all the same."""
    rng = np.random.default_rng(3)
    d = tmp_path / "hours"
    d.mkdir()
    for i in range(4):
        lines = ["%s,s%d,a%d,%s,%d\n" % (("no", "yes")[rng.integers(0, 2)], rng.integers(0, 30), rng.integers(0, 90),
                                          "" if rng.random() < 0.05 else "%.3f" % rng.lognormal(2, 1),
                                          rng.integers(18, 80)) for _ in range(700)]
        write_csv(str(d / ("h%d.csv%s" % (i, ".gz" if i == 2 else ""))), lines)
    one, out = str(tmp_path / "one.mpinn"), str(tmp_path / "parts.mpinn")
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", str(d), "--label", "y", "--out", one, "--quiet"])
    assert r.returncode == 0, r.stderr
    r = prepare_at(3, str(d), out, "--label", "y")
    assert r.returncode == 0, r.stderr
    assert "rank 0 scanned every file first" in r.stdout, r.stdout
    a, b = PackedDataset(one), open_packed(out)
    assert a.meta["classes"] == ["no", "yes"] and a.meta["numeric"] and a.meta["transform"]
    same_rows(b, a)
    # the same name prepared again by one process: one file, and the old parts go
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", str(d), "--label", "y", "--out", out, "--quiet"])
    assert r.returncode == 0, r.stderr
    assert not is_manifest(out) and not os.path.exists(out + ".parts")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_a_bad_file_in_the_middle_is_one_line_and_leaves_nothing(logs, tmp_path, n, launcher):
    data, _ = logs
    bad, first = tmp_path / "bad", tmp_path / "first"
    bad.mkdir()
    first.mkdir()
    for i, name in enumerate(sorted(os.listdir(data))):     # a copy of the files, the 3rd gzip file cut short
        with open(os.path.join(data, name), "rb") as f:
            raw = f.read()
        with open(bad / name, "wb") as f:
            f.write(raw[:len(raw) // 2] if name == "day_6.tsv.gz" else raw)
        if i < 2:
            with open(first / name, "wb") as f:
                f.write(raw)
    bad = str(bad)
    out = str(tmp_path / "logs.mpinn")
    r = prepare_at(n, str(first), out, "--hash-bits", "12", "--quiet")      # an older dataset under the name
    assert r.returncode == 0, r.stderr
    before = sorted(os.listdir(tmp_path))
    r = prepare_at(n, bad, out, "--hash-bits", "12", "--quiet")
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpinn: error:") and "day_6.tsv.gz" in lines[0], r.stderr
    assert sorted(os.listdir(tmp_path)) == before and len(open_packed(out)) == 2 * ROWS    # the old one, intact
    r = prepare_at(n, bad, str(tmp_path / "new.mpinn"), "--hash-bits", "12", "--quiet")
    assert r.returncode == 2 and sorted(os.listdir(tmp_path)) == before, r.stderr     # nothing written


@pytest.mark.mpi
def test_a_rank_done_early_waits_asleep(launcher):
    """The ranks share the cores: one whose share is done must not spin in MPI while another packs."""
    code = ("import time; from mpinn.comm import Communicator; c = Communicator(); time.sleep(1.5 if c.rank else 0); "
            "t = time.process_time(); c.barrier_asleep(); cpu = time.process_time() - t; "
            "times = c.comm.gather(cpu); c.rank or print(*times)")      # one line from rank 0: none interleaved
    r = mpirun(2, ["-c", code], timeout=60)
    assert r.returncode == 0, r.stderr
    cpu = [float(x) for x in r.stdout.split()]
    assert len(cpu) == 2 and cpu[0] < 0.5, cpu      # a blocking Barrier spins the whole 1.5 s


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2])
def test_an_out_that_cannot_be_written_is_one_line_before_any_reading(logs, tmp_path, n, launcher):
    """--out under a file: one line naming the option, exit 2 (was a traceback at np 1 after the reading, and at
    np 2 the ranks' heartbeat folder beside it could not be made)."""
    data, _ = logs
    (tmp_path / "file").write_text("x")
    r = prepare_at(n, data, str(tmp_path / "file" / "logs.mpinn"), "--hash-bits", "12", "--quiet")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["mpinn: error: --out %s cannot be written: %s is a file, not a "
                                             "directory" % (tmp_path / "file" / "logs.mpinn", tmp_path / "file")]
