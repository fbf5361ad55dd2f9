"""The job's shape, probed once at start-up (probe): which node each rank is on, memory and shared-memory room,
GPUs and CUDA-aware MPI; the node communicators built from it (node_comms); and the Job a run starts on
(open_job). Nothing else asks MPI where a rank runs."""
import ctypes
import os
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from mpinn.comm.base import Communicator
from mpinn.device.backend import select_backend
from mpinn.host.memory import address_space_limit, mem_available

UNKNOWN_MEMORY = 1 << 62        # a machine that does not say how much memory it has: as good as unlimited
SHM_SLACK = 64 << 20            # /dev/shm kept free beside a shared-memory window


@dataclass(frozen=True)
class Topology:
    """What a job is made of, the same on every rank (probe). Nodes are numbered in the order of their
    first world rank; a rank's place on its node (local) follows world rank order."""
    node_of: tuple              # the node of each world rank
    local_of: tuple             # each world rank's place on its node (0 .. its node's size - 1)
    mem_available: int = UNKNOWN_MEMORY     # the least memory available to any rank (bytes)
    shm_room: tuple = ()        # free bytes in /dev/shm on each node (None: no shared-memory file system to ask)
    devices: tuple = ()         # per rank, probed for --device gpu|auto: see gpu_facts
    cuda_aware: tuple = ()      # per rank: (is its MPI library CUDA-aware?, how that was found); probed for GPUs
    address_space: int = UNKNOWN_MEMORY     # the least address space any rank may map (RLIMIT_AS: ulimit -v; bytes)

    @property
    def size(self):
        return len(self.node_of)

    @property
    def nodes(self):
        return max(self.node_of) + 1 if self.node_of else 1

    @property
    def node_sizes(self):
        return tuple(int(c) for c in np.bincount(self.node_of, minlength=self.nodes))

    @property
    def per_node(self):
        """The most ranks on one node."""
        return max(self.node_sizes)

    @property
    def even(self):
        """Does every node hold as many ranks?"""
        return len(set(self.node_sizes)) == 1

    @property
    def uneven(self):
        """Why the nodes are uneven (for the start-up line and errors), or None."""
        if self.even:
            return None
        sizes = sorted(set(self.node_sizes))
        return "the nodes hold different numbers of ranks (%s)" % ", ".join(str(s) for s in sizes)

    @property
    def all_gpus(self):
        """Was a GPU bound on every rank (--device gpu|auto)?"""
        return bool(self.devices) and all(d[0] not in (None, "numpy") for d in self.devices)

    def gpus_shared(self):
        """[((rank a, rank b), (host, bus))] for each rank b whose GPU an earlier rank a has too."""
        first, out = {}, []
        for r, d in enumerate(self.devices):
            if d[2] is not None:
                if d[2] in first:
                    out.append(((first[d[2]], r), d[2]))
                else:
                    first[d[2]] = r
        return out

    @property
    def world_at(self):
        """(nodes, ranks a node): the world rank of each node's l-th rank (even nodes only)."""
        out = np.empty((self.nodes, self.per_node), np.int64)
        out[list(self.node_of), list(self.local_of)] = np.arange(self.size)
        return out

    @property
    def unsummable(self):
        """Why the node exchange cannot sum the node's gradient rows before they cross (the canonical tree,
        mpinn.core.batch.coalesce, has a node's ranks as one subtree only when they are a power of two of
        consecutive world ranks on a matching boundary), or None."""
        if self.uneven:
            return self.uneven
        R = self.per_node
        if R & (R - 1):
            return "%d ranks a node, not a power of two" % R
        if not np.array_equal(self.world_at.reshape(-1), np.arange(self.size)):
            return "the nodes' ranks are not consecutive blocks of world ranks"
        return None

    def shm_need(self, node, per_rank):
        """Bytes of /dev/shm a window of per_rank bytes for each of its ranks takes on `node`, with some slack."""
        return self.node_sizes[node] * per_rank + SHM_SLACK

    def shm_short(self, per_rank):
        """The nodes whose /dev/shm has no room for such a window (a node that cannot say: room enough)."""
        return [n for n, room in enumerate(self.shm_room) if room is not None and room < self.shm_need(n, per_rank)]

    def node_size(self, rank):
        return self.node_sizes[self.node_of[rank]]

    @classmethod
    def of_nodes(cls, node_of, **facts):
        """The topology of ranks placed on nodes node_of (per world rank; any labels, numbered here by first
        rank): for tests and models that cut one machine into several 'nodes'."""
        labels = list(node_of)
        order = {lab: i for i, lab in enumerate(dict.fromkeys(labels))}
        nodes = [order[lab] for lab in labels]
        seen = {}
        local = []
        for n in nodes:
            local.append(seen.get(n, 0))
            seen[n] = local[-1] + 1
        return cls(tuple(nodes), tuple(local), **facts)


def shm_room(path="/dev/shm"):
    """Free bytes in the shared-memory file system (None where there is none to ask)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def cuda_aware_mpi():
    """(is the MPI library CUDA-aware at run time?, how that was found). MPICH and Open MPI both
    export MPIX_Query_cuda_support (MPICH answers 0 unless built with GPU support and run with
    MPIR_CVAR_ENABLE_GPU on); mpi4py may wrap it, else it is looked up in the loaded library."""
    if os.environ.get("MPIR_CVAR_ENABLE_GPU", "").strip() == "0":
        return False, "MPIR_CVAR_ENABLE_GPU=0"
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        try:
            return bool(query()), "MPI.Query_cuda_support()"
        except Exception:  # noqa: BLE001 - an unimplemented extension: try the symbol
            pass
    try:
        fn = getattr(ctypes.CDLL(MPI.__file__), "MPIX_Query_cuda_support", None)
    except OSError:
        fn = None
    if fn is None:
        return False, "the MPI library has no MPIX_Query_cuda_support"
    fn.restype, fn.argtypes = ctypes.c_int, []
    return bool(fn()), "MPIX_Query_cuda_support()"


def gpu_facts(device, local, nccl=False):
    """This rank's GPU, bound (local rank mod count) before anything is allocated there: (backend name, or None
    where --device gpu found none; the note for the start-up line; the GPU's (host, PCI bus id); why NCCL cannot
    be used, asked only with nccl)."""
    try:
        backend, note = select_backend(device, local)
    except Exception as e:  # noqa: BLE001 - e.g. binding the device failed: reported collectively
        return None, "%s: %s" % (type(e).__name__, e), None, None
    if backend is None or backend.name == "numpy":
        return (None if backend is None else "numpy"), note, None, None
    nccl_error = None
    if nccl:
        try:
            backend.nccl()
        except Exception as e:  # noqa: BLE001 - cupy built without NCCL, or no libnccl
            nccl_error = "%s: %s" % (type(e).__name__, e)
    return backend.name, backend.describe() + ", " + note, tuple(backend.device_key()), nccl_error


def probe(comm, device="cpu", node=None, nccl=False):
    """The Topology of the job on `comm` (an mpinn Communicator or an mpi4py communicator), collectively, once.
    device (--device): for gpu or auto, each rank also binds itself to GPU local rank mod count before anything
    is allocated there (mpinn.device.backend.select_backend) and says whether it could, and every rank's MPI library
    is asked whether it is CUDA-aware (nccl: and whether NCCL loads). node: an mpi4py communicator to take as this rank's node (tests that cut
    one machine into nodes); MPI's shared-memory split otherwise."""
    raw = getattr(comm, "comm", comm)
    mine = node if node is not None else raw.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local = mine.Get_rank()
        first = mine.allreduce(raw.Get_rank(), op=MPI.MIN)
    finally:
        if node is None:
            mine.Free()
    gpu = gpu_facts(device, local, nccl) if device != "cpu" else None
    room = shm_room() if local == 0 else None
    facts = raw.allgather((first, local, mem_available() or UNKNOWN_MEMORY, room, gpu,
                           address_space_limit() or UNKNOWN_MEMORY))
    firsts = sorted({f[0] for f in facts})
    node_of = tuple(firsts.index(f[0]) for f in facts)
    rooms = [None] * len(firsts)
    for f, n in zip(facts, node_of):
        if f[1] == 0:
            rooms[n] = f[3]
    devices = tuple(f[4] for f in facts) if device != "cpu" else ()
    aware = ()
    if any(d[0] not in (None, "numpy") for d in devices):
        aware = tuple(raw.allgather(cuda_aware_mpi()))
    return Topology(node_of, tuple(f[1] for f in facts), min(f[2] for f in facts), tuple(rooms), devices, aware,
                    min(f[5] for f in facts))


def node_comms(comm, topo, peers=True, peers_by_node=False):
    """(node, leaders, peers): mpi4py communicators built from the topology, not probed again. node: this rank's
    node; leaders: the first rank of every node (MPI.COMM_NULL elsewhere); peers: the ranks at this rank's place
    on every node, in world rank order (peers_by_node: in node order), only with peers=True and even nodes (else
    None). The caller frees them."""
    raw = getattr(comm, "comm", comm)
    rank = raw.Get_rank()
    node = raw.Split(topo.node_of[rank], rank)
    leaders = raw.Split(0 if topo.local_of[rank] == 0 else MPI.UNDEFINED, rank)
    peer = None
    if peers and topo.even:
        peer = raw.Split(topo.local_of[rank], topo.node_of[rank] if peers_by_node else rank)
    return node, leaders, peer


@dataclass
class Job:
    """The ranks a run has: a communicator for the start-up's agreements (a duplicate of the one given) and the
    job's topology, probed once; runs: the runs made on it and not yet released (mpinn.training.run.Run)."""
    comm: Communicator
    topology: object
    runs: list = field(default_factory=list)
    closed: bool = False

    @property
    def rank(self):
        return self.comm.rank

    @property
    def size(self):
        return self.comm.size

    def close(self):
        """Collective, once its runs are done, or after an error every rank raised together: what a run left (its
        exchanges' communicators, its shared memory), then the job's communicator, are freed (MPI has only so many).
        Once."""
        while self.runs:
            self.runs.pop().release_()
        if not self.closed:
            self.comm.free()
            self.closed = True


def open_job(comm=None, device="cpu", nccl=False):
    """The Job on an mpi4py communicator (default MPI_COMM_WORLD), probed for `device` (binding each rank to its GPU
    for gpu or auto). Collective. Light on purpose: the entry points open the job before the data is read, and
    the training modules load after it (their imports add to rank 0's peak while it reads)."""
    job_comm = Communicator(comm)
    return Job(job_comm, probe(job_comm, device, nccl=nccl))


def start_size(comm=None):
    """The number of ranks of a run over comm (default MPI_COMM_WORLD)."""
    return (comm if comm is not None else MPI.COMM_WORLD).Get_size()


def start_gather(comm=None):
    """allgather(obj): every rank's obj in rank order, over comm itself (default MPI_COMM_WORLD), for the ranks'
    one agreement before a run opens its job (mpinn.settings.agree). Not a duplicate: the agreement comes first so
    that a rank given other options cannot get further (a duplicate of the communicator is already a collective),
    and a collective every rank makes at the same point of the call matches no message of the caller's."""
    comm = comm if comm is not None else MPI.COMM_WORLD
    return comm.allgather if comm.Get_size() > 1 else (lambda obj: [obj])
