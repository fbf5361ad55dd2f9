"""The hashed table sharded by rows over the ranks: who owns (steps) which rows (RowOwners), and the flat
Alltoallv exchange (TableShards) that brings a batch's rows from their owners and takes the gradient
rows back to them. The node-aware exchange with the same methods is mpinn.comm.shard_node."""
import numpy as np

from mpinn.core.batch import SparseRows
from mpinn.comm.buffers import displs, split_counts
from mpinn.comm.wire import wires

ID = np.int64       # row ids on the wire (a table may outgrow int32 one day; ids are ~3% of the bytes)


class RowOwners:
    """Rank r owns rows bounds[r]:bounds[r + 1] of the table: P contiguous ranges, the first n_rows % P
    ranks one row more (split_counts; with more ranks than rows the last ranks own none). Contiguous
    ranges rather than a hash of the id: the ids are already hashes, uniform over the table, so
    contiguous ranges balance rows and requests alike, the owners of a sorted id list are one
    searchsorted, and a rank's rows are one contiguous block of the flat buffers.

    Hot rows (`hot`: row ids, most frequent first) are the exception: every rank holds their values
    (a replica, refreshed after each step), and hot row i in that order is owned, stepped and its
    optimizer state kept, by rank i % P: the head of a Zipf-distributed column, which every rank asks
    for, is spread over all the owners instead of falling on whoever's range holds it."""

    def __init__(self, n_rows, size, hot=()):
        self.n_rows, self.size = int(n_rows), int(size)
        self.counts = split_counts(self.n_rows, self.size)          # rows per rank (contiguous)
        self.bounds = np.r_[0, np.cumsum(self.counts)].astype(np.int64, copy=False)
        hot = np.asarray(hot, dtype=np.int64)
        if hot.size and (hot.min() < 0 or hot.max() >= self.n_rows or np.unique(hot).size != hot.size):
            raise ValueError("hot rows must be distinct row ids of the table")
        order = np.argsort(hot, kind="stable")
        self.hot = hot[order]                                                   # sorted
        self.hot_owner = (np.arange(hot.size, dtype=np.int64) % self.size)[order]
        # the hot rows grouped by owner, each group sorted: the order of the replica's refresh
        by_owner = np.argsort(self.hot_owner, kind="stable")
        self.hot_by_owner = self.hot[by_owner]
        self.hot_counts = np.bincount(self.hot_owner, minlength=self.size).astype(np.int64, copy=False)

    @property
    def n_hot(self):
        return int(self.hot.size)

    def contiguous(self, ids):
        """The contiguous-range owner of each id: split_counts' ranges in closed form (the first n % P
        ranks own base + 1 rows, the others base)."""
        base, extra = divmod(self.n_rows, self.size)
        edge = extra * (base + 1)
        ids = np.asarray(ids, dtype=np.int64)
        if base == 0:
            return ids.copy()
        return np.where(ids < edge, ids // (base + 1), extra + (ids - edge) // base)

    def locate(self, ids):
        """(the owner of each id: the rank that steps it, which of ids are hot rows): one search."""
        owner = self.contiguous(ids)
        if not self.hot.size:
            return owner, np.zeros(owner.shape[0], dtype=bool)
        pos = np.minimum(np.searchsorted(self.hot, ids), self.hot.size - 1)
        hot = self.hot[pos] == ids
        owner[hot] = self.hot_owner[pos[hot]]
        return owner, hot

    def hot_mask(self, ids):
        """Which of ids are hot rows."""
        if not self.hot.size:
            return np.zeros(np.shape(ids)[0], dtype=bool)
        return self.locate(ids)[1]

    def of(self, ids):
        """The owner (the rank that steps it) of each id."""
        return self.locate(ids)[0]

    def hot_of(self, rank):
        """The hot rows `rank` owns, sorted."""
        lo = int(self.hot_counts[:rank].sum())
        return self.hot_by_owner[lo:lo + int(self.hot_counts[rank])]


class Traffic:
    """Messages and bytes this rank sent, all and to ranks on other nodes (what crosses the network),
    counted by the exchanges as they post them: the benchmark reports them per step."""

    def __init__(self):
        self.messages = self.bytes = self.off_messages = self.off_bytes = 0

    def add(self, counts, itemsize, off_node, me):
        """A collective in which this rank sends counts[j] items of itemsize bytes to peer j
        (off_node[j]: j is on another node; me: this rank's index, whose message stays here)."""
        sent = np.asarray(counts) > 0
        sent[me] = False
        nbytes = np.asarray(counts, dtype=np.int64) * itemsize
        self.messages += int(sent.sum())
        self.bytes += int(nbytes[sent].sum())
        self.off_messages += int((sent & off_node).sum())
        self.off_bytes += int(nbytes[sent & off_node].sum())

    def as_dict(self):
        return {"messages": self.messages, "bytes": self.bytes, "inter_node_messages": self.off_messages,
                "inter_node_bytes": self.off_bytes}


class RowPlan:
    """One batch's exchange, kept from the fetch for the return of its gradient rows: how many ids this
    rank sent each owner (`asked`), how many each rank sent it (`given`), those ids (`wanted`, one
    run per asking rank in rank order, each sorted and unique), and `order`: this rank's ids in the
    order they were sent (grouped by owner), or None when they already were."""

    def __init__(self, asked, given, wanted, order=None):
        self.asked, self.given, self.wanted, self.order = asked, given, wanted, order


class TableShards:
    """The flat exchange: every rank sends its requests straight to every owner. Every method is
    collective and makes the same calls on every rank whatever its batch (an empty batch asks for
    nothing and still takes part)."""

    name = "flat"

    def __init__(self, comm, n_rows, width, owners=None, node_of=None, wire="fp32", codecs=None):
        self.comm, self.n_rows, self.width = comm, int(n_rows), int(width)
        # the rows' and ids' format on the wire, and the gradient rows' (--wire-rows; codecs: the casts' kernels)
        self.wire, self.grad_wire = wires(wire, self.n_rows, codecs)
        self.owners = owners or RowOwners(n_rows, comm.size)
        self.counts, self.bounds = self.owners.counts, self.owners.bounds
        self.lo, self.hi = int(self.bounds[comm.rank]), int(self.bounds[comm.rank + 1])
        # which ranks are on another node (for the traffic count only); all on one node unless told
        node_of = np.zeros(comm.size, np.int64) if node_of is None else np.asarray(node_of)
        self.off_node = node_of != node_of[comm.rank]
        self.traffic = Traffic()

    def free(self):
        """Collective: what the exchange made for itself is freed (nothing, for the flat exchange)."""

    def owners_of(self, ids):
        """Ids per owner for sorted ids: (P,) counts (contiguous ranges, no hot rows)."""
        return np.diff(np.searchsorted(ids, self.bounds)).astype(np.int64, copy=False)

    def _count(self, counts, itemsize):
        self.traffic.add(counts, itemsize, self.off_node, self.comm.rank)

    def fetch(self, table, ids):
        """The current values of rows `ids` (sorted, unique) of the table: (rows (len(ids), width), the
        RowPlan for send_back). `table` is this rank's (n_rows, width) view of the flat parameters,
        of which only its own rows (and the hot rows' replica) are read.
        Three exchanges: the id counts (Alltoall of P integers), the ids (Alltoallv), the rows
        (Alltoallv back). Hot rows' ids go to their owners too (their gradient rows follow the same
        plan), but no row comes back for them: their values are the local replica's."""
        return self.post(table, ids, wait=True).wait()

    def post(self, table, ids, wait=False):
        """fetch, its rows' Alltoallv posted and not waited for (wait=False: an Ialltoallv; --stale-rows): the
        owners' rows are read from `table` now (and a hot row's from this rank's replica now), so what arrives is
        the table as it is at this call, whatever is stepped before the wait. The counts and the ids (small)
        travel at once. Returns the PendingRows whose wait() gives fetch's (rows, RowPlan)."""
        comm, w, owners, wire = self.comm, self.width, self.owners, self.wire
        hot = owners.n_hot > 0
        if hot:
            owner, hot_ids = owners.locate(ids)
            order = np.argsort(owner, kind="stable")            # grouped by owner, each group sorted
            asked = np.bincount(owner, minlength=comm.size).astype(np.int64, copy=False)
            send = ids[order]
        else:
            order, asked, send = None, self.owners_of(ids), ids
        given = comm.Alltoall_(asked, np.empty(comm.size, np.int64), "row id counts")
        self._count(np.ones(comm.size, np.int64), 8)
        wanted = comm.Alltoallv_(np.ascontiguousarray(send, wire.ids), asked, np.empty(int(given.sum()), wire.ids),
                                 given, "row ids").astype(ID, copy=False)
        self._count(asked, wire.id_bytes)
        check_owned(owners, wanted, comm.rank)
        pending = PendingRows(self._arrived, ids.shape[0], w, table.dtype, RowPlan(asked, given, wanted, order))
        if not hot:
            reply, back, out = given, asked, wire.take(table, wanted)
        else:
            cold = ~owners.hot_mask(wanted)                      # the rows to answer with
            reply = segment_sums(cold, given)
            need = ~hot_ids                                      # in ids' order
            back = np.bincount(owner[need], minlength=comm.size).astype(np.int64, copy=False)
            out = wire.take(table, wanted[cold])
            pending.place = order[need[order]]
            pending.local = (~need, wire.round(table[ids[~need]]))      # the replica's rows, copied now
        self.send_rows(comm, pending, out, reply, wire.buffer(int(back.sum()), w, table.dtype), back, "table rows",
                       wait)
        self._count(reply, wire.row_bytes(w, table.dtype))
        return pending

    def _arrived(self, pending):
        """PendingRows.wait's (rows in ids' order, the RowPlan), the rows received: placed among the replica's (hot
        rows) where there are any."""
        got = self.wire.back(pending.got, pending.dtype)
        if pending.place is None:
            return got, pending.plan
        rows = np.empty((pending.k, self.width), pending.dtype)
        rows[pending.place] = got
        mask, local = pending.local
        rows[mask] = local
        return rows, pending.plan

    def send_rows(self, comm, pending, out, reply, got, back, what, wait, wire=None):
        """The rows' exchange on comm, reply rows to each rank and back from each, in `wire`'s format (default the
        rows' wire): an Alltoallv (wait), or an Ialltoallv posted, its buffers kept alive on pending until it
        completes."""
        cw = (wire or self.wire).items(self.width)            # a row's items in the wire's buffers
        if wait:
            pending.got = comm.Alltoallv_(out, reply * cw, got, back * cw, what)
        else:
            pending.out, pending.got = out, got
            pending.request = comm.Ialltoallv_(out, reply * cw, got, back * cw, what + " (posted)")

    def send_back(self, plan, grad_rows, wait=True):
        """Every rank's gradient rows (in the order of its fetch's ids) to their owners. Returns, on
        each owner, SparseRows of its rows with one segment per asking rank in rank order (ids unique
        within a segment; .coalesced() sums them in rank order, and SGD applies them in turn, as the
        replicated exchange does: the same arithmetic, element by element). wait=False (--stale-rows 2): the
        Alltoallv posted (an Ialltoallv) and a PendingRows returned, whose wait() gives those SparseRows."""
        w, wire, dtype = self.width, self.grad_wire, grad_rows.dtype
        send = grad_rows if plan.order is None else grad_rows[plan.order]
        pending = PendingRows(self.returned(plan.given, dtype), plan.wanted.shape[0], w, dtype, plan)
        self.send_rows(self.comm, pending, wire.out(send), plan.asked, wire.buffer(plan.wanted.shape[0], w, dtype),
                       plan.given, "gradient rows", wait, wire)
        self._count(plan.asked, wire.row_bytes(w, dtype))
        return pending.wait() if wait else pending

    def returned(self, counts, dtype):
        """PendingRows' finish for gradient rows on their way to this owner: the SparseRows of the plan's ids, one
        segment per sender (`counts` rows each), in the grad wire's format until they arrive."""
        return lambda p: SparseRows(p.plan.wanted, self.grad_wire.back(p.got, dtype), self.n_rows,
                                    displs(np.r_[counts, 0]))

    # ------------------------------------------------------------ the hot rows' replica
    def refresh_hot_(self, table):
        """Every rank's replica of the hot rows takes their owners' values (Allgatherv; after a step)."""
        owners = self.owners
        if not owners.n_hot or self.comm.size == 1:
            return
        mine = owners.hot_of(self.comm.rank)
        got = self.comm.Allgatherv_(np.ascontiguousarray(table[mine]), owners.hot_counts * self.width,
                                    np.empty((owners.n_hot, self.width), table.dtype), "hot rows")
        to_each = np.where(np.arange(self.comm.size) == self.comm.rank, 0, mine.shape[0])
        self._count(to_each, self.width * table.itemsize)
        table[owners.hot_by_owner] = got

    def replicate_hot_(self, table):
        """Every rank's replica of the hot rows takes the values of the ranks whose range holds them
        (at start: each rank made, or was sent, its own range's rows)."""
        owners = self.owners
        if not owners.n_hot or self.comm.size == 1:
            return
        counts = np.diff(np.searchsorted(owners.hot, self.bounds)).astype(np.int64, copy=False)
        mine = owners.hot[(owners.hot >= self.lo) & (owners.hot < self.hi)]
        got = self.comm.Allgatherv_(np.ascontiguousarray(table[mine]), counts * self.width,
                                    np.empty((owners.n_hot, self.width), table.dtype), "hot rows (start)")
        table[owners.hot] = got

    # ------------------------------------------------------------ whole arrays (checkpoints, model files)
    def own(self, flat, per_row):
        """This rank's rows of a per-row array (flat, per_row elements per row): a contiguous view."""
        return flat[self.lo * per_row:self.hi * per_row]

    def gather(self, flat, per_row, out=None, root=0, what="table rows", hot=False):
        """Every rank's own rows of a per-row array (flat: n_rows * per_row elements or more, of which
        each rank's own rows are right) to root, into the first n_rows * per_row elements of `out`
        (root only; a new array if None), which it returns; None elsewhere. hot: the hot rows come
        from their owners (optimizer state, which only they keep); else from the contiguous range
        (the parameters, whose replica every rank keeps)."""
        whole = None
        if self.comm.rank == root:
            whole = (np.empty(self.n_rows * per_row, flat.dtype) if out is None else out)[:self.n_rows * per_row]
        self.comm.Gatherv_(self.own(flat, per_row), self.counts * per_row, whole, root, what)
        if hot and self.owners.n_hot:
            owners, view = self.owners, flat[:self.n_rows * per_row].reshape(self.n_rows, per_row)
            mine = np.ascontiguousarray(view[owners.hot_of(self.comm.rank)])
            got = np.empty((owners.n_hot, per_row), flat.dtype) if whole is not None else None
            self.comm.Gatherv_(mine, owners.hot_counts * per_row, got, root, what + " (hot rows)")
            if whole is not None:
                whole.reshape(self.n_rows, per_row)[owners.hot_by_owner] = got
        return out if out is not None else whole

    def scatter_(self, whole, flat, per_row, root=0, what="table rows", hot=False):
        """Root's whole per-row array (n_rows * per_row elements) into every rank's own rows of flat
        (hot: and into the hot rows' owners' rows, see gather)."""
        send = np.ascontiguousarray(whole).reshape(-1)[:self.n_rows * per_row] if self.comm.rank == root else None
        self.comm.Scatterv_(send, self.counts * per_row, self.own(flat, per_row), root, what)
        if hot and self.owners.n_hot:
            owners, view = self.owners, flat[:self.n_rows * per_row].reshape(self.n_rows, per_row)
            mine = owners.hot_of(self.comm.rank)
            part = (np.ascontiguousarray(send.reshape(self.n_rows, per_row)[owners.hot_by_owner])
                    if send is not None else None)
            got = np.empty((mine.shape[0], per_row), flat.dtype)
            self.comm.Scatterv_(part, owners.hot_counts * per_row, got, root, what + " (hot rows)")
            view[mine] = got
        return flat


class PendingRows:
    """A fetch on its way (an exchange's post): the request, if any, the buffers it reads and writes (kept alive
    until it completes), the plan, and what the exchange's `finish` needs to make the rows once they have arrived
    (the flat exchange: where the received rows and the hot rows' replica's go, place and local; the node exchange
    sets its own, NodeShards.post)."""

    def __init__(self, finish, k, width, dtype, plan):
        self.finish, self.k, self.width, self.dtype, self.plan = finish, k, width, dtype, plan
        self.request = self.out = self.got = None
        self.place = self.local = None

    def wait(self):
        """What `finish` makes once the rows have arrived: a fetch's (rows (k, width) in ids' order, the plan for
        send_back), a send_back's SparseRows."""
        if self.request is not None:
            self.request.Wait()
        self.request = self.out = None
        return self.finish(self)


def check_owned(owners, wanted, rank):
    """Every id asked of this rank is one it owns (a range check where there are no hot rows)."""
    if not wanted.size:
        return
    if owners.n_hot:
        bad = wanted[owners.of(wanted) != rank]
    else:
        lo, hi = owners.bounds[rank], owners.bounds[rank + 1]
        bad = wanted if wanted.min() < lo or wanted.max() >= hi else wanted[:0]
    if bad.size:
        raise ValueError("row ids %d..%d asked of rank %d, which does not own them" % (bad.min(), bad.max(), rank))


def sorted_unique(keys):
    """np.unique(keys) by a sort (numpy's hash-based unique was the slower one here, at thousands of ids)."""
    k = np.sort(keys)
    keep = np.empty(k.shape[0], bool)
    keep[:1] = True
    np.not_equal(k[1:], k[:-1], out=keep[1:])
    return k[keep]


def unique_inverse(keys):
    """(sorted_unique(keys), where each key is in it), by a stable argsort: a relay's keys come as a few sorted runs
    (one per asking rank), which numpy's stable sort merges (3.6x a sort and a search here at 13,200 keys)."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    keep = np.empty(k.shape[0], bool)
    keep[:1] = True
    np.not_equal(k[1:], k[:-1], out=keep[1:])
    where = np.empty(k.shape[0], np.int64)
    where[order] = np.cumsum(keep) - 1
    return k[keep], where


def segment_sums(mask, counts):
    """How many True entries of mask fall in each of the runs of counts laid end to end."""
    ends = np.cumsum(counts)
    c = np.r_[0, np.cumsum(mask, dtype=np.int64)]
    return (c[ends] - c[ends - counts]).astype(np.int64, copy=False)
