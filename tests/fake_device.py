"""A host-memory stand-in for a GPU backend whose copies really are asynchronous: a copy queued on
a stream runs only when an event recorded after it is synchronised or waited on. Code that reads a
staged buffer without waiting, or refills a pinned buffer before its copy ran, sees wrong data."""
import numpy as np
import scipy.sparse

from mpinn.backend import Backend


class FakeStream:
    def __init__(self, immediate=False):
        self.ops, self.done, self.immediate = [], 0, immediate

    def enqueue(self, op):
        if self.immediate:
            op()
        else:
            self.ops.append(op)

    def run_until(self, mark):
        while self.done < mark:
            self.ops[self.done]()
            self.done += 1

    def wait_event(self, event):
        # the compute stream runs synchronously, so waiting means: the event's work is done now
        event.synchronize()


class FakeEvent:
    def __init__(self):
        self.stream, self.mark = None, 0

    def record(self, stream):
        self.stream, self.mark = stream, len(stream.ops)

    def synchronize(self):
        if self.stream is not None:
            self.stream.run_until(self.mark)


class FakeBackend(Backend):
    """numpy arithmetic (so results can be compared bit for bit with the CPU), GPU-like plumbing."""

    device = "fake"

    def __init__(self):
        super().__init__("fake", np, scipy.sparse)
        self.compute = FakeStream(immediate=True)
        self.copies = 0

    def is_device_array(self, a):
        return isinstance(a, np.ndarray)

    def asnumpy(self, a):
        return np.array(a)

    def pinned_empty(self, n, dtype):
        return np.empty(n, dtype)

    def device_empty(self, n, dtype):
        dtype = np.dtype(dtype)
        # garbage that cannot pass for data: NaN, or an index far out of range
        return np.full(n, np.nan if dtype.kind == "f" else np.iinfo(dtype).max // 2, dtype)

    def new_stream(self):
        return FakeStream()

    def new_event(self):
        return FakeEvent()

    def current_stream(self):
        return self.compute

    def copy_to_device_async(self, dst, src, stream):
        assert dst.shape == src.shape and dst.dtype == src.dtype
        self.copies += 1
        stream.enqueue(lambda: np.copyto(dst, src))

    def copy_to_host_(self, src, out):
        np.copyto(out, src)
        return out

    def copy_to_device_(self, src, out):
        np.copyto(out, src)
        return out
