"""Every CUDA kernel of mpinn/device/kernels.py (cupy ElementwiseKernels, compiled by cupy at run time on a GPU)
compiled here with the nvcc these machines have (nvcc -arch=sm_90, an H200's), so a kernel that does not compile
costs no GPU time. Each kernel's parameters, operation and preamble are taken from its builder (given a stand-in
for cupy that records them) and written out as the __global__ function an ElementwiseKernel stands for: one
thread an element, its non-raw arguments indexed by i, its raw ones as pointers, the operation ended by a ";" (as
cupy ends it); T, Y as float, then double; I, J
as int, then long long. Skipped where there is no nvcc."""
import os
import shutil
import subprocess

import pytest

from mpinn.device import kernels

NVCC = shutil.which("nvcc")
pytestmark = [pytest.mark.launch, pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")]
SCALARS = {"int64": "long long", "int32": "int"}


class Recorder:
    """A stand-in for the cupy module: ElementwiseKernel(in_params, out_params, operation, name, preamble=) kept."""

    def ElementwiseKernel(self, in_params, out_params, operation, name, preamble="", **kw):   # noqa: N802 (cupy's)
        return dict(ins=in_params, outs=out_params, operation=operation, name=name, preamble=preamble)


def params(text):
    """[(raw?, type, name)] of an ElementwiseKernel parameter list."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        words = item.split()
        out.append((words[0] == "raw", SCALARS.get(words[-2], words[-2]), words[-1]))
    return out


def source(k):
    """The __global__ function an ElementwiseKernel stands for."""
    args, body = [], []
    for kind, plist in (("in", params(k["ins"])), ("out", params(k["outs"]))):
        for raw, typ, name in plist:
            if raw:
                args.append("%s%s* %s" % ("const " if kind == "in" else "", typ, name))
            else:
                args.append("%s%s* %s_" % ("const " if kind == "in" else "", typ, name))
                body.append(("const %s %s = %s_[i];" if kind == "in" else "%s &%s = %s_[i];") % (typ, name, name))
    return """%s
extern "C" __global__ void %s(%s, long long n) {
    for (long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x; i < n; i += (long long) blockDim.x * gridDim.x) {
        %s
        %s;
    }
}
""" % (k["preamble"], k["name"], ", ".join(args), "\n        ".join(body), k["operation"])


@pytest.mark.parametrize("types", [("float", "int"), ("double", "long long")], ids=["float32", "float64"])
def test_every_elementwise_kernel_compiles_for_sm_90(tmp_path, types):
    real, index = types
    rec = Recorder()
    built = [kernels._BUILD[name](rec) for name in sorted(kernels._BUILD)]
    assert len(built) >= 14
    head = "typedef %s T; typedef %s Y; typedef %s I; typedef %s J;\n" % (real, real, index, index)
    head += kernels._ROUNDED        # the overloads every preamble that uses them carries
    unit = head + "\n".join(source(dict(k, preamble="")) for k in built)
    path = os.path.join(tmp_path, "kernels.cu")
    with open(path, "w") as f:
        f.write(unit)
    r = subprocess.run([NVCC, "-arch=sm_90", "-c", path, "-o", os.path.join(tmp_path, "kernels.o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
