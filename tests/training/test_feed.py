"""The in-memory feed (mpinn.training.feed.Feed): each step gets its own rows, in order, whenever its reading thread
gets to run. Its thread once took its first step from the feed's position when it ran, not when it was made: a thread
scheduled after the first step had begun read one step ahead, every batch was the next step's rows, and the last
step waited for ever (seen as a 300 s hang of scikit-learn's estimator checks on a loaded machine)."""
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import mpinn.training.feed as feed_module
from mpinn.comm import split_counts
from mpinn.core.batch import Batch, Layout
from mpinn.comm.batches import ReadyBatch
from mpinn.settings.input_plan import choose_reading
from mpinn.training.feed import Feed, LocalStreamFeed, Reading, StreamFeed, StreamOrder, make_feed


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


# ---------------------------------------------------------------- make_feed: one feed from (epoch order, who reads)
LAYOUT = Layout(0, 1, "float32", "int64")


class Rank(OneRank):
    """Rank `rank` of `size`, reading its own rows (--input local: no messages)."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size


class StreamComm(OneRank):
    """Rank 0 of one, with the calls a stream's feeds make; split counts the reader groups made."""

    def __init__(self):
        self.splits = 0

    def Bcast_(self, a, root, what):
        pass

    def Allreduce_sum_(self, a, what):
        return a

    def split(self, colour):
        self.splits += 1
        return OneRank()


class Stream:
    """A stream of 203 rows whose batches say (seed, epoch) in their inputs and count the rows in their labels."""
    window = 64

    def batches(self, batch, dtype, seed, epoch):
        for lo in range(0, 203, batch):
            rows = np.arange(lo, min(lo + batch, 203))
            yield Batch(None, np.full((len(rows), 1), 1000 * seed + epoch, dtype), rows.astype(np.int64))


def drain(feed):
    out = []
    while True:
        got = feed.next()
        if got is None:
            return out
        out.append((got.Xd.tolist(), got.y.tolist()))


def test_who_reads_is_decided_once_from_input_and_readers():
    """mpinn.settings.input_plan.choose_reading, the one place: --input local, else --readers (all at 1 rank is one
    reader of its own, not rank 0's stream), else rank 0; a Reading says which ranks read rows by position."""
    def who(input_mode, readers, size=4):
        return choose_reading(SimpleNamespace(input=input_mode, readers=readers), size)
    assert who("scatter", "1") == ("rank0", 1) and who("local", "1") == ("local", 1)
    assert who("local", "all") == ("local", 1)         # --readers is a stream's; the rules keep it from --input local
    assert who("scatter", "3") == ("readers", 3) and who("scatter", "all") == ("readers", 4)
    assert who("scatter", "all", size=1) == ("readers", 1)
    r = Reading(*who("scatter", "3"))
    assert r.who == "readers" and r.readers == 3 and repr(r) == "Reading('readers', 3)"
    assert [Reading(*who(m, k)).reads(rank) for m, k in [("scatter", "1"), ("local", "1"), ("scatter", "all")]
            for rank in (0, 1)] == [True, False, True, True, True, False]
    with pytest.raises(ValueError):
        Reading("everyone")


@pytest.mark.parametrize("who,rank,size", [("rank0", 0, 1), ("local", 0, 3), ("local", 2, 3), ("readers", 0, 1)])
@pytest.mark.parametrize("prefetch", [True, False])
def test_make_feed_by_position_gives_the_batches_of_the_feed_made_by_hand(who, rank, size, prefetch):
    """Rows by position: make_feed's Feed is the one Trainer.feed and the benchmark built by hand before (read_local
    with --input local; rank 0 scattering otherwise, --readers included), step by step the same rows."""
    order = np.random.default_rng(3).permutation(61)
    B, steps, start = 8, 8, 2
    reading = Reading(who, 1)
    comm = Rank(rank, size)
    feed = make_feed(Rows(), order, reading, start, comm, LAYOUT, B, np.float32, steps=steps, prefetch=prefetch)
    by_hand = Feed(Rows(), order, steps, start, comm, LAYOUT, B, np.float32, read_local=who == "local",
                   prefetch=prefetch)
    assert type(feed) is Feed and feed.read_local == (who == "local") and feed.s == start
    for s in range(start, steps):
        got, want = feed.next(), by_hand.next()
        assert got.y.tolist() == want.y.tolist() and np.array_equal(got.Xd, want.Xd), s
        rows = order[s * B:(s + 1) * B]
        if who == "local":          # this rank's slice, as a scatter would give it
            c = split_counts(len(rows), size)
            rows = rows[c[:rank].sum():c[:rank + 1].sum()]
        assert got.y.tolist() == rows.tolist()


@pytest.mark.parametrize("start", [0, 5])
def test_make_feed_of_a_stream_read_by_rank_0_is_its_stream_feed(start):
    feed = make_feed(Stream(), StreamOrder(4, 2), Reading("rank0"), start, StreamComm(), LAYOUT, 16, np.float32)
    assert type(feed) is StreamFeed
    by_hand = StreamFeed(Stream(), 2, 4, start, StreamComm(), LAYOUT, 16, np.float32)
    got, want = drain(feed), drain(by_hand)
    assert got == want and len(got) == 13 - start and got[0][0][0] == [4002.0]
    assert got[0][1] == list(range(16 * start, 16 * start + 16))


def test_make_feed_of_a_stream_with_readers_is_their_feed_and_makes_the_group_once():
    comm, reading = StreamComm(), Reading("readers", 1)
    feeds = [make_feed(Stream(), StreamOrder(4, epoch), reading, 0, comm, LAYOUT, 16, np.float32)
             for epoch in (1, 2)]
    assert all(type(f) is LocalStreamFeed for f in feeds) and comm.splits == 1     # one group, for every epoch
    by_hand = LocalStreamFeed(Stream(), 2, 4, 0, StreamComm(), SimpleNamespace(group=OneRank(), count=1, reader=0),
                              LAYOUT, 16, np.float32)
    drain(feeds[0])
    assert drain(feeds[1]) == drain(by_hand)
