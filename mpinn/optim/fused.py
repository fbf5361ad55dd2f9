"""Fused update kernels: each optimizer's step in one pass over its elements (and over the touched rows
of the hashed table, by id, with no gather or write-back), written in C (fused.c and fused_kernels.h
beside this file) and called through ctypes. The library is the one built at install time, or one built
at run time into a private cache (fused_build.py says where from and how it is checked). Optional: with
neither, or MPINN_FUSED=0, the numpy passes of each optimizer's update_ run instead.

The two give the same bits: every kernel does the numpy path's operations in the same order, each
rounded to the parameters' dtype (compiled with -ffp-contract=off, so no fused multiply-add), and sqrt and
division are correctly rounded in both. tests/model/test_fused.py checks it for every optimizer, dense
and by rows.

Calling convention (so that one Python wrapper serves every optimizer):
    NAME_dense_S(n, p, g, s0, s1, &consts)                    elements 0..n-1
    NAME_rows_S(k, w, ids, P, G, S0, S1, R, &consts, steps)   rows ids[0..k-1] of the (., w) tables P,
                                                               S0, S1; G holds their k gradient rows
s0/s1 (S0/S1) are the optimizer's state arrays, R its per-row state, consts its constants (a struct
of doubles named field by field: CONSTS below, checked against the C side's layout at load), steps
Adam's step factor by per-row count (float64); unused pointers are NULL. S is f (float32) or d
(float64).

MPINN_FUSED: auto (default: the installed build for this CPU, else a run-time build for it, else the
installed x86-64-v3 or portable build), native, v3 or base (that installed build only), runtime (a
run-time build only), 0/off (numpy)."""
import ctypes
import os

import numpy as np

from mpinn.core.batch import SparseRows
from mpinn.core.batch import coalesce as batch_coalesce
from mpinn.optim import fused_build
from mpinn.optim.fused_build import Unavailable

TYPES = {np.dtype(np.float32): ("float", "f"), np.dtype(np.float64): ("double", "d")}     # C type, suffix


def _consts(name, fields):
    return type(name, (ctypes.Structure,), {"_fields_": [(f, ctypes.c_double) for f in fields]})


# each kernel's constants, field by field (the C side: the X-macros *_CONSTS in fused.c)
CONSTS = {
    "sgd": _consts("sgd_consts", ("lr", "wd")),
    "momentum": _consts("momentum_consts", ("lr", "mu", "wd")),
    "adam": _consts("adam_consts", ("lr", "b1", "b2", "eps", "step", "wd")),
    "adagrad": _consts("adagrad_consts", ("lr", "eps", "wd")),
    "ftrl": _consts("ftrl_consts", ("inv_alpha", "inv_alpha_prev", "beta", "l1", "l2", "start", "wd")),
}

_lib = None
_tried = False
why_not = None          # why the kernels are not in use (None: in use, or not tried yet)
source = None           # where the library in use came from (installed base / v3, or the cache)


def check_layout(lib, consts=None):
    """None when every constants struct has the same fields, size and offsets on both sides, else the
    first difference, in words."""
    for name, struct in (consts or CONSTS).items():
        c_name = "%s_consts" % name
        try:
            names = getattr(lib, c_name + "_fields")
            layout = getattr(lib, c_name + "_layout")
        except AttributeError:
            return "the library has no %s" % c_name
        names.restype = ctypes.c_char_p
        layout.restype = ctypes.c_int64
        c_fields = names().decode().split()
        ours = [f for f, _ in struct._fields_]
        if c_fields != ours:
            return "%s: C has fields %s, Python %s" % (c_name, c_fields, ours)
        out = np.zeros(len(ours) + 1, np.int64)
        layout(ctypes.c_void_p(out.ctypes.data))
        want = [ctypes.sizeof(struct)] + [getattr(struct, f).offset for f in ours]
        if out.tolist() != want:
            return "%s: C size and offsets %s, Python %s" % (c_name, out.tolist(), want)
    return None


def _not_installed(want):
    raise Unavailable("not installed (pip install . builds it when a C compiler is there)")


def _candidates(mode):
    """[(where, source hash -> the library's path)] in the order to try them, for MPINN_FUSED=mode: auto
    takes the installed build for this CPU, else a run-time build for it, else the x86-64-v3 or the
    portable installed build (measured on W2: -march=native is the fastest where the CPU has AVX-512)."""
    installed = [("installed " + v, lambda want, path=path: path) for v, path in fused_build.installed_variants()
                 if mode in ("auto", v)]
    if mode in ("native", "v3", "base") and not installed:
        return [("installed " + mode, _not_installed)]
    runtime = [("run-time build", fused_build.cached)] if mode in ("auto", "runtime") else []
    native = [c for c in installed if c[0] == "installed native"]
    return native + runtime + [c for c in installed if c[0] != "installed native"]


def library():
    """The kernels (a ctypes CDLL), or None (why_not says why: one line for the doctor and the start-up)."""
    global _lib, _tried, why_not, source
    if _tried:
        return _lib
    _tried = True
    mode = os.environ.get("MPINN_FUSED", "auto").lower()
    if mode in ("0", "off", "no", "false"):
        why_not = "turned off by MPINN_FUSED=%s" % os.environ["MPINN_FUSED"]
        return None
    if mode not in ("auto", "native", "base", "v3", "runtime", "1", "on", "yes", "true"):
        why_not = "MPINN_FUSED=%s is none of auto, native, v3, base, runtime, 0" % os.environ["MPINN_FUSED"]
        return None
    mode = "auto" if mode in ("1", "on", "yes", "true") else mode
    reasons = []
    try:
        want = fused_build.source_hash()
    except OSError as e:        # an install without the sources (package data left out)
        why_not = "no kernel source (%s): the numpy passes run instead" % e
        return None
    for where, get in _candidates(mode):
        try:
            path = get(want)
            lib = fused_build.open_library(path, want)
            mismatch = check_layout(lib)
            if mismatch:
                raise Unavailable("%s: its constants differ from mpinn's (%s)" % (path, mismatch))
            for _, suffix in TYPES.values():
                getattr(lib, "coalesce_" + suffix).restype = ctypes.c_int64    # the others return nothing
        except Unavailable as e:
            reasons.append("%s: %s" % (where, e))
            continue
        except Exception as e:  # noqa: BLE001 - any other failure is a reason too, never a crash
            reasons.append("%s: %s: %s" % (where, type(e).__name__, e))
            continue
        _lib, source, why_not = lib, "%s (%s)" % (where, path), None
        return _lib
    why_not = "not available (%s): the numpy passes run instead" % "; ".join(reasons)
    return None


def status():
    """One line for reports: are the kernels in use (from where), and if not, why."""
    lib = library()
    return "compiled, %s" % source if lib is not None else "off: " + (why_not or "unknown")


def coalesce(leaves):
    """(ids, rows) summed over leaves [(ids, rows), ...] (empty ones keep their place) by the kernel, in
    batch.coalesce's tree and bits, or None (no kernels, device or unsupported arrays, a leaf whose ids are not
    increasing): the caller then sums in numpy."""
    rows0 = leaves[0][1]
    if not isinstance(rows0, np.ndarray) or rows0.dtype not in TYPES or library() is None:
        return None
    ids = [np.ascontiguousarray(i, dtype=np.int64) for i, _ in leaves]
    rows = [np.ascontiguousarray(r) for _, r in leaves]
    w, total = rows0.shape[1], sum(i.shape[0] for i in ids)
    if any(r.dtype != rows0.dtype or r.shape != (i.shape[0], w) for i, r in zip(ids, rows)):
        return None
    out_ids, out = np.empty(total, np.int64), np.empty((total, w), rows0.dtype)
    lens = np.array([i.shape[0] for i in ids], dtype=np.int64)
    id_ptrs = np.array([i.ctypes.data for i in ids], dtype=np.uintp)
    row_ptrs = np.array([r.ctypes.data for r in rows], dtype=np.uintp)
    n = getattr(_lib, "coalesce_%s" % TYPES[rows0.dtype][1])(
        ctypes.c_int64(len(leaves)), _ptr(lens), _ptr(id_ptrs), _ptr(row_ptrs), ctypes.c_int64(w),
        _ptr(out_ids), _ptr(out))
    if n < 0:
        return None
    return out_ids[:n], out[:n]


def coalesce_rows(leaves, n_rows, width, dtype):
    """batch.coalesce's SparseRows, by the kernel where it runs (coalesce), else numpy's: the same bits."""
    merged = coalesce(leaves) if len(leaves) > 1 else None
    if merged is not None:
        return SparseRows(merged[0], merged[1], n_rows)
    return batch_coalesce(leaves, n_rows, width, dtype)


class Codec:
    """A wire format's casts by the kernels (mpinn.comm.wire.Wire's codec): rows (k, w) float32 to (k, w + extra)
    words of `word` and back, and rows gathered by id and cast in one pass. Each returns its result, or None where
    the kernels do not run (none loaded, or arrays that are not C-contiguous 2-D float32, int64 ids, the words'
    dtype): the caller then casts in numpy, with the same bits (mpinn.comm.compress's to_bf16 and from_bf16,
    mpinn.comm.wire's to_int8 and from_int8; tests/model/test_fused.py)."""

    def __init__(self, name, word, extra):
        self.name, self.word, self.extra = name, np.dtype(word), extra

    def _go(self, kernel, k, w, *arrays):
        getattr(_lib, "%s_%s" % (self.name, kernel))(ctypes.c_int64(k), ctypes.c_int64(w), *map(_ptr, arrays))

    def _words(self, out, k, w):
        return _plain(out, self.word) and out.shape == (k, w + self.extra)

    def encode(self, rows, out):
        """rows (k, w) into out (k, w + extra)."""
        if not (_plain(rows, np.float32) and rows.ndim == 2 and self._words(out, *rows.shape)) or library() is None:
            return None
        self._go("encode", rows.shape[0], rows.shape[1], rows, out)
        return out

    def take(self, table, ids, out):
        """Rows ids of the (n, w) table into out (len(ids), w + extra); the ids in range (the caller's check_owned)."""
        if not (_plain(table, np.float32) and table.ndim == 2 and _plain(ids, np.int64)
                and self._words(out, ids.shape[0], table.shape[1])) or library() is None:
            return None
        self._go("take", ids.shape[0], table.shape[1], ids, table, out)
        return out

    def decode(self, got):
        """(k, w + extra) words as a new (k, w) float32 array."""
        if not (_plain(got, self.word) and got.ndim == 2 and got.shape[1] >= self.extra) or library() is None:
            return None
        out = np.empty((got.shape[0], got.shape[1] - self.extra), np.float32)
        self._go("decode", out.shape[0], out.shape[1], got, out)
        return out


BF16 = Codec("bf16", np.uint16, 0)      # bfloat16 words, nearest even
INT8 = Codec("int8", np.uint8, 4)       # int8 values and a float32 scale a row
CODECS = {"bf16": BF16, "int8": INT8}   # the wire's casts by format (mpinn.comm.wire.wires)


def _plain(a, dtype):
    return isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.c_contiguous


def _ptr(a):
    return None if a is None else ctypes.c_void_p(a.ctypes.data)


def _check(a, dtype, n, what):
    if a is not None and (a.dtype != dtype or not a.flags.c_contiguous or a.size < n):
        raise ValueError("fused kernel: %s must be C-contiguous %s with >= %d elements, not %s %s" % (
            what, dtype, n, a.dtype, a.shape))


def consts(name, **values):
    """The kernel `name`'s constants struct, every field named (a missing or unknown one is an error)."""
    struct = CONSTS[name]
    fields = [f for f, _ in struct._fields_]
    if sorted(values) != sorted(fields):
        raise TypeError("%s constants: need exactly %s, got %s" % (name, fields, sorted(values)))
    return struct(**{k: float(v) for k, v in values.items()})


def dense(lib, name, p, g, s0=None, s1=None, consts=None):
    """Elements of p (and of g, s0, s1, all the same length) in one pass."""
    n, dt = p.shape[0], p.dtype
    for a, what in ((p, "p"), (g, "g"), (s0, "state"), (s1, "state")):
        _check(a, dt, n, what)
    getattr(lib, "%s_dense_%s" % (name, TYPES[dt][1]))(
        ctypes.c_int64(n), _ptr(p), _ptr(g), _ptr(s0), _ptr(s1), ctypes.byref(consts))


def rows(lib, name, table, ids, g, s0=None, s1=None, row_state=None, consts=None, steps=None):
    """Rows ids (unique; any integer dtype) of the 2-D table (and of the state tables s0, s1 shaped
    like it) from the gradient rows g, in one pass per row, in place; row_state: one value per row."""
    k, (n_rows, w), dt = ids.shape[0], table.shape, table.dtype
    if not k:
        return
    ids, g = np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(g)
    if g.shape != (k, w):
        raise ValueError("fused kernel: g must be (%d, %d), not %s" % (k, w, g.shape))
    if ids.min() < 0 or ids.max() >= n_rows:
        raise ValueError("fused kernel: row ids outside 0..%d" % (n_rows - 1))
    for a, what in ((table, "table"), (s0, "state"), (s1, "state")):
        _check(a, dt, n_rows * w, what)
    _check(g, dt, k * w, "g")
    if row_state is not None and (row_state.shape[0] < n_rows or not row_state.flags.c_contiguous):
        raise ValueError("fused kernel: the per-row state must be contiguous, one value per row")
    if steps is not None:
        _check(steps, np.float64, 1, "steps")
    getattr(lib, "%s_rows_%s" % (name, TYPES[dt][1]))(
        ctypes.c_int64(k), ctypes.c_int64(w), _ptr(ids), _ptr(table), _ptr(g), _ptr(s0), _ptr(s1),
        _ptr(row_state), ctypes.byref(consts), _ptr(steps))
