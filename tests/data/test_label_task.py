"""The task --task auto reads from integer labels, as a practitioner would: a few values, or ids from 0 or 1, are
classes; a score, a count or an amount (values filling their range, or far apart and hardly repeated) is a
number; codes far apart that each repeat are classes. The chunked scan decides as the labels read at once, and
the start-up line says the call where it is doubtful (more than 10 integer values)."""
import re
import sys

import numpy as np
import pytest

from conftest import run
from mpinn.data.fit.labels import MISSING_TEXT, LabelScan, encode_labels, missing_labels, task_note

RNG = np.random.default_rng(7)


def repeat(values, rows):
    """`rows` labels drawing every one of `values` at least once."""
    values = np.asarray(values)
    return RNG.permutation(np.concatenate([values, RNG.choice(values, rows - len(values))]))


CASES = [
    # (what, labels, the task a practitioner would choose)
    ("ratings 1-5", repeat(np.arange(1, 6), 500), "multiclass"),
    ("digits 0-9", repeat(np.arange(10), 500), "multiclass"),
    ("wine quality 3-9", repeat(np.arange(3, 10), 500), "multiclass"),
    ("40 class ids 1..40", repeat(np.arange(1, 41), 2000), "multiclass"),
    ("100 class ids 0..99, 3 absent from these rows", repeat(np.delete(np.arange(100), [5, 50, 77]), 3000),
     "multiclass"),
    ("12 product codes far apart", repeat(101 + 97 * np.arange(12), 600), "multiclass"),
    ("inspection scores 66-100, a few absent", repeat(np.delete(np.arange(66, 101), [1, 3]), 3000), "regression"),
    ("ages 18-90", repeat(np.arange(18, 91), 3000), "regression"),
    ("disease progression 25-346, 214 values", repeat(np.sort(RNG.choice(np.arange(25, 347), 214, replace=False)),
                                                     442), "regression"),
    ("whole-dollar prices, 300 values far apart in 1000 rows",
     repeat(np.sort(RNG.choice(np.arange(500, 90_000), 300, replace=False)), 1000), "regression"),
    ("1001 distinct integers", np.arange(1001) * 3, "regression"),
    ("two values", repeat([3, 8], 100), "binary"),
    ("halves", repeat(np.arange(30) / 2, 300), "regression"),
    ("incomes in 210 brackets far apart, 60 rows each", repeat(np.sort(RNG.choice(np.arange(483, 201_640), 210,
                                                                                 replace=False)), 60 * 210),
     "regression"),
    ("100 codes far apart, 30 rows each", repeat(1000 + 37 * np.arange(100), 3000), "multiclass"),
]


@pytest.mark.parametrize("what,labels,task", CASES, ids=[c[0] for c in CASES])
def test_integer_labels_are_classes_or_numbers_as_a_practitioner_reads_them(what, labels, task):
    assert encode_labels(labels)[1] == task
    assert encode_labels(labels.astype(np.float64))[1] == task          # 3.0 is the integer 3
    assert encode_labels(np.array([str(v) for v in labels], dtype=object))[1] == task      # as read from text


@pytest.mark.parametrize("what,labels,task", CASES, ids=[c[0] for c in CASES])
def test_the_chunked_scan_decides_as_the_labels_read_at_once(what, labels, task):
    scan = LabelScan()
    for s in range(0, len(labels), 53):
        scan.update(labels[s:s + 53])
    assert scan.result() == encode_labels(labels)[1:]


def test_given_task_wins_over_the_values():
    scores = CASES[6][1]
    assert encode_labels(scores, "multiclass")[1] == "multiclass"
    assert encode_labels(CASES[1][1], "regression")[1] == "regression"


def test_the_note_says_a_doubtful_call_and_stays_quiet_otherwise():
    y, task, classes = encode_labels(CASES[6][1])
    assert task_note(task, classes, y) == " (33 integer labels, 66 to 100, taken as numbers: --task multiclass " \
                                          "for classes)"
    y, task, classes = encode_labels(CASES[3][1])
    assert task_note(task, classes, y) == " (40 integer labels taken as classes: --task regression for numbers)"
    for i in (0, 1, 10, 12):      # a few classes, digits, more than 1000 values, halves: nothing to doubt
        y, task, classes = encode_labels(CASES[i][1])
        assert task_note(task, classes, y) == ""
    y, task, classes = encode_labels(np.array(["a%d" % i for i in range(20)] * 3, dtype=object))
    assert task == "multiclass" and task_note(task, classes, y) == ""     # text classes


def test_the_start_up_line_says_it_and_the_model_predicts_numbers(tmp_path):
    data, model, out = tmp_path / "scores.csv", tmp_path / "m.npz", tmp_path / "p.csv"
    x = RNG.normal(size=2000)
    score = np.clip(np.round(85 + 6 * x), 66, 100).astype(int)
    data.write_text("x,score\n" + "".join("%.4f,%d\n" % r for r in zip(x, score)))
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(data), "--label", "score", "--model-out", str(model),
             "--epochs", "2", "--ensemble", "1", "--no-progress"])
    assert r.returncode == 0, r.stderr
    line = next(s for s in r.stdout.splitlines() if s.startswith("data:"))
    assert re.search(r"task regression \(\d+ integer labels, \d+ to \d+, taken as numbers: --task multiclass for "
                     r"classes\)", line), line
    r = run([sys.executable, "-m", "mpinn.predict", "--model", str(model), "--data", str(data), "--out", str(out)])
    assert r.returncode == 0, r.stderr
    assert out.read_text().splitlines()[0].split(",")[-1] == "prediction"


def test_missing_labels_equal_the_rule_applied_one_value_at_a_time():
    """The mask is computed once per distinct value; written here one row at a time, as the rule reads: None, a NaN
    or an infinite number, or text that is a missing marker or an infinity once stripped."""
    def plainly(v):
        if v is None or (isinstance(v, float) and not np.isfinite(v)):
            return True
        return isinstance(v, str) and (v.strip() in MISSING_TEXT or v.strip().lower() in ("inf", "-inf", "+inf"))
    rng = np.random.default_rng(3)
    pool = [None, float("nan"), float("inf"), -float("inf"), " NA ", "NA", "", "  ", "nan", "None", "?", "Inf", "+inf",
            "-INF", "x", "0", "1", 1.5, 2, "infinite", "n/a", "#N/A", "null", "yes"]
    raw = np.array([pool[i] for i in rng.integers(0, len(pool), 5000)], dtype=object)
    np.testing.assert_array_equal(missing_labels(raw), [plainly(v) for v in raw])
    assert missing_labels(np.array([], dtype=object)).shape == (0,)
