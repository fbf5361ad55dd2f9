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
    and sorted. With segments (k + 1 offsets: every rank's rows, as gathered, in rank order), ids
    are unique within a segment but may repeat across segments, and the gradient of a row is the
    sum of its entries in all segments (coalesced() adds them up)."""
    ids: object
    rows: object
    n_rows: int
    segments: object = None

    @property
    def width(self):
        return int(self.rows.shape[1])

    def __len__(self):
        return int(self.ids.shape[0])

    def parts(self):
        """(ids, rows) of each segment, each with unique ids; one part when not segmented."""
        if self.segments is None:
            return [(self.ids, self.rows)]
        s = self.segments
        return [(self.ids[a:b], self.rows[a:b]) for a, b in zip(s[:-1], s[1:]) if b > a]

    def coalesced(self):
        """The same gradient with unique, sorted ids (duplicates summed in segment order)."""
        if self.segments is None:
            return self
        parts = self.parts()
        if not parts:
            return SparseRows(self.ids[:0], self.rows[:0], self.n_rows)
        return coalesce(parts, self.n_rows)


class RowParts:
    """The same gradient as SparseRows with segments, kept as its (ids, rows) parts in order without
    copying them together: e.g. the slices of every rank's rows that fall in a node rank's part of the
    table. SGD applies the parts in turn; the other updates coalesce them."""

    def __init__(self, parts, n_rows, width):
        self._parts, self.n_rows, self.width = list(parts), int(n_rows), int(width)

    def __len__(self):
        return sum(int(ids.shape[0]) for ids, _ in self._parts)

    def parts(self):
        return self._parts

    def coalesced(self):
        if len(self._parts) == 1:
            return SparseRows(self._parts[0][0], self._parts[0][1], self.n_rows)
        return coalesce(self._parts, self.n_rows)


def coalesce(parts, n_rows):
    """Sum rows that share an id over parts [(ids, rows), ...], each part's ids unique: SparseRows with
    sorted unique ids. A row is 0 + its row in the first part that has it + ... in part order, the
    same bits on every path. The ids are merged by a stable sort (parts arrive sorted: timsort
    merges the runs), and each part is added in place at its ids' positions. (The optimizers' step
    merges in C where the fused kernels run, with the same bits: mpinn.optim.fused.coalesce.)"""
    ids = np.sort(np.concatenate([i for i, _ in parts]), kind="stable")
    keep = np.empty(ids.shape[0], dtype=bool)
    keep[:1] = True
    np.not_equal(ids[1:], ids[:-1], out=keep[1:])
    uniq = ids[keep]
    width, dtype = parts[0][1].shape[1], parts[0][1].dtype
    out = np.zeros((uniq.shape[0], width), dtype=dtype)
    buf = np.empty((max(i.shape[0] for i, _ in parts), width), dtype=dtype)
    for i, r in parts:
        at = np.searchsorted(uniq, i)
        got = take_rows(out, at, buf[:i.shape[0]])
        got += r
        put_rows(out, at, got)
    return SparseRows(uniq, out, n_rows)


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
