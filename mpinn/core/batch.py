"""What travels between the data, the ranks and the model: a Batch of rows, its wire Layout, and the
sparse gradient rows (SparseRows) with their coalescing. No ranks, no model here."""
from dataclasses import dataclass

import numpy as np


@dataclass
class Layout:
    """What every rank must know to receive a batch: input widths and dtypes."""
    n_sparse: int
    n_dense: int
    dtype: str
    y_dtype: str


@dataclass
class Batch:
    """One (local or global) batch: sparse CSR input, dense input, labels; any input may be None."""
    Xs: object        # CSR (n, n_sparse) or None
    Xd: object        # (n, n_dense) C-contiguous or None
    y: object         # (n,) int64 class ids, or (n,) / (n, k) float targets

    @property
    def n(self):
        return int(self.y.shape[0])

    def slice(self, start, stop):
        """Rows start:stop (views where the storage allows)."""
        return Batch(self.Xs[start:stop] if self.Xs is not None else None,
                     self.Xd[start:stop] if self.Xd is not None else None, self.y[start:stop])


@dataclass
class SparseRows:
    """Gradient of the sparse block of the first layer: only the rows the batch touched.
    Row ids[i] of the (n_rows, width) block has gradient rows[i]. Without segments, ids are unique
    and sorted. With segments (k + 1 offsets: one segment per rank, in world-rank order, empty ones
    included: a segment's place is its leaf in the summation tree), ids are unique within a segment
    but may repeat across segments, and the gradient of a row is the sum of its entries in all
    segments, in the canonical tree (coalesce)."""
    ids: object
    rows: object
    n_rows: int
    segments: object = None

    @property
    def width(self):
        return int(self.rows.shape[1])

    def __len__(self):
        return int(self.ids.shape[0])

    def leaves(self):
        """(ids, rows) of every segment in order, empty ones included; one leaf when not segmented."""
        if self.segments is None:
            return [(self.ids, self.rows)]
        s = self.segments
        return [(self.ids[a:b], self.rows[a:b]) for a, b in zip(s[:-1], s[1:])]

    def coalesced(self):
        """The same gradient with unique, sorted ids (an id's entries summed in the canonical tree)."""
        if self.segments is None:
            return self
        return coalesce(self.leaves(), self.n_rows, self.width, self.rows.dtype)


class RowParts:
    """The same gradient as SparseRows with segments, kept as its (ids, rows) leaves in order without
    copying them together: e.g. the slices of every rank's rows that fall in a node rank's part of the
    table (a rank with none there is an empty leaf: the leaves' places fix the summation tree)."""

    def __init__(self, leaves, n_rows, width):
        self._leaves, self.n_rows, self.width = list(leaves), int(n_rows), int(width)

    def __len__(self):
        return sum(int(ids.shape[0]) for ids, _ in self._leaves)

    def leaves(self):
        return self._leaves

    def coalesced(self):
        rows = [r for _, r in self._leaves]
        return coalesce(self._leaves, self.n_rows, self.width, rows[0].dtype if rows else np.float32)


def coalesce(leaves, n_rows, width=None, dtype=None):
    """Sum rows that share an id over leaves [(ids, rows), ...] (each leaf's ids unique; a leaf is a
    rank, or a micro-batch, in order): SparseRows with sorted unique ids. The canonical summation,
    which every exchange and the one-process reproductions use, so that they give the same bits: the
    aligned pairwise tree over the leaves' places, leaf i and i + 1 (i even) first, then blocks of
    4, 8, ... (the leaves padded to a power of two), where a leaf without the id is absent (its
    partner passes through unchanged: no + 0). A block of 2^k leaves aligned on a multiple of 2^k is
    a subtree: a node of 2^k ranks placed in a block can sum its rows first and send one row
    (mpinn.comm.shard_node) and the owner's sum is the same. Addition commutes bit for bit, so only
    the tree's shape matters."""
    level = [_sorted_leaf(ids, rows) for ids, rows in leaves]
    if not level:
        return SparseRows(np.zeros(0, np.int64), np.zeros((0, width or 0), dtype or np.float32), n_rows)
    while len(level) > 1:
        level = [merge_sum(*level[i:i + 2]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    ids, rows = level[0]
    return SparseRows(ids, rows, n_rows)


def tree_add(arrays):
    """The sum of equal-shaped arrays in coalesce's tree (leaves i and i + 1 first, ...): micro-batches'
    gradient rows over the same fetched rows, summed as coalesce sums the replicated exchange's."""
    level = list(arrays)
    while len(level) > 1:
        level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def _sorted_leaf(ids, rows):
    ids = np.asarray(ids, dtype=np.int64)
    if ids.shape[0] > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        order = np.argsort(ids, kind="stable")
        return ids[order], rows[order]
    return ids, rows


def merge_sum(a, b):
    """Two leaves (sorted unique ids, rows) as one: an id in both gets a + b, in one its row as it is."""
    (ai, ar), (bi, br) = a, b
    ar = np.ascontiguousarray(ar)
    if not bi.shape[0]:
        return a
    if not ai.shape[0]:
        return b
    both = np.concatenate([ai, bi])
    k = np.sort(both, kind="stable")            # two sorted runs: timsort merges them
    keep = np.empty(k.shape[0], bool)
    keep[:1] = True
    np.not_equal(k[1:], k[:-1], out=keep[1:])
    ids = k[keep]
    out = np.empty((ids.shape[0], ar.shape[1]), ar.dtype)
    put_rows(out, np.searchsorted(ids, ai), ar)
    j = np.minimum(np.searchsorted(ai, bi), ai.shape[0] - 1)
    shared = ai[j] == bi
    at = np.searchsorted(ids, bi)
    put_rows(out, at[~shared], np.ascontiguousarray(br[~shared]))
    if shared.any():
        s = at[shared]
        got = take_rows(out, s, np.empty((s.shape[0], ar.shape[1]), ar.dtype))
        got += br[shared]
        put_rows(out, s, got)
    return ids, out


def _items(a):
    """The C-contiguous array a as a vector of opaque row items (a void view; a vector as it is)."""
    if a.ndim == 1:
        return a
    return a.view(np.dtype((np.void, a.shape[1] * a.dtype.itemsize))).reshape(-1)


def take_rows(a, ids, out):
    """out[:] = a[ids] for a host array (2-D or a vector), each row moved as one opaque item: 2.5x faster than
    a[ids]. mode="clip" skips the copy numpy makes of `out` to undo a failed bounds check: ids
    must be in range (they are made here, never read from input)."""
    np.take(_items(a), ids, out=_items(out), mode="clip")
    return out


def put_rows(a, ids, rows):
    """a[ids] = rows for a host array (see take_rows)."""
    np.put(_items(a), ids, _items(rows), mode="clip")


def densify_(grad_buffer, sparse):
    """Write SparseRows into the dense sparse-block part of a flat gradient buffer (zeros elsewhere
    in that block): the block is the buffer's first n_rows x width elements."""
    sparse = sparse.coalesced()
    block = grad_buffer[:sparse.n_rows * sparse.width].reshape(sparse.n_rows, sparse.width)
    block.fill(0)
    block[sparse.ids] = sparse.rows
