"""A batch on its way from the root to every rank: the typed receive buffers and their requests."""
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from mpinn.core.batch import Batch
from mpinn.comm.buffers import INDEX, check_buffer, displs


class ReadyBatch:
    """post_batch on a single rank: the batch's own arrays in the wire dtypes (a copy only where a
    dtype differs), as the receive buffers of a scatter would hold them."""

    def __init__(self, batch, layout):
        self.batch, self.layout = batch, layout

    def wait(self):
        b, L = self.batch, self.layout
        Xs = None
        if L.n_sparse:
            g = b.Xs
            lo, hi = int(g.indptr[0]), int(g.indptr[-1])
            Xs = sp.csr_matrix((np.ascontiguousarray(g.data[lo:hi], L.dtype),
                                np.ascontiguousarray(g.indices[lo:hi], INDEX),
                                np.ascontiguousarray(g.indptr - lo, INDEX)), shape=(b.n, L.n_sparse))
        return Batch(Xs, np.ascontiguousarray(b.Xd, L.dtype) if L.n_dense else None,
                     np.ascontiguousarray(b.y, L.y_dtype))


class PendingBatch:
    """A batch on its way: the receive buffers, the requests, and (on root) the send buffers,
    which must stay alive until the requests complete."""

    def __init__(self, comm, root, replicate, layout, n):
        self.comm, self.root, self.replicate, self.layout, self.n = comm, root, replicate, layout, n
        self.buffers, self.requests, self.keep = {}, [], []

    def move(self, name, send, dtype, counts, shape, what):
        c = self.comm
        recv = np.empty(shape, dtype=dtype)
        check_buffer(recv, dtype, int(counts[c.rank]), what + " receive buffer")
        if c.rank == self.root:
            send = np.ascontiguousarray(send, dtype=dtype)
            check_buffer(send, dtype, recv.size if self.replicate else int(counts.sum()), what + " send buffer")
            self.keep.append(send)
        if self.replicate:
            if c.rank == self.root:
                recv[...] = send.reshape(shape)
            req = c.comm.Ibcast(recv, root=self.root)
        elif c.rank == self.root:
            req = c.comm.Iscatterv([send, (counts, displs(counts))], recv, root=self.root)
        else:
            req = c.comm.Iscatterv(None, recv, root=self.root)
        self.buffers[name] = recv
        self.requests.append(req)

    def wait(self):
        """Complete the transfers; this rank's Batch."""
        MPI.Request.Waitall(self.requests)
        self.keep = []
        b, L = self.buffers, self.layout
        Xs = None
        if L.n_sparse:
            indptr = np.zeros(self.n + 1, dtype=INDEX)
            np.cumsum(b["lengths"], out=indptr[1:])
            Xs = sp.csr_matrix((b["data"], b["indices"], indptr), shape=(self.n, L.n_sparse))
        return Batch(Xs, b.get("Xd"), b["y"])
