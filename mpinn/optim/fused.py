"""Fused update kernels: each optimizer's step in one pass over its elements (and over the touched rows
of the hashed table, by id, with no gather or write-back), written in C (fused.c beside this file),
compiled on first use with the machine's C compiler and loaded with ctypes. Optional: with no compiler,
or MPINN_FUSED=0, the numpy passes of each optimizer's update_ run instead.

The two give the same bits: every kernel does the numpy path's operations in the same order, each
rounded to the parameters' dtype (float32 or float64; compiled with -ffp-contract=off, so no fused
multiply-add), and sqrt and division are correctly rounded in both. tests/model/test_fused.py checks it
for every optimizer, dense and by rows.

Calling convention (so that one Python wrapper serves every optimizer):
    NAME_dense_S(n, p, g, s0, s1, &consts)                    elements 0..n-1
    NAME_rows_S(k, w, ids, P, G, S0, S1, R, &consts, steps)   rows ids[0..k-1] of the (., w) tables P,
                                                               S0, S1; G holds their k gradient rows
s0/s1 (S0/S1) are the optimizer's state arrays, R its per-row state, consts its constants (a struct
of doubles named field by field: CONSTS below, checked against the C side's layout at load), steps
Adam's step factor by per-row count (float64); unused pointers are NULL. S is f (float32) or d
(float64)."""
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sysconfig
import tempfile

import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fused.c")     # the C source
TEMPLATE = "/* TEMPLATE"        # the line after which the source is compiled once per type

TYPES = {np.dtype(np.float32): ("float", "f"), np.dtype(np.float64): ("double", "d")}     # C type, suffix
FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared"]
NATIVE = ["-march=native"]     # this CPU's vector width (sqrt and division are 1.7x faster with AVX2
                               # than with SSE2); correctly rounded on every ISA, so the same bits


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


def c_source():
    """The source: its first part once, its template for float (suffix _f; sqrtf and friends) and for
    double (suffix _d)."""
    with open(SOURCE) as f:
        head, body = f.read().split(TEMPLATE, 1)
    body = body.split("\n", 1)[1]
    out = [head]
    for ctype, s in TYPES.values():
        text = body.replace("real", ctype).replace("_S(", "_%s(" % s)
        if ctype == "float":
            for fn in ("sqrt", "fabs", "copysign"):
                text = text.replace(fn + "(", fn + "f(")
        out.append(text + "\n#undef R\n#undef CR\n#undef AHEAD\n")
    return "\n".join(out)


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


def _cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mpinn")


def _cpu():
    """What the compiled file depends on besides the source: the machine and its CPU's features (a
    home directory shared by nodes of different kinds keeps one file per kind)."""
    flags = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            flags += next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return flags


def _compile(src, path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise OSError("no C compiler (cc, gcc, or $CC) on the PATH")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
            f.write(src)
        for flags in (FLAGS + NATIVE, FLAGS):     # a compiler that knows no -march=native: without it
            r = subprocess.run([cc] + flags + ["-o", tmp, f.name, "-lm"], capture_output=True, text=True,
                               timeout=120)
            if not r.returncode:
                break
        os.unlink(f.name)
        if r.returncode:
            raise OSError("%s failed: %s" % (cc, (r.stderr or r.stdout).strip()[-500:]))
        os.replace(tmp, path)          # atomic: ranks compiling at once each leave a whole file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def library():
    """The compiled kernels (a ctypes CDLL), or None (why_not says why). Compiled once per source,
    compiler flags and CPU kind into ~/.cache/mpinn (or $XDG_CACHE_HOME/mpinn; else the temp dir)."""
    global _lib, _tried, why_not
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("MPINN_FUSED", "1").lower() in ("0", "off", "no", "false"):
        why_not = "turned off by MPINN_FUSED=%s" % os.environ["MPINN_FUSED"]
        return None
    try:
        src = c_source()
    except OSError as e:        # an install without the source (package data left out)
        why_not = "no kernel source (%s): the numpy passes run instead" % e
        return None
    key = hashlib.sha256((src + " ".join(FLAGS + NATIVE) + sysconfig.get_platform() + _cpu()).encode()).hexdigest()[:16]
    errors = []
    for where in (_cache_dir(), os.path.join(tempfile.gettempdir(), "mpinn-%d" % os.getuid())):
        path = os.path.join(where, "fused-%s.so" % key)
        try:
            if not os.path.exists(path):
                _compile(src, path)
            lib = ctypes.CDLL(path)
        except (OSError, subprocess.SubprocessError) as e:     # e.g. a read-only home: the temp dir next
            errors.append(str(e))
            continue
        mismatch = check_layout(lib)
        if mismatch:
            why_not = "refused %s: its constants differ from mpinn's (%s): the numpy passes run instead" % (
                path, mismatch)
            return None
        for _, suffix in TYPES.values():
            getattr(lib, "coalesce_" + suffix).restype = ctypes.c_int64    # the others return nothing
        _lib = lib
        return _lib
    why_not = "not compiled (%s): the numpy passes run instead" % "; ".join(errors)
    return None


def status():
    """One line for reports: are the kernels in use, and if not, why."""
    lib = library()
    return "compiled (%s)" % lib._name if lib is not None else "off: " + (why_not or "unknown")


def coalesce(parts):
    """(ids, rows) summed over parts [(ids, rows), ...] by the kernel, or None (no kernels, device or
    unsupported arrays, or a part whose ids are not increasing): see batch.coalesce."""
    rows0 = parts[0][1]
    if not isinstance(rows0, np.ndarray) or rows0.dtype not in TYPES or library() is None:
        return None
    ids = [np.ascontiguousarray(i, dtype=np.int64) for i, _ in parts]
    rows = [np.ascontiguousarray(r) for _, r in parts]
    w, total = rows0.shape[1], sum(i.shape[0] for i in ids)
    if any(r.dtype != rows0.dtype or r.shape != (i.shape[0], w) for i, r in zip(ids, rows)):
        return None
    out_ids, out = np.empty(total, np.int64), np.empty((total, w), rows0.dtype)
    lens = np.array([i.shape[0] for i in ids], dtype=np.int64)
    id_ptrs = np.array([i.ctypes.data for i in ids], dtype=np.uintp)
    row_ptrs = np.array([r.ctypes.data for r in rows], dtype=np.uintp)
    n = getattr(_lib, "coalesce_%s" % TYPES[rows0.dtype][1])(
        ctypes.c_int64(len(parts)), _ptr(lens), _ptr(id_ptrs), _ptr(row_ptrs), ctypes.c_int64(w),
        _ptr(out_ids), _ptr(out))
    if n < 0:
        return None
    return out_ids[:n], out[:n]


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
