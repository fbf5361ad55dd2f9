"""Which rows of a sharded table every rank holds (--hot-rows): the most frequent ones, counted over the
training rows before the first step (ShardedStep.use_hot_rows_ spreads their ownership)."""
import numpy as np

from mpinn.config import MpinnError

COUNT_ROWS = 1 << 20        # the training rows counted (the first ones): enough to rank a Zipf head
HOT_BYTES = 8 << 20         # auto's budget for the replica (parameters; the state stays with the owners)
HOT_MAX = 32768


def count_ids(data, n_rows, limit=COUNT_ROWS, chunk=65536):
    """(how often each of the table's n_rows ids occurs in the first `limit` rows of data, rows counted)."""
    counts = np.zeros(n_rows, dtype=np.int64)
    n = min(len(data), int(limit))
    for a in range(0, n, chunk):
        Xs = data.take(np.arange(a, min(a + chunk, n))).Xs
        counts += np.bincount(np.asarray(Xs.indices, dtype=np.int64), minlength=n_rows)
    return counts, n


def pick_hot(spec, counts, n_counted, per_rank_batch, width, itemsize, nodes):
    """The hot rows for --hot-rows spec (auto, off, or a number), most frequent first (ties: lower id
    first). auto: off on one node (its ranks share memory: the busiest owner's load is what the replica
    cures, and it grows with the nodes; measured at np 2 on one node, the replica's refresh cost more
    than the fetches it saved); on several, every row expected at least once in a rank's share of a
    batch (count / rows counted x per-rank batch >= 1), at most HOT_BYTES of values and HOT_MAX rows."""
    if spec == "off" or not n_counted:
        return np.empty(0, np.int64)
    order = np.lexsort((np.arange(counts.size), -counts))
    if spec == "auto":
        if nodes == 1:
            return np.empty(0, np.int64)
        k = int((counts * float(per_rank_batch) >= n_counted).sum())
        k = min(k, HOT_MAX, HOT_BYTES // max(width * itemsize, 1))
    else:
        k = int(spec)
        if k > counts.size:
            raise MpinnError("--hot-rows %d: the table has %d rows" % (k, counts.size), collective=True)
        k = min(k, int((counts > 0).sum()))
    return order[:k].astype(np.int64)
