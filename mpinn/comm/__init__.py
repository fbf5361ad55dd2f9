"""Communication: the only package that imports mpi4py. create_communicator builds a strategy by name.

    buffers    the boundary check of every buffer MPI touches; rows per rank
    base       Communicator: checked typed collectives, batch scatter, the sparse-row exchange
    batches    a batch on its way (Iscatterv requests and their buffers)
    allreduce  --reduce allreduce (MPI, or shm / compress / overlap below)
    shm        gradients summed in a shared-memory window; one parameter copy per node
    compress   --compress fp16|bf16
    overlap    --overlap: Iallreduce buckets during backward
    gather     --reduce gather (rank 0 steps, then Bcast)
    null       null (no exchange) and tower (a replica per rank)
    gpu        GPU buffers: nccl, cuda-aware, staged
    guard      ending a job on an error or a hang (fail, run_guarded, Watchdog)
    topology   the job's shape, probed once (nodes, memory, shared memory, GPUs); the node communicators
    timing     collectives timed across the ranks: the network probe (mpinn.bench.netprobe, the lab's)
    node       facts about the MPI library and the launcher, for the doctor
"""
from mpinn.comm.allreduce import AllreduceCommunicator
from mpinn.comm.base import Communicator  # noqa: F401
from mpinn.comm.buffers import check_buffer, split_counts  # noqa: F401
from mpinn.comm.gather import GatherCommunicator
from mpinn.comm.gpu import DeviceAllreduceCommunicator
from mpinn.comm.null import NullCommunicator, TowerCommunicator
from mpinn.device.backend import get_backend

STRATEGIES = ("allreduce", "gather", "null", "tower")


def create_communicator(name="allreduce", comm=None, transport="mpi", sparse_threshold=0.25, compress=None,
                        topology=None, backend=None, dup=True):
    """The communicator `name` (allreduce, gather, null, tower) over a duplicate of comm (default MPI_COMM_WORLD),
    its gradients moved by `transport`: mpi or shm (a shared-memory window per node, built from `topology`, see
    mpinn.comm.topology) for host buffers; nccl, cuda-aware or staged for the GPU `backend` (bound by the probe),
    none for one rank's GPU (nothing travels).
    dup=False: comm is mpinn's own already (a job's duplicate), used as it is. Nothing is decided here:
    mpinn.settings.plan decides, and mpinn.training.build asks for what it decided."""
    if name not in STRATEGIES:
        raise ValueError("no communicator %r (one of %s)" % (name, ", ".join(STRATEGIES)))
    if transport in ("nccl", "cuda-aware", "staged") or (name == "allreduce" and transport == "none"
                                                          and backend is not None and backend.device is not None):
        return DeviceAllreduceCommunicator(comm, backend or get_backend("cupy"), transport,
                                           sparse_threshold=sparse_threshold, dup=dup)
    if name == "allreduce":
        c = AllreduceCommunicator(comm, compress=compress, sparse_threshold=sparse_threshold, dup=dup)
        if transport == "shm":
            c.share_memory_(topology)
    elif name == "gather":
        c = GatherCommunicator(comm, sparse_threshold=sparse_threshold, dup=dup)
    else:
        c = (TowerCommunicator if name == "tower" else NullCommunicator)(comm, sparse_threshold=sparse_threshold,
                                                                         dup=dup)
    c.backend = backend or get_backend("numpy")
    return c
