"""Leaf module: array backends. The only code that imports cupy / cupyx."""
import numpy
import scipy.sparse


class Backend:
    """`xp` (numpy-like) and `sparse` (scipy.sparse-like) for one device."""

    def __init__(self, name, xp, sparse):
        self.name, self.xp, self.sparse = name, xp, sparse

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def asnumpy(self, a):
        return a.get() if hasattr(a, "get") and self.name == "cupy" else numpy.asarray(a)

    def __repr__(self):
        return "Backend(%s)" % self.name


def get_backend(name="numpy"):
    if name in ("numpy", "cpu"):
        return Backend("numpy", numpy, scipy.sparse)
    if name in ("cupy", "gpu"):
        try:
            import cupy
            import cupyx.scipy.sparse
        except ImportError as e:  # pragma: no cover - depends on the machine
            from mpinn.config import MpinnError
            raise MpinnError("the GPU backend needs cupy (pip install -e \".[gpu]\"): %s" % e)
        return Backend("cupy", cupy, cupyx.scipy.sparse)
    raise ValueError("unknown backend %r" % name)
