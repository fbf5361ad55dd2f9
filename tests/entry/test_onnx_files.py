"""ONNX export's files (issue 64): parameters in an external data file (the path a table past 2 GiB takes, here from
a lowered threshold), checked by onnx.checker by path and scored the same; what the export cannot express, a file
that is not a model and an ONNX model not written by mpinn answered in one line with exit 2."""
import os
import sys

import numpy as np
import pytest

import mpinn.api as mp
from conftest import run
from mpinn.core.errors import MpinnError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def table_csv(path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("site,app,hour,price,clicked\n")
        for i in range(n):
            site, app = rng.choice(["a1", "b2", "c3", "d4"]), int(rng.integers(0, 7))
            price = rng.gamma(2.0, 1.5)
            f.write("%s,%d,%d,%s,%s\n" % (site, app, rng.integers(0, 24), "" if i % 11 == 0 else "%.3f" % price,
                                          "yes" if site == "a1" or price > 4 or rng.random() < 0.1 else "no"))
    return str(path)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx-files")
    data = table_csv(d / "clicks.csv")
    model = str(d / "m.npz")
    r = run([sys.executable, "-m", "mpinn.train", "--data", data, "--label", "clicked", "--hidden", "8", "--epochs", "2",
             "--ensemble", "2", "--hash-bits", "14", "--no-progress", "--quiet", "--model-out", model])
    assert r.returncode == 0, r.stderr
    return d, data, model


def test_parameters_past_the_threshold_go_to_external_data(small, tmp_path):
    d, data, model = small
    inside = mp.export(model, str(tmp_path / "inside.onnx"))
    assert inside["external"] is None and not os.path.exists(str(tmp_path / "inside.onnx.data"))
    out = str(tmp_path / "outside.onnx")
    done = mp.export(model, out, external_from=1 << 16)
    assert done["external"] == out + ".data" and os.path.getsize(out + ".data") > 2 * (1 << 14) * 9 * 4
    assert done["bytes"] < 64 << 10 < inside["bytes"]       # the tables are in the data file
    onnx.checker.check_model(out)                            # by path: the external data checked too
    m = onnx.load(out, load_external_data=False)
    tables = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert len(tables) == 2 and all(int({e.key: e.value for e in t.external_data}["offset"]) % 65536 == 0
                                    for t in tables)
    assert not [f for f in os.listdir(tmp_path) if "tmp" in f]
    want = mp.Predictor(model).predict(data)
    got = mp.OnnxPredictor(out).predict(data)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert np.array_equal(got, mp.OnnxPredictor(inside["path"]).predict(data))


def test_a_model_the_graph_cannot_express_is_refused_in_one_line(tmp_path):
    sp = pytest.importorskip("scipy.sparse")
    from mpinn.sklearn import MpinnClassifier
    rng = np.random.default_rng(0)
    X = sp.random(200, 50, density=0.1, format="csr", random_state=0) * 3.0
    y = (rng.random(200) < 0.5).astype(int)
    model = str(tmp_path / "sparse.npz")
    MpinnClassifier(hidden=(4,), epochs=1, model_out=model).fit(X, y)
    out = str(tmp_path / "sparse.onnx")
    r = run([sys.executable, "-m", "mpinn.export", "--model", model, "--out", out])
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("mpinn: error: %s cannot be written as an ONNX graph: its first layer reads the "
                               "columns of a sparse matrix" % model), lines
    assert not os.path.exists(out) and os.listdir(tmp_path) == ["sparse.npz"]
    with pytest.raises(MpinnError, match="cannot be written as an ONNX graph"):
        mp.export(model, out)


def test_what_is_not_a_model_is_one_line(small, tmp_path):
    d, data, model = small
    for cmd, says in (
            (["mpinn.export", "--model", data, "--out", str(tmp_path / "x.onnx")], "is not a model written by"),
            (["mpinn.predict", "--model", data.replace(".csv", ".onnx"), "--data", data], "ONNX Runtime cannot load"),
            (["mpinn.export", "--model", model, "--out", model], "")):
        r = run([sys.executable, "-m"] + cmd)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and says in lines[0], (cmd, r.stderr)
    foreign = str(tmp_path / "foreign.onnx")
    h = onnx.helper
    g = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", 1, [1])],
                     [h.make_tensor_value_info("y", 1, [1])])
    onnx.save_model(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), foreign)
    r = run([sys.executable, "-m", "mpinn.predict", "--model", foreign, "--data", data])
    assert r.returncode == 2 and "without mpinn's metadata" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("mode", ["split", "onehot"])
def test_the_other_hashing_modes(small, tmp_path, mode):
    """split (k ids a feature: 4 here) and onehot (a vocabulary, an unseen value's own column) give the graph rows of
    their width; an unseen value scores."""
    d, data, _ = small
    model = str(tmp_path / "m.npz")
    r = run([sys.executable, "-m", "mpinn.train", "--data", data, "--label", "clicked", "--hidden", "4", "--epochs", "1",
             "--ensemble", "1", "--hash-mode", mode, "--no-progress", "--quiet", "--model-out", model])
    assert r.returncode == 0, r.stderr
    o = mp.OnnxPredictor(mp.export(model, str(tmp_path / "m.onnx"))["path"])
    assert o.inputs["ids"]["ids_per_row"] == {"split": 8, "onehot": 2}[mode]
    p = mp.Predictor(model)
    np.testing.assert_allclose(o.predict(data), p.predict(data), rtol=0, atol=1e-6)
    row = {"site": "never seen", "app": 3, "hour": 13, "price": None}
    np.testing.assert_allclose(o.predict(row), p.predict(row), rtol=0, atol=1e-6)
