"""The step plan's GPU kernels (mpinn.device.cuda_ops.CudaOps, mpinn/device/cuda/step_ops.cu) against their numpy
specification (mpinn.device.ops.HostOps): to the bit where the specification fixes the order of the arithmetic (the
hashed rows' products and gradient, the column sums, the updates, the verdict, the activations' gradients), within
a float type's tolerance where a library's order or its exp and log differ (the GEMM, the heads, the total). Each
kernel gives the same bits when run again; a captured graph's replays equal eager steps; padding entries past
indptr[n] are never read; a non-finite step changes no parameter, moment or count. The compile check runs wherever
nvcc is; the rest are marked gpu, skipped where cupy finds no GPU."""
import shutil
import subprocess

import numpy as np
import pytest

from conftest import ROOT
from fake_device import messy_csr
from mpinn.device.backend import gpu_probe, to_host
from mpinn.device.cuda_ops import OPTIONS, SOURCE, kernel_names
from mpinn.device.ops import LR, POS, RING, T, HostOps

GPUS, NO_GPU = gpu_probe()
DTYPES = ["float32", "float64"]
TOL = {"float32": 1e-5, "float64": 1e-12}
TABLE, WIDTH = 1 << 18, 64
HOST = HostOps()


def on_gpu(test):
    """Marked gpu, skipped where cupy finds no GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU: %s" % NO_GPU)(test))


@pytest.mark.launch
def test_the_step_kernels_compile_for_sm_90(tmp_path):
    """nvcc as the tests' machine has it, and the options cupy's NVRTC compile gets (--std=c++17 --fmad=false, then
    the -ftz=true cupy appends; to PTX for compute_90): every kernel CudaOps loads is exported under its name."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed (the CUDA toolkit)")
    with open(SOURCE) as f:
        assert "#include" not in f.read(), "NVRTC compiles the source without the host's headers"
    r = subprocess.run([nvcc, "-arch=sm_90", "-c", SOURCE, "-o", str(tmp_path / "step_ops.o")], capture_output=True,
                       text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    ptx = tmp_path / "step_ops.ptx"
    r = subprocess.run([nvcc, "-arch=compute_90", "-ptx", *OPTIONS, "-ftz=true", SOURCE, "-o", str(ptx)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = ptx.read_text().splitlines()
    entries = {line.split()[2].rstrip("(") for line in lines if line.startswith(".visible .entry")}
    assert set(kernel_names()) == entries


# ---------------------------------------------------------------- the device, its arrays and the oracle's
@pytest.fixture(scope="module")
def ops():
    import cupy  # optional: cupy (the [gpu] extra)
    from mpinn.device.cuda_ops import CudaOps
    return CudaOps(cupy)


@pytest.fixture
def dev(ops):
    """Everything a test does on the device, copies included, runs in order on the step's stream."""
    with ops.stream():
        yield Device(ops)


class Device:
    def __init__(self, ops):
        self.ops = ops

    def put(self, a):
        """A device copy of a host array."""
        return self.ops.cp.asarray(np.ascontiguousarray(a))

    def get(self, a):
        """A host copy of a device array (the stream's work done)."""
        return np.array(to_host(a))

    def same(self, got, want):
        np.testing.assert_array_equal(self.get(got), want)


def close(got, want, dtype, scale):
    """|got - want| <= tol * scale, element by element (scale: the size of the terms behind each value)."""
    err = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(err - TOL[dtype] * scale), err.shape)
    assert np.all(err <= TOL[dtype] * scale), "at %s: %r against %r" % (worst, got[worst], want[worst])


def batch(rng, n, dtype, per_row=6, index=np.int32, pad=41, hot=False):
    """A batch's hashed rows over capacity-sized arrays: messy_csr's (unsorted ids, a duplicate in every row of
    two or more; hot: every third entry in column 7), then `pad` garbage entries (ids outside the table, NaN
    values) past indptr[n], which no operation may read."""
    X = messy_csr(n, TABLE, rng, dtype=dtype, per_row=per_row)
    if hot:
        X.indices[::3] = 7
    junk = rng.choice(np.array([-3, TABLE, TABLE + 99, np.iinfo(np.int32).max]), pad)
    indices = np.concatenate([X.indices, junk]).astype(index)
    data = np.concatenate([X.data, np.full(pad, np.nan, dtype)]).astype(dtype)
    return X.indptr.astype(index), indices, data


def ring_state(pos, ok=True, t=0):
    ring = np.zeros((RING, 2))
    ring[pos % RING, 1] = 1.0 if ok else 0.0
    return ring, np.array([pos, t], np.int64)


# ---------------------------------------------------------------- dense layers
FORMS = [(False, False, 256, 256, 784), (True, False, 784, 64, 256), (False, True, 256, 784, 256),
         (False, False, 37, 13, 5), (True, False, 65, 3, 70), (False, True, 1, 129, 17), (True, True, 66, 67, 9)]


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta, tb, M, N, K", FORMS)
def test_gemm_in_its_forms(dev, dtype, ta, tb, M, N, K):
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(dtype)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(dtype)
    want = np.zeros((M, N), dtype)
    HOST.gemm(a, b, want, ta, tb)
    out = dev.ops.zeros((M, N), dtype)
    dev.ops.gemm(dev.put(a), dev.put(b), out, ta, tb)
    first = dev.get(out)
    close(first, want, dtype, np.abs(a.T if ta else a).astype(np.float64) @ np.abs(b.T if tb else b))
    dev.ops.gemm(dev.put(a), dev.put(b), out, ta, tb)
    dev.same(out, first)


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["relu", "tanh", "sigmoid"])
def test_bias_activations_and_their_gradients(dev, dtype, act):
    """z + b, relu and the gradients to the bit (plain arithmetic); tanh and the sigmoid's exp within tolerance."""
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((256, 256)) * 4).astype(dtype)
    z[4, 1] = np.nan
    b = rng.standard_normal(256).astype(dtype)
    want = z.copy()
    HOST.bias_add(want, b)
    got = dev.put(z)
    dev.ops.bias_add(got, dev.put(b))
    dev.same(got, want)
    for bias in (b, None):
        want = z.copy()
        HOST.bias_act(want, bias, act)
        got = dev.put(z)
        dev.ops.bias_act(got, None if bias is None else dev.put(bias), act)
        got = dev.get(got)
        assert np.isnan(got[4, 1])
        got[4, 1] = want[4, 1] = 0
        if act == "relu":
            np.testing.assert_array_equal(got, want)
        else:
            close(got, want, dtype, np.maximum(np.abs(want), 1))
    a = want
    d = rng.standard_normal(a.shape).astype(dtype)
    d[0, 0], a[0, 0] = np.nan, 0                # relu: d * 0 stays NaN
    want = d.copy()
    HOST.act_grad(a, want, act)
    got = dev.put(d)
    dev.ops.act_grad(dev.put(a), got, act)
    dev.same(got, want)


# ---------------------------------------------------------------- the hashed rows
@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_rows_times_is_scipys_to_the_bit(dev, dtype, index):
    rng = np.random.default_rng(3)
    indptr, indices, data = batch(rng, 256, dtype, index=index)
    B = rng.standard_normal((TABLE, WIDTH)).astype(dtype)
    base, bias = rng.standard_normal((256, WIDTH)).astype(dtype), rng.standard_normal(WIDTH).astype(dtype)
    on = [dev.put(a) for a in (indptr, indices, data, B, base, bias)]
    for with_base, with_bias in [(False, False), (True, False), (False, True), (True, True)]:
        want = np.full((256, WIDTH), 5, dtype)
        HOST.rows_times(indptr, indices, data, B, want, base if with_base else None, bias if with_bias else None)
        out = dev.ops.zeros((256, WIDTH), dtype)
        for _ in range(2):
            dev.ops.rows_times(*on[:4], out, on[4] if with_base else None, on[5] if with_bias else None)
            dev.same(out, want)


HASHED = {"small": (64, 4, False), "w2": (256, 6, False), "hot": (2048, 12, True), "wide": (8192, 20, False),
          "empty": (50, 1, False)}


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("case", sorted(HASHED))
def test_hashed_grad_is_scipys_transposed_product_to_the_bit(dev, dtype, index, case):
    """The sorted unique ids, k, and X^T d on them, each column's entries (duplicates in a row included) added in
    position order; one radix pass (small), two, three (wide), a hot column over many blocks, no entries at all."""
    n, per_row, hot = HASHED[case]
    rng = np.random.default_rng(5)
    indptr, indices, data = batch(rng, n, dtype, per_row=per_row, index=index, hot=hot)
    d = rng.standard_normal((n, WIDTH)).astype(dtype)
    cap = indices.shape[0]
    want = HOST.hashed_workspace(TABLE, n, cap, WIDTH, dtype)
    HOST.hashed_grad(indptr, indices, data, TABLE, d, want)
    k = int(want["k"][0])
    ws = dev.ops.hashed_workspace(TABLE, n, cap, WIDTH, dtype)
    on = [dev.put(a) for a in (indptr, indices, data)]
    dev.ops.hashed_grad(*on, TABLE, dev.put(d), ws)
    first = {key: dev.get(ws[key]) for key in ("ids", "rows", "k")}
    assert int(first["k"][0]) == k
    np.testing.assert_array_equal(first["ids"][:k], want["ids"][:k])
    np.testing.assert_array_equal(first["rows"][:k], want["rows"][:k])
    dev.ops.hashed_grad(*on, TABLE, dev.put(d), ws)
    for key in first:
        dev.same(ws[key], first[key])


# ---------------------------------------------------------------- the head and the sums
@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("loss", ["softmax", "sigmoid", "squared"])
@pytest.mark.parametrize("scale", [1 / 256, 1.0])
def test_heads_losses_and_deltas(dev, dtype, loss, scale):
    rng = np.random.default_rng(6)
    k = {"softmax": 10, "sigmoid": 1, "squared": 3}[loss]
    z = (rng.standard_normal((256, k)) * 3).astype(dtype)
    z[:4, 0] = [-800, 800, -40, 40] if loss == "sigmoid" else z[:4, 0]
    y = {"softmax": rng.integers(0, k, 256), "sigmoid": rng.integers(0, 2, 256).astype(dtype),
         "squared": rng.standard_normal((256, k)).astype(dtype)}[loss]
    scalars = np.array([scale, 0.1])
    rows, d = np.zeros(256, dtype), np.zeros_like(z)
    HOST.head(loss, z, y, scalars, rows, d)
    got_rows, got_d = dev.ops.zeros(256, dtype), dev.ops.zeros(z.shape, dtype)
    on = [dev.put(a) for a in (z, y, scalars)]
    dev.ops.head(loss, *on, got_rows, got_d)
    first = dev.get(got_rows), dev.get(got_d)
    size = np.maximum(np.abs(z).max(axis=1), 1)       # the terms behind a loss: m, log s, z_y
    close(first[0], rows, dtype, size if loss != "squared" else np.maximum(rows, 1))
    close(first[1], d, dtype, np.maximum(np.abs(d), scale))
    dev.ops.head(loss, *on, got_rows, got_d)
    dev.same(got_rows, first[0])
    dev.same(got_d, first[1])
    if loss == "softmax":
        z[5, 3] = np.nan                        # a NaN logit: that row's loss is NaN (the step is skipped)
        dev.ops.head(loss, dev.put(z), on[1], on[2], got_rows, got_d)
        got = dev.get(got_rows)
        assert np.isnan(got[5]) and np.isfinite(np.delete(got, 5)).all()


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 256, 1000])
def test_total_and_colsum(dev, dtype, n):
    """total into the last place of a longer buffer (the loss slot of the gradients), nothing else touched; colsum
    adds the rows in order, to the bit."""
    rng = np.random.default_rng(n)
    rows = rng.standard_normal(n).astype(dtype)
    buf = dev.put(np.full(9, 3, dtype))
    dev.ops.total(dev.put(rows), buf[8:])
    first = dev.get(buf)
    np.testing.assert_array_equal(first[:8], 3)
    close(first[8:], rows.sum(keepdims=True), dtype, np.abs(rows).sum())
    dev.ops.total(dev.put(rows), buf[8:])
    dev.same(buf, first)
    d = (rng.standard_normal((n, WIDTH)) * rng.uniform(0.01, 100, (n, WIDTH))).astype(dtype)
    want = np.zeros(WIDTH, dtype)
    HOST.colsum(d, want)
    out = dev.ops.zeros(WIDTH, dtype)
    dev.ops.colsum(dev.put(d), out)
    dev.same(out, want)


# ---------------------------------------------------------------- the verdict and the updates
@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_verdict_sees_any_non_finite_value(dev, dtype):
    rng = np.random.default_rng(7)
    buf = rng.standard_normal(100_003).astype(dtype)
    rows = rng.standard_normal((500, WIDTH)).astype(dtype)
    k = np.array([300], np.int64)
    # (the ring's place, a NaN at this place of buf, an infinity at this place of rows): a row past k does not count
    cases = [(6, None, None), (70, 77, None), (0, -1, None), (63, None, (299, 5)), (130, None, (300, 0))]
    for pos, in_buf, in_rows in cases:
        b, r = buf.copy(), rows.copy()
        if in_buf is not None:
            b[in_buf] = np.nan
        if in_rows is not None:
            r[in_rows] = np.inf
        ring, state = ring_state(pos)
        ring[:, 0] = 9
        before, got_ring = state.copy(), dev.put(ring)
        HOST.verdict(b, r, k, ring, state)
        ok = not (in_buf is not None or pos == 63)      # a finite step counts: T + 1
        assert ring[pos % RING, 1] == (1.0 if ok else 0.0) and state[T] == before[T] + ok
        for _ in range(2):
            got_state = dev.put(before)
            dev.ops.verdict(dev.put(b), dev.put(r), dev.put(k), got_ring, got_state)
            dev.same(got_ring, ring)
            dev.same(got_state, state)
    ring, state = ring_state(5)
    got_ring, got_state = dev.put(np.zeros((RING, 2))), dev.put(state)
    HOST.verdict(buf, None, None, ring, state)
    dev.ops.verdict(dev.put(buf), None, None, got_ring, got_state)
    dev.same(got_ring, ring)
    dev.ops.advance(got_state)
    dev.same(got_state, [6, 1])


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_updates_to_the_bit_and_a_skipped_step_changes_nothing(dev, dtype, optimizer):
    """Three steps, the second one non-finite (a NaN in the gradients' buffer, so the verdict is 0): the dense and the
    row updates equal numpy's bit for bit, and the skipped step leaves parameters, moments and counts as they were.
    The rows' counts stay small: c(t)'s powers are libm's correctly rounded ones (numpy's vectorised power can
    round differently past t = 6 on AVX-512 machines)."""
    rng = np.random.default_rng(8)
    n, kcap, b1, b2, eps = 10_001, 700, 0.9, 0.999, 1e-8 / np.sqrt(0.001)
    host = {"p": rng.standard_normal(n), "m": rng.standard_normal(n), "v": np.abs(rng.standard_normal(n)),
            "table": rng.standard_normal((TABLE, WIDTH)), "tm": rng.standard_normal((TABLE, WIDTH)),
            "tv": np.abs(rng.standard_normal((TABLE, WIDTH)))}
    host = {key: a.astype(dtype) for key, a in host.items()}
    host["t_row"] = rng.integers(0, 2, TABLE)
    ring, state = ring_state(0, ok=False, t=3)
    host.update(ring=ring, state=state)
    on = {key: dev.put(a) for key, a in host.items()}
    for step, lr in enumerate([0.05, 0.5, 0.01]):
        g = rng.standard_normal(n + 1).astype(dtype)
        g[-1] = 2.5
        if step == 1:
            g[17] = np.nan
        k = np.array([[500, 0, 700][step]], np.int64)
        ids = np.sort(rng.choice(TABLE, kcap, replace=False))          # unique; past k, ids never read
        ids[k[0]:] = rng.integers(0, TABLE, kcap - k[0])
        rows = rng.standard_normal((kcap, WIDTH)).astype(dtype)
        scalars = np.array([1 / 256, lr])
        before = {key: a.copy() for key, a in host.items()}
        args = [g, ids, rows, k, scalars]
        for ops, arrays, (g_, ids_, rows_, k_, sc) in [(HOST, host, args), (dev.ops, on, [dev.put(a) for a in args])]:
            ops.verdict(g_, rows_, k_, arrays["ring"], arrays["state"])
            if optimizer == "sgd":
                ops.sgd_dense(arrays["p"], g_[:n], sc, arrays["ring"], arrays["state"])
                ops.sgd_rows(arrays["table"], ids_, rows_, k_, sc, arrays["ring"], arrays["state"])
            else:
                ops.adam_dense(arrays["p"], g_[:n], arrays["m"], arrays["v"], arrays["state"], sc, arrays["ring"],
                               b1, b2, eps)
                ops.adam_rows(arrays["table"], arrays["tm"], arrays["tv"], arrays["t_row"], ids_, rows_, k_,
                              arrays["state"], sc, arrays["ring"], b1, b2, eps)
            ops.advance(arrays["state"])
        for key in host:
            dev.same(on[key], host[key])
        for key in set(host) - {"ring", "state"} if step == 1 else ():    # skipped: only the ring and POS move
            np.testing.assert_array_equal(host[key], before[key])
    assert host["state"][T] == 5 and host["state"][POS] == 3       # the verdict counts the two steps taken


# ---------------------------------------------------------------- a captured step
@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_captured_step_replays_as_eager_steps(dev, dtype):
    """gemm, bias and activation, head, total, the weights' gradient, verdict, sgd and advance captured once, replayed
    three times with a new rate each time (and a NaN input the second time: a skipped step), against the same
    calls made eagerly on copies: the same bits."""
    rng = np.random.default_rng(9)
    x, y = rng.standard_normal((256, 784)).astype(dtype), rng.integers(0, 10, 256)
    p = (rng.standard_normal(7850) * 0.05).astype(dtype)

    def arrays():
        a = {"x": dev.put(x), "y": dev.put(y), "p": dev.put(p), "g": dev.ops.zeros(7851, dtype),
             "z": dev.ops.zeros((256, 10), dtype), "rows": dev.ops.zeros(256, dtype),
             "d": dev.ops.zeros((256, 10), dtype), "scalars": dev.put([1 / 256, 0.0]),
             "ring": dev.ops.zeros((RING, 2), np.float64), "state": dev.ops.zeros(2, np.int64)}
        a["W"], a["b"] = a["p"][:7840].reshape(784, 10), a["p"][7840:]
        a["gW"], a["gb"] = a["g"][:7840].reshape(784, 10), a["g"][7840:7850]
        return a

    def step(a, ops=dev.ops):
        ops.gemm(a["x"], a["W"], a["z"])
        ops.bias_act(a["z"], a["b"], "relu")
        ops.head("softmax", a["z"], a["y"], a["scalars"], a["rows"], a["d"])
        ops.total(a["rows"], a["g"][7850:])
        ops.gemm(a["x"], a["d"], a["gW"], ta=True)
        ops.colsum(a["d"], a["gb"])
        ops.verdict(a["g"], None, None, a["ring"], a["state"])
        ops.sgd_dense(a["p"], a["g"][:7850], a["scalars"], a["ring"], a["state"])
        ops.advance(a["state"])

    eager, graphed = arrays(), arrays()
    graph = dev.ops.capture(lambda: step(graphed))
    dev.same(graphed["state"], [0, 0])                  # captured, not run
    for i, lr in enumerate([0.1, 0.7, 0.03]):
        for a in (eager, graphed):
            a["scalars"][LR:] = dev.put([lr])
            a["x"][3, 5] = np.nan if i == 1 else x[3, 5]
        step(eager)
        graph.replay()
        for key in ("p", "g", "z", "d", "rows", "ring", "state", "scalars"):
            dev.same(graphed[key], dev.get(eager[key]))
        assert dev.get(eager["ring"])[i, 1] == (0.0 if i == 1 else 1.0)
    assert dev.get(eager["state"])[POS] == 3
