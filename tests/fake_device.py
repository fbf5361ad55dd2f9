"""A host-memory stand-in for a GPU backend with a GPU's ordering rules: numpy arithmetic (results compare bit for
bit with the CPU), streams whose work runs only when something waits for it, events, a device clock, and a count
of the host's waits.

- A copy queued on a stream has not happened until an event recorded after it is synchronised by the host or
  waited on by another stream (which runs it first). Code that reads a staged buffer without waiting, refills a
  pinned buffer before its copy ran, or overwrites a device buffer that queued work still reads, sees wrong data.
- The compute stream runs what it is given at once (numpy computes on the host as it is called), unless the fake
  is made with lazy_compute=True: then "kernels" a test queues on it (FakeStream.enqueue) run as late as the
  events allow, the order a GPU is free to choose.
- The device clock: work queued with a duration (FakeBackend.launch: a kernel that takes time asynchronously)
  ends at max(when queued, the stream's previous work, the events it waits for) + its seconds; an event is
  reached when the work before it ends; the host, waiting for an event, sleeps until then.
- Every wait of the host on the device counts (FakeBackend.syncs): a stream's or an event's synchronize (an
  event already passed costs nothing), a copy to the host, asnumpy. Reading a value out of a device array
  directly (float(a.sum())) is not seen: those arrays are numpy's here."""
import time

import numpy as np
import scipy.sparse

from mpinn.device.backend import Backend


class FakeStream:
    def __init__(self, device, immediate=False):
        self.device, self.immediate = device, immediate
        self.ops, self.done = [], 0     # queued operations; how many have run
        self.busy_until = 0.0           # device clock (perf_counter seconds): when the work queued so far ends

    def enqueue(self, op, seconds=0.0):
        self.busy_until = max(self.busy_until, time.perf_counter()) + seconds
        self.ops.append(op)
        if self.immediate:
            self.run_until(len(self.ops))

    def run_until(self, mark):
        while self.done < mark:
            op = self.ops[self.done]
            self.done += 1          # first: an op that waits may come back here through another stream
            op()

    def wait_event(self, event):
        """The stream's later work starts after event (on the device: the host does not wait)."""
        if event.stream is None:
            return
        self.busy_until = max(self.busy_until, event.time)
        self.enqueue(lambda: event.stream.run_until(event.mark))

    def synchronize(self):
        self.device.no_host_wait("a stream's synchronize")
        self.device.syncs += 1
        self.run_until(len(self.ops))
        _sleep_until(self.busy_until)

    def __enter__(self):        # `with stream:` (cupy's: kernels go to it); the fake's kernels are FakeOps'
        return self

    def __exit__(self, *exc):
        return False


class FakeEvent:
    def __init__(self, timing=False):
        self.timing = timing
        self.stream, self.mark, self.time = None, 0, 0.0

    def record(self, stream):
        self.stream, self.mark = stream, len(stream.ops)
        self.time = max(stream.busy_until, time.perf_counter())

    @property
    def done(self):
        """Passed: its work has run (only a wait makes it run here) and the device clock has reached it."""
        return self.stream is None or (self.stream.done >= self.mark and time.perf_counter() >= self.time)

    def synchronize(self):
        if self.stream is not None:
            self.stream.run_until(self.mark)
            _sleep_until(self.time)


def _sleep_until(t):
    while time.perf_counter() < t:
        time.sleep(max(t - time.perf_counter(), 0.0))


class FakeBackend(Backend):
    """numpy arithmetic (so results can be compared bit for bit with the CPU), GPU-like plumbing."""

    device = "fake"

    def __init__(self, lazy_compute=False):
        super().__init__("fake", np, scipy.sparse)
        self.syncs = 0
        self.compute = FakeStream(self, immediate=not lazy_compute)
        self.copies = 0
        self.capturing = None       # the FakeGraph being captured: no host wait, host read or copy allowed
        self._ops = None

    def no_host_wait(self, what):
        """Raise when a graph is being captured: a captured step must not wait, read back or copy (CUDA's
        stream capture refuses them too: cudaErrorStreamCaptureUnsupported)."""
        if self.capturing is not None:
            raise CaptureError("%s during graph capture" % what)

    def graph_ops(self):
        """The step plan's operations on this device: FakeOps (numpy's, queued on the compute stream)."""
        if self._ops is None:
            self._ops = FakeOps(self)
        return self._ops

    def is_device_array(self, a):
        return isinstance(a, np.ndarray)

    def asnumpy(self, a):
        self.no_host_wait("a read back to the host")
        self.synchronize()          # a copy to the host waits for the work queued before it
        return np.array(a)

    def synchronize(self):
        self.compute.synchronize()

    def launch(self, seconds, op=lambda: None):
        """A kernel on the compute stream that takes `seconds` of device time; the host goes on at once."""
        self.compute.enqueue(op, seconds)

    def drain(self):
        """Everything queued on the compute stream (and what it waits for) run: the end of the test's "GPU"."""
        self.compute.run_until(len(self.compute.ops))

    def pinned_empty(self, n, dtype):
        return np.empty(n, dtype)

    def device_empty(self, n, dtype):
        dtype = np.dtype(dtype)
        # garbage that cannot pass for data: NaN, or an index far out of range
        return np.full(n, np.nan if dtype.kind == "f" else np.iinfo(dtype).max // 2, dtype)

    def new_stream(self):
        return FakeStream(self)

    def new_event(self, timing=False):
        return FakeEvent(timing)

    def event_done(self, event):
        return event.done

    def host_wait(self, event):
        self.no_host_wait("a wait on an event")
        if not event.done:
            self.syncs += 1
            event.synchronize()

    def elapsed_ms(self, start, end):
        assert start.timing and end.timing, "elapsed time between events made without timing"
        assert start.done and end.done, "elapsed time read before the device passed the events"
        return (end.time - start.time) * 1e3

    def current_stream(self):
        return self.compute

    def device_csr(self, data, indices, indptr, shape):
        # the arrays put in place unread: their copies may not have run yet (scipy's constructor reads indptr)
        X = scipy.sparse.csr_matrix(shape, dtype=data.dtype)
        X.data, X.indices, X.indptr = data, indices, indptr
        X.has_canonical_format = False      # as they came: scipy must not take them for sorted
        return X

    def copy_to_device_async(self, dst, src, stream):
        self.no_host_wait("a host-to-device copy")
        assert dst.shape == src.shape and dst.dtype == src.dtype
        self.copies += 1
        stream.enqueue(lambda: np.copyto(dst, src))

    def copy_to_host_(self, src, out):
        self.no_host_wait("a copy to the host")
        self.synchronize()
        np.copyto(out, src)
        return out

    def copy_to_device_(self, src, out):
        np.copyto(out, src)
        return out


class CaptureError(RuntimeError):
    """Something a CUDA graph cannot hold was done while one was captured."""


class FakeGraph:
    """The operations recorded while capturing, with the arrays and numbers they were given: replay() queues
    them again as they are (a number given at capture is frozen, as in a CUDA graph)."""

    def __init__(self, backend):
        self.b, self.ops = backend, []

    def replay(self):
        for op in self.ops:
            self.b.compute.enqueue(op)


class FakeOps:
    """mpinn.device.ops.HostOps on the fake device: each operation queued on the compute stream (run there in
    order), or recorded into the graph being captured (run only when it is replayed)."""

    def __init__(self, backend):
        from mpinn.device.ops import HostOps
        self.b, self.host, self.launches = backend, HostOps(), 0

    def stream(self):
        return self.b.compute

    def synchronize(self):
        self.b.compute.synchronize()

    def capture(self, fn):
        assert self.b.capturing is None, "a capture inside a capture"
        graph = self.b.capturing = FakeGraph(self.b)
        try:
            fn()
        finally:
            self.b.capturing = None
        return graph

    def hashed_workspace(self, *args):
        ws = self.host.hashed_workspace(*args)
        for a in ws.values():       # garbage that cannot pass for data, as device_empty's
            a[...] = np.nan if a.dtype.kind == "f" else np.iinfo(a.dtype).max // 2
        return ws

    def __getattr__(self, name):
        fn = getattr(self.host, name)

        def queued(*args, **kw):
            self.launches += 1
            op = lambda: fn(*args, **kw)        # noqa: E731
            if self.b.capturing is not None:
                self.b.capturing.ops.append(op)
            else:
                self.b.compute.enqueue(op)
        return queued


def messy_csr(n, cols, rng, dtype=np.float32, per_row=6):
    """Hashed rows as they come (data/, hashing/): a row's column ids unsorted, and in every row of two or more,
    one id twice (two values hashed to one column): CSR, but not canonical."""
    lengths = rng.integers(0, per_row, n)
    indices = rng.integers(0, cols, int(lengths.sum())).astype(np.int32)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    twice = starts[lengths >= 2]
    indices[twice + 1] = indices[twice]
    indptr = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    return scipy.sparse.csr_matrix((rng.standard_normal(indices.size).astype(dtype), indices, indptr),
                                   shape=(n, cols))


class ListFeed:
    """The trainer Feed's interface over a list of batches: next(), and s / steps."""

    def __init__(self, items):
        self.items, self.s, self.steps = items, 0, len(items)

    def next(self):
        self.s += 1
        return self.items[self.s - 1]


def canonical_csr(X):
    """X (a scipy CSR matrix) with every row's columns sorted and unique, duplicates summed: X itself where it is
    already, else a canonical copy (X, a received batch or a data set's rows, is left as it was). Hashed rows are
    neither: a row's ids come in its columns' order and two values may hash to one id."""
    if X.has_canonical_format:
        return X
    X = X.copy()
    X.sum_duplicates()
    return X
