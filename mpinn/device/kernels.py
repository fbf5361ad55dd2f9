"""Leaf module: the GPU's own kernels, for mpinn.device.backend's CupyBackend (given the cupy module: nothing here imports
cupy). A GPU step is bound by the host: on an H200 each cupy call costs the host 9 to 50 microseconds, the
device microseconds at these sizes, so these kernels do in one launch what took several calls. Each is written
to do, element by element, the arithmetic of the numpy code it replaces (mpinn.model.mlp's head, activations and
gradients; scipy's products), and the GPU tests compare them with that code."""

_KERNELS = {}


def kernel(cp, name):
    """The named kernel, compiled once per process."""
    k = _KERNELS.get(name)
    if k is None:
        k = _KERNELS[name] = _BUILD[name](cp)
    return k


_ROUNDED = """
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
"""


def _rows_times(cp):
    """out[r, j] = sum over k in indptr[r]..indptr[r+1] of data[k] * B[indices[k], j], k in order, each product and
    sum rounded on its own (scipy's order and rounding for X @ B); then, where given, + base[r, j] and + bias[j]:
    ((0 + X B) + base) + bias, the numpy first layer's z = 0; z += X W; z += Xd W; z += b."""
    return cp.ElementwiseKernel(
        "raw I indptr, raw J idx, raw T data, raw T B, int64 m, raw T base, raw T bias, int32 with_base, "
        "int32 with_bias", "T out",
        """
        const long long r = i / m, j = i % m;
        T s = 0;
        for (long long k = indptr[r]; k < indptr[r + 1]; ++k)
            s = add_rn(s, mul_rn(data[k], B[(long long) idx[k] * m + j]));
        if (with_base) s = add_rn(s, base[i]);
        if (with_bias) s = add_rn(s, bias[j]);
        out = s;
        """, "mpinn_rows_times", preamble=_ROUNDED)


def _softmax_head(cp):
    """One row a thread: loss[r] = log(sum_j exp(z_j - m)) + m - z_y (m the row's max, NaN if any z is NaN, as
    numpy's max), and delta[r, j] = (exp(z_j - m) / s - [j == y]) * scale, mpinn.model.mlp.head_loss_delta's softmax
    branch (with the caller's d *= scale). A class id outside 0..k-1 gives a NaN loss (the step is skipped)."""
    return cp.ElementwiseKernel(
        "raw T z, raw I y, int64 k, T scale", "T loss, raw T d",
        """
        const long long base = i * k;
        T m = z[base];
        for (long long j = 1; j < k; ++j) {
            const T v = z[base + j];
            if (v > m || v != v) m = v;
            if (m != m) break;
        }
        T s = 0;
        for (long long j = 0; j < k; ++j) s += exp(z[base + j] - m);
        const long long t = (long long) y[i];
        if (t < 0 || t >= k) {
            const T zero = 0;
            loss = zero / zero;
        } else {
            loss = log(s) + m - z[base + t];
        }
        for (long long j = 0; j < k; ++j)
            d[base + j] = (exp(z[base + j] - m) / s - (j == t ? (T) 1 : (T) 0)) * scale;
        """, "mpinn_softmax_head")


def _sigmoid_head(cp):
    """One output column: loss = max(z, 0) - t z + log1p(exp(-|z|)), delta = (sigmoid(z) - t) * scale, with t the
    label in z's type; mpinn.model.mlp.head_loss_delta's sigmoid branch (sigmoid as mpinn.model.mlp._act writes it)."""
    return cp.ElementwiseKernel(
        "T z, Y y, T scale", "T loss, T d",
        """
        const T t = (T) y;
        const T e = exp(-fabs(z));
        const T pos = (z != z) ? z : (z > 0 ? z : (T) 0);
        loss = pos - t * z + log1p(e);
        const T p = z >= 0 ? (T) 1 / ((T) 1 + e) : e / ((T) 1 + e);
        d = (p - t) * scale;
        """, "mpinn_sigmoid_head")


_ACTS = {
    "relu": "z = (v != v) ? v : (v > 0 ? v : (T) 0);",
    "tanh": "z = tanh(v);",
    "sigmoid": "const T e = exp(-fabs(v)); z = v >= 0 ? (T) 1 / ((T) 1 + e) : e / ((T) 1 + e);",
}

_ACT_GRADS = {      # d *= f'(z) in terms of a = f(z), as mpinn.device.ops.act_grad_ (relu: d * (a > 0), so NaN stays)
    "relu": "d = d * (a > 0 ? (T) 1 : (T) 0);",
    "tanh": "d = d * ((T) 1 - a * a);",
    "sigmoid": "d = d * (a * ((T) 1 - a));",
}


def _bias_act(name):
    def build(cp):
        return cp.ElementwiseKernel("T b", "T z", "const T v = z + b; " + _ACTS[name], "mpinn_bias_" + name)
    return build


def _act_grad(name):
    def build(cp):
        return cp.ElementwiseKernel("T a", "T d", _ACT_GRADS[name], "mpinn_grad_" + name)
    return build


def _mark(cp):
    """mark[idx] = 1 for every column id of a batch (the same value from every thread that writes it)."""
    return cp.ElementwiseKernel("I idx", "raw int32 mark", "mark[idx] = 1", "mpinn_mark")


def _marked_ids(cp):
    """ids[c - 1] = i for every marked column i, c the marks up to i: the sorted unique ids."""
    return cp.ElementwiseKernel("int32 m, int32 c", "raw int64 ids", "if (m) ids[c - 1] = i", "mpinn_marked_ids")


def _renumber(cp):
    """A column id's place among the sorted unique ids (c the inclusive count of marks)."""
    return cp.ElementwiseKernel("I idx, raw int32 c", "I out", "out = (I) (c[idx] - 1)", "mpinn_renumber")


def _transpose_key(cp):
    """One row r a thread: for its entries k, key[k] = col[k] * nnz + k (unique; sorted, the entries by column then
    by position: scipy's order for X.T) and row[k] = r."""
    return cp.ElementwiseKernel(
        "raw I indptr, raw J col, int64 nnz", "raw int64 key, raw int64 row",
        """
        for (long long k = indptr[i]; k < indptr[i + 1]; ++k) {
            key[k] = (long long) col[k] * nnz + k;
            row[k] = i;
        }
        """, "mpinn_transpose_key")


def _transpose_gather(cp):
    """One sorted position p a thread, columns all present (a compact CSR): the transposed rows' indptr, row ids
    and values."""
    return cp.ElementwiseKernel(
        "raw int64 order, raw J col, raw int64 row, raw T data, int64 nnz, int64 ncols",
        "raw int64 indptr, raw int64 rows_t, raw T data_t",
        """
        const long long o = order[i];
        const long long c = col[o];
        rows_t[i] = row[o];
        data_t[i] = data[o];
        if (i == 0) {
            for (long long q = 0; q <= c; ++q) indptr[q] = 0;
        } else {
            const long long before = col[order[i - 1]];
            for (long long q = before + 1; q <= c; ++q) indptr[q] = i;
        }
        if (i == nnz - 1) {
            for (long long q = c + 1; q <= ncols; ++q) indptr[q] = nnz;
        }
        """, "mpinn_transpose_gather")


_BUILD = {"rows_times": _rows_times, "softmax_head": _softmax_head, "sigmoid_head": _sigmoid_head,
          "mark": _mark, "marked_ids": _marked_ids, "renumber": _renumber,
          "transpose_key": _transpose_key, "transpose_gather": _transpose_gather}
_BUILD.update({"bias_" + a: _bias_act(a) for a in _ACTS})
_BUILD.update({"grad_" + a: _act_grad(a) for a in _ACT_GRADS})
