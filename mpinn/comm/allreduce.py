"""--reduce allreduce: one Allreduce(SUM) of the flat gradient buffer (MPI, a shared-memory window, or 16-bit words)."""
import numpy as np
from mpi4py import MPI

from mpinn.comm.base import Communicator
from mpinn.comm.compress import Compressed16
from mpinn.comm.overlap import OverlappedReduce
from mpinn.comm.shm import SharedGradients
from mpinn.comm.topology import node_comms


class AllreduceCommunicator(Communicator):
    """One Allreduce(SUM) of the flat gradient buffer; every rank then applies the same step.
    With compress="fp16" or "bf16", the dense part travels as 16-bit words (see Compressed16)."""

    name = "allreduce"

    def __init__(self, comm=None, compress=None, **kw):
        super().__init__(comm, **kw)
        self.compressed = Compressed16(self, compress) if compress else None
        self.compress = compress
        self.shared, self.transport = None, "mpi"

    def share_memory_(self, topology):
        """Gradients summed in shared memory on each node (SharedGradients; across nodes, one MPI_Allreduce among
        the nodes' first ranks), on the node communicators built from the job's topology (collective)."""
        node, leaders, peers = node_comms(self.comm, topology, peers=topology.nodes > 1)
        # the ranks with the same place on every node, when every node has as many ranks: they complete each
        # other's parts of a node's one parameter copy (training.steps.SharedStep)
        self.shared = SharedGradients(node, None if leaders == MPI.COMM_NULL else leaders, topology.nodes, peers)
        self.transport = "shm"

    def adopt_(self, model):
        """With shared memory, the model's gradient buffer becomes this rank's slot of the window (the plan
        checked that /dev/shm has room for the node's slots)."""
        if self.shared is not None:
            model.use_grad_buffer(self.shared.slot(model.grad_buffer.size, model.grad_buffer.dtype))

    def release_(self, model, params=None):
        """After training: the model's parameters copied out of shared memory into its own array (or `params`, an
        array of this rank's own holding the parameters it will keep, taken as they are: no second copy), its
        gradients a fresh zeroed buffer (the last step's are not kept), and the windows freed (collectively), so
        that the returned model is this rank's alone and repeated training in one process does not pile up shared
        memory."""
        if self.shared is None:
            return
        if self.shared.holds(model.grad_buffer):
            model.use_grad_buffer(np.zeros(model.grad_buffer.shape, model.grad_buffer.dtype), move=False)
        if model.params is self.shared.params:
            model.use_param_buffer(params if params is not None else np.array(model.params))
        self.shared.free()
        self.shared, self.transport = None, "mpi"

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
