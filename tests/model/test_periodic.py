"""Periodic embeddings of numeric inputs (mpinn.model.periodic; Gorishniy et al. 2022's PLR): the forward pass against
the published formula written plainly, the gradients of every parameter against central finite differences, and
the model's other paths (sparse rows, chunked prediction) unchanged by them."""
import json
import math
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.model import periodic
from mpinn.files.checkpoint import load_model
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.model.mlp import MLP
from mpinn.inference.load import load_for_model

from test_model import analytic, make_batch, numeric


def spec(n_sparse=12, n_dense=4, hidden=(5,), n_out=1, act="tanh", loss="sigmoid", wide=False, columns=3,
         sigma=0.7, k=3, d=2):
    return ModelSpec(n_sparse, n_dense, hidden, n_out, act, loss, "float64", sparse_fan_in=3, wide=wide,
                     periodic={"columns": columns, "frequencies": k, "width": d, "sigma": sigma})


def plainly(model, batch):
    """The output written from the paper's formula, one row and one column at a time: v_j = [cos(2 pi c_j x_j),
    sin(2 pi c_j x_j)], h_j = relu(v_j W_j + b_j), the h_j after the other inputs; then the layers."""
    s, p = model.spec, model.spec.periodic
    n_layers = len(s.hidden) + 1
    off = model.offsets[2]
    flat = model.params[off - model.spec.periodic_size:off]
    k, d, m = p["frequencies"], p["width"], p["columns"]
    c = flat[:m * k].reshape(m, k)
    W = flat[m * k:m * k + m * 2 * k * d].reshape(m, 2 * k, d)
    b = flat[m * k + m * 2 * k * d:].reshape(m, d)
    out = []
    for i in range(batch.n):
        x = batch.Xd[i]
        hs = []
        for j in range(m):
            v = [math.cos(2 * math.pi * c[j, f] * x[j]) for f in range(k)] + \
                [math.sin(2 * math.pi * c[j, f] * x[j]) for f in range(k)]
            hs += [max(0.0, sum(v[r] * W[j, r, e] for r in range(2 * k)) + b[j, e]) for e in range(d)]
        row = np.concatenate([batch.Xs[i].toarray().ravel() if s.n_sparse else [], x, hs])
        a = row @ model.W[0] + model.b[0]
        a, wide = (a[:s.hidden[0]], a[s.hidden[0]:]) if s.has_wide else (a, 0.0)     # the linear part's outputs
        for l in range(1, n_layers):
            a = (np.tanh(a) if s.activation == "tanh" else np.maximum(a, 0)) @ model.W[l] + model.b[l]
        out.append(a + wide)
    return np.array(out)


@pytest.mark.parametrize("wide", [False, True])
def test_forward_is_the_published_formula(wide):
    model = MLP(spec(hidden=(5, 4), n_out=2, loss="softmax", wide=wide)).init_(4)
    model.params += 0.01        # the linear part starts at zero: move it off
    batch = make_batch("softmax", n=6, n_sparse=12, n_dense=4, n_out=2)
    np.testing.assert_allclose(model.forward(batch)[-1], plainly(model, batch), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [
    dict(),
    dict(n_sparse=0, loss="squared", act="relu"),
    dict(wide=True, hidden=(4, 3), n_out=3, loss="softmax"),
    dict(columns=4, k=2, d=3),
])
def test_gradients_match_finite_differences(case):
    model = MLP(spec(**case)).init_(1)
    if case.get("wide"):
        model.params += 0.01            # the linear part starts at zero: move it off
    batch = make_batch(model.spec.loss, n=7, n_sparse=model.spec.n_sparse, n_dense=4, n_out=model.spec.n_out)
    a, f = analytic(model, batch, 0.0), numeric(model, batch, 0.0)
    lo, hi = model.offsets[2] - model.spec.periodic_size, model.offsets[2]
    assert np.abs(f[lo:hi]).max() > 1e-3          # the embeddings' own parameters are in the check, and move it
    assert np.max(np.abs(a - f)) < 1e-7 * max(1.0, np.max(np.abs(f)))


def test_sparse_rows_and_chunked_prediction_unchanged(monkeypatch):
    model = MLP(spec(n_sparse=40, hidden=(6,), n_out=3, loss="softmax", act="relu")).init_(3)
    batch = make_batch("softmax", n=20, n_sparse=40, n_dense=4, n_out=3)
    model.loss_grad_(batch, 0.05)
    dense = model.grads.copy()
    model.grads[...] = np.nan
    rows = model.loss_grad_(batch, 0.05, sparse_grad=True)
    np.testing.assert_allclose(model.grads[model.dense_start:], dense[model.dense_start:], rtol=1e-13)
    model.densify_(rows)
    np.testing.assert_allclose(model.grads, dense, rtol=1e-12, atol=1e-15)
    whole = model.predict(batch)
    monkeypatch.setattr(periodic, "EVAL_ROWS", 3)
    np.testing.assert_allclose(model.predict(batch), whole, rtol=1e-13)


def test_layout_sizes_and_a_bad_spec():
    s = spec(n_sparse=10, n_dense=5, hidden=(4,), n_out=2, columns=3, k=6, d=2)
    model = MLP(s)
    assert s.periodic_size == 3 * (6 + 12 * 2 + 2)
    assert model.W[0].shape == (10 + 5 + 3 * 2, 4)
    assert model.size == s.n_params == (21 * 4 + 4) + s.periodic_size + (4 * 2 + 2)
    assert model.layout()["periodic"] == [[3, 6], [3, 12, 2], [3, 2]]
    model.init_(0)
    c = model.params[model.offsets[2] - s.periodic_size:][:18]
    assert 0 < np.std(c) < 3 * 0.7 and np.all(model.params[model.offsets[2] - s.periodic_size:model.offsets[2]] != 0)
    with pytest.raises(MpinnError, match="periodic embeddings of 6 columns"):
        spec(n_dense=4, columns=6)


def table(path, n=400, seed=0):
    """Two numeric columns (one with a sharp threshold effect), a 0/1 flag and a category; binary label."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, 1, n), rng.lognormal(3, 1, n)
    flag, kind = rng.integers(0, 2, n), rng.choice(["u", "v", "w"], n)
    logit = 3 * np.sin(4 * a) + 2 * (b > 30) - flag + (kind == "u")
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    with open(path, "w") as f:
        f.write("a,b,flag,kind,y\n")
        for i in range(n):
            f.write("%.6g,%.6g,%d,%s,%d\n" % (a[i], b[i], flag[i], kind[i], y[i]))
    return str(path)


@pytest.mark.mpi
def test_n_ranks_equal_one_rank_and_the_file_predicts_the_formula(tmp_path, launcher):
    """Training with periodic embeddings at np 1, 2 and 3 gives the same parameters (float64); the model file's
    predictions (python -m mpinn.predict) are the published formula's on the file's parameters."""
    data = table(tmp_path / "t.csv")
    common = ["--data", data, "--label", "y", "--numeric", "a,b,flag", "--categorical", "kind", "--dtype", "float64",
              "--epochs", "2", "--hidden", "8", "--numeric-bins", "off", "--numeric-embedding", "periodic:2",
              "--ensemble", "1", "--no-progress"]
    got = {}
    for np_ in (1, 2, 3):
        out = str(tmp_path / ("m%d.npz" % np_))
        r = mpirun(np_, ["-m", "mpinn.train"] + common + ["--model-out", out], timeout=180)
        assert r.returncode == 0, r.stderr
        assert "+ 48 from periodic embeddings of 3 numeric columns (sigma 2)" in r.stdout
        got[np_] = np.load(out)["params"]
    for np_ in (2, 3):
        assert np.max(np.abs(got[np_] - got[1])) < 1e-10, np_
    pred = str(tmp_path / "p.csv")
    r = run([sys.executable, "-m", "mpinn.predict", "--model", str(tmp_path / "m1.npz"), "--data", data, "--out",
             pred], timeout=120)
    assert r.returncode == 0, r.stderr
    from_file = np.loadtxt(pred, delimiter=",", skiprows=1, usecols=1)
    params, spec, meta = load_model(str(tmp_path / "m1.npz"))
    model = MLP(spec)
    model.params[...] = params
    rows = load_for_model(meta, data)
    batch = rows.take(np.arange(len(rows)))
    z = plainly(model, batch)[:, 0]
    np.testing.assert_allclose(from_file, 1 / (1 + np.exp(-z)), rtol=1e-5, atol=1e-7)     # the CSV's 6 digits


@pytest.mark.parametrize("bad", ["periodic:0", "periodic:x", "sine", "periodic:-1"])
def test_a_bad_choice_is_one_clear_line(bad):
    r = run([sys.executable, "-m", "mpinn.train", "--numeric-embedding", bad], timeout=60)
    assert r.returncode == 2
    assert "--numeric-embedding" in r.stderr and "periodic:SIGMA" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2


@pytest.mark.mpi
def test_auto_trains_the_first_member_again_with_them_and_keeps_the_better(tmp_path, launcher):
    """--numeric-embedding auto on an ensemble of 10,000 training rows: member 1 is trained without and with
    periodic embeddings; each run equals that run alone (--ensemble 1 with the choice given: its held-out logloss,
    its parameters bit for bit), the better by held-out logloss is member 1 and every member has its choice; the
    trial's checkpoints resume like a member's; one model (--ensemble 1) and fewer rows try nothing."""
    data = table(tmp_path / "t.csv", n=11200)
    common = ["-m", "mpinn.train", "--data", data, "--label", "y", "--dtype", "float64", "--hidden", "8",
              "--epochs", "3", "--early-stop", "2", "--batch-size", "512", "--no-progress"]
    alone = {}
    for emb in ("off", "periodic"):
        out, metrics = str(tmp_path / (emb + ".npz")), str(tmp_path / (emb + ".json"))
        r = mpirun(2, common + ["--ensemble", "1", "--numeric-embedding", emb, "--model-out", out,
                                "--metrics-out", metrics], timeout=180)
        assert r.returncode == 0, r.stderr
        alone[emb] = (json.load(open(metrics))["valid"]["logloss"], np.load(out)["params"])
    ck = tmp_path / "ck"
    r = mpirun(2, common + ["--ensemble", "2", "--checkpoint-dir", str(ck), "--model-out", str(tmp_path / "auto.npz")],
               timeout=180)
    assert r.returncode == 0, r.stderr
    chosen = "periodic" if alone["periodic"][0] < alone["off"][0] else "off"
    line = "numeric embedding: periodic (sigma 10, 3 columns) on member 1's held-out rows: logloss %.4f against " \
           "%.4f without; %s for every member" % (alone["periodic"][0], alone["off"][0],
                                                  "kept" if chosen == "periodic" else "left out")
    assert line in r.stdout, r.stdout
    params, spec, meta = load_model(str(tmp_path / "auto.npz"))
    assert np.array_equal(params[0], alone[chosen][1])
    assert (spec.periodic is not None) == (chosen == "periodic")
    record = meta["ensemble"]["numeric_embedding"]
    assert record["chosen"] == chosen and record["with"] == alone["periodic"][0] and \
        record["without"] == alone["off"][0]
    # the file records the run's options (not those of the trial's run): what --print-config writes
    assert meta["config"]["ensemble"] == 2 and meta["config"]["checkpoint_dir"] == str(ck)
    assert meta["config"]["numeric_embedding"] == ("periodic" if chosen == "periodic" else "auto")
    r = mpirun(2, common + ["--ensemble", "2", "--resume", str(ck), "--model-out", str(tmp_path / "again.npz")],
               timeout=180)
    assert r.returncode == 0 and "resumed from %s" % (ck / "trial-periodic" / "ckpt-") in r.stdout, r.stderr
    assert line in r.stdout and np.array_equal(load_model(str(tmp_path / "again.npz"))[0], params)
    r = mpirun(2, common + ["--ensemble", "1", "--model-out", str(tmp_path / "one.npz")], timeout=180)
    assert r.returncode == 0 and "numeric embedding:" not in r.stdout, r.stderr
    assert np.array_equal(np.load(str(tmp_path / "one.npz"))["params"], alone["off"][1])
    small = table(tmp_path / "small.csv", n=2000)
    r = mpirun(2, common + ["--data", small, "--ensemble", "2", "--model-out", str(tmp_path / "small.npz")],
               timeout=180)
    assert r.returncode == 0 and "numeric embedding:" not in r.stdout, r.stderr
