/* Native twins of the golden simulator's hot loops (loaded by otpu_core/simnative.py).
 *
 * The card's fp32 rules (otpu_core/fp32.py) on single values: IEEE binary32 round to nearest
 * even (the build keeps IEEE semantics and never contracts into FMA), every input and output
 * flushed to a zero of its sign, add/sub/mul turning any NaN into 0x7FC00000. Each function
 * matches the numpy function of the same name in fp32.py bit for bit. */
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

static int32_t dot8(const int8_t *a, const int8_t *b, int d) {
    int32_t s = 0;
    for (int i = 0; i < d; i++) s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}

static void *run(void *p) {
    const job_t *J = p;
    uint32_t wsk[1024];
    for (int j = J->j0; j < J->j1; j++) {
        const int8_t *wr = (const int8_t *)(J->w + (int64_t)j * J->w_rs);
        for (int k = 0; k < J->kb; k++) {
            uint32_t s = 0x3F800000u;
            if (J->ws) memcpy(&s, J->ws + (int64_t)j * J->ws_rs + 4 * k, 4);
            wsk[k] = f_flush(s);
        }
        for (int r = 0; r < J->rows; r++) {
            const int8_t *ar = J->act + (int64_t)r * J->act_rs;
            const uint32_t *asr = J->as + (int64_t)r * J->as_rs;
            uint32_t part[4] = {0, 0, 0, 0};
            for (int k = 0; k < J->kb; k++) {
                int32_t dot = dot8(ar + (int64_t)k * J->d, wr + (int64_t)k * J->d, J->d);
                uint32_t t = f_mulf(f_mulf(u_of((float)dot), wsk[k]), f_flush(asr[k]));
                part[k & 3] = f_addf(part[k & 3], t);
            }
            J->out[(int64_t)r * J->n + j] = f_addf(f_addf(part[0], part[2]), f_addf(part[1], part[3]));
        }
    }
    return NULL;
}

/* returns 0, or -1 when kb is beyond the kernel's scale buffer (the caller takes numpy) */
int mm_int8(const int8_t *act, int64_t act_rs, const uint32_t *as, int64_t as_rs, int rows,
            const uint8_t *w, int64_t w_rs, const uint8_t *ws, int64_t ws_rs,
            int n, int kb, int d, uint32_t *out, int threads) {
    if (kb > 1024) return -1;
    if (threads < 1) threads = 1;
    if (threads > 8) threads = 8;
    if ((int64_t)n * rows * kb * d < (1 << 20)) threads = 1;
    job_t jobs[8];
    pthread_t tid[8];
    int started = 0;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job_t){act, act_rs, as, as_rs, rows, w, w_rs, ws, ws_rs, n, kb, d, out,
                          (int)((int64_t)n * t / threads), (int)((int64_t)n * (t + 1) / threads)};
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[t], NULL, run, &jobs[t]) == 0) started |= 1 << t;
        else run(&jobs[t]);
    run(&jobs[0]);
    for (int t = 1; t < threads; t++)
        if (started >> t & 1) pthread_join(tid[t], NULL);
    return 0;
}
