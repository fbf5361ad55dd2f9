"""GPU buffers (--device gpu): the device allreduce communicator and its transports (nccl, cuda-aware, staged).
A CPU run never executes any of this; cupy and NCCL come through mpinn.backend."""
import ctypes
import dataclasses
import os

import numpy as np
from mpi4py import MPI

from mpinn.backend import get_backend, select_backend
from mpinn.comm.allreduce import AllreduceCommunicator
from mpinn.comm.buffers import check_buffer, check_device_buffer
from mpinn.comm.node import local_rank_size
from mpinn.config import MpinnError


GPU_TRANSPORTS = ("auto", "nccl", "cuda-aware", "staged")


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


def ranks_sharing_a_gpu(keys):
    """[((rank a, rank b), key)] for each rank b whose GPU key (host, PCI bus id) an earlier rank a has."""
    first, out = {}, []
    for r, key in enumerate(keys):
        key = tuple(key)
        if key in first:
            out.append(((first[key], r), key))
        else:
            first[key] = r
    return out


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
        error = nccl = None
        try:
            nccl = self.backend.nccl()
        except Exception as e:  # noqa: BLE001 - cupy built without NCCL, or no libnccl
            error = "%s: %s" % (type(e).__name__, e)
        bad = [(r, e) for r, e in enumerate(self.allgather_obj(error)) if e]
        if bad:
            raise MpinnError("--comm nccl: NCCL is not available on rank %d (%s); use --comm staged"
                             % bad[0], collective=True)
        shared = ranks_sharing_a_gpu(self.allgather_obj(self.backend.device_key()))
        if shared:
            (a, b), (host, bus) = shared[0]
            raise MpinnError("--comm nccl: ranks %d and %d share GPU %s on %s, and NCCL refuses two ranks of "
                             "one communicator on one GPU; run at most one rank per GPU, or use --comm staged"
                             % (a, b, bus, host), collective=True)
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


def choose_device(name, comm, device, transport, compress=None):
    """--device auto|gpu (or a GPU --comm): pick the backend on every rank, binding each rank to GPU
    (local rank mod device count) before anything is allocated there, and agree on it across ranks.
    Returns (backend, note); the numpy backend when this run computes on the CPU after all."""
    raw = comm if comm is not None else MPI.COMM_WORLD
    local_rank, _ = local_rank_size(raw)
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
    if backend.name == "numpy" and transport != "auto":
        raise MpinnError("--comm %s moves GPU buffers, but this run computes on the CPU (%s)"
                         % (transport, note), collective=True)
    return backend, note


def device_communicator(comm, backend, note, transport, **kw):
    """The communicator of a run whose gradients live on this rank's GPU (see choose_device), with
    the transport every rank's MPI library allows."""
    raw = comm if comm is not None else MPI.COMM_WORLD
    aware = raw.allgather(cuda_aware_mpi())
    how = "; ".join(sorted({h for _, h in aware}))
    chosen = choose_transport(transport, all(a for a, _ in aware), how)
    c = DeviceAllreduceCommunicator(comm, backend, chosen, **kw)
    c.device_note = "%s; gradients by %s%s" % (
        backend.describe() + ", " + note, chosen,
        {"nccl": " (NCCL)", "cuda-aware": " (CUDA-aware MPI: %s)" % how,
         "staged": " (through pinned host buffers; CUDA-aware MPI not found: %s)" % how}[chosen])
    return c
