"""Communication: the only module that imports mpi4py. Strategies: allreduce, gather, null."""
import atexit
import os
import sys
import threading
import time
import traceback

import numpy as np
from mpi4py import MPI

from mpinn.config import MpinnError

INDEX = np.int32     # CSR column ids and row lengths on the wire


def check_buffer(buf, dtype, length, what="buffer"):
    """The boundary check every buffer passes before MPI reads or writes it."""
    if not isinstance(buf, np.ndarray) and hasattr(buf, "__cuda_array_interface__"):
        check_device_buffer(buf, dtype, length, what)
        from mpinn.backend import synchronize_array
        synchronize_array(buf)      # the one place a GPU buffer is made ready before MPI reads it
        return buf
    if not isinstance(buf, np.ndarray):
        raise TypeError("%s: expected a numpy array, got %s" % (what, type(buf).__name__))
    if not buf.flags.c_contiguous:
        raise ValueError("%s: not C-contiguous (a Fortran-ordered or strided array would be sent "
                         "in the wrong element order); convert it with numpy.ascontiguousarray "
                         "where it is loaded" % what)
    if buf.dtype != np.dtype(dtype):
        raise ValueError("%s: dtype %s, expected %s" % (what, buf.dtype, np.dtype(dtype)))
    if buf.size != length:
        raise ValueError("%s: %d elements, expected %d" % (what, buf.size, length))
    return buf


def split_counts(n, parts):
    """Rows per rank for a batch of n rows: contiguous slices, the first n % parts ranks get one more."""
    base, extra = divmod(int(n), parts)
    return np.array([base + (r < extra) for r in range(parts)], dtype=np.int64)


def _displs(counts):
    d = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=d[1:])
    return d


class Communicator:
    """A duplicate of the communicator it is given, so mpinn's messages never match the user's."""

    name = "base"
    transport_note = None     # how gradients travel, said at start when there is more than one rank
    updates_here = True      # does this rank apply the optimizer step?
    wants_dense = False      # must sparse gradient rows be densified before reduce_gradients_?

    def __init__(self, comm=None, sparse_threshold=0.25):
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
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

    # ------------------------------------------------------------ checked buffers
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
            self.comm.Scatterv([send, (counts, _displs(counts))], recv, root=root)
        else:
            self.comm.Scatterv(None, recv, root=root)
        return recv

    def Gatherv_(self, send, counts, recv, root=0, what="Gatherv"):
        """This rank's counts[rank] elements to root, into recv (root only) in rank order."""
        check_buffer(send, send.dtype, int(counts[self.rank]), what + " send buffer")
        if self.rank == root:
            check_buffer(recv, send.dtype, int(counts.sum()), what + " receive buffer")
            self.comm.Gatherv(send, [recv, (counts, _displs(counts))], root=root)
        else:
            self.comm.Gatherv(send, None, root=root)
        return recv

    def Allgatherv_(self, send, counts, recv, what="Allgatherv"):
        check_buffer(send, recv.dtype, int(counts[self.rank]), what + " send buffer")
        check_buffer(recv, recv.dtype, int(counts.sum()), what + " receive buffer")
        self.comm.Allgatherv(send, [recv, (counts, _displs(counts))])
        return recv

    # ------------------------------------------------------------ start-up agreement
    def root_call(self, fn, root=0):
        """Run fn on root only; if it raises MpinnError, every rank raises it (collectively)."""
        result, error = None, None
        if self.rank == root:
            try:
                result = fn()
            except MpinnError as e:
                error = str(e)
        error = self.bcast_obj(error, root=root)
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

    def release_(self, model):
        """Collective, after training: the model's buffers become its own again (see adopt_)."""

    def agree_(self, ok):
        """Every rank's verdict on the reduced gradient. After an Allreduce every rank holds the same
        numbers, so each reaches the same verdict with no message (NaN survives the sum)."""
        return ok

    # ------------------------------------------------------------ the sparse-row exchange
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
        from mpinn.model import SparseRows     # left uncoalesced: SGD applies the ranks' parts in turn
        return SparseRows(ids, rows, sparse.n_rows, _displs(np.r_[counts, 0]))


class ReadyBatch:
    """post_batch on a single rank: the batch's own arrays in the wire dtypes (a copy only where a
    dtype differs), as the receive buffers of a scatter would hold them."""

    def __init__(self, batch, layout):
        self.batch, self.layout = batch, layout

    def wait(self):
        b, L = self.batch, self.layout
        Xs = None
        if L.n_sparse:
            import scipy.sparse as sp
            g = b.Xs
            lo, hi = int(g.indptr[0]), int(g.indptr[-1])
            Xs = sp.csr_matrix((np.ascontiguousarray(g.data[lo:hi], L.dtype),
                                np.ascontiguousarray(g.indices[lo:hi], INDEX),
                                np.ascontiguousarray(g.indptr - lo, INDEX)), shape=(b.n, L.n_sparse))
        from mpinn.model import Batch
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
            req = c.comm.Iscatterv([send, (counts, _displs(counts))], recv, root=self.root)
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
            import scipy.sparse as sp
            indptr = np.zeros(self.n + 1, dtype=INDEX)
            np.cumsum(b["lengths"], out=indptr[1:])
            Xs = sp.csr_matrix((b["data"], b["indices"], indptr), shape=(self.n, L.n_sparse))
        from mpinn.model import Batch
        return Batch(Xs, b.get("Xd"), b["y"])


def coalesce_rows(ids, rows, n_rows):
    """Sum rows that share an id, in their order; SparseRows with sorted unique ids."""
    from mpinn.model import coalesce
    return coalesce(ids, rows, n_rows)


def _densify_(grad_buffer, sparse):
    block = grad_buffer[:sparse.n_rows * sparse.width].reshape(sparse.n_rows, sparse.width)
    block.fill(0)
    block[sparse.ids] = sparse.rows


class AllreduceCommunicator(Communicator):
    """One Allreduce(SUM) of the flat gradient buffer; every rank then applies the same step.
    With compress="fp16" or "bf16", the dense part travels as 16-bit words (see Compressed16)."""

    name = "allreduce"

    def __init__(self, comm=None, compress=None, **kw):
        super().__init__(comm, **kw)
        self.compressed = Compressed16(self, compress) if compress else None
        self.compress = compress
        self.shared, self.transport = None, "mpi"

    def choose_transport(self, transport="auto"):
        """--comm for CPU gradients: mpi (MPI_Allreduce), shm (summed in shared memory on each
        node, see SharedGradients; across nodes, one MPI_Allreduce among the nodes' first ranks),
        auto (shm when every rank is on one node, else mpi: across nodes MPICH's Allreduce is
        already node-aware and sends the same bytes, measured). Every rank reaches the same choice."""
        if transport not in ("auto", "shm", "mpi"):
            raise MpinnError("--comm %s is for GPUs; on the CPU it is auto, shm or mpi" % transport, collective=True)
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        one_node = self.comm.allreduce(int(node.Get_size() == self.size), op=MPI.MIN)
        use = transport == "shm" or (transport == "auto" and one_node and self.size > 1 and self.compressed is None)
        if use:
            leaders = self.comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, self.rank)
            self.shared = SharedGradients(node, None if leaders == MPI.COMM_NULL else leaders,
                                          self.comm.allreduce(int(node.Get_rank() == 0)))
        else:
            node.Free()
        self.transport, self.transport_asked = ("shm" if use else "mpi"), transport
        return self.transport

    def adopt_(self, model):
        """With shared memory, the model's gradient buffer becomes this rank's slot of the window,
        if every node's shared-memory file system has room for its ranks' slots (a container's
        /dev/shm is often 64 MiB; running out there is a SIGBUS, not an error): otherwise auto
        falls back to MPI_Allreduce and an explicit --comm shm is one clear error."""
        sh = self.shared
        if sh is None:
            return
        need = sh.size * model.grad_buffer.nbytes + (64 << 20)
        room = sh.node.bcast(shm_room() if sh.rank == 0 else None, root=0)
        short = self.comm.allreduce(0 if room is None or room >= need else 1)     # nodes short of room
        if short:
            if self.transport_asked == "shm":
                raise MpinnError("--comm shm: the gradient slots need %.0f MiB of /dev/shm on each node and "
                                 "%d node(s) have less (here %.0f MiB free); give the job more shared memory "
                                 "(docker: --shm-size) or use --comm mpi" % (need / 2**20, short, (room or 0) / 2**20),
                                 collective=True)
            sh.free()
            self.shared, self.transport = None, "mpi"
            self.transport_note = "MPI_Allreduce (/dev/shm has %.0f MiB free on %s, too little for the " \
                                  "shared-memory sum's %.0f MiB)" % (
                                      (room or 0) / 2**20, "this node" if sh.nodes == 1 else "some node",
                                      need / 2**20)
            return
        model.use_grad_buffer(sh.slot(model.grad_buffer.size, model.grad_buffer.dtype))

    def release_(self, model):
        """After training: copy the model's parameters and gradients out of shared memory into its
        own arrays and free the windows (collectively), so that the returned model is this rank's
        alone and repeated training in one process does not pile up shared memory."""
        if self.shared is None:
            return
        if self.shared.holds(model.grad_buffer):
            model.use_grad_buffer(np.zeros_like(model.grad_buffer))
        if model.params is self.shared.params:
            model.use_param_buffer(np.array(model.params))
        self.shared.free()
        self.shared, self.transport = None, "mpi"

    def share_params_(self, model):
        """Collective: on one node with shared-memory gradients, the model's parameters become one
        copy for the node (see SharedGradients.share). False (nothing changed) otherwise."""
        sh = self.shared
        if sh is None or sh.nodes != 1 or self.size == 1 or not sh.holds(model.grad_buffer):
            return False
        model.use_param_buffer(sh.share(model.params))
        return True

    def reduce_gradients_(self, grad_buffer, sparse=None):
        start, reduced = 0, None
        if sparse is not None:
            reduced = self.exchange_rows(sparse)
            if reduced is None:
                _densify_(grad_buffer, sparse)
            else:
                start = sparse.n_rows * sparse.width
        if self.compressed is not None:
            self.compressed.allreduce_sum_(grad_buffer[start:])
        elif self.shared is not None and self.shared.holds(grad_buffer):
            self.shared.allreduce_sum_(start)
        else:
            self.Allreduce_sum_(grad_buffer[start:], "gradient buffer")
        return reduced

    def overlap_(self, grad_buffer, layer_starts, bucket_elems=1 << 16):
        """--overlap: an OverlappedReduce for one step (see there)."""
        if self.compressed is not None:
            raise MpinnError("--overlap and --compress cannot be combined (the 16-bit exchange is one Allgather)", collective=True)
        if not isinstance(grad_buffer, np.ndarray):
            raise MpinnError("--overlap runs on --device cpu only (for now)", collective=True)
        return OverlappedReduce(self, grad_buffer, layer_starts, bucket_elems)


def shm_room(path="/dev/shm"):
    """Free bytes in the shared-memory file system (None where there is none to ask)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class SharedGradients:
    """Every rank's gradient buffer is its slot of one MPI shared-memory window per node (MPI-3
    Win_allocate_shared on the node's ranks), and the Allreduce is done in that memory: after a
    Barrier, node rank r sums its 1/P of every slot (in rank order) and writes the sum into that part
    of every slot; after a second Barrier each rank's slot holds the whole sum. Each element is summed
    once, by one rank, so every rank gets the same bits. No copy into or out of MPI's buffers:
    W1's 1 MiB gradient at np 2 takes ~0.15 ms against MPI_Allreduce's ~0.27 ms here. Win_sync
    around each Barrier orders the stores and loads (the MPI-3 shared-memory pattern).

    On several nodes (--comm shm) the node's sum is written into its first rank's slot only, those
    first ranks (`leaders`) add up the nodes' sums with one MPI_Allreduce, and then every rank copies
    its part of the result into every slot of its node. Only one rank per node sends gradients over
    the network, but MPICH's own Allreduce is already node-aware: the bytes came out the same
    (tests/test_multihost.py), which is why auto leaves multi-node jobs to MPI_Allreduce."""

    def __init__(self, node, leaders, nodes):
        self.node, self.rank, self.size = node, node.Get_rank(), node.Get_size()
        self.leaders, self.nodes = leaders, int(nodes)
        self.win = self.buf = self._acc = None
        self.params_win = self.params = None      # the node's one copy of the parameters (share)
        self._at_exit = False

    def slot(self, n, dtype):
        """This rank's slot for an n-element gradient buffer (a new window, collectively)."""
        dtype = np.dtype(dtype)
        if self.win is not None:
            self.win.Unlock_all()
            self.win.Free()
        self.win = MPI.Win.Allocate_shared(n * dtype.itemsize, dtype.itemsize, comm=self.node)
        self.win.Lock_all(MPI.MODE_NOCHECK)
        if not self._at_exit:       # freed before MPI_Finalize, which otherwise fails on a network
            atexit.register(self.free)      # netmod that still holds the window ("fabricclose: busy")
            self._at_exit = True
        slots = []
        for r in range(self.size):
            mem, _ = self.win.Shared_query(r)
            slots.append(np.frombuffer(mem, dtype=dtype, count=n))
        self.slots, self.n = slots, n
        self.buf = check_buffer(slots[self.rank], dtype, n, "shared gradient slot")
        self._acc = np.empty(int(split_counts(n, self.size).max()), dtype=dtype)
        return self.buf

    def free(self):
        """Free the window and the communicators (collective; idempotent)."""
        if MPI.Is_finalized():
            return
        for w in (self.params_win, self.win):
            if w is not None:
                w.Unlock_all()
                w.Free()
        for c in (self.node, self.leaders):
            if c is not None:
                c.Free()
        self.win = self.params_win = self.params = self.buf = self.node = self.leaders = None
        self.slots = []

    def holds(self, buf):
        return buf is self.buf

    def share(self, params):
        """One copy of the parameters for the whole node (a window held by node rank 0, filled
        from its params): every rank of the node then reads, and steps its part of, the same memory.
        One model at a time: a second call replaces the first copy."""
        if self.params_win is not None:
            self.params_win.Unlock_all()
            self.params_win.Free()
        win = MPI.Win.Allocate_shared(params.nbytes if self.rank == 0 else 0, params.dtype.itemsize, comm=self.node)
        win.Lock_all(MPI.MODE_NOCHECK)
        mem, _ = win.Shared_query(0)
        shared = check_buffer(np.frombuffer(mem, dtype=params.dtype, count=params.size), params.dtype,
                              params.size, "shared parameters")
        if self.rank == 0:
            shared[...] = params
        self.params_win, self.params = win, shared
        self.fence_params()
        return shared

    def fence_params(self):
        """Every rank's writes to the shared parameters so far are seen by every rank."""
        self._fence(self.params_win)

    def part(self, start, n):
        """(lo, hi): this rank's part of elements start:n."""
        counts = split_counts(n - start, self.size)
        lo = start + int(counts[:self.rank].sum())
        return lo, lo + int(counts[self.rank])

    def sum_own_(self, start=0):
        """Shared parameters: sum this rank's part of elements start: over every slot, into this
        rank's slot only (no rank reads it but this one). Returns the part (lo, hi)."""
        lo, hi = self.part(start, self.n)
        self._fence()                       # every rank's gradient is written
        mine = self.buf[lo:hi]
        for p in range(self.size):
            if p != self.rank:
                mine += self.slots[p][lo:hi]
        return lo, hi

    def _fence(self, win=None):
        win = win if win is not None else self.win
        win.Sync()
        self.node.Barrier()
        win.Sync()

    def allreduce_sum_(self, start=0):
        """Sum elements start: of every rank's slot (on every node) into every slot."""
        lo, hi = self.part(start, self.n)
        one_node = self.nodes == 1
        if one_node and self.size == 1:
            return
        self._fence()                       # every rank's gradient is written
        if self.size > 1:
            acc = self._acc[:hi - lo]
            np.add(self.slots[0][lo:hi], self.slots[1][lo:hi], out=acc)
            for p in range(2, self.size):
                acc += self.slots[p][lo:hi]
            for p in range(self.size) if one_node else (0,):
                self.slots[p][lo:hi] = acc
        if one_node:
            self._fence()                   # every part of the sum is written everywhere
            return
        self._fence()                       # the node's sum is in the first rank's slot
        if self.leaders is not None:
            body = self.slots[0][start:]
            check_buffer(body, body.dtype, self.n - start, "node gradient sum")
            self.leaders.Allreduce(MPI.IN_PLACE, body, op=MPI.SUM)
        self._fence()                       # the job's sum is in the first rank's slot
        for p in range(1, self.size):
            self.slots[p][lo:hi] = self.slots[0][lo:hi]
        self._fence()


class OverlappedReduce:
    """The dense gradient Allreduce of one step as non-blocking Iallreduce buckets, started while
    back-propagation goes on. The buffer is W0, b0, W1, b1, ..., loss slot, and backward finishes
    the last layer first, so what is final is always a suffix and a bucket is a contiguous slice.

    The buckets are planned from the layer offsets alone (layers merged from the top until a bucket
    holds >= bucket_elems), never from timing, so every rank posts the same collectives in the
    same order; a rank with no rows posts them all in finish(). Layer 0 is the last bucket, sent in
    finish() after the sparse-row exchange (whose density verdict decides where it starts).
    MPICH progresses a non-blocking collective only inside MPI calls: ready() polls the posted ones
    (Testall) between layers."""

    def __init__(self, communicator, buf, layer_starts, bucket_elems):
        check_buffer(buf, buf.dtype, buf.size, "gradient buffer")
        self.c, self.buf = communicator, buf
        starts = sorted((int(s) for s in layer_starts if s > 0), reverse=True)
        self.buckets, end = [], buf.size
        for s in starts:
            if end - s >= bucket_elems:
                self.buckets.append((s, end))
                end = s
        if starts and end > starts[-1]:
            self.buckets.append((starts[-1], end))
            end = starts[-1]
        self.first_end = end            # layer 0's bucket: [0 or the dense part's start, first_end)
        self.next, self.requests, self.keep = 0, [], []

    def _post(self, lo, hi):
        seg = self.buf[lo:hi]
        self.keep.append(seg)           # alive until the request completes
        self.requests.append(self.c.comm.Iallreduce(MPI.IN_PLACE, seg, op=MPI.SUM))

    def ready(self, start):
        """buf[start:] is final: post every planned bucket inside it, poll the ones in flight."""
        while self.next < len(self.buckets) and self.buckets[self.next][0] >= start:
            self._post(*self.buckets[self.next])
            self.next += 1
        if self.requests:
            MPI.Request.Testall(self.requests)

    def finish(self, sparse=None):
        """Post what is left, exchange the sparse rows, reduce layer 0, wait for everything.
        Returns what reduce_gradients_ returns (the reduced SparseRows, or None)."""
        self.ready(0)       # the planned buckets (all of them on a rank with no rows)
        lo, reduced = 0, None
        if sparse is not None:
            reduced = self.c.exchange_rows(sparse)
            if reduced is None:
                _densify_(self.buf, sparse)
            else:
                lo = sparse.n_rows * sparse.width
        if self.first_end > lo:
            self._post(lo, self.first_end)
        MPI.Request.Waitall(self.requests)
        self.requests, self.keep = [], []
        return reduced


FP16_MAX_EXP, BF16_MAX_EXP = 0x7C00, 0x7F80     # exponent bits all ones: Inf or NaN


class Compressed16:
    """The dense gradient Allreduce in 16-bit words (fp16, or bf16 emulated as the top half of a
    float32 rounded to nearest even, since numpy has no bfloat16).

    The gradient arrives already scaled by 1/N, so a sum of P shares stays in range. Each rank
    sends [16-bit gradient | loss slot in its own dtype, as raw words | overflow flag]; the flag is
    1 when the cast produced an Inf or NaN. The exchange is one Allgather, and every rank adds the
    P rows in float32, in rank order: the same float32 accumulation and bitwise the same result
    on every rank, so the non-finite verdict needs no message. An overflow anywhere writes NaN
    into the loss slot, so Trainer.finite rejects the step on every rank.
    Cost: each rank receives (P-1) x 2 bytes per gradient element, against about 2 (P-1)/P x 4
    for a ring Allreduce in float32: cheaper below 4 ranks, equal at 4, dearer beyond (MPICH can
    sum MPIX_C_FLOAT16 natively, but rounds every partial sum to fp16 on the way)."""

    def __init__(self, communicator, kind):
        if kind not in ("fp16", "bf16"):
            raise MpinnError("--compress must be fp16 or bf16, not %r" % kind, collective=True)
        self.c, self.kind = communicator, kind
        self.send = self.recv = None
        self.overflows = 0          # steps where some rank's cast overflowed

    def encode(self, body, words):
        """body (float32/float64) as 16-bit words into words; True when the cast overflowed."""
        if self.kind == "fp16":
            with np.errstate(over="ignore"):     # an overflow is reported by the flag, not a warning
                np.copyto(words.view(np.float16), body, casting="unsafe")
            exp = FP16_MAX_EXP
        else:
            with np.errstate(over="ignore"):
                u = np.ascontiguousarray(body, dtype=np.float32).view(np.uint32)
            # round to nearest even: add 0x7FFF plus the lowest kept bit, keep the top 16 bits
            r = (u >> 16) & 1
            r += 0x7FFF
            r += u
            np.right_shift(r, 16, out=r)
            np.copyto(words, r, casting="unsafe")
            nan = np.isnan(body)      # the rounding add can carry a NaN's payload into the sign
            if nan.any():
                words[nan] = 0x7FC0
            exp = BF16_MAX_EXP
        return bool(np.any((words & exp) == exp))

    def decode_sum(self, rows, out):
        """out[...] = the float32 sum, in rank order, of the 16-bit rows (P, n)."""
        if self.kind == "fp16":
            acc = rows[0].view(np.float16).astype(np.float32)
            for r in range(1, rows.shape[0]):
                acc += rows[r].view(np.float16)
        else:
            acc = (rows[0].astype(np.uint32) << 16).view(np.float32)
            for r in range(1, rows.shape[0]):
                acc += (rows[r].astype(np.uint32) << 16).view(np.float32)
        out[...] = acc

    def allreduce_sum_(self, buf):
        """buf: a gradient buffer's dense part, its last element the loss slot; summed in place."""
        c = self.c
        check_buffer(buf, buf.dtype, buf.size, "gradient buffer")
        n, tail = buf.size - 1, buf.dtype.itemsize // 2     # words of the loss slot
        words = n + tail + 1
        if self.send is None or self.send.size != words:
            self.send = np.empty(words, dtype=np.uint16)
            self.recv = np.empty((c.size, words), dtype=np.uint16)
        send, recv = self.send, self.recv
        bad = self.encode(buf[:n], send[:n])
        send[n:n + tail] = buf[n:].view(np.uint16)
        send[-1] = 1 if bad else 0
        check_buffer(send, np.uint16, words, "compressed gradient")
        check_buffer(recv, np.uint16, c.size * words, "gathered compressed gradients")
        c.comm.Allgather(send, recv)
        self.decode_sum(recv[:, :n], buf[:n])
        loss = buf.dtype.type(0)
        for r in range(c.size):
            loss += recv[r, n:n + tail].copy().view(buf.dtype)[0]
        buf[n] = loss
        if recv[:, -1].any():
            self.overflows += 1
            buf[n] = np.nan
        return buf


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
        assert sparse is None, "the gather strategy moves dense gradients"
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


class NullCommunicator(Communicator):
    """No communication at all: each rank steps on its own gradient (to measure compute alone)."""

    name = "null"

    def reduce_gradients_(self, grad_buffer, sparse=None):
        return sparse


class TowerCommunicator(NullCommunicator):
    """Tower mode: every rank trains its own replica, so no gradient travels; but the ranks still
    agree on skipping a step, so that they stay in lockstep and stop together."""

    name = "tower"

    def agree_(self, ok):
        flag = np.array([0 if ok else 1], dtype=np.int64)
        return not self.Allreduce_sum_(flag, "step verdicts")[0]

    def Gather_(self, send, root=0, what="Gather"):
        """Every rank's equal-sized buffer stacked on root as (size, n) (None elsewhere)."""
        check_buffer(send, send.dtype, send.size, what + " send buffer")
        recv = np.empty((self.size, send.size), dtype=send.dtype) if self.rank == root else None
        self.comm.Gather(send, recv, root=root)
        return recv


def create_communicator(name="allreduce", comm=None, compress=None, device="cpu", transport="auto", **kw):
    """The communicator for a strategy; with device "auto"/"gpu" (or a GPU --comm), see
    create_device_communicator. The result's .backend is the array backend its buffers live on."""
    if compress and name != "allreduce":
        raise MpinnError("--compress applies to --reduce allreduce, not %s" % name, collective=True)
    strategies = {"allreduce": AllreduceCommunicator, "gather": GatherCommunicator,
                  "null": NullCommunicator, "tower": TowerCommunicator}
    if name not in strategies:
        raise MpinnError("--reduce must be one of %s, not %r" % ("|".join(strategies), name), collective=True)
    if transport == "shm" and name != "allreduce":
        raise MpinnError("--comm shm sums gradients for --reduce allreduce (data parallelism); not with %s"
                         % ("--parallel tower" if name == "tower" else "--reduce " + name), collective=True)
    cpu_transport = transport in ("auto", "shm", "mpi")
    if device != "cpu" or not cpu_transport:
        if transport in ("shm", "mpi"):
            raise MpinnError("--comm %s is for --device cpu" % transport, collective=True)
        return create_device_communicator(name, comm, device, transport, compress, **kw)
    if compress:
        kw["compress"] = compress
    c = strategies[name](comm, **kw)
    from mpinn.backend import get_backend
    c.backend, c.device_note = get_backend("numpy"), "cpu (numpy)"
    if name == "allreduce":
        how = c.choose_transport(transport)
        if how == "mpi":
            c.transport_note = "MPI_Allreduce"
        elif c.shared.nodes == 1:
            c.transport_note = "summed in shared memory (every rank on one node; --comm mpi for MPI_Allreduce)"
        else:
            c.transport_note = ("summed in shared memory on each node, then MPI_Allreduce among the %d nodes' "
                                "first ranks (--comm mpi for one flat MPI_Allreduce)" % c.shared.nodes)
    return c


def say_error(line):
    """One whole line to stderr in a single write: the process may be aborted right after, and a
    line split over two writes can lose its end on the way through the launcher."""
    sys.stderr.flush()
    os.write(2, (line + "\n").encode("utf-8", "replace"))


# ---------------------------------------------------------------- the step deadline
DEADLINE_EXIT = 3


class Watchdog:
    """Turns a hang into an abort: arm(what) starts a deadline, disarm() ends it. A daemon thread
    checks it; past the deadline it prints which rank was waiting on what and calls
    COMM_WORLD.Abort, which (unlike a plain exit) also ends the launcher and the other ranks.
    mpi4py releases the GIL inside blocking MPI calls, so the thread runs while the rank waits."""

    def __init__(self, seconds, poll=0.1):
        self.seconds = float(seconds)
        self.poll = min(poll, self.seconds / 4)
        self._deadline, self._what, self._started = None, None, 0.0
        self._stop = threading.Event()
        self._thread = None

    def arm(self, what, seconds=None):
        self._what = what
        self._started = time.monotonic()
        self._deadline = self._started + (self.seconds if seconds is None else float(seconds))
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="mpinn-watchdog", daemon=True)
            self._thread.start()

    def disarm(self):
        self._deadline = None

    def stop(self):
        self._deadline = None
        self._stop.set()

    def _watch(self):
        while not self._stop.wait(self.poll):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                rank, size = world_rank_size()
                say_error("mpinn: error on rank %d of %d: %s did not finish within %.0f s; aborting the job "
                          "(a rank is stuck, crashed or unreachable; if steps are legitimately this slow, "
                          "raise --step-timeout)" % (rank, size, self._what, deadline - self._started))
                time.sleep(0.2)     # let the launcher forward the line before the abort tears it down
                MPI.COMM_WORLD.Abort(DEADLINE_EXIT)


class NoWatchdog:
    """--step-timeout 0: no deadline."""

    def arm(self, what, seconds=None):
        pass

    def disarm(self):
        pass

    def stop(self):
        pass


# ---------------------------------------------------------------- ending a job
def world_rank_size():
    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def fail(message, code=2, collective=False):
    """End the job with one line on stderr. A collective error exits every rank cleanly (rank 0
    prints); an error on one rank prints with its rank and aborts the whole job, so no rank hangs."""
    rank, size = world_rank_size()
    if collective or size == 1:
        if rank == 0:
            say_error("mpinn: error: %s" % message)
        sys.exit(code)
    say_error("mpinn: error on rank %d of %d: %s" % (rank, size, message))
    MPI.COMM_WORLD.Abort(code)


def run_guarded(fn, *args):
    """Call fn; turn MpinnError into a clean exit 2 and any other exception into an abort of the
    whole job that names the rank and the exception."""
    try:
        return fn(*args)
    except MpinnError as e:
        fail(str(e), e.code, e.collective)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - any failure must end every rank
        rank, size = world_rank_size()
        tb = traceback.format_exc()
        say_error(tb.rstrip("\n"))
        if size == 1:
            say_error("mpinn: error: %s: %s" % (type(e).__name__, e))
            sys.exit(1)
        say_error("mpinn: rank %d of %d failed with %s: %s; aborting the job"
                  % (rank, size, type(e).__name__, e))
        MPI.COMM_WORLD.Abort(1)


# ---------------------------------------------------------------- about the job (mpinn.doctor)
def mpi_library_version():
    """The MPI library's own first version line, e.g. 'MPICH Version: 5.0.2' or 'Open MPI v5.0.11, ...'."""
    return MPI.Get_library_version().strip().splitlines()[0].strip()


def mpi4py_version():
    import mpi4py
    return mpi4py.__version__


def processor_name():
    """The host name MPI itself reports for this rank."""
    return MPI.Get_processor_name()


def local_rank_size(communicator):
    """(rank, size) among the ranks of `communicator` that share this rank's machine: MPI's own
    shared-memory split, right under any launcher (no launcher-specific environment variables)."""
    local = communicator.comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_rank(), local.Get_size()
    finally:
        local.Free()


# ================================================================ GPU buffers (--device gpu)
# Everything below is about gradients that live on a GPU. cupy is imported lazily (through
# mpinn.backend), NCCL (cupy.cuda.nccl) only here. A CPU run never executes any of it.

GPU_TRANSPORTS = ("auto", "nccl", "cuda-aware", "staged")


def check_device_buffer(buf, dtype, length, what="buffer"):
    """check_buffer's rules for an object exporting __cuda_array_interface__ (shape, typestr,
    strides): C-contiguous, the expected dtype, the expected number of elements."""
    cai = buf.__cuda_array_interface__
    shape, got = tuple(int(n) for n in cai["shape"]), np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:      # None means C-contiguous; otherwise every dim longer than 1 must match
        step = got.itemsize
        for n, s in reversed(list(zip(shape, strides))):
            if n > 1 and s != step:
                raise ValueError("%s: GPU array is not C-contiguous (shape %s, strides %s); MPI would "
                                 "read it in the wrong element order" % (what, shape, tuple(strides)))
            step *= n
    if got != np.dtype(dtype):
        raise ValueError("%s: dtype %s, expected %s" % (what, got, np.dtype(dtype)))
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size != length:
        raise ValueError("%s: %d elements, expected %d" % (what, size, length))
    return buf


def cuda_aware_mpi():
    """(is the MPI library CUDA-aware at run time?, how that was found). MPICH and Open MPI both
    export MPIX_Query_cuda_support (MPICH answers 0 unless built with GPU support and run with
    MPIR_CVAR_ENABLE_GPU on); mpi4py may wrap it, else it is looked up in the loaded library."""
    if os.environ.get("MPIR_CVAR_ENABLE_GPU", "").strip() == "0":
        return False, "MPIR_CVAR_ENABLE_GPU=0"
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        try:
            return bool(query()), "MPI.Query_cuda_support()"
        except Exception:  # noqa: BLE001 - an unimplemented extension: try the symbol
            pass
    try:
        import ctypes
        fn = getattr(ctypes.CDLL(MPI.__file__), "MPIX_Query_cuda_support", None)
    except OSError:
        fn = None
    if fn is None:
        return False, "the MPI library has no MPIX_Query_cuda_support"
    fn.restype, fn.argtypes = ctypes.c_int, []
    return bool(fn()), "MPIX_Query_cuda_support()"


def choose_transport(requested, cuda_aware, how=""):
    """How GPU gradients reach the other ranks: nccl only when asked for; auto takes CUDA-aware
    MPI when every rank's library says it is, else stages through pinned host buffers."""
    if requested not in GPU_TRANSPORTS:
        raise MpinnError("--comm must be one of %s, not %r" % ("|".join(GPU_TRANSPORTS), requested), collective=True)
    if requested == "auto":
        return "cuda-aware" if cuda_aware else "staged"
    if requested == "cuda-aware" and not cuda_aware:
        raise MpinnError("--comm cuda-aware: this MPI library is not CUDA-aware (%s); use --comm staged "
                         "or --comm nccl" % (how or "not detected"), collective=True)
    return requested


class DeviceAllreduceCommunicator(AllreduceCommunicator):
    """--reduce allreduce with parameters and gradients on this rank's GPU. A GPU buffer reaches
    the other ranks by one of three transports: nccl (NCCL collectives on the compute stream, the
    unique id broadcast over MPI), cuda-aware (the cupy array handed to mpi4py, which reads
    its __cuda_array_interface__), staged (device -> pinned host buffer, MPI on the host buffer,
    host -> device). Host buffers (verdicts, counts, restored optimizer state) take the plain MPI
    path. The sparse-row exchange always goes through the host (its coalescing is host code)."""

    def __init__(self, comm=None, backend=None, transport="staged", **kw):
        super().__init__(comm, **kw)
        self.backend, self.transport = backend, transport
        self._pinned = {}
        self.nccl = self._nccl_types = None
        if transport == "nccl":
            self._open_nccl()

    def _open_nccl(self):
        error = None
        try:
            from cupy.cuda import nccl
        except Exception as e:  # noqa: BLE001 - cupy built without NCCL, or no libnccl
            error = "%s: %s" % (type(e).__name__, e)
        bad = [(r, e) for r, e in enumerate(self.allgather_obj(error)) if e]
        if bad:
            raise MpinnError("--comm nccl: NCCL is not available on rank %d (%s); use --comm staged"
                             % bad[0], collective=True)
        uid = self.bcast_obj(nccl.get_unique_id() if self.rank == 0 else None)
        self.nccl = nccl.NcclCommunicator(self.size, uid, self.rank)
        self._nccl_types = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64,
                            np.dtype(np.int32): nccl.NCCL_INT32, np.dtype(np.int64): nccl.NCCL_INT64}
        self._nccl_sum = nccl.NCCL_SUM

    def _staging(self, what, buf):
        """A pinned host buffer shaped like buf, kept per purpose and reused."""
        host = self._pinned.get(what)
        if host is None or host.size != buf.size or host.dtype != buf.dtype:
            host = self._pinned[what] = self.backend.pinned_empty(buf.size, buf.dtype)
        return host

    def _nccl_args(self, buf, what):
        """(pointer, count, NCCL type, stream): NCCL runs on the compute stream, in order with the
        kernels that wrote buf, so it needs the checks but no host synchronisation."""
        check_device_buffer(buf, buf.dtype, buf.size, what)
        if buf.dtype not in self._nccl_types:
            raise ValueError("%s: dtype %s has no NCCL type here" % (what, buf.dtype))
        return buf.data.ptr, buf.size, self._nccl_types[buf.dtype], self.backend.current_stream().ptr

    def Bcast_(self, buf, root=0, what="Bcast buffer"):
        if not self.backend.is_device_array(buf):
            return super().Bcast_(buf, root, what)
        if self.nccl is not None:
            ptr, n, kind, stream = self._nccl_args(buf, what)
            self.nccl.bcast(ptr, n, kind, root, stream)
            return buf
        check_buffer(buf, buf.dtype, buf.size, what)     # synchronises the GPU before MPI reads buf
        if self.transport == "cuda-aware":
            self.comm.Bcast(buf, root=root)
            return buf
        host = self._staging(what, buf)
        if self.rank == root:
            self.backend.copy_to_host_(buf, host)
        self.comm.Bcast(host, root=root)
        self.backend.copy_to_device_(host, buf)
        return buf

    def Allreduce_sum_(self, buf, what="Allreduce buffer"):
        if not self.backend.is_device_array(buf):
            return super().Allreduce_sum_(buf, what)
        if self.nccl is not None:
            ptr, n, kind, stream = self._nccl_args(buf, what)
            self.nccl.allReduce(ptr, ptr, n, kind, self._nccl_sum, stream)
            return buf
        check_buffer(buf, buf.dtype, buf.size, what)     # synchronises the GPU before MPI reads buf
        if self.transport == "cuda-aware":
            self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            return buf
        host = self._staging(what, buf)
        self.backend.copy_to_host_(buf, host)
        self.comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
        self.backend.copy_to_device_(host, buf)
        return buf

    def exchange_rows(self, sparse):
        """The host exchange on host copies of the rows, coalesced there, the result moved back."""
        import dataclasses
        if self.size == 1 or not self.backend.is_device_array(sparse.rows):
            return super().exchange_rows(sparse)
        to_host = self.backend.asnumpy
        out = super().exchange_rows(dataclasses.replace(sparse, ids=to_host(sparse.ids),
                                                        rows=to_host(sparse.rows)))
        if out is None:
            return None
        if hasattr(out, "coalesced"):        # segmented rows: coalesce on the host, where that code is
            out = out.coalesced()
        xp = self.backend.xp
        return dataclasses.replace(out, ids=xp.asarray(out.ids), rows=xp.asarray(out.rows))


class _OnComm:
    """What local_rank_size needs: an object with the MPI communicator as .comm."""

    def __init__(self, comm):
        self.comm = comm


def create_device_communicator(name, comm, device, transport, compress=None, **kw):
    """--device auto|gpu (or an explicit --comm): pick the backend on every rank, binding each rank
    to GPU (local rank mod device count) before anything is allocated there, agree on it across
    ranks, then build the communicator. Returns it with .backend and .device_note set."""
    from mpinn.backend import get_backend, select_backend
    raw = comm if comm is not None else MPI.COMM_WORLD
    local_rank, _ = local_rank_size(_OnComm(raw))
    try:
        backend, note = select_backend(device, local_rank)
    except Exception as e:  # noqa: BLE001 - e.g. binding the device failed; reported collectively
        backend, note = None, "%s: %s" % (type(e).__name__, e)
    verdicts = raw.allgather(None if backend is None else backend.name)
    notes = raw.allgather(note)
    missing = [r for r, v in enumerate(verdicts) if v is None]
    if missing:
        raise MpinnError("--device gpu: no usable GPU on rank %d: %s" % (missing[0], notes[missing[0]]),
                         collective=True)
    if backend.name != "numpy" and "numpy" in verdicts:       # auto, and some rank has no GPU
        r = verdicts.index("numpy")
        backend, note = get_backend("numpy"), "cpu (numpy): --device auto, but rank %d found no GPU (%s)" % (
            r, notes[r])
    if backend.name != "numpy" and (name != "allreduce" or compress):
        why = "--reduce %s" % name if name != "allreduce" else "--compress"
        if device == "gpu":
            raise MpinnError("--device gpu supports --reduce allreduce without --compress; %s runs on "
                             "--device cpu" % why, collective=True)
        backend, note = get_backend("numpy"), "cpu (numpy): --device auto, and %s runs on the CPU" % why
    if backend.name == "numpy":
        if transport != "auto":
            raise MpinnError("--comm %s moves GPU buffers, but this run computes on the CPU (%s)"
                             % (transport, note), collective=True)
        c = create_communicator(name, comm, compress, **kw)
        c.device_note = note
        return c
    aware = raw.allgather(cuda_aware_mpi())
    how = "; ".join(sorted({h for _, h in aware}))
    chosen = choose_transport(transport, all(a for a, _ in aware), how)
    c = DeviceAllreduceCommunicator(comm, backend, chosen, **kw)
    c.device_note = "%s; gradients by %s%s" % (
        backend.describe() + ", " + note, chosen,
        {"nccl": " (NCCL)", "cuda-aware": " (CUDA-aware MPI: %s)" % how,
         "staged": " (through pinned host buffers; CUDA-aware MPI not found: %s)" % how}[chosen])
    return c
