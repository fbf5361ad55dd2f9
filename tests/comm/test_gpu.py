"""--device: the CPU side runs everywhere (selection, fallbacks, errors); the numpy oracles run on two devices:
the fake one of tests/fake_device.py (numpy arithmetic through the GPU path: the device feed, the hashed rows,
the backend's products), here, and cupy on a GPU (marked gpu, skipped where cupy finds none). The device
feed's own tests are tests/training/test_staging.py; end to end on the command line, test_gpu_cli.py."""
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import in_process, run
from fake_device import FakeBackend, ListFeed, canonical_csr, messy_csr
from mpinn.device.backend import gpu_probe, select_backend
from mpinn.comm.buffers import check_buffer, check_device_buffer
from mpinn.comm.topology import Topology
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.settings import fixed, from_keywords
from mpinn.settings.plan import choose_gpu_transport
from mpinn.settings.job_rules import check_job
from mpinn.training.staging import DeviceFeed
from mpinn.core.batch import Batch

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


@pytest.mark.parametrize("ranks, requested, aware, expected", [
    (2, "auto", True, "cuda-aware"), (2, "auto", False, "staged"), (2, "nccl", False, "nccl"), (2, "nccl", True, "nccl"),
    (2, "staged", True, "staged"), (2, "cuda-aware", True, "cuda-aware"),
    (1, "auto", True, "none"), (1, "auto", False, "none"), (1, "staged", False, "staged")])
def test_choose_transport(ranks, requested, aware, expected):
    """auto at one rank moves nothing (the gradient staged through the host every step was a copy out and back
    for nothing); what is asked for is what runs."""
    assert choose_gpu_transport(fixed(8, device="gpu", comm=requested), gpus(ranks, aware)) == expected


def gpus(n, aware, how="MPIX_Query_cuda_support()"):
    """The probe's answer for n ranks on one host, each with its own GPU, their MPI CUDA-aware or not."""
    return Topology.of_nodes([0] * n, devices=tuple(("cupy", "gpu %d of %d" % (r, n), ("h", "0000:0%d:00.0" % r), None)
                                                    for r in range(n)), cuda_aware=((aware, how),) * n)


def one_gpu(aware, how="MPIX_Query_cuda_support()"):
    return gpus(1, aware, how)


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


# ---------------------------------------------------------------- numpy oracles: the fake device here, cupy on a GPU
DEVICES = [pytest.param("fake"), pytest.param("cupy", marks=[pytest.mark.gpu, needs_gpu])]
SPECS = [ModelSpec(50, 3, (8, 6), 4, act, loss, dtype, sparse_fan_in=5.0, wide=wide)
         for act, loss, dtype, wide in (("relu", "softmax", "float64", False), ("tanh", "sigmoid", "float64", True),
                                        ("sigmoid", "softmax", "float32", True), ("relu", "sigmoid", "float32", False),
                                        ("tanh", "softmax", "float32", False), ("sigmoid", "sigmoid", "float64", False))] + \
        [ModelSpec(0, 3, (5,), 2, "tanh", "squared", "float64"), ModelSpec(50, 0, (7,), 1, "relu", "sigmoid", "float32"),
         ModelSpec(50, 0, (7,), 1, "relu", "sigmoid", "float64", wide=True)]
W2_SPEC = ModelSpec(1 << 18, 0, (64,), 1, "relu", "sigmoid", "float32", sparse_fan_in=20.0, wide=True)   # W2's block


def backend_of(kind):
    from mpinn.device.backend import get_backend
    return FakeBackend() if kind == "fake" else get_backend("cupy")


def _pair(spec, kind, seed=3):
    """The model on the host and on the device, the same parameters."""
    from mpinn.model.mlp import MLP
    return MLP(spec).init_(seed), MLP(spec, backend_of(kind)).init_(seed)


def _batch(spec, n=11, seed=0):
    """Rows as training gets them: the hashed part non-canonical CSR (unsorted, an id twice in a row)."""
    rng = np.random.default_rng(seed)
    Xs = messy_csr(n, spec.n_sparse, rng, spec.dtype, per_row=int(spec.sparse_fan_in) + 3) if spec.n_sparse else None
    Xd = rng.standard_normal((n, spec.n_dense)).astype(spec.dtype) if spec.n_dense else None
    y = rng.integers(0, spec.n_out, n) if spec.loss == "softmax" else \
        rng.random((n, spec.n_out) if spec.n_out > 1 else n).round().astype(spec.dtype)
    return Batch(Xs, Xd, y)


def staged(model, b):
    """b as the trainer hands it to the model on this device: through the device feed (as they came, staged)."""
    return DeviceFeed(ListFeed([b]), model.backend).next()


def close(got, want, dtype, what=""):
    from mpinn.device.backend import to_host
    tol = 1e-10 if np.dtype(dtype) == np.float64 else 2e-4
    np.testing.assert_allclose(to_host(got), want, rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "%s-%s-%s-%d-%d%s" % (s.activation, s.loss, s.dtype, s.n_sparse,
                                                                            s.n_dense, "-wide" if s.wide else ""))
def test_forward_and_backward_equal_numpy(spec, kind):
    from mpinn.device.backend import to_host
    cpu, dev = _pair(spec, kind)
    b = _batch(spec)
    on = staged(dev, b)
    for a_cpu, a_dev in zip(cpu.forward(b), dev.forward(on)):
        close(a_dev, a_cpu, spec.dtype, "forward")
    close(dev.predict(b), cpu.predict(b), spec.dtype, "predict")        # predict: its own way to the device
    for want_rows in (False, True):
        r_cpu = cpu.loss_grad_(b, 1 / b.n, sparse_grad=want_rows)
        r_dev = dev.loss_grad_(on, 1 / b.n, sparse_grad=want_rows)
        start = cpu.dense_start if want_rows else 0
        close(dev.grad_buffer[start:], cpu.grad_buffer[start:], spec.dtype, "gradient")
        if r_cpu is not None:
            assert np.array_equal(to_host(r_dev.ids), r_cpu.ids)
            close(r_dev.rows, r_cpu.rows, spec.dtype, "gradient rows")


@pytest.mark.parametrize("kind", DEVICES)
def test_a_w2_sized_block(kind):
    """The hashed block at W2's size (2^18 x 65 float32, the linear part's column included) and a 1024-row batch
    of 20 ids a row: the products on the block as a whole (cupyx copied all of it to Fortran order each time)."""
    cpu, dev = _pair(W2_SPEC, kind)
    b = _batch(W2_SPEC, n=1024, seed=5)
    on = staged(dev, b)
    close(dev.forward(on)[-1], cpu.forward(b)[-1], "float32", "output")
    r_cpu, r_dev = cpu.loss_grad_(b, 1 / b.n, sparse_grad=True), dev.loss_grad_(on, 1 / b.n, sparse_grad=True)
    close(r_dev.rows, r_cpu.rows, "float32", "gradient rows")
    close(dev.grad_buffer[dev.dense_start:], cpu.grad_buffer[cpu.dense_start:], "float32", "dense gradient")


OPTIMIZERS = ["sgd", "momentum", "adam", "adagrad", "ftrl", "adam-dense"]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("rows", [True, False], ids=["lazy-rows", "dense"])
def test_training_steps_equal_numpy(optimizer, rows, kind):
    """Four steps of every optimizer: on the touched rows of the hashed block (the lazy update), or on all of it;
    ftrl with L1 and L2; adam-dense: --hashed-update dense."""
    from mpinn.optim import create_optimizer
    spec = SPECS[1]                     # tanh, sigmoid, float64, the linear part
    cpu, dev = _pair(spec, kind)
    name, _, variant = optimizer.partition("-")
    kw = dict(l1=1e-3, l2=1e-2) if name == "ftrl" else dict(hashed_update="dense") if variant else {}
    opts = [create_optimizer(name, m.size, m.xp, 1e-4, m.weight_slices, table=m.table, **kw).allocate_(dtype=m.dtype)
            for m in (cpu, dev)]
    for s in range(4):
        b = _batch(spec, 9 + s, seed=s)
        for m, o, batch in ((cpu, opts[0], b), (dev, opts[1], staged(dev, b))):
            g = m.loss_grad_(batch, 1 / b.n, sparse_grad=rows)
            if g is not None and not o.sparse_ok:
                m.densify_(g)
                g = None
            o.step_(m.params, m.grads, g, lr=0.05)
    close(dev.params, cpu.params, spec.dtype, "parameters after 4 steps")


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_backends_products_equal_scipys(kind, dtype):
    """Backend.sparse_matmul / sparse_t_matmul (cuSPARSE SpMM on transposed views on a GPU) against scipy, on
    canonical and non-canonical rows."""
    b = backend_of(kind)
    rng = np.random.default_rng(2)
    X = messy_csr(64, 300, rng, dtype)
    W, D = rng.standard_normal((300, 9)).astype(dtype), rng.standard_normal((64, 9)).astype(dtype)
    for host in (X, canonical_csr(X)):
        dev = b.sparse.csr_matrix(host) if kind == "cupy" else host.copy()
        close(b.sparse_matmul(dev, b.xp.asarray(W)), host @ W, dtype, "X @ W")
        dev = b.sparse.csr_matrix(host) if kind == "cupy" else host.copy()
        close(b.sparse_t_matmul(dev, b.xp.asarray(D)), host.T @ D, dtype, "X^T @ D")


def rows_times_on_the_host(indptr, indices, data, B):
    """The GPU kernel's arithmetic (mpinn.device.backend._rows_times_kernel) written out in numpy, one output row at a
    time, each entry's product then sum rounded in turn."""
    out = np.zeros((len(indptr) - 1, B.shape[1]), np.result_type(data, B))
    for r in range(len(indptr) - 1):
        for k in range(indptr[r], indptr[r + 1]):
            out[r] = out[r] + data[k] * B[indices[k]]
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_kernels_order_is_scipys_so_a_transposed_product_is_bitwise(dtype):
    """transpose_csr orders X^T's rows by X's row (a unique sort key); summed in that order, as the GPU kernel
    does, X @ W and X^T @ D equal scipy's to the bit, duplicates and unsorted rows included."""
    from mpinn.device.backend import transpose_csr
    rng = np.random.default_rng(3)
    X = messy_csr(40, 70, rng, dtype)
    W, D = rng.standard_normal((70, 5)).astype(dtype), rng.standard_normal((40, 5)).astype(dtype)
    assert np.array_equal(rows_times_on_the_host(X.indptr, X.indices, X.data, W), X @ W)
    indptr, rows, data = transpose_csr(np, X)
    assert np.array_equal(rows_times_on_the_host(indptr, rows, data, D), X.T @ D)
    assert np.array_equal(np.diff(indptr), np.bincount(X.indices, minlength=70))


@pytest.mark.parametrize("kind", DEVICES)
def test_the_hashed_gradient_is_the_same_bits_every_run(kind):
    """X^T @ D for a 1024-row batch of 20 Zipf ids a row (hot columns summing hundreds of rows), 20 times: the
    same bits each time, as a resumed run needs. cuSPARSE's SpMM with op(A) transposed sums with atomics and
    does not (its documentation; on the H200 a resumed run differed in the last bits)."""
    from mpinn.device.backend import to_host
    b = backend_of(kind)
    rng = np.random.default_rng(7)
    n, width = 1024, 20000
    cols = np.minimum(rng.zipf(1.1, size=(n, 20)) - 1, width - 1)
    X = sp.csr_matrix((np.ones(n * 20, np.float32), cols.ravel(), 20 * np.arange(n + 1)), shape=(n, width))
    D = rng.standard_normal((n, 65)).astype(np.float32)
    runs = [to_host(b.sparse_t_matmul(b.sparse.csr_matrix(X) if kind == "cupy" else X.copy(), b.xp.asarray(D)))
            for _ in range(20)]
    close(runs[0], X.T @ D, "float32", "X^T @ D")
    assert all(np.array_equal(r, runs[0]) for r in runs[1:])


@pytest.mark.gpu
@needs_gpu
def test_cupy_device_feed_matches_the_host_batches():
    from mpinn.device.backend import get_backend, to_host
    rng = np.random.default_rng(4)
    host = [Batch(messy_csr(n, 50, rng), rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 4, n))
            for n in (3, 9, 0, 5, 40, 2, 17)]
    feed = DeviceFeed(ListFeed(host), get_backend("cupy"))
    for want in host:
        got = feed.next()
        assert np.array_equal(to_host(got.y), want.y) and np.array_equal(to_host(got.Xd), want.Xd)
        assert got.Xs.shape == want.Xs.shape and all(           # as they came: unsorted, duplicates kept
            np.array_equal(to_host(getattr(got.Xs, k)), getattr(want.Xs, k)) for k in ("data", "indices", "indptr"))


@pytest.mark.skipif(GPUS, reason="this machine has a GPU")
def test_the_gpu_benchmark_says_why_it_cannot_run(tmp_path):
    r = in_process("scripts.bench.gpu", ["--out", str(tmp_path / "b.json")])
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
    from mpinn.device.backend import CupyBackend
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
    from mpinn.device.backend import CupyBackend

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
