"""GPU buffers (--device gpu): the device allreduce communicator and its transports (nccl, cuda-aware, staged).
A CPU run never executes any of this; cupy and NCCL come through mpinn.device.backend."""
import dataclasses

import numpy as np
from mpi4py import MPI

from mpinn.core.batch import SparseRows
from mpinn.comm.allreduce import AllreduceCommunicator
from mpinn.comm.buffers import check_buffer, check_device_buffer, displs


class DeviceAllreduceCommunicator(AllreduceCommunicator):
    """--reduce allreduce with parameters and gradients on this rank's GPU. A GPU buffer reaches
    the other ranks by one of three transports: nccl (NCCL collectives on the compute stream, the
    unique id broadcast over MPI), cuda-aware (the cupy array handed to mpi4py, which reads
    its __cuda_array_interface__), staged (device -> pinned host buffer, MPI on the host buffer,
    host -> device); none, for one rank: nothing travels, nothing waits. Host buffers (verdicts, counts,
    restored optimizer state) take the plain MPI path. The sparse-row exchange always goes through the host
    (its coalescing is host code), in one copy there."""

    def __init__(self, comm=None, backend=None, transport="staged", **kw):
        super().__init__(comm, **kw)
        if transport == "none" and self.size > 1:
            raise ValueError("transport none moves nothing, for one rank; this communicator has %d" % self.size)
        self.backend, self.transport = backend, transport
        self._pinned = {}
        self.nccl = self._nccl_types = None
        if transport == "nccl":
            self._open_nccl()

    def _open_nccl(self):
        """One NCCL communicator over the ranks (the plan checked that NCCL loads on every rank and that no two
        ranks share a GPU: mpinn.settings.rules' nccl rules); its unique id broadcast over MPI."""
        nccl = self.backend.nccl()
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
        if self.size == 1:          # one rank: the buffer is everyone's already (no copy to the host, no wait)
            return buf
        if self.nccl is not None:
            ptr, n, kind, stream = self._nccl_args(buf, what)
            self.nccl.bcast(ptr, n, kind, root, stream)
            return buf
        if self.transport == "cuda-aware":
            self.backend.synchronize()      # the host's wait, counted (Backend.syncs); check_buffer's is then free
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
        if self.size == 1:          # one rank: the sum is the buffer
            return buf
        if self.nccl is not None:
            ptr, n, kind, stream = self._nccl_args(buf, what)
            self.nccl.allReduce(ptr, ptr, n, kind, self._nccl_sum, stream)
            return buf
        if self.transport == "cuda-aware":
            self.backend.synchronize()      # the host's wait, counted (Backend.syncs); check_buffer's is then free
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
        """Communicator.exchange_rows (the same collectives in the same order) with the rows copied to the host only
        once the density rule says they travel as rows, in one copy; coalesced on the host, the result moved back."""
        if self.size == 1 or not self.backend.is_device_array(sparse.rows):
            return super().exchange_rows(sparse)
        counts = self.Allgatherv_(np.array([len(sparse)], dtype=np.int64), np.ones(self.size, dtype=np.int64),
                                  np.empty(self.size, dtype=np.int64), "sparse row counts")
        total = int(counts.sum())
        if total > self.sparse_threshold * sparse.n_rows:
            self.last_exchange = "dense"
            return None
        self.last_exchange = "sparse"
        mine_ids, mine = self._rows_to_host(sparse)
        ids = self.Allgatherv_(mine_ids, counts, np.empty(total, dtype=np.int64), "sparse row ids")
        rows = np.empty((total, sparse.width), dtype=mine.dtype)
        self.Allgatherv_(mine, counts * sparse.width, rows, "sparse rows")
        out = SparseRows(ids, rows, sparse.n_rows, displs(np.r_[counts, 0])).coalesced()
        xp = self.backend.xp
        return dataclasses.replace(out, ids=xp.asarray(out.ids), rows=xp.asarray(out.rows))

    def _rows_to_host(self, sparse):
        """(ids as int64, rows) on the host from ONE copy, so one wait on the device and not two: both viewed as
        bytes and laid end to end in a device buffer, split again on the host (the same bits)."""
        xp = self.backend.xp
        ids = xp.ascontiguousarray(sparse.ids, dtype=np.int64)
        rows = xp.ascontiguousarray(sparse.rows)
        packed = self.backend.asnumpy(xp.concatenate([ids.reshape(-1).view(np.uint8),
                                                      rows.reshape(-1).view(np.uint8)]))
        cut = ids.size * 8
        return packed[:cut].view(np.int64), packed[cut:].view(rows.dtype).reshape(rows.shape)
