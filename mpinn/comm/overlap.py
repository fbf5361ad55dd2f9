"""--overlap: the dense gradient Allreduce as Iallreduce buckets posted while back-propagation goes on."""
from mpi4py import MPI

from mpinn.comm.buffers import check_buffer


class OverlappedReduce:
    """The dense gradient Allreduce of one step as non-blocking Iallreduce buckets, started while
    back-propagation goes on. The buffer is W0, b0, W1, b1, ..., loss slot, and backward finishes
    the last layer first, so what is final is always a suffix and a bucket is a contiguous slice.

    The buckets are planned from the layer offsets alone (layers merged from the top until a bucket
    holds >= bucket_elems), never from timing, so every rank posts the same collectives in the
    same order; a rank with no rows posts them all in finish(). Layer 0 is the last bucket, sent in
    finish() after the sparse-row exchange (whose density verdict decides where it starts).
    MPICH progresses a non-blocking collective only inside MPI calls: ready() polls the posted ones
    (Testall) between layers."""

    def __init__(self, communicator, buf, layer_starts, bucket_elems):
        check_buffer(buf, buf.dtype, buf.size, "gradient buffer")
        self.c, self.buf = communicator, buf
        starts = sorted((int(s) for s in layer_starts if s > 0), reverse=True)
        self.buckets, end = [], buf.size
        for s in starts:
            if end - s >= bucket_elems:
                self.buckets.append((s, end))
                end = s
        if starts and end > starts[-1]:
            self.buckets.append((starts[-1], end))
            end = starts[-1]
        self.first_end = end            # layer 0's bucket: [0 or the dense part's start, first_end)
        self.next, self.requests, self.keep = 0, [], []

    def _post(self, lo, hi):
        seg = self.buf[lo:hi]
        self.keep.append(seg)           # alive until the request completes
        self.requests.append(self.c.comm.Iallreduce(MPI.IN_PLACE, seg, op=MPI.SUM))

    def ready(self, start):
        """buf[start:] is final: post every planned bucket inside it, poll the ones in flight."""
        while self.next < len(self.buckets) and self.buckets[self.next][0] >= start:
            self._post(*self.buckets[self.next])
            self.next += 1
        if self.requests:
            MPI.Request.Testall(self.requests)

    def finish(self, sparse=None):
        """Post what is left, exchange the sparse rows, reduce layer 0, wait for everything.
        Returns what reduce_gradients_ returns (the reduced SparseRows, or None)."""
        self.ready(0)       # the planned buckets (all of them on a rank with no rows)
        lo, reduced = self.c.rows_or_dense_(self.buf, sparse)
        if self.first_end > lo:
            self._post(lo, self.first_end)
        MPI.Request.Waitall(self.requests)
        self.requests, self.keep = [], []
        return reduced
