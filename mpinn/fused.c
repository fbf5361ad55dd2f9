/* mpinn's fused update kernels: the template that mpinn/fused.py compiles (see its docstring for the
   calling convention). `real` becomes float or double and the suffix _S becomes _f or _d; each
   kernel does the numpy path's operations (mpinn/optim/*.py update_, mpinn/batch.py coalesce) in the
   same order, each rounded to `real`, so that both give the same bits. */
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
