"""Communication: the only package that imports mpi4py. create_communicator picks a strategy by name.

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
    node       facts about the job for the doctor
"""
from mpinn.comm.base import Communicator  # noqa: F401
from mpinn.comm.buffers import check_buffer, split_counts  # noqa: F401
from mpinn.config import MpinnError

CPU_TRANSPORTS = ("auto", "shm", "mpi")


def _strategies():
    from mpinn.comm.allreduce import AllreduceCommunicator
    from mpinn.comm.gather import GatherCommunicator
    from mpinn.comm.null import NullCommunicator, TowerCommunicator
    return {"allreduce": AllreduceCommunicator, "gather": GatherCommunicator,
            "null": NullCommunicator, "tower": TowerCommunicator}


def create_communicator(name="allreduce", comm=None, compress=None, device="cpu", transport="auto", **kw):
    """The communicator for a strategy (allreduce, gather, null, tower), on `device` (cpu, gpu, auto)
    with gradients moved by `transport` (CPU: auto, shm, mpi; GPU: auto, nccl, cuda-aware, staged).
    The result's .backend is the array backend its buffers live on, .device_note says where the
    run computes, .transport_note how gradients travel. The option combinations that do not go
    together were refused before (the rule table, mpinn.settings.rules)."""
    strategies = _strategies()
    if name not in strategies:
        raise MpinnError("--reduce must be one of %s, not %r" % ("|".join(strategies), name), collective=True)
    from mpinn.backend import get_backend
    note = "cpu (numpy)"
    if device != "cpu" or transport not in CPU_TRANSPORTS:
        from mpinn.comm.gpu import choose_device, device_communicator
        backend, note = choose_device(name, comm, device, transport, compress)
        if backend.name != "numpy":
            return device_communicator(comm, backend, note, transport, **kw)
        transport = "auto"          # computing on the CPU after all: the CPU's own choice
    if compress:
        kw["compress"] = compress
    c = strategies[name](comm, **kw)
    c.backend, c.device_note = get_backend("numpy"), note
    if name == "allreduce":
        how = c.choose_transport(transport)
        if how == "mpi":
            c.transport_note = "MPI_Allreduce"
        elif c.shared.nodes == 1:
            c.transport_note = "summed in shared memory (every rank on one node; --comm mpi for MPI_Allreduce)"
        else:
            c.transport_note = ("summed in shared memory on each node, then MPI_Allreduce among the %d nodes' "
                                "first ranks (--comm mpi for one flat MPI_Allreduce)" % c.shared.nodes)
    return c
