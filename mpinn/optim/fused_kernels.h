/* mpinn's fused update kernels, the part written once for both float types: fused.c includes this file
   twice, with `real` defined as float and as double, S(name) as name_f and name_d, and SQRT, FABS and
   COPYSIGN as the C library's functions of that type. No include guard, on purpose. */

/* prefetch the rows AHEAD rows on (see fused.c) */
static inline void S(ahead)(const int64_t* ids, int64_t r, int64_t k, int64_t w, const real* A, const real* B,
                           const real* C) {
    if (r + AHEAD >= k) return;
    int64_t at = ids[r + AHEAD] * w;
    for (int64_t o = 0; o < w; o += 64 / (int64_t)sizeof(real)) {
        __builtin_prefetch(A + at + o, 1);
        if (B) __builtin_prefetch(B + at + o, 1);
        if (C) __builtin_prefetch(C + at + o, 1);
    }
}

/* o = the sum of the n rows r[0..n) present at sorted leaf places leaf[0..n), in the aligned pairwise tree over
   the places (batch.coalesce's): the block of the first and last places split where they first differ, each side
   summed alike, then left + right; one row is itself (an absent leaf adds nothing, not + 0). tmp: scratch of
   (levels + 1) x w, a row per level. */
static void S(tree_into)(real* restrict o, int64_t w, const int64_t* leaf, const real* const* r, int64_t n,
                         real* restrict tmp) {
    if (n == 1) {
        for (int64_t j = 0; j < w; j++) o[j] = r[0][j];
        return;
    }
    int bit = 63 - __builtin_clzll((unsigned long long)(leaf[0] ^ leaf[n - 1]));
    int64_t k = 1;
    while (!((leaf[k] >> bit) & 1)) k++;
    S(tree_into)(o, w, leaf, r, k, tmp + w);
    S(tree_into)(tmp, w, leaf + k, r + k, n - k, tmp + w);
    for (int64_t j = 0; j < w; j++) o[j] = o[j] + tmp[j];
}

/* Rows summed over m leaves (ranks, in order; a leaf may be empty), each leaf's ids strictly increasing (a k-way
   merge): out_ids sorted and unique, each out row its leaves' rows in the aligned pairwise tree over the leaves'
   places (batch.coalesce's bits). Returns the number of rows, -1 when a leaf's ids are not increasing (the caller
   then sums in numpy), -2 when out of memory. */
int64_t S(coalesce)(int64_t m, const int64_t* lens, const int64_t* const* ids, const real* const* rows,
                   int64_t w, int64_t* out_ids, real* out) {
    for (int64_t p = 0; p < m; p++)
        for (int64_t i = 1; i < lens[p]; i++) if (ids[p][i] <= ids[p][i - 1]) return -1;
    int64_t* at = calloc((size_t)m, sizeof(int64_t));
    int64_t* leaf = malloc((size_t)m * sizeof(int64_t));
    const real** r = malloc((size_t)m * sizeof(real*));
    real* tmp = malloc((size_t)(65 * (w > 0 ? w : 1)) * sizeof(real));
    int64_t n = 0;
    if (!at || !leaf || !r || !tmp) n = -2;
    while (n >= 0) {
        int64_t best = INT64_MAX, k = 0;
        for (int64_t p = 0; p < m; p++)
            if (at[p] < lens[p] && ids[p][at[p]] < best) best = ids[p][at[p]];
        if (best == INT64_MAX) break;
        for (int64_t p = 0; p < m; p++)
            if (at[p] < lens[p] && ids[p][at[p]] == best) { leaf[k] = p; r[k++] = rows[p] + at[p]++ * w; }
        S(tree_into)(out + n * w, w, leaf, r, k, tmp);
        out_ids[n++] = best;
    }
    free(at); free(leaf); free(r); free(tmp);
    return n;
}

static inline real S(sgn)(real x) { return x > 0 ? (real)1 : (x < 0 ? (real)-1 : (x == x ? (real)0 : x)); }

static inline void S(sgd)(int64_t n, R p, CR g, real lr, real wd) {
    if (wd != 0) {
        for (int64_t i = 0; i < n; i++) { real gi = wd * p[i]; gi = g[i] + gi; real d = gi * lr; p[i] = p[i] - d; }
    } else {
        for (int64_t i = 0; i < n; i++) { real d = g[i] * lr; p[i] = p[i] - d; }
    }
}
void S(sgd_dense)(int64_t n, real* p, real* g, real* s0, real* s1, const sgd_consts* c) {
    S(sgd)(n, p, g, (real)c->lr, 0);
}
void S(sgd_rows)(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                void* R_, const sgd_consts* c, const double* steps) {
    real lr = (real)c->lr, wd = (real)c->wd;
    for (int64_t r = 0; r < k; r++) { S(ahead)(ids, r, k, w, P, 0, 0); S(sgd)(w, P + ids[r] * w, G + r * w, lr, wd); }
}

/* s0 = velocity */
static inline void S(momentum)(int64_t n, R p, CR g, R v, real lr, real mu, real wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (wd != 0) { real dk = wd * p[i]; gi = gi + dk; }
        real vi = v[i] * mu; vi = vi + gi; v[i] = vi;
        real d = vi * lr; p[i] = p[i] - d;
    }
}
void S(momentum_dense)(int64_t n, real* p, real* g, real* s0, real* s1, const momentum_consts* c) {
    S(momentum)(n, p, g, s0, (real)c->lr, (real)c->mu, 0);
}
void S(momentum_rows)(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                     void* R_, const momentum_consts* c, const double* steps) {
    real lr = (real)c->lr, mu = (real)c->mu, wd = (real)c->wd;
    for (int64_t r = 0; r < k; r++) {
        S(ahead)(ids, r, k, w, P, S0, 0);
        S(momentum)(w, P + ids[r] * w, G + r * w, S0 + ids[r] * w, lr, mu, wd);
    }
}

/* s0, s1 = m / (1 - b1), v / (1 - b2) */
static inline void S(adam)(int64_t n, R p, CR g, R m, R v, real b1, real b2, real eps, real step, real wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (wd != 0) { real dk = wd * p[i]; gi = gi + dk; }
        real mi = m[i] * b1; mi = mi + gi; m[i] = mi;
        real g2 = gi * gi;
        real vi = v[i] * b2; vi = vi + g2; v[i] = vi;
        real d = SQRT(vi); d = d + eps; d = mi / d; d = d * step; p[i] = p[i] - d;
    }
}
void S(adam_dense)(int64_t n, real* p, real* g, real* s0, real* s1, const adam_consts* c) {
    S(adam)(n, p, g, s0, s1, (real)c->b1, (real)c->b2, (real)c->eps, (real)c->step, 0);
}
/* steps[t]: the step factor at a row's count t, without the learning rate (float64) */
void S(adam_rows)(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                 void* R_, const adam_consts* c, const double* steps) {
    int64_t* t = (int64_t*)R_;
    double lr = c->lr;
    real b1 = (real)c->b1, b2 = (real)c->b2, eps = (real)c->eps, wd = (real)c->wd;
    for (int64_t r = 0; r < k; r++) {
        int64_t i = ids[r];
        S(ahead)(ids, r, k, w, P, S0, S1);
        if (r + AHEAD < k) __builtin_prefetch(t + ids[r + AHEAD], 1);
        t[i] += 1;
        double step = lr * steps[t[i]];
        S(adam)(w, P + i * w, G + r * w, S0 + i * w, S1 + i * w, b1, b2, eps, (real)step, wd);
    }
}

/* s0 = accumulator */
static inline void S(adagrad)(int64_t n, R p, CR g, R acc, real lr, real eps, real wd) {
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (wd != 0) { real dk = wd * p[i]; gi = gi + dk; }
        real g2 = gi * gi;
        real a = acc[i] + g2; acc[i] = a;
        real d = SQRT(a); d = d + eps; d = gi / d; d = d * lr; p[i] = p[i] - d;
    }
}
void S(adagrad_dense)(int64_t n, real* p, real* g, real* s0, real* s1, const adagrad_consts* c) {
    S(adagrad)(n, p, g, s0, (real)c->lr, (real)c->eps, 0);
}
void S(adagrad_rows)(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                    void* R_, const adagrad_consts* c, const double* steps) {
    real lr = (real)c->lr, eps = (real)c->eps, wd = (real)c->wd;
    for (int64_t r = 0; r < k; r++) {
        S(ahead)(ids, r, k, w, P, S0, 0);
        S(adagrad)(w, P + ids[r] * w, G + r * w, S0 + ids[r] * w, lr, eps, wd);
    }
}

/* s0, s1 = z, SQRT(n). sigma = 1/eta_new - 1/eta_old with 1/eta = (beta + SQRT(n)) / alpha, computed as
   (SQRT(n_new) - SQRT(n_old)) / alpha + (beta + SQRT(n_old)) (1/alpha - 1/alpha_prev); the second
   term is left out when alpha did not change (dinv == 0), so a constant rate costs nothing. */
static inline void S(ftrl_start)(int64_t n, CR p, R z, real l1, real start) {
    if (l1 != 0) {
        for (int64_t i = 0; i < n; i++) { real zi = p[i] * start; real s = l1 * S(sgn)(p[i]); z[i] = zi - s; }
    } else {
        for (int64_t i = 0; i < n; i++) z[i] = p[i] * start;
    }
}
static inline void S(ftrl)(int64_t n, R p, CR g, R z, R sqn, real ainv, real dinv, real beta, real l1,
                          real l2, real wd, const int use_l1, const int use_wd, const int use_dinv) {
    real nainv = -ainv;
    for (int64_t i = 0; i < n; i++) {
        real gi = g[i];
        if (use_wd) { real dk = wd * p[i]; gi = gi + dk; }
        real zi = z[i] + gi;
        real g2 = gi * gi;
        real qo = sqn[i];
        real q = qo * qo; q = q + g2; q = SQRT(q); sqn[i] = q;
        real s = q - qo; s = s * ainv;
        if (use_dinv) { real e = beta + qo; e = e * dinv; s = s + e; }
        s = s * p[i];
        zi = zi - s; z[i] = zi;
        q = q + beta; q = q * nainv; q = q - l2;      /* q - 0 is q, bit for bit */
        if (use_l1) {
            real a = FABS(zi); a = a - l1; a = a < 0 ? (real)0 : a; a = COPYSIGN(a, zi);
            p[i] = a / q;
        } else {
            p[i] = zi / q;
        }
    }
}
/* the flags as constants, so that each call is compiled into its own branch-free loop */
static inline void S(ftrl_any)(int64_t n, R p, CR g, R z, R nn, real ainv, real dinv, real beta, real l1,
                              real l2, real wd) {
    int k = (l1 != 0) * 4 + (wd != 0) * 2 + (dinv != 0);
    switch (k) {
        case 0: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 0, 0, 0); break;
        case 1: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 0, 0, 1); break;
        case 2: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 0, 1, 0); break;
        case 3: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 0, 1, 1); break;
        case 4: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 1, 0, 0); break;
        case 5: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 1, 0, 1); break;
        case 6: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 1, 1, 0); break;
        default: S(ftrl)(n, p, g, z, nn, ainv, dinv, beta, l1, l2, wd, 1, 1, 1); break;
    }
}
void S(ftrl_dense)(int64_t n, real* p, real* g, real* s0, real* s1, const ftrl_consts* c) {
    real ainv = (real)c->inv_alpha, dinv = ainv - (real)c->inv_alpha_prev;
    S(ftrl_any)(n, p, g, s0, s1, ainv, dinv, (real)c->beta, (real)c->l1, (real)c->l2, 0);
}
/* R_: per row, 1 / the alpha of its last step (float64; 0: never stepped, z not started yet) */
void S(ftrl_rows)(int64_t k, int64_t w, const int64_t* ids, real* P, real* G, real* S0, real* S1,
                 void* R_, const ftrl_consts* c, const double* steps) {
    double* prev = (double*)R_;
    real ainv = (real)c->inv_alpha, beta = (real)c->beta, l1 = (real)c->l1, l2 = (real)c->l2;
    real start = (real)c->start, wd = (real)c->wd;
    for (int64_t r = 0; r < k; r++) {
        int64_t i = ids[r];
        S(ahead)(ids, r, k, w, P, S0, S1);
        real dinv = 0;
        if (prev[i] == 0) S(ftrl_start)(w, P + i * w, S0 + i * w, l1, start);
        else dinv = ainv - (real)prev[i];
        prev[i] = c->inv_alpha;
        S(ftrl_any)(w, P + i * w, G + r * w, S0 + i * w, S1 + i * w, ainv, dinv, beta, l1, l2, wd);
    }
}
