"""The compiled one-pass kernels (mpinn/fused.py) against the numpy passes of each optimizer's
update_: the same bits for every optimizer, dense elements and table rows, float32 and float64, with
lazy decay, FTRL's l1/l2 and rows touched for the first time, Adam's per-row step counts."""
import shutil

import numpy as np
import pytest

from mpinn.core.batch import SparseRows
from mpinn.optim import fused
from mpinn.optim import create_optimizer

N_ROWS, WIDTH, N_DENSE = 60, 8, 37
SIZE = N_ROWS * WIDTH + N_DENSE
WEIGHTS = [(0, N_ROWS * WIDTH + 25)]

CASES = [("sgd", {}), ("sgd", {"weight_decay": 0.01}), ("momentum", {"weight_decay": 0.01}), ("adam", {}),
         ("adam", {"weight_decay": 0.02}), ("adagrad", {}), ("adagrad", {"weight_decay": 0.01}), ("ftrl", {}),
         ("ftrl", {"l1": 0.05, "l2": 0.1, "ftrl_beta": 0.5, "weight_decay": 0.01}),
         ("adam", {"schedule": True}), ("ftrl", {"schedule": True}), ("ftrl", {"schedule": True, "l1": 0.05}),
         ("momentum", {"schedule": True}), ("adagrad", {"schedule": True})]


@pytest.fixture(scope="module")
def lib():
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the fused kernels are not built here")
    got = fused.library()
    assert got is not None, fused.why_not
    return got


def run(name, kw, dtype, use_fused, steps=7, seed=0):
    rng = np.random.default_rng(seed)
    opt = create_optimizer(name, SIZE, np, kw.get("weight_decay", 0.0), WEIGHTS, table=(N_ROWS, WIDTH),
                           l1=kw.get("l1", 0.0), l2=kw.get("l2", 0.0), ftrl_beta=kw.get("ftrl_beta", 1.0))
    if not use_fused:
        opt.fused_library = lambda dt: None
    p = rng.standard_normal(SIZE).astype(dtype)
    for s in range(steps):
        ids = np.sort(rng.choice(N_ROWS, 15, replace=False))
        rows = (rng.standard_normal((15, WIDTH)) * 10.0 ** rng.integers(-3, 2, (15, 1))).astype(dtype)
        rows[0] = 0.0
        g = np.zeros(SIZE + 1, dtype)
        g[N_ROWS * WIDTH:SIZE] = rng.standard_normal(N_DENSE)
        lr = 0.05 * (1 + s) / steps if kw.get("schedule") else 0.05    # a warm-up: the rate changes every step
        opt.step_(p, g[:SIZE], SparseRows(ids, rows, N_ROWS), lr=lr)
    return p, opt.state()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,kw", CASES)
def test_the_kernels_give_the_numpy_passes_bits(lib, name, kw, dtype):
    p, state = run(name, kw, dtype, True)
    q, ref = run(name, kw, dtype, False)
    assert p.tobytes() == q.tobytes(), "params differ at %s" % np.flatnonzero(p != q)[:10]
    assert sorted(state) == sorted(ref)
    for k in state:
        assert state[k].tobytes() == ref[k].tobytes(), "state %r differs" % k


def test_the_kernels_refuse_rows_outside_the_table(lib):
    table = np.zeros((4, 2))
    with pytest.raises(ValueError, match="outside"):
        fused.rows(lib, "sgd", table, np.array([1, 4]), np.ones((2, 2)), consts=fused.consts("sgd", lr=0.1, wd=0))
    with pytest.raises(ValueError, match="C-contiguous"):
        fused.dense(lib, "sgd", table[:, 0], np.ones(4), consts=fused.consts("sgd", lr=0.1, wd=0))
    with pytest.raises(TypeError, match="need exactly"):
        fused.consts("sgd", lr=0.1)


def test_mpinn_fused_0_turns_them_off(monkeypatch):
    monkeypatch.setattr(fused, "_tried", False)
    monkeypatch.setattr(fused, "_lib", None)
    monkeypatch.setenv("MPINN_FUSED", "0")
    assert fused.library() is None and "MPINN_FUSED" in fused.why_not


def test_constants_whose_layout_differs_from_the_c_side_refuse_the_library(lib, monkeypatch):
    """Each kernel's constants are a struct named field by field; a Python side that disagrees with the
    C side (a field added, renamed or moved on one side only) refuses the library, and says why."""
    assert fused.check_layout(lib) is None
    moved = dict(fused.CONSTS, adam=fused._consts("adam_consts", ("b1", "lr", "b2", "eps", "step", "wd")))
    assert "adam_consts" in fused.check_layout(lib, moved)
    grown = dict(fused.CONSTS, sgd=fused._consts("sgd_consts", ("lr", "wd", "mu")))
    assert "sgd_consts" in fused.check_layout(lib, grown)
    monkeypatch.setattr(fused, "_tried", False)
    monkeypatch.setattr(fused, "_lib", None)
    monkeypatch.setattr(fused, "CONSTS", moved)
    assert fused.library() is None and "constants differ" in fused.why_not and "adam_consts" in fused.why_not
    opt = create_optimizer("adam", SIZE, np, table=(N_ROWS, WIDTH))
    assert opt.fused_library(np.float32) is None                 # and a step still runs, in numpy
    opt.step_(np.zeros(SIZE, np.float32), np.ones(SIZE, np.float32), lr=0.01)


def bf16_plainly(bits):
    """float32 bit patterns (uint32) to bfloat16 words, the rule written as a decision: any NaN is 0x7FC0; else keep
    the top half, plus one where the dropped half is over half way, or exactly half way and the kept half odd."""
    bits = bits.astype(np.int64)
    top, low = bits >> 16, bits & 0xFFFF
    up = (low > 0x8000) | ((low == 0x8000) & (top & 1 == 1))
    nan = ((bits & 0x7FFFFFFF) > 0x7F800000)
    return np.where(nan, 0x7FC0, top + up).astype(np.uint16)


def test_bf16_kernels_round_to_nearest_even_as_written(lib):
    """--wire-rows bf16's kernels (fused.BF16, mpinn.comm.wire's codec): every top half with the dropped halves that
    decide the rounding (0, 1, just under, at and over half way, all ones): Inf, -0, subnormals, the largest floats
    (rounded to Inf), NaNs of either sign; the rule written plainly above, numpy's cast (compress.to_bf16) the same;
    rows gathered by id and cast in one pass; the words back to the exact floats."""
    from mpinn.comm.compress import from_bf16, to_bf16
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    bits = (top[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)).reshape(-1, 64)
    x = bits.view(np.float32)
    got = fused.BF16.encode(x, np.empty(x.shape, np.uint16))
    want = bf16_plainly(bits)
    assert got is not None and np.array_equal(got, want)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(to_bf16(x, np.empty(x.shape, np.uint16)), want)
    ids = np.random.default_rng(0).integers(0, x.shape[0], 300)
    assert np.array_equal(fused.BF16.take(x, ids, np.empty((300, 64), np.uint16)), want[ids])
    back = fused.BF16.decode(want)
    assert back.dtype == np.float32 and np.array_equal(back.view(np.uint32), want.astype(np.uint32) << 16)
    assert np.array_equal(back.view(np.uint32), from_bf16(want).view(np.uint32))
    # what the kernels do not take is left to numpy (None): float64, a strided view, a mismatched buffer
    with np.errstate(invalid="ignore"):
        assert fused.BF16.encode(x.astype(np.float64), np.empty(x.shape, np.uint16)) is None
    assert fused.BF16.encode(x[:, ::2], np.empty((x.shape[0], 32), np.uint16)) is None
    assert fused.BF16.take(x, ids.astype(np.int32), np.empty((300, 64), np.uint16)) is None


def test_int8_kernels_follow_the_rule_written_plainly(lib):
    """--wire-rows int8's kernels (fused.INT8): rows of every scale, ties, zeros, subnormals, NaN and Inf, each
    against tests/reference.int8_row; numpy's to_int8 gives the same bytes; gathered by id; back exactly."""
    from mpinn.comm.wire import from_int8, to_int8
    from reference import int8_edge_rows, int8_row
    x = int8_edge_rows()
    with np.errstate(invalid="ignore", over="ignore"):
        want = to_int8(x)
    got = fused.INT8.encode(x, np.empty(want.shape, np.uint8))
    assert got is not None and np.array_equal(got, want)
    back = fused.INT8.decode(got)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(back, np.array([int8_row(r) for r in x]), equal_nan=True)
        assert np.array_equal(back, from_int8(want), equal_nan=True)
    ids = np.random.default_rng(0).integers(0, x.shape[0], 300)
    assert np.array_equal(fused.INT8.take(x, ids, np.empty((300, 68), np.uint8)), want[ids])
    assert fused.INT8.encode(x.astype(np.float64), np.empty(want.shape, np.uint8)) is None
    assert fused.INT8.decode(want[:, ::2]) is None
