"""--holdout-by time:COLUMN reads dates and times as times (mpinn.data.formats.times): each format against Python's
datetime, slashed dates ordered by date and not as text, a column it cannot read refused with one line, and the
held-out rows the truly last dates, through the API and the command line."""
import datetime as dt
import json
import sys

import numpy as np
import pytest

from conftest import run
from mpinn.core.errors import MpinnError
from mpinn.data import Dataset
from mpinn.data.formats.times import seconds, sort_keys

UTC = dt.timezone.utc


def at(*when, tz=UTC):
    return dt.datetime(*when, tzinfo=tz).timestamp()


# values as a file writes them -> (the format read, the seconds each is, by Python's datetime)
FORMATS = [
    (["2026-11-25", "2026-01-07", "2025-12-31"], "ISO", [at(2026, 11, 25), at(2026, 1, 7), at(2025, 12, 31)]),
    (["2026-11-25 13:45:00", "2026-11-25T13:45:01Z", "2026-11-25T14:45:00+01:00", "2026-11-25 13:45:00.250"],
     "ISO", [at(2026, 11, 25, 13, 45), at(2026, 11, 25, 13, 45, 1), at(2026, 11, 25, 13, 45),
             at(2026, 11, 25, 13, 45) + 0.25]),
    (["2017-11-06 16:00:00-0500", "2017-11-06"], "ISO", [at(2017, 11, 6, 21), at(2017, 11, 6)]),
    (["1/7/2017", "1/10/2017", "12/31/2016"], "M/D/YYYY", [at(2017, 1, 7), at(2017, 1, 10), at(2016, 12, 31)]),
    (["1/7/17", "12/31/99", "2/1/68"], "M/D/YYYY", [at(2017, 1, 7), at(1999, 12, 31), at(2068, 2, 1)]),
    (["1/7/2017 13:05", "1/7/2017 1:05:30 PM", "1/7/2017 12:10 AM"], "M/D/YYYY",
     [at(2017, 1, 7, 13, 5), at(2017, 1, 7, 13, 5, 30), at(2017, 1, 7, 0, 10)]),
    (["25/12/2016", "1/2/2017"], "D/M/YYYY", [at(2016, 12, 25), at(2017, 2, 1)]),     # 25: the day comes first
    (["2017/01/07", "2017/1/10 08:00:00"], "YYYY/MM/DD", [at(2017, 1, 7), at(2017, 1, 10, 8)]),
    (["7.1.2017", "10.1.2017 08:30"], "D.M.YYYY", [at(2017, 1, 7), at(2017, 1, 10, 8, 30)]),
    (["1484006400", "1483747200.5"], "numbers", [1484006400, 1483747200.5]),      # epoch seconds
    ([dt.datetime(2017, 1, 10, 8), dt.date(2017, 1, 7), dt.datetime(2017, 1, 7, 9, tzinfo=dt.timezone(
        dt.timedelta(hours=1)))], "dates", [at(2017, 1, 10, 8), at(2017, 1, 7), at(2017, 1, 7, 8)]),   # Parquet's
]


@pytest.mark.parametrize("values,fmt,expected", FORMATS, ids=[f[1] + str(i) for i, f in enumerate(FORMATS)])
def test_each_format_reads_as_the_times_datetime_gives(values, fmt, expected):
    keys, got = seconds(values)
    assert got == fmt
    np.testing.assert_allclose(keys, expected, rtol=0, atol=1e-6)
    assert list(np.argsort(keys, kind="stable")) == list(np.argsort(expected, kind="stable"))


def test_slashed_dates_sort_by_date_not_as_text():
    days = ["1/%d/2017" % d for d in range(1, 31)]
    shuffled = list(np.random.default_rng(0).permutation(days))
    order = np.argsort(sort_keys(shuffled), kind="stable")
    assert [shuffled[i] for i in order] == days          # as text, 1/10 would come before 1/7


def test_a_missing_value_sorts_first():
    keys = sort_keys(["1/8/2017", "", "NA", "1/7/2017", None, float("nan")])
    assert list(np.argsort(keys, kind="stable")) == [1, 2, 4, 5, 3, 0]
    assert list(np.argsort(sort_keys(["5", "", "3"]), kind="stable")) == [1, 2, 0]


@pytest.mark.parametrize("values,bad", [
    (["2017-01-07", "1/8/2017", "2017-01-09"], "'1/8/2017'"),          # two formats
    (["1/7/2017", "tomorrow"], "'tomorrow' (data row 2)"),             # not a date
    (["2017-02-30"], "'2017-02-30' (data row 1)"),                    # no such day
    (["13/1/2017", "1/13/2017"], "13/1/2017 reads day first and 1/13/2017 month first"),
    (["1484006400", "2017-01-07"], "'2017-01-07'"),                    # numbers and dates
    (["week 1", "week 2"], "'week 1' (data row 1)"),                  # text that once sorted as text
])
def test_a_column_that_is_not_times_in_one_format_is_one_line_naming_it(values, bad):
    with pytest.raises(MpinnError) as e:
        sort_keys(values, "day")
    message = str(e.value)
    assert message.startswith("--holdout-by time:day: ") and bad in message and "\n" not in message, message


def dated(n_days=30, per_day=10, seed=0):
    """Rows of days 1/1/2017 .. 1/30/2017 in shuffled order: (Dataset whose only input is the row's day, dates)."""
    day = np.random.default_rng(seed).permutation(np.repeat(np.arange(1, n_days + 1), per_day))
    data = Dataset(None, day.reshape(-1, 1).astype(np.float64), (day % 2).astype(float), {"task": "binary"})
    return data, ["1/%d/2017" % d for d in day]


def test_the_time_holdout_holds_out_the_truly_last_dates():
    data, dates = dated()
    train, valid = data.split(0.1, 0, "time", dates)
    assert sorted(set(valid.Xd[:, 0])) == [28, 29, 30] and len(valid) == 30
    assert train.Xd[:, 0].max() == 27 and len(train) == 270


def test_a_time_column_with_one_time_has_no_last_rows_to_hold_out():
    """Every row the same day: a stable sort would hold out the file's last rows while saying 'by time'."""
    data, dates = dated()
    with pytest.raises(MpinnError, match=r"every row has the same time \(1/5/2026\): there is no last time"):
        data.split(0.1, 0, "time", ["1/5/2026"] * len(dates))


def write_dated(path, dates, seed=1):
    """A CSV of the dates, a number x and the label y = x > 0; returns (path, y)."""
    x = np.random.default_rng(seed).standard_normal(len(dates))
    y = (x > 0).astype(int)
    with open(path, "w") as f:
        f.write("date,x,y\n" + "".join("%s,%.4f,%d\n" % (d, x[i], y[i]) for i, d in enumerate(dates)))
    return str(path), y


def test_training_by_time_on_slashed_dates_holds_out_the_last_dates_and_says_so(tmp_path):
    _, dates = dated()
    path, y = write_dated(tmp_path / "d.csv", dates)
    day = np.array([int(d.split("/")[1]) for d in dates])
    last, as_text = y[day >= 28], y[(day >= 7) & (day <= 9)]      # text order would hold out 1/7..1/9
    assert last.sum() != as_text.sum()                              # the labels tell the two apart
    r = run([sys.executable, "-m", "mpinn.train", "--data", path, "--label", "y", "--holdout-by", "time:date",
             "--holdout", "0.1", "--epochs", "1", "--no-progress", "--model-out", str(tmp_path / "m.npz"),
             "--metrics-out", str(tmp_path / "m.json")], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "270 training rows, 30 held out (the last 10% by date)" in r.stdout, r.stdout
    assert "1 numeric (x)" in r.stdout, r.stdout
    confusion = json.load(open(tmp_path / "m.json"))["valid"]["confusion"]      # rows: the true classes
    assert [sum(row) for row in confusion] == [len(last) - last.sum(), last.sum()], confusion


def test_training_by_a_column_that_is_not_times_is_one_line(tmp_path):
    path, _ = write_dated(tmp_path / "w.csv", ["1/%d/2017" % (1 + i % 9) for i in range(39)] + ["soon"])
    r = run([sys.executable, "-m", "mpinn.train", "--data", path, "--label", "y", "--holdout-by", "time:date",
             "--holdout", "0.1", "--epochs", "1", "--no-progress", "--model-out", str(tmp_path / "m.npz")], timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "'soon' (data row 40) is not a date or time" in r.stderr, r.stderr
