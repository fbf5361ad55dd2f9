"""Facts about the job for mpinn.doctor: the MPI library, the host, the ranks that share it."""
from mpi4py import MPI


def mpi_library_version():
    """The MPI library's own first version line, e.g. 'MPICH Version: 5.0.2' or 'Open MPI v5.0.11, ...'."""
    return MPI.Get_library_version().strip().splitlines()[0].strip()


def mpi4py_version():
    import mpi4py
    return mpi4py.__version__


def processor_name():
    """The host name MPI itself reports for this rank."""
    return MPI.Get_processor_name()


def local_rank_size(comm):
    """(rank, size) among the ranks of `comm` (an mpinn Communicator or an mpi4py communicator) that
    share this rank's machine: MPI's own shared-memory split, right under any launcher (no
    launcher-specific environment variables)."""
    local = getattr(comm, "comm", comm).Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_rank(), local.Get_size()
    finally:
        local.Free()
