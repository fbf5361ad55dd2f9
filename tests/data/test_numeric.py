"""Numeric inputs: streaming statistics against numpy, the fitted transform, its round trips through the
model file and the packed file, missing cells, labels with two values of any kind, learning-rate decay."""
import json
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, load_csv, load_data
from mpinn.data.fit import stats
from mpinn.data.inputs import check_labels
from mpinn.data.fit.labels import encode_labels
from mpinn.data.fit.stats import BLOCK, ColumnStats, PartFold, column_stats, first_finite
from mpinn.data.fit.transform import NumericTransform, check_same


def columns(n, seed=0):
    """Money (log-normal, up to ~1e6), a count, a value far from zero with a small spread, a column with
    missing values, a constant column."""
    rng = np.random.default_rng(seed)
    money = np.minimum(rng.lognormal(8, 2.5, n), 1e6) * (rng.random(n) < 0.4)
    far = 1e6 + rng.standard_normal(n)
    gappy = np.where(rng.random(n) < 0.1, np.nan, rng.standard_normal(n))
    return np.column_stack([money, rng.poisson(3, n).astype(float), far, gappy, np.full(n, 7.0)])


NAMES = ["money", "count", "far", "gappy", "flat"]


def assert_numpy(stats, X):
    for j in range(X.shape[1]):
        c = X[np.isfinite(X[:, j]), j]
        assert stats["count"][j] == c.size and stats["missing"][j] == X.shape[0] - c.size
        np.testing.assert_allclose(stats["mean"][j], c.mean(), rtol=1e-12, atol=0)
        np.testing.assert_allclose(stats["std"][j] ** 2, c.var(), rtol=1e-12, atol=1e-300)
        assert stats["min"][j] == c.min() and stats["max"][j] == c.max()
        logs = np.log1p(np.maximum(c, 0))
        np.testing.assert_allclose(stats["log_mean"][j], logs.mean(), rtol=1e-12, atol=0)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 3 * BLOCK), min_size=0, max_size=6), seed=st.integers(0, 100))
def test_statistics_equal_numpy_whatever_the_chunking(cuts, seed):
    X = columns(2 * BLOCK + 1234, seed)
    whole = column_stats(X, NAMES)
    assert_numpy(whole, X)
    acc, pos = ColumnStats(NAMES), 0
    for c in cuts:
        acc.update(X[pos:pos + c])
        pos += c
    acc.update(X[pos:])
    assert acc.result() == whole        # bit for bit: blocks are counted from the first row


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 3 * BLOCK), min_size=1, max_size=5), chunk=st.integers(1, 2 * BLOCK),
       late=st.integers(0, 4 * BLOCK), seed=st.integers(0, 100))
def test_parts_folded_apart_then_joined_are_the_one_pass_bit_for_bit(sizes, chunk, late, seed):
    """Prepare in parallel: part 0 folded by rank 0, every later part by its own rank (PartFold, from its start
    row and the first finite values all parts agree on), joined on rank 0 in order: the same result, bit for bit,
    as one pass over the rows, for parts of any size (shorter than a block, ending on a block's end, empty) and a
    column whose first value comes late (in a later part)."""
    with mock.patch.object(stats, "SAMPLE_VALUES", 1):       # a sample of BLOCK rows: fewer than the rows
        joined_equals_one_pass(sizes, chunk, late, seed)


def joined_equals_one_pass(sizes, chunk, late, seed):
    X = columns(sum(sizes) + 100, seed)
    X[:late, 3] = np.nan
    whole = column_stats(X, NAMES)
    cuts = np.cumsum([100] + sizes)[:-1].tolist() + [len(X)]       # part 0 has 100 rows and more
    parts = [X[a:b] for a, b in zip([0] + cuts[:-1], cuts)]
    chunks = [[p[i:i + chunk] for i in range(0, len(p), chunk)] for p in parts]
    firsts = [first_finite(c, X.shape[1]) for c in chunks]
    shift = np.full(X.shape[1], np.nan)
    for f in firsts:
        shift = np.where(np.isnan(shift), f, shift)
    acc = ColumnStats(NAMES)
    for c in chunks[0]:
        acc.update(c)
    for k in range(1, len(parts)):
        fold = PartFold(NAMES, cuts[k - 1], shift)
        for c in chunks[k]:
            fold.update(c)
        acc.join(fold.result(), shift)
    assert acc.result() == whole


def test_transform_standardises_logs_imputes_and_flags():
    X = columns(5000)
    stats = column_stats(X, NAMES)
    t = NumericTransform.fit(stats, "auto")
    assert t.kind == ["log", "standard", "standard", "standard", "standard"]     # money only is heavy-tailed
    assert t.indicators == [3] and t.n_out == 6
    Z = t.apply(X)
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z[:, :3].mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(Z[:, :3].std(axis=0), 1, rtol=1e-9)
    assert np.array_equal(Z[:, 4], np.zeros(5000))                                 # constant: 0, not NaN
    missing = np.isnan(X[:, 3])
    assert np.array_equal(Z[:, 5], missing.astype(float)) and np.all(Z[missing, 3] == 0)
    # beyond the training range: clipped; negative money: log1p of 0
    far = t.apply(np.array([[-5.0, 1e9, 1e6, np.inf, 7.0]]))
    assert far[0, 1] == t.apply(np.array([[0, X[:, 1].max(), 1e6, 0, 7]]))[0, 1] and far[0, 5] == 1.0
    none = NumericTransform.fit(stats, "none")
    Y = none.apply(X)
    assert np.array_equal(Y[~missing, :5], X[~missing]) and np.all(Y[missing, 3] == stats["mean"][3])
    assert NumericTransform.fit(stats, "standard").kind == ["standard"] * 5


def test_bounded_columns_get_no_log_and_rare_values_stay_near():
    """auto: a pixel in [0, 1] that is almost always 0, a 0/1 flag and a correlation in [-1, 1] get no log1p,
    and every column's scale is floored so that no training value ends more than 10 scales from the mean
    (plain standardisation makes the rare pixel an outlier in the twenties, a log of it more)."""
    rng = np.random.default_rng(3)
    n = 20000
    pixel = np.where(rng.random(n) < 0.002, rng.random(n), 0.0)
    flag = (rng.random(n) < 0.3).astype(float)
    corr = np.tanh(rng.standard_normal(n))
    rare = np.where(rng.random(n) < 0.001, 1000.0, 0.0)
    X = np.column_stack([pixel, flag, corr, rare])
    names = ["pixel", "flag", "corr", "rare"]
    t = NumericTransform.fit(column_stats(X, names), "auto")
    assert t.kind[:3] == ["bounded"] * 3 and t.kind[3] in ("log", "standard")
    Z = t.apply(X)
    assert np.abs(Z).max() <= 10.0 + 1e-9
    np.testing.assert_allclose(Z[:, 1:3].std(axis=0), 1, rtol=1e-9)      # spread columns: unit variance
    np.testing.assert_allclose(Z.mean(axis=0), 0, atol=1e-9)
    assert "3 of them already in [-1, 1], no log: pixel, flag, corr" in t.describe()
    standard = NumericTransform.fit(column_stats(X, names), "standard")
    assert standard.kind == ["standard"] * 4 and np.abs(standard.apply(X)[:, 0]).max() > 20   # what auto avoids


def test_an_all_missing_column_is_one_error():
    X = np.column_stack([np.arange(5.0), np.full(5, np.nan)])
    with pytest.raises(MpinnError, match="numeric column 'b' has no values"):
        NumericTransform.fit(column_stats(X, ["a", "b"]))


def test_the_transform_round_trips_through_json_the_model_file_and_a_packed_file(tmp_path):
    from mpinn.files.checkpoint import load_model, save_model
    from mpinn.core.spec import ModelSpec
    from mpinn.data.packed.format import PackedDataset
    from mpinn.data.formats.tables import TableSource
    from mpinn.prepare import prepare
    X = columns(3000)
    t = NumericTransform.fit(column_stats(X, NAMES), "auto", column_stats(X[:, :1], ["label"]))
    again = NumericTransform.from_dict(json.loads(json.dumps(t.to_dict())))
    assert np.array_equal(again.apply(X), t.apply(X)) and again.target == t.target
    path = str(tmp_path / "m.npz")
    save_model(path, np.zeros(3), ModelSpec(0, 6, (1,), 1, loss="squared"), {"transform": t.to_dict()})
    stored = NumericTransform.from_dict(load_model(path)[2]["transform"])
    assert np.array_equal(stored.apply(X), t.apply(X))
    check_same(stored, t, "model")
    changed = dict(t.to_dict(), center=[0.0] * 5)
    with pytest.raises(MpinnError, match="differs in 'center'"):
        check_same(changed, t, "--resume ck")
    # a packed file: the values stored as they are, the transform fitted from the same statistics
    csv = tmp_path / "t.csv"
    with open(csv, "w") as f:
        f.write(",".join(NAMES) + ",y\n")
        for row in X:
            f.write(",".join("" if np.isnan(v) else repr(float(v)) for v in row) + ",%d\n" % (row[1] > 3))
    prepare(TableSource(str(csv), "y", (), NAMES, chunk_rows=333), str(tmp_path / "t.mpinn"))
    packed = PackedDataset(str(tmp_path / "t.mpinn"))
    mem = load_csv(str(csv), DataSpec("y", numeric=NAMES))
    fitted = NumericTransform.fit(mem.numeric_stats())
    assert packed.meta["transform"] == fitted.to_dict()
    assert np.array_equal(packed.take(np.arange(3000)).Xd, mem.take(np.arange(3000)).Xd, equal_nan=True)
    packed.transform = mem.transform = fitted
    assert np.array_equal(packed.take(np.arange(3000)).Xd, mem.take(np.arange(3000)).Xd)
    assert np.array_equal(mem.take(np.arange(3000)).Xd, fitted.apply(X))


@pytest.mark.parametrize("engine", ["python", "arrow"])
def test_missing_numeric_cells_are_nan_and_text_is_an_error(tmp_path, engine):
    if engine == "arrow":
        pytest.importorskip("pyarrow")
    p = tmp_path / "m.csv"
    p.write_text("a,x,y\nq,1.5,0\nr,,1\ns,NA,0\nt, ? ,1\nu,inf,0\nv,-2,1\n")
    d = load_csv(str(p), DataSpec("y", ["a"], ["x"]), engine=engine)
    assert np.array_equal(d.Xd[:, 0], [1.5, np.nan, np.nan, np.nan, np.inf, -2], equal_nan=True)
    assert d.meta["numeric_stats"]["missing"] == [4] and d.meta["numeric_stats"]["count"] == [2]
    p.write_text("a,x,y\nq,1.5,0\nr,12 apples,1\n")
    with pytest.raises(MpinnError, match="line 3: column 'x' is not a number: '12 apples'"):
        load_csv(str(p), DataSpec("y", ["a"], ["x"]), engine=engine)


@pytest.mark.parametrize("raw,classes", [
    (["<=50K", ">50K", "<=50K"], ["<=50K", ">50K"]), (["yes", "no", "no"], ["no", "yes"]),
    ([0, 1, 1], ["0", "1"]), ([True, False, True], ["False", "True"]), ([2, 7, 7], ["2", "7"])])
def test_any_two_label_values_are_a_binary_task(raw, classes):
    y, task, got = encode_labels(np.array(raw, dtype=object if isinstance(raw[0], str) else None))
    assert task == "binary" and got == classes            # the positive class (1) is the larger value
    assert list(y) == [float(got.index(str(v))) for v in raw]


def test_the_positive_class_can_be_chosen(tmp_path):
    y, task, classes = encode_labels(np.array(["yes", "no", "no"], dtype=object), positive="no")
    assert classes == ["yes", "no"] and list(y) == [0, 1, 1]
    with pytest.raises(MpinnError, match="--positive-class maybe is not one of the two labels"):
        encode_labels(np.array(["yes", "no"], dtype=object), positive="maybe")
    p = tmp_path / "t.csv"
    p.write_text("x,income\n1,>50K\n2,<=50K\n")
    assert load_data(str(p), DataSpec("income", numeric="x", positive="<=50K")).meta["classes"] == [">50K", "<=50K"]


def test_a_label_with_one_value_is_refused():
    from mpinn.data import Dataset
    one = Dataset(None, np.zeros((4, 1)), np.zeros(4), {"task": "multiclass", "classes": ["spam"]})
    with pytest.raises(MpinnError, match="holds one value \\('spam'\\) in all 4 training rows"):
        check_labels(one)
    flat = Dataset(None, np.zeros((4, 1)), np.full(4, 2.5), {"task": "regression", "classes": None})
    with pytest.raises(MpinnError, match="holds one value \\(2.5\\)"):
        check_labels(flat)


