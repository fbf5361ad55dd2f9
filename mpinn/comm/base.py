"""Communicator: checked typed collectives over a duplicate of the communicator it is given; the
strategy-specific methods (reduce_gradients_, sync_params_, agree_) are the subclasses'."""
import time

import numpy as np
from mpi4py import MPI

from mpinn.core.batch import SparseRows, densify_
from mpinn.comm.batches import PendingBatch, ReadyBatch
from mpinn.comm.buffers import INDEX, check_buffer, displs, split_counts
from mpinn.core.errors import MpinnError


class Communicator:
    """A duplicate of the communicator it is given, so mpinn's messages never match the user's."""

    def free(self):
        """Collective: the duplicate is freed (the communicator is unusable after this)."""
        self.comm.Free()

    name = "base"
    updates_here = True      # does this rank apply the optimizer step?
    wants_dense = False      # must sparse gradient rows be densified before reduce_gradients_?

    def __init__(self, comm=None, sparse_threshold=0.25, dup=True):
        comm = comm if comm is not None else MPI.COMM_WORLD
        self.comm = comm.Dup() if dup else comm      # dup=False: a duplicate already made for mpinn (a job's)
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.sparse_threshold = sparse_threshold  # dense exchange once gathered rows exceed this share
        self.last_exchange = None

    # ------------------------------------------------------------ objects (start-up only)
    def bcast_obj(self, obj, root=0):
        return self.comm.bcast(obj, root=root)

    def gather_obj(self, obj, root=0):
        return self.comm.gather(obj, root=root)

    def allgather_obj(self, obj):
        return self.comm.allgather(obj)

    def barrier(self):
        self.comm.Barrier()

    while_waiting = None     # called as barrier_asleep polls (prepare's check for a lost peer: mpinn.comm.heartbeat)

    def barrier_asleep(self, poll=0.005):
        """A barrier whose waiting ranks sleep (polled every `poll` s): MPI's blocking calls spin a core, which
        a rank that is done early takes from a rank still working where they share the cores (prepare's)."""
        request = self.comm.Ibarrier()
        while not request.Test():
            if self.while_waiting is not None:
                self.while_waiting()
            time.sleep(poll)

    def split(self, color):
        """Collective: a Communicator over the ranks of the same color, in rank order (a stream reader's group)."""
        return Communicator(self.comm.Split(color, self.rank), dup=False)

    def allreduce_min_obj(self, value):
        return self.comm.allreduce(value, op=MPI.MIN)

    def allreduce_max_obj(self, value):
        return self.comm.allreduce(value, op=MPI.MAX)

    # ------------------------------------------------------------ checked buffers
    def bcast_array(self, a, root=0, what="Bcast buffer"):
        """The root's host array on every rank: its shape and dtype first, then the buffer (a: None elsewhere)."""
        shape, dtype = self.bcast_obj((a.shape, a.dtype.str) if self.rank == root else None, root=root)
        buf = np.ascontiguousarray(a) if self.rank == root else np.empty(shape, dtype)
        return Communicator.Bcast_(self, buf, root=root, what=what)

    def Bcast_(self, buf, root=0, what="Bcast buffer"):
        check_buffer(buf, buf.dtype, buf.size, what)
        self.comm.Bcast(buf, root=root)
        return buf

    def Allreduce_sum_(self, buf, what="Allreduce buffer"):
        check_buffer(buf, buf.dtype, buf.size, what)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return buf

    def Scatterv_(self, send, counts, recv, root=0, what="Scatterv", replicate=False):
        """send (root only) holds sum(counts) elements; this rank receives counts[rank] into recv.
        replicate: every rank receives all of send (a Bcast; Scatterv may not read an element twice)."""
        check_buffer(recv, recv.dtype, int(counts[self.rank]), what + " receive buffer")
        if replicate:
            if self.rank == root:
                recv[...] = check_buffer(send, recv.dtype, recv.size, what + " send buffer").reshape(recv.shape)
            return self.Bcast_(recv, root, what)
        if self.rank == root:
            check_buffer(send, recv.dtype, int(counts.sum()), what + " send buffer")
            self.comm.Scatterv([send, (counts, displs(counts))], recv, root=root)
        else:
            self.comm.Scatterv(None, recv, root=root)
        return recv

    def Gatherv_(self, send, counts, recv, root=0, what="Gatherv"):
        """This rank's counts[rank] elements to root, into recv (root only) in rank order."""
        check_buffer(send, send.dtype, int(counts[self.rank]), what + " send buffer")
        if self.rank == root:
            check_buffer(recv, send.dtype, int(counts.sum()), what + " receive buffer")
            self.comm.Gatherv(send, [recv, (counts, displs(counts))], root=root)
        else:
            self.comm.Gatherv(send, None, root=root)
        return recv

    def Allgatherv_(self, send, counts, recv, what="Allgatherv"):
        check_buffer(send, recv.dtype, int(counts[self.rank]), what + " send buffer")
        check_buffer(recv, recv.dtype, int(counts.sum()), what + " receive buffer")
        self.comm.Allgatherv(send, [recv, (counts, displs(counts))])
        return recv

    def Alltoall_(self, send, recv, what="Alltoall"):
        """send[r * m:(r + 1) * m] to rank r; recv[r * m:(r + 1) * m] from rank r (m elements each)."""
        check_buffer(recv, recv.dtype, recv.size, what + " receive buffer")
        check_buffer(send, recv.dtype, recv.size, what + " send buffer")
        if recv.size % self.size:
            raise ValueError("%s: %d elements do not split over %d ranks" % (what, recv.size, self.size))
        self.comm.Alltoall(send, recv)
        return recv

    def Alltoallv_(self, send, send_counts, recv, recv_counts, what="Alltoallv"):
        """send_counts[r] elements of send (laid end to end in rank order) to rank r; recv_counts[r]
        from rank r into recv, in rank order."""
        check_buffer(send, recv.dtype, int(send_counts.sum()), what + " send buffer")
        check_buffer(recv, recv.dtype, int(recv_counts.sum()), what + " receive buffer")
        self.comm.Alltoallv([send, (send_counts, displs(send_counts))], [recv, (recv_counts, displs(recv_counts))])
        return recv

    def Ialltoallv_(self, send, send_counts, recv, recv_counts, what="Ialltoallv"):
        """Alltoallv_ posted, not waited for: the request (send and recv must stay untouched until it completes;
        the caller keeps them). MPICH moves its data only inside MPI calls (mpinn.comm.progress.Progress)."""
        check_buffer(send, recv.dtype, int(send_counts.sum()), what + " send buffer")
        check_buffer(recv, recv.dtype, int(recv_counts.sum()), what + " receive buffer")
        return self.comm.Ialltoallv([send, (send_counts, displs(send_counts))],
                                    [recv, (recv_counts, displs(recv_counts))])

    # ------------------------------------------------------------ start-up agreement
    def root_call(self, fn, root=0):
        """Run fn on root only; if it raises MpinnError, every rank raises it (collectively). The other ranks wait
        asleep (barrier_asleep), not spinning in MPI: fn is reading the data, a checkpoint, the outputs' checks.
        Any other exception (a bug) is raised on root as it is and as a one-line MpinnError on the others, so
        that no rank is left waiting for root (the Python API has no launcher's abort to end them)."""
        result, error, crash = None, None, None
        if self.rank == root:
            try:
                result = fn()
            except MpinnError as e:
                error = str(e)
            except Exception as e:
                error, crash = "rank %d failed: %s: %s" % (root, type(e).__name__, e), e
        if self.size > 1:
            self.barrier_asleep()
        error = self.bcast_obj(error, root=root)
        if crash is not None:
            raise crash
        if error is not None:
            raise MpinnError(error, collective=True)
        return result

    def check_signature(self, signature):
        """Every rank must run the same mpinn version, model layout and dtype; name the one that does not."""
        sigs = self.allgather_obj(signature)
        for r, s in enumerate(sigs):
            if s != sigs[0]:
                keys = sorted(k for k in set(s) | set(sigs[0]) if s.get(k) != sigs[0].get(k))
                detail = "; ".join("%s: %r on rank %d, %r on rank 0" % (k, s.get(k), r, sigs[0].get(k))
                                   for k in keys)
                raise MpinnError("rank %d does not match rank 0 (%s)" % (r, detail), collective=True)

    # ------------------------------------------------------------ data
    def scatter_batch(self, batch, layout, root=0, replicate=False):
        """Rank root splits its global batch into contiguous row slices, one per rank, and sends
        each as typed buffers: row lengths, column ids, values, labels, dense features. Returns
        this rank's slice as a Batch (row counts may differ by one between ranks). With replicate,
        every rank gets the whole batch (Bcast of the same buffers: tower mode's "same data")."""
        return self.post_batch(batch, layout, root, replicate).wait()

    def post_batch(self, batch, layout, root=0, replicate=False):
        """scatter_batch without waiting: the small header (row and entry counts per rank) goes
        now, the typed buffers as non-blocking Iscatterv (Ibcast) whose completion is .wait()'s.
        The trainer posts the next batch before computing this one, so the transfer overlaps it."""
        from_root = self.rank == root
        P = self.size
        if P == 1:      # the batch is already here: no copy through MPI
            return ReadyBatch(batch, layout)
        head = np.zeros(2 * P, dtype=np.int64)
        if from_root:
            counts = np.full(P, batch.n, dtype=np.int64) if replicate else split_counts(batch.n, P)
            head[:P] = counts
            if layout.n_sparse:
                ends = counts if replicate else np.cumsum(counts)
                head[P:] = batch.Xs.indptr[ends] - batch.Xs.indptr[ends - counts]
        self.Bcast_(head, root=root, what="batch header")
        counts, nnz = head[:P], head[P:]
        n = int(counts[self.rank])
        pending = PendingBatch(self, root, replicate, layout, n)
        pending.move("y", batch.y if from_root else None, layout.y_dtype, counts, (n,), "labels")
        if layout.n_dense:
            pending.move("Xd", batch.Xd if from_root else None, layout.dtype, counts * layout.n_dense,
                         (n, layout.n_dense), "dense features")
        if layout.n_sparse:
            g = batch.Xs if from_root else None
            pending.move("lengths", np.diff(g.indptr) if from_root else None, INDEX, counts, (n,),
                         "CSR row lengths")
            k = int(nnz[self.rank])
            pending.move("indices", g.indices if from_root else None, INDEX, nnz, (k,), "CSR column ids")
            pending.move("data", g.data if from_root else None, layout.dtype, nnz, (k,), "CSR values")
        return pending

    # ------------------------------------------------------------ gradients (strategy-specific)
    def reduce_gradients_(self, grad_buffer, sparse=None):
        """Combine every rank's (already 1/N-scaled) gradient. Returns the reduced SparseRows
        when the sparse block travelled as rows, else None (the buffer then holds everything)."""
        raise NotImplementedError

    def sync_params_(self, params):
        """After the optimizer step: make every rank's parameters equal (a no-op for allreduce)."""

    def adopt_(self, model):
        """Where the model's gradient buffer should live (shared memory for some strategies)."""

    def release_(self, model, params=None):
        """Collective, after training: the model's buffers become its own again (see adopt_); params: an array of
        this rank's own that may become the model's parameters instead of a copy (the kept epoch's)."""

    def agree_(self, ok):
        """Every rank's verdict on the reduced gradient. After an Allreduce every rank holds the same
        numbers, so each reaches the same verdict with no message (NaN survives the sum)."""
        return ok

    # ------------------------------------------------------------ the sparse-row exchange
    def rows_or_dense_(self, grad_buffer, sparse):
        """The sparse block's part of a gradient exchange: its rows travel (exchange_rows), or, when
        the density rule says so, they are written into the buffer to travel with the dense part.
        Returns (where the dense part starts in the buffer, the exchanged SparseRows or None)."""
        if sparse is None:
            return 0, None
        reduced = self.exchange_rows(sparse)
        if reduced is None:
            densify_(grad_buffer, sparse)
            return 0, None
        return sparse.n_rows * sparse.width, reduced

    def exchange_rows(self, sparse):
        """Allgatherv of every rank's (row id, row) pairs, as SparseRows with one segment per rank
        (coalesce with .coalesced() where unique ids are needed); None when the density rule
        says a dense Allreduce of the block is cheaper (every rank reaches the same verdict)."""
        if self.size == 1:      # nothing to exchange: the rows are already unique and sorted
            dense = sparse.ids.shape[0] > self.sparse_threshold * sparse.n_rows
            self.last_exchange = "dense" if dense else "sparse"
            return None if dense else sparse
        counts = self.Allgatherv_(np.array([sparse.ids.shape[0]], dtype=np.int64),
                                  np.ones(self.size, dtype=np.int64), np.empty(self.size, dtype=np.int64),
                                  "sparse row counts")
        total = int(counts.sum())
        if total > self.sparse_threshold * sparse.n_rows:
            self.last_exchange = "dense"
            return None
        self.last_exchange = "sparse"
        w = sparse.width
        ids = self.Allgatherv_(np.ascontiguousarray(sparse.ids, np.int64), counts,
                               np.empty(total, dtype=np.int64), "sparse row ids")
        rows = np.empty((total, w), dtype=sparse.rows.dtype)
        self.Allgatherv_(sparse.rows, counts * w, rows, "sparse rows")
        # left uncoalesced: SGD applies the ranks' parts in turn
        return SparseRows(ids, rows, sparse.n_rows, displs(np.r_[counts, 0]))
