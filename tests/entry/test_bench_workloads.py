"""The benchmark's workloads reproduce the peers' data and initial weights bit for bit (peers README)."""
import json
import sys

import numpy as np
import pytest

from mpinn.bench import workloads
from conftest import mpirun, run


@pytest.fixture(scope="module")
def w2():
    codes, y = workloads.make_w2_codes()
    return codes, y, workloads.w2_hashed_indices(codes)


def fps(arrays):
    return [workloads.fingerprint(a) for a in arrays]


def test_w1_init():
    assert fps(workloads.init_w1()) == ["1872fbfd73706c6d", "d017ed8ffa8e82c7", "f708e952be90289d",
                                    "606a36ae6b2aabee", "74b361487de842ed", "f61a7c6bd4df6ee2"]


@pytest.mark.slow
def test_w1_data():
    X, y = workloads.make_w1()
    assert (workloads.fingerprint(X), workloads.fingerprint(y)) == ("530abdd12dafebb7", "8bb7b7cac37091b1")
    assert np.bincount(y, minlength=10).tolist() == [5179, 6364, 5010, 6732, 4676,
                                                     6509, 8140, 5526, 5781, 6083]


def test_w2_init():
    assert fps(workloads.init_w2()) == ["38d63c399f9fa206", "5341e6b2646979a7",
                                    "6d76c436878d3978", "df3f619804a92fdb"]


@pytest.mark.slow
def test_w2_data_and_hashed_indices(w2):
    codes, y, idx = w2
    assert (workloads.fingerprint(codes), workloads.fingerprint(y)) == ("3f634cbcd052c5d9", "547d01f0f5c8645b")
    assert abs(float(y.mean()) - 0.61025238) < 1e-8
    assert idx.dtype == np.int64 and workloads.fingerprint(idx) == "cd976cf9e5adb68a"


@pytest.mark.slow
def test_w2_batches_are_the_hashed_csr(w2):
    _, y, idx = w2
    data = (idx.astype(np.int32), y)
    b = workloads._w2_rows(data, 1024, 2048)
    assert b.Xs.shape == (1024, 1 << 18) and b.Xs.nnz == 1024 * 20
    assert np.array_equal(b.Xs.indices, idx[1024:2048].ravel())
    assert np.array_equal(b.Xs.indptr, 20 * np.arange(1025)) and np.all(b.Xs.data == 1)


def test_w3_data_and_init():
    X, y = workloads.make_w3()
    assert (workloads.fingerprint(X), workloads.fingerprint(y)) == ("5bcb2636b8f898c0", "c3556f4a243d7dc7")
    t1, t2 = workloads.init_w3()
    assert fps([t1, t2]) == ["de4b7b88c28e836e", "12967b455ec62d79"]
    W0, b0, W1, b1 = workloads.thetas_to_params([t1, t2])
    assert W0.shape == (400, 25) and W1.shape == (25, 10)
    assert np.array_equal(b0, t1[:, 0]) and np.array_equal(W1.T, t2[:, 1:])


def test_w3_initial_loss_is_ngs_cost():
    """mpinn's sigmoid head over 10 classes is Ng's one-vs-all cost (peers: 7.4351 at init)."""
    from mpinn.model.mlp import MLP
    wl = workloads.WORKLOADS["w3"]
    model = MLP(wl.spec).set_params(wl.init())
    X, y = workloads.make_w3()
    t1, t2 = workloads.init_w3()
    a2 = 1 / (1 + np.exp(-(np.c_[np.ones(5000), X] @ t1.T)))
    a3 = 1 / (1 + np.exp(-(np.c_[np.ones(5000), a2] @ t2.T)))
    Y = np.eye(10)[y]
    ng = np.sum(-Y * np.log(a3) - (1 - Y) * np.log(1 - a3)) / 5000
    assert model.loss_sum(wl.rows((X, y), 0, 5000)) / 5000 == pytest.approx(ng, rel=1e-12)
    assert ng == pytest.approx(7.4351, abs=1e-4)


@pytest.mark.mpi
def test_bench_runs_under_mpiexec(tmp_path, launcher):
    out = tmp_path / "r.jsonl"
    r = mpirun(2, ["-m", "mpinn.bench", "--workload", "w3", "--steps", "12", "--warmup", "2",
                   "--timing-steps", "2", "--out", str(out)], timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["peer"] == "mpinn" and rec["workload"] == "W3" and rec["np"] == 2
    assert rec["measured_steps"] == 10 and rec["samples_per_s"] > 0
    assert rec["loss_final"] < rec["loss_initial"] == pytest.approx(7.4351, abs=1e-4)
    assert "RESULT {" in r.stdout
    table = run([sys.executable, "-m", "mpinn.bench", "--table", str(out)]).stdout
    assert "mpinn" in table and "W3" in table


@pytest.mark.mpi
def test_bench_local_input_does_the_same_work(tmp_path, launcher):
    """--input local (every rank holds the data, takes its own slice) trains exactly what the
    scatter does: the same rows reach the same rank, so the final loss is bitwise the same."""
    losses = {}
    for mode in ("scatter", "local"):
        out = tmp_path / (mode + ".jsonl")
        r = mpirun(3, ["-m", "mpinn.bench", "--workload", "w3", "--steps", "6", "--warmup", "1",
                       "--timing-steps", "0", "--input", mode, "--out", str(out)], timeout=120)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        rec = json.loads(out.read_text())
        assert rec["input"] == mode
        losses[mode] = rec["loss_final"]
    assert losses["local"] == losses["scatter"] < 7.4


def test_w4_batches_hash_the_logs_tokens_as_training_does():
    """W4's benchmark rows: each C<j> value hashed as the token "C<j>=<hex>" by xxh64 (written plainly here), the
    text the generator writes for the same rows; the counts' log standardised, then 13 missing flags."""
    import xxhash
    from mpinn.bench.w4 import W4, text_lines
    n = 2000
    idx, dense, y = workloads._w4_data(n)
    gen = W4(0, workloads.W4_SCALE)
    ids, ints, labels, _ = next(gen.rows(0, n))
    lines = text_lines(gen, ids, ints, labels).splitlines()
    mask = (1 << workloads.W4_BITS) - 1
    for i in (0, 1, 777, n - 1):
        fields = lines[i].split("\t")
        assert y[i] == float(fields[0])
        want = [xxhash.xxh64_intdigest(("C%d=%s" % (j + 1, v)).encode(), 0) & mask for j, v in enumerate(fields[14:])]
        assert idx[i].tolist() == want
        assert dense[i, 13:].tolist() == [float(v == "") for v in fields[1:14]]
    logs = dense[:, :13][dense[:, 13:] == 0]
    assert abs(logs.mean()) < 1e-3 and abs(logs.std() - 1) < 1e-3      # over the present values
    assert 0.2 < y.mean() < 0.3


@pytest.mark.mpi
def test_bench_w4_runs_and_learns(tmp_path, launcher):
    out = tmp_path / "r.jsonl"
    r = mpirun(2, ["-m", "mpinn.bench", "--workload", "w4", "--steps", "40", "--warmup", "2", "--timing-steps", "0",
                   "--out", str(out)], timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["workload"] == "W4" and rec["np"] == 2 and rec["samples_per_s"] > 0
    assert rec["loss_final"] < rec["loss_initial"] - 0.05


@pytest.mark.mpi
def test_batch_per_rank_is_weak_scaling_and_the_same_training(tmp_path, launcher):
    """--batch-per-rank N (issue 63): the global batch is N x P, and np 2 at N trains what np 1 at 2 N does (the
    same rows in the same order, the gradient summed over the ranks): W2's loss_final is bitwise the same here."""
    recs = {}
    for P, N in ((1, 256), (2, 128), (2, 256)):
        out = tmp_path / ("%d-%d.jsonl" % (P, N))
        r = mpirun(P, ["-m", "mpinn.bench", "--workload", "w2", "--batch-per-rank", str(N), "--steps", "12",
                       "--warmup", "2", "--timing-steps", "0", "--out", str(out)], timeout=120)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        recs[P, N] = json.loads(out.read_text())
    for (P, N), rec in recs.items():
        assert rec["np"] == P and rec["batch_per_rank"] == N and rec["global_batch"] == N * P
        assert rec["batch"].startswith("per rank") and rec["config"]["batch_size"] == N * P
    assert recs[2, 128]["loss_final"] == recs[1, 256]["loss_final"]
    assert recs[2, 256]["loss_final"] != recs[1, 256]["loss_final"]     # 512 rows a step: another training


@pytest.mark.mpi
def test_batch_per_rank_refusals(tmp_path, launcher):
    r = run([sys.executable, "-m", "mpinn.bench", "--workload", "w3", "--batch-per-rank", "8"])
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "full-batch" in r.stderr, r.stderr
    r = mpirun(2, ["-m", "mpinn.bench", "--workload", "w1", "--batch-per-rank", "40000", "--steps", "3",
                   "--warmup", "1"], timeout=120)
    assert r.returncode == 2 and "global batch 80000 is more than the workload's 60000 rows" in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr
