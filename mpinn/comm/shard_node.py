"""The node-aware exchange for the sharded table (--shard-exchange node): the same fetch and send_back as
the flat exchange (mpinn.comm.shard.TableShards), in two levels, so that what crosses the network
between two nodes is one message per rank pair of equal local rank, with the node's requests combined.

With N nodes of R ranks each, rank (n, l) is the l-th rank of node n. Rows owned by ranks of local index
l (on any node) are handled, on every node, by its local rank l, the "relay":
  fetch   1. inside the node: each rank sends each of its ids to the relay of the id's owner
          2. between nodes: each relay removes the duplicates among its node's ids (a row that several of
             the node's ranks need is asked for, and sent, once) and exchanges them with the relays of
             the same local index on the other nodes, which own them: N - 1 messages, not N x R
          3. inside the node: the relay hands each rank its rows
          (the ids between nodes go once per node where the node sums its gradient rows; elsewhere once per
          asking rank, with a count per asking rank: they route each rank's gradient rows back)
  return  every rank's gradient rows to its relays, inside the node; each relay sums its node's rows for one
          row id in the canonical tree (mpinn.core.batch.coalesce: the node's ranks are one subtree when they
          are a power of two of consecutive world ranks, topology.unsummable) and sends the owner one row per
          distinct id a node; the owner sums the nodes' rows in the rest of the tree: the flat exchange's and
          the replicated table's bits. A hot row's gradient crosses once per node, not once per rank. Other
          placements send each rank's rows apart (unsummed), which the owner sums in the same tree. With
          --wire-rows bf16 the relay's sum is rounded again as it crosses (the one arithmetic that differs
          from the flat exchange's). Between nodes: 4 exchanges a step, as the flat exchange.
Hot rows (RowOwners.hot) travel as in the flat exchange: their ids route gradient rows, their values
are never fetched.

Every node must have the same number of ranks (the relays of local index l form one communicator,
one per node); the plan (mpinn.settings.plan.choose_exchange) keeps the flat exchange, and says why, where
they do not."""
import numpy as np
from mpi4py import MPI

from mpinn.core.batch import SparseRows, coalesce
from mpinn.comm.base import Communicator
from mpinn.comm.buffers import displs
from mpinn.comm.shard import PendingRows, TableShards, check_owned, segment_sums, sorted_unique, unique_inverse
from mpinn.comm.topology import node_comms


class NodePlan:
    def __init__(self, order, sent, got_counts, fwd, per, per_in, n_in, wanted, key_in):
        self.order, self.sent, self.got_counts = order, sent, got_counts     # inside the node
        self.fwd, self.per, self.per_in, self.n_in = fwd, per, per_in, n_in  # between nodes
        self.wanted = wanted        # the ids this rank owns that it was asked for, as they arrived
        self.key_in = key_in        # summed in the node: the relay's ids as (owner's node) x n_rows + id, as they came


class NodeShards(TableShards):
    """TableShards' fetch and send_back through the node's relays (see the module's docstring), on the nodes of
    `topology` (mpinn.comm.topology: every node with as many ranks; the tests cut one machine into 'nodes')."""

    name = "node"

    def __init__(self, comm, n_rows, width, owners=None, topology=None, wire="fp32", sum_rows=coalesce, codecs=None):
        if topology.uneven:
            raise ValueError(topology.uneven)
        super().__init__(comm, n_rows, width, owners, node_of=topology.node_of, wire=wire, codecs=codecs)
        node, leaders, peers = node_comms(comm, topology, peers_by_node=True)
        self.node, self.peers = Communicator(node), Communicator(peers)             # mpinn Communicators (Dups)
        for c in (node, leaders, peers):
            if c != MPI.COMM_NULL:
                c.Free()
        self.node_of, self.local_of = np.asarray(topology.node_of), np.asarray(topology.local_of)
        self.world_at = topology.world_at
        self.N, self.R = self.world_at.shape
        # segments arrive at an owner node-major (node n, local rank s); the flat exchange's are in world order
        self.world_order = np.argsort(self.world_at.reshape(-1), kind="stable")
        self.unsummed_why = topology.unsummable        # None: gradient rows summed in the node
        self.sum_rows = sum_rows        # batch.coalesce, or its kernel (the step passes mpinn.optim.fused.coalesce_rows)

    def free(self):
        """Collective: the node and peer communicators are freed; from here on the exchange is the flat one (the
        same rows, for evaluation after training)."""
        if self.node is not None:
            for c in (self.node, self.peers):
                c.comm.Free()
            self.node = self.peers = None

    def fetch(self, table, ids):
        """Four exchanges between nodes, as the flat exchange makes (counts, ids, rows, and send_back's
        gradient rows), each with N - 1 peers; the rows once per node. Where the node sums its gradient rows,
        the ids go once per node too, with one count; elsewhere once per asking rank, with a count per asking
        rank (N x R integers), since they route each rank's gradient rows back."""
        return self.post(table, ids, wait=True).wait()

    def post(self, table, ids, wait=False):
        """fetch, its rows' exchange between nodes posted and not waited for (wait=False: an Ialltoallv; --stale-rows
        1): the owners' rows and this rank's replica of the hot rows are read from `table` now, as TableShards.post
        does; the counts and the ids travel at once; the rows' hand-out inside the node (4.) is the wait's."""
        if self.node is None:
            return TableShards.post(self, table, ids, wait)
        owners, w, node, peers, N, R = self.owners, self.width, self.node, self.peers, self.N, self.R
        wire, ID = self.wire, self.wire.ids
        owner, hot_ids = owners.locate(ids)
        relay = self.local_of[owner]
        order = np.argsort(relay, kind="stable")               # by relay, each group sorted
        sent = np.bincount(relay, minlength=R).astype(np.int64, copy=False)
        # 1. ids to the relays, inside the node
        got_counts = node.Alltoall_(sent, np.empty(R, np.int64), "row id counts (node)")
        ids_in = node.Alltoallv_(np.ascontiguousarray(ids[order], ID), sent, np.empty(int(got_counts.sum()), ID),
                                 got_counts, "row ids (node)")
        self._count_node(np.ones(R, np.int64), 8)
        self._count_node(sent, wire.id_bytes)
        # 2. to the owners' nodes
        ids_in = ids_in.astype(np.int64, copy=False)
        owner_in, hot_in = owners.locate(ids_in)
        dest = self.node_of[owner_in]
        fwd = np.argsort(dest, kind="stable")
        key_in = dest * self.n_rows + ids_in
        distinct, inv = unique_inverse(key_in)          # the node's distinct (owner's node, id) keys
        summed = self.unsummed_why is None
        if summed:                          # the node's distinct ids, once each: their gradient rows come summed
            per, per_in, wanted = self._distinct_ids_across(distinct)
            recv_n = per_in
        else:                               # grouped by (node, asking rank), each group sorted: they route them
            source = np.repeat(np.arange(R), got_counts)
            per = np.bincount(dest * R + source, minlength=N * R).astype(np.int64, copy=False)
            per_in = peers.Alltoall_(per, np.empty(N * R, np.int64), "row id counts (between nodes)")
            self._count_peers(np.full(N, R, np.int64), 8)
            send_n, recv_n = per.reshape(N, R).sum(1), per_in.reshape(N, R).sum(1)
            wanted = peers.Alltoallv_(np.ascontiguousarray(ids_in[fwd], ID), send_n, np.empty(int(recv_n.sum()), ID),
                                      recv_n, "row ids (between nodes)").astype(np.int64, copy=False)
            self._count_peers(send_n, wire.id_bytes)
        check_owned(owners, wanted, self.comm.rank)
        # 3. the owners answer each node once per row: the node's distinct cold ids, in (node, id) order (summed:
        # as they came, one sorted run of distinct ids a node); the relay knows the same sets from what it sent
        asked_by = np.repeat(np.arange(N), recv_n)
        cold = ~owners.hot_mask(wanted)
        answer = asked_by[cold] * self.n_rows + wanted[cold]
        if not summed:
            answer = sorted_unique(answer)
        give = np.bincount(answer // self.n_rows, minlength=N).astype(np.int64, copy=False)
        pos = fwd[~hot_in[fwd]]             # the cold entries of ids_in, in forwarding order
        keys, where = distinct, inv[pos]    # the rows asked for: the distinct cold keys; each entry's among them
        if owners.n_hot:                    # a key is hot where its entries are (inv: entry -> key)
            cold_keys = np.ones(distinct.shape[0], bool)
            cold_keys[inv[hot_in]] = False
            keys, where = distinct[cold_keys], (np.cumsum(cold_keys) - 1)[where]
        ask = np.bincount(keys // self.n_rows, minlength=N).astype(np.int64, copy=False)
        pending = PendingRows(self.hand_out, ids.shape[0], w, table.dtype, NodePlan(
            order, sent, got_counts, fwd, per, per_in, ids_in.shape[0], wanted, key_in if summed else None))
        # for the hand-out: where each received row goes among the relay's ids (where, pos), which of this rank's
        # ids were fetched (need; the others are hot, their rows the replica's as posted: local), rows a relay
        pending.where, pending.pos = where, pos
        pending.need = ~hot_ids
        pending.back = np.bincount(relay[pending.need], minlength=R).astype(np.int64, copy=False)
        pending.local = wire.round(table[ids[~pending.need]])          # the replica's rows, copied now
        self.send_rows(peers, pending, wire.take(table, answer % self.n_rows), give,
                       wire.buffer(keys.shape[0], w, table.dtype), ask, "table rows (between nodes)", wait)
        self._count_peers(give, wire.row_bytes(w, table.dtype))
        return pending

    def hand_out(self, pending):
        """4. each rank its rows, inside the node (as they came: rounded once, by the owner): PendingRows.wait's
        (rows in ids' order, the NodePlan); collective in the node."""
        w, wire, plan, dtype = self.width, self.wire, pending.plan, pending.dtype
        rows_in = wire.buffer(plan.n_in, w, dtype)
        rows_in[pending.pos] = pending.got[pending.where]
        cold_in = np.zeros(plan.n_in, bool)
        cold_in[pending.pos] = True
        reply = segment_sums(cold_in, plan.got_counts)
        cw = wire.items(w)
        got = self.node.Alltoallv_(rows_in[cold_in], reply * cw, wire.buffer(int(pending.back.sum()), w, dtype),
                                   pending.back * cw, "table rows (node)")
        self._count_node(reply, wire.row_bytes(w, dtype))
        rows = np.empty((pending.k, w), dtype)
        rows[plan.order[pending.need[plan.order]]] = wire.back(got, dtype)
        rows[~pending.need] = pending.local
        return rows, plan

    def send_back(self, plan, grad_rows, wait=True):
        """TableShards.send_back in two levels: inside the node at once (and the relay's sum); between nodes an
        Alltoallv, or (wait=False) an Ialltoallv posted, a PendingRows returned whose wait() gives the SparseRows."""
        if self.node is None:
            return TableShards.send_back(self, plan, grad_rows, wait)
        w, node, peers, N, R, wire = self.width, self.node, self.peers, self.N, self.R, self.grad_wire
        dtype = grad_rows.dtype
        row_bytes, cw = wire.row_bytes(w, dtype), wire.items(w)
        # 1. every rank's gradient rows to the relays, inside the node (the fetch's counts; rounded once, here)
        rows_in = node.Alltoallv_(wire.out(grad_rows[plan.order]), plan.sent * cw,
                                  wire.buffer(plan.n_in, w, dtype), plan.got_counts * cw, "gradient rows (node)")
        self._count_node(plan.sent, row_bytes)
        if self.unsummed_why is None:
            pending = self._summed_back(plan, rows_in, dtype, wait)
            return pending.wait() if wait else pending
        # 2. to the owners, as the ids went (each asking rank's rows apart)
        send_n, recv_n = plan.per.reshape(N, R).sum(1), plan.per_in.reshape(N, R).sum(1)

        def arrived(p):     # the asking ranks' segments in world-rank order, as the flat exchange delivers them
            got, starts, seg = wire.back(p.got, dtype), displs(plan.per_in), self.world_order
            take = np.concatenate([np.arange(starts[j], starts[j] + plan.per_in[j]) for j in seg]
                                  + [np.empty(0, np.int64)])
            return SparseRows(plan.wanted[take], got[take], self.n_rows, displs(np.r_[plan.per_in[seg], 0]))
        pending = PendingRows(arrived, plan.wanted.shape[0], w, dtype, plan)
        self.send_rows(peers, pending, np.ascontiguousarray(rows_in[plan.fwd]), send_n,
                       wire.buffer(int(recv_n.sum()), w, dtype), recv_n, "gradient rows (between nodes)", wait, wire)
        self._count_peers(send_n, row_bytes)
        return pending.wait() if wait else pending

    def _distinct_ids_across(self, keys):
        """The relay's distinct (owner's node, id) keys (sorted, unique) to the owners, one count and one id each
        between a pair of nodes: (ids sent to each node, ids received from each, those ids: one sorted run per
        node)."""
        N, n_rows, ID = self.N, self.n_rows, self.wire.ids
        send_n = np.bincount(keys // n_rows, minlength=N).astype(np.int64, copy=False)
        recv_n = self.peers.Alltoall_(send_n, np.empty(N, np.int64), "row id counts (between nodes)")
        self._count_peers(np.ones(N, np.int64), 8)
        wanted = self.peers.Alltoallv_(np.ascontiguousarray(keys % n_rows, ID), send_n, np.empty(int(recv_n.sum()), ID),
                                       recv_n, "row ids (between nodes)").astype(np.int64, copy=False)
        self._count_peers(send_n, self.wire.id_bytes)
        return send_n, recv_n, wanted

    def _summed_back(self, plan, rows_in, dtype, wait):
        """2. the relay sums its node's rows for each (owner's node, id) over the node's ranks (leaves in
        local-rank order: a subtree of world ranks) and sends each owner one row per id; the owner's segments,
        one per node in node order, are the tree's next level (SparseRows.coalesced). A PendingRows (posted where
        not wait) whose wait() gives them."""
        w, N, n_rows, wire = self.width, self.N, self.n_rows, self.grad_wire
        vals, ends = wire.back(rows_in, dtype), displs(np.r_[plan.got_counts, 0])
        summed = self.sum_rows([(plan.key_in[a:b], vals[a:b]) for a, b in zip(ends[:-1], ends[1:])], n_rows * N, w,
                               dtype)
        # one row per key the fetch sent (plan.per: per node), arriving as its ids did (plan.wanted, plan.per_in)
        pending = PendingRows(self.returned(plan.per_in, dtype), plan.wanted.shape[0], w, dtype, plan)
        self.send_rows(self.peers, pending, wire.out(summed.rows), plan.per,
                       wire.buffer(plan.wanted.shape[0], w, dtype), plan.per_in,
                       "gradient rows summed in the node (between nodes)", wait, wire)
        self._count_peers(plan.per, wire.row_bytes(w, dtype))
        return pending

    def _count_node(self, counts, itemsize):
        """An exchange inside the node: nothing crosses the network."""
        self.traffic.add(counts, itemsize, np.zeros(self.R, dtype=bool), self.node.rank)

    def _count_peers(self, counts, itemsize):
        """A between-nodes collective: every peer but this rank's own node is another node."""
        off = np.ones(self.N, dtype=bool)
        off[self.peers.rank] = False
        self.traffic.add(counts, itemsize, off, self.peers.rank)
