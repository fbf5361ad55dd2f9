"""The sharded table's exchanges in closed form: owners by contiguous id ranges, rows fetched from them,
gradient rows returned to them in rank order; Alltoallv_ checked at the boundary."""
import numpy as np
import pytest

from ranks import agree
from mpinn.comm import create_communicator
from mpinn.comm.shard import TableShards


@pytest.mark.parametrize("n_rows", [2, 7, 10])      # np 3: 1/1/0 rows (an empty slice), 3/2/2, 4/3/3
def test_rows_come_from_their_owners_and_go_back_in_rank_order(n_rows):
    c = create_communicator("allreduce", transport="mpi")
    sh = TableShards(c, n_rows, 3)
    agree(sh.bounds[-1] == n_rows and np.all(np.diff(sh.bounds) >= 0) and max(sh.counts) - min(sh.counts) <= 1)
    # every rank's table is NaN except its own rows, which hold 10 * id + column
    table = np.full((n_rows, 3), np.nan)
    table[sh.lo:sh.hi] = 10 * np.arange(sh.lo, sh.hi)[:, None] + np.arange(3)
    ids = np.arange(c.rank % 2, n_rows, 2)          # every other row, from every owner (or none)
    rows, plan = sh.fetch(table, ids)
    agree(np.array_equal(rows, 10 * ids[:, None] + np.arange(3)), "fetched %s" % rows)
    # rank r sends gradient rows r + 1 for the rows it fetched; owner sees each asking rank's in rank order
    mine = sh.send_back(plan, np.full((ids.size, 3), c.rank + 1.0))
    askers = [r for r in range(c.size) for i in range(r % 2, n_rows, 2) if sh.lo <= i < sh.hi]
    agree(np.array_equal(mine.rows[:, 0], np.array(askers, float) + 1), "received %s" % mine.rows[:, 0])
    expect = [i for r in range(c.size) for i in range(r % 2, n_rows, 2) if sh.lo <= i < sh.hi]
    agree(np.array_equal(mine.ids, expect))
    total = mine.coalesced()
    want = {i: sum(r + 1.0 for r in range(c.size) if i % 2 == r % 2) for i in range(sh.lo, sh.hi)}
    agree(all(total.rows[k, 0] == want[i] for k, i in enumerate(total.ids)))


def test_an_empty_batch_still_takes_part():
    c = create_communicator("allreduce", transport="mpi")
    sh = TableShards(c, 5, 2)
    table = np.zeros((5, 2))
    ids = np.arange(5) if c.rank == 0 else np.zeros(0, np.int64)
    rows, plan = sh.fetch(table, ids)
    mine = sh.send_back(plan, np.ones((ids.size, 2)))
    agree(rows.shape == (ids.size, 2) and np.array_equal(mine.ids, np.arange(sh.lo, sh.hi)))


def test_whole_arrays_gather_and_scatter():
    c = create_communicator("allreduce", transport="mpi")
    sh = TableShards(c, 7, 2)
    flat = np.zeros(7 * 2 + 3)
    sh.own(flat, 2)[:] = np.arange(sh.lo * 2, sh.hi * 2)
    whole = sh.gather(flat, 2)
    agree(c.rank != 0 or np.array_equal(whole, np.arange(14)))
    back = np.zeros(17)
    sh.scatter_(np.arange(14.0) * 3 if c.rank == 0 else None, back, 2)
    agree(np.array_equal(sh.own(back, 2), np.arange(sh.lo * 2, sh.hi * 2) * 3.0) and not back[14:].any())


def test_alltoallv_checks_its_buffers():
    c = create_communicator("allreduce", transport="mpi")
    counts = np.ones(c.size, np.int64)
    got = c.Alltoallv_(np.full(c.size, float(c.rank)), counts, np.empty(c.size), counts)
    agree(np.array_equal(got, np.arange(c.size, dtype=float)))
    with pytest.raises(ValueError, match="elements"):
        c.Alltoallv_(np.zeros(c.size + 1), counts, np.empty(c.size), counts)
    with pytest.raises(ValueError, match="dtype"):
        c.Alltoallv_(np.zeros(c.size, np.float32), counts, np.empty(c.size), counts)


def nearest_bf16(x):
    """x (float32) to the nearest bfloat16, ties to the even one, by comparing the two candidates around it (the
    published rule; mpinn.comm.compress rounds by an integer add instead)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    down = (u & np.uint32(0xFFFF0000)).view(np.float32)
    up = ((u & np.uint32(0xFFFF0000)) + np.uint32(0x10000)).view(np.float32)
    d_down, d_up = np.abs(x - down.astype(np.float64)), np.abs(up.astype(np.float64) - x)
    even_down = ((u >> 16) & 1) == 0
    return np.where((d_down < d_up) | ((d_down == d_up) & even_down), down, up)


@pytest.mark.parametrize("n_rows", [7, 10])
def test_bf16_rows_and_gradient_rows_are_rounded_once_and_ids_go_as_int32(n_rows):
    """--wire-rows bf16: a fetched row is the owner's value rounded to bfloat16 (whichever rank owns it: its own
    rows too), a gradient row arrives rounded once; half the bytes of fp32 rows, 4-byte ids."""
    c = create_communicator("allreduce", transport="mpi")
    sh, flat = TableShards(c, n_rows, 3, wire="bf16"), TableShards(c, n_rows, 3)
    table = np.full((n_rows, 3), np.nan, np.float32)
    table[sh.lo:sh.hi] = (np.arange(sh.lo, sh.hi)[:, None] + np.arange(3) / 7 + 1 / 3).astype(np.float32)
    ids = np.arange(c.rank % 2, n_rows, 2)
    rows, plan = sh.fetch(table, ids)
    want = nearest_bf16((ids[:, None] + np.arange(3) / 7 + 1 / 3).astype(np.float32))
    agree(rows.dtype == np.float32 and np.array_equal(rows, want), "fetched %s, want %s" % (rows, want))
    agree(not np.array_equal(rows, (ids[:, None] + np.arange(3) / 7 + 1 / 3).astype(np.float32)), "nothing rounded")
    grads = np.full((ids.size, 3), c.rank + 1 / 3, np.float32)
    mine = sh.send_back(plan, grads)
    asked = [r for r in range(c.size) for i in range(r % 2, n_rows, 2) if sh.lo <= i < sh.hi]
    agree(np.array_equal(mine.rows[:, 0], nearest_bf16(np.array([r + 1 / 3 for r in asked], np.float32))))
    _, plan32 = flat.fetch(table, ids)
    flat.send_back(plan32, grads)
    # what this rank sent to the others: ids (8 -> 4 bytes), rows answered and gradient rows (3 x 4 -> 3 x 2 bytes)
    others = np.arange(c.size) != c.rank
    ids_out, rows_out = int(plan.asked[others].sum()), int(plan.given[others].sum())
    saved = ids_out * 4 + rows_out * 3 * 2 + ids_out * 3 * 2
    agree(flat.traffic.bytes - sh.traffic.bytes == saved, "bytes fp32 %d, bf16 %d, saved %d" % (
        flat.traffic.bytes, sh.traffic.bytes, saved))
