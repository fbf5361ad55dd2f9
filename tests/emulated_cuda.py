"""A stand-in for the cupy subset CudaOps and its tests use, running mpinn/device/cuda/step_ops.cu on the CPU
(tests/emulated_cuda.h: each block's threads are fibers run in a random order between barriers, the blocks one
by one in a random order): arrays are numpy arrays with guard bytes around them (checked after every launch), the
module is compiled with g++ (cached by its source's hash in a temporary folder), every kernel argument is checked
against the kernel's C signature (cupy passes numpy scalars by their type), a launch of no blocks is refused (as
CUDA refuses it), and a stream capture records the launches for replay. What it does not model: concurrency
between the blocks of one launch, flush-to-zero (tests/comm/test_cuda_bits.py checks the PTX for that), a GPU's
exp, log and tanh.

pytest -p emulated_cuda (tests/ on the path) installs it as cupy for a whole process (tests/comm/test_cuda_emulated.py
starts one)."""
import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
import types
import weakref

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(tempfile.gettempdir(), "mpinn-emulated-cuda-%d" % os.getuid())
EMULATED = True
GUARD = 256
_live = []          # (weakref to base, nbytes)
LAUNCHES = {"count": 0}
ndarray = np.ndarray


def _alloc(shape, dtype):
    dtype = np.dtype(dtype)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    base = np.empty(nbytes + 2 * GUARD + 64, np.uint8)
    off = (-base.ctypes.data) % 64
    base[:] = 0xAB
    a = base[off + GUARD: off + GUARD + nbytes].view(dtype).reshape(shape)
    _live.append((weakref.ref(base), off, nbytes))
    return a


def check_guards():
    keep = []
    for ref, off, nbytes in _live:
        base = ref()
        if base is None:
            continue
        keep.append((ref, off, nbytes))
        lo = base[off: off + GUARD]
        hi = base[off + GUARD + nbytes: off + 2 * GUARD + nbytes]
        if (lo != 0xAB).any() or (hi != 0xAB).any():
            raise AssertionError("EMU: a kernel wrote outside an array (guard bytes changed)")
    _live[:] = keep


def empty(shape, dtype=np.float64):
    return _alloc(shape, dtype)


def zeros(shape, dtype=np.float64):
    a = _alloc(shape, dtype)
    a[...] = 0
    return a


def asarray(a, dtype=None):
    src = np.asarray(a, dtype=dtype)
    out = _alloc(src.shape, src.dtype)
    out[...] = src
    return out


def array(a, dtype=None):
    return asarray(a, dtype)


int32, int64, float32, float64 = np.int32, np.int64, np.float32, np.float64

_capture = {"list": None}


class Stream:
    def __init__(self, non_blocking=False):
        self.non_blocking = non_blocking

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self, mode=None):
        assert _capture["list"] is None, "already capturing"
        _capture["list"] = []

    def end_capture(self):
        recorded, _capture["list"] = _capture["list"], None
        return Graph(recorded)

    def synchronize(self):
        pass


class Graph:
    def __init__(self, recorded):
        self.recorded = recorded

    def launch(self, stream=None):
        for fn in self.recorded:
            fn()


cuda = types.SimpleNamespace(Stream=Stream, graph=types.SimpleNamespace(Graph=Graph))

_C = {"float": np.float32, "double": np.float64, "int": np.int32, "ll": np.int64, "long long": np.int64}
_CT = {"float": ctypes.c_float, "double": ctypes.c_double, "int": ctypes.c_int, "ll": ctypes.c_longlong,
       "long long": ctypes.c_longlong}


def _signatures(path):
    pre = subprocess.run(["g++", "-E", "-P", "-x", "c++", path, "-D__global__=EMUGLOBAL"], capture_output=True,
                         text=True, check=True).stdout
    sigs = {}
    for m in re.finditer(r'extern "C" EMUGLOBAL void (\w+)\s*\(([^)]*)\)', pre):
        params = []
        for p in m.group(2).split(","):
            p = " ".join(p.split())
            ty = re.sub(r"\s*\w+$", "", p).strip()
            params.append(ty)
        sigs[m.group(1)] = params
    return sigs


class RawModule:
    def __init__(self, code, options=()):
        assert "--fmad=false" in options
        prelude = open(os.path.join(HERE, "emulated_cuda.h")).read()
        digest = hashlib.sha1((prelude + code).encode()).hexdigest()[:16]
        os.makedirs(CACHE, exist_ok=True)
        src = os.path.join(CACHE, "k_%s.cu" % digest)
        with open(src, "w") as f:
            f.write(code)
        self.sigs = _signatures(src)
        lib = os.path.join(CACHE, "k_%s.so" % digest)
        if not os.path.exists(lib):
            cpp = os.path.join(CACHE, "k_%s.cpp" % digest)
            with open(cpp, "w") as f:
                f.write('#include "emulated_cuda.h"\n#include "%s"\n' % src)
                for name, params in self.sigs.items():
                    args = ", ".join("*(%s*) p[%d]" % (t, i) for i, t in enumerate(params))
                    f.write('extern "C" void emu_%s(unsigned gx, unsigned gy, unsigned bx, unsigned by, void** p) '
                            '{ emu_launch({gx, gy, 1}, {bx, by, 1}, [=]() { %s(%s); }); }\n' % (name, name, args))
            part = "%s.%d" % (lib, os.getpid())        # then renamed: a parallel test process sees all or none
            subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared",
                            "-fPIC", "-Wl,-Bsymbolic", "-I", HERE, cpp, "-o", part], check=True)
            os.replace(part, lib)
        self.lib = ctypes.CDLL(lib)

    def get_function(self, name):
        return Kernel(self, name, self.sigs[name])


def _convert(ty, a, name, i):
    if ty.endswith("*"):
        base = ty[:-1].replace("const", "").strip()
        if not isinstance(a, np.ndarray):
            raise TypeError("%s arg %d: %s wants an array, got %r" % (name, i, ty, type(a)))
        if a.dtype != np.dtype(_C[base]):
            raise TypeError("%s arg %d: %s, got an array of %s" % (name, i, ty, a.dtype))
        if a.size and not a.flags.c_contiguous:
            raise TypeError("%s arg %d: not C-contiguous" % (name, i))
        return ctypes.c_void_p(a.ctypes.data if a.size else 0)
    want = _C[ty]
    if type(a) is not want:
        raise TypeError("%s arg %d: %s wants %s, got %r" % (name, i, ty, want.__name__, type(a)))
    return _CT[ty](a.item())


class Kernel:
    def __init__(self, module, name, params):
        self.module, self.name, self.params = module, name, params
        self.fn = getattr(module.lib, "emu_" + name)

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        assert len(args) == len(self.params), (self.name, len(args), len(self.params))
        grid = tuple(grid) + (1,) * (2 - len(grid))
        block = tuple(block) + (1,) * (2 - len(block))
        assert all(int(g) >= 1 for g in grid) and all(int(b) >= 1 for b in block), (self.name, grid, block)
        holders = [_convert(t, a, self.name, i) for i, (t, a) in enumerate(zip(self.params, args))]
        ptrs = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        keep = (holders, ptrs, args)

        def go():
            LAUNCHES["count"] += 1
            self.fn(ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]), ctypes.c_uint(block[0]), ctypes.c_uint(block[1]),
                    ptrs)
            check_guards()
            return keep
        if _capture["list"] is not None:
            _capture["list"].append(go)
        else:
            go()


def pytest_configure(config):
    """pytest -p emulated_cuda: this module is cupy for the whole process (before any test module imports it), and
    mpinn.device.backend's probe finds one GPU (the stand-in has no cupyx)."""
    import sys
    import mpinn.device.backend as backend
    sys.modules["cupy"] = sys.modules[__name__]
    backend.gpu_probe = lambda: (1, None)
