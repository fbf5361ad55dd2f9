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
  return  the gradient rows go the same way, each rank's rows kept apart (unsummed, with their ids and a
          count per asking rank), so that each owner sums every rank's rows in world-rank order: the same
          arithmetic as the flat exchange and the replicated table, bit for bit.
Hot rows (RowOwners.hot) travel as in the flat exchange: their ids route gradient rows, their values
are never fetched.

Every node must have the same number of ranks (the relays of local index l form one communicator,
one per node); choose_exchange falls back to the flat exchange, and says why, where they do not."""
import numpy as np

from mpinn.batch import SparseRows
from mpinn.comm.base import Communicator
from mpinn.comm.buffers import displs
from mpinn.comm.shard import ID, TableShards, check_owned, segment_sums


class NodePlan:
    def __init__(self, order, sent, got_counts, ids_in, dest):
        self.order, self.sent, self.got_counts = order, sent, got_counts
        self.ids_in, self.dest = ids_in, dest


class NodeShards(TableShards):
    """TableShards' fetch and send_back through the node's relays (see the module's docstring). `node`:
    an mpi4py communicator of this rank's node (MPI's shared-memory split unless given: the tests pass
    blocks of ranks as "nodes")."""

    name = "node"

    def __init__(self, comm, n_rows, width, owners=None, node=None, layout=None):
        layout = layout or node_layout(comm, node)
        if layout["uneven"]:
            raise ValueError(layout["uneven"])
        super().__init__(comm, n_rows, width, owners, node_of=layout["node_of"])
        self.node, self.peers = layout["node"], layout["peers"]         # mpinn Communicators
        self.node_of, self.local_of, self.world_at = layout["node_of"], layout["local_of"], layout["world_at"]
        self.N, self.R = self.world_at.shape
        # segments arrive at an owner node-major (node n, local rank s); the flat exchange's are in world order
        self.world_order = np.argsort(self.world_at.reshape(-1), kind="stable")

    def fetch(self, table, ids):
        owners, w, node, peers = self.owners, self.width, self.node, self.peers
        owner = owners.of(ids)
        relay = self.local_of[owner]
        order = np.argsort(relay, kind="stable")               # by relay, each group sorted
        sent = np.bincount(relay, minlength=self.R).astype(np.int64)
        # 1. ids to the relays, inside the node
        got_counts = node.Alltoall_(sent, np.empty(self.R, np.int64), "row id counts (node)")
        ids_in = node.Alltoallv_(np.ascontiguousarray(ids[order], ID), sent, np.empty(int(got_counts.sum()), ID),
                                 got_counts, "row ids (node)")
        self._count_node(np.ones(self.R, np.int64), 8)
        self._count_node(sent, 8)
        # 2. the node's distinct rows, from the owners on every node
        dest = self.node_of[owners.of(ids_in)]
        cold = ~owners.hot_mask(ids_in)
        uniq, inv = np.unique(ids_in[cold], return_inverse=True)
        udest = self.node_of[owners.of(uniq)]
        uorder = np.argsort(udest, kind="stable")
        ask = np.bincount(udest, minlength=self.N).astype(np.int64)
        give = peers.Alltoall_(ask, np.empty(self.N, np.int64), "row id counts (between nodes)")
        self._count_peers(np.ones(self.N, np.int64), 8)
        wanted = peers.Alltoallv_(np.ascontiguousarray(uniq[uorder]), ask, np.empty(int(give.sum()), ID), give,
                                  "row ids (between nodes)")
        self._count_peers(ask, 8)
        check_owned(owners, wanted, self.comm.rank)
        urows = peers.Alltoallv_(np.take(table, wanted, axis=0), give * w, np.empty((uniq.shape[0], w), table.dtype),
                                 ask * w, "table rows (between nodes)")
        self._count_peers(give, w * table.itemsize)
        rows_u = np.empty_like(urows)
        rows_u[uorder] = urows
        # 3. each rank its rows, inside the node
        reply = segment_sums(cold, got_counts)
        need = ~owners.hot_mask(ids)
        back = np.bincount(relay[need], minlength=self.R).astype(np.int64)
        got = node.Alltoallv_(rows_u[inv], reply * w, np.empty((int(back.sum()), w), table.dtype), back * w,
                              "table rows (node)")
        self._count_node(reply, w * table.itemsize)
        rows = np.empty((ids.shape[0], w), table.dtype)
        rows[order[need[order]]] = got
        rows[~need] = table[ids[~need]]
        return rows, NodePlan(order, sent, got_counts, ids_in, dest)

    def send_back(self, plan, grad_rows):
        w, node, peers, N, R = self.width, self.node, self.peers, self.N, self.R
        # 1. every rank's gradient rows to the relays, inside the node (the fetch's counts)
        rows_in = node.Alltoallv_(np.ascontiguousarray(grad_rows[plan.order]), plan.sent * w,
                                  np.empty((plan.ids_in.shape[0], w), grad_rows.dtype), plan.got_counts * w,
                                  "gradient rows (node)")
        self._count_node(plan.sent, w * grad_rows.itemsize)
        # 2. to the owners' nodes, each asking rank's rows apart: (destination node, asking local rank)
        source = np.repeat(np.arange(R), plan.got_counts)
        fwd = np.argsort(plan.dest, kind="stable")              # by node; within, by asking rank, then id
        per = np.bincount(plan.dest * R + source, minlength=N * R).astype(np.int64)
        per_in = peers.Alltoall_(per, np.empty(N * R, np.int64), "gradient row counts (between nodes)")
        self._count_peers(np.full(N, R, np.int64), 8)
        send_n, recv_n = per.reshape(N, R).sum(1), per_in.reshape(N, R).sum(1)
        ids = peers.Alltoallv_(np.ascontiguousarray(plan.ids_in[fwd]), send_n, np.empty(int(recv_n.sum()), ID),
                               recv_n, "gradient row ids (between nodes)")
        self._count_peers(send_n, 8)
        got = peers.Alltoallv_(np.ascontiguousarray(rows_in[fwd]), send_n * w,
                               np.empty((ids.shape[0], w), grad_rows.dtype), recv_n * w,
                               "gradient rows (between nodes)")
        self._count_peers(send_n, w * grad_rows.itemsize)
        # the asking ranks' segments in world-rank order, as the flat exchange delivers them
        starts = displs(per_in)
        seg = self.world_order
        take = np.concatenate([np.arange(starts[j], starts[j] + per_in[j]) for j in seg] + [np.empty(0, np.int64)])
        return SparseRows(ids[take], got[take], self.n_rows, displs(np.r_[per_in[seg], 0]))

    def _count_node(self, counts, itemsize):
        """An exchange inside the node: nothing crosses the network."""
        self.traffic.add(counts, itemsize, np.zeros(self.R, dtype=bool), self.node.rank)

    def _count_peers(self, counts, itemsize):
        """A between-nodes collective: every peer but this rank's own node is another node."""
        off = np.ones(self.N, dtype=bool)
        off[self.peers.rank] = False
        self.traffic.add(counts, itemsize, off, self.peers.rank)


def node_layout(comm, node=None):
    """Where every rank sits: {node, peers (mpinn Communicators), node_of, local_of (per world rank),
    world_at (N x R: the world rank of each node's l-th rank)}. Collective. Nodes are numbered by
    their first rank. Where the nodes hold different numbers of ranks, only node_of and nodes, and
    `uneven` says so (the same on every rank)."""
    from mpi4py import MPI
    mine = node if node is not None else comm.comm.Split_type(MPI.COMM_TYPE_SHARED)
    local, size = mine.Get_rank(), mine.Get_size()
    first = mine.allreduce(comm.rank, op=MPI.MIN)
    where = np.array(comm.allgather_obj((first, local, size)), dtype=np.int64)
    firsts = np.unique(where[:, 0])
    node_of = np.searchsorted(firsts, where[:, 0]).astype(np.int64)
    out = {"node_of": node_of, "nodes": int(firsts.size), "uneven": None, "node": None, "peers": None}
    if (where[:, 2] != where[0, 2]).any():
        out["uneven"] = "the nodes hold different numbers of ranks (%s)" % ", ".join(
            str(s) for s in sorted(set(where[:, 2].tolist())))
    else:
        local_of = where[:, 1].copy()
        world_at = np.empty((firsts.size, int(where[0, 2])), np.int64)
        world_at[node_of, local_of] = np.arange(comm.size)
        peers = comm.comm.Split(local, int(node_of[comm.rank]))
        out.update(node=Communicator(mine), peers=Communicator(peers), local_of=local_of, world_at=world_at)
        peers.Free()
    if node is None:
        mine.Free()
    return out
