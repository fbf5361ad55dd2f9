"""A stream's feeds (mpinn.training.feed.StreamFeed, LocalStreamFeed) read ahead by a shuffle window: while the
steps hold their batch, the reader thread goes on until a window's batches (and two) are ready. With two, as
before, the steps waited while it read each window, and with every rank reading (--readers all) one rank
reading its window kept the others waiting at the step's Allreduce (measured: docs/data.md)."""
import time
from types import SimpleNamespace

import numpy as np

from mpinn.training.feed import MAX_AHEAD, LocalStreamFeed, StreamFeed, batches_ahead


class Data:
    """A stream of 400 batches whose generator counts the batches it has made."""
    window = 1000

    def __init__(self):
        self.made = 0

    def batches(self, batch, dtype, seed, epoch):
        for _ in range(400):
            self.made += 1
            yield SimpleNamespace(n=batch)


class Posted:
    def __init__(self, batch):
        self.batch = batch

    def wait(self):
        return self.batch


class Comm:
    """Rank 0 of one: the calls the feeds make."""
    rank = 0

    def Bcast_(self, a, root, what):
        pass

    def Allreduce_sum_(self, a, what):
        return a

    def post_batch(self, batch, layout, replicate=False):
        return Posted(batch)


def made_once_settled(data, timeout=5.0):
    """The batches the reader thread has made once it stops (the queue full)."""
    end, last = time.time() + timeout, -1
    while time.time() < end:
        time.sleep(0.05)
        if data.made == last:
            return last
        last = data.made
    return last


def test_the_reader_thread_holds_a_window_of_batches_ready():
    assert batches_ahead(Data(), 50) == 1000 // 50 + 2 and batches_ahead(Data(), 300) == 4 + 2
    assert batches_ahead(Data(), 1) == 1002 and batches_ahead(SimpleNamespace(window=10 ** 9), 1) == MAX_AHEAD
    data = Data()
    feed = StreamFeed(data, 0, 0, 0, Comm(), None, 50, np.float32)
    assert feed.next().n == 50
    # one taken, 22 queued, and the one the thread holds while it waits for room
    assert made_once_settled(data) == 1 + batches_ahead(data, 50) + 1


def test_every_reader_holds_a_window_of_its_share_ready():
    data = Data()
    readers = SimpleNamespace(group=Comm(), count=2, reader=0)
    feed = LocalStreamFeed(data, 0, 0, 0, Comm(), readers, None, 100, np.float32)     # this reader's share: 50
    assert feed.next().n == 50
    assert made_once_settled(data) == 1 + batches_ahead(data, 50) + 1
