"""Communicators that move no gradients: null (compute alone, for benchmarks) and tower (a replica per rank)."""
import numpy as np

from mpinn.comm.base import Communicator
from mpinn.comm.buffers import check_buffer


class NullCommunicator(Communicator):
    """No communication at all: each rank steps on its own gradient (to measure compute alone)."""

    name = "null"

    def reduce_gradients_(self, grad_buffer, sparse=None):
        return sparse


class TowerCommunicator(NullCommunicator):
    """Tower mode: every rank trains its own replica, so no gradient travels; but the ranks still
    agree on skipping a step, so that they stay in lockstep and stop together."""

    name = "tower"

    def agree_(self, ok):
        flag = np.array([0 if ok else 1], dtype=np.int64)
        return not self.Allreduce_sum_(flag, "step verdicts")[0]

    def Gather_(self, send, root=0, what="Gather"):
        """Every rank's equal-sized buffer stacked on root as (size, n) (None elsewhere)."""
        check_buffer(send, send.dtype, send.size, what + " send buffer")
        recv = np.empty((self.size, send.size), dtype=send.dtype) if self.rank == root else None
        self.comm.Gather(send, recv, root=root)
        return recv
