"""The GPU's batch feed (training/staging) and phase clock (training/timeline) on the fake device of
tests/fake_device.py, whose streams run only when something waits for them: each wait the feed makes is
needed here (taking any one out fails a test), the feed is one batch ahead and no more, and time a kernel
spends on the device counts as compute, not as the communication that waits for it."""
import time

import numpy as np
import pytest
import scipy.sparse as sp

from fake_device import FakeBackend, ListFeed, canonical_csr, messy_csr
from mpinn.device.backend import get_backend
from mpinn.core.batch import Batch
from mpinn.training.staging import DeviceFeed, _Slot, device_feed
from mpinn.training.timeline import Timeline

SIZES = [3, 9, 0, 5, 40, 2, 17, 6]     # rows a batch: the buffers grow, shrink, and are refilled in place


def batches(sizes=SIZES, seed=1):
    rng = np.random.default_rng(seed)
    return [Batch(messy_csr(n, 50, rng), rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 4, n))
            for n in sizes]


def parts(b):
    """A batch's arrays, copied (as a kernel reading it would see them then)."""
    X = b.Xs
    return [np.array(a) for a in (X.data, X.indices, X.indptr, b.Xd, b.y)]


def expected(b):
    """What the device must see: the batch's arrays as they came (the hashed rows unsorted, duplicates kept: the
    GPU's products sum them in order, as scipy's do)."""
    X = b.Xs
    return [X.data, X.indices, X.indptr, b.Xd, b.y]


def same(got, want):
    return all(g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want))


def test_the_messy_rows_are_messy_and_canonical_csr_is_the_same_matrix():
    X = batches()[4].Xs
    assert not X.has_canonical_format
    C = canonical_csr(X)
    assert C is not X and not X.has_canonical_format      # the batch itself is left as it came
    assert np.allclose(C.toarray(), X.toarray()) and C.nnz < X.nnz
    assert canonical_csr(C) is C


def test_device_feed_hands_out_every_batch_as_it_came_and_exact():
    host = batches()
    fake = FakeBackend()
    feed = DeviceFeed(ListFeed(host), fake)
    messy = 0
    for want in host:
        got = feed.next()
        assert same(parts(got), expected(want))
        assert got.Xd is not want.Xd and got.Xs.data is not want.Xs.data      # copies, staged
        check = sp.csr_matrix((got.Xs.data, got.Xs.indices, got.Xs.indptr), shape=got.Xs.shape)
        check.has_canonical_format = False
        messy += check.nnz > canonical_csr(check).nnz       # duplicates left for the products to sum
    assert messy >= 5 and fake.copies == 5 * len(host)


def test_device_feed_is_exactly_one_batch_ahead():
    """Batch s is taken from the host Feed (whose Iscatterv of s+1 is the one batch in flight) when it is handed
    out, never earlier: the data wait of step s is batch s's, as on the CPU."""
    host = batches()
    fake = FakeBackend()
    feed = DeviceFeed(ListFeed(host), fake)
    for k in range(len(host)):
        feed.next()
        assert feed.feed.s == k + 1 and fake.copies == 5 * (k + 1)


def run_lazily(host, fake):
    """Every batch read by a kernel queued on the compute stream right after it was handed out; the kernels run
    at the end, as late as the events allow (lazy_compute), the copies only when something waits for them."""
    feed = DeviceFeed(ListFeed(host), fake)
    seen = []
    for _ in host:
        b = feed.next()
        fake.compute.enqueue(lambda b=b: seen.append(parts(b)))
    fake.drain()
    return seen


def test_every_batch_is_read_as_it_was_sent_however_late_the_device_runs():
    host = batches()
    seen = run_lazily(host, FakeBackend(lazy_compute=True))
    assert len(seen) == len(host)
    for k, (got, want) in enumerate(zip(seen, host)):
        assert same(got, expected(want)), "batch %d" % k


@pytest.mark.parametrize("wait", ["host waits for the copy out of the pinned buffers",
                                  "copy stream waits for the compute that read the device buffers",
                                  "compute stream waits for the copy"])
def test_each_wait_of_the_feed_is_needed(monkeypatch, wait):
    """The feed with one of its three waits taken out hands some kernel a wrong batch on the lazy fake device
    (the test above passes with all three)."""
    fake = FakeBackend(lazy_compute=True)
    if wait.startswith("host"):
        monkeypatch.setattr(fake, "host_wait", lambda event: None)
    elif wait.startswith("copy"):
        real = fake.new_stream

        def no_wait_stream():
            s = real()
            s.wait_event = lambda event: None
            return s
        monkeypatch.setattr(fake, "new_stream", no_wait_stream)
    else:
        monkeypatch.setattr(fake.compute, "wait_event", lambda event: None)
    host = batches()
    seen = run_lazily(host, fake)
    assert not all(same(got, expected(want)) for got, want in zip(seen, host))


@pytest.mark.parametrize("fixed", [True, False])
def test_a_new_device_buffer_is_written_after_the_kernels_still_using_its_memory(monkeypatch, fixed):
    """The pool gives a new staging buffer memory that a kernel still queued on the compute stream writes (cupy's
    pool hands a block freed on the compute stream out again at once: that stream orders its own reuse, but the
    feed's copy runs on another stream). Here the copy stream runs its copies as soon as it may; the feed makes it
    wait for the compute stream's queued kernels, and without that wait a batch is overwritten. (On an H200 this
    race gave a wrong model at np 2 once the steps stopped waiting for the device several times each.)"""
    from fake_device import FakeStream
    fake = FakeBackend(lazy_compute=True)
    monkeypatch.setattr(fake, "new_stream", lambda: FakeStream(fake, immediate=True))
    made = fake.device_empty

    def from_the_pool(n, dtype):
        block = made(n, dtype)
        fake.compute.enqueue(lambda: block.fill(7))     # its last user before the pool handed it out
        return block
    monkeypatch.setattr(fake, "device_empty", from_the_pool)
    if not fixed:           # the buffers never reported new: the feed's wait for the queued kernels left out
        real = _Slot.buffers
        monkeypatch.setattr(_Slot, "buffers", lambda self, *a: real(self, *a)[:2] + (False,))
    host = batches()
    seen = run_lazily(host, fake)
    assert all(same(got, expected(want)) for got, want in zip(seen, host)) == fixed


def test_the_fake_device_runs_a_copy_only_when_waited_for():
    fake = FakeBackend()
    slot = _Slot(fake)
    pinned, dev, new = slot.buffers("x", 4, np.float32)
    assert new and not slot.buffers("x", 3, np.float32)[2]
    pinned[...] = 1
    stream = fake.new_stream()
    fake.copy_to_device_async(dev, pinned, stream)
    assert np.isnan(dev).all()
    e = fake.new_event()
    e.record(stream)
    assert not e.done
    fake.host_wait(e)
    assert (dev == 1).all() and e.done and fake.syncs == 1
    fake.host_wait(e)                   # passed already: no wait
    assert fake.syncs == 1


def test_device_feed_with_dense_input_only():
    host = [Batch(None, b.Xd, b.y.astype(np.float64)) for b in batches()]
    feed = DeviceFeed(ListFeed(host), FakeBackend())
    for want in host:
        got = feed.next()
        assert got.Xs is None and np.array_equal(got.Xd, want.Xd) and np.array_equal(got.y, want.y)


def test_device_feed_is_not_used_on_the_cpu():
    feed = ListFeed([])
    assert device_feed(feed, get_backend("numpy")) is feed
    assert isinstance(device_feed(feed, FakeBackend()), DeviceFeed)


def test_device_feed_waits_on_the_host_for_nothing_in_a_training_loop():
    """Compute that waits for each batch (as the trainer's does) leaves every copy done by the time its slot is
    refilled: the feed's host waits cost no synchronisation."""
    fake = FakeBackend()
    feed = DeviceFeed(ListFeed(batches()), fake)
    for _ in SIZES:
        feed.next()
    assert fake.syncs == 0


# ---------------------------------------------------------------- the phase clock
def test_a_kernel_still_running_counts_as_compute_not_communication():
    """The step returns from its compute at once, the kernel runs 60 ms on the device, and the communication
    (a copy to the host, as the staged transport's) waits for it: with device marks the 60 ms are compute."""
    fake = FakeBackend()
    t = Timeline(backend=fake)
    for step in (1, 2):
        t1 = t.now()
        fake.launch(0.06)                                   # forward and backward, queued
        t2 = t.now()
        fake.copy_to_host_(np.zeros(3), np.empty(3))        # the exchange: waits for the kernel
        t3 = t.now()
        t.add("compute", t1, t2, step)
        t.add("comm", t2, t3, step)
    assert 0.1 < t.totals["compute"] < 0.4 and t.totals["comm"] < 0.04, t.totals


def test_host_times_misattribute_the_same_step():
    """What the time split reported before: the host's clock at the boundaries puts the kernel in comm."""
    fake = FakeBackend()
    t = Timeline()                      # no backend: the host's clock
    t1 = t.now()
    fake.launch(0.06)
    t2 = t.now()
    fake.copy_to_host_(np.zeros(3), np.empty(3))
    t3 = t.now()
    t.add("compute", t1, t2, 1)
    t.add("comm", t2, t3, 1)
    assert t.totals["comm"] > 0.05 > t.totals["compute"]


def test_device_marks_cost_no_host_wait_until_the_totals_are_read():
    fake = FakeBackend()
    t = Timeline(keep=True, backend=fake)
    t.now()                             # the anchor: the run's one synchronisation for the clock
    assert fake.syncs == 1
    for step in range(2, 6):
        a = t.now()
        fake.launch(0.01)
        b = t.now()
        t.add("compute", a, b, step)
    assert fake.syncs == 1 and t.pending         # the last kernels are still running: nothing waited for
    time.sleep(0.05)
    t.add("update", t.now(), t.now(), 6)         # passed by now: settled without a wait
    assert fake.syncs == 1 and not t.pending
    assert 0.035 < t.totals["compute"] < 0.2
    events = t.trace_events(0)[2:]
    assert [e["args"]["step"] for e in events] == [2, 3, 4, 5, 6]
    assert all(e["dur"] >= 0 for e in events)
