"""Which rows of a sharded table every rank holds (--hot-rows): the most frequent ones, counted over the
training rows before the first step (mpinn.training.run; ShardedStep spreads their ownership)."""
import numpy as np


COUNT_ROWS = 1 << 20        # the training rows counted (the first ones): enough to rank a Zipf head
HOT_BYTES = 8 << 20         # auto's budget for the replica (parameters; the state stays with the owners)
HOT_MAX = 32768
HOT_EXPECT = 4              # auto: rows expected this often in a rank's share of a batch (see pick_hot)


def count_ids(data, n_rows, limit=COUNT_ROWS, chunk=65536):
    """(how often each of the table's n_rows ids occurs in the first `limit` rows of data, rows counted): the rows
    in file order (data.first_rows: a data set's by position, a stream's as it reads them)."""
    counts = np.zeros(n_rows, dtype=np.int64)
    n = 0
    for Xs in data.first_rows(int(limit), chunk):
        counts += np.bincount(np.asarray(Xs.indices, dtype=np.int64), minlength=n_rows)
        n += Xs.shape[0]
    return counts, n


def pick_hot(spec, counts, n_counted, per_rank_batch, width, itemsize):
    """The hot rows for --hot-rows spec (auto or a number; the plan turned auto off where it does not apply), most
    frequent first (ties: lower id first). auto: the rows expected at least HOT_EXPECT times in a rank's share of
    a batch (count / rows counted x per-rank batch >= 4), at most HOT_BYTES of values and HOT_MAX rows. Why 4: a
    replicated row costs every rank its refresh each step (one row received), a fetched one costs the ranks that
    touch it the row and its id; a rank touches a row expected 4 times with probability 1 - e^-4 = 0.98, so from
    there on the replica moves no more bytes than the fetches it replaces, and it spreads the row's gradients over
    the owners. A number: that many (the rule hot-rows-table keeps it within the table), of the rows seen."""
    if spec == "off" or not n_counted:
        return np.empty(0, np.int64)
    order = np.lexsort((np.arange(counts.size), -counts))
    if spec == "auto":
        k = int((counts * float(per_rank_batch) >= HOT_EXPECT * n_counted).sum())
        k = min(k, HOT_MAX, HOT_BYTES // max(width * itemsize, 1))
    else:
        k = min(int(spec), int((counts > 0).sum()))
    return order[:k].astype(np.int64)
