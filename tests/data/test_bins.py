"""Quantile bins of numeric columns (--numeric-bins): the edges against numpy's quantiles, the piecewise-linear
encoding against its formula written out, gradients through it against finite differences, the fit whatever
the chunking, N ranks against 1, and a model file with bins through predict."""
import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mpinn.data.fit.stats as stats_module
from conftest import mpirun, run
from mpinn.core.batch import Batch
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.data.fit.bins import AUTO_BINS, AUTO_MAX_COLUMNS, AUTO_MAX_ROWS, AUTO_MIN_ROWS, fit_edges, parse
from mpinn.data.fit.stats import BLOCK, ColumnStats, column_stats
from mpinn.data.fit.transform import NumericTransform
from mpinn.model.mlp import MLP

NAMES = ["normal", "money", "small", "flag"]


def columns(n, seed=0):
    """A normal column, a heavy-tailed one with a mass at 0, one of five values, a 0/1 flag; a few missing."""
    rng = np.random.default_rng(seed)
    money = rng.lognormal(6, 1.5, n) * (rng.random(n) < 0.6)
    X = np.column_stack([rng.normal(3, 2, n), money, rng.integers(0, 5, n).astype(float),
                         (rng.random(n) < 0.3).astype(float)])
    X[rng.random(n) < 0.02, 0] = np.nan
    return X


def ple(x, b):
    """Gorishniy et al.'s piecewise-linear encoding of one value x for edges b_0 < ... < b_T, as the paper
    writes it (x first clipped to [b_0, b_T])."""
    x = min(max(x, b[0]), b[-1])
    T = len(b) - 1
    e = []
    for t in range(1, T + 1):
        if x < b[t - 1] and t > 1:
            e.append(0.0)
        elif x >= b[t] and t < T:
            e.append(1.0)
        else:
            e.append((x - b[t - 1]) / (b[t] - b[t - 1]))
    return e


def test_the_edges_are_the_quantiles_and_the_encoding_is_the_formula():
    X = columns(3000)
    t = NumericTransform.fit(column_stats(X, NAMES), "auto", bins=8)
    edges = t.bins.edges
    for j in range(3):      # every row is in the sample (3000 rows): numpy's quantiles of the values, exactly
        v = X[np.isfinite(X[:, j]), j]
        want = np.quantile(v, np.arange(9) / 8, method="inverted_cdf")
        want[0], want[-1] = v.min(), v.max()
        assert edges[j] == list(np.unique(want))
    assert len(edges[0]) == 9 and edges[2] == [0.0, 1.0, 2.0, 3.0, 4.0] and edges[3] == []   # a flag: no bins
    assert edges[1][0] == 0.0 and 3 <= len(edges[1]) < 9          # the mass at 0: tied edges merged
    test = np.vstack([X[:200], [[-50.0, 1e9, 2.5, 1.0], [np.nan, np.inf, -1.0, 0.0]]])
    Z = t.apply(test)
    start = t.n_in + len(t.indicators)
    assert t.n_out == start + sum(len(e) - 1 for e in edges if e)
    for i, row in enumerate(test):
        want = []
        for j, b in enumerate(edges):
            if b:
                want += [0.0] * (len(b) - 1) if not np.isfinite(row[j]) else ple(row[j], b)
        np.testing.assert_allclose(Z[i, start:], want, rtol=1e-13, atol=1e-15)
    assert "quantile bins, piecewise-linear, for 3 columns (%d inputs): normal, money, small" % (
        t.n_out - start) in t.describe()
    assert NumericTransform.fit(column_stats(X, NAMES), "auto", bins="off").bins is None
    with pytest.raises(MpinnError, match="--numeric-bins wants auto, off or a number of bins 2..64"):
        parse("65")


def test_auto_bins_tables_of_enough_rows_and_not_too_many_columns():
    rng = np.random.default_rng(5)
    many = column_stats(rng.normal(size=(AUTO_MIN_ROWS, 2)), ["a", "b"])
    assert [len(e) for e in fit_edges(many, "auto")] == [AUTO_BINS + 1] * 2
    few = column_stats(rng.normal(size=(AUTO_MIN_ROWS - 1, 2)), ["a", "b"])
    assert fit_edges(few, "auto") == [[], []] and len(fit_edges(few, 8)[0]) == 9
    wide = column_stats(rng.normal(size=(AUTO_MIN_ROWS, AUTO_MAX_COLUMNS + 1)), ["x%d" % j for j in range(65)])
    assert not any(fit_edges(wide, "auto"))
    log = dict(many, rows=AUTO_MAX_ROWS)          # the statistics of a million rows: a log
    assert fit_edges(log, "auto") == [[], []] and len(fit_edges(log, 4)[0]) == 5
    assert fit_edges(many, "auto", "criteo") == [[], []] and fit_edges(many, "auto", "csv") == fit_edges(many, "auto")
    one = column_stats(np.random.default_rng(3).normal(size=(20_000, 1)), ["year"])
    assert fit_edges(one, "auto") == [[]] and len(fit_edges(one, 8)[0]) == 9      # a lone numeric column: none


def test_gradients_through_the_bins_match_finite_differences():
    """The loss's gradient with respect to a raw numeric value: the model's input gradient (one row: W0 times
    the first layer's bias gradient) through the encoding's derivative written from the formula (1 / the bin's
    width in the bin that holds x, 0 in the others; 1 / scale for the standardised value), against central
    differences of the loss of transform.apply(x). Then the first layer's weight gradient on binned inputs."""
    X = columns(3000)[:, :3]
    t = NumericTransform.fit(column_stats(X, NAMES[:3]), "standard", bins=8)
    model = MLP(ModelSpec(0, t.n_out, (6,), 1, "tanh", "sigmoid", "float64")).init_(3)
    y = np.array([1.0])

    def loss(x):
        return model.loss_sum(Batch(None, t.apply(x[None]), y))

    start = t.n_in + len(t.indicators)
    for x in (np.array([3.3, 700.0, 2.5]), np.array([-1.7, 40.0, 0.5]), np.array([8.0, 3000.0, 3.5])):
        model.loss_grad_(Batch(None, t.apply(x[None]), y), 1.0)
        d_inputs = model.W[0] @ model.gb[0]
        J = np.zeros((t.n_out, t.n_in))
        k = start
        for j, b in enumerate(t.bins.edges):
            J[j, j] = 1.0 / t.scale[j]
            for lo, hi in zip(b[:-1], b[1:]):
                J[k, j] = 1.0 / (hi - lo) if lo < x[j] < hi else 0.0
                k += 1
        analytic = J.T @ d_inputs
        h = 1e-6 * np.maximum(np.abs(x), 1.0)
        numeric = np.array([(loss(x + h * e) - loss(x - h * e)) / (2 * h[j]) for j, e in enumerate(np.eye(3))])
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9)
        assert np.count_nonzero(J[start:]) == 3      # x moves one bin of each column
    rows = t.apply(X[:64])
    batch = Batch(None, rows, (np.arange(64) % 2).astype(float))
    model.loss_grad_(batch, 1.0)
    W0 = model.W[0]
    eps = 1e-6
    for i, o in [(start, 0), (start + 3, 2), (t.n_out - 1, 5), (1, 1)]:
        keep = W0[i, o]
        W0[i, o] = keep + eps
        up = model.loss_sum(batch)
        W0[i, o] = keep - eps
        down = model.loss_sum(batch)
        W0[i, o] = keep
        assert abs(model.gW[0][i, o] - (up - down) / (2 * eps)) < 1e-7


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(1, 3 * BLOCK), min_size=0, max_size=6), seed=st.integers(0, 50))
def test_the_bins_fit_does_not_depend_on_the_chunking(cuts, seed):
    """More rows than the sample holds (4096 of the 13,000 here): the sample is the same rows however they
    came, so the quantiles and the edges are the same bits; it is a uniform sample, not the first rows (the
    rows are sorted here: the first 4096 would put the median at the 16th percentile)."""
    saved = stats_module.SAMPLE_VALUES
    stats_module.SAMPLE_VALUES = 1          # the smallest sample, BLOCK rows
    try:
        X = columns(3 * BLOCK + 713, seed)
        X = X[np.argsort(X[:, 0])]
        whole = column_stats(X, NAMES)
        acc, pos = ColumnStats(NAMES), 0
        for c in cuts:
            acc.update(X[pos:pos + c])
            pos += c
        acc.update(X[pos:])
    finally:
        stats_module.SAMPLE_VALUES = saved
    got = acc.result()
    assert got == whole
    v = X[np.isfinite(X[:, 0]), 0]
    median = whole["quantiles"][0][32]
    assert abs(np.mean(v <= median) - 0.5) < 0.03
    assert NumericTransform.fit(got, bins=16).to_dict() == NumericTransform.fit(whole, bins=16).to_dict()


def table(path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = columns(n, seed)
    cat = rng.choice(["a", "b", "c"], n)
    logit = np.sin(np.nan_to_num(X[:, 0])) + (X[:, 1] > 400) - 0.5 * X[:, 2] + (cat == "a")
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    with open(path, "w") as f:
        f.write("normal,money,small,flag,kind,y\n")
        for i in range(n):
            f.write("%s,%.6g,%d,%d,%s,%d\n" % ("" if np.isnan(X[i, 0]) else "%.6g" % X[i, 0], X[i, 1], X[i, 2],
                                               X[i, 3], cat[i], y[i]))
    return str(path)


@pytest.mark.mpi
def test_n_ranks_equal_one_rank_with_bins(tmp_path, launcher):
    data = table(tmp_path / "t.csv")
    common = ["--data", data, "--label", "y", "--numeric", "normal,money,small,flag", "--categorical", "kind",
              "--dtype", "float64", "--epochs", "2", "--hidden", "8", "--numeric-bins", "8", "--no-progress"]
    got = {}
    for np_ in (1, 2, 3):
        out = str(tmp_path / ("m%d.npz" % np_))
        r = mpirun(np_, ["-m", "mpinn.train"] + common + ["--model-out", out], timeout=180)
        assert r.returncode == 0, r.stderr
        assert "quantile bins, piecewise-linear, for 3 columns" in r.stdout
        got[np_] = np.load(out)["params"]
    off = str(tmp_path / "off.npz")
    r = mpirun(1, ["-m", "mpinn.train"] + common + ["--numeric-bins", "off", "--model-out", off], timeout=180)
    assert r.returncode == 0, r.stderr
    assert np.load(off)["params"].size < got[1].size         # the bins are inputs of the model
    for np_ in (2, 3):
        assert np.max(np.abs(got[np_] - got[1])) < 1e-10, np_


SCRIPT = """
import json, sys
import numpy as np
import mpinn.api as mp
from mpinn.model.mlp import predict_rows
from mpinn.inference.load import load_for_model
data, model_out = sys.argv[1], sys.argv[2]
r = mp.train(data, label="y", numeric="normal,money,small,flag", categorical="kind", numeric_bins="8", epochs=2, ensemble=1,
             hidden=(8,), model_out=model_out, quiet=True)
rows = load_for_model(r.meta, data)
np.save(sys.argv[3], predict_rows(r.model, rows))
print(json.dumps(r.meta["transform"]["bins"]))
"""


@pytest.mark.launch
def test_a_model_file_with_bins_round_trips_through_predict(tmp_path):
    train, test = table(tmp_path / "train.csv"), table(tmp_path / "test.csv", 300, seed=1)
    model, mine = str(tmp_path / "m.npz"), str(tmp_path / "mine.npy")
    r = run([sys.executable, "-c", SCRIPT, train, model, mine], timeout=180)
    assert r.returncode == 0, r.stderr
    bins = json.loads(r.stdout.strip().splitlines()[-1])
    assert bins["edges"][0] and bins["edges"][3] == []
    # the script predicted the training file in process; predict reads the model file
    out = str(tmp_path / "p.csv")
    r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", train, "--out", out], timeout=120)
    assert r.returncode == 0, r.stderr
    from_file = np.loadtxt(out, delimiter=",", skiprows=1, usecols=1)
    in_process = np.load(mine)
    np.testing.assert_allclose(from_file, in_process, rtol=1e-5, atol=1e-7)      # the CSV's 6 digits
    from mpinn.inference.predictor import Predictor
    exact = Predictor(model).predict(train)
    assert np.array_equal(exact, in_process)
    r = run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test, "--out", out], timeout=120)
    assert r.returncode == 0, r.stderr
