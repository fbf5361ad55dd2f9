"""Fused update kernels: each optimizer's step in one pass over its elements (and over the touched rows
of the hashed table, by id, with no gather or write-back), compiled on first use with the machine's C
compiler and loaded with ctypes. Optional: with no compiler, or MPINN_FUSED=0, the numpy passes of each
optimizer's update_ run instead.

The two give the same bits: every kernel does the numpy path's operations in the same order, each
rounded to the parameters' dtype (float32 or float64; compiled with -ffp-contract=off, so no fused
multiply-add), and sqrt and division are correctly rounded in both. tests/model/test_fused.py checks it
for every optimizer, dense and by rows.

Calling convention (so that one Python wrapper serves every optimizer):
    NAME_dense_S(n, p, g, s0, s1, c)                     elements 0..n-1
    NAME_rows_S(k, w, ids, P, G, S0, S1, R, c, steps)    rows ids[0..k-1] of the (., w) tables P, S0,
                                                          S1; G holds their k gradient rows
s0/s1 (S0/S1) are the optimizer's state arrays, R its per-row state, c its constants, steps Adam's
step factor by per-row count; unused pointers are NULL. S is f (float32) or d (float64)."""
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sysconfig
import tempfile

import numpy as np

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#define R real* restrict
#define CR const real* restrict

/* Ask for the rows AHEAD rows on now (each id a random row of tables far larger than the cache):
   their loads then overlap this row's arithmetic instead of each waiting for memory in turn. */
#define AHEAD 16
static inline void ahead_S(const int64_t* ids, int64_t r, int64_t k, int64_t w, const real* A, const real* B,
                           const real* C) {
    if (r + AHEAD >= k) return;
    int64_t at = ids[r + AHEAD] * w;
    for (int64_t o = 0; o < w; o += 64 / (int64_t)sizeof(real)) {
        __builtin_prefetch(A + at + o, 1);
        if (B) __builtin_prefetch(B + at + o, 1);
        if (C) __builtin_prefetch(C + at + o, 1);
    }
}

static inline real sgn_S(real x) { return x > 0 ? (real)1 : (x < 0 ? (real)-1 : (x == x ? (real)0 : x)); }

/* Rows summed over m parts, each part's ids strictly increasing (a k-way merge): out_ids sorted and
   unique, each out row 0 + its rows in part order (batch.coalesce's bits). Returns the number of rows,
   or -1 when a part's ids are not increasing (the caller then sorts in numpy). */
int64_t coalesce_S(int64_t m, const int64_t* lens, const int64_t* const* ids, const real* const* rows,
                   int64_t w, int64_t* out_ids, real* out) {
    int64_t at[m];
    for (int64_t p = 0; p < m; p++) {
        at[p] = 0;
        for (int64_t i = 1; i < lens[p]; i++) if (ids[p][i] <= ids[p][i - 1]) return -1;
    }
    int64_t n = 0;
    for (;;) {
        int64_t best = INT64_MAX, any = 0;
        for (int64_t p = 0; p < m; p++)
            if (at[p] < lens[p] && ids[p][at[p]] < best) { best = ids[p][at[p]]; any = 1; }
        if (!any) return n;
        real* restrict o = out + n * w;
        for (int64_t j = 0; j < w; j++) o[j] = 0;
        for (int64_t p = 0; p < m; p++) {
            if (at[p] < lens[p] && ids[p][at[p]] == best) {
                const real* restrict r = rows[p] + at[p] * w;
                for (int64_t j = 0; j < w; j++) o[j] = o[j] + r[j];
                at[p]++;
            }
        }
        out_ids[n++] = best;
    }
}

/* c: lr, weight decay (rows: lazy L2) */
static inline void sgd_S(int64_t n, R p, CR g, real lr, real wd) {
    if (wd != 0) {
        for (int64_t i = 0; i < n; i++) { real gi = wd * p[i]; gi = g[i] + gi; real d = gi * lr; p[i] = p[i] - d; }
    } else {
        for (int64_t i = 0; i < n; i++) { real d = g[i] * lr; p[i] = p[i] - d; }
    }
}
void sgd_dense_S(int64_t n, real* p, real* g, real* s0, real* s1, const real* c) { sgd_S(n, p, g, c[0], 0); }
void sgd_rows_S(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                void* R_, const real* c, const real* steps) {
    real lr = c[0], wd = c[1];
    for (int64_t r = 0; r < k; r++) { ahead_S(ids, r, k, w, P, 0, 0); sgd_S(w, P + ids[r] * w, G + r * w, lr, wd); }
}

/* c: lr, mu, weight decay (rows); s0 = velocity */
static inline void momentum_S(int64_t n, R p, CR g, R v, real lr, real mu, real wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (wd != 0) { real dk = wd * p[i]; gi = gi + dk; }
        real vi = v[i] * mu; vi = vi + gi; v[i] = vi;
        real d = vi * lr; p[i] = p[i] - d;
    }
}
void momentum_dense_S(int64_t n, real* p, real* g, real* s0, real* s1, const real* c) {
    momentum_S(n, p, g, s0, c[0], c[1], 0);
}
void momentum_rows_S(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                     void* R_, const real* c, const real* steps) {
    real lr = c[0], mu = c[1], wd = c[2];
    for (int64_t r = 0; r < k; r++) {
        ahead_S(ids, r, k, w, P, S0, 0);
        momentum_S(w, P + ids[r] * w, G + r * w, S0 + ids[r] * w, lr, mu, wd);
    }
}

/* c: b1, b2, eps / sqrt(1 - b2), step (dense), weight decay (rows); s0, s1 = m / (1 - b1), v / (1 - b2) */
static inline void adam_S(int64_t n, R p, CR g, R m, R v, real b1, real b2, real eps, real step, real wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (wd != 0) { real dk = wd * p[i]; gi = gi + dk; }
        real mi = m[i] * b1; mi = mi + gi; m[i] = mi;
        real g2 = gi * gi;
        real vi = v[i] * b2; vi = vi + g2; v[i] = vi;
        real d = sqrt(vi); d = d + eps; d = mi / d; d = d * step; p[i] = p[i] - d;
    }
}
void adam_dense_S(int64_t n, real* p, real* g, real* s0, real* s1, const real* c) {
    adam_S(n, p, g, s0, s1, c[0], c[1], c[2], c[3], 0);
}
void adam_rows_S(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                 void* R_, const real* c, const real* steps) {
    int64_t* t = (int64_t*)R_;
    real b1 = c[0], b2 = c[1], eps = c[2], wd = c[4];
    for (int64_t r = 0; r < k; r++) {
        int64_t i = ids[r];
        ahead_S(ids, r, k, w, P, S0, S1);
        if (r + AHEAD < k) __builtin_prefetch(t + ids[r + AHEAD], 1);
        t[i] += 1;
        adam_S(w, P + i * w, G + r * w, S0 + i * w, S1 + i * w, b1, b2, eps, steps[t[i]], wd);
    }
}

/* c: lr, eps, weight decay (rows); s0 = accumulator */
static inline void adagrad_S(int64_t n, R p, CR g, R acc, real lr, real eps, real wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (wd != 0) { real dk = wd * p[i]; gi = gi + dk; }
        real g2 = gi * gi;
        real a = acc[i] + g2; acc[i] = a;
        real d = sqrt(a); d = d + eps; d = gi / d; d = d * lr; p[i] = p[i] - d;
    }
}
void adagrad_dense_S(int64_t n, real* p, real* g, real* s0, real* s1, const real* c) {
    adagrad_S(n, p, g, s0, c[0], c[1], 0);
}
void adagrad_rows_S(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                    void* R_, const real* c, const real* steps) {
    real lr = c[0], eps = c[1], wd = c[2];
    for (int64_t r = 0; r < k; r++) {
        ahead_S(ids, r, k, w, P, S0, 0);
        adagrad_S(w, P + ids[r] * w, G + r * w, S0 + ids[r] * w, lr, eps, wd);
    }
}

/* c: 1/alpha, -1/alpha, beta, l1, l2, -(beta/alpha + l2), weight decay (rows); s0, s1 = z, sqrt(n) */
static inline void ftrl_start_S(int64_t n, CR p, R z, real l1, real c5) {
    if (l1 != 0) {
        for (int64_t i = 0; i < n; i++) { real zi = p[i] * c5; real s = l1 * sgn_S(p[i]); z[i] = zi - s; }
    } else {
        for (int64_t i = 0; i < n; i++) z[i] = p[i] * c5;
    }
}
static inline void ftrl_S(int64_t n, R p, CR g, R z, R sqn, real ainv, real nainv, real beta, real l1,
                          real l2, real wd, const int use_l1, const int use_wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (use_wd) { real dk = wd * p[i]; gi = gi + dk; }
        real zi = z[i] + gi;
        real g2 = gi * gi;
        real qo = sqn[i];
        real q = qo * qo; q = q + g2; q = sqrt(q); sqn[i] = q;
        real s = q - qo; s = s * ainv; s = s * p[i];
        zi = zi - s; z[i] = zi;
        q = q + beta; q = q * nainv; q = q - l2;      /* q - 0 is q, bit for bit */
        if (use_l1) {
            real a = fabs(zi); a = a - l1; a = a < 0 ? (real)0 : a; a = copysign(a, zi);
            p[i] = a / q;
        } else {
            p[i] = zi / q;
        }
    }
}
/* the flags as constants, so that each call is compiled into its own branch-free loop */
static inline void ftrl_any_S(int64_t n, R p, CR g, R z, R nn, const real* c, real wd) {
    if (c[3] != 0) {
        if (wd != 0) ftrl_S(n, p, g, z, nn, c[0], c[1], c[2], c[3], c[4], wd, 1, 1);
        else ftrl_S(n, p, g, z, nn, c[0], c[1], c[2], c[3], c[4], wd, 1, 0);
    } else {
        if (wd != 0) ftrl_S(n, p, g, z, nn, c[0], c[1], c[2], c[3], c[4], wd, 0, 1);
        else ftrl_S(n, p, g, z, nn, c[0], c[1], c[2], c[3], c[4], wd, 0, 0);
    }
}
void ftrl_dense_S(int64_t n, real* p, real* g, real* s0, real* s1, const real* c) {
    ftrl_any_S(n, p, g, s0, s1, c, 0);
}
static inline void ftrl_rows_loop_S(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0,
                                    real* S1, int8_t* started, const real* c, const int use_l1, const int use_wd) {
    real ainv = c[0], nainv = c[1], beta = c[2], l1 = c[3], l2 = c[4], c5 = c[5], wd = c[6];
    for (int64_t r = 0; r < k; r++) {
        int64_t i = ids[r];
        ahead_S(ids, r, k, w, P, S0, S1);
        if (!started[i]) { ftrl_start_S(w, P + i * w, S0 + i * w, l1, c5); started[i] = 1; }
        ftrl_S(w, P + i * w, G + r * w, S0 + i * w, S1 + i * w, ainv, nainv, beta, l1, l2, wd, use_l1, use_wd);
    }
}
void ftrl_rows_S(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                 void* R_, const real* c, const real* steps) {
    int8_t* started = (int8_t*)R_;      /* the flags as constants: one branch-free row loop per case */
    if (c[3] != 0) {
        if (c[6] != 0) ftrl_rows_loop_S(k, w, ids, P, G, S0, S1, started, c, 1, 1);
        else ftrl_rows_loop_S(k, w, ids, P, G, S0, S1, started, c, 1, 0);
    } else {
        if (c[6] != 0) ftrl_rows_loop_S(k, w, ids, P, G, S0, S1, started, c, 0, 1);
        else ftrl_rows_loop_S(k, w, ids, P, G, S0, S1, started, c, 0, 0);
    }
}
"""

TYPES = {np.dtype(np.float32): ("float", "f", ctypes.c_float), np.dtype(np.float64): ("double", "d", ctypes.c_double)}
FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared"]
NATIVE = ["-march=native"]     # this CPU's vector width (sqrt and division are 1.7x faster with AVX2
                               # than with SSE2); correctly rounded on every ISA, so the same bits
_lib = None
_tried = False
why_not = None          # why the kernels are not in use (None: in use, or not tried yet)


def c_source():
    """SOURCE for float (suffix _f; sqrtf and friends) and for double (suffix _d)."""
    out = ["#include <math.h>\n#include <stdint.h>\n"]
    body = SOURCE.split("#include <stdint.h>", 1)[1]
    for ctype, s, _ in TYPES.values():
        text = body.replace("real", ctype).replace("_S(", "_%s(" % s)
        if ctype == "float":
            for fn in ("sqrt", "fabs", "copysign"):
                text = text.replace(fn + "(", fn + "f(")
        out.append(text + "\n#undef R\n#undef CR\n")
    return "\n".join(out)


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
    compiler flags and machine into ~/.cache/mpinn (or $XDG_CACHE_HOME/mpinn)."""
    global _lib, _tried, why_not
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("MPINN_FUSED", "1").lower() in ("0", "off", "no", "false"):
        why_not = "turned off by MPINN_FUSED=%s" % os.environ["MPINN_FUSED"]
        return None
    src = c_source()
    key = hashlib.sha256((src + " ".join(FLAGS + NATIVE) + sysconfig.get_platform() + _cpu()).encode()).hexdigest()[:16]
    errors = []
    for where in (_cache_dir(), os.path.join(tempfile.gettempdir(), "mpinn-%d" % os.getuid())):
        path = os.path.join(where, "fused-%s.so" % key)
        try:
            if not os.path.exists(path):
                _compile(src, path)
            _lib = ctypes.CDLL(path)
            return _lib
        except (OSError, subprocess.SubprocessError) as e:     # e.g. a read-only home: the temp dir next
            errors.append(str(e))
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
    fn = getattr(_lib, "coalesce_%s" % TYPES[rows0.dtype][1])
    fn.restype = ctypes.c_int64
    n = fn(ctypes.c_int64(len(parts)), _ptr(lens), _ptr(id_ptrs), _ptr(row_ptrs), ctypes.c_int64(w),
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


def dense(lib, name, p, g, s0=None, s1=None, consts=()):
    """Elements of p (and of g, s0, s1, all the same length) in one pass."""
    n, dt = p.shape[0], p.dtype
    for a, what in ((p, "p"), (g, "g"), (s0, "state"), (s1, "state")):
        _check(a, dt, n, what)
    c = np.asarray(consts, dtype=dt)
    getattr(lib, "%s_dense_%s" % (name, TYPES[dt][1]))(
        ctypes.c_int64(n), _ptr(p), _ptr(g), _ptr(s0), _ptr(s1), _ptr(c))


def rows(lib, name, table, ids, g, s0=None, s1=None, row_state=None, consts=(), steps=None):
    """Rows ids (unique) of the 2-D table (and of the state tables s0, s1 shaped like it) from the
    gradient rows g, in one pass per row, in place; row_state: one value per table row."""
    k, (n_rows, w), dt = ids.shape[0], table.shape, table.dtype
    if not k:
        return
    if ids.dtype != np.int64 or not ids.flags.c_contiguous or g.shape != (k, w):
        raise ValueError("fused kernel: ids must be contiguous int64 and g (%d, %d), not %s %s" % (
            k, w, ids.dtype, g.shape))
    if ids.min() < 0 or ids.max() >= n_rows:
        raise ValueError("fused kernel: row ids outside 0..%d" % (n_rows - 1))
    for a, what in ((table, "table"), (s0, "state"), (s1, "state")):
        _check(a, dt, n_rows * w, what)
    _check(g, dt, k * w, "g")
    if row_state is not None and (row_state.shape[0] < n_rows or not row_state.flags.c_contiguous):
        raise ValueError("fused kernel: the per-row state must be contiguous, one value per row")
    c = np.asarray(consts, dtype=dt)
    getattr(lib, "%s_rows_%s" % (name, TYPES[dt][1]))(
        ctypes.c_int64(k), ctypes.c_int64(w), _ptr(ids), _ptr(table), _ptr(g), _ptr(s0), _ptr(s1),
        _ptr(row_state), _ptr(c), _ptr(steps))
