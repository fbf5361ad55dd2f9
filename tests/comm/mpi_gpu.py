"""GPU data parallelism under mpiexec (np 1, 2 and 3: on one GPU machine, the ranks share its GPU). On any
machine: the GPU communicator and the device feed on the fake device (numpy arithmetic, asynchronous copies)
follow the CPU run, every optimizer, at most 3 host waits a step. With cupy and a GPU (marked gpu, skipped
otherwise): every transport agrees with the CPU, N ranks equal 1, NCCL refuses ranks sharing a GPU."""
import numpy as np
import pytest

from ranks import COMM, OPTIMIZERS, agree, make_trainer, toy_data
from fake_device import FakeBackend, canonical_csr
from mpinn.device.backend import gpu_probe, to_host
from mpinn.comm.gpu import DeviceAllreduceCommunicator
from mpinn.comm.topology import cuda_aware_mpi
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.core.batch import Layout
from mpinn.data import Dataset
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer

GPUS, NO_GPU = gpu_probe()
# every rank must skip alike, or the collectives of the next test misalign
GPUS = min(COMM.allgather(GPUS))
needs_gpu = pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU on every rank: %s" % NO_GPU)
SPEC = ModelSpec(64, 3, (8, 6), 3, "tanh", "softmax", "float64", sparse_fan_in=2.5, wide=True)


def optimizer_for(name, model):
    """ranks.make_optimizer's optimizers (lazy rows of the table, ftrl with L1 and L2, ...) on the model's device."""
    kw = {"adam-dense": dict(hashed_update="dense"), "adagrad-rowwise": dict(adagrad_rowwise=True),
          "ftrl": dict(l1=1e-3, l2=1e-2)}.get(name, {})
    return create_optimizer(name.split("-")[0], model.size, model.xp, 0.0, model.weight_slices, table=model.table,
                            **kw)


def fit(backend, optimizer="sgd", epochs=2, batch=12, canonical=False, **options):
    """Two epochs of Trainer.fit on the toy data (float64; canonical: its CSR made canonical first), the held-out
    metrics, the parameters and the trainer; options: those of make_trainer (the run's options, a communicator
    made by the test, the job's topology)."""
    model = MLP(SPEC, backend).init_(0)
    t = make_trainer(model, optimizer_for(optimizer, model), Layout(64, 3, "float64", "int64"), batch, **options)
    t.start()
    Xs, Xd, y = toy_data()
    data = Dataset(canonical_csr(Xs) if canonical else Xs, Xd, y, {"task": "multiclass"}) if t.rank0 else None
    history = t.fit(data, data, epochs, progress=False)
    return to_host(model.params), history[-1]["valid"], t


def cpu_fit(threshold, optimizer="sgd", canonical=False):     # MPI_Allreduce, as the staged transport sums
    from mpinn.device.backend import get_backend
    return fit(get_backend("numpy"), optimizer, comm="mpi", sparse_threshold=threshold, canonical=canonical)


def fake_fit(threshold, optimizer, canonical):
    fake = FakeBackend()
    transport = "staged" if COMM.size > 1 else "none"      # what the plan takes for a GPU (choose_gpu_transport)
    return fit(fake, optimizer, comm="mpi", sparse_threshold=threshold, canonical=canonical,
               communicator=lambda plan: DeviceAllreduceCommunicator(None, fake, transport,
                                                                     sparse_threshold=plan.sparse_threshold)), fake


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("threshold", [0.0, 10.0])       # the sparse block dense / as rows
def test_the_gpu_path_on_a_fake_device_follows_the_cpu(optimizer, threshold):
    """Canonical rows (as the device feed makes them, which the CPU path does not): a dense exchange makes the
    same additions in the same order as the CPU, bit for bit; rows are coalesced before the step, so only the
    order of the additions differs. And at most 3 host waits a step (the timeline's count): the verdict read with
    the loss, and at most 2 copies for the exchange (the rows and the dense part)."""
    ref, ref_valid, _ = cpu_fit(threshold, optimizer, canonical=True)
    (got, valid, trainer), fake = fake_fit(threshold, optimizer, canonical=True)
    exact = threshold == 0.0 or COMM.size == 1
    diff = float(np.max(np.abs(got - ref)))
    agree(diff == 0 if exact else diff < 1e-12, "%s: max diff %g" % (optimizer, diff))
    agree(fake.copies > 0, "no batch went through the staging buffers")
    agree(abs(valid["accuracy"] - ref_valid["accuracy"]) < 1e-12, "%s vs %s" % (valid, ref_valid))
    syncs = trainer.timeline.syncs
    # step 1 holds the device clock's one synchronisation (its anchor)
    agree(max([n for s, n in syncs.items() if s > 1] + [0]) <= 3 and syncs.get(1, 0) <= 4, "host waits %s" % syncs)


def test_hashed_rows_as_they_come_follow_the_cpu_bit_for_bit():
    """Non-canonical rows (unsorted, an id twice): the device feed stages them as they came, and the products sum
    the duplicates in order, as the CPU's scipy does: the same bits (the feed used to sum them first, which
    rounded otherwise)."""
    ref, _, _ = cpu_fit(0.0, "adam")
    (got, _, _), _ = fake_fit(0.0, "adam", canonical=False)
    diff = float(np.max(np.abs(got - ref)))
    agree(diff == 0, "max diff %g" % diff)


def test_one_rank_moves_nothing_through_the_host():
    """--device gpu at np 1 (transport none): no copy of the gradient to the host, so one host wait a step: the
    verdict, read with the loss."""
    if COMM.size > 1:
        pytest.skip("one rank")
    (_, _, trainer), fake = fake_fit(0.0, "sgd", canonical=True)
    agree(all(n == 1 for s, n in trainer.timeline.syncs.items() if s > 1), "%s" % trainer.timeline.syncs)


# ---------------------------------------------------------------- on real GPUs
def gpu_fit(transport, threshold=0.25, optimizer="sgd", batch=12, mpi_comm=None, canonical=False):
    """fit on this rank's GPU: the job probed first (which binds each rank to its GPU), then the model made there."""
    from mpinn.device.backend import get_backend
    from mpinn.comm.topology import probe
    topo = probe(mpi_comm or COMM, "gpu", nccl=transport == "nccl")
    return fit(get_backend("cupy"), optimizer, batch=batch, device="gpu", comm=transport, sparse_threshold=threshold,
               topology=topo, mpi_comm=mpi_comm, canonical=canonical)


def shared_gpu():
    from mpinn.comm.topology import probe
    return bool(probe(COMM, "gpu").gpus_shared())


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("transport", ["auto", "staged", "nccl", "cuda-aware"])
@pytest.mark.parametrize("threshold", [0.0, 10.0])
def test_gpu_transports_agree_with_the_cpu(transport, threshold):
    """auto is none at np 1 and cuda-aware or staged above; NCCL with ranks sharing a GPU is refused, in one
    error on every rank (the ranks of this run share one GPU when the machine has fewer GPUs than ranks)."""
    if transport == "cuda-aware" and not all(a for a, _ in COMM.allgather(cuda_aware_mpi())):
        pytest.skip("this MPI library is not CUDA-aware")
    if transport == "nccl" and shared_gpu():
        with pytest.raises(MpinnError, match="share GPU"):
            gpu_fit(transport, threshold)
        return
    ref, _, _ = cpu_fit(threshold)
    got, _, trainer = gpu_fit(transport, threshold)
    diff = float(np.max(np.abs(got - ref)))
    agree(diff < 1e-10, "%s: max diff %g from the CPU" % (transport, diff))
    everyone = COMM.allgather(got)
    agree(all(np.array_equal(everyone[0], p) for p in everyone), "ranks differ")
    if transport == "auto":
        agree(trainer.plan.transport == ("none" if COMM.size == 1 else trainer.plan.transport), trainer.plan.transport)
    syncs = trainer.timeline.syncs       # every wait of a step: the compact rows' count, the verdict with the loss,
    exchange = 0 if COMM.size == 1 else 2 if threshold > 1 else 1      # and the exchange's copies to the host
    agree(max([n for s, n in syncs.items() if s > 1] + [0]) <= 2 + exchange, "host waits a step: %s" % syncs)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_optimizer_on_the_gpu_follows_the_cpu(optimizer):
    """The lazy row updates (adam, adagrad, ftrl, momentum on the touched rows), rowwise adagrad, dense adam."""
    ref, _, _ = cpu_fit(10.0, optimizer, canonical=True)
    got, _, _ = gpu_fit("auto", 10.0, optimizer, canonical=True)
    diff = float(np.max(np.abs(got - ref)))
    agree(diff < 1e-10, "%s: max diff %g from the CPU" % (optimizer, diff))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam", "ftrl"])
def test_n_gpu_ranks_equal_one(optimizer):
    """The same global batches on every rank count give the parameters of one rank (to rounding)."""
    got, _, _ = gpu_fit("auto", optimizer=optimizer)
    if COMM.rank == 0:      # the single-rank run, on rank 0's GPU alone
        solo_comm = COMM.Split(0, 0)
    else:
        COMM.Split(1, COMM.rank)
        solo_comm = None
    solo = None
    if solo_comm is not None:
        solo, _, _ = gpu_fit("auto", optimizer=optimizer, mpi_comm=solo_comm)
    solo = COMM.bcast(solo)
    diff = float(np.max(np.abs(got - solo)))
    agree(diff < 1e-10, "max diff %g from one rank" % diff)
