"""Sparse gradient rows summed over parts (ranks, micro-batches): every path must see the same bits, so the sum
of a row is fixed as the pairwise tree over the parts' places (mpinn.core.batch.coalesce)."""
import numpy as np
import pytest

from reference import tree_sum
from mpinn.optim import fused
from mpinn.core.batch import RowParts, SparseRows, coalesce, put_rows, take_rows, tree_add


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


def reference(parts):
    rows = {}
    for k, (ids, part) in enumerate(parts):
        for i, r in zip(ids, part):
            rows.setdefault(int(i), [None] * len(parts))[k] = r
    return {i: tree_sum(v) for i, v in rows.items()}


@pytest.mark.parametrize("kernel", [False, True])
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("n_parts", [1, 2, 3, 4, 5, 8, 11, 37])
@pytest.mark.parametrize("seed", range(4))
def test_each_row_is_the_pairwise_tree_sum_of_its_parts_bit_for_bit(seed, n_parts, ordered, kernel):
    """In numpy (batch.coalesce), and in the fused k-way merge (mpinn.optim.fused) when the parts' ids increase."""
    parts = parts_of(seed, n_parts=n_parts, dtype=np.float32 if seed % 2 else np.float64, ordered=ordered)
    if kernel and fused.library() is None:
        pytest.skip("no fused kernels here: %s" % fused.why_not)
    got = fused.coalesce(parts) if kernel else coalesce(parts, 40)
    if kernel and not ordered:
        return      # unsorted ids: the kernel declines (None), the optimizers then sum in numpy
    if kernel:
        got = SparseRows(got[0], got[1], 40)
    want = reference(parts)
    assert list(got.ids) == sorted(want)
    assert all(got.rows[k].tobytes() == want[int(i)].tobytes() for k, i in enumerate(got.ids))


def test_the_tree_is_not_the_running_sum_and_an_absent_leaf_adds_no_zero():
    """Values where ((a + b) + c) + d and (a + b) + (c + d) differ in float32: the tree's is returned;
    a row only one leaf holds is that leaf's row, -0.0 included (a + 0 would make it +0.0)."""
    a, b, c, d = (np.array([[x]], np.float32) for x in (1.0, 2.0 ** -24, 2.0 ** -24, 2.0 ** -24))
    one = np.array([0])
    got = coalesce([(one, a), (one, b), (one, c), (one, d)], 4).rows[0, 0]
    assert got == (a + b) + (c + d) and got != ((a + b) + c) + d
    neg = coalesce([(one, -np.zeros((1, 1))), (one[:0], np.zeros((0, 1)))], 4).rows[0, 0]
    assert np.signbit(neg)


def test_a_block_of_leaves_summed_first_is_a_subtree():
    """Blocks of 2^k leaves aligned on multiples of 2^k, each coalesced first, then coalesced as leaves,
    give the whole tree's bits: a node of 2^k ranks placed in a block may sum its rows before they cross."""
    parts = parts_of(3, n_parts=12, n_rows=30)
    whole = coalesce(parts, 30)
    for k in (2, 4):
        blocks = [coalesce(parts[i:i + k], 30) for i in range(0, 12, k)]
        got = coalesce([(b.ids, b.rows) for b in blocks], 30)
        assert np.array_equal(got.ids, whole.ids) and got.rows.tobytes() == whole.rows.tobytes()
    odd = [coalesce(parts[i:i + 3], 30) for i in range(0, 12, 3)]     # blocks of 3: not a subtree
    got = coalesce([(b.ids, b.rows) for b in odd], 30)
    assert got.rows.tobytes() != whole.rows.tobytes()


def test_micro_batches_dense_rows_sum_in_the_same_tree():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((6, 3)).astype(np.float32) for _ in range(5)]
    ids = np.arange(6)
    want = coalesce([(ids, a) for a in arrays], 6).rows
    assert tree_add(arrays).tobytes() == want.tobytes()


def test_segments_and_row_parts_coalesce_alike_and_empty_segments_keep_their_place():
    parts = parts_of(7, n_parts=5)
    parts[1] = (parts[1][0][:0], parts[1][1][:0])
    seg = SparseRows(np.concatenate([i for i, _ in parts]), np.concatenate([r for _, r in parts]), 40,
                     np.cumsum([0] + [i.size for i, _ in parts]))
    a, b = seg.coalesced(), RowParts(parts, 40, 5).coalesced()
    assert np.array_equal(a.ids, b.ids) and a.rows.tobytes() == b.rows.tobytes()
    want = reference(parts)
    assert all(a.rows[k].tobytes() == want[int(i)].tobytes() for k, i in enumerate(a.ids))
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


def test_the_kernel_runs_where_it_is_built_and_declines_unsorted_ids():
    """The fused path is taken for increasing ids (not silently skipped), and refused for others."""
    if fused.library() is None:
        pytest.skip("no fused kernels here: %s" % fused.why_not)
    assert fused.coalesce(parts_of(1, ordered=True)) is not None
    assert fused.coalesce([(np.array([3, 1]), np.ones((2, 5)))]) is None
