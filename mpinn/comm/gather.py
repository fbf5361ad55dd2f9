"""--reduce gather (the DT42 pattern): gradients gathered to rank 0, which steps and broadcasts the parameters."""
import numpy as np

from mpinn.comm.base import Communicator
from mpinn.core.batch import SparseRows
from mpinn.comm.buffers import check_buffer, displs


class GatherCommunicator(Communicator):
    """The DT42 pattern: Gather gradients to rank 0, which sums them in rank order and steps;
    then rank 0 Bcasts the parameters."""

    name = "gather"
    wants_dense = True

    def __init__(self, comm=None, **kw):
        super().__init__(comm, **kw)
        self.updates_here = self.rank == 0
        self._recv = None

    def reduce_gradients_(self, grad_buffer, sparse=None):
        """Dense gradients, or, for an optimizer that updates only the touched rows of the hashed
        block (sparse given), those rows gathered apart: rank 0 gets every rank's rows in rank order."""
        rows = None
        if sparse is not None:
            rows = self.gather_rows(sparse)
            grad_buffer = grad_buffer[sparse.n_rows * sparse.width:]
        self.gather_sum_(grad_buffer)
        return rows

    def gather_rows(self, sparse):
        """Every rank's (row id, row) pairs to rank 0, as SparseRows with one segment per rank (rank 0;
        None elsewhere)."""
        ones = np.ones(self.size, dtype=np.int64)
        mine = np.array([sparse.ids.shape[0]], dtype=np.int64)
        counts = self.Gatherv_(mine, ones, np.empty(self.size, np.int64) if self.rank == 0 else None,
                               what="sparse row counts")
        if self.rank != 0:      # the others need only their own count
            counts = np.zeros(self.size, dtype=np.int64)
            counts[self.rank] = mine[0]
        w, total = sparse.width, int(counts.sum())
        ids = np.empty(total, np.int64) if self.rank == 0 else None
        rows = np.empty((total, w), sparse.rows.dtype) if self.rank == 0 else None
        self.Gatherv_(np.ascontiguousarray(sparse.ids, np.int64), counts, ids, what="sparse row ids")
        self.Gatherv_(np.ascontiguousarray(sparse.rows), counts * w, rows, what="sparse rows")
        if self.rank != 0:
            return None
        return SparseRows(ids, rows, sparse.n_rows, displs(np.r_[counts, 0]))

    def gather_sum_(self, grad_buffer):
        """Rank 0 sums every rank's buffer in rank order into its own."""
        check_buffer(grad_buffer, grad_buffer.dtype, grad_buffer.size, "gradient buffer")
        if self.rank == 0:
            if self._recv is None or self._recv.shape[1] != grad_buffer.size:
                self._recv = np.empty((self.size, grad_buffer.size), dtype=grad_buffer.dtype)
            check_buffer(self._recv, grad_buffer.dtype, self.size * grad_buffer.size, "gathered gradients")
            self.comm.Gather(grad_buffer, self._recv, root=0)
            grad_buffer[...] = self._recv[0]
            for r in range(1, self.size):
                grad_buffer += self._recv[r]
        else:
            self.comm.Gather(grad_buffer, None, root=0)
        return None

    def sync_params_(self, params):
        self.Bcast_(params, root=0, what="parameters")

    def agree_(self, ok):
        """Only rank 0 holds the reduced gradient: it tells the others."""
        flag = np.array([1 if ok else 0], dtype=np.int64)
        self.Bcast_(flag, root=0, what="step verdict")
        return bool(flag[0])
