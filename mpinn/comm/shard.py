"""The hashed table sharded by rows over the ranks: who owns which rows, and the Alltoallv exchanges that
bring a batch's rows from their owners and take the gradient rows back to them."""
import numpy as np

from mpinn.batch import SparseRows
from mpinn.comm.buffers import displs, split_counts

ID = np.int64       # row ids on the wire (a table may outgrow int32 one day; ids are ~3% of the bytes)


class RowPlan:
    """One batch's exchange, kept from the fetch for the return of its gradient rows: how many ids this
    rank asked of each owner (`asked`), how many each rank asked of it (`given`), and those ids
    (`wanted`, global ids, one run per asking rank in rank order, each run sorted and unique)."""

    def __init__(self, asked, given, wanted):
        self.asked, self.given, self.wanted = asked, given, wanted


class TableShards:
    """Rank r owns rows bounds[r]:bounds[r + 1] of the n_rows x width table: P contiguous ranges, the
    first n_rows % P ranks one row more (split_counts; with more ranks than rows the last ranks own
    none). Contiguous ranges rather than a hash of the id: the ids are already hashes, uniform over
    the table, so contiguous ranges balance rows and requests alike, the owners of a sorted id list
    are one searchsorted with each owner's ids one contiguous run of it, and a rank's rows are one
    contiguous block of the flat parameter buffer (the only part of it this rank ever writes).

    Every method is collective and makes the same calls on every rank whatever its batch (an empty
    batch asks for nothing and still takes part)."""

    def __init__(self, comm, n_rows, width):
        self.comm, self.n_rows, self.width = comm, int(n_rows), int(width)
        self.counts = split_counts(self.n_rows, comm.size)          # rows per rank
        self.bounds = np.r_[0, np.cumsum(self.counts)].astype(np.int64)
        self.lo, self.hi = int(self.bounds[comm.rank]), int(self.bounds[comm.rank + 1])

    def owners(self, ids):
        """Ids per owner for sorted ids: (P,) counts."""
        return np.diff(np.searchsorted(ids, self.bounds)).astype(np.int64)

    def fetch(self, table, ids):
        """The current values of rows `ids` (sorted, unique) of the table, from their owners:
        (rows (len(ids), width), the RowPlan for send_back). `table` is this rank's (n_rows, width)
        view of the flat parameters, of which only rows lo:hi are read (by their owner).
        Three exchanges: the id counts (Alltoall of P integers), the ids (Alltoallv), the rows
        (Alltoallv back along the same counts)."""
        comm, w = self.comm, self.width
        asked = self.owners(ids)
        given = comm.Alltoall_(asked, np.empty(comm.size, np.int64), "row id counts")
        wanted = comm.Alltoallv_(np.ascontiguousarray(ids, ID), asked, np.empty(int(given.sum()), ID),
                                 given, "row ids")
        if wanted.size and (wanted.min() < self.lo or wanted.max() >= self.hi):
            raise ValueError("row ids %d..%d asked of rank %d, which owns %d..%d"
                             % (wanted.min(), wanted.max(), comm.rank, self.lo, self.hi - 1))
        out = np.take(table, wanted, axis=0)
        rows = comm.Alltoallv_(out, given * w, np.empty((ids.shape[0], w), table.dtype), asked * w,
                               "table rows")
        return rows, RowPlan(asked, given, wanted)

    def send_back(self, plan, grad_rows):
        """Every rank's gradient rows (in the order of its fetch's ids) to their owners. Returns, on
        each owner, SparseRows of its rows with one segment per asking rank in rank order (ids unique
        within a segment; .coalesced() sums them in rank order, and SGD applies them in turn, as the
        replicated exchange does: the same arithmetic, element by element)."""
        w = self.width
        got = self.comm.Alltoallv_(np.ascontiguousarray(grad_rows), plan.asked * w,
                                   np.empty((plan.wanted.shape[0], w), grad_rows.dtype), plan.given * w,
                                   "gradient rows")
        return SparseRows(plan.wanted, got, self.n_rows, displs(np.r_[plan.given, 0]))

    # ------------------------------------------------------------ whole arrays (checkpoints, model files)
    def own(self, flat, per_row):
        """This rank's rows of a per-row array (flat, per_row elements per row): a contiguous view."""
        return flat[self.lo * per_row:self.hi * per_row]

    def gather(self, flat, per_row, out=None, root=0, what="table rows"):
        """Every rank's own rows of a per-row array (flat: n_rows * per_row elements or more, of which
        each rank's own rows are right) to root, into the first n_rows * per_row elements of `out`
        (root only; a new array if None), which it returns; None elsewhere."""
        whole = None
        if self.comm.rank == root:
            whole = (np.empty(self.n_rows * per_row, flat.dtype) if out is None else out)[:self.n_rows * per_row]
        self.comm.Gatherv_(self.own(flat, per_row), self.counts * per_row, whole, root, what)
        return out if out is not None else whole

    def scatter_(self, whole, flat, per_row, root=0, what="table rows"):
        """Root's whole per-row array (n_rows * per_row elements) into every rank's own rows of flat."""
        send = np.ascontiguousarray(whole).reshape(-1)[:self.n_rows * per_row] if self.comm.rank == root else None
        return self.comm.Scatterv_(send, self.counts * per_row, self.own(flat, per_row), root, what)
