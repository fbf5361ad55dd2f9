"""scripts/bench/real_data.py's paired bootstrap: the difference it reports is the plain metric's difference, a
model against itself has no interval, and more test rows give a narrower one."""
import numpy as np

from scripts.bench.real_data import paired_bootstrap


def mann_whitney_auc(y, p):
    """The AUC as the share of (positive, negative) pairs ranked right, ties counting half, pair by pair."""
    pos, neg = p[y == 1], p[y == 0]
    right = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return right / (pos.size * neg.size)


def scores(n, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    good = y + rng.normal(0, 1.0, n)            # ranks better than
    poor = y + rng.normal(0, 3.0, n)
    return y, good, poor


def test_a_binary_difference_is_the_difference_of_the_plain_aucs_and_its_interval_holds_it():
    y, a, b = scores(400, 0)
    d = paired_bootstrap("binary", y, a, b, reps=300)
    assert np.isclose(d["diff"], mann_whitney_auc(y, a) - mann_whitney_auc(y, b))
    assert d["lo"] < d["diff"] < d["hi"]
    assert d["lo"] > 0      # a much better model: the whole interval above no difference


def test_a_model_against_itself_differs_by_nothing_in_every_resample():
    y, a, _ = scores(300, 1)
    for task, target in (("binary", y), ("regression", a + 1.0)):
        d = paired_bootstrap(task, target, a, a.copy(), reps=100)
        assert d["diff"] == d["lo"] == d["hi"] == 0.0      # paired: both scored on the same rows each time


def test_a_regression_difference_is_the_rmse_ratio_less_one():
    rng = np.random.default_rng(2)
    y = rng.normal(0, 10, 500)
    a, b = y + rng.normal(0, 1, 500), y + rng.normal(0, 2, 500)
    d = paired_bootstrap("regression", y, a, b, reps=200)
    assert np.isclose(d["diff"], np.sqrt(np.mean((y - a) ** 2)) / np.sqrt(np.mean((y - b) ** 2)) - 1)
    assert d["lo"] < d["diff"] < d["hi"] < 0


def test_more_test_rows_give_a_narrower_interval():
    widths = []
    for n in (200, 5000):
        y, a, b = scores(n, 3)
        d = paired_bootstrap("binary", y, a, b, reps=200)
        widths.append(d["hi"] - d["lo"])
    assert widths[1] < widths[0] / 2        # about sqrt(25) = 5 times narrower


def test_one_table_splits_every_labelled_row_once_and_reads_the_task_from_the_label(tmp_path):
    """scripts/bench/one_table.py: the test and training files hold each row with a label exactly once (the
    rows without one in neither), the test share is near the one asked, and the task is read from the label."""
    import pandas as pd
    from scripts.bench.one_table import split
    rng = np.random.default_rng(0)
    n = 2000
    frame = pd.DataFrame({"id": np.arange(n), "x": rng.normal(size=n), "colour": rng.choice(["r", "g", "b"], n),
                          "yes": rng.choice(["no", "yes"], n), "price": rng.normal(100, 10, n).round(2),
                          "grade": rng.choice(["A", "B", "C"], n)})
    frame.loc[::50, "yes"] = None                       # 40 rows without a label
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    train, test, task, base = split(str(path), "yes", str(tmp_path), 0.2, 0)
    assert task == "binary"
    ids = sorted(pd.read_csv(base + "-train.csv")["id"].tolist() + pd.read_csv(base + "-test.csv")["id"].tolist())
    assert ids == [i for i in range(n) if i % 50]
    assert abs(len(test) / (n - 40) - 0.2) < 0.03
    assert split(str(path), "price", str(tmp_path), 0.2, 0)[2] == "regression"
    assert split(str(path), "grade", str(tmp_path), 0.2, 0)[2] == "multiclass"
    again = split(str(path), "yes", str(tmp_path), 0.2, 0)[1]
    assert again["id"].tolist() == test["id"].tolist()          # the seed fixes the test rows
