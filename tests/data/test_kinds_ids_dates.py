"""Column kinds a practitioner would choose (mpinn.data.formats.kinds): integer ids taken as categories (by name, or both
ways by their values), magnitudes (a count, a price, an age) numeric, a few integers both as before, row numbers
flagged, dates and times left out of the inputs (for --holdout-by time) and never hashed, and the start-up note
saying each choice."""
import numpy as np
import pytest

from mpinn.data import DataSpec, load_csv
from mpinn.data.formats.kinds import infer, integer_kind
from mpinn.data.formats.tables import MISSING_NUMBERS

N = 3000


def popular(rng, codes, n=N):
    """Ids drawn with Zipf-like popularity: a few codes common, most rare, the common ones anywhere in the range."""
    p = 1.0 / np.arange(1, len(codes) + 1) ** 1.1
    return rng.choice(rng.permutation(codes), n, p=p / p.sum())


def made_up(seed):
    """{name: integer values} of made-up columns, each with what it is."""
    rng = np.random.default_rng(seed)
    return {
        "user_id": popular(rng, rng.choice(100_000, 500, replace=False)),    # an id by its name
        "app": popular(rng, rng.choice(800, 300, replace=False)),             # an id by its values only
        "channel": popular(rng, rng.choice(500, 170, replace=False)),
        "visits": rng.negative_binomial(4, 0.3, N),                          # a count
        "age": np.clip(np.round(rng.normal(40, 12, N)), 18, 90).astype(int),  # an age
        "rating": rng.integers(1, 6, N),                                      # a few integers
        "row": np.arange(1, N + 1),                                           # a row number
    }


def as_text(columns):
    return {k: [str(v) for v in vals] for k, vals in columns.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ids_by_name_and_by_values_are_categories_and_magnitudes_stay_numbers(seed):
    cols = made_up(seed)
    kinds = {name: integer_kind(name, vals.astype(float).tolist()) for name, vals in cols.items() if name != "rating"}
    assert kinds == {"user_id": "id", "app": "id?", "channel": "id?", "visits": "numeric", "age": "numeric",
                     "row": "key"}, kinds


def test_an_id_name_is_read_in_any_case_and_spelling():
    rng = np.random.default_rng(3)
    smooth = np.clip(np.round(rng.normal(50, 10, N)), 0, None).tolist()     # values that alone say magnitude
    for name in ("id", "ID", "userId", "user_id", "USER-ID", "movieID", "id_user", "idNum"):
        assert integer_kind(name, smooth) == "id", name
    for name in ("countyid", "zip_code", "fips"):                          # may be ids: both
        assert integer_kind(name, smooth) == "id?", name
    for name in ("idle", "valid_count", "width", "identity"):
        assert integer_kind(name, smooth) == "numeric", name


def test_infer_chooses_and_says_so():
    rng = np.random.default_rng(4)
    cols = as_text(made_up(4))
    cols["price"] = ["%.2f" % p for p in rng.lognormal(3, 1, N)]
    cols["click_time"] = ["2017-11-%02d %02d:%02d:00" % (6 + i % 3, i % 24, i % 60) for i in range(N)]
    cols["day"] = ["1/%d/2017" % (1 + i % 30) for i in range(N)]
    cols["ts"] = [str(1_500_000_000 + 37 * i) for i in range(N)]              # epoch seconds, by the name
    cols["colour"] = [("red", "blue")[i % 2] for i in range(N)]
    cols["mostly_dates"] = ["1/%d/2017" % (1 + i % 30) if i % 10 else "soon" for i in range(N)]
    cols["y"] = [str(i % 2) for i in range(N)]
    header = list(cols)
    categorical, numeric, note = infer(header, cols, "y", MISSING_NUMBERS)
    assert categorical == ["user_id", "app", "channel", "rating", "colour", "mostly_dates"], categorical
    assert numeric == ["app", "channel", "visits", "age", "rating", "row", "price"], numeric
    assert "user_id: integers taken as ids (categorical)" in note
    assert "app, channel: integers that may be ids, numeric and categorical (doubtful)" in note
    assert "rating, a few integers, both" in note
    assert "click_time, day, ts: dates or times, left out (for --holdout-by time:click_time)" in note
    assert "row: integers that hardly repeat (a row number or key?), numeric (doubtful)" in note


def test_a_count_with_no_time_name_is_not_taken_for_a_time():
    big = [str(1_500_000_000 + 7 * (i % 400)) for i in range(N)]
    _, numeric, note = infer(["amount"], {"amount": big}, None, MISSING_NUMBERS)
    assert numeric == ["amount"] and "dates or times" not in note


def test_a_csv_read_with_no_kinds_named(tmp_path):
    cols = made_up(5)
    rows = ["user_id,app,age,when,y"] + ["%d,%d,%d,2017-11-%02dT%02d:00:00Z,%d" % (
        cols["user_id"][i], cols["app"][i], cols["age"][i], 1 + i % 28, i % 24, i % 2) for i in range(N)]
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    d = load_csv(str(path), DataSpec("y"))
    assert d.meta["categorical"] == ["user_id", "app"] and d.meta["numeric"] == ["app", "age"]
    assert "when: dates or times, left out" in d.meta["columns_chosen"]
