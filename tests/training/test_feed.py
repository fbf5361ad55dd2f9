"""The in-memory feed (mpinn.training.feed.Feed): each step gets its own rows, in order, whenever its reading thread
gets to run. Its thread once took its first step from the feed's position when it ran, not when it was made: a thread
scheduled after the first step had begun read one step ahead, every batch was the next step's rows, and the last
step waited for ever (seen as a 300 s hang of scikit-learn's estimator checks on a loaded machine)."""
import threading
import time

import numpy as np
import pytest

import mpinn.training.feed as feed_module
from mpinn.core.batch import Batch, Layout
from mpinn.comm.batches import ReadyBatch
from mpinn.training.feed import Feed


class OneRank:
    rank, size = 0, 1

    def post_batch(self, batch, layout, replicate=False):
        return ReadyBatch(batch, layout)


class Rows:
    """Row r holds the number r."""

    def take(self, rows, dtype):
        rows = np.asarray(rows)
        return Batch(None, rows.astype(dtype).reshape(-1, 1), rows.astype(np.int64))


class LateThread(threading.Thread):
    """A thread that the machine runs late: after the first steps have begun."""

    def run(self):
        time.sleep(0.3)
        super().run()


@pytest.mark.parametrize("late", [False, True], ids=["on-time", "late"])
@pytest.mark.parametrize("prefetch", [True, False])
def test_each_step_gets_its_rows_however_late_the_reading_thread_runs(monkeypatch, late, prefetch):
    if late:
        monkeypatch.setattr(feed_module.threading, "Thread", LateThread)
    order = np.random.default_rng(0).permutation(40)
    B, steps, start = 8, 5, 1                       # steps 1..4 (a resume from step 1)
    feed = Feed(Rows(), order, steps, start, OneRank(), Layout(0, 1, "float32", "int64"), B, np.float32,
                prefetch=prefetch)
    for s in range(start, steps):
        got = feed.next()
        assert got.y.tolist() == order[s * B:(s + 1) * B].tolist(), s


def test_a_feed_dropped_mid_epoch_ends_its_reading_thread():
    """After an error mid-epoch the run lets its feed go (Run.release_ -> Feed.drop_): the reading thread, blocked
    on its full queue, must end rather than wait for ever with its batches (one thread left per failed run of a
    process that goes on: a search over settings)."""
    order = np.arange(400)
    before = set(threading.enumerate())
    feed = Feed(Rows(), order, 50, 0, OneRank(), Layout(0, 1, "float32", "int64"), 8, np.float32)
    feed.next()
    time.sleep(0.2)             # the thread fills its queue and blocks
    readers = [t for t in set(threading.enumerate()) - before if t.name == "mpinn-prefetch" and t.is_alive()]
    assert len(readers) == 1
    feed.drop_()
    readers[0].join(timeout=5)
    assert not readers[0].is_alive()
