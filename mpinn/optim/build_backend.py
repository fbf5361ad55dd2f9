"""mpinn's build backend (pyproject.toml: build-backend = "build_backend", backend-path = ["mpinn/optim"]):
setuptools' own, with the optimizers' C kernels added as optional extensions, so that `pip install .`
(and `pip install -e .`) compiles them once, at install time:

    mpinn.optim._fused          the portable baseline (-O3, no -march: what a wheel for any x86-64 CPU holds)
    mpinn.optim._fused_v3       the same source for x86-64-v3 CPUs (AVX2, FMA contraction still off), x86-64 only
    mpinn.optim._fused_native   for this machine's CPU (-march=native: AVX-512 where it has it), carrying the
                                CPU's features, so that it is loaded only on CPUs that have them all

Both are optional: without a C compiler the install succeeds and the numpy passes run (or mpinn builds the
kernels at run time into a private cache, mpinn/optim/fused_build.py). Each is built with the SHA-256 of
its sources, which the loader compares with the installed sources before it loads one. setup.cfg keeps
the metadata; only the extensions, which setup.cfg cannot declare, are added here.

It lives beside the kernels it builds. pip's isolated build imports it as the top-level module
`build_backend` from mpinn/optim/ before mpinn is installed, so it imports nothing from mpinn; the tests
import it as mpinn.optim.build_backend."""
import hashlib
import os
import platform

from setuptools import Extension, setup
from setuptools import build_meta as _setuptools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository
KERNELS = ("mpinn/optim/fused.c", "mpinn/optim/fused_kernels.h")   # what the hash covers, in this order
FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off"]             # no FMA: the numpy passes' bits
V3 = ["-march=x86-64-v3"]


def source_hash(root=ROOT):
    """The SHA-256 of the kernels' sources (mpinn.optim.fused_build.source_hash computes the same)."""
    h = hashlib.sha256()
    for name in KERNELS:
        with open(os.path.join(root, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def cpu_flags():
    """This machine's CPU features, as /proc/cpuinfo lists them (mpinn.optim.fused_build reads the same)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""
    return " ".join(sorted(set(line.split(":", 1)[-1].split())))


def extensions():
    common = dict(include_dirs=["mpinn/optim"], depends=list(KERNELS), libraries=["m"], optional=True)
    hashed = [("MPINN_SOURCE_HASH", '"%s"' % source_hash())]
    out = [Extension("mpinn.optim._fused", ["mpinn/optim/fused.c"], extra_compile_args=FLAGS,
                     define_macros=hashed, **common)]
    if platform.machine().lower() in ("x86_64", "amd64"):
        out.append(Extension("mpinn.optim._fused_v3", ["mpinn/optim/fused_v3.c"], extra_compile_args=FLAGS + V3,
                             define_macros=hashed, **common))
    if cpu_flags():
        out.append(Extension("mpinn.optim._fused_native", ["mpinn/optim/fused_native.c"],
                             extra_compile_args=FLAGS + ["-march=native"],
                             define_macros=hashed + [("MPINN_CPU_FLAGS", '"%s"' % cpu_flags())], **common))
    return out


class _Backend(_setuptools._BuildMetaBackend):
    def run_setup(self, setup_script="setup.py"):
        setup(ext_modules=extensions())


_backend = _Backend()
get_requires_for_build_wheel = _backend.get_requires_for_build_wheel
get_requires_for_build_sdist = _backend.get_requires_for_build_sdist
get_requires_for_build_editable = _backend.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _backend.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _backend.prepare_metadata_for_build_editable
build_wheel = _backend.build_wheel
build_sdist = _backend.build_sdist
build_editable = _backend.build_editable
