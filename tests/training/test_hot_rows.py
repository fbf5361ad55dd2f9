"""Which rows are hot (--hot-rows) and who owns them, against references written out by hand."""
import numpy as np
import pytest

from mpinn.comm.buffers import split_counts
from mpinn.comm.shard import RowOwners, segment_sums
from mpinn.training.hot import pick_hot


def test_auto_takes_the_rows_expected_four_times_in_a_ranks_share():
    counts = np.array([5, 0, 3, 3, 1, 2])
    # 10 rows counted, 16 rows per rank: expected count * 16 / 10 >= 4 <=> count >= 2.5: ids 0, 2, 3 (tie: lower id)
    assert pick_hot("auto", counts, 10, 16, 8, 4).tolist() == [0, 2, 3]
    assert pick_hot("auto", counts, 10, 20, 8, 4).tolist() == [0, 2, 3, 5]     # count >= 2
    assert pick_hot("auto", counts, 10, 400, 1 << 20, 4).tolist() == [0, 2]    # 8 MiB: 2 rows of 4 MiB
    assert pick_hot("off", counts, 10, 16, 8, 4).tolist() == []
    # auto is off on one node: the plan's (tests/training/test_plan.py)


def test_a_number_takes_the_most_frequent_rows_that_occur():
    counts = np.array([5, 0, 3, 3, 1, 2])
    assert pick_hot("2", counts, 10, 4, 8, 4).tolist() == [0, 2]
    assert pick_hot("6", counts, 10, 4, 8, 4).tolist() == [0, 2, 3, 5, 4]     # id 1 never occurs
    # more rows than the table has: the rule hot-rows-table (tests/training/test_plan.py)


@pytest.mark.parametrize("P", [1, 2, 3, 5])
def test_owners_are_the_ranges_except_the_hot_rows_dealt_round_robin(P):
    n_rows, hot = 23, [17, 2, 9, 22, 4, 13, 0]
    o = RowOwners(n_rows, P, hot)
    start, expect = 0, {}
    for r, c in enumerate(split_counts(n_rows, P)):        # the contiguous ranges, row by row
        for i in range(start, start + int(c)):
            expect[i] = r
        start += int(c)
    for i, h in enumerate(hot):                            # hot row i (by frequency) to rank i % P
        expect[h] = i % P
    ids = np.arange(n_rows)
    assert o.of(ids).tolist() == [expect[i] for i in ids]
    assert o.hot_mask(ids).tolist() == [i in hot for i in ids]
    for r in range(P):
        assert o.hot_of(r).tolist() == sorted(h for i, h in enumerate(hot) if i % P == r)
    assert o.hot_by_owner.tolist() == [h for r in range(P) for h in o.hot_of(r).tolist()]
    with pytest.raises(ValueError, match="distinct"):
        RowOwners(n_rows, P, [1, 1])


def test_segment_sums():
    mask = np.array([1, 0, 1, 1, 0, 1], bool)
    assert segment_sums(mask, np.array([2, 0, 3, 1])).tolist() == [1, 0, 2, 1]
