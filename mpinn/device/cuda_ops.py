"""Leaf module: the step plan's operations on a GPU (issue 62), mpinn.device.ops.HostOps's methods with its arguments
and its arithmetic, as the kernels of mpinn/device/cuda/step_ops.cu. Given the cupy module: nothing here imports it.

A method only launches those kernels, on the current stream, over arrays made beforehand (a hashed step's scratch
is made once, by hashed_workspace): no allocation, no host read of a device value, no synchronisation, no library
(cuBLAS, cupy's sorts and scans). A sequence of calls can then be captured as a CUDA graph (capture) and replayed
step after step; the shapes are frozen into it, and everything a step changes (the scale and rate, the ring's place,
Adam's count, the batch's entries and unique ids) is read from device memory by the kernels. Each kernel gives the
same bits every run: sums in a fixed order, no float atomics."""
import os

import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda", "step_ops.cu")
OPTIONS = ("--std=c++17", "--fmad=false")   # cupy appends -ftz=true: step_ops.cu keeps subnormals where it must

# launch shapes, step_ops.cu's #defines
BLOCK = 256                                 # threads of a one-thread-an-element kernel's block
GEMM_TILE, GEMM_THREADS = 64, 256           # GBM = GBN, 16 x 16 threads of 4 x 4 outputs
TOTAL_THREADS = 256
SCAN_THREADS, SCAN_BLOCK = 1024, 4096       # SCAN_THREADS x SCAN_ITEMS elements a block
ENTRY_THREADS, RADIX_BITS = 1024, 8         # a radix pass: one entry a thread, 8 bits of the key
RADIX = 1 << RADIX_BITS
MAX_GRID_Y = 65535

_VALUE = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_INDEX = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
_LABEL = {**_INDEX, **_VALUE}
ACTS = {"relu": 1, "tanh": 2, "sigmoid": 3}           # 0: none (bias_add)
LOSSES = {"softmax": 0, "sigmoid": 1, "squared": 2}


def kernel_names():
    """Every kernel step_ops.cu exports."""
    names = ["fill_i32", "scan_block", "scan_add", "unique_ids", "radix_hist", "radix_scatter", "segment_bounds",
             "advance_pos", "adam_count", "adam_row_count"]
    for s in ("f32", "f64"):
        names += ["%s_%s" % (f, s) for f in ("gemm_nn", "gemm_tn", "gemm_nt", "gemm_tt", "bias_act", "act_grad",
                                             "total", "colsum", "hashed_rows", "verdict_start", "verdict_scan",
                                             "sgd_dense", "sgd_rows", "adam_dense", "adam_rows")]
        names += ["rows_times_%s_%s_%s" % (s, i, j) for i in ("i32", "i64") for j in ("i32", "i64")]
        names += ["head_%s_%s" % (s, y) for y in ("i32", "i64", "f32", "f64")]
    for i in ("i32", "i64"):
        names += ["%s_%s" % (f, i) for f in ("count_entries", "mark_columns", "entry_keys", "entry_rows")]
    return names


def _ll(x):
    """A kernel's `long long` argument (cupy needs a typed scalar)."""
    return np.int64(x)


def _int(x):
    """A kernel's `int` argument."""
    return np.int32(x)


def _blocks(n, per):
    return -(-int(n) // per)


def _contiguous(*arrays):
    for a in arrays:
        if a is not None and not a.flags.c_contiguous:
            raise ValueError("the step's kernels take C-contiguous arrays (got strides %s)" % (a.strides,))


def _value(*arrays):
    """The kernels' suffix for the arrays' float type, one type for all of them (and each C-contiguous)."""
    _contiguous(*arrays)
    types = {a.dtype for a in arrays if a is not None}
    if len(types) != 1 or next(iter(types)) not in _VALUE:
        raise TypeError("the step's kernels take float32 or float64 arrays of one type, got %s"
                        % sorted(map(str, types)))
    return _VALUE[types.pop()]


def _index(a):
    _contiguous(a)
    if a.dtype not in _INDEX:
        raise TypeError("index arrays are int32 or int64, got %s" % a.dtype)
    return _INDEX[a.dtype]


class Captured:
    """A captured sequence of launches; replay() launches it again on the step's stream."""

    def __init__(self, graph, stream):
        self.graph, self.stream = graph, stream

    def replay(self):
        self.graph.launch(stream=self.stream)


class CudaOps:
    """HostOps's operations as kernels on cupy arrays, plus the step's stream, capture and device arrays."""

    def __init__(self, cupy):
        self.cp = cupy
        with open(SOURCE) as f:
            module = cupy.RawModule(code=f.read(), options=OPTIONS)
        # every kernel compiled and loaded now: a module load is not a stream operation to capture
        self._k = {name: module.get_function(name) for name in kernel_names()}
        self._stream = cupy.cuda.Stream(non_blocking=True)

    # ---------------------------------------------------------------- the step's stream, graphs, arrays
    def stream(self):
        """The step's own non-blocking stream: the plan runs its calls inside `with ops.stream():`."""
        return self._stream

    def capture(self, fn):
        """fn() captured on the step's stream (its launches recorded, not run): a Captured to replay."""
        s = self._stream
        with s:
            s.begin_capture()
            try:
                fn()
            except BaseException:
                try:
                    s.end_capture()
                except Exception:  # noqa: BLE001 - the capture is broken anyway: fn's error is the one to see
                    pass
                raise
            graph = s.end_capture()
        return Captured(graph, s)

    def synchronize(self):
        """The host waits for the step's stream (the ring read, a plan made anew)."""
        self._stream.synchronize()

    def zeros(self, shape, dtype):
        return self.cp.zeros(shape, dtype=dtype)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype=dtype)

    def _go(self, name, n, *args, threads=BLOCK):
        """name's kernel over n threads (no launch for none), on the current stream."""
        if n > 0:
            self._k[name]((_blocks(n, threads),), (threads,), args)

    # ---------------------------------------------------------------- dense layers
    def gemm(self, a, b, out, ta=False, tb=False):
        """out = op(a) @ op(b), op the transpose where ta / tb (all 2-D, C-contiguous)."""
        M, N = out.shape
        K = a.shape[0] if ta else a.shape[1]
        if a.shape != ((K, M) if ta else (M, K)) or b.shape != ((N, K) if tb else (K, N)):
            raise ValueError("gemm: %s%s @ %s%s into %s" % (a.shape, ".T" if ta else "", b.shape, ".T" if tb else "",
                                                           out.shape))
        s = _value(a, b, out)
        if _blocks(M, GEMM_TILE) > MAX_GRID_Y:
            raise ValueError("gemm: %d output rows, more than the grid holds" % M)
        if M and N:
            name = "gemm_%s%s_%s" % ("t" if ta else "n", "t" if tb else "n", s)
            self._k[name]((_blocks(N, GEMM_TILE), _blocks(M, GEMM_TILE)), (GEMM_THREADS,),
                          (a, b, out, _ll(M), _ll(N), _ll(K)))

    def bias_add(self, z, b):
        """z += b (a row added to every row)."""
        self._bias_act(z, b, 0)

    def bias_act(self, z, b, name):
        """z = activation(z + b) in place; b None: activation(z)."""
        self._bias_act(z, b, ACTS[name])

    def _bias_act(self, z, b, act):
        s = _value(z, b)
        if b is not None and (z.ndim != 2 or z.shape[1] != b.size):
            raise ValueError("bias of %d for rows of %s" % (b.size, z.shape))
        self._go("bias_act_" + s, z.size, z, z if b is None else b, _ll(z.size), _ll(1 if b is None else b.size),
                 _int(b is not None), _int(act))

    def act_grad(self, a, d, name):
        """d *= activation'(z), written in a = activation(z)."""
        s = _value(a, d)
        self._go("act_grad_" + s, d.size, a, d, _ll(d.size), _int(ACTS[name]))

    def rows_times(self, indptr, indices, data, B, out, base=None, bias=None):
        """out = ((0 + X B) + base) + bias, X the CSR rows (out.shape[0] of them; duplicates summed in order)."""
        s = _value(data, B, out, base, bias)
        n = out.shape[0]
        m = out.shape[1] if out.ndim == 2 else 1
        if (B.shape[1] if B.ndim == 2 else 1) != m:
            raise ValueError("rows_times: a block of %s into %s" % (B.shape, out.shape))
        name = "rows_times_%s_%s_%s" % (s, _index(indptr), _index(indices))
        self._go(name, n * m, indptr, indices, data, B, out, out if base is None else base,
                 out if bias is None else bias, _ll(n), _ll(m), _int(base is not None), _int(bias is not None))

    def head(self, loss, z, y, scalars, rows, d):
        """rows[r] = row r's loss, d = d loss / d z times scalars[SCALE] (softmax, sigmoid or squared error)."""
        s = _value(z, rows, d)
        _contiguous(y, scalars)
        n = z.shape[0]
        k = z.shape[1] if z.ndim == 2 else 1
        wants = {"softmax": n, "sigmoid": n, "squared": n * k}[loss]
        if y.size != wants or (loss == "sigmoid" and k != 1) or rows.size != n or d.size != z.size:
            raise ValueError("head %s: z %s, y %s, rows %s, d %s" % (loss, z.shape, y.shape, rows.shape, d.shape))
        if y.dtype not in _LABEL:
            raise TypeError("labels of %s" % y.dtype)
        self._go("head_%s_%s" % (s, _LABEL[y.dtype]), n, z, y, scalars, rows, d, _ll(n), _ll(k), _int(LOSSES[loss]))

    def total(self, rows, out):
        """out[0] = the sum of rows (one block, a fixed-order tree)."""
        s = _value(rows, out)
        self._k["total_" + s]((1,), (TOTAL_THREADS,), (rows, out, _ll(rows.size)))

    def colsum(self, d, out):
        """out[j] = sum over rows of d[:, j], as numpy adds it: the rows in order from 0, or for one column
        (a contiguous run) numpy's pairwise summation."""
        s = _value(d, out)
        n, m = d.shape
        if n >= 2 ** 31:
            raise ValueError("colsum: %d rows, more than the kernel counts in int" % n)
        self._go("colsum_" + s, m, d, out, _ll(n), _ll(m))

    # ---------------------------------------------------------------- the hashed block
    def hashed_workspace(self, n_cols, n_rows, nnz_cap, width, dtype):
        """What hashed_grad writes (ids, rows, k: HostOps's) and its scratch, made once: the marks over the table's
        columns and their scan's block sums, the entries' keys and values for the radix passes (two of each, one
        pass reads one and writes the other), each entry's row, the radix table and its scan's sums, and each unique
        column's first and last place among the sorted entries."""
        if nnz_cap >= 2 ** 31 or n_cols >= 2 ** 31:
            raise ValueError("the hashed step counts entries and columns in int32: %d entries, %d columns"
                             % (nnz_cap, n_cols))
        cp, i32 = self.cp, np.int32
        kcap = min(nnz_cap, n_cols)
        table = RADIX * max(1, _blocks(nnz_cap, ENTRY_THREADS))
        return {"ids": cp.zeros(nnz_cap, np.int64), "rows": cp.zeros((nnz_cap, width), dtype),
                "k": cp.zeros(1, np.int64), "nnz": cp.zeros(1, np.int64),
                "mark": cp.zeros(n_cols, i32), "mark_sums": self._scan_space(n_cols),
                "keys": cp.zeros((2, nnz_cap), i32), "vals": cp.zeros((2, nnz_cap), i32),
                "rowof": cp.zeros(nnz_cap, i32), "table": cp.zeros(table, i32), "table_sums": self._scan_space(table),
                "start": cp.zeros(kcap, i32), "end": cp.zeros(kcap, i32)}

    def _scan_space(self, n):
        """The block sums of each level of an n-element scan."""
        space, nb = [], _blocks(n, SCAN_BLOCK)
        while nb > 1:
            space.append(self.cp.zeros(nb, np.int32))
            nb = _blocks(nb, SCAN_BLOCK)
        return space

    def _scan(self, x, n, space):
        """x[:n] (int32) = its inclusive scan: each block's, the blocks' totals scanned (recursively), added back."""
        nb = _blocks(n, SCAN_BLOCK)
        if nb == 1:
            self._k["scan_block"]((1,), (SCAN_THREADS,), (x, _ll(n), x, _int(0)))
        elif nb > 1:
            sums = space[0]
            self._k["scan_block"]((nb,), (SCAN_THREADS,), (x, _ll(n), sums, _int(1)))
            self._scan(sums, nb, space[1:])
            self._k["scan_add"]((nb,), (SCAN_THREADS,), (x, _ll(n), sums))

    def hashed_grad(self, indptr, indices, data, n_cols, d, ws):
        """ws["ids"][:k] = the sorted unique column ids of the first indptr[n] entries, ws["rows"][:k] = X^T d on
        them (each column's entries added in position order, scipy's X.T @ d), ws["k"][0] = k. No sort: the ids
        are the marked columns (marks, a scan); the entries are ordered by their column's place with a stable
        radix sort (per-block digit counts, a scan, each entry's rank among its block's); one thread a (column, j)
        then adds its column's entries in order."""
        s = _value(data, d, ws["rows"])
        si, sj = _index(indptr), _index(indices)
        n, width = d.shape
        mark, nnz, k, keys, vals = ws["mark"], ws["nnz"], ws["k"], ws["keys"], ws["vals"]
        if mark.shape[0] != n_cols or ws["rows"].shape[1] != width:
            raise ValueError("a workspace for %d columns of %d, given %d of %d"
                             % (mark.shape[0], ws["rows"].shape[1], n_cols, width))
        cap = min(ws["ids"].shape[0], indices.shape[0], data.shape[0])    # the entries the arrays hold
        kcap = ws["start"].shape[0]                                      # the most unique ids there can be
        self._go("count_entries_" + si, 1, indptr, _ll(n), _ll(cap), nnz)
        self._go("fill_i32", n_cols, mark, _ll(n_cols), _int(0))
        self._go("mark_columns_" + sj, cap, indices, nnz, mark, _ll(n_cols))
        self._scan(mark, n_cols, ws["mark_sums"])
        self._go("unique_ids", n_cols, mark, _ll(n_cols), ws["ids"], k)
        self._go("entry_keys_" + sj, cap, indices, nnz, mark, _ll(n_cols), _int(kcap), keys[0], vals[0])
        self._go("entry_rows_" + si, n, indptr, _ll(n), nnz, ws["rowof"])
        blocks = _blocks(cap, ENTRY_THREADS)
        passes = max(1, _blocks(kcap.bit_length(), RADIX_BITS))     # keys run to kcap (a column outside the table)
        for p in range(passes if blocks else 0):
            src, dst, shift = p % 2, 1 - p % 2, _int(p * RADIX_BITS)
            self._k["radix_hist"]((blocks,), (ENTRY_THREADS,), (keys[src], nnz, shift, ws["table"], _ll(blocks)))
            self._scan(ws["table"], RADIX * blocks, ws["table_sums"])
            self._k["radix_scatter"]((blocks,), (ENTRY_THREADS,), (keys[src], vals[src], nnz, shift, ws["table"],
                                                                   _ll(blocks), keys[dst], vals[dst]))
        final = passes % 2
        self._go("segment_bounds", cap, keys[final], nnz, k, ws["start"], ws["end"])
        self._go("hashed_rows_" + s, kcap * width, data, d, vals[final], ws["rowof"], ws["start"], ws["end"], k,
                 ws["rows"], _ll(kcap), _ll(width))

    # ---------------------------------------------------------------- the verdict and the ring
    def verdict(self, buf, rows, k, ring, state):
        """ring[POS] = (buf's last value, 1.0 when every element of buf and of rows[:k] is finite); a finite step
        counts: T += 1 (its own launch, after the verdict is whole)."""
        s = _value(buf)
        _contiguous(ring, state)
        if buf.size == 0:
            raise ValueError("verdict: an empty buffer has no loss")
        self._go("verdict_start_" + s, 1, buf, _ll(buf.size), ring, state)
        self._go("verdict_scan_" + s, buf.size, buf, _ll(buf.size), _ll(1), state, _int(0), ring, state)
        if rows is not None:
            r = _value(rows)
            width = rows.shape[1] if rows.ndim == 2 else 1
            self._go("verdict_scan_" + r, rows.size, rows, _ll(rows.size), _ll(width), k, _int(1), ring, state)
        self._go("adam_count", 1, state, ring)      # a step not skipped counts: T += 1 (the optimizer's count)

    def advance(self, state):
        """The step is recorded: the ring's next place."""
        self._go("advance_pos", 1, state)

    # ---------------------------------------------------------------- updates (a skipped step changes nothing)
    def sgd_dense(self, p, g, scalars, ring, state):
        """p -= lr g (d = g lr; p = p - d)."""
        s = _value(p, g)
        if g.size != p.size:
            raise ValueError("sgd_dense: %d parameters, %d gradients" % (p.size, g.size))
        self._go("sgd_dense_" + s, p.size, p, g, _ll(p.size), scalars, ring, state)

    def _rows_shape(self, table, ids, rows):
        kcap = min(ids.shape[0], rows.shape[0])
        width = table.shape[1]
        if rows.shape[1] != width or ids.dtype != np.int64:
            raise ValueError("rows of %s (ids %s) for a table of %s" % (rows.shape, ids.dtype, table.shape))
        return kcap, width

    def sgd_rows(self, table, ids, rows, k, scalars, ring, state):
        """table[ids[r]] -= lr rows[r] for r < k (ids unique)."""
        s = _value(table, rows)
        kcap, width = self._rows_shape(table, ids, rows)
        self._go("sgd_rows_" + s, kcap * width, table, ids, rows, k, _ll(kcap), _ll(width), scalars, ring, state)

    def adam_dense(self, p, g, m, v, state, scalars, ring, b1, b2, eps):
        """Adam on scaled moments at lr c(T), T counting this step already (verdict counted it)."""
        s = _value(p, g, m, v)
        self._go("adam_dense_" + s, p.size, p, g, m, v, _ll(p.size), state, scalars, ring, np.float64(b1),
                 np.float64(b2), np.float64(eps))

    def adam_rows(self, table, m, v, t_row, ids, rows, k, state, scalars, ring, b1, b2, eps):
        """The touched rows, each at its own count: t_row[i] += 1 (its own launch), then Adam at lr c(t_row[i])."""
        s = _value(table, m, v, rows)
        kcap, width = self._rows_shape(table, ids, rows)
        self._go("adam_row_count", kcap, t_row, ids, k, _ll(kcap), ring, state)
        self._go("adam_rows_" + s, kcap * width, table, m, v, t_row, ids, rows, k, _ll(kcap), _ll(width), state,
                 scalars, ring, np.float64(b1), np.float64(b2), np.float64(eps))
