/* mpinn's fused update kernels (see mpinn/optim/fused.py for the calling convention). Each kernel does the
   numpy path's operations (the optimizers' update_, batch.coalesce) in the same order, each
   rounded to the parameters' type, so that both give the same bits.

   Built at install time as the extensions mpinn.optim._fused (portable), _fused_v3 (x86-64-v3 CPUs) and
   _fused_native (the installing machine's CPU; see scripts/build_backend.py), or at run time by
   fused_build.py into a private cache directory. This file holds
   what is written once; fused_kernels.h holds the kernels, included below once per float type. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Each optimizer's constants: one struct of doubles, named field by field. The field list is written
   once (an X-macro) and gives the struct, NAME_fields() (the names, in order) and NAME_layout() (its
   size, then each field's offset), which mpinn/optim/fused.py compares with its ctypes Structure when
   it loads the library: a mismatch refuses the library (the numpy passes run). A kernel rounds each
   constant to `real` where it reads it: numpy's p.dtype.type(value). */
#define CONST_MEMBER(T, f) double f;
#define CONST_NAME(T, f) #f " "
#define CONST_OFFSET(T, f) out[n++] = (int64_t)offsetof(T, f);
#define CONSTS(T, FIELDS)                                                                    \
    typedef struct { FIELDS(CONST_MEMBER, T) } T;                                           \
    const char* T##_fields(void) { return FIELDS(CONST_NAME, T); }                            \
    int64_t T##_layout(int64_t* out) {                                                        \
        int64_t n = 0;                                                                        \
        out[n++] = (int64_t)sizeof(T);                                                        \
        FIELDS(CONST_OFFSET, T)                                                               \
        return n;                                                                             \
    }

/* lr: the step's learning rate; wd: lazy L2 on table rows (0 for dense elements, whose decay is added
   to the gradient before the kernel) */
#define SGD_CONSTS(X, T) X(T, lr) X(T, wd)
CONSTS(sgd_consts, SGD_CONSTS)
#define MOMENTUM_CONSTS(X, T) X(T, lr) X(T, mu) X(T, wd)
CONSTS(momentum_consts, MOMENTUM_CONSTS)
/* eps: eps / sqrt(1 - b2) (the state is kept scaled); step: lr * the step factor at the global step
   (dense elements); table rows take lr * steps[t_row] */
#define ADAM_CONSTS(X, T) X(T, lr) X(T, b1) X(T, b2) X(T, eps) X(T, step) X(T, wd)
CONSTS(adam_consts, ADAM_CONSTS)
#define ADAGRAD_CONSTS(X, T) X(T, lr) X(T, eps) X(T, wd)
CONSTS(adagrad_consts, ADAGRAD_CONSTS)
/* inv_alpha: 1 / this step's alpha; inv_alpha_prev: 1 / the alpha of the elements' previous step (the
   dense elements'; a table row keeps its own); start: -(beta / alpha + l2), z's start from w */
#define FTRL_CONSTS(X, T) X(T, inv_alpha) X(T, inv_alpha_prev) X(T, beta) X(T, l1) X(T, l2) X(T, start) X(T, wd)
CONSTS(ftrl_consts, FTRL_CONSTS)

/* The source this library was built from (its SHA-256, given by the build), so that a library built from
   other sources is never taken for this one. */
#ifndef MPINN_SOURCE_HASH
#define MPINN_SOURCE_HASH "unknown"
#endif
const char* mpinn_source_hash(void) { return MPINN_SOURCE_HASH; }
/* A build for the building machine's CPU (-march=native) carries that CPU's features (/proc/cpuinfo's
   flags), so that it is loaded only where the CPU has all of them. */
#ifndef MPINN_CPU_FLAGS
#define MPINN_CPU_FLAGS ""
#endif
const char* mpinn_cpu_flags(void) { return MPINN_CPU_FLAGS; }

/* --wire-rows bf16 (mpinn/comm/wire.py): float32 as bfloat16 words, the top half rounded to nearest even and any
   NaN as 0x7FC0 (mpinn.comm.compress.to_bf16's bits), and back (exact). memcpy: a float's bits without breaking
   the aliasing rules (compiled to one move). */
#include <string.h>
static inline uint16_t bf16_of(float x) {
    uint32_t v;
    memcpy(&v, &x, 4);
    if ((v & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    return (uint16_t)((v + 0x7FFFu + ((v >> 16) & 1u)) >> 16);
}

void bf16_encode(int64_t k, int64_t w, const float* restrict x, uint16_t* restrict o) {
    for (int64_t i = 0; i < k * w; i++) o[i] = bf16_of(x[i]);
}

/* rows ids[0..k) of the (., w) table, as bfloat16 words (an owner answering a fetch: np.take then the cast); each
   cast's rows k x w: the same arguments as the int8 kernels' below (fused.py's Codec) */
void bf16_take(int64_t k, int64_t w, const int64_t* restrict ids, const float* restrict table,
               uint16_t* restrict o) {
    for (int64_t r = 0; r < k; r++) {
        const float* row = table + ids[r] * w;
        uint16_t* out = o + r * w;
        for (int64_t j = 0; j < w; j++) out[j] = bf16_of(row[j]);
    }
}

void bf16_decode(int64_t k, int64_t w, const uint16_t* restrict words, float* restrict o) {
    for (int64_t i = 0; i < k * w; i++) {
        uint32_t v = (uint32_t)words[i] << 16;
        memcpy(o + i, &v, 4);
    }
}

/* --wire-rows int8 (mpinn/comm/wire.py's to_int8 and from_int8, the same bits): a row of w float32 values as w int8
   values q = rint(x / s) within +-127, then s = max|x| / 127 as 4 bytes; s NaN or Inf (a NaN or an Inf in the row)
   or 0: q = 0. All in float arithmetic (division and rint correctly rounded; no FMA, -ffp-contract=off). */
static void int8_row(const float* restrict x, int64_t w, uint8_t* restrict o) {
    float top = 0.0f;
    int nan = 0;
    for (int64_t j = 0; j < w; j++) {
        float a = fabsf(x[j]);
        nan |= a != a;
        top = a > top ? a : top;
    }
    float s = nan ? NAN : top / 127.0f;
    if (isfinite(s) && s > 0.0f) {
        for (int64_t j = 0; j < w; j++) {
            float q = rintf(x[j] / s);
            q = q > 127.0f ? 127.0f : q;
            q = q < -127.0f ? -127.0f : q;
            o[j] = (uint8_t)(int8_t)(int32_t)q;
        }
    } else {
        memset(o, 0, (size_t)w);
    }
    memcpy(o + w, &s, 4);
}

void int8_encode(int64_t k, int64_t w, const float* restrict x, uint8_t* restrict o) {
    for (int64_t r = 0; r < k; r++) int8_row(x + r * w, w, o + r * (w + 4));
}

/* rows ids[0..k) of the (., w) table as int8 rows (an owner answering a fetch: the gather and the cast in one) */
void int8_take(int64_t k, int64_t w, const int64_t* restrict ids, const float* restrict table, uint8_t* restrict o) {
    for (int64_t r = 0; r < k; r++) int8_row(table + ids[r] * w, w, o + r * (w + 4));
}

void int8_decode(int64_t k, int64_t w, const uint8_t* restrict in, float* restrict o) {
    for (int64_t r = 0; r < k; r++) {
        const uint8_t* row = in + r * (w + 4);
        float s;
        memcpy(&s, row + w, 4);
        for (int64_t j = 0; j < w; j++) o[r * w + j] = (float)(int8_t)row[j] * s;
    }
}

#define R real* restrict
#define CR const real* restrict
/* Ask for the rows AHEAD rows on now (each id a random row of tables far larger than the cache): their
   loads then overlap this row's arithmetic instead of each waiting for memory in turn. */
#define AHEAD 16

#define real float
#define S(name) name##_f
#define SQRT sqrtf
#define FABS fabsf
#define COPYSIGN copysignf
#include "fused_kernels.h"
#undef real
#undef S
#undef SQRT
#undef FABS
#undef COPYSIGN

#define real double
#define S(name) name##_d
#define SQRT sqrt
#define FABS fabs
#define COPYSIGN copysign
#include "fused_kernels.h"
