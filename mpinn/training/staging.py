"""GPU staging of received batches: pinned buffers, a copy stream (the Feed on a GPU)."""
import numpy as np


def device_feed(feed, backend):
    """A Feed as it is on the host; wrapped in a DeviceFeed on a GPU backend."""
    if backend.device is None:
        return feed
    return DeviceFeed(feed, backend)


class _Slot:
    """One of the two staging areas: per array, a pinned host buffer and a device buffer, grown as needed;
    `copied` marks the end of this slot's last host-to-device copy, `released` the end of the compute that
    read its device buffers."""

    def __init__(self, backend):
        self.b = backend
        self.host, self.dev = {}, {}
        self.copied = self.released = None

    def buffers(self, name, n, dtype):
        """(pinned, device, new) views of n elements; reallocated (new) when too small or of another dtype. A device
        buffer replaced while queued kernels still read it needs no wait: its memory goes back to the pool of the
        compute stream, which orders any reuse there. A new one comes from that pool too, so it may be memory that
        kernels still queued there use: the feed's copy stream waits for them before writing it (DeviceFeed._stage)."""
        dtype = np.dtype(dtype)
        have = self.host.get(name)
        new = have is None or have.size < n or have.dtype != dtype
        if new:
            size = max(n, 2 * have.size if have is not None and have.dtype == dtype else n, 1)
            self.host[name] = self.b.pinned_empty(size, dtype)
            self.dev[name] = self.b.device_empty(size, dtype)
        return self.host[name][:n], self.dev[name][:n], new


class DeviceFeed:
    """Stands in for the trainer's Feed on a GPU (the role StagingArea played in the Keras seed).

    next() receives batch s from the host Feed and queues its copy to the device on a copy stream, the hashed
    rows as they came (unsorted, an id twice where two values hashed to one: the GPU's products sum them in
    order, as scipy's do, so no sort is needed; making them canonical on the host took 0.6 ms a W4 batch); the
    compute stream waits for that copy on the GPU, the host does not.
    Exactly one batch is ahead, as on the CPU: the host Feed's, whose Iscatterv of batch s+1 is in flight while
    batch s computes; the copy of batch s overlaps what the GPU still has queued of step s-1 (its update).

    Two slots alternate, so batch s's buffers are never batch s-1's. Before a slot is refilled, the host waits
    for its previous copy out of the pinned buffers (`copied`; passed long ago in a training loop, so no wait),
    and the copy stream waits (on the GPU) for the compute that read its device buffers (`released`, recorded on
    the compute stream when the next batch is asked for). The compute stream may read a batch handed out until
    next() is called again."""

    def __init__(self, feed, backend):
        self.feed, self.b = feed, backend
        self.stream = backend.new_stream()
        self.slots = [_Slot(backend), _Slot(backend)]
        self.turn = 0
        self.out = None          # the slot whose batch was handed out last

    @property
    def s(self):
        return self.feed.s

    @property
    def n_global(self):
        """A stream's feed: the rows of the global batch handed out last (mpinn.training.feed.StreamFeed)."""
        return self.feed.n_global

    def _stage(self, slot, host):
        """Queue host (a Batch of numpy arrays and a scipy CSR) into slot; its parts on the device."""
        if slot.copied is not None:
            self.b.host_wait(slot.copied)           # its pinned buffers are free to overwrite
        if slot.released is not None:
            self.stream.wait_event(slot.released)   # its device buffers are no longer read
        arrays = [("y", host.y)]
        if host.Xd is not None:
            arrays.append(("Xd", host.Xd))
        if host.Xs is not None:
            arrays += [("data", host.Xs.data), ("indices", host.Xs.indices), ("indptr", host.Xs.indptr)]
        arrays = [(name, np.ascontiguousarray(a)) for name, a in arrays]
        bufs = [slot.buffers(name, a.size, a.dtype) for name, a in arrays]
        if any(new for _, _, new in bufs):      # memory from the compute stream's pool: its queued kernels first
            fresh = self.b.new_event()
            fresh.record(self.b.current_stream())
            self.stream.wait_event(fresh)
        parts = {}
        for (name, a), (pinned, dev, _) in zip(arrays, bufs):
            pinned[...] = a.ravel()
            self.b.copy_to_device_async(dev, pinned, self.stream)
            parts[name] = dev.reshape(a.shape)
        slot.copied = self.b.new_event()
        slot.copied.record(self.stream)
        return parts

    def next(self):
        """This step's batch on the device (its copy queued; kernels on it wait for the copy on the GPU)."""
        host = self.feed.next()
        if host is None:                    # a stream's epoch has ended
            return None
        compute = self.b.current_stream()
        if self.out is not None:            # the previous batch's compute is all queued by now
            self.out.released = self.b.new_event()
            self.out.released.record(compute)
        slot = self.out = self.slots[self.turn]
        self.turn ^= 1
        parts = self._stage(slot, host)
        compute.wait_event(slot.copied)     # kernels on this batch start after its copy
        # the CSR is built only now: nothing on the compute stream may touch the parts before the wait
        Xs = (self.b.device_csr(parts["data"], parts["indices"], parts["indptr"], host.Xs.shape)
              if host.Xs is not None else None)
        return type(host)(Xs, parts.get("Xd"), parts["y"])
