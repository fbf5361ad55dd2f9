"""GPU data parallelism under mpiexec. On any machine: the staged transport and the device feed on a
fake device (numpy arithmetic, asynchronous copies) follow the CPU run. With cupy and a GPU (marked
gpu, skipped otherwise): N ranks equal 1, and nccl / CUDA-aware / staged agree with the CPU."""
import numpy as np
import pytest

from ranks import COMM, agree, make_trainer, toy_data
from fake_device import FakeBackend
from mpinn.backend import gpu_probe, to_host
from mpinn.comm.gpu import DeviceAllreduceCommunicator
from mpinn.comm.topology import cuda_aware_mpi
from mpinn.config import ModelSpec
from mpinn.batch import Layout
from mpinn.data import Dataset
from mpinn.model import MLP
from mpinn.optim import create_optimizer

GPUS, NO_GPU = gpu_probe()
# every rank must skip alike, or the collectives of the next test misalign
GPUS = min(COMM.allgather(GPUS))
needs_gpu = pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU on every rank: %s" % NO_GPU)


def fit(backend, optimizer="sgd", epochs=2, batch=12, **options):
    """Two epochs of Trainer.fit on the toy data (float64), the held-out metrics, the parameters; options: those
    of make_trainer (the run's options, a communicator made by the test, the job's topology)."""
    spec = ModelSpec(64, 3, (8, 6), 3, "tanh", "softmax", "float64", sparse_fan_in=2.5)
    model = MLP(spec, backend).init_(0)
    opt = create_optimizer(optimizer, model.size, backend.xp, 0.0, model.weight_slices)
    t = make_trainer(model, opt, Layout(64, 3, "float64", "int64"), batch, **options)
    t.start()
    Xs, Xd, y = toy_data()
    data = Dataset(Xs, Xd, y, {"task": "multiclass"}) if t.rank0 else None
    history = t.fit(data, data, epochs, progress=False)
    return to_host(model.params), history[-1]["valid"]


def cpu_fit(threshold, optimizer="sgd"):     # MPI_Allreduce, as the staged transport sums
    from mpinn.backend import get_backend
    return fit(get_backend("numpy"), optimizer, comm="mpi", sparse_threshold=threshold)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("threshold", [0.0, 10.0])       # the sparse block dense / as rows
def test_staged_transport_on_a_fake_device_follows_the_cpu(optimizer, threshold):
    ref, ref_valid = cpu_fit(threshold, optimizer)
    fake = FakeBackend()
    got, valid = fit(fake, optimizer, comm="mpi", sparse_threshold=threshold,
                     communicator=lambda plan: DeviceAllreduceCommunicator(None, fake, "staged",
                                                                           sparse_threshold=plan.sparse_threshold))
    # dense exchange: the same additions in the same order; rows: coalesced before the step, so
    # only the order of the additions differs
    exact = threshold == 0.0 or COMM.size == 1
    diff = float(np.max(np.abs(got - ref)))
    agree(diff == 0 if exact else diff < 1e-12, "max diff %g" % diff)
    agree(fake.copies > 0, "no batch went through the staging buffers")
    agree(abs(valid["accuracy"] - ref_valid["accuracy"]) < 1e-12, "%s vs %s" % (valid, ref_valid))


# ---------------------------------------------------------------- on real GPUs
def gpu_fit(transport, threshold=0.25, optimizer="sgd", batch=12, mpi_comm=None):
    """fit on this rank's GPU: the job probed first (which binds each rank to its GPU), then the model made there."""
    from mpinn.backend import get_backend
    from mpinn.comm.topology import probe
    topo = probe(mpi_comm or COMM, "gpu", nccl=transport == "nccl")
    return fit(get_backend("cupy"), optimizer, batch=batch, device="gpu", comm=transport, sparse_threshold=threshold,
               topology=topo, mpi_comm=mpi_comm)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("transport", ["staged", "nccl", "cuda-aware"])
@pytest.mark.parametrize("threshold", [0.0, 10.0])
def test_gpu_transports_agree_with_the_cpu(transport, threshold):
    if transport == "cuda-aware" and not all(a for a, _ in COMM.allgather(cuda_aware_mpi())):
        pytest.skip("this MPI library is not CUDA-aware")
    ref, _ = cpu_fit(threshold)
    got, _ = gpu_fit(transport, threshold)
    diff = float(np.max(np.abs(got - ref)))
    agree(diff < 1e-10, "%s: max diff %g from the CPU" % (transport, diff))
    everyone = COMM.allgather(got)
    agree(all(np.array_equal(everyone[0], p) for p in everyone), "ranks differ")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_n_gpu_ranks_equal_one(optimizer):
    """The same global batches on every rank count give the parameters of one rank (to rounding)."""
    got, _ = gpu_fit("auto", optimizer=optimizer)
    if COMM.rank == 0:      # the single-rank run, on rank 0's GPU alone
        solo_comm = COMM.Split(0, 0)
    else:
        COMM.Split(1, COMM.rank)
        solo_comm = None
    solo = None
    if solo_comm is not None:
        solo, _ = gpu_fit("auto", optimizer=optimizer, mpi_comm=solo_comm)
    solo = COMM.bcast(solo)
    diff = float(np.max(np.abs(got - solo)))
    agree(diff < 1e-10, "max diff %g from one rank" % diff)
