"""The held-out metrics against scikit-learn's on random inputs: AUC (with ties), log-loss, accuracy
(binary and multiclass), RMSE; through compute_metrics, the function evaluation and predict use, and
through the rank-summable pieces (metric_sums) added up over shards."""
import numpy as np
import pytest
from sklearn import metrics as sk

from mpinn.model.metrics import auc, average_ranks, compute_metrics, metric_sums, metrics_from_sums


@pytest.mark.parametrize("seed", range(5))
def test_binary_metrics_equal_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(np.float64)
    p = np.clip(np.round(rng.uniform(0.01, 0.99, n), int(rng.integers(1, 4))), 0.05, 0.95)   # many ties
    got = compute_metrics("binary", y, p)
    assert got["auc"] == pytest.approx(sk.roc_auc_score(y, p), rel=1e-12)
    assert got["logloss"] == pytest.approx(sk.log_loss(y, p), rel=1e-12)
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, p > 0.5), rel=1e-12)
    assert got["confusion"] == sk.confusion_matrix(y, p > 0.5, labels=[0, 1]).tolist()


def test_auc_with_all_predictions_tied_is_one_half_and_needs_both_classes():
    y = np.array([0, 1, 1, 0, 1.0])
    assert auc(y, np.full(5, 0.3)) == pytest.approx(sk.roc_auc_score(y, np.full(5, 0.3))) == 0.5
    assert np.isnan(auc(np.ones(4), np.linspace(0, 1, 4)))


@pytest.mark.parametrize("seed", range(4))
def test_average_ranks_equal_scipy_rankdata(seed):
    from scipy.stats import rankdata
    rng = np.random.default_rng(20 + seed)
    n = int(rng.integers(1, 300))
    p = np.round(rng.normal(size=n), int(rng.integers(0, 3)))       # 0 decimals: long runs of ties
    np.testing.assert_array_equal(average_ranks(p), rankdata(p))


@pytest.mark.parametrize("seed", range(3))
def test_multiclass_metrics_equal_sklearn(seed):
    rng = np.random.default_rng(10 + seed)
    n, k = 300, 4
    y = rng.integers(0, k, n)
    P = rng.random((n, k)) + 0.05
    P /= P.sum(axis=1, keepdims=True)
    got = compute_metrics("multiclass", y, P)
    assert got["logloss"] == pytest.approx(sk.log_loss(y, P, labels=range(k)), rel=1e-12)
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, P.argmax(axis=1)), rel=1e-12)
    assert got["confusion"] == sk.confusion_matrix(y, P.argmax(axis=1), labels=range(k)).tolist()


def test_one_vs_all_outputs_are_normalised_before_the_log_loss():
    """--loss sigmoid over classes (Ng's one-vs-all): the outputs do not sum to 1; the log-loss is that of
    the normalised probabilities."""
    rng = np.random.default_rng(3)
    y, S = rng.integers(0, 3, 100), rng.uniform(0.05, 0.95, (100, 3))
    got = compute_metrics("multiclass", y, S)
    assert got["logloss"] == pytest.approx(sk.log_loss(y, S / S.sum(axis=1, keepdims=True)), rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_rmse_equals_sklearn(seed):
    rng = np.random.default_rng(20 + seed)
    y, p = rng.standard_normal(200) * 3, rng.standard_normal(200) * 3
    assert compute_metrics("regression", y, p)["rmse"] == pytest.approx(
        np.sqrt(sk.mean_squared_error(y, p)), rel=1e-12)


def test_sums_over_shards_equal_sklearn_on_the_whole():
    """What ranks add up (metric_sums per shard) gives sklearn's numbers on all the rows."""
    rng = np.random.default_rng(7)
    y, p = (rng.random(500) < 0.3).astype(float), rng.uniform(0.02, 0.98, 500)
    sums = sum(metric_sums("binary", y[a:b], p[a:b]) for a, b in ((0, 123), (123, 400), (400, 500)))
    got = metrics_from_sums("binary", sums)
    assert got["logloss"] == pytest.approx(sk.log_loss(y, p), rel=1e-12)
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, p > 0.5), rel=1e-12)


def test_many_classes_keep_accuracy_and_logloss_without_a_k_squared_confusion():
    """Past MAX_CONFUSION classes the k x k counts are left out of the rank sums and the metrics (10,000 classes:
    10^8 counts, once in the model file's header as text); accuracy and log-loss still equal sklearn's."""
    from mpinn.model.metrics import MAX_CONFUSION
    rng = np.random.default_rng(7)
    n, k = 600, MAX_CONFUSION + 50
    y = rng.integers(0, k, n)
    P = rng.random((n, k)) + 0.01
    P /= P.sum(axis=1, keepdims=True)
    sums = sum(metric_sums("multiclass", y[a:b], P[a:b], k) for a, b in ((0, 250), (250, 600)))
    assert sums.size == 4
    got = metrics_from_sums("multiclass", sums, k)
    assert "confusion" not in got and got == compute_metrics("multiclass", y, P)
    assert got["logloss"] == pytest.approx(sk.log_loss(y, P, labels=range(k)), rel=1e-12)
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, P.argmax(axis=1)), rel=1e-12)
    Q = P[:, :MAX_CONFUSION] / P[:, :MAX_CONFUSION].sum(axis=1, keepdims=True)
    small = compute_metrics("multiclass", y % MAX_CONFUSION, Q)
    assert np.array(small["confusion"]).shape == (MAX_CONFUSION, MAX_CONFUSION)
