"""GPU staging of received batches: pinned buffers, a copy stream, one batch ahead (the Feed's stand-in on a GPU)."""
import numpy as np


def device_feed(feed, backend):
    """A Feed as it is on the host; wrapped in a DeviceFeed on a GPU backend."""
    if backend.device is None:
        return feed
    return DeviceFeed(feed, backend)


class _Slot:
    """One of the two staging areas: per array, a pinned host buffer and a device buffer, grown
    as needed; `copied` marks the end of this slot's last host-to-device copy, `released` the end
    of the compute that read its device buffers."""

    def __init__(self, backend):
        self.b = backend
        self.host, self.dev = {}, {}
        self.copied = self.released = None

    def buffers(self, name, n, dtype):
        """(pinned, device) views of n elements; reallocated when too small or of another dtype."""
        dtype = np.dtype(dtype)
        have = self.host.get(name)
        if have is None or have.size < n or have.dtype != dtype:
            size = max(n, 2 * have.size if have is not None and have.dtype == dtype else n, 1)
            if self.released is not None:   # the device buffer being replaced may still be read
                self.released.synchronize()
            self.host[name] = self.b.pinned_empty(size, dtype)
            self.dev[name] = self.b.device_empty(size, dtype)
        return self.host[name][:n], self.dev[name][:n]


class DeviceFeed:
    """Stands in for the trainer's Feed on a GPU (the role StagingArea played in the Keras seed).

    next() hands out batch s on the device and, before returning, receives batch s+1 from the
    host Feed and queues its copy on a separate stream: the copy runs while the compute stream
    works on batch s. Two slots alternate, so batch s+1's buffers are never batch s's. Before a
    slot is refilled, the host waits for its previous copy out of the pinned buffers (`copied`),
    and the copy stream waits (on the GPU, not the host) for the compute that read its device
    buffers (`released`, recorded on the compute stream when the batch after it was handed out).
    A batch handed out stays valid until next() has been called twice more."""

    def __init__(self, feed, backend):
        self.feed, self.b = feed, backend
        self.stream = backend.new_stream()
        self.slots = [_Slot(backend), _Slot(backend)]
        self.turn = 0
        self.ahead = None        # what _stage queued for the next call
        self.out = None          # the slot whose batch was handed out last

    @property
    def s(self):
        return self.feed.s

    def _more(self):
        return self.feed.s < self.feed.steps

    def _stage(self, host):
        """Queue host (a Batch of numpy arrays and a scipy CSR) into the next slot."""
        slot = self.slots[self.turn]
        self.turn ^= 1
        if slot.copied is not None:
            slot.copied.synchronize()       # its pinned buffers are free to overwrite
        if slot.released is not None:
            self.stream.wait_event(slot.released)
        parts = {}
        Xs = host.Xs
        arrays = [("y", host.y)]
        if host.Xd is not None:
            arrays.append(("Xd", host.Xd))
        if Xs is not None:
            arrays += [("data", Xs.data), ("indices", Xs.indices), ("indptr", Xs.indptr)]
        for name, a in arrays:
            a = np.ascontiguousarray(a)
            pinned, dev = slot.buffers(name, a.size, a.dtype)
            pinned[...] = a.ravel()
            self.b.copy_to_device_async(dev, pinned, self.stream)
            parts[name] = dev.reshape(a.shape)
        slot.copied = self.b.new_event()
        slot.copied.record(self.stream)
        return slot, type(host), parts, Xs.shape if Xs is not None else None

    def next(self):
        """This step's batch on the device; the next one's copy queued behind it."""
        slot, kind, parts, shape = self.ahead if self.ahead is not None else self._stage(self.feed.next())
        compute = self.b.current_stream()
        compute.wait_event(slot.copied)     # kernels on this batch start after its copy
        # the CSR is built only now: nothing on the compute stream may touch the parts before the wait
        Xs = (self.b.sparse.csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=shape)
              if shape is not None else None)
        batch = kind(Xs, parts.get("Xd"), parts["y"])
        if self.out is not None:            # the previous batch's compute is all queued by now
            self.out.released = self.b.new_event()
            self.out.released.record(compute)
        self.out = slot
        self.ahead = self._stage(self.feed.next()) if self._more() else None
        return batch
