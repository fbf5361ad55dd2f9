"""--reduce gather (the DT42 pattern): gradients gathered to rank 0, which steps and broadcasts the parameters."""
import numpy as np

from mpinn.comm.base import Communicator
from mpinn.comm.buffers import check_buffer


class GatherCommunicator(Communicator):
    """The DT42 pattern: Gather gradients to rank 0, which sums them in rank order and steps;
    then rank 0 Bcasts the parameters."""

    name = "gather"
    wants_dense = True

    def __init__(self, comm=None, **kw):
        super().__init__(comm, **kw)
        self.updates_here = self.rank == 0
        self._recv = None

    def reduce_gradients_(self, grad_buffer, sparse=None):
        assert sparse is None, "the gather strategy moves dense gradients"
        check_buffer(grad_buffer, grad_buffer.dtype, grad_buffer.size, "gradient buffer")
        if self.rank == 0:
            if self._recv is None or self._recv.shape[1] != grad_buffer.size:
                self._recv = np.empty((self.size, grad_buffer.size), dtype=grad_buffer.dtype)
            check_buffer(self._recv, grad_buffer.dtype, self.size * grad_buffer.size, "gathered gradients")
            self.comm.Gather(grad_buffer, self._recv, root=0)
            grad_buffer[...] = self._recv[0]
            for r in range(1, self.size):
                grad_buffer += self._recv[r]
        else:
            self.comm.Gather(grad_buffer, None, root=0)
        return None

    def sync_params_(self, params):
        self.Bcast_(params, root=0, what="parameters")

    def agree_(self, ok):
        """Only rank 0 holds the reduced gradient: it tells the others."""
        flag = np.array([1 if ok else 0], dtype=np.int64)
        self.Bcast_(flag, root=0, what="step verdict")
        return bool(flag[0])
