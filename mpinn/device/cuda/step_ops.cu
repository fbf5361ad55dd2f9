/* The kernels of a training step's plan (mpinn.device.cuda_ops.CudaOps; the specification is mpinn.device.ops.HostOps,
   its numpy code). Device code only, no includes: cupy compiles this file with NVRTC (--std=c++17 --fmad=false) and
   the tests with nvcc. Every exported kernel is a plain extern "C" name per type (f32 float, f64 double, i32 int,
   i64 long long), a wrapper of one template.

   The rules each kernel keeps:
   - Nothing that changes from one step to the next is a kernel argument: the batch's scale and rate (scalars), the
     ring's place and Adam's count (state), the number of hashed entries (indptr[n]) and of unique ids (k) are read
     from device memory, so a captured graph's replay computes what an eager call would.
   - The same bits every run: every sum runs in a fixed order, no float atomics. Integer atomics only count.
   - The rounding of the numpy code: each product, sum, quotient and square root rounded on its own (the _rn
     intrinsics, whatever the fmad flag), except the GEMM, which accumulates with fma in ascending k.
   - Subnormal floats kept, as numpy keeps them: cupy compiles every module with -ftz=true appended after the
     options it is given (cupy.cuda.compiler), which turns each float operation, the _rn intrinsics included, into
     its flush-to-zero form. The float operations the specification fixes to the bit are therefore PTX without
     .ftz (add.rn.f32 and the like), and a float's sign is read from its bits (a positive subnormal is > 0). */

typedef long long ll;

#define SCALE 0
#define LR 1
#define POS 0
#define TCOUNT 1
#define RING 64

#define SCAN_THREADS 1024
#define SCAN_ITEMS 4
#define SCAN_BLOCK (SCAN_THREADS * SCAN_ITEMS)
#define ENTRY_THREADS 1024
#define RADIX 256
#define TOTAL_THREADS 256

__device__ __forceinline__ ll global_id() { return (ll) blockIdx.x * blockDim.x + threadIdx.x; }

/* ------------------------------------------------------------------ rounding, one operation at a time */
#if defined(__CUDA_ARCH__)
#define F32_OP2(name, op)                                                                                           \
    __device__ __forceinline__ float name(float a, float b) {                                                        \
        float r; asm(op " %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
F32_OP2(add_rn, "add.rn.f32")
F32_OP2(sub_rn, "sub.rn.f32")
F32_OP2(mul_rn, "mul.rn.f32")
F32_OP2(div_rn, "div.rn.f32")
__device__ __forceinline__ float sqrt_rn(float a) { float r; asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
/* a double rounded to float, a float widened: cvt without .ftz */
__device__ __forceinline__ float to_float(double a) {
    float r; asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(a)); return r; }
__device__ __forceinline__ double to_double(float a) {
    double r; asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(a)); return r; }
#else   /* a host compiler's pass (nvcc -c) or a CPU emulation: the intrinsics */
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ float to_float(double a) { return (float) a; }
__device__ __forceinline__ double to_double(float a) { return (double) a; }
#endif
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ double to_double(double a) { return a; }
/* a double in T: to_value<float> rounds without flushing, to_value<double> is the identity */
template <typename T> __device__ __forceinline__ T to_value(double a);
template <> __device__ __forceinline__ float to_value<float>(double a) { return to_float(a); }
template <> __device__ __forceinline__ double to_value<double>(double a) { return a; }
/* x > 0 (false for a NaN), a positive subnormal float included: its bits as an integer are > 0 */
__device__ __forceinline__ bool positive(float x) { return x == x && __float_as_int(x) > 0; }
__device__ __forceinline__ bool positive(double x) { return x > 0.0; }
__device__ __forceinline__ float fma_(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float exp_(float a) { return expf(a); }
__device__ __forceinline__ double exp_(double a) { return exp(a); }
__device__ __forceinline__ float log_(float a) { return logf(a); }
__device__ __forceinline__ double log_(double a) { return log(a); }
__device__ __forceinline__ float log1p_(float a) { return log1pf(a); }
__device__ __forceinline__ double log1p_(double a) { return log1p(a); }
__device__ __forceinline__ float tanh_(float a) { return tanhf(a); }
__device__ __forceinline__ double tanh_(double a) { return tanh(a); }
__device__ __forceinline__ float fabs_(float a) { return fabsf(a); }
__device__ __forceinline__ double fabs_(double a) { return fabs(a); }

/* finite: x - x is 0 for every finite x, NaN for an infinity or a NaN */
template <typename T> __device__ __forceinline__ bool finite_value(T x) { return sub_rn(x, x) == (T) 0; }

/* the verdict of the step the ring's place is at: 1.0 a finite step (mpinn.device.ops.ok_at) */
__device__ __forceinline__ bool step_ok(const double* ring, const ll* state) {
    return ring[(state[POS] % RING) * 2 + 1] == 1.0;
}

/* ------------------------------------------------------------------ GEMM: out = op(a) @ op(b) */
/* 64 x 64 tiles of the output, 256 threads of 4 x 4 outputs each, k in tiles of 16 through shared memory; each
   output is fma-accumulated over k in ascending order (the same bits every run). ta: a is stored (K, M); tb: b is
   stored (N, K); all C-contiguous. Grid (ceil(N / 64), ceil(M / 64)), 256 threads. */
#define GBM 64
#define GBN 64
#define GBK 16

template <typename T, bool TA, bool TB>
__device__ void gemm(const T* a, const T* b, T* c, ll M, ll N, ll K) {
    __shared__ T As[GBK][GBM + 1];
    __shared__ T Bs[GBK][GBN + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const ll m0 = (ll) blockIdx.y * GBM, n0 = (ll) blockIdx.x * GBN;
    T acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = (T) 0;
    for (ll k0 = 0; k0 < K; k0 += GBK) {
        for (int q = 0; q < 4; ++q) {
            const int l = tid + 256 * q;
            int mm, kk;
            if (TA) { mm = l % GBM; kk = l / GBM; } else { kk = l % GBK; mm = l / GBK; }
            ll gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < M && gk < K) ? (TA ? a[gk * M + gm] : a[gm * K + gk]) : (T) 0;
            int nn;
            if (TB) { kk = l % GBK; nn = l / GBK; } else { nn = l % GBN; kk = l / GBN; }
            const ll gn = n0 + nn;
            gk = k0 + kk;
            Bs[kk][nn] = (gn < N && gk < K) ? (TB ? b[gn * K + gk] : b[gk * N + gn]) : (T) 0;
        }
        __syncthreads();
        const int kn = (K - k0 < GBK) ? (int) (K - k0) : GBK;
        for (int kk = 0; kk < kn; ++kk) {
            T ar[4], br[4];
            for (int i = 0; i < 4; ++i) ar[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; ++j) br[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] = fma_(ar[i], br[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
        const ll gm = m0 + ty + 16 * i;
        if (gm >= M) continue;
        for (int j = 0; j < 4; ++j) {
            const ll gn = n0 + tx + 16 * j;
            if (gn < N) c[gm * N + gn] = acc[i][j];
        }
    }
}

/* ------------------------------------------------------------------ elementwise: activations and their gradients */
/* act: 0 none, 1 relu, 2 tanh, 3 sigmoid (mpinn.device.ops.act_: relu keeps a NaN, sigmoid stable for large |v|) */
template <typename T> __device__ __forceinline__ T activate(T v, int act) {
    if (act == 1) return (v != v) ? v : (positive(v) ? v : (T) 0);
    if (act == 2) return tanh_(v);
    if (act == 3) {
        const T e = exp_(-fabs_(v));
        return v >= (T) 0 ? div_rn((T) 1, add_rn((T) 1, e)) : div_rn(e, add_rn((T) 1, e));
    }
    return v;
}

/* z[i] = activation(z[i] + b[i % m]) (b only where has_bias) */
template <typename T> __device__ void bias_act(T* z, const T* b, ll total, ll m, int has_bias, int act) {
    const ll i = global_id();
    if (i >= total) return;
    T v = z[i];
    if (has_bias) v = add_rn(v, b[i % m]);
    z[i] = activate(v, act);
}

/* d *= activation'(z), written in a = activation(z): relu d * (a > 0), tanh d * (1 - a a), sigmoid d * (a (1 - a)) */
template <typename T> __device__ void act_grad(const T* a, T* d, ll total, int act) {
    const ll i = global_id();
    if (i >= total) return;
    const T x = a[i];
    T f;
    if (act == 1) f = positive(x) ? (T) 1 : (T) 0;
    else if (act == 2) f = sub_rn((T) 1, mul_rn(x, x));
    else f = mul_rn(x, sub_rn((T) 1, x));
    d[i] = mul_rn(d[i], f);
}

/* ------------------------------------------------------------------ the hashed rows times a dense block */
/* out[r, j] = ((0 + sum over the row's entries e in order of data[e] B[indices[e], j]) + base[r, j]) + bias[j]: one
   thread an output element, scipy's order and rounding for X @ B. */
template <typename T, typename I, typename J>
__device__ void rows_times(const I* indptr, const J* indices, const T* data, const T* B, T* out, const T* base,
                           const T* bias, ll n, ll m, int has_base, int has_bias) {
    const ll i = global_id();
    if (i >= n * m) return;
    const ll r = i / m, j = i % m;
    T s = (T) 0;
    const ll hi = (ll) indptr[r + 1];
    for (ll e = (ll) indptr[r]; e < hi; ++e) s = add_rn(s, mul_rn(data[e], B[(ll) indices[e] * m + j]));
    if (has_base) s = add_rn(s, base[i]);
    if (has_bias) s = add_rn(s, bias[j]);
    out[i] = s;
}

/* ------------------------------------------------------------------ the head: per-row losses and d loss / d z */
/* loss: 0 softmax (y class ids), 1 sigmoid (one column), 2 squared error (0.5 r^2, y shaped like z); one thread a
   row; d is then multiplied by scalars[SCALE] (in z's type) where that is not 1. A class id outside 0..k-1 gives a
   NaN loss (a skipped step). */
template <typename T, typename Y>
__device__ void head(const T* z, const Y* y, const double* scalars, T* rows, T* d, ll n, ll k, int loss) {
    const ll r = global_id();
    if (r >= n) return;
    const ll base = r * k;
    if (loss == 0) {
        T m = z[base];
        for (ll j = 1; j < k; ++j) {
            const T v = z[base + j];
            if (v > m || v != v) m = v;
            if (m != m) break;
        }
        T s = (T) 0;
        for (ll j = 0; j < k; ++j) s = add_rn(s, exp_(sub_rn(z[base + j], m)));
        const ll t = (ll) y[r];
        if (t < 0 || t >= k) {
            const T zero = (T) 0;
            rows[r] = zero / zero;
        } else {
            rows[r] = sub_rn(add_rn(log_(s), m), z[base + t]);
        }
        for (ll j = 0; j < k; ++j) {
            T q = div_rn(exp_(sub_rn(z[base + j], m)), s);
            if (j == t) q = sub_rn(q, (T) 1);
            d[base + j] = q;
        }
    } else if (loss == 1) {
        const T v = z[r], t = (T) y[r];
        const T e = exp_(-fabs_(v));
        const T pos = (v != v) ? v : (v > (T) 0 ? v : (T) 0);
        rows[r] = add_rn(sub_rn(pos, mul_rn(t, v)), log1p_(e));
        const T p = v >= (T) 0 ? div_rn((T) 1, add_rn((T) 1, e)) : div_rn(e, add_rn((T) 1, e));
        d[r] = sub_rn(p, t);
    } else {
        T s = (T) 0;
        for (ll j = 0; j < k; ++j) {
            const T q = sub_rn(z[base + j], (T) y[base + j]);
            s = add_rn(s, mul_rn((T) 0.5, mul_rn(q, q)));
            d[base + j] = q;
        }
        rows[r] = s;
    }
    const double scale = scalars[SCALE];
    if (scale != 1.0) {
        const T f = to_value<T>(scale);
        for (ll j = 0; j < k; ++j) d[base + j] = mul_rn(d[base + j], f);
    }
}

/* ------------------------------------------------------------------ sums in a fixed order */
/* out[0] = the sum of rows: one block of TOTAL_THREADS, each thread a strided sum, then a tree in shared memory */
template <typename T> __device__ void total(const T* rows, T* out, ll n) {
    __shared__ T sh[TOTAL_THREADS];
    const int t = threadIdx.x;
    T s = (T) 0;
    for (ll i = t; i < n; i += TOTAL_THREADS) s = add_rn(s, rows[i]);
    sh[t] = s;
    __syncthreads();
    for (int w = TOTAL_THREADS / 2; w > 0; w >>= 1) {
        if (t < w) sh[t] = add_rn(sh[t], sh[t + w]);
        __syncthreads();
    }
    if (t == 0) out[0] = sh[0];
}

/* numpy's pairwise_sum (numpy/_core/src/umath/loops_utils.h.src) of x[0..n), n <= 128: fewer than 8 terms added
   in order to 0; else 8 running sums from x[0..8), each adding every 8th term up to n - n % 8, combined as
   ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), the last n % 8 terms then added in order */
template <typename T> __device__ T pairwise_block(const T* x, int n) {
    if (n < 8) {
        T s = (T) 0;
        for (int i = 0; i < n; ++i) s = add_rn(s, x[i]);
        return s;
    }
    T r[8];
    for (int q = 0; q < 8; ++q) r[q] = x[q];
    int i = 8;
    for (; i < n - n % 8; i += 8)
        for (int q = 0; q < 8; ++q) r[q] = add_rn(r[q], x[i + q]);
    T s = add_rn(add_rn(add_rn(r[0], r[1]), add_rn(r[2], r[3])), add_rn(add_rn(r[4], r[5]), add_rn(r[6], r[7])));
    for (; i < n; ++i) s = add_rn(s, x[i]);
    return s;
}

/* numpy's pairwise_sum of x[0..n): more than 128 terms split at n2 = n / 2 less n2 % 8, the halves' sums added
   (left + right). Its recursion unrolled: a stack of ranges still to sum, where a length of -1 stands for "add
   the two sums on top of the value stack". n < 2^31 (CudaOps.colsum checks): at most 25 splits deep, so at most
   2 x 25 + 1 ranges and 26 sums are held (a small stack frame: no larger local memory for the launch). */
template <typename T> __device__ T pairwise_sum(const T* x, int n) {
    int lo[56], len[56];
    T val[28];
    int top = 1, nv = 0;
    lo[0] = 0;
    len[0] = n;
    while (top > 0) {
        --top;
        const int a = lo[top], m = len[top];
        if (m < 0) {
            --nv;
            val[nv - 1] = add_rn(val[nv - 1], val[nv]);
        } else if (m <= 128) {
            val[nv++] = pairwise_block(x + a, m);
        } else {
            int n2 = m / 2;
            n2 -= n2 % 8;
            len[top++] = -1;                            /* last: left + right */
            lo[top] = a + n2; len[top++] = m - n2;      /* then the right half */
            lo[top] = a; len[top++] = n2;               /* the left half first */
        }
    }
    return val[0];
}

/* out[j] = the sum over the n rows of column j, as numpy's np.sum(d, axis=0, out=out) adds it (HostOps.colsum):
   m > 1, ((0 + d[0, j]) + d[1, j]) + ... in row order; m == 1, the column is one contiguous run, which numpy sums
   pairwise: 0 + pairwise_sum (one thread). One thread a column. */
template <typename T> __device__ void colsum(const T* d, T* out, ll n, ll m) {
    const ll j = global_id();
    if (j >= m) return;
    if (m == 1) {
        out[0] = add_rn((T) 0, pairwise_sum(d, (int) n));
        return;
    }
    T s = (T) 0;
    for (ll i = 0; i < n; ++i) s = add_rn(s, d[i * m + j]);
    out[j] = s;
}

/* ------------------------------------------------------------------ the hashed block's gradient rows */
/* nnz[0] = indptr[n], clipped to 0..cap (cap the entries the arrays hold: a corrupt count cannot write past them) */
template <typename I> __device__ void count_entries(const I* indptr, ll n, ll cap, ll* nnz) {
    if (global_id() != 0) return;
    ll e = (ll) indptr[n];
    nnz[0] = e < 0 ? 0 : (e > cap ? cap : e);
}

/* mark[c] = 1 for every column id c of the first nnz entries (every writer writes the same value) */
template <typename J> __device__ void mark_columns(const J* indices, const ll* nnz, int* mark, ll n_cols) {
    const ll e = global_id();
    if (e >= nnz[0]) return;
    const ll c = (ll) indices[e];
    if (c >= 0 && c < n_cols) mark[c] = 1;
}

/* for each entry: its key, the place of its column among the sorted unique ids (cum: the inclusive count of the
   marks; a column id outside the table gets `invalid`, past every real one), and its value, its position */
template <typename J>
__device__ void entry_keys(const J* indices, const ll* nnz, const int* cum, ll n_cols, int invalid, int* keys,
                           int* vals) {
    const ll e = global_id();
    if (e >= nnz[0]) return;
    const ll c = (ll) indices[e];
    keys[e] = (c >= 0 && c < n_cols) ? cum[c] - 1 : invalid;
    vals[e] = (int) e;
}

/* rowof[e] = r for the entries of row r (one thread a row) */
template <typename I> __device__ void entry_rows(const I* indptr, ll n, const ll* nnz, int* rowof) {
    const ll r = global_id();
    if (r >= n) return;
    ll lo = (ll) indptr[r], hi = (ll) indptr[r + 1];
    if (lo < 0) lo = 0;
    if (hi > nnz[0]) hi = nnz[0];
    for (ll e = lo; e < hi; ++e) rowof[e] = (int) r;
}

/* the sum over a column's entries in position order (scipy's X.T @ d): ((0 + data[e1] d[row(e1), j]) + ...) for
   the entries at sorted places start[c]..end[c]; one thread a (column, j), the columns at or past k idle */
template <typename T>
__device__ void hashed_rows(const T* data, const T* d, const int* vals, const int* rowof, const int* start,
                            const int* end, const ll* k, T* rows, ll kcap, ll width) {
    const ll i = global_id();
    if (i >= kcap * width) return;
    const ll c = i / width, j = i % width;
    if (c >= k[0]) return;
    T s = (T) 0;
    for (int p = start[c]; p < end[c]; ++p) {
        const int e = vals[p];
        s = add_rn(s, mul_rn(data[e], d[(ll) rowof[e] * width + j]));
    }
    rows[i] = s;
}

/* ------------------------------------------------------------------ the verdict and the ring */
/* ring[POS] = (buf's last value, 1.0); verdict_scan then writes 0.0 there for any non-finite element */
template <typename T> __device__ void verdict_start(const T* buf, ll n, double* ring, const ll* state) {
    if (global_id() != 0) return;
    const ll at = state[POS] % RING;
    ring[at * 2] = to_double(buf[n - 1]);
    ring[at * 2 + 1] = 1.0;
}

/* x's first n elements (use_k: its first k[0] rows of width elements) all finite, or the ring's verdict is 0.0:
   a block's threads agree by __syncthreads_or and one writes (every writer writes the same value) */
template <typename T>
__device__ void verdict_scan(const T* x, ll n, ll width, const ll* k, int use_k, double* ring, const ll* state) {
    const ll i = global_id();
    ll limit = n;
    if (use_k) {
        const ll kw = k[0] * width;
        if (kw < limit) limit = kw;
    }
    const int bad = (i < limit && !finite_value(x[i])) ? 1 : 0;
    if (__syncthreads_or(bad) && threadIdx.x == 0) ring[(state[POS] % RING) * 2 + 1] = 0.0;
}

/* ------------------------------------------------------------------ the updates (a skipped step changes nothing) */
/* p -= g lr: d = g lr; p = p - d (mpinn/optim/fused_kernels.h's rounding) */
template <typename T>
__device__ void sgd_dense(T* p, const T* g, ll n, const double* scalars, const double* ring, const ll* state) {
    const ll i = global_id();
    if (i >= n || !step_ok(ring, state)) return;
    const T lr = to_value<T>(scalars[LR]);
    p[i] = sub_rn(p[i], mul_rn(g[i], lr));
}

/* table[ids[r]] -= lr rows[r] for r < k */
template <typename T>
__device__ void sgd_rows(T* table, const ll* ids, const T* rows, const ll* k, ll kcap, ll width,
                         const double* scalars, const double* ring, const ll* state) {
    const ll i = global_id();
    if (i >= kcap * width || !step_ok(ring, state)) return;
    const ll r = i / width, j = i % width;
    if (r >= k[0]) return;
    const T lr = to_value<T>(scalars[LR]);
    T* at = table + ids[r] * width + j;
    *at = sub_rn(*at, mul_rn(rows[i], lr));
}

/* (hi, lo) *= (bh, bl), double-double */
__device__ __forceinline__ void dd_mul(double& hi, double& lo, double bh, double bl) {
    const double p = __dmul_rn(hi, bh);
    double e = fma(hi, bh, -p);
    e = fma(hi, bl, e);
    e = fma(lo, bh, e);
    const double s = __dadd_rn(p, e);
    lo = __dsub_rn(e, __dsub_rn(s, p));
    hi = s;
}

/* b^t for an integer t >= 0, rounded once: a double-double power by squaring (about 2^-100 relative error before
   the last rounding), so it is libm's correctly rounded pow(b, t), which the numpy specification calls */
__device__ double int_pow(double b, ll t) {
    double rh = 1.0, rl = 0.0, bh = b, bl = 0.0;
    while (t > 0) {
        if (t & 1) dd_mul(rh, rl, bh, bl);
        t >>= 1;
        if (t > 0) dd_mul(bh, bl, bh, bl);
    }
    return rh;
}

/* lr c(t) in the parameters' type: c(t) = (1 - b1) / sqrt(1 - b2) sqrt(1 - b2^t) / (1 - b1^t), left to right, in
   double (mpinn.device.ops.adam_factor) */
template <typename T> __device__ T adam_step(double lr, double b1, double b2, ll t) {
    double c = __ddiv_rn(__dsub_rn(1.0, b1), __dsqrt_rn(__dsub_rn(1.0, b2)));
    c = __dmul_rn(c, __dsqrt_rn(__dsub_rn(1.0, int_pow(b2, t))));
    c = __ddiv_rn(c, __dsub_rn(1.0, int_pow(b1, t)));
    return to_value<T>(__dmul_rn(lr, c));
}

/* m = m b1 + g; v = v b2 + g g; p -= step m / (sqrt(v) + eps), each operation rounded (fused_kernels.h's adam) */
template <typename T> __device__ __forceinline__ void adam_one(T* p, T g, T* m, T* v, T b1, T b2, T eps, T step) {
    const T mi = add_rn(mul_rn(*m, b1), g);
    const T vi = add_rn(mul_rn(*v, b2), mul_rn(g, g));
    *m = mi;
    *v = vi;
    T d = add_rn(sqrt_rn(vi), eps);
    d = mul_rn(div_rn(mi, d), step);
    *p = sub_rn(*p, d);
}

/* p, m, v with Adam's global count state[T], which adam_count (launched by the verdict) has just advanced */
template <typename T>
__device__ void adam_dense(T* p, const T* g, T* m, T* v, ll n, const ll* state, const double* scalars,
                           const double* ring, double b1, double b2, double eps) {
    const ll i = global_id();
    if (i >= n || !step_ok(ring, state)) return;
    const T step = adam_step<T>(scalars[LR], b1, b2, state[TCOUNT]);
    adam_one(p + i, g[i], m + i, v + i, to_value<T>(b1), to_value<T>(b2), to_value<T>(eps), step);
}

/* the touched rows r < k, each at its own count t_row[ids[r]], which adam_row_count has just advanced */
template <typename T>
__device__ void adam_rows(T* table, T* m, T* v, const ll* t_row, const ll* ids, const T* rows, const ll* k, ll kcap,
                          ll width, const ll* state, const double* scalars, const double* ring, double b1, double b2,
                          double eps) {
    const ll i = global_id();
    if (i >= kcap * width || !step_ok(ring, state)) return;
    const ll r = i / width, j = i % width;
    if (r >= k[0]) return;
    const ll at = ids[r] * width + j;
    const T step = adam_step<T>(scalars[LR], b1, b2, t_row[ids[r]]);
    adam_one(table + at, rows[i], m + at, v + at, to_value<T>(b1), to_value<T>(b2), to_value<T>(eps), step);
}

/* ------------------------------------------------------------------ exported: one name per type */
#define EXPORT_FLOAT(T, S)                                                                                          \
extern "C" __global__ void gemm_nn_##S(const T* a, const T* b, T* c, ll M, ll N, ll K) {                           \
    gemm<T, false, false>(a, b, c, M, N, K); }                                                                      \
extern "C" __global__ void gemm_tn_##S(const T* a, const T* b, T* c, ll M, ll N, ll K) {                           \
    gemm<T, true, false>(a, b, c, M, N, K); }                                                                       \
extern "C" __global__ void gemm_nt_##S(const T* a, const T* b, T* c, ll M, ll N, ll K) {                           \
    gemm<T, false, true>(a, b, c, M, N, K); }                                                                       \
extern "C" __global__ void gemm_tt_##S(const T* a, const T* b, T* c, ll M, ll N, ll K) {                           \
    gemm<T, true, true>(a, b, c, M, N, K); }                                                                        \
extern "C" __global__ void bias_act_##S(T* z, const T* b, ll total, ll m, int has_bias, int act) {                 \
    bias_act<T>(z, b, total, m, has_bias, act); }                                                                   \
extern "C" __global__ void act_grad_##S(const T* a, T* d, ll total, int act) { act_grad<T>(a, d, total, act); }    \
extern "C" __global__ void total_##S(const T* rows, T* out, ll n) { total<T>(rows, out, n); }                      \
extern "C" __global__ void colsum_##S(const T* d, T* out, ll n, ll m) { colsum<T>(d, out, n, m); }                 \
extern "C" __global__ void hashed_rows_##S(const T* data, const T* d, const int* vals, const int* rowof,           \
                                           const int* start, const int* end, const ll* k, T* rows, ll kcap,        \
                                           ll width) {                                                             \
    hashed_rows<T>(data, d, vals, rowof, start, end, k, rows, kcap, width); }                                       \
extern "C" __global__ void verdict_start_##S(const T* buf, ll n, double* ring, const ll* state) {                  \
    verdict_start<T>(buf, n, ring, state); }                                                                        \
extern "C" __global__ void verdict_scan_##S(const T* x, ll n, ll width, const ll* k, int use_k, double* ring,      \
                                            const ll* state) {                                                     \
    verdict_scan<T>(x, n, width, k, use_k, ring, state); }                                                          \
extern "C" __global__ void sgd_dense_##S(T* p, const T* g, ll n, const double* scalars, const double* ring,        \
                                         const ll* state) {                                                        \
    sgd_dense<T>(p, g, n, scalars, ring, state); }                                                                  \
extern "C" __global__ void sgd_rows_##S(T* table, const ll* ids, const T* rows, const ll* k, ll kcap, ll width,    \
                                        const double* scalars, const double* ring, const ll* state) {              \
    sgd_rows<T>(table, ids, rows, k, kcap, width, scalars, ring, state); }                                          \
extern "C" __global__ void adam_dense_##S(T* p, const T* g, T* m, T* v, ll n, const ll* state,                     \
                                          const double* scalars, const double* ring, double b1, double b2,         \
                                          double eps) {                                                            \
    adam_dense<T>(p, g, m, v, n, state, scalars, ring, b1, b2, eps); }                                              \
extern "C" __global__ void adam_rows_##S(T* table, T* m, T* v, const ll* t_row, const ll* ids, const T* rows,      \
                                         const ll* k, ll kcap, ll width, const ll* state, const double* scalars,   \
                                         const double* ring, double b1, double b2, double eps) {                   \
    adam_rows<T>(table, m, v, t_row, ids, rows, k, kcap, width, state, scalars, ring, b1, b2, eps); }

EXPORT_FLOAT(float, f32)
EXPORT_FLOAT(double, f64)

/* rows_times per (value, indptr, indices) type */
#define EXPORT_ROWS_TIMES(T, S, I, SI, J, SJ)                                                                       \
extern "C" __global__ void rows_times_##S##_##SI##_##SJ(const I* indptr, const J* indices, const T* data,          \
                                                        const T* B, T* out, const T* base, const T* bias, ll n,    \
                                                        ll m, int has_base, int has_bias) {                        \
    rows_times<T, I, J>(indptr, indices, data, B, out, base, bias, n, m, has_base, has_bias); }
#define EXPORT_ROWS_TIMES_T(T, S)                                                                                   \
    EXPORT_ROWS_TIMES(T, S, int, i32, int, i32) EXPORT_ROWS_TIMES(T, S, int, i32, ll, i64)                         \
    EXPORT_ROWS_TIMES(T, S, ll, i64, int, i32) EXPORT_ROWS_TIMES(T, S, ll, i64, ll, i64)
EXPORT_ROWS_TIMES_T(float, f32)
EXPORT_ROWS_TIMES_T(double, f64)

/* head per (value, label) type */
#define EXPORT_HEAD(T, S, Y, SY)                                                                                    \
extern "C" __global__ void head_##S##_##SY(const T* z, const Y* y, const double* scalars, T* rows, T* d, ll n,     \
                                           ll k, int loss) {                                                       \
    head<T, Y>(z, y, scalars, rows, d, n, k, loss); }
#define EXPORT_HEAD_T(T, S)                                                                                         \
    EXPORT_HEAD(T, S, int, i32) EXPORT_HEAD(T, S, ll, i64) EXPORT_HEAD(T, S, float, f32) EXPORT_HEAD(T, S, double, f64)
EXPORT_HEAD_T(float, f32)
EXPORT_HEAD_T(double, f64)

/* the hashed block's index kernels, per index type */
#define EXPORT_INDEX(I, SI)                                                                                         \
extern "C" __global__ void count_entries_##SI(const I* indptr, ll n, ll cap, ll* nnz) {                            \
    count_entries<I>(indptr, n, cap, nnz); }                                                                        \
extern "C" __global__ void mark_columns_##SI(const I* indices, const ll* nnz, int* mark, ll n_cols) {              \
    mark_columns<I>(indices, nnz, mark, n_cols); }                                                                  \
extern "C" __global__ void entry_keys_##SI(const I* indices, const ll* nnz, const int* cum, ll n_cols,             \
                                           int invalid, int* keys, int* vals) {                                    \
    entry_keys<I>(indices, nnz, cum, n_cols, invalid, keys, vals); }                                                \
extern "C" __global__ void entry_rows_##SI(const I* indptr, ll n, const ll* nnz, int* rowof) {                     \
    entry_rows<I>(indptr, n, nnz, rowof); }
EXPORT_INDEX(int, i32)
EXPORT_INDEX(ll, i64)

/* ------------------------------------------------------------------ type-free kernels */
/* x[:n] = v */
extern "C" __global__ void fill_i32(int* x, ll n, int v) {
    const ll i = global_id();
    if (i < n) x[i] = v;
}

/* inclusive scan of x[:n] in place, SCAN_BLOCK elements a block (SCAN_THREADS threads of SCAN_ITEMS consecutive
   elements); has_sums: each block's total into sums[block], for scan_add once sums is scanned */
extern "C" __global__ void scan_block(int* x, ll n, int* sums, int has_sums) {
    __shared__ int sh[SCAN_THREADS];
    const int t = threadIdx.x;
    const ll base = (ll) blockIdx.x * SCAN_BLOCK + (ll) t * SCAN_ITEMS;
    int v[SCAN_ITEMS];
    int run = 0;
    for (int q = 0; q < SCAN_ITEMS; ++q) {
        if (base + q < n) run += x[base + q];
        v[q] = run;
    }
    sh[t] = run;
    __syncthreads();
    for (int off = 1; off < SCAN_THREADS; off <<= 1) {
        const int add = t >= off ? sh[t - off] : 0;
        __syncthreads();
        sh[t] += add;
        __syncthreads();
    }
    const int before = sh[t] - run;
    for (int q = 0; q < SCAN_ITEMS; ++q)
        if (base + q < n) x[base + q] = v[q] + before;
    if (has_sums && t == SCAN_THREADS - 1) sums[blockIdx.x] = sh[t];
}

/* block b > 0 of a scan adds the scanned total of the blocks before it */
extern "C" __global__ void scan_add(int* x, ll n, const int* sums) {
    if (blockIdx.x == 0) return;
    const int add = sums[blockIdx.x - 1];
    const ll base = (ll) blockIdx.x * SCAN_BLOCK;
    for (int q = threadIdx.x; q < SCAN_BLOCK; q += blockDim.x)
        if (base + q < n) x[base + q] += add;
}

/* ids[place] = c for every marked column c (cum the inclusive count of marks), k[0] = how many */
extern "C" __global__ void unique_ids(const int* cum, ll n_cols, ll* ids, ll* k) {
    const ll c = global_id();
    if (c >= n_cols) return;
    const int before = c > 0 ? cum[c - 1] : 0;
    if (cum[c] != before) ids[cum[c] - 1] = c;
    if (c == n_cols - 1) k[0] = cum[c];
}

/* one pass of a stable radix sort of the first nnz (key, value) pairs on 8 bits of the key, ENTRY_THREADS entries a
   block. radix_hist: table[digit * blocks + block] = how many of the block's entries have that digit (counted with
   shared-memory integer atomics: a count does not depend on their order). */
extern "C" __global__ void radix_hist(const int* keys, const ll* nnz, int shift, int* table, ll blocks) {
    __shared__ int h[RADIX];
    const int t = threadIdx.x;
    for (int q = t; q < RADIX; q += blockDim.x) h[q] = 0;
    __syncthreads();
    const ll e = (ll) blockIdx.x * ENTRY_THREADS + t;
    if (e < nnz[0]) atomicAdd(&h[(keys[e] >> shift) & (RADIX - 1)], 1);
    __syncthreads();
    for (int q = t; q < RADIX; q += blockDim.x) table[(ll) q * blocks + blockIdx.x] = h[q];
}

/* radix_scatter, the table scanned (inclusive, digit-major): an entry goes to the entries of smaller digits, plus
   those of its digit in earlier blocks, plus those of its digit before it in its block (counted in shared memory) */
extern "C" __global__ void radix_scatter(const int* keys, const int* vals, const ll* nnz, int shift,
                                         const int* table, ll blocks, int* keys_out, int* vals_out) {
    __shared__ int digits[ENTRY_THREADS];
    const int t = threadIdx.x;
    const ll e = (ll) blockIdx.x * ENTRY_THREADS + t;
    const int dg = e < nnz[0] ? (keys[e] >> shift) & (RADIX - 1) : -1;
    digits[t] = dg;
    __syncthreads();
    if (dg < 0) return;
    int rank = 0;
    for (int u = 0; u < t; ++u) rank += digits[u] == dg;
    const ll at = (ll) dg * blocks + blockIdx.x;
    const ll dest = (at > 0 ? table[at - 1] : 0) + rank;
    keys_out[dest] = keys[e];
    vals_out[dest] = vals[e];
}

/* start[c], end[c]: where column c's entries lie among the sorted keys (every column below k has one or more) */
extern "C" __global__ void segment_bounds(const int* keys, const ll* nnz, const ll* k, int* start, int* end) {
    const ll p = global_id();
    const ll n = nnz[0];
    if (p >= n) return;
    const int key = keys[p];
    if (key >= k[0]) return;
    if (p == 0 || keys[p - 1] != key) start[key] = (int) p;
    if (p == n - 1 || keys[p + 1] != key) end[key] = (int) (p + 1);
}

/* the step is recorded: state[POS] += 1 */
extern "C" __global__ void advance_pos(ll* state) {
    if (global_id() == 0) state[POS] += 1;
}

/* the optimizer's count, once per step that is not skipped (after the verdict; before adam_dense reads it) */
extern "C" __global__ void adam_count(ll* state, const double* ring) {
    if (global_id() == 0 && step_ok(ring, state)) state[TCOUNT] += 1;
}

/* each touched row's count t_row[ids[r]] += 1 for r < k (ids unique; before adam_rows reads them) */
extern "C" __global__ void adam_row_count(ll* t_row, const ll* ids, const ll* k, ll kcap, const double* ring,
                                          const ll* state) {
    const ll r = global_id();
    if (r >= kcap || r >= k[0] || !step_ok(ring, state)) return;
    t_row[ids[r]] += 1;
}
