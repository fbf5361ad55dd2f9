"""What mpinn reads from a Slurm step's environment (no Slurm needed): the unwired-srun check, the doctor's
launcher line, BLAS threads per rank. The environments are the ones srun 22.05 gave the ranks in
tests/cluster/test_slurm.py."""
import pytest

from mpinn.comm.node import slurm_step, unwired_srun
from mpinn.host.launch import blas_share, slurm_tasks_on_node

SRUN = {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_CPUS_ON_NODE": "1"}
PMI2 = dict(SRUN, SLURM_MPI_TYPE="pmi2", PMI_FD="11", PMI_JOBID="12.0", PMI_RANK="1", PMI_SIZE="2")
PMIX = dict(SRUN, SLURM_MPI_TYPE="pmix", PMIX_RANK="1", PMIX_NAMESPACE="slurm.pmix.12.0")
NONE = dict(SRUN, SLURM_MPI_TYPE="none")


def test_srun_without_an_mpi_plugin_is_named():
    message = unwired_srun(1, NONE)
    assert message.startswith("srun started 2 tasks, but MPI sees a world of 1 in each")
    assert "'none'" in message and "--mpi=pmi2" in message and "--mpi=pmix" in message
    assert unwired_srun(1, {k: v for k, v in NONE.items() if k != "SLURM_MPI_TYPE"})


def test_a_plugin_the_mpi_library_does_not_speak_is_named():
    """srun --mpi=pmi2 with Open MPI (which speaks PMIx): the plugin says 2 ranks, each process sees a world of 1."""
    message = unwired_srun(1, PMI2)
    assert message.startswith("srun started 2 tasks, but MPI sees a world of 1 in each") and "'pmi2'" in message


@pytest.mark.parametrize("world, env", [
    (2, PMI2), (2, PMIX),                               # wired: the world is the step
    (1, dict(NONE, SLURM_STEP_NUM_TASKS="1")),          # srun -n 1: one process is all there is
    (1, {}),                                            # no Slurm at all
    (1, dict(NONE, PMI_RANK="0", PMI_SIZE="1")),        # a launcher's PMI is there (mpiexec -n 1 inside a job)
    (4, NONE),                                          # the world is bigger than the step: not srun's doing
])
def test_wired_or_single_launches_are_left_alone(world, env):
    assert unwired_srun(world, env) is None


def test_the_doctor_names_the_step():
    assert slurm_step(PMI2) == "srun, job 12 step 0: 2 tasks on 2 nodes (n[1-2]), --mpi=pmi2"
    assert slurm_step({}) is None
    assert slurm_step({"SLURM_JOB_ID": "12", "SLURM_NTASKS": "2"}) is None     # the batch script itself


@pytest.mark.parametrize("spec, node, tasks", [
    ("1(x2)", "0", 1), ("1(x2)", "1", 1), ("4", "0", 4), ("2(x3),1", "2", 2), ("2(x3),1", "3", 1),
    ("3,2(x2)", "0", 3), ("3,2(x2)", "2", 2),
    ("2(x3),1", "4", None), ("2(x", "0", None), (None, "0", None), ("2", None, None), ("2", "x", None),
])
def test_tasks_on_this_node(spec, node, tasks):
    assert slurm_tasks_on_node(spec, node) == tasks


@pytest.mark.parametrize("env, cores, threads", [
    ({}, 16, 15),                                                           # one process: a core for its reader
    ({}, 2, 1), ({}, 1, 1), ({"MPI_LOCALNRANKS": "1"}, 2, 1),
    ({"MPI_LOCALNRANKS": "4"}, 16, 4),                                      # hydra
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 16, 8),                           # Open MPI's mpirun
    ({"SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1"}, 16, 4),   # srun
    # srun on a shared node: the job's 8 cores there, not the machine's 64
    ({"SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1", "SLURM_CPUS_ON_NODE": "8"}, 64, 2),
    ({"SLURM_CPUS_ON_NODE": "4"}, 64, 3),                                   # the batch script, one process
    ({"MPI_LOCALNRANKS": "8", "SLURM_CPUS_ON_NODE": "4"}, 64, 1),           # mpirun inside an allocation
])
def test_blas_threads_share_the_cores_the_job_has(env, cores, threads):
    assert blas_share(env, cores) == threads


@pytest.mark.parametrize("env, expected", [
    ({}, (0, 1)),                                                       # no launcher
    (PMI2, (1, 2)),                                                     # srun --mpi=pmi2, MPICH's hydra
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, (2, 4)),   # Open MPI's mpirun
    (PMIX, (1, None)),                                                  # srun --mpi=pmix: MPI tells the size
])
def test_the_launchers_rank_and_size_without_starting_mpi(env, expected):
    """What predict (refused under several ranks), prepare (MPI only when launched with others) and the parser
    (rank 0 alone speaks) read."""
    from mpinn.host.launch import launched_ranks
    assert launched_ranks(env) == expected
