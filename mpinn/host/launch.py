"""What the launcher and the environment give this process: BLAS threads per rank (before numpy loads its BLAS:
nothing here may import numpy at module level), Slurm's tasks on a node, the ranks launched, the umask."""
import os
import re

BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def pin_threads(threads=None):
    """The one BLAS thread policy (call it before numpy loads its BLAS). threads=None: the ranks on a
    machine share its cores (under Slurm: the cores the job was given there) equally, one rank alone
    leaving a core to its reader, unless the user set the variables; an int (the benchmark's 1): exactly
    that many, whatever the environment says."""
    if threads is not None:
        for var in BLAS_THREAD_VARS:
            os.environ[var] = str(int(threads))
        return
    share = blas_share(os.environ, os.cpu_count() or 1)
    if share:
        for var in BLAS_THREAD_VARS:
            os.environ.setdefault(var, str(share))


def blas_share(env, cores):
    """BLAS threads per rank from what the launcher says: the host's cores, or Slurm's SLURM_CPUS_ON_NODE,
    divided by the ranks on this host (hydra's MPI_LOCALNRANKS, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, or
    srun's tasks on this node). A rank alone on its host leaves one core to its reader thread: OpenBLAS's
    threads spin, and with every core theirs the small products of a step wait on them (W4 at np 1 on 2
    cores: 14.9k samples/s with 2 threads on a busy machine, 91.2k with 1)."""
    local = env.get("MPI_LOCALNRANKS") or env.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    local = int(local) if local else slurm_tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE"), env.get("SLURM_NODEID"))
    slurm_cores = env.get("SLURM_CPUS_ON_NODE", "")
    cores = int(slurm_cores) if slurm_cores.isdigit() else cores
    if not local or local == 1:
        return max(1, cores - 1)
    return max(1, cores // local)


def slurm_tasks_on_node(spec, node_id):
    """srun's tasks on node number node_id, from SLURM_STEP_TASKS_PER_NODE ('2(x3),1': 2 tasks on
    each of nodes 0-2, 1 on node 3); None if either is missing or malformed."""
    if not spec or not (node_id or "").isdigit():
        return None
    node = int(node_id)
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return None
        count, repeat = int(m.group(1)), int(m.group(2) or 1)
        if node < repeat:
            return count
        node -= repeat
    return None


def launched_ranks(env=os.environ):
    """(rank, ranks) as an MPI launcher (mpiexec, mpirun, srun) told this process, without starting MPI; (0, 1)
    when none did; ranks None where only PMIx's rank is known (MPI itself will tell)."""
    for rank, size in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if size in env:
            return int(env.get(rank, 0)), int(env[size])
    if "PMIX_RANK" in env:
        return int(env["PMIX_RANK"]), None
    return 0, 1


def follow_umask(fd):
    """Give a file made by mkstemp (mode 0600, meant for secrets) the mode an ordinary new file gets,
    0666 less the umask, so colleagues on a shared cluster can read models and packed files."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
