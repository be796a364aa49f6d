/* Native twins of the golden simulator's hot loops (loaded by otpu_core/simnative.py).
 *
 * The card's fp32 rules (otpu_core/fp32.py) on single values: IEEE binary32 round to nearest
 * even (the build keeps IEEE semantics and never contracts into FMA), every input and output
 * flushed to a zero of its sign, add/sub/mul turning any NaN into 0x7FC00000. Each function
 * matches the numpy function of the same name in fp32.py bit for bit. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define F_SIGN 0x80000000u
#define F_EXP 0x7F800000u
#define F_ABS 0x7FFFFFFFu
#define F_NAN 0x7FC00000u

static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline uint32_t f_flush(uint32_t u) { return (u & F_EXP) == 0 ? (u & F_SIGN) : u; }
/* output rule of add/sub/mul: flush after rounding, then the canonical NaN */
static inline uint32_t f_finish(float r) {
    uint32_t u = u_of(r);
    if ((u & F_EXP) == 0) return u & F_SIGN;
    return (u & F_ABS) > F_EXP ? F_NAN : u;
}
/* operands already flushed, as fp32._addf/_subf/_mulf take them */
static inline uint32_t f_addf(uint32_t a, uint32_t b) { return f_finish(f_of(a) + f_of(b)); }
static inline uint32_t f_subf(uint32_t a, uint32_t b) { return f_finish(f_of(a) - f_of(b)); }
static inline uint32_t f_mulf(uint32_t a, uint32_t b) { return f_finish(f_of(a) * f_of(b)); }

/* MM over int8 weights (WF 0) straight from DRAM rows: the C twin of otpu_core.mxu's public path
 * (block_dots, fp32.block_terms, fp32.isum_mm). Per output (r, j) and block k the exact int32
 * dot of D int8 products, t = mul(mul(i2f(dot), Sw[j][k]), Sa[r][k]), summed over k by the
 * 4-partial tree: partial q = +0 + t[q] + t[q+4] + ..., then (p0 + p2) + (p1 + p3).
 * Weight rows are split across up to `threads` threads (integer work is order-free, and each
 * output is computed by one thread in the same order). */
typedef struct {
    const int8_t *act; int64_t act_rs;      /* [R][kb*d] int8, row stride in bytes */
    const uint32_t *as; int64_t as_rs;      /* [R][kb] activation scale bits, row stride in words */
    int rows;
    const uint8_t *w; int64_t w_rs;         /* n weight rows of kb*d int8, row stride in bytes */
    const uint8_t *ws; int64_t ws_rs;       /* n scale rows of kb little-endian words; NULL: UNIT */
    int n, kb, d;
    uint32_t *out;                          /* [R][n] */
    int j0, j1;
} job_t;

/* integer work: any vector width gives the same sums, so the MM loop is built for AVX-512, AVX2
 * and the baseline, chosen at load time */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OTPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define OTPU_CLONES
#endif

static inline int32_t dot8(const int8_t *a, const int8_t *b, int d) {
    int32_t s = 0;
    for (int i = 0; i < d; i++) s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}

/* output column j's weight scale per K block (1.0 for formats without one), flushed */
static void weight_scales(const job_t *J, int j, uint32_t *wsk) {
    for (int k = 0; k < J->kb; k++) {
        uint32_t s = 0x3F800000u;
        if (J->ws) memcpy(&s, J->ws + (int64_t)j * J->ws_rs + 4 * k, 4);
        wsk[k] = f_flush(s);
    }
}

/* the fp32 chain over a row's block dots: each scaled by weight and activation scale, summed in
 * four interleaved partials, then (p0 + p2) + (p1 + p3): fp32.isum_mm's 4-partial tree */
static uint32_t fold_dots(const job_t *J, const int32_t *dots, const uint32_t *wsk, const uint32_t *asr) {
    uint32_t part[4] = {0, 0, 0, 0};
    for (int k = 0; k < J->kb; k++) {
        uint32_t t = f_mulf(f_mulf(u_of((float)dots[k]), wsk[k]), f_flush(asr[k]));
        part[k & 3] = f_addf(part[k & 3], t);
    }
    return f_addf(f_addf(part[0], part[2]), f_addf(part[1], part[3]));
}

OTPU_CLONES static void *run(void *p) {
    const job_t *J = p;
    uint32_t wsk[1024];
    int32_t dots[1024];
    for (int j = J->j0; j < J->j1; j++) {
        const int8_t *wr = (const int8_t *)(J->w + (int64_t)j * J->w_rs);
        weight_scales(J, j, wsk);
        for (int r = 0; r < J->rows; r++) {
            const int8_t *ar = J->act + (int64_t)r * J->act_rs;
            for (int k = 0; k < J->kb; k++)
                dots[k] = dot8(ar + (int64_t)k * J->d, wr + (int64_t)k * J->d, J->d);
            J->out[(int64_t)r * J->n + j] = fold_dots(J, dots, wsk, J->as + (int64_t)r * J->as_rs);
        }
    }
    return NULL;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#include <stdlib.h>
#define OTPU_VNNI 1
/* the same integer dots with AVX-512 VNNI (d a multiple of 64): vpdpbusd multiplies unsigned
 * by signed bytes, so the weights go in as w + 128 and 128 * sum(a) over the block comes off */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void *run_vnni(void *p) {
    const job_t *J = p;
    uint32_t wsk[1024];
    int32_t dots[1024];
    int32_t *asum = malloc(sizeof(int32_t) * (size_t)J->rows * (size_t)J->kb);
    if (!asum) return run(p);
    for (int r = 0; r < J->rows; r++)
        for (int k = 0; k < J->kb; k++) {
            const int8_t *ab = J->act + (int64_t)r * J->act_rs + (int64_t)k * J->d;
            int32_t s = 0;
            for (int i = 0; i < J->d; i++) s += ab[i];
            asum[r * J->kb + k] = 128 * s;
        }
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int j = J->j0; j < J->j1; j++) {
        const int8_t *wr = (const int8_t *)(J->w + (int64_t)j * J->w_rs);
        weight_scales(J, j, wsk);
        for (int r = 0; r < J->rows; r++) {
            const int8_t *ar = J->act + (int64_t)r * J->act_rs;
            for (int k = 0; k < J->kb; k++) {       /* the dots first: loads overlap */
                __m512i acc = _mm512_setzero_si512();
                for (int i = 0; i < J->d; i += 64) {
                    __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(wr + (int64_t)k * J->d + i), flip);
                    acc = _mm512_dpbusd_epi32(acc, wv, _mm512_loadu_si512(ar + (int64_t)k * J->d + i));
                }
                dots[k] = _mm512_reduce_add_epi32(acc) - asum[r * J->kb + k];
            }
            J->out[(int64_t)r * J->n + j] = fold_dots(J, dots, wsk, J->as + (int64_t)r * J->as_rs);
        }
    }
    free(asum);
    return NULL;
}
#endif

/* returns 0, or -1 when kb is beyond the kernel's scale buffer (the caller takes numpy);
 * vnni: 1 lets the AVX-512 VNNI loop run where the CPU has it, 0 keeps the portable loop */
int mm_int8(const int8_t *act, int64_t act_rs, const uint32_t *as, int64_t as_rs, int rows,
            const uint8_t *w, int64_t w_rs, const uint8_t *ws, int64_t ws_rs,
            int n, int kb, int d, uint32_t *out, int threads, int vnni) {
    if (kb > 1024) return -1;
    if (threads < 1) threads = 1;
    if (threads > 8) threads = 8;
    if ((int64_t)n * rows * kb * d < (1 << 23)) threads = 1;   /* below ~8 MB a thread start costs more than it saves */
    void *(*body)(void *) = run;
#ifdef OTPU_VNNI
    if (vnni && d % 64 == 0 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"))
        body = run_vnni;
#endif
    job_t jobs[8];
    pthread_t tid[8];
    int started = 0;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job_t){act, act_rs, as, as_rs, rows, w, w_rs, ws, ws_rs, n, kb, d, out,
                          (int)((int64_t)n * t / threads), (int)((int64_t)n * (t + 1) / threads)};
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[t], NULL, body, &jobs[t]) == 0) started |= 1 << t;
        else body(&jobs[t]);
    body(&jobs[0]);
    for (int t = 1; t < threads; t++)
        if (started >> t & 1) pthread_join(tid[t], NULL);
    return 0;
}

/* ---- fp32.py's composites and reductions, one element / one row at a time ---------------- */
static inline uint32_t f_key(uint32_t u) { return u >= F_SIGN ? ~u : (u | F_SIGN); }
static inline uint32_t f_canon(uint32_t u) { return (u & F_ABS) > F_EXP ? F_NAN : u; }
static inline uint32_t f_add_exponent(uint32_t u, int64_t k) { return (uint32_t)((int64_t)u + k * 8388608); }
static inline uint32_t f_i2f(int64_t i) { return u_of((float)(double)i); }   /* |i| < 2^53 here */

static const uint32_t EXP2_C[8] = {0x3F800000u, 0x3F317218u, 0x3E75FDE9u, 0x3D63593Eu,
                                   0x3C1D8534u, 0x3AAFE2F6u, 0x3916C07Cu, 0x37B3C7D6u};
static const uint32_t LOG2_C[9] = {0x3FB8AA3Bu, 0xBF38AA38u, 0x3EF639EBu, 0xBEB8AE27u, 0x3E9369C2u,
                                   0xBE74ADF2u, 0x3E5CE48Eu, 0xBE543E8Eu, 0x3E00DB73u};

static inline uint32_t f_horner(const uint32_t *c, int n, uint32_t t) {
    uint32_t p = c[n - 1];
    for (int i = n - 2; i >= 0; i--) p = f_addf(f_mulf(p, t), c[i]);
    return p;
}

static uint32_t f_exp2(uint32_t x) {
    x = f_canon(f_flush(x));
    int lo = f_key(0xC2FC0000u) > f_key(x);
    int hi = !(f_key(0x43000000u) > f_key(x));
    if (lo) return 0;
    if (hi) return 0x7F800000u;
    int64_t i = (int64_t)floorf(f_of(x));
    uint32_t f = f_subf(x, f_i2f(i));
    return f_add_exponent(f_horner(EXP2_C, 8, f), i);
}

static uint32_t f_recip(uint32_t x) {
    x = f_flush(x);
    uint32_t ab = x & F_ABS;
    if (ab == 0) return 0;
    uint32_t a = (127u << 23) | (ab & 0x007FFFFFu);
    uint32_t y = 0x7EF311C3u - a;
    for (int s = 0; s < 2; s++) y = f_mulf(y, f_subf(0x40000000u, f_mulf(a, y)));
    y = f_addf(f_mulf(y, f_subf(0x3F800000u, f_mulf(a, y))), y);
    y = f_add_exponent(y, 127 - (int64_t)(ab >> 23));
    if (ab >= 0x7E800000u) y = 0;
    return y | (x & F_SIGN);
}

static uint32_t f_rsqrt(uint32_t x) {
    x = f_flush(x);
    uint32_t field = (x >> 23) & 0xFFu;
    if (x >= F_SIGN || x == 0 || x == 0x7F800000u) return 0;
    int64_t k = field <= 2 ? 4 : (field >= 250 && field <= 254 ? -4 : 0);
    uint32_t xs = f_add_exponent(x, k);
    uint32_t y = 0x5F3759DFu - (xs >> 1);
    uint32_t h = f_mulf(0x3F000000u, xs);
    for (int s = 0; s < 2; s++) y = f_mulf(y, f_subf(0x3FC00000u, f_mulf(h, f_mulf(y, y))));
    y = f_addf(f_mulf(y, f_subf(0x3F000000u, f_mulf(h, f_mulf(y, y)))), y);
    return f_add_exponent(y, k / 2);
}

static uint32_t f_log2(uint32_t x) {
    x = f_flush(x);
    if ((x & F_ABS) == 0) return 0xFF800000u;
    if (x >= F_SIGN) return F_NAN;
    uint32_t frac = x & 0x007FFFFFu;
    int64_t ex = (x >> 23) & 0xFF;
    if (ex == 255) return f_canon(x);
    int ge = frac >= 0x3504F3u;
    int64_t e = ex - 127 + ge;
    uint32_t m = (ge ? (126u << 23) : (127u << 23)) | frac;
    uint32_t t = f_addf(m, 0xBF800000u);
    uint32_t q = f_horner(LOG2_C, 9, t);
    return f_flush(f_addf(f_mulf(q, t), f_i2f(e)));
}

/* VOP functions, numbered as isa.VFunc; elementwise ones (see vop_ew) */
enum { V_ADD = 0, V_SUB, V_RSUB, V_MUL, V_MAX, V_MIN, V_COPY, V_EXP2, V_RECIP, V_RSQRT, V_ABS,
       V_FILL, V_EXP2SUB, V_LOG2 };

static inline uint32_t ew1(int func, uint32_t a, uint32_t b) {
    switch (func) {
    case V_ADD: return f_addf(f_flush(a), f_flush(b));
    case V_SUB: return f_subf(f_flush(a), f_flush(b));
    case V_RSUB: return f_subf(f_flush(b), f_flush(a));
    case V_MUL: return f_mulf(f_flush(a), f_flush(b));
    case V_MAX: a = f_flush(a); b = f_flush(b); return f_key(a) > f_key(b) ? a : b;
    case V_MIN: a = f_flush(a); b = f_flush(b); return f_key(b) > f_key(a) ? a : b;
    case V_COPY: return f_flush(a);
    case V_EXP2: return f_exp2(a);
    case V_RECIP: return f_recip(a);
    case V_RSQRT: return f_rsqrt(a);
    case V_ABS: return f_flush(a) & F_ABS;
    case V_FILL: return f_flush(b);
    case V_EXP2SUB: return f_exp2(f_subf(f_flush(a), f_flush(b)));
    default: return f_log2(a);
    }
}

/* out[r*ors + c] = func(a[r*ars + c*acs], b[r*brs + c*bcs]) (strides in words; 0 broadcasts;
 * a NULL a is unread, a NULL b reads imm). Run in place on TMEM only when the VOP hazard rule
 * holds: then no element reads a word an earlier element wrote, as if all reads came first. */
int vop_ew(int func, int64_t rows, int64_t cols, const uint32_t *a, int64_t ars, int64_t acs,
           const uint32_t *b, int64_t brs, int64_t bcs, uint32_t imm, uint32_t *out, int64_t ors) {
    if (func < V_ADD || func > V_LOG2) return -1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ors + c] = ew1(func, a ? a[r * ars + c * acs] : 0, b ? b[r * brs + c * bcs] : imm);
    return 0;
}

/* reductions along rows into out[r*ors]: 0 RSUM, 1 RSSQ, 2 RDOT (isum_64, +0 padding; a NULL b
 * reads imm), 3 RMAX (chain_max); a row's result is written after all its reads */
int vop_reduce(int kind, int64_t rows, int64_t cols, const uint32_t *a, int64_t ars, int64_t acs,
               const uint32_t *b, int64_t brs, int64_t bcs, uint32_t imm, uint32_t *out, int64_t ors) {
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t *ar = a + r * ars;
        if (kind == 3) {
            uint32_t best = f_flush(ar[0]);
            for (int64_t c = 1; c < cols; c++) {
                uint32_t v = f_flush(ar[c * acs]);
                if (f_key(v) > f_key(best)) best = v;
            }
            out[r * ors] = best;
            continue;
        }
        uint32_t p[64] = {0};
        int64_t whole = ((cols > 1 ? cols : 1) + 63) / 64 * 64;
        for (int64_t c = 0; c < whole; c++) {
            uint32_t t = 0;
            if (c < cols) {
                uint32_t x = f_flush(ar[c * acs]);
                if (kind == 0) t = x;
                else if (kind == 1) t = f_mulf(x, x);
                else t = f_mulf(x, f_flush(b ? b[r * brs + c * bcs] : imm));
            }
            p[c & 63] = f_addf(p[c & 63], t);
        }
        for (int n = 32; n >= 1; n /= 2)
            for (int i = 0; i < n; i++) p[i] = f_addf(p[i], p[i + n]);
        out[r * ors] = p[0];
    }
    return 0;
}

/* fp32.quantize over `groups` contiguous groups of `size` words: int8 codes and scale bits */
int quantize(int64_t groups, int64_t size, const uint32_t *x, int8_t *q, uint32_t *s) {
    for (int64_t g = 0; g < groups; g++) {
        const uint32_t *xg = x + g * size;
        uint32_t amax = 0;
        for (int64_t i = 0; i < size; i++) {
            uint32_t m = f_flush(xg[i]) & F_ABS;
            if (m > amax) amax = m;
        }
        uint32_t inv = 0;
        s[g] = 0;
        if (amax) {
            s[g] = f_mulf(amax, 0x3C010204u);
            inv = f_mulf(0x42FE0000u, f_recip(amax));
        }
        for (int64_t i = 0; i < size; i++) {
            float v = f_of(f_mulf(f_flush(xg[i]), inv));
            if (v != v) v = 0.0f;
            v = rintf(v);
            q[g * size + i] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : v);
        }
    }
    return 0;
}
