"""Facts about the job for mpinn.doctor and the start-up: the MPI library, the host, the launcher."""
import mpi4py
from mpi4py import MPI


def mpi_library_version():
    """The MPI library's own first version line, e.g. 'MPICH Version: 5.0.2' or 'Open MPI v5.0.11, ...'."""
    return MPI.Get_library_version().strip().splitlines()[0].strip()


def mpi4py_version():
    return mpi4py.__version__


def processor_name():
    """The host name MPI itself reports for this rank."""
    return MPI.Get_processor_name()


# what a launcher that wired the ranks to MPI leaves in each rank's environment (hydra, srun --mpi=pmi2,
# srun --mpi=pmix, Open MPI's mpirun)
PMI_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")


def unwired_srun(world_size, env):
    """Why this process is one of several that srun started without connecting them to MPI, or None.
    `srun` with no MPI plugin (--mpi=none, Slurm's default MpiDefault) starts N copies that each see an
    MPI world of one: they would each train alone, side by side, and race to write the same model."""
    tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if world_size != 1 or not tasks.isdigit() or int(tasks) < 2:
        return None
    said = env.get("PMI_SIZE") or env.get("OMPI_COMM_WORLD_SIZE")      # the world a launcher wired, where it says
    if said == "1" or said is None and any(v in env for v in PMI_VARS):
        return None     # a launcher's own world of one (mpiexec -n 1 inside a step), or one that does not say
    return ("srun started %s tasks, but MPI sees a world of 1 in each: srun did not connect them to MPI "
            "(its MPI plugin is %r). Use `srun --mpi=pmi2` with MPICH (the mpich wheel) or `srun --mpi=pmix` "
            "with Open MPI; `srun --mpi=list` shows what this cluster has"
            % (tasks, env.get("SLURM_MPI_TYPE", "none")))


def slurm_step(env):
    """The Slurm job step this process belongs to, in one line, or None outside srun."""
    if "SLURM_STEP_ID" not in env or "SLURM_STEP_NUM_TASKS" not in env:
        return None
    return "srun, job %s step %s: %s tasks on %s nodes (%s), --mpi=%s" % (
        env.get("SLURM_JOB_ID", "?"), env["SLURM_STEP_ID"], env["SLURM_STEP_NUM_TASKS"],
        env.get("SLURM_STEP_NUM_NODES", "?"), env.get("SLURM_STEP_NODELIST", "?"), env.get("SLURM_MPI_TYPE", "none"))
