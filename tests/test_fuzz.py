"""Fuzzing the readers: whatever the bytes, a Dataset or one clear MpinnError, never anything else."""
import string

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpinn.config import MpinnError
from mpinn.data import load_csv

CELL = st.text(alphabet=string.ascii_letters + string.digits + " .,-+\"'\n\teE", max_size=6)


def csv_text():
    header = st.lists(st.sampled_from(["a", "x", "y", "z", "", "a"]), min_size=0, max_size=5)
    rows = st.lists(st.lists(CELL, min_size=0, max_size=6), max_size=8)
    return st.tuples(header, rows).map(
        lambda hr: "\n".join([",".join(hr[0])] + [",".join(r) for r in hr[1]]))


def check(path, text_or_bytes):
    mode = "wb" if isinstance(text_or_bytes, bytes) else "w"
    with open(path, mode) as f:
        f.write(text_or_bytes)
    try:
        data = load_csv(str(path), "y", categorical=["a"], numeric=["x"])
    except MpinnError as e:
        assert str(e) and "\n" not in str(e).strip()
        return
    assert len(data) > 0 and data.y.shape[0] == len(data)
    assert data.Xd is None or np.isfinite(data.Xd).all()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(csv_text())
def test_csv_reader_text(tmp_path, text):
    check(tmp_path / "f.csv", text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_csv_reader_bytes(tmp_path, data):
    check(tmp_path / "f.csv", b"a,x,y\n" + data)
