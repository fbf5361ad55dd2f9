"""The rows' formats on the wire (mpinn.comm.wire): --wire-rows int8 against its rule written plainly
(tests/reference.int8_row), at ties, zeros, NaN and Inf; its error bound; what each format puts on the wire."""
import numpy as np
import pytest

from mpinn.comm.wire import SCALE, Wire, from_int8, to_int8, wires
from reference import int8_edge_rows, int8_row


def test_int8_rows_follow_the_rule_written_plainly():
    x = int8_edge_rows()
    with np.errstate(invalid="ignore"):
        got = from_int8(to_int8(x))
    want = np.array([int8_row(r) for r in x])
    assert got.dtype == np.float32 and got.shape == x.shape
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got[-5:-2]).all() and not np.isnan(got[:-5]).any() and not np.isnan(got[-2:]).any()
    assert list(got[200][1:7]) == [-60.0, -58.0, -58.0, -56.0, -56.0, -54.0]     # -59.5 -> -60, -58.5 -> -58, ...
    # within half a step of the row's scale: |x - back| <= max|x| / 254
    ok = np.isfinite(x).all(axis=1)
    err = np.abs(x[ok].astype(np.float64) - got[ok])
    assert (err <= np.abs(x[ok]).max(axis=1, keepdims=True) / 254 * (1 + 1e-6)).all()


def test_float64_rows_are_rounded_to_float32_first():
    x = np.random.default_rng(1).standard_normal((5, 8))
    assert np.array_equal(from_int8(to_int8(x)), from_int8(to_int8(x.astype(np.float32))))


@pytest.mark.parametrize("name, items, itemsize, ids", [("fp32", 64, 4, np.int64), ("bf16", 64, 2, np.int32),
                                                        ("int8", 64 + SCALE, 1, np.int32)])
def test_each_format_on_the_wire(name, items, itemsize, ids):
    """A 64-wide row of a float32 table: 256, 128 and 68 bytes; its buffers; a row's round trip."""
    w = Wire(name, 1 << 18)
    assert (w.items(64), w.itemsize(np.float32), w.ids) == (items, itemsize, ids)
    assert w.row_bytes(64, np.float32) == items * itemsize
    rows = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    sent = w.out(rows)
    buf = w.buffer(3, 64, np.float32)
    assert sent.shape == buf.shape and sent.dtype == buf.dtype and sent.nbytes == 3 * w.row_bytes(64, np.float32)
    back = w.back(sent, np.float32)
    assert np.array_equal(back, w.round(rows)) and back.dtype == np.float32
    assert np.array_equal(back, rows) == (name == "fp32")
    assert np.array_equal(w.take(rows, np.array([2, 0])), sent[[2, 0]])
    assert Wire(name, 2 ** 31).ids == np.int64


def test_mixed_wires_send_rows_and_gradient_rows_each_in_their_format():
    rows, grads = wires("bf16-int8", 1 << 18)
    assert (rows.name, grads.name, rows.ids, grads.ids) == ("bf16", "int8", np.int32, np.int32)
    rows, grads = wires("int8-bf16", 1 << 18)
    assert (rows.name, grads.name, rows.ids, grads.ids) == ("int8", "bf16", np.int32, np.int32)
    assert [w.name for w in wires("int8")] == ["int8", "int8"]
    with pytest.raises(ValueError, match="bf16-int8"):
        wires("bf16-bf16")
    with pytest.raises(ValueError, match="a wire format is"):
        Wire("bf16-int8")
