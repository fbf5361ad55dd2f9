"""Which epoch is the best by the held-out metric (--keep best, --early-stop), when a metric is missing (NaN:
every held-out prediction of that epoch was non-finite)."""
import math

import pytest

from mpinn.model.metrics import better
from mpinn.optim.schedule import make_schedule
from mpinn.training.trainer import Trainer

NAN = float("nan")


@pytest.mark.parametrize("metric, good, worse", [("logloss", 0.4, 0.5), ("auc", 0.8, 0.7)])
def test_a_finite_metric_is_better_than_none_and_none_is_never_better(metric, good, worse):
    assert better(metric, good, worse) and not better(metric, worse, good) and not better(metric, good, good)
    assert better(metric, worse, NAN)
    assert not better(metric, NAN, worse) and not better(metric, NAN, NAN)


def scored(values, metric="logloss"):
    """A trainer's best-epoch record after epochs scored `values` in turn (a number, or the whole held-out record),
    with only what track_best reads."""
    t = Trainer.__new__(Trainer)
    t.best, t.best_params, t.keep_best, t.stop_metric, t.plateaus = None, None, False, metric, 0
    t.schedule = make_schedule(0.1)
    for epoch, v in enumerate(values, 1):
        t.track_best({"epoch": epoch, "valid": v if isinstance(v, dict) else {metric: v}, "step": epoch, "at": "epoch"})
    return t.best


def test_an_epoch_with_no_metric_is_replaced_by_the_first_that_has_one():
    best = scored([NAN, 0.5, 0.4])
    assert best["epoch"] == 3 and best["value"] == 0.4 and best["bad_epochs"] == 0
    best = scored([NAN, 0.5, 0.6])
    assert best["epoch"] == 2 and best["bad_epochs"] == 1
    best = scored([NAN, NAN])
    assert best["epoch"] == 1 and math.isnan(best["value"]) and best["bad_epochs"] == 2
    assert scored([0.5, NAN, 0.5])["epoch"] == 1        # a missing metric, or a tie, is no better


def test_an_epoch_with_a_non_finite_held_out_prediction_is_never_the_best():
    """Its metric, over the rows left, would flatter a diverging model: it counts as no metric at all."""
    best = scored([{"logloss": v, "nonfinite": bad, "n": 100} for v, bad in [(0.5, 0), (0.1, 3), (0.45, 0)]])
    assert best["epoch"] == 3 and best["value"] == 0.45
