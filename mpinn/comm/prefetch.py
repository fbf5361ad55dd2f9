"""A sharded table's rows fetched ahead (--stale-rows 1): the flat exchange's fetch (TableShards.fetch) with the
rows' Alltoallv posted and waited for later (post_fetch, PendingRows), and a thread that drives MPI's progress
on it while the rank computes (Progress): MPICH moves a nonblocking collective's data only inside MPI calls."""
import threading
import time

import numpy as np

from mpinn.comm.shard import ID, RowPlan, check_owned, segment_sums


def post_fetch(shards, table, ids):
    """TableShards.fetch's exchange for rows `ids` (sorted, unique), its rows' Alltoallv posted, not waited for:
    the owners' rows are read from `table` NOW (and a hot row's from this rank's replica NOW), so what arrives is
    the table as it is at this call, whatever is stepped before the wait. The counts and the ids (small) travel
    at once, blocking. Returns the PendingRows whose wait() gives (rows, RowPlan), as fetch returns them."""
    comm, w, owners, wire = shards.comm, shards.width, shards.owners, shards.wire
    hot = owners.n_hot > 0
    if hot:
        owner, hot_ids = owners.locate(ids)
        order = np.argsort(owner, kind="stable")            # grouped by owner, each group sorted
        asked = np.bincount(owner, minlength=comm.size).astype(np.int64, copy=False)
        send = ids[order]
    else:
        order, asked, send = None, shards.owners_of(ids), ids
    given = comm.Alltoall_(asked, np.empty(comm.size, np.int64), "row id counts")
    shards._count(np.ones(comm.size, np.int64), 8)
    wanted = comm.Alltoallv_(np.ascontiguousarray(send, wire.ids), asked, np.empty(int(given.sum()), wire.ids),
                             given, "row ids").astype(ID, copy=False)
    shards._count(asked, wire.id_bytes)
    check_owned(owners, wanted, comm.rank)
    row_bytes = w * wire.itemsize(table.dtype)
    pending = PendingRows(ids.shape[0], w, table.dtype, wire, RowPlan(asked, given, wanted, order))
    if not hot:
        reply, back, pending.out = given, asked, wire.out(np.take(table, wanted, axis=0))
    else:
        cold = ~owners.hot_mask(wanted)                      # the rows to answer with
        reply = segment_sums(cold, given)
        need = ~hot_ids                                      # in ids' order
        back = np.bincount(owner[need], minlength=comm.size).astype(np.int64, copy=False)
        pending.out = wire.out(np.take(table, wanted[cold], axis=0))
        pending.place = order[need[order]]
        pending.local = (~need, wire.round(table[ids[~need]]))      # the replica's rows, copied now
    pending.got = wire.buffer(int(back.sum()), w, table.dtype)
    pending.request = comm.Ialltoallv_(pending.out, reply * w, pending.got, back * w, "table rows (ahead)")
    shards._count(reply, row_bytes)
    return pending


class PendingRows:
    """A fetch on its way: the request, the buffers it reads and writes (kept alive until it completes), and
    where the received rows and the replica's go in the rows' order."""

    def __init__(self, k, width, dtype, wire, plan):
        self.k, self.width, self.dtype, self.wire, self.plan = k, width, dtype, wire, plan
        self.request = self.out = self.got = None
        self.place = self.local = None          # hot rows: received rows' places, (replica mask, replica rows)

    def wait(self):
        """(rows (k, width) in ids' order, the RowPlan for send_back), once the rows have arrived."""
        self.request.Wait()
        got = self.wire.back(self.got, self.dtype)
        self.request = self.out = None
        if self.place is None:
            return got, self.plan
        rows = np.empty((self.k, self.width), self.dtype)
        rows[self.place] = got
        mask, local = self.local
        rows[mask] = local
        return rows, self.plan


class Progress:
    """A thread that calls Test on a posted request every `poll` seconds while the rank computes (between
    resume() and pause()), so that MPICH moves its data then rather than at the wait. It makes MPI calls while
    the main thread computes only; pause() returns once it is out of MPI (the MPI library was started with
    MPI_THREAD_MULTIPLE, mpi4py's default, so the main thread's own collectives may follow at once either way)."""

    def __init__(self, poll=50e-6):
        self.poll, self.request = float(poll), None
        self._go, self._quit, self._in_mpi = threading.Event(), False, threading.Lock()
        self.tests = 0                  # Test calls made (the benchmark reports them)
        self._thread = threading.Thread(target=self._run, name="mpinn-progress", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            self._go.wait()
            if self._quit:
                return
            with self._in_mpi:
                request = self.request
                if request is not None:
                    self.tests += 1
                if request is None or request.Test():      # done (a completed request is null: Wait returns)
                    self.request = None
                    self._go.clear()
                    continue
            time.sleep(self.poll)

    def resume(self, request):
        """Drive `request` from now on (until it completes or pause())."""
        with self._in_mpi:
            self.request = request
            self._go.set()

    def pause(self):
        """Stop driving; returns when the thread is out of MPI."""
        with self._in_mpi:
            self.request = None
            self._go.clear()

    def close(self):
        """The thread ends (a step's release_)."""
        with self._in_mpi:
            self._quit = True
            self._go.set()
        self._thread.join()
