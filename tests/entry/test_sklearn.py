"""mpinn.sklearn: scikit-learn's own estimator checks on both estimators; DataFrames with text columns hashed;
GridSearchCV on a bundled real data set; the estimator trains the CLI's model (the same AUC, the same parameters bit for
bit); under mpirun every rank returns the same fitted estimator and rank 0 alone prints."""
import json
import sys

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from conftest import mpirun, run
from mpinn.sklearn import MpinnClassifier, MpinnRegressor

# Small networks and enough steps for the checks' data sets of 20 to 300 rows (the accuracy and R^2 they demand); the
# whole set runs in about 10 s. Skipped, and why: none by these tests. scikit-learn itself skips its array-API checks
# unless SCIPY_ARRAY_API=1 is set, and yields no sample_weight checks (fit takes none), no NaN/inf-must-fail checks
# (allow_nan: mpinn imputes and flags a missing number) and no multi-output or multi-label checks (neither is
# supported: fit takes one target column).
SMALL = dict(hidden=(16,), epochs=30, batch_size=32, lr=0.01, ensemble=1)      # one model: the checks are of the API


@parametrize_with_checks([MpinnClassifier(**SMALL), MpinnRegressor(**SMALL)])
def test_scikit_learns_estimator_checks(estimator, check):
    check(estimator)


def test_every_training_option_but_the_data_files_is_a_parameter():
    params = MpinnClassifier().get_params()
    assert params["hidden"] == (64,) and params["epochs"] is None and params["model_out"] is None and params["quiet"]
    assert "data" not in params and "label" not in params and "lr_decay" in params and "log_dir" in params
    with pytest.raises(TypeError, match="unknown parameter 'hiden'"):
        MpinnClassifier(hiden=(8,))


@pytest.mark.parametrize("y,shown", [(np.zeros(20), "0.0"), (np.full(20, "no", dtype=object), "'no'"),
                                     (np.ones(20, bool), "True")])
def test_one_class_is_refused_naming_it_as_written(y, shown):
    with pytest.raises(ValueError, match=r"^y holds one class \(%s\): a classifier needs two or more$" % shown):
        MpinnClassifier().fit(np.ones((20, 2)), y)


def test_text_columns_of_a_dataframe_are_hashed(tmp_path):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    n = 2000
    city = rng.choice(["oslo", "rome", "lima", "doha", None], n)
    x = rng.standard_normal(n)
    x[rng.random(n) < 0.05] = np.nan        # missing numbers: imputed and flagged
    y = np.where(np.isin(city, ["oslo", "rome"]) | (np.nan_to_num(x) > 1), "go", "stay")
    frame = pd.DataFrame({"city": pd.Series(city, dtype="category"), "x": x, "id": np.arange(n)})
    clf = MpinnClassifier(hidden=(8,), epochs=15, numeric="x", categorical="city").fit(frame, y)
    assert clf.meta_["hashing"]["features"] == ["city"] and clf.columns_ == (["city"], ["x"])
    assert list(clf.feature_names_in_) == ["city", "x", "id"]
    assert clf.score(frame, y) > 0.97       # only the hashed city tells most of the rows apart
    new = pd.DataFrame({"city": ["oslo", "lima", "paris"], "x": [0.0, 0.0, np.nan], "id": [0, 1, 2]})
    assert list(clf.predict(new)[:2]) == ["go", "stay"]     # 'paris' was never seen: it still hashes to a column
    auto = MpinnClassifier(hidden=(8,), epochs=2).fit(frame.drop(columns="id"), y)      # kinds by dtype
    assert auto.columns_ == (["city"], ["x"])
    with pytest.raises(ValueError, match="has no column 'town'"):
        MpinnClassifier(categorical="town").fit(frame, y)


def test_an_integer_category_that_comes_back_as_floats_is_the_same_category():
    """pandas makes an integer column float64 when a value goes missing: 94103.0 must still be zip 94103 (as
    scikit-learn's encoders take it), not an unseen text '94103.0' hashed elsewhere."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    zips = rng.choice([94103, 10001, 60601, 73301], 2000)
    frame = pd.DataFrame({"zip": zips, "x": rng.standard_normal(2000)})
    y = np.isin(zips, [94103, 10001]).astype(int)
    clf = MpinnClassifier(categorical="zip", numeric="x", hidden=(8,), epochs=5, ensemble=1).fit(frame, y)
    floats = frame.astype({"zip": float})
    floats.loc[0, "zip"] = np.nan
    assert np.array_equal(clf.predict_proba(floats)[1:], clf.predict_proba(frame)[1:])
    assert clf.score(floats.iloc[1:], y[1:]) == clf.score(frame.iloc[1:], y[1:]) == 1.0


def test_a_frame_for_a_model_fitted_on_arrays_is_read_as_an_array():
    """fit(X.values, y) then predict(X_frame): as scikit-learn's estimators, a warning and the same predictions;
    a refit on arrays forgets the columns of an earlier fit on a frame; an empty frame is sklearn's ValueError."""
    pd = pytest.importorskip("pandas")
    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:300, :4], y[:300]
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    clf = MpinnClassifier(hidden=(8,), epochs=3, ensemble=1).fit(X, y)
    with pytest.warns(UserWarning, match="has feature names"):
        assert np.array_equal(clf.predict_proba(frame), clf.predict_proba(X))
    clf = MpinnClassifier(hidden=(8,), epochs=3, ensemble=1).fit(frame, y)
    with pytest.raises(ValueError, match="Found array with 0 sample"):
        clf.predict(frame.iloc[:0])
    clf.fit(X, y)
    with pytest.warns(UserWarning, match="has feature names"):
        assert np.array_equal(clf.predict_proba(frame), clf.predict_proba(X))


def test_the_estimators_model_file_predicts_with_the_cli_by_the_labels_names(tmp_path):
    """model_out= writes a file mpinn.predict reads: its classes by y's own names (not codes 0, 1), and a model fitted
    on a DataFrame reads a CSV file of the same columns."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    city, x = rng.choice(["oslo", "rome", "lima", "doha"], 1500), rng.standard_normal(1500)
    y = np.where(np.isin(city, ["oslo", "rome"]), "go", "stay")
    frame = pd.DataFrame({"city": city, "x": x})
    clf = MpinnClassifier(hidden=(8,), epochs=10, ensemble=1, model_out=str(tmp_path / "m.npz")).fit(frame, y)
    frame.assign(y=y).to_csv(tmp_path / "d.csv", index=False)
    p = run([sys.executable, "-m", "mpinn.predict", "--model", str(tmp_path / "m.npz"), "--data", str(tmp_path / "d.csv"),
             "--out", str(tmp_path / "p.csv")])
    assert p.returncode == 0, p.stderr
    got = pd.read_csv(tmp_path / "p.csv")
    assert list(got.columns) == ["prediction", "p_stay"]
    assert np.array_equal(got["prediction"].to_numpy(), clf.predict(frame))
    assert np.abs(got["p_stay"].to_numpy() - clf.predict_proba(frame)[:, 1]).max() < 1e-5      # 6 digits in the file


def test_a_grid_search_on_a_real_data_set():
    X, y = load_breast_cancer(return_X_y=True)
    search = GridSearchCV(MpinnClassifier(), {"hidden": [(8,), (32,)]}, scoring="roc_auc", cv=3).fit(X, y)
    assert search.best_score_ > 0.98, search.cv_results_["mean_test_score"]      # measured 0.992
    search = GridSearchCV(make_pipeline(StandardScaler(), MpinnClassifier(epochs=8, lr=0.01)),     # in a Pipeline
                          {"mpinnclassifier__hidden": [(4,), (16,)]}, scoring="roc_auc", cv=3).fit(X, y)
    assert search.best_params_["mpinnclassifier__hidden"] in [(4,), (16,)] and search.best_score_ > 0.97, \
        search.cv_results_["mean_test_score"]


@pytest.fixture(scope="module")
def cancer(tmp_path_factory):
    """load_breast_cancer (bundled with scikit-learn) split 75/25, as arrays and as .npz files."""
    d = tmp_path_factory.mktemp("cancer")
    X, y = load_breast_cancer(return_X_y=True)
    Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.25, random_state=0)
    np.savez(d / "train.npz", X=Xa, y=ya)
    np.savez(d / "test.npz", X=Xb, y=yb)
    return d, Xa, Xb, ya, yb


@pytest.mark.mpi
def test_the_estimator_trains_the_clis_model(tmp_path, cancer, launcher):
    d, Xa, Xb, ya, yb = cancer
    r = mpirun(1, ["-m", "mpinn.train", "--data", str(d / "train.npz"), "--hidden", "16", "--epochs", "6",
                   "--seed", "5", "--no-progress", "--model-out", str(tmp_path / "m.npz"),
                   "--metrics-out", str(tmp_path / "m.json")])
    assert r.returncode == 0, r.stderr
    p = run([sys.executable, "-m", "mpinn.predict", "--model", str(tmp_path / "m.npz"), "--data", str(d / "test.npz"),
             "--metrics-out", str(tmp_path / "p.json")])
    assert p.returncode == 0, p.stderr
    clf = MpinnClassifier(hidden=(16,), epochs=6, seed=5).fit(Xa, ya)
    with np.load(tmp_path / "m.npz") as z:
        assert np.array_equal(clf.params_, z["params"])
    assert clf.metrics_["auc"] == json.load(open(tmp_path / "m.json"))["valid"]["auc"]     # held out of the fit
    test_auc = json.load(open(tmp_path / "p.json"))["auc"]
    assert roc_auc_score(yb, clf.predict_proba(Xb)[:, 1]) == pytest.approx(test_auc, abs=1e-12) and test_auc > 0.93


SCRIPT = '''
import numpy as np
from mpi4py import MPI
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV
from mpinn.sklearn import MpinnClassifier
X, y = load_breast_cancer(return_X_y=True)
X = (X - X.mean(0)) / X.std(0)
search = GridSearchCV(MpinnClassifier(epochs=4, lr=0.01, quiet=False, no_progress=True), {"hidden": [(4,), (8,)]},
                      cv=2).fit(X, y)
best = search.best_estimator_
np.savez("rank-%d.npz" % MPI.COMM_WORLD.rank, params=best.params_, proba=best.predict_proba(X),
         best=search.best_index_)
'''


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_under_mpirun_every_rank_returns_the_same_estimator(tmp_path, n, launcher):
    (tmp_path / "script.py").write_text(SCRIPT)
    r = mpirun(n, ["-m", "mpi4py", "script.py"], cwd=str(tmp_path), timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\ndone (the first of 5 members): ") == 5, r.stdout   # 2 x 2 folds and the refit: rank 0
    #                                                                      alone prints (each, a small table: 5 members)
    assert r.stdout.count("over %d ranks" % n) == 5
    ranks = [np.load(tmp_path / ("rank-%d.npz" % k)) for k in range(n)]
    for other in ranks[1:]:
        for key in ("params", "proba", "best"):
            assert np.array_equal(ranks[0][key], other[key]), key
