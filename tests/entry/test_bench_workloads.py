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
    from mpinn.model import MLP
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
