"""The step's GPU kernels (mpinn/device/cuda/step_ops.cu) where numpy's bits are easy to miss: cupy compiles every
RawModule with -ftz=true appended after the options it is given (cupy.cuda.compiler), which flushes float32
subnormals in every float operation, the _rn intrinsics included, while numpy keeps them; and numpy sums one column
(a contiguous run) pairwise, from 0 (so a column of -0.0 sums to +0.0). The PTX check runs wherever nvcc is; the
rest are marked gpu (tests/comm/test_cuda_ops.py's device, skipped where cupy finds no GPU)."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import ROOT
from mpinn.device.cuda_ops import OPTIONS, SOURCE
from test_cuda_ops import HOST, WIDTH, dev, on_gpu, ops, ring_state  # noqa: F401  (dev and ops: the fixtures)

# the float32 kernels whose arithmetic the tests hold to numpy's bits (the GEMM, the heads, the total and the
# activations' exp and tanh are held within a tolerance)
EXACT = ("rows_times_f32_", "colsum_f32", "hashed_rows_f32", "sgd_dense_f32", "sgd_rows_f32", "adam_dense_f32",
         "adam_rows_f32", "act_grad_f32", "verdict_start_f32", "verdict_scan_f32")
# .ftz forms that change a subnormal's value or order; an equality with zero or a NaN test is the same either way
FLUSHING = re.compile(r"\b(?:add|sub|mul|div|sqrt|fma|cvt|abs|neg|min|max|setp\.(?:gt|ge|lt|le)u?)(?:\.\w+)*\.ftz\b")


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.launch
def test_the_exact_kernels_keep_subnormals_under_cupys_flush_to_zero(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed (the CUDA toolkit)")
    ptx = tmp_path / "step_ops.ptx"
    r = subprocess.run([nvcc, "-arch=compute_90", "-ptx", *OPTIONS, "-ftz=true", SOURCE, "-o", str(ptx)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    entries = {body.split("(")[0]: body for body in re.split(r"(?m)^\.visible \.entry ", ptx.read_text())[1:]}
    exact = [name for name in entries if name.startswith(EXACT)]
    assert len(exact) == len(EXACT) + 3                 # rows_times: four index types
    flushed = {name: sorted(set(FLUSHING.findall(entries[name]))) for name in exact}
    assert not any(flushed.values()), flushed


@on_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 100, 129, 1000, 70001])
def test_one_column_sums_pairwise_as_numpy_does(dev, dtype, n):
    rng = np.random.default_rng(n)
    for width in (1, 3):
        d = (rng.standard_normal((n, width)) * rng.uniform(0.01, 100, (n, width))).astype(dtype)
        for negative_zeros in (False, True):
            if negative_zeros:
                d[...] = -0.0
            want = np.full(width, 5, dtype)
            HOST.colsum(d, want)
            out = dev.ops.zeros(width, dtype)
            dev.ops.colsum(dev.put(d), out)
            np.testing.assert_array_equal(bits(dev.get(out)), bits(want))


@on_gpu
def test_float32_subnormals_stay_as_numpy_keeps_them(dev):
    """Subnormal inputs, products and results through the bit-exact operations: the same bits as numpy's."""
    rng = np.random.default_rng(11)
    f = np.float32
    tiny = (rng.uniform(1, 2, (64, WIDTH)) * 1e-39).astype(f) * rng.choice(f([-1, 1]), (64, WIDTH))
    assert (np.abs(tiny) < np.finfo(f).tiny).all() and (tiny != 0).all()
    ring, state = ring_state(0)
    on_ring, on_state = dev.put(ring), dev.put(state)
    bad = []

    def check(name, fn, *arrays):
        """fn(ops, *arrays, ring, state) by HostOps on copies and by the kernels on device copies: bit for bit."""
        host, device = [np.array(a) for a in arrays], [dev.put(a) for a in arrays]
        fn(HOST, *host, ring, state)
        fn(dev.ops, *device, on_ring, on_state)
        bad.extend((name, i) for i, (g, w) in enumerate(zip(device, host))
                   if not np.array_equal(bits(dev.get(g)), bits(w)))

    check("relu", lambda o, z, b, *_: o.bias_act(z, b, "relu"), tiny, np.zeros(WIDTH, f))
    d = rng.standard_normal(tiny.shape).astype(f)
    check("relu'", lambda o, a, d, *_: o.act_grad(a, d, "relu"), np.abs(tiny), d)
    check("colsum", lambda o, d, out, *_: o.colsum(d, out), tiny[:, :1], np.zeros(1, f))
    indptr, indices = np.arange(0, 130, 2, dtype=np.int32), rng.integers(0, 64, 128).astype(np.int32)
    small = [(rng.standard_normal(shape) * 1e-20).astype(f) for shape in (128, (64, WIDTH))]
    check("rows", lambda o, *a: o.rows_times(*a[:5]), indptr, indices, *small, np.zeros((64, WIDTH), f))
    scalars = np.array([1 / 64, 1e-3])
    g = np.concatenate([tiny.ravel(), f([1e-40])])          # the loss slot last: a subnormal loss into the ring
    check("verdict, sgd", lambda o, p, g, sc, r, s: (o.verdict(g, None, None, r, s),
                                                     o.sgd_dense(p, g[:-1], sc, r, s)), tiny.ravel() * f(3), g, scalars)
    check("adam", lambda o, p, g, m, v, sc, r, s: o.adam_dense(p, g, m, v, s, sc, r, 0.9, 0.999, 1e-8),
          tiny.ravel(), tiny.ravel(), tiny.ravel() * f(2), np.abs(tiny.ravel()), scalars)
    np.testing.assert_array_equal(bits(dev.get(on_ring)), bits(ring))
    np.testing.assert_array_equal(dev.get(on_state), state)
    assert not bad, bad
