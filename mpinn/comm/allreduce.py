"""--reduce allreduce: one Allreduce(SUM) of the flat gradient buffer (MPI, a shared-memory window, or 16-bit words)."""
import numpy as np
from mpi4py import MPI

from mpinn.comm.base import Communicator
from mpinn.comm.compress import Compressed16
from mpinn.comm.overlap import OverlappedReduce
from mpinn.comm.shm import SharedGradients, shm_room
from mpinn.config import MpinnError


class AllreduceCommunicator(Communicator):
    """One Allreduce(SUM) of the flat gradient buffer; every rank then applies the same step.
    With compress="fp16" or "bf16", the dense part travels as 16-bit words (see Compressed16)."""

    name = "allreduce"

    def __init__(self, comm=None, compress=None, **kw):
        super().__init__(comm, **kw)
        self.compressed = Compressed16(self, compress) if compress else None
        self.compress = compress
        self.shared, self.transport = None, "mpi"

    def choose_transport(self, transport="auto"):
        """--comm for CPU gradients: mpi (MPI_Allreduce), shm (summed in shared memory on each
        node, see SharedGradients; across nodes, one MPI_Allreduce among the nodes' first ranks),
        auto (shm when every rank is on one node, else mpi: across nodes MPICH's Allreduce is
        already node-aware and sends the same bytes, measured). Every rank reaches the same choice."""
        if transport not in ("auto", "shm", "mpi"):     # the rule table refuses it first (gpu-transport)
            raise ValueError("CPU gradients travel by auto, shm or mpi, not %r" % transport)
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        one_node = self.comm.allreduce(int(node.Get_size() == self.size), op=MPI.MIN)
        use = transport == "shm" or (transport == "auto" and one_node and self.size > 1 and self.compressed is None)
        if use:
            leaders = self.comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, self.rank)
            nodes = self.comm.allreduce(int(node.Get_rank() == 0))
            # the ranks with the same place on every node, when every node has as many ranks: they
            # complete each other's parts of a node's one parameter copy (share_params_)
            even = nodes > 1 and self.comm.allreduce(node.Get_size(), op=MPI.MIN) == \
                self.comm.allreduce(node.Get_size(), op=MPI.MAX)
            peers = self.comm.Split(node.Get_rank(), self.rank) if even else None
            self.shared = SharedGradients(node, None if leaders == MPI.COMM_NULL else leaders, nodes, peers)
        else:
            node.Free()
        self.transport, self.transport_asked = ("shm" if use else "mpi"), transport
        return self.transport

    def adopt_(self, model):
        """With shared memory, the model's gradient buffer becomes this rank's slot of the window,
        if every node's shared-memory file system has room for its ranks' slots (a container's
        /dev/shm is often 64 MiB; running out there is a SIGBUS, not an error): otherwise auto
        falls back to MPI_Allreduce and an explicit --comm shm is one clear error."""
        sh = self.shared
        if sh is None:
            return
        need = sh.size * model.grad_buffer.nbytes + (64 << 20)
        room = sh.node.bcast(shm_room() if sh.rank == 0 else None, root=0)
        short = self.comm.allreduce(0 if room is None or room >= need else 1)     # nodes short of room
        if short:
            if self.transport_asked == "shm":
                raise MpinnError("--comm shm: the gradient slots need %.0f MiB of /dev/shm on each node and "
                                 "%d node(s) have less (here %.0f MiB free); give the job more shared memory "
                                 "(docker: --shm-size) or use --comm mpi" % (need / 2**20, short, (room or 0) / 2**20),
                                 collective=True)
            sh.free()
            self.shared, self.transport = None, "mpi"
            self.transport_note = "MPI_Allreduce (/dev/shm has %.0f MiB free on %s, too little for the " \
                                  "shared-memory sum's %.0f MiB)" % (
                                      (room or 0) / 2**20, "this node" if sh.nodes == 1 else "some node",
                                      need / 2**20)
            return
        model.use_grad_buffer(sh.slot(model.grad_buffer.size, model.grad_buffer.dtype))

    def release_(self, model):
        """After training: copy the model's parameters and gradients out of shared memory into its
        own arrays and free the windows (collectively), so that the returned model is this rank's
        alone and repeated training in one process does not pile up shared memory."""
        if self.shared is None:
            return
        if self.shared.holds(model.grad_buffer):
            model.use_grad_buffer(np.zeros_like(model.grad_buffer))
        if model.params is self.shared.params:
            model.use_param_buffer(np.array(model.params))
        self.shared.free()
        self.shared, self.transport = None, "mpi"

    def share_params_(self, model):
        """Collective: on one node with shared-memory gradients, the model's parameters become one
        copy for the node (see SharedGradients.share). False (nothing changed) otherwise."""
        sh = self.shared
        if (sh is None or self.size == 1 or not sh.holds(model.grad_buffer) or sh.size == 1
                or (sh.nodes > 1 and sh.peers is None)):
            return False
        model.use_param_buffer(sh.share(model.params))
        return True

    # the node's one parameter copy (share_params_): each rank sums and steps its own part
    def own_part(self, start, n):
        """(lo, hi): this rank's part of elements start:n (of the gradient buffer, or of table rows)."""
        return self.shared.part(start, n)

    def sum_own_(self, start=0):
        """Sum this rank's part of gradient elements start: over every rank of the node, into this
        rank's buffer only. Returns the part (lo, hi)."""
        return self.shared.sum_own_(start)

    def shared_zeros(self, shape, dtype):
        """A zeroed array held once by the node and shared by its ranks (see SharedGradients.zeros)."""
        return self.shared.zeros(shape, dtype)

    @property
    def node_rank(self):
        return self.shared.rank

    def fence_params(self):
        """Every rank's writes to the shared parameters so far are seen by every rank."""
        self.shared.fence_params()

    def bcast_shared_params_(self):
        """At start: every node's copy of the parameters takes rank 0's (initial or restored)."""
        self.shared.bcast_params_()

    def reduce_gradients_(self, grad_buffer, sparse=None):
        start, reduced = self.rows_or_dense_(grad_buffer, sparse)
        if self.compressed is not None:
            self.compressed.allreduce_sum_(grad_buffer[start:])
        elif self.shared is not None and self.shared.holds(grad_buffer):
            self.shared.allreduce_sum_(start)
        else:
            self.Allreduce_sum_(grad_buffer[start:], "gradient buffer")
        return reduced

    def overlap_(self, grad_buffer, layer_starts, bucket_elems=1 << 16):
        """--overlap: an OverlappedReduce for one step (see there; the rule table keeps --compress and
        GPUs away from it)."""
        return OverlappedReduce(self, grad_buffer, layer_starts, bucket_elems)
