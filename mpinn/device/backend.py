"""Leaf module: array backends. The only code that imports cupy / cupyx (mpinn.device.kernels is given it)."""
import dataclasses
import socket

import numpy
import scipy.sparse

from mpinn.core.errors import MpinnError
from mpinn.device.kernels import kernel


class Backend:
    """`xp` (numpy-like) and `sparse` (scipy.sparse-like) for one device. This one is the host's:
    every transfer is the identity, so the CPU path does exactly the arithmetic it did before."""

    device = None            # the GPU this process computes on (None: the host)
    syncs = 0                # host waits on the device so far (mpinn.training.timeline counts them per step)
    fused = False            # has the fused steps (head, bias_act_, act_grad_, the first layer's): a GPU's kernels

    def __init__(self, name, xp, sparse):
        self.name, self.xp, self.sparse = name, xp, sparse

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def asnumpy(self, a):
        return to_host(a)

    def is_device_array(self, a):
        return False

    def batch_to_device(self, batch):
        """A Batch (host arrays, scipy CSR) as this backend's arrays; the same object when it is
        already there."""
        return batch

    def synchronize(self):
        """Wait until the device has finished the work queued so far (nothing to wait for here)."""

    # ---------------------------------------------------------------- the hashed block's products
    def sparse_matmul(self, X, W):
        """X @ W: X a batch's CSR rows, W the dense block they select rows of."""
        return X @ W

    def sparse_t_matmul(self, X, D):
        """X^T @ D: the gradient rows of the block X selects, D the rows' deltas."""
        return X.T @ D

    def compact(self, X):
        """(the sorted unique columns X touches as int64, X with its columns renumbered 0..k-1 over them)."""
        return compact_csr(self.xp, self.sparse, X)

    def compact_t_matmul(self, C, D):
        """C^T @ D for compact's C: the gradient rows of the columns a batch touches, C-contiguous."""
        return self.xp.ascontiguousarray(self.sparse_t_matmul(C, D))

    def describe(self):
        return "cpu (numpy)"

    def graph_ops(self):
        """The step plan's operations on this device (mpinn.training.graph_plan): a GPU's kernels."""
        raise NotImplementedError("the step plan runs on a GPU")

    def __repr__(self):
        return "Backend(%s)" % self.name


class CupyBackend(Backend):
    """cupy on the GPU this process was bound to (see select_backend). The hashed rows live there as DeviceCSR
    (the arrays alone: cupyx's csr_matrix checks its arrays with host reads when it is made), in the order they
    came: the products sum a row's duplicate ids as scipy does, one after the other. The model's elementwise
    steps are one kernel each (mpinn.device.kernels). Besides the array module, the staging primitives
    mpinn.training.staging and the communicator use: pinned host memory, streams, events, asynchronous copies."""

    fused = True

    def __init__(self, cupy, cupyx_sparse, device):
        super().__init__("cupy", cupy, cupyx_sparse)
        self.cupy, self.device = cupy, int(device)
        self.syncs = 0
        self._none = {}
        self._graph_ops = None

    def is_device_array(self, a):
        return isinstance(a, self.cupy.ndarray)

    def batch_to_device(self, batch):
        """The batch on this GPU (each part that is still on the host is copied; labels may be None,
        as when predicting on unlabelled rows)."""
        on_host = [a for a in (batch.Xd, batch.y) if a is not None and not self.is_device_array(a)]
        Xs = batch.Xs
        if not on_host and (Xs is None or not scipy.sparse.issparse(Xs)):
            return batch
        cp = self.cupy
        if Xs is not None and scipy.sparse.issparse(Xs):
            Xs = Xs.tocsr()
            Xs = DeviceCSR(cp.asarray(Xs.data), cp.asarray(Xs.indices), cp.asarray(Xs.indptr), Xs.shape)
        return dataclasses.replace(
            batch, Xs=Xs, Xd=cp.asarray(batch.Xd) if batch.Xd is not None else None,
            y=cp.asarray(batch.y) if batch.y is not None else None)

    def synchronize(self):
        self.syncs += 1
        self.cupy.cuda.get_current_stream().synchronize()

    def asnumpy(self, a):
        if self.is_device_array(a):
            self.syncs += 1
        return to_host(a)

    # ---------------------------------------------------------------- the hashed block's products (one kernel)
    def sparse_matmul(self, X, W, base=None, bias=None):
        """X @ W by the rows_times kernel: the same bits every run, duplicates summed as they come, no sort; then
        + base (an array shaped like the product) and + bias (a row), as the numpy first layer adds them."""
        return self.rows_times(X.indptr, X.indices, X.data, W, X.shape[0], base, bias)

    def sparse_t_matmul(self, X, D):
        """X^T @ D: X^T made by transpose_csr (a sort on a unique key), then rows_times. cuSPARSE's SpMM is not
        used: with op(A) transposed it sums with atomics ("may produce slightly different results during
        different runs", its documentation), and on an H200 so did csr2csc then SpMM on a batch of Zipf ids:
        20 runs gave 20 different results, and a resumed run missed the uninterrupted one's last bits."""
        indptr, rows, data = transpose_csr(self.cupy, X)
        return self.rows_times(indptr, rows, data, D, X.shape[1])

    def compact_t_matmul(self, C, D):
        """C^T @ D for compact's C (every column present): sparse_t_matmul's order and bits, its transpose made in
        two kernels and one sort."""
        cp = self.cupy
        n, k = C.shape
        nnz = int(C.data.shape[0])
        key, row = cp.empty(nnz, cp.int64), cp.empty(nnz, cp.int64)
        indptr, rows_t, data_t = cp.empty(k + 1, cp.int64), cp.empty(nnz, cp.int64), cp.empty_like(C.data)
        if nnz:
            kernel(cp, "transpose_key")(C.indptr, C.indices, nnz, key, row, size=n)
            order = cp.argsort(key)
            kernel(cp, "transpose_gather")(order, C.indices, row, C.data, nnz, k, indptr, rows_t, data_t, size=nnz)
        else:
            indptr.fill(0)
        return self.rows_times(indptr, rows_t, data_t, D, k)

    def compact(self, X):
        """compact_csr's result by marks over the columns (one host read: how many) instead of a sort."""
        cp = self.cupy
        mark = cp.zeros(X.shape[1], cp.int32)
        kernel(cp, "mark")(X.indices, mark)
        upto = cp.cumsum(mark, dtype=cp.int32)
        k = int(upto[-1]) if upto.size else 0
        self.syncs += 1
        ids = cp.empty(k, cp.int64)
        kernel(cp, "marked_ids")(mark, upto, ids)
        renumbered = cp.empty_like(X.indices)
        kernel(cp, "renumber")(X.indices, upto, renumbered)
        return ids, DeviceCSR(X.data, renumbered, X.indptr, (X.shape[0], k))

    def rows_times(self, indptr, indices, data, B, n, base=None, bias=None):
        """(n, B's width) = the CSR rows (indptr, indices, data) times B (+ base, + bias): one thread an output
        element, summing its row's entries in order, each product and sum rounded on its own (no fused
        multiply-add): scipy's order and rounding for X @ B and X.T @ B, so each run gives the same bits."""
        cp = self.cupy
        dtype = cp.result_type(data.dtype, B.dtype)
        B = cp.ascontiguousarray(B, dtype=dtype)
        out = cp.empty((n, B.shape[1] if B.ndim == 2 else 1), dtype=dtype)
        if out.size:
            none = self._none.get(dtype)
            if none is None:
                none = self._none[dtype] = cp.zeros(1, dtype)
            kernel(cp, "rows_times")(indptr, indices, data.astype(dtype, copy=False), B, out.shape[1],
                                     none if base is None else cp.ascontiguousarray(base, dtype=dtype),
                                     none if bias is None else cp.ascontiguousarray(bias, dtype=dtype),
                                     int(base is not None), int(bias is not None), out)
        return out if B.ndim == 2 else out[:, 0]

    # ---------------------------------------------------------------- the model's elementwise steps
    def head(self, loss, z, y, scale):
        """(the rows' loss sum as a device scalar, d loss / d z times scale) in one kernel, for a softmax head
        with class ids or a one-column sigmoid head; None for any other head (the model's numpy code then)."""
        cp = self.cupy
        n, k = z.shape
        if loss == "softmax" and y.ndim == 1 and y.dtype.kind in "iu" and k > 1:
            rows, d = cp.empty(n, z.dtype), cp.empty_like(z)
            kernel(cp, "softmax_head")(z, y, k, z.dtype.type(scale), rows, d)
            return rows.sum(), d
        if loss == "sigmoid" and k == 1 and y.size == n:
            rows, d = cp.empty(n, z.dtype), cp.empty(n, z.dtype)
            kernel(cp, "sigmoid_head")(z.reshape(n), y.reshape(n), z.dtype.type(scale), rows, d)
            return rows.sum(), d.reshape(n, 1)
        return None

    def bias_act_(self, z, b, activation):
        """z = activation(z + b) in place, one kernel."""
        kernel(self.cupy, "bias_" + activation)(b, z)
        return z

    def act_grad_(self, a, d, activation):
        """d *= activation'(z), written in a = activation(z), in place, one kernel."""
        kernel(self.cupy, "grad_" + activation)(a, d)
        return d

    def graph_ops(self):
        """The step plan's operations as this GPU's kernels (mpinn.device.cuda_ops), made once."""
        if self._graph_ops is None:
            from mpinn.device.cuda_ops import CudaOps  # start-up: its kernels compile only for a graph step
            self._graph_ops = CudaOps(self.cupy)
        return self._graph_ops

    def describe(self):
        props = self.cupy.cuda.runtime.getDeviceProperties(self.device)
        name = props.get("name", b"?")
        return "gpu %d (%s, cupy %s)" % (self.device, name.decode() if isinstance(name, bytes) else name,
                                          self.cupy.__version__)

    # ---------------------------------------------------------------- staging primitives
    def pinned_empty(self, n, dtype):
        """n elements of page-locked host memory as a numpy array (copies from it can be async)."""
        dtype = numpy.dtype(dtype)
        mem = self.cupy.cuda.alloc_pinned_memory(max(n, 1) * dtype.itemsize)
        return numpy.frombuffer(mem, dtype, n)

    def device_empty(self, n, dtype):
        return self.cupy.empty(n, dtype=dtype)

    def new_stream(self):
        # non_blocking: the copy stream does not serialise with the legacy default stream
        return self.cupy.cuda.Stream(non_blocking=True)

    def new_event(self, timing=False):
        """An event; timing=True: one whose elapsed time to another can be read (the timeline's phase boundaries)."""
        return self.cupy.cuda.Event(disable_timing=not timing)

    def event_done(self, event):
        """Has the device passed event? (cudaEventQuery: the host does not wait.)"""
        return event.done

    def host_wait(self, event):
        """The host waits until the device has passed event (counted only where it had not yet)."""
        if not event.done:
            self.syncs += 1
            event.synchronize()

    def elapsed_ms(self, start, end):
        """Milliseconds of device time between two timing events the device has passed."""
        return self.cupy.cuda.get_elapsed_time(start, end)

    def current_stream(self):
        return self.cupy.cuda.get_current_stream()

    def device_csr(self, data, indices, indptr, shape):
        """CSR rows over device arrays, as they came (nothing is checked or read: the copies may still be queued)."""
        return DeviceCSR(data, indices, indptr, shape)

    def copy_to_device_async(self, dst, src, stream):
        """dst (device, 1-d) <- src (pinned host, 1-d, same length), queued on stream."""
        dst.set(src, stream=stream)

    def copy_to_host_(self, src, out):
        """out (host) <- src (device), synchronous: the data is there when this returns."""
        self.syncs += 1
        src.get(out=out)
        return out

    def copy_to_device_(self, src, out):
        out.set(src)
        return out

    def nccl(self):
        """cupy's NCCL binding (cupy.cuda.nccl), for the nccl transport of mpinn.comm.gpu. Importing it
        does not fail when libnccl is missing: it sets nccl.available = False, refused here."""
        from cupy.cuda import nccl  # optional: cupy (the [gpu] extra)
        if not getattr(nccl, "available", True):
            raise RuntimeError("cupy.cuda.nccl.available is False (no NCCL library was found)")
        return nccl

    def device_key(self):
        """(host, PCI bus id) of this process's GPU: two ranks with the same key share one GPU."""
        return socket.gethostname(), self.cupy.cuda.Device(self.device).pci_bus_id


def transpose_csr(xp, X):
    """(indptr, indices, data) of X^T as CSR, each of its rows' entries in X's row order (the order in which
    scipy's X.T @ D adds them), made by sorting a unique key (column, position), so the same every run."""
    nnz = int(X.data.shape[0])
    pos = xp.arange(nnz, dtype=xp.int64)
    rows = xp.searchsorted(X.indptr.astype(xp.int64), pos, side="right") - 1
    cols = X.indices.astype(xp.int64)
    order = xp.argsort(cols * max(nnz, 1) + pos)
    indptr = xp.searchsorted(cols[order], xp.arange(X.shape[1] + 1, dtype=xp.int64), side="left")
    return indptr, rows[order], X.data[order]


class DeviceCSR:
    """A batch's hashed rows on a GPU: CSR arrays (data, indices, indptr) and the shape, as they came."""

    def __init__(self, data, indices, indptr, shape):
        self.data, self.indices, self.indptr, self.shape = data, indices, indptr, tuple(int(s) for s in shape)


def compact_csr(xp, sparse, Xs):
    """(the sorted unique columns Xs touches as int64, Xs with its columns renumbered 0..k-1 over them)."""
    ids, inverse = xp.unique(Xs.indices, return_inverse=True)
    compact = sparse.csr_matrix((Xs.data, inverse.ravel().astype(Xs.indices.dtype), Xs.indptr),
                                shape=(Xs.shape[0], int(ids.shape[0])))
    return ids.astype(numpy.int64), compact


def to_host(a):
    """A numpy array of a numpy or cupy array (a cupy array is copied, synchronously); anything
    else through numpy.asarray. Needs no cupy import: a cupy array carries its own .get()."""
    if type(a).__module__.split(".")[0] == "cupy":
        return a.get()
    return numpy.asarray(a)


def synchronize_array(a):
    """Make a GPU array's pending writes complete before a foreign reader (MPI) touches it: the
    stream named in its __cuda_array_interface__ (version 3), else cupy's current stream. An
    exporter that names no stream and is not cupy asks for no synchronisation (the CAI rule)."""
    cai = a.__cuda_array_interface__
    stream = cai.get("stream")
    if stream is None and type(a).__module__.split(".")[0] != "cupy":
        return
    import cupy  # optional: cupy (the [gpu] extra)
    if stream is None:
        cupy.cuda.get_current_stream().synchronize()
    else:
        cupy.cuda.runtime.streamSynchronize(stream)


def gpu_probe():
    """(number of visible GPUs, why not) without allocating anything on them."""
    try:
        import cupy  # optional: cupy (the [gpu] extra)
        import cupyx.scipy.sparse  # noqa: F401  (optional: cupy)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in ("cupy", "cupyx"):
            return 0, "cupy is not installed (pip install -e \".[gpu]\")"
        return 0, "cupy does not import: %s: %s" % (type(e).__name__, e)
    except Exception as e:  # noqa: BLE001 - e.g. a cupy wheel whose CUDA libraries are missing
        return 0, "cupy does not import: %s: %s" % (type(e).__name__, e)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy's CUDARuntimeError: no driver, no device
        return 0, "cupy finds no usable GPU (%s: %s)" % (type(e).__name__, e)
    if count < 1:
        return 0, "cupy finds no GPU"
    return count, None


def select_backend(device, local_rank, probe=gpu_probe):
    """(backend or None, note) for --device cpu|gpu|auto, binding this process to GPU
    local_rank mod count BEFORE anything is allocated on it (cupy allocates on the current
    device, and device 0 would otherwise host every rank's buffers). None when --device gpu
    cannot be had; the caller makes that a collective error."""
    if device == "cpu":
        return get_backend("numpy"), "cpu (numpy): --device cpu"
    if device not in ("gpu", "auto"):
        raise ValueError("unknown device %r" % device)
    count, why = probe()
    if not count:
        if device == "gpu":
            return None, why
        return get_backend("numpy"), "cpu (numpy): --device auto found no GPU: %s" % why
    import cupy  # optional: cupy (the [gpu] extra)
    import cupyx.scipy.sparse  # optional: cupy
    dev = int(local_rank) % count
    cupy.cuda.Device(dev).use()
    return CupyBackend(cupy, cupyx.scipy.sparse, dev), "gpu %d of %d (local rank %d mod %d)" % (
        dev, count, local_rank, count)


def get_backend(name="numpy"):
    if name in ("numpy", "cpu"):
        return Backend("numpy", numpy, scipy.sparse)
    if name in ("cupy", "gpu"):
        try:
            import cupy  # optional: cupy (the [gpu] extra)
            import cupyx.scipy.sparse  # optional: cupy
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise MpinnError("the GPU backend needs cupy (pip install -e \".[gpu]\"): %s" % e)
        return CupyBackend(cupy, cupyx.scipy.sparse, cupy.cuda.Device().id)
    raise ValueError("unknown backend %r" % name)
