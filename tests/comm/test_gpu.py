"""--device: the CPU side runs everywhere (selection, fallbacks, errors, staging logic on a fake
device); the numpy-vs-cupy oracle runs only where cupy finds a GPU (marked gpu, skipped otherwise)."""
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import run
from fake_device import FakeBackend
from mpinn.backend import gpu_probe, select_backend
from mpinn.comm.buffers import check_buffer, check_device_buffer
from mpinn.comm.topology import Topology
from mpinn.config import ModelSpec, MpinnError
from mpinn.settings import fixed, from_keywords
from mpinn.settings.plan import choose_gpu_transport
from mpinn.settings.rules import check_job
from mpinn.training.staging import DeviceFeed, _Slot, device_feed
from mpinn.batch import Batch

GPUS, NO_GPU = gpu_probe()
needs_gpu = pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU: %s" % NO_GPU)
TRAIN = [sys.executable, "-m", "mpinn.train", "--default-rows", "3000", "--epochs", "1", "--hidden", "8",
         "--no-progress"]


# ---------------------------------------------------------------- choosing the device, on the CPU
@pytest.mark.skipif(GPUS, reason="the default is the GPU here")
def test_device_cpu_equals_the_default(tmp_path):
    from mpinn.api import train
    kw = dict(default_rows=3000, epochs=1, hidden=(8,), quiet=True)
    a = train(model_out=str(tmp_path / "a.npz"), **kw)
    b = train(model_out=str(tmp_path / "b.npz"), device="cpu", **kw)
    assert a.model.backend.name == b.model.backend.name == "numpy"
    assert np.array_equal(a.model.params, b.model.params)
    assert a.metrics == b.metrics


@pytest.mark.skipif(GPUS, reason="this machine has a GPU")
def test_device_gpu_without_a_gpu_is_one_error_line(tmp_path):
    r = run(TRAIN + ["--device", "gpu", "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpinn: error: --device gpu: no usable GPU on rank 0: ")
    assert "Traceback" not in r.stderr and not (tmp_path / "m.npz").exists()


@pytest.mark.skipif(GPUS, reason="this machine has a GPU")
def test_device_auto_falls_back_to_numpy_and_says_so(tmp_path):
    r = run(TRAIN + ["--device", "auto", "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("device: cpu (numpy): --device auto found no GPU: "), first
    r = run(TRAIN + ["--device", "cpu", "--model-out", str(tmp_path / "m.npz")])
    assert r.stdout.splitlines()[0] == "device: cpu (numpy)"


@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_a_cpu_transport_on_the_gpu_is_refused(tmp_path, transport):
    r = run(TRAIN + ["--device", "gpu", "--comm", transport, "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2
    assert r.stderr.startswith("mpinn: error: --comm %s is for --device cpu" % transport) and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize("mode", [["--reduce", "gather"], ["--parallel", "tower"]])
def test_shared_memory_sum_outside_allreduce_is_refused(tmp_path, mode):
    r = run(TRAIN + mode + ["--comm", "shm", "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2
    assert r.stderr.startswith("mpinn: error: --comm shm sums gradients for --reduce allreduce"), r.stderr
    assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "m.npz").exists()


@pytest.mark.skipif(GPUS, reason="this machine has a GPU")
@pytest.mark.parametrize("transport", ["nccl", "cuda-aware", "staged"])
def test_a_gpu_transport_on_the_cpu_is_refused(tmp_path, transport):
    r = run(TRAIN + ["--comm", transport, "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2
    assert r.stderr.startswith("mpinn: error: --comm %s moves GPU buffers, but this run computes on the CPU"
                               % transport), r.stderr


def test_select_backend_binds_nothing_without_a_gpu():
    def no_gpu():
        return 0, "no driver"

    def must_not_probe():
        raise AssertionError("--device cpu must not look for a GPU")

    assert select_backend("gpu", 3, no_gpu) == (None, "no driver")
    b, note = select_backend("auto", 3, no_gpu)
    assert b.name == "numpy" and note == "cpu (numpy): --device auto found no GPU: no driver"
    b, note = select_backend("cpu", 0, must_not_probe)
    assert b.name == "numpy" and b.device is None
    with pytest.raises(ValueError):
        select_backend("tpu", 0, no_gpu)


@pytest.mark.parametrize("requested, aware, expected", [
    ("auto", True, "cuda-aware"), ("auto", False, "staged"), ("nccl", False, "nccl"), ("nccl", True, "nccl"),
    ("staged", True, "staged"), ("cuda-aware", True, "cuda-aware")])
def test_choose_transport(requested, aware, expected):
    assert choose_gpu_transport(fixed(8, device="gpu", comm=requested), one_gpu(aware)) == expected


def one_gpu(aware, how="MPIX_Query_cuda_support()"):
    """The probe's answer for one rank with a GPU, its MPI CUDA-aware or not."""
    return Topology.of_nodes([0], devices=(("cupy", "gpu 0 of 1", ("h", "0000:01:00.0"), None),),
                             cuda_aware=((aware, how),))


def test_cuda_aware_requested_but_not_there_is_a_user_error():
    with pytest.raises(MpinnError, match=r"--comm cuda-aware: this MPI library is not CUDA-aware \(MPIX_Query"):
        check_job(fixed(8, device="gpu", comm="cuda-aware"), one_gpu(False))
    check_job(fixed(8, device="gpu", comm="cuda-aware"), one_gpu(True))
    with pytest.raises(MpinnError, match="--comm: invalid choice: 'gloo'"):
        from_keywords(None, comm="gloo")


def test_cuda_aware_mpi_detection_answers_here():
    from mpinn.comm.topology import cuda_aware_mpi
    aware, how = cuda_aware_mpi()
    assert isinstance(aware, bool) and how
    if not GPUS:
        assert aware is False      # the mpich wheel is built without GPU support


# ---------------------------------------------------------------- the GPU branch of check_buffer
class CudaArrayLike:
    """Exports __cuda_array_interface__ (version 3) and nothing else: what mpi4py would read."""

    def __init__(self, shape, typestr="<f4", strides=None, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (0, False), "version": 3, "stream": stream}


def test_check_buffer_accepts_a_contiguous_gpu_buffer():
    buf = CudaArrayLike((3, 4))
    assert check_buffer(buf, np.float32, 12, "g") is buf
    assert check_buffer(CudaArrayLike((3, 4), strides=(16, 4)), np.float32, 12) is not None
    assert check_buffer(CudaArrayLike((1, 4), strides=(999, 4)), np.float32, 4) is not None


@pytest.mark.parametrize("buf, dtype, length, message", [
    (CudaArrayLike((3, 4), strides=(4, 12)), np.float32, 12, "not C-contiguous"),     # Fortran order
    (CudaArrayLike((6,), strides=(8,)), np.float32, 6, "not C-contiguous"),          # every other element
    (CudaArrayLike((3, 4), "<f8"), np.float32, 12, "dtype float64, expected float32"),
    (CudaArrayLike((3, 4)), np.float32, 13, "12 elements, expected 13")])
def test_check_buffer_refuses_a_bad_gpu_buffer(buf, dtype, length, message):
    with pytest.raises(ValueError, match=message):
        check_buffer(buf, dtype, length, "gradient buffer")
    with pytest.raises(ValueError, match=message):
        check_device_buffer(buf, dtype, length, "gradient buffer")


# ---------------------------------------------------------------- staging on a fake device
def batches(n_batches=7, seed=1):
    """Host batches of changing sizes (so the staging buffers grow), some with no rows."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_batches):
        n = [3, 9, 0, 5, 40, 2, 17][i % 7]
        X = sp.random(n, 50, density=0.1, format="csr", random_state=i, dtype=np.float32)
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int32)
        out.append(Batch(X, rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 4, n)))
    return out


class ListFeed:
    """The trainer Feed's interface: next(), and s / steps."""

    def __init__(self, items):
        self.items, self.s, self.steps = items, 0, len(items)

    def next(self):
        self.s += 1
        return self.items[self.s - 1]


def same_batch(a, b):
    return ((a.Xs != b.Xs).nnz == 0 and a.Xs.shape == b.Xs.shape and np.array_equal(a.Xd, b.Xd)
            and np.array_equal(a.y, b.y) and a.y.dtype == b.y.dtype)


def test_device_feed_hands_out_every_batch_exactly():
    host = batches()
    fake = FakeBackend()
    feed = DeviceFeed(ListFeed(host), fake)
    for want in host:
        got = feed.next()
        assert same_batch(got, want)
        assert got.Xd is not want.Xd      # it went through the staging buffers
    assert fake.copies == 5 * len(host)


def test_device_feed_stays_one_batch_ahead():
    host = batches()
    feed = DeviceFeed(ListFeed(host), FakeBackend())
    feed.next()
    assert feed.feed.s == 2              # batch 1 was received, and its copy queued
    slot, _, parts, _ = feed.ahead
    # the copy is queued, not done: the fake runs it only once someone waits for it
    assert np.isnan(parts["Xd"]).all() and np.array_equal(slot.host["y"][:parts["y"].size], host[1].y)
    assert same_batch(feed.next(), host[1])
    for _ in host[2:]:
        feed.next()
    assert feed.ahead is None            # nothing is staged past the last step


def test_device_feed_with_dense_input_only():
    host = [Batch(None, b.Xd, b.y.astype(np.float64)) for b in batches()]
    feed = DeviceFeed(ListFeed(host), FakeBackend())
    for want in host:
        got = feed.next()
        assert got.Xs is None and np.array_equal(got.Xd, want.Xd) and np.array_equal(got.y, want.y)


def test_the_fake_device_catches_a_missing_wait():
    """The tests above mean something: staging without waiting for the copy gives garbage."""
    fake = FakeBackend()
    slot = _Slot(fake)
    pinned, dev = slot.buffers("x", 4, np.float32)
    pinned[...] = 1
    fake.copy_to_device_async(dev, pinned, fake.new_stream())
    assert np.isnan(dev).all()


def test_device_feed_is_not_used_on_the_cpu():
    from mpinn.backend import get_backend
    feed = ListFeed([])
    assert device_feed(feed, get_backend("numpy")) is feed
    assert isinstance(device_feed(feed, FakeBackend()), DeviceFeed)


# ---------------------------------------------------------------- the numpy-vs-cupy oracle (GPU only)
SPECS = [ModelSpec(50, 3, (8, 6), 4, act, loss, "float64", sparse_fan_in=5.0)
         for act in ("relu", "tanh", "sigmoid") for loss in ("softmax", "sigmoid")] + \
        [ModelSpec(0, 3, (5,), 2, "tanh", "squared", "float64"), ModelSpec(50, 0, (7,), 1, "relu", "sigmoid", "float32")]


def _pair(spec):
    from mpinn.backend import get_backend
    from mpinn.model import MLP
    return MLP(spec).init_(3), MLP(spec, get_backend("cupy")).init_(3)


def _batch(spec, n=11):
    rng = np.random.default_rng(0)
    Xs = sp.random(n, spec.n_sparse, density=0.1, format="csr", random_state=0, dtype=spec.dtype) \
        if spec.n_sparse else None
    Xd = rng.standard_normal((n, spec.n_dense)).astype(spec.dtype) if spec.n_dense else None
    y = rng.integers(0, spec.n_out, n) if spec.loss == "softmax" else \
        rng.random((n, spec.n_out) if spec.n_out > 1 else n).round().astype(spec.dtype)
    return Batch(Xs, Xd, y)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "%s-%s-%s-%d-%d" % (s.activation, s.loss, s.dtype,
                                                                            s.n_sparse, s.n_dense))
def test_cupy_forward_and_backward_equal_numpy(spec):
    from mpinn.backend import to_host
    cpu, gpu = _pair(spec)
    b = _batch(spec)
    tol = 1e-10 if spec.dtype == "float64" else 1e-4
    for a_cpu, a_gpu in zip(cpu.forward(b), gpu.forward(gpu.backend.batch_to_device(b))):
        np.testing.assert_allclose(to_host(a_gpu), a_cpu, rtol=tol, atol=tol)
    np.testing.assert_allclose(gpu.predict(b), cpu.predict(b), rtol=tol, atol=tol)
    for want_rows in (False, True):
        r_cpu = cpu.loss_grad_(b, 1 / b.n, sparse_grad=want_rows)
        r_gpu = gpu.loss_grad_(b, 1 / b.n, sparse_grad=want_rows)
        start = cpu.dense_start if want_rows else 0
        np.testing.assert_allclose(to_host(gpu.grad_buffer)[start:], cpu.grad_buffer[start:], rtol=tol, atol=tol)
        if r_cpu is not None:
            assert np.array_equal(to_host(r_gpu.ids), r_cpu.ids)
            np.testing.assert_allclose(to_host(r_gpu.rows), r_cpu.rows, rtol=tol, atol=tol)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_cupy_training_step_equals_numpy(optimizer):
    from mpinn.backend import to_host
    from mpinn.optim import create_optimizer
    spec = SPECS[0]
    cpu, gpu = _pair(spec)
    opts = [create_optimizer(optimizer, m.size, m.xp, 1e-3, m.weight_slices) for m in (cpu, gpu)]
    for s in range(4):
        b = _batch(spec, 9 + s)
        for m, o in zip((cpu, gpu), opts):
            m.loss_grad_(b, 1 / b.n)
            o.step_(m.params, m.grads, lr=0.05)
    np.testing.assert_allclose(to_host(gpu.params), cpu.params, rtol=1e-10, atol=1e-12)


@pytest.mark.gpu
@needs_gpu
def test_cupy_device_feed_matches_the_host_batches():
    from mpinn.backend import get_backend, to_host
    host = batches()
    feed = DeviceFeed(ListFeed(host), get_backend("cupy"))
    for want in host:
        got = feed.next()
        assert np.array_equal(to_host(got.y), want.y) and np.array_equal(to_host(got.Xd), want.Xd)
        assert (got.Xs.get() != want.Xs).nnz == 0


@pytest.mark.skipif(GPUS, reason="this machine has a GPU")
def test_the_gpu_benchmark_says_why_it_cannot_run(tmp_path):
    r = run([sys.executable, "-m", "scripts.bench.gpu", "--out", str(tmp_path / "b.json")])
    assert r.returncode == 2 and r.stderr.startswith("bench_gpu: needs cupy and a GPU: "), r.stderr
    assert not (tmp_path / "b.json").exists()


def test_ranks_sharing_a_gpu_are_found():
    """NCCL refuses two ranks of one communicator on one GPU: the probe's GPU keys name them."""
    keys = [("a", "0000:01:00.0"), ("a", "0000:02:00.0"), ("b", "0000:01:00.0"), ("a", "0000:01:00.0")]

    def topo(keys):
        return Topology.of_nodes([k[0] for k in keys], devices=tuple(("cupy", "gpu", k, None) for k in keys))
    assert topo(keys).gpus_shared() == [((0, 3), ("a", "0000:01:00.0"))]
    assert topo(keys[:3]).gpus_shared() == []


def test_a_missing_nccl_library_is_refused_not_imported_silently(monkeypatch):
    """cupy.cuda.nccl imports without libnccl and says so only in nccl.available."""

    import types
    from mpinn.backend import CupyBackend
    fake = types.ModuleType("cupy.cuda.nccl")
    fake.available = False
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = fake
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake)
    backend = CupyBackend.__new__(CupyBackend)
    with pytest.raises(RuntimeError, match="available is False"):
        backend.nccl()
    fake.available = True
    assert backend.nccl() is fake


def test_a_batch_without_labels_goes_to_the_device():
    """Predicting on unlabelled rows: the inputs still move to the GPU (the decision is not taken
    from the labels alone)."""
    from mpinn.backend import CupyBackend
    from mpinn.batch import Batch

    class Moved(np.ndarray):
        pass

    class Cupyish:
        ndarray = Moved

        @staticmethod
        def asarray(a):
            return np.asarray(a).view(Moved)

    backend = CupyBackend.__new__(CupyBackend)
    backend.cupy, backend.sparse = Cupyish, sp
    got = backend.batch_to_device(Batch(None, np.ones((3, 2)), None))
    assert isinstance(got.Xd, Moved) and got.y is None
    assert backend.batch_to_device(got) is got
