"""The step plan's kernels (mpinn/device/cuda/step_ops.cu through mpinn.device.cuda_ops.CudaOps) run on the CPU, on
tests/emulated_cuda.py's stand-in for cupy (g++, the blocks' threads as fibers, guard bytes around every array,
every argument checked against its kernel's C signature). One pytest process with -p emulated_cuda (cupy is the
stand-in there, never in this process, whose other tests look for a real GPU) runs test_cuda_bits.py's GPU tests,
the quicker of test_cuda_ops.py's, and the plan test below: GraphStep (eager and captured, SGD and Adam, dense
and/or hashed inputs, both float types) with CudaOps for every operation but those a library's order or exp
decides (the GEMM, the heads, the total, tanh and the sigmoid: numpy's there), against the plan with HostOps
alone, byte for byte. Skipped where g++ is not. What a GPU adds is left to the GPU tests (flush-to-zero, a real
stream capture, concurrent blocks)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from mpinn.core.spec import ModelSpec

EMULATED = getattr(sys.modules.get("cupy"), "EMULATED", False)
QUICK = "not wide and not hot and not updates and not verdict_sees and not (hashed_grad and float64)"


@pytest.mark.launch
@pytest.mark.skipif(EMULATED or shutil.which("g++") is None, reason="needs g++ (and runs outside the emulation)")
def test_the_step_kernels_on_the_cpu_emulator():
    tests = os.path.join(ROOT, "tests")
    path = [ROOT, tests, os.path.join(tests, "comm"), os.path.join(tests, "training"), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    files = [os.path.join(tests, "comm", f) for f in ("test_cuda_emulated.py", "test_cuda_bits.py", "test_cuda_ops.py")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "emulated_cuda", "-p", "no:cacheprovider",
                        "-o", "addopts=-ra", "-m", "gpu", "-k", QUICK, *files],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    out = r.stdout[-6000:] + r.stderr[-3000:]
    assert r.returncode == 0 and " passed" in r.stdout and "skipped" not in r.stdout, out


SPECS = {"sigmoid": ModelSpec(1 << 10, 5, (16,), 1, "relu", "sigmoid", "float32", sparse_fan_in=6),
         "softmax": ModelSpec(1 << 9, 7, (8, 6), 4, "tanh", "softmax", "float64", sparse_fan_in=4),
         "dense": ModelSpec(0, 9, (12,), 1, "sigmoid", "sigmoid", "float64"),
         "hashed": ModelSpec(1 << 9, 0, (8,), 1, "relu", "sigmoid", "float32", sparse_fan_in=5)}


@pytest.mark.gpu
@pytest.mark.skipif(not EMULATED, reason="runs in test_the_step_kernels_on_the_cpu_emulator's process")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("shape", sorted(SPECS))
def test_the_plan_on_the_kernels_is_the_plan_on_numpy_byte_for_byte(shape, optimizer):
    # the emulated process alone has test_graph_step's folder on its path and cupy as the stand-in
    import cupy
    from fake_device import FakeBackend, FakeOps
    from mpinn.device.cuda_ops import CudaOps
    from mpinn.device.ops import HostOps
    from test_graph_step import batches, make, state_of, train
    kernels, host = CudaOps(cupy), HostOps()

    class Mixed:
        def __getattr__(self, name):
            if name == "bias_act":
                return lambda z, b, act: (host if act != "relu" else kernels).bias_act(z, b, act)
            return getattr(host if name in ("gemm", "head", "total") else kernels, name)

    class MixedOps(FakeOps):
        def __init__(self, backend):
            super().__init__(backend)
            self.host = Mixed()

        def hashed_workspace(self, *args):
            return kernels.hashed_workspace(*args)

    spec = SPECS[shape]
    data = batches(spec, 64, 4, seed=3) + batches(spec, 21, 1, seed=4)        # a short last batch: eager
    for capture in (False, True):
        runs = []
        for ops in (FakeOps, MixedOps):
            graph_ops = FakeBackend.graph_ops
            FakeBackend.graph_ops = lambda self: self.__dict__.setdefault("_mixed", ops(self))
            try:
                step, model, opt = make(spec, optimizer, capture=capture)
            finally:
                FakeBackend.graph_ops = graph_ops
            runs.append((train(step, data, schedule=lambda s: 0.05 + 0.01 * s), state_of(model, opt)))
        (want, want_state), (got, got_state) = runs
        assert got == want
        for a, b in zip(got_state, want_state):
            np.testing.assert_array_equal(*(np.ascontiguousarray(x).view(np.uint8) for x in (a, b)))
