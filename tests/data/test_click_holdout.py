"""--holdout-by time:COLUMN and group:COLUMN on click-log text (its columns are named label, I1..I13, C1..C26): the
rows held out are those a computation over the file read by pandas picks (the last share by the column, ties in
file order, a missing count the earliest; whole groups, each drawn with the --holdout probability, seeded), the
metrics reported are those of the model on exactly those rows, and the column is left out of the inputs."""
import numpy as np
import pytest

import mpinn.api as mp
from mpinn.bench.w4 import W4, write_text
from mpinn.core.errors import MpinnError
from mpinn.data.formats.clicktext import CAT_NAMES, INT_NAMES

pd = pytest.importorskip("pandas")
ROWS, HOLDOUT, SEED = 3000, 0.1, 3


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    d = tmp_path_factory.mktemp("clickholdout")
    path = str(d / "day0.tsv")
    write_text(W4(0, 20000), path, 0, ROWS)
    lines = open(path).read().splitlines(keepends=True)
    frame = pd.read_csv(path, sep="\t", header=None, names=["label"] + INT_NAMES + CAT_NAMES, dtype=str,
                        keep_default_na=False)
    assert len(frame) == len(lines) == ROWS
    return d, path, lines, frame


def held_by_time(column):
    """The last HOLDOUT share of the rows by a count column (missing: earliest), ties in file order."""
    keys = np.array([float(v) if v else -np.inf for v in column])
    order = np.argsort(keys, kind="stable")
    held = np.zeros(len(keys), bool)
    held[order[len(keys) - int(round(len(keys) * HOLDOUT)):]] = True
    return held


def held_by_group(column):
    """Whole groups, each held out with probability HOLDOUT, drawn in the order of the sorted group values."""
    groups = np.array(sorted(set(column)))
    drawn = dict(zip(groups, np.random.default_rng([SEED, 11]).random(len(groups)) < HOLDOUT))
    return np.array([drawn[v] for v in column])


@pytest.mark.parametrize("by,column,held_of", [("time", "I1", held_by_time), ("group", "C1", held_by_group)])
def test_holdout_by_a_click_log_column_holds_out_the_rows_it_names(log, by, column, held_of):
    d, path, lines, frame = log
    held = held_of(list(frame[column]))
    assert 0 < held.sum() < ROWS and frame[column].nunique() > 10
    held_file = d / ("held-%s.tsv" % by)
    held_file.write_text("".join(line for line, h in zip(lines, held) if h))
    model = str(d / ("m-%s.npz" % by))
    result = mp.train(path, holdout_by="%s:%s" % (by, column), seed=SEED, epochs=1, dtype="float64", quiet=True,
                      model_out=model)
    assert column not in result.meta["categorical"] + result.meta["numeric"]      # not an input
    _, again = mp.predict(model, str(held_file))        # the model on the rows pandas picked
    assert result.metrics["n"] == again["n"] == held.sum()
    for k in ("auc", "logloss", "accuracy"):
        assert result.metrics[k] == pytest.approx(again[k], rel=1e-9), k


def test_holdout_by_a_column_a_click_log_lacks_names_its_columns(log):
    _, path, _, _ = log
    with pytest.raises(MpinnError, match=r"has no column 'day' for --holdout-by \(a click-log text file has label, "
                                         r"I1..I13, C1..C26\)"):
        mp.train(path, holdout_by="time:day", epochs=1, quiet=True)


def test_holdout_by_a_click_logs_label_is_refused_before_reading(log):
    _, path, _, _ = log
    with pytest.raises(MpinnError, match="--holdout-by time:label: that column is the label"):
        mp.train(path, holdout_by="time:label", epochs=1, quiet=True)
