"""ONNX export (issue 64): python -m mpinn.export writes a model file as an ONNX graph, and ONNX Runtime scores it as
mpinn's numpy does (to 1e-6, the same class decisions; python -m mpinn.predict --model M.onnx writes the columns
--model M.npz writes) for the embedded click log's default model, a W4-shaped click-log model (a 2^20 table), a
census-like table with quantile bins, periodic embeddings and an ensemble, a multiclass pixel model and a
regression; the hashing contract in the metadata is enough to hash a row without mpinn; external data; bad input."""
import csv
import json
import sys

import numpy as np
import pytest

import mpinn.api as mp
from conftest import run, w4_text

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
xxhash = pytest.importorskip("xxhash")


def train(d, name, args):
    model = str(d / name)
    r = run([sys.executable, "-m", "mpinn.train", "--no-progress", "--quiet", "--model-out", model] + args,
            timeout=300, cwd=str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    return model


def export(model):
    out = model[:-len(".npz")] + ".onnx"
    r = run([sys.executable, "-m", "mpinn.export", "--model", model, "--out", out])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ONNX model written to %s (opset 17" % out), r.stdout
    onnx.checker.check_model(out)
    return out


def same(a, b, task, scale=1.0):
    """ONNX Runtime's predictions b against mpinn's a: within 1e-6 (a regression's in its standardised units: scale,
    the target's), the same class decisions."""
    assert a.shape == b.shape and b.dtype == np.float64
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * scale)
    if task == "multiclass":
        assert np.array_equal(a.argmax(axis=1), b.argmax(axis=1))
    elif task == "binary":
        assert np.array_equal(a > 0.5, b > 0.5)


def predict_cli(model, data, out, *more):
    r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--out", out] + (["--data", data] if data else [])
            + list(more))
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out) as f:
        rows = list(csv.reader(f))
    return r.stdout.splitlines()[0], rows[0], rows[1:]


def same_files(npz, onnx_path, data, tmp_path, task, scale=1.0, *more):
    """python -m mpinn.predict --model M.onnx against --model M.npz: the same header, metrics line and predicted
    classes; the numbers to 1e-6 and the CSV's six significant digits."""
    line_a, head_a, a = predict_cli(npz, data, str(tmp_path / "npz.csv"), *more)
    line_b, head_b, b = predict_cli(onnx_path, data, str(tmp_path / "onnx.csv"), *more)
    assert head_a == head_b and line_a == line_b and len(a) == len(b) > 0
    if task != "regression":
        assert [r[0] for r in a] == [r[0] for r in b]
        a, b = [r[1:] for r in a], [r[1:] for r in b]
    np.testing.assert_allclose(np.array(b, float), np.array(a, float), rtol=1e-6, atol=2e-6 * scale)


@pytest.fixture(scope="module")
def click(tmp_path_factory):
    d = tmp_path_factory.mktemp("click")
    model = train(d, "default.npz", ["--default-rows", "20000", "--epochs", "1"])
    return d, model, export(model)


def test_the_default_click_model_scores_the_same_in_onnx_runtime(click, tmp_path):
    d, model, path = click
    same(mp.Predictor(model).predict(None), mp.OnnxPredictor(path).predict(None), "binary")
    same_files(model, path, None, tmp_path, "binary")
    m = onnx.load(path)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 17)]
    props = {p.key: p.value for p in m.metadata_props}
    header = json.loads(str(np.load(model)["header"][()]))
    assert json.loads(props["hashing"]) == header["meta"]["hashing"]
    assert json.loads(props["inputs"])["ids"]["padding_id"] == 2 ** 18
    assert [i.name for i in m.graph.input] == ["ids", "numeric"] and m.graph.output[0].name == "prediction"


def test_a_row_hashed_from_the_metadata_alone_scores_as_mpinn_scores_it(click):
    """The ids of docs/hashing.md's trick mode, computed here with xxhash from the metadata (not mpinn's hashing),
    fed to the graph; a category never seen in training still scores (it hashes to a column)."""
    _, model, path = click
    p = mp.OnnxPredictor(path)
    contract = json.loads(p.session.get_modelmeta().custom_metadata_map["hashing"])
    row = {"c%d" % j: "never seen %d" % j if j % 3 == 0 else "v%d" % j for j in range(20)}
    row.update(n0=0.25, n1=-1.5, n2=float("nan"), n3=40.0)      # missing, and past the training range
    ids = [xxhash.xxh64_intdigest(("%s=%s" % (f, row[f])).encode(), contract["seed"]) % (1 << contract["bits"])
           for f in contract["features"]]
    got = p.run(ids=np.array([ids]), numeric=np.array([[row[c] for c in ("n0", "n1", "n2", "n3")]]))
    want = mp.Predictor(model).predict(row)
    same(want, got, "binary")
    same(want, p.predict(row), "binary")
    padded = np.array([ids + [p.inputs["ids"]["padding_id"]] * 3])      # padding ids add nothing
    assert np.array_equal(p.run(ids=padded, numeric=np.array([[0.25, -1.5, np.nan, 40.0]])), got)


def test_a_w4_click_log_model_with_a_two_to_the_20_table(tmp_path):
    data = tmp_path / "w4.tsv"
    w4_text(data, 3000)
    model = train(tmp_path, "w4.npz", ["--data", str(data), "--hash-bits", "20", "--hidden", "16", "--epochs", "1"])
    path = export(model)
    assert json.loads(str(np.load(model)["header"][()]))["spec"]["n_sparse"] == 2 ** 20
    same_files(model, path, str(data), tmp_path, "binary", 1.0, "--stream", "on")     # a block at a time too
    same(mp.Predictor(model).predict(str(data)), mp.OnnxPredictor(path).predict(str(data)), "binary")


def census_csv(path, n=2000, seed=0):
    """A census-income-like table: two categories, a count, a heavy-tailed amount (mostly 0), a weight, hours with
    missing cells; the label '<=50K' / '>50K' depends on all of them."""
    rng = np.random.default_rng(seed)
    job = rng.choice(["clerk", "sales", "exec", "farming", "tech", "craft"], n)
    edu = rng.choice(["HS-grad", "Bachelors", "Masters", "Some-college", "Doctorate"], n)
    age = rng.integers(17, 90, n)
    gain = np.where(rng.random(n) < 0.2, np.minimum(rng.lognormal(8, 2, n), 99999), 0.0)
    hours = rng.normal(40, 12, n).round(1)
    weight = rng.lognormal(12, 0.5, n).round(0)
    logit = (np.log1p(gain) - 3) * 0.4 + (age - 40) / 15 + (job == "exec") * 1.5 + (edu == "Masters") + (
        hours - 40) / 20 - 0.8
    label = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), ">50K", "<=50K")
    with open(path, "w") as f:
        f.write("age,workclass,fnlwgt,education,capital_gain,hours_per_week,income\n")
        for i in range(n):
            f.write("%d,%s,%d,%s,%.0f,%s,%s\n" % (age[i], job[i], weight[i], edu[i], gain[i],
                                                  "" if i % 13 == 4 else hours[i], label[i]))
    return str(path)


@pytest.fixture(scope="module")
def census(tmp_path_factory):
    d = tmp_path_factory.mktemp("census")
    data = census_csv(d / "census.csv")
    model = train(d, "census.npz", ["--data", data, "--label", "income", "--numeric-bins", "8", "--numeric-embedding",
                                    "periodic", "--ensemble", "3", "--epochs", "2", "--hidden", "16"])
    return d, data, model, export(model)


def test_census_with_bins_periodic_embeddings_and_an_ensemble(census, tmp_path):
    pd = pytest.importorskip("pandas")
    d, data, model, path = census
    header = json.loads(str(np.load(model)["header"][()]))
    assert header["spec"]["periodic"] and header["meta"]["transform"]["bins"] and header["meta"]["ensemble"][
        "members"] == 3
    assert "log" in header["meta"]["transform"]["kind"] and header["meta"]["transform"]["indicators"]
    p, o = mp.Predictor(model), mp.OnnxPredictor(path)
    same(p.predict(data), o.predict(data), "binary")
    frame = pd.read_csv(data).drop(columns=["income"])
    frame.loc[0, "workclass"] = "astronaut"      # unseen
    frame.loc[1, "hours_per_week"] = None         # missing
    frame.loc[2, "capital_gain"] = 1e9            # past the training range (clipped)
    same(p.predict(frame), o.predict(frame), "binary")
    same(p.predict(frame.iloc[:1]), o.predict(frame.to_dict("records")[:1]), "binary")
    same_files(model, path, data, tmp_path, "binary")


def test_a_multiclass_pixel_model(tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    data = str(tmp_path / "digits.npz")
    np.savez(data, X=digits.data / 16.0, y=digits.target)
    model = train(tmp_path, "pixels.npz", ["--data", data, "--hidden", "32", "--epochs", "3", "--ensemble", "2"])
    path = export(model)
    same(mp.Predictor(model).predict(data), mp.OnnxPredictor(path).predict(data), "multiclass")
    same_files(model, path, data, tmp_path, "multiclass")


def diamonds_csv(path, n=2000, seed=0):
    """Diamonds-like: carat, cut, color, depth; the price grows with carat to a power."""
    rng = np.random.default_rng(seed)
    carat = np.round(rng.gamma(2.0, 0.4, n), 2)
    cut = rng.choice(["Fair", "Good", "Very Good", "Premium", "Ideal"], n)
    color = rng.choice(list("DEFGHIJ"), n)
    depth = rng.normal(61.7, 1.4, n).round(1)
    price = np.round(3500 * carat ** 1.6 * (1 + 0.1 * (cut == "Ideal")) * np.exp(rng.normal(0, 0.15, n)) + 300)
    with open(path, "w") as f:
        f.write("carat,cut,color,depth,price\n")
        for i in range(n):
            f.write("%.2f,%s,%s,%.1f,%.0f\n" % (carat[i], cut[i], color[i], depth[i], price[i]))
    return str(path)


def test_a_regression_in_the_labels_units(tmp_path):
    data = diamonds_csv(tmp_path / "diamonds.csv")
    model = train(tmp_path, "diamonds.npz", ["--data", data, "--label", "price", "--hidden", "16", "--epochs", "3",
                                             "--ensemble", "2"])
    path = export(model)
    scale = json.loads(str(np.load(model)["header"][()]))["meta"]["transform"]["target"]["scale"]
    want = mp.Predictor(model).predict(data)
    assert want.mean() > 1000       # in dollars, not in the network's standardised units
    same(want, mp.OnnxPredictor(path).predict(data), "regression", scale)
    same_files(model, path, data, tmp_path, "regression", scale)
