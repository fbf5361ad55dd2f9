"""Where each step's rows come from: the epoch's seeded order and the feed that reads, scatters and prefetches batches;
for a stream (mpinn.data.stream), the feed that batches the rows as rank 0 reads them."""
import queue
import threading

import numpy as np
import scipy.sparse as sp

from mpinn.comm import split_counts
from mpinn.core.batch import Batch
from mpinn.data.stream_setup import reading_group

MAX_AHEAD = 4096      # batches a stream's reader thread holds ready at most (see batches_ahead)


def epoch_order(n, seed, epoch, block=1):
    """The epoch's row order, drawn from (seed, epoch) alone. With block b > 1, blocks of b consecutive
    rows are shuffled instead of rows: a packed file is then read in runs of b rows, which keeps the
    mapped pages (and the I/O) per batch small at the price of batches made of neighbouring rows."""
    rng = np.random.default_rng([seed, epoch])
    if block <= 1:
        return rng.permutation(n)
    return BlockOrder(rng.permutation(-(-n // block)), block, n)


class BlockOrder:
    """The rows of shuffled blocks of b consecutive rows, made a slice at a time: memory n/b, not n
    (so rank 0's memory does not grow with the data set)."""

    def __init__(self, blocks, b, n):
        self.blocks, self.b, self.n = blocks, b, n

    def __len__(self):
        return self.n

    def __getitem__(self, sl):
        start, stop, _ = sl.indices(self.n)
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        b, nb = self.b, len(self.blocks)
        short = self.n - (nb - 1) * b                 # rows in the last block (it may sit anywhere)
        where_short = int(np.flatnonzero(self.blocks == nb - 1)[0])

        def pos(i):                                   # row position where the i-th block of the order starts
            return i * b - (b - short if i > where_short else 0)

        lo = min(start // b, nb - 1)
        while lo > 0 and pos(lo) > start:
            lo -= 1
        hi = lo
        while hi < nb and pos(hi) < stop:
            hi += 1
        rows = (self.blocks[lo:hi, None] * b + np.arange(b)).ravel()
        rows = rows[rows < self.n]
        return rows[start - pos(lo):stop - pos(lo)]

    def __array__(self, dtype=None, copy=None):
        return self[0:self.n] if dtype is None else self[0:self.n].astype(dtype)


class Feed:
    """One epoch's local batches, in order, from step `start` on.

    scatter (default): rank 0 reads the global batch (Dataset.take or a packed file's memory map)
    and scatters row slices. With prefetch, a thread on rank 0 reads batches ahead (a queue of two),
    and the next batch's Iscatterv is posted before this batch computes, so the transfer overlaps
    the compute (MPICH progresses it inside this step's Allreduce); read_ahead=False: no thread, for rows that
    cost nothing to read (slices of arrays in memory). read_local: every rank reads its
    own slice of the global batch from the packed file (the same rows a scatter would give it), no
    rank-0 bottleneck, no messages. replicate (tower mode's "same data"): every rank gets the whole batch."""

    def __init__(self, data, order, steps, start, comm, layout, batch_size, dtype, read_local=False,
                 prefetch=True, replicate=False, read_ahead=True):
        self.data, self.order, self.steps, self.s = data, order, steps, start
        self.comm, self.layout, self.batch_size, self.dtype = comm, layout, int(batch_size), dtype
        self.read_local, self.prefetch, self.replicate = read_local, prefetch, replicate
        self.reads = comm.rank == 0 or read_local
        self.pending = None
        self.queue = None
        self.closed = False         # drop_: the reading thread stops at its next batch
        # the reading thread only where one rank reads for all: with read_local every rank reads a
        # P-th as much, and on a machine with no spare core the thread only competed (measured)
        if prefetch and read_ahead and self.s < steps and comm.rank == 0 and not read_local:
            self.queue = queue.Queue(maxsize=2)
            threading.Thread(target=self._produce, args=(self.s,), daemon=True, name="mpinn-prefetch").start()

    def _rows(self, s):
        B = self.batch_size
        rows = self.order[s * B:(s + 1) * B]
        if self.read_local:   # this rank's contiguous slice, exactly as split_counts scatters it
            c = split_counts(len(rows), self.comm.size)
            start = int(c[:self.comm.rank].sum())
            rows = rows[start:start + int(c[self.comm.rank])]
        return rows

    def _read(self, s):
        return self.data.take(self._rows(s), self.dtype)

    def _produce(self, start):
        """The batches from step `start` on (the feed's position when it was made: next() moves self.s, maybe
        before this thread first runs)."""
        try:
            for s in range(start, self.steps):
                if self.closed:
                    return
                self.queue.put(self._read(s))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self.queue.put(e)

    def _get(self, s):
        if not self.reads:
            return None
        if self.queue is None:
            return self._read(s)
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def _post(self, s):
        return self.comm.post_batch(self._get(s), self.layout, replicate=self.replicate)

    def drop_(self):
        """Collective: the batch posted ahead (prefetch) arrives and is let go, where every rank raised an error at
        the same step, so that the communicator it travels on can be freed (MPI keeps one with transfers pending);
        rank 0's reading thread ends (it would wait for ever on a full queue, holding its batches)."""
        if self.pending is not None:
            self.pending.wait()
            self.pending = None
        if self.queue is not None:      # the reading thread, maybe blocked on a full queue, ends with its batches
            self.closed = True
            while True:
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break

    def next(self):
        s, self.s = self.s, self.s + 1
        if self.read_local:
            return self._get(s)
        pending = self.pending if self.pending is not None else self._post(s)
        self.pending = self._post(s + 1) if self.prefetch and s + 1 < self.steps else None
        return pending.wait()


class StreamFeed:
    """One epoch's local batches of a stream (mpinn.data.stream.Stream, on rank 0; None elsewhere), from step
    `start` on (the batches before it are made and dropped: a resume replays the same order). A thread on rank 0
    reads, hashes and batches ahead of the steps (up to a shuffle window ahead: batches_ahead; the parsing runs
    outside the GIL). Every step begins with a one-number broadcast of the global batch's rows, which tells every
    rank its size and, with 0, that the epoch's rows are done: next() then returns None."""

    def __init__(self, data, epoch, seed, start, comm, layout, batch_size, dtype, replicate=False):
        self.comm, self.layout, self.replicate, self.s = comm, layout, replicate, start
        self.n_global = 0
        self.queue = None
        if comm.rank == 0:
            self.queue = queue.Queue(maxsize=batches_ahead(data, int(batch_size)))
            batches = data.batches(int(batch_size), dtype, seed, epoch)
            threading.Thread(target=_produce, args=(self.queue, batches, start), daemon=True,
                             name="mpinn-stream").start()

    def next(self):
        batch = None
        head = np.zeros(1, np.int64)
        if self.queue is not None:
            batch = self.queue.get()
            if isinstance(batch, BaseException):
                raise batch
            head[0] = batch.n if batch is not None else 0
        self.comm.Bcast_(head, root=0, what="stream batch size")
        self.n_global = int(head[0])
        if self.n_global == 0:
            return None
        self.s += 1
        return self.comm.post_batch(batch, self.layout, replicate=self.replicate).wait()


class LocalStreamFeed:
    """--readers all or K: reader g of K (mpinn.data.stream_setup.reader_streams: the first rank of its group of
    consecutive ranks) reads its own stream and takes the group's share of each global batch from it
    (split_counts(B, K)[g]), a thread up to a window ahead, and scatters it over its group (readers: the ReaderGroup; a group of
    one keeps its rows). One Allreduce of the rows a step tells every rank the global batch's size: a reader
    whose files are done gives no rows while the others finish, and 0 ends the epoch (next() then returns None)."""

    def __init__(self, data, epoch, seed, start, comm, readers, layout, batch_size, dtype):
        self.comm, self.group, self.layout, self.s, self.n_global = comm, readers.group, layout, start, 0
        self.queue, self.done = None, False
        if self.group.rank == 0:
            share = int(split_counts(int(batch_size), readers.count)[readers.reader])   # >= 1 (rule readers-batch)
            self.queue = queue.Queue(maxsize=batches_ahead(data, share))
            threading.Thread(target=_produce, args=(self.queue, data.batches(share, dtype, seed, epoch), start),
                             daemon=True, name="mpinn-reader").start()

    def next(self):
        batch = None
        if self.queue is not None:
            if not self.done:
                batch = self.queue.get()
                if isinstance(batch, BaseException):
                    raise batch
                self.done = batch is None
            if batch is None:
                batch = empty_batch(self.layout)
        mine = self.group.post_batch(batch, self.layout).wait()
        head = np.array([mine.n], np.int64)
        self.n_global = int(self.comm.Allreduce_sum_(head, what="stream batch rows")[0])
        if self.n_global == 0:
            return None
        self.s += 1
        return mine


class ReaderGroup:
    """--readers all or K (collective): `readers` readers (mpinn.settings.input_plan.choose_reading); this rank's `reader` (its group of consecutive ranks,
    mpinn.data.stream_setup.reading_group) and `group`, a communicator over that group, its reader first."""

    def __init__(self, comm, readers):
        self.count = readers
        self.reader = reading_group(comm.rank, comm.size, self.count)
        self.group = comm.split(self.reader)


class StreamOrder:
    """A stream's epoch order (mpinn.data.stream.Stream.batches): its files' rows cut into shuffle windows, each
    shuffled by (seed, epoch, window), drawn by the rank that reads as it reads. The other epoch orders are rows by
    position: an array, or what slices like one (epoch_order, BlockOrder, the benchmark's), None on a rank that
    does not read."""

    def __init__(self, seed, epoch):
        self.seed, self.epoch = seed, epoch


class Reading:
    """Who reads the training rows, as the InputPlan decided it (mpinn.settings.input_plan.choose_reading; the
    DataInfo carries it to every rank): "rank0" (rank 0 reads each global batch and scatters its slices), "local"
    (every rank reads its own slice of the global batch from a packed file: --input local) or "readers" (`readers`
    readers of a stream, each scattering its share over its group: --readers all or K)."""

    WHO = ("rank0", "local", "readers")

    def __init__(self, who="rank0", readers=1):
        if who not in self.WHO:
            raise ValueError("who reads: one of %s, not %r" % (", ".join(self.WHO), who))
        self.who, self.readers = who, readers
        self._group = None

    def reads(self, rank):
        """Does this rank read rows by position (and so needs the epoch's order)?"""
        return rank == 0 or self.who == "local"

    def group(self, comm):
        """The ReaderGroup of --readers: made at the first call, a collective (every rank makes its first stream
        feed at the same epoch's start), kept for the run's later epochs."""
        if self._group is None:
            self._group = ReaderGroup(comm, self.readers)
        return self._group

    def __repr__(self):
        return "Reading(%r%s)" % (self.who, ", %r" % self.readers if self.who == "readers" else "")


def make_feed(rows, order, reading, start, comm, layout, batch_size, dtype, steps=None, prefetch=True,
              replicate=False, read_ahead=True):
    """The one place an epoch's feed is chosen, from its epoch order and who reads (a Reading), from step `start`
    on. Rows by position (order: epoch_order's, or any that slices like it; None where this rank does not read;
    `steps` batches): a Feed, every rank reading its own slice with Reading "local", else rank 0 scattering. A
    stream (order: a StreamOrder; its end is found by reading): its K readers' LocalStreamFeed with Reading
    "readers", else rank 0's StreamFeed. Collective (the first --readers feed makes the readers' group).
    prefetch, read_ahead: a Feed's (see there); replicate: every rank gets the whole batch (tower mode's "same"
    data; not with --readers)."""
    if isinstance(order, StreamOrder):
        if reading.who == "readers":
            return LocalStreamFeed(rows, order.epoch, order.seed, start, comm, reading.group(comm), layout,
                                   batch_size, dtype)
        return StreamFeed(rows, order.epoch, order.seed, start, comm, layout, batch_size, dtype, replicate=replicate)
    return Feed(rows, order, steps, start, comm, layout, batch_size, dtype, read_local=reading.who == "local",
                prefetch=prefetch, replicate=replicate, read_ahead=read_ahead)


def empty_batch(layout):
    """A batch of no rows (a reader whose files are done)."""
    return Batch(sp.csr_matrix((0, layout.n_sparse), dtype=layout.dtype) if layout.n_sparse else None,
                 np.zeros((0, layout.n_dense), layout.dtype) if layout.n_dense else None, np.zeros(0, layout.y_dtype))


def rows_dropped(comm, data):
    """Collective, at a stream's epoch end: the rows its readers' files left out for a missing label (each
    reader's data.dropped; mpinn.data.stream.Stream.pieces)."""
    n = np.array([getattr(data, "dropped", 0) if data is not None else 0], np.int64)
    return int(comm.Allreduce_sum_(n, what="rows without a label")[0])


def batches_ahead(data, rows):
    """How many batches of `rows` rows a stream's reader thread may hold ready: a shuffle window's and two, so that
    it reads and hashes window k+1 while the steps take window k's batches (with two, the steps waited for each
    window's reading, and a rank reading its window kept the others waiting at the step's Allreduce), at most
    MAX_AHEAD batches."""
    return int(min(MAX_AHEAD, -(-int(data.window) // max(int(rows), 1)) + 2))


def _produce(q, batches, start):
    """A stream feed's thread: the batches from the start-th on into q, then None; an error is handed over."""
    try:
        for i, b in enumerate(batches):
            if i >= start:
                q.put(b)
        q.put(None)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
        q.put(e)
