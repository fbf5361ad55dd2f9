"""Sparse gradient rows summed over parts (ranks, micro-batches): every path must see the same bits,
so the sum of a row is fixed as 0 + its row in each part that has it, in part order."""
import numpy as np
import pytest

from mpinn.optim import fused
from mpinn.core.batch import RowParts, SparseRows, coalesce, put_rows, take_rows


def parts_of(seed, n_parts=3, n_rows=40, width=5, dtype=np.float32, ordered=False):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_parts):
        ids = rng.choice(n_rows, rng.integers(0, 25), replace=False)       # unique, in no order
        if ordered:                                                         # as the ranks' rows come
            ids = np.sort(ids)
        out.append((ids.astype(np.int64), (rng.standard_normal((ids.size, width)) * 10.0 ** rng.integers(
            -8, 8, (ids.size, 1))).astype(dtype)))
    return out


@pytest.mark.parametrize("fused_on", [True, False])
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_each_row_is_the_sum_of_its_parts_in_part_order_bit_for_bit(seed, ordered, fused_on, monkeypatch):
    """In numpy, and in the fused k-way merge when the parts' ids increase (mpinn.fused)."""
    if not fused_on:
        monkeypatch.setattr(fused, "coalesce", lambda parts: None)
    parts = parts_of(seed, dtype=np.float32 if seed % 2 else np.float64, ordered=ordered)
    got = coalesce(parts, 40)
    want = {}
    for ids, rows in parts:
        for i, r in zip(ids, rows):
            want[int(i)] = (want[int(i)] if int(i) in want else np.zeros_like(r) + 0) + r
    assert list(got.ids) == sorted(want)
    assert all(got.rows[k].tobytes() == want[int(i)].tobytes() for k, i in enumerate(got.ids))


def test_segments_and_row_parts_coalesce_alike_and_empty_segments_give_no_rows():
    parts = parts_of(7)
    seg = SparseRows(np.concatenate([i for i, _ in parts]), np.concatenate([r for _, r in parts]), 40,
                     np.cumsum([0] + [i.size for i, _ in parts]))
    a, b = seg.coalesced(), RowParts(parts, 40, 5).coalesced()
    assert np.array_equal(a.ids, b.ids) and a.rows.tobytes() == b.rows.tobytes()
    empty = SparseRows(np.zeros(0, np.int64), np.zeros((0, 5), np.float32), 40, np.array([0, 0, 0]))
    assert len(empty.coalesced()) == 0 and empty.coalesced().width == 5


def test_take_and_put_rows_move_whole_rows():
    a = np.arange(30, dtype=np.float64).reshape(10, 3)
    ids = np.array([7, 2, 9])
    got = take_rows(a, ids, np.empty((3, 3)))
    assert np.array_equal(got, a[ids])
    put_rows(a, ids, -got)
    assert np.array_equal(a[ids], -got) and a[0, 0] == 0 and a[1, 2] == 5
    v = np.arange(10.0)
    assert np.array_equal(take_rows(v, ids, np.empty(3)), v[ids])


def test_the_merge_runs_where_the_kernels_are_built():
    """The fused path is taken for increasing ids (not silently skipped), and refused for others."""
    if fused.library() is None:
        pytest.skip("no fused kernels here: %s" % fused.why_not)
    assert fused.coalesce(parts_of(1, ordered=True)) is not None
    assert fused.coalesce([(np.array([3, 1]), np.ones((2, 5)))]) is None
