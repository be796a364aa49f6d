/* tilepack.c: the native twin of bfp.pack_strips / bfp16 and of convert's per-tensor loop.
 *
 * The definition of every byte is otpu_core/tt/bfp.py (and tests/test_tt_bfp_packer.py's
 * per-element reference); this file computes the same bytes faster. tilepack.py loads it with
 * cbuild and documents the API. Only exact operations touch the values (integer steps on each
 * element's float32 bits, or a power-of-two scale and a truncation where that is exact), so
 * every build (the AVX2 body or the portable one) gives the same bytes.
 *
 *   tp_pack       a block of 32-row strips in memory -> their tiles (one format, one layout)
 *   tp_convert    one tensor from a file descriptor to another: map a block of strips, pack
 *                 it, CRC-32 it while it is in cache, pwrite it where its tiles go; blocks are
 *                 shared by `threads` threads and the per-block CRCs combined in file order,
 *                 while one more thread reads the source ahead of them into the page cache
 *   tp_crc32      zlib's CRC-32 (PCLMULQDQ folding where the CPU has it, a table otherwise)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TP_X86 1
#else
#define TP_X86 0
#endif

enum { SRC_F32 = 0, SRC_F16 = 1, SRC_BF16 = 2 };
enum { FMT_F32 = 0, FMT_BF16 = 5, FMT_BFP8 = 6, FMT_BFP4 = 7 };
enum { TP_OK = 0, TP_NONFINITE = 1, TP_READ = 2, TP_WRITE = 3, TP_NOMEM = 4, TP_BADARG = 5 };

#define TILE 32
#define FACE 16

static uint32_t F16_BITS[1 << 16];          /* every F16 pattern's float32 bits, exactly */
static uint32_t CRC_TABLE[256];
static int HAVE_AVX2, HAVE_CLMUL, USE_SIMD = 1;
static pthread_once_t INIT = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) {
        uint32_t sign = (h & 0x8000u) << 16, em = h & 0x7FFFu, bits;
        if (em >= 0x7C00u) bits = (em << 13) + (224u << 23);         /* inf, NaN: exponent 255 */
        else if (em >= 0x400u) bits = (em << 13) + (112u << 23);     /* normal: rebias 15 -> 127 */
        else {                                                       /* subnormal: em * 2^-24, normal in fp32 */
            float v = (float)em * 0x1p-24f;
            memcpy(&bits, &v, 4);
        }
        F16_BITS[h] = sign | bits;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        CRC_TABLE[i] = c;
    }
#if TP_X86
    __builtin_cpu_init();
    HAVE_AVX2 = __builtin_cpu_supports("avx2");
    HAVE_CLMUL = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

static int tile_bytes(int fmt) {
    switch (fmt) {
    case FMT_F32: return 4096;
    case FMT_BF16: return 2048;
    case FMT_BFP8: return 64 + 1024;
    case FMT_BFP4: return 64 + 512;
    default: return 0;
    }
}

/* ---- one tile ------------------------------------------------------------------------------ */

/* Rows `r0`.. of the block (n_rows valid), columns c0..c0+31 (n_cols valid), as float32 bits in
 * t[32][32], zero-padded; `t` is in source orientation. Returns the largest |bits| seen. */
static inline __attribute__((always_inline)) uint32_t gather(
        uint32_t *restrict t, const void *src, int kind, int64_t stride, int64_t r0, int64_t n_rows,
        int64_t c0, int64_t n_cols) {
    uint32_t top = 0;
    int64_t nr = n_rows - r0 < TILE ? n_rows - r0 : TILE;
    int nc = n_cols - c0 < TILE ? (int)(n_cols - c0) : TILE;
    for (int i = 0; i < TILE; i++) {
        uint32_t *restrict row = t + i * TILE;
        if (i >= nr) { memset(row, 0, TILE * 4); continue; }
        int64_t base = (r0 + i) * stride + c0;
        if (kind == SRC_F16) {
            const uint16_t *p = (const uint16_t *)src + base;
            for (int j = 0; j < nc; j++) row[j] = F16_BITS[p[j]];
        } else if (kind == SRC_BF16) {
            const uint16_t *p = (const uint16_t *)src + base;
            for (int j = 0; j < nc; j++) row[j] = (uint32_t)p[j] << 16;
        } else {
            memcpy(row, (const uint32_t *)src + base, (size_t)nc * 4);
        }
        for (int j = nc; j < TILE; j++) row[j] = 0;
    }
    for (int k = 0; k < TILE * TILE; k++) {
        uint32_t a = t[k] & 0x7FFFFFFFu;
        top = a > top ? a : top;
    }
    return top;
}

static inline __attribute__((always_inline)) void transpose32(uint32_t *restrict dst, const uint32_t *restrict src) {
#if TP_X86
    for (int i = 0; i < TILE; i += 4)
        for (int j = 0; j < TILE; j += 4) {
            __m128 a = _mm_loadu_ps((const float *)src + (i + 0) * TILE + j);
            __m128 b = _mm_loadu_ps((const float *)src + (i + 1) * TILE + j);
            __m128 c = _mm_loadu_ps((const float *)src + (i + 2) * TILE + j);
            __m128 d = _mm_loadu_ps((const float *)src + (i + 3) * TILE + j);
            _MM_TRANSPOSE4_PS(a, b, c, d);
            _mm_storeu_ps((float *)dst + (j + 0) * TILE + i, a);
            _mm_storeu_ps((float *)dst + (j + 1) * TILE + i, b);
            _mm_storeu_ps((float *)dst + (j + 2) * TILE + i, c);
            _mm_storeu_ps((float *)dst + (j + 3) * TILE + i, d);
        }
#else
    for (int i = 0; i < TILE; i++)
        for (int j = 0; j < TILE; j++) dst[j * TILE + i] = src[i * TILE + j];
#endif
}

/* A tile in tile orientation (t[i][j] = element (i, j)) to its bytes. Face f, face row r is
 * t[16 (f / 2) + r][16 (f % 2) ..]: 16 adjacent words, so every format reads rows of 16. */
static inline __attribute__((always_inline)) void pack_tile(uint8_t *restrict out, const uint32_t *restrict t, int fmt) {
    int width = fmt == FMT_BFP8 ? 7 : 3, drop = 24 - width;
    uint32_t top = (1u << width) - 1, half = (1u << (drop - 1)) - 1;
    for (int fr = 0; fr < 64; fr++) {
        int f = fr >> 4, r = fr & 15;
        const uint32_t *restrict row = t + (16 * (f >> 1) + r) * TILE + 16 * (f & 1);
        if (fmt == FMT_F32) {
            memcpy(out + fr * 64, row, 64);
            continue;
        }
        if (fmt == FMT_BF16) {
            uint16_t h[FACE];
            for (int k = 0; k < FACE; k++) h[k] = (uint16_t)((row[k] + 0x7FFFu + ((row[k] >> 16) & 1u)) >> 16);
            memcpy(out + fr * 32, h, 32);
            continue;
        }
        uint32_t e = 0;
        for (int k = 0; k < FACE; k++) {
            uint32_t own = (row[k] & 0x7FFFFFFFu) >> 23;
            e = own > e ? own : e;
        }
        out[fr] = (uint8_t)e;
        uint8_t c[FACE];
        for (int k = 0; k < FACE; k++) {
            uint32_t b = row[k], own = (b & 0x7FFFFFFFu) >> 23, shift = e - own;
            shift = shift < 31 ? shift : 31;
            uint32_t sig = ((b & 0x7FFFFFu) | 0x800000u) >> shift;
            sig += half + ((sig >> drop) & 1u);
            uint32_t q = sig >> drop;
            q = q < top ? q : top;
            q = own ? q : 0;
            c[k] = (uint8_t)(q | (q ? (b >> 31) << width : 0));
        }
        if (fmt == FMT_BFP8) memcpy(out + 64 + fr * FACE, c, FACE);
        else
            for (int k = 0; k < FACE / 2; k++) out[64 + fr * 8 + k] = (uint8_t)(c[2 * k] | (c[2 * k + 1] << 4));
    }
}

static inline __attribute__((always_inline)) int pack_body(
        const void *src, int kind, int64_t stride, int64_t n_rows, int64_t n_cols, int64_t strips, int64_t ct,
        int fmt, int transposed, uint8_t *out) {
    uint32_t a[TILE * TILE] __attribute__((aligned(64))), b[TILE * TILE] __attribute__((aligned(64)));
    int tb = tile_bytes(fmt);
    for (int64_t s = 0; s < strips; s++)
        for (int64_t c = 0; c < ct; c++) {
            if (gather(a, src, kind, stride, s * TILE, n_rows, c * TILE, n_cols) >= 0x7F800000u) return TP_NONFINITE;
            if (transposed) transpose32(b, a);
            pack_tile(out + (s * ct + c) * tb, transposed ? b : a, fmt);
        }
    return TP_OK;
}

#if TP_X86
/* The same steps eight lanes at a time. F16 decodes with VCVTPH2PS, exact for every finite
 * pattern (subnormals included; a NaN comes out quieted, and is refused like any other). */
#define AVX2 __attribute__((target("avx2,f16c")))

AVX2 static inline uint32_t hmax_avx2(__m256i m) {
    m = _mm256_max_epu32(m, _mm256_permute2x128_si256(m, m, 1));
    m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0x4E));
    m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0xB1));
    return (uint32_t)_mm256_cvtsi256_si32(m);
}

AVX2 static uint32_t gather_avx2(uint32_t *restrict t, const void *src, int kind, int64_t stride, int64_t r0,
        int64_t n_rows, int64_t c0, int64_t n_cols) {
    if (n_rows - r0 < TILE || n_cols - c0 < TILE) return gather(t, src, kind, stride, r0, n_rows, c0, n_cols);
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i top = _mm256_setzero_si256();
    for (int i = 0; i < TILE; i++) {
        int64_t base = (r0 + i) * stride + c0;
        for (int q = 0; q < TILE; q += 8) {
            __m256i v;
            if (kind == SRC_F16)
                v = _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + base + q))));
            else if (kind == SRC_BF16)
                v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + base + q))), 16);
            else
                v = _mm256_loadu_si256((const __m256i *)((const uint32_t *)src + base + q));
            _mm256_storeu_si256((__m256i *)(t + i * TILE + q), v);
            top = _mm256_max_epu32(top, _mm256_and_si256(v, absm));
        }
    }
    return hmax_avx2(top);
}

/* 16 u32 lanes (each < 2^16) to 16 u16 in order */
AVX2 static inline __m256i pack16_avx2(__m256i a, __m256i b) {
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
}

AVX2 static inline __m256i codes_avx2(__m256i v, __m256i own, __m256i e, int width) {
    int drop = 24 - width;
    const __m256i zero = _mm256_setzero_si256();
    __m256i sig = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x800000));
    sig = _mm256_srlv_epi32(sig, _mm256_sub_epi32(e, own));        /* a count over 31 gives 0, as min(., 31) does */
    sig = _mm256_add_epi32(sig, _mm256_add_epi32(_mm256_set1_epi32((1 << (drop - 1)) - 1),
                                                  _mm256_and_si256(_mm256_srli_epi32(sig, drop), _mm256_set1_epi32(1))));
    __m256i q = _mm256_min_epu32(_mm256_srli_epi32(sig, drop), _mm256_set1_epi32((1 << width) - 1));
    q = _mm256_andnot_si256(_mm256_cmpeq_epi32(own, zero), q);
    __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(v, 31), width);
    return _mm256_or_si256(q, _mm256_andnot_si256(_mm256_cmpeq_epi32(q, zero), sign));
}

/* The same codes by float arithmetic, exact when the shared exponent is 0 or at least 24 (as
 * bfp._codes_fast): x * 2^(150 - E) is the significand shifted right by E minus its own
 * exponent, the shifted-out bits a fraction that truncation drops (a subnormal lands below 1);
 * scaled by 2^-drop it is rounded to the nearest integer, ties to even, all exact in float32 and
 * symmetric in the sign, so a code's sign is its value's (a value rounding to 0 has none). */
AVX2 static inline __m256i codes_scaled_avx2(__m256i v, __m256 scale, int width) {
    __m256 t = _mm256_round_ps(_mm256_mul_ps(_mm256_castsi256_ps(v), scale), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    t = _mm256_mul_ps(t, _mm256_set1_ps(width == 7 ? 0x1p-17f : 0x1p-21f));
    __m256i qs = _mm256_cvttps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i q = _mm256_min_epu32(_mm256_abs_epi32(qs), _mm256_set1_epi32((1 << width) - 1));
    return _mm256_or_si256(q, _mm256_slli_epi32(_mm256_srli_epi32(qs, 31), width));
}

AVX2 static void pack_tile_avx2(uint8_t *restrict out, const uint32_t *restrict t, int fmt) {
    if (fmt == FMT_F32) { pack_tile(out, t, fmt); return; }
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), one = _mm256_set1_epi32(1);
    int width = fmt == FMT_BFP8 ? 7 : 3;
    for (int fr = 0; fr < 64; fr++) {
        int f = fr >> 4, r = fr & 15;
        const uint32_t *row = t + (16 * (f >> 1) + r) * TILE + 16 * (f & 1);
        __m256i v0 = _mm256_loadu_si256((const __m256i *)row), v1 = _mm256_loadu_si256((const __m256i *)(row + 8));
        if (fmt == FMT_BF16) {
            const __m256i bias = _mm256_set1_epi32(0x7FFF);
            __m256i h0 = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(v0, bias),
                                           _mm256_and_si256(_mm256_srli_epi32(v0, 16), one)), 16);
            __m256i h1 = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(v1, bias),
                                           _mm256_and_si256(_mm256_srli_epi32(v1, 16), one)), 16);
            _mm256_storeu_si256((__m256i *)(out + fr * 32), pack16_avx2(h0, h1));
            continue;
        }
        __m256i o0 = _mm256_srli_epi32(_mm256_and_si256(v0, absm), 23), o1 = _mm256_srli_epi32(_mm256_and_si256(v1, absm), 23);
        uint32_t e = hmax_avx2(_mm256_max_epu32(o0, o1));
        out[fr] = (uint8_t)e;
        __m256i ev = _mm256_set1_epi32((int)e);
        __m256i w = pack16_avx2(codes_avx2(v0, o0, ev, width), codes_avx2(v1, o1, ev, width));
        __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        if (fmt == FMT_BFP8) {
            _mm_storeu_si128((__m128i *)(out + 64 + fr * FACE), bytes);
        } else {                               /* pairs of 4-bit codes: the even one low */
            __m128i nib = _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x000F)),
                                       _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00F0)));
            _mm_storel_epi64((__m128i *)(out + 64 + fr * 8), _mm_packus_epi16(nib, nib));
        }
    }
}

/* A 16 x 16 byte matrix transposed in registers (four rounds of interleaves). */
AVX2 static inline void transpose16x16(__m128i r[16]) {
    __m128i b[16], c[16], d[16];
    for (int k = 0; k < 8; k++) {
        b[2 * k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);
        b[2 * k + 1] = _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]);
    }
    for (int q = 0; q < 16; q += 4) {
        c[q + 0] = _mm_unpacklo_epi16(b[q + 0], b[q + 2]);
        c[q + 1] = _mm_unpackhi_epi16(b[q + 0], b[q + 2]);
        c[q + 2] = _mm_unpacklo_epi16(b[q + 1], b[q + 3]);
        c[q + 3] = _mm_unpackhi_epi16(b[q + 1], b[q + 3]);
    }
    for (int q = 0; q < 16; q += 8)
        for (int k = 0; k < 4; k++) {
            d[q + 2 * k] = _mm_unpacklo_epi32(c[q + k], c[q + k + 4]);
            d[q + 2 * k + 1] = _mm_unpackhi_epi32(c[q + k], c[q + k + 4]);
        }
    for (int m = 0; m < 8; m++) {
        r[2 * m] = _mm_unpacklo_epi64(d[m], d[m + 8]);
        r[2 * m + 1] = _mm_unpackhi_epi64(d[m], d[m + 8]);
    }
}

/* A whole MATMUL_NMAJOR block-float tile without transposing the values: a face row is 16
 * source rows of one column, so the shared exponents are a vertical maximum over 16 rows, the
 * codes are worked out in the source's orientation, and only the code bytes are transposed.
 * Returns 1 if the tile holds an infinity or a NaN. */
AVX2 static int pack_nmajor_avx2(uint8_t *restrict out, const void *src, int kind, int64_t stride, int64_t r0,
        int64_t c0, int fmt) {
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int width = fmt == FMT_BFP8 ? 7 : 3;
    uint32_t vals[FACE][TILE] __attribute__((aligned(32)));
    uint8_t codes[FACE][TILE] __attribute__((aligned(32)));
    __m256i nonfinite = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        __m256i e[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int jj = 0; jj < FACE; jj++) {
            int64_t base = (r0 + 16 * h + jj) * stride + c0;
            for (int g = 0; g < 4; g++) {
                __m256i v;
                if (kind == SRC_F16)
                    v = _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + base + 8 * g))));
                else if (kind == SRC_BF16)
                    v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + base + 8 * g))), 16);
                else
                    v = _mm256_loadu_si256((const __m256i *)((const uint32_t *)src + base + 8 * g));
                _mm256_store_si256((__m256i *)&vals[jj][8 * g], v);
                e[g] = _mm256_max_epu32(e[g], _mm256_srli_epi32(_mm256_and_si256(v, absm), 23));
            }
        }
        /* column 8g + l: face 2 (g / 2) + h, its row 8 (g % 2) + l; an exponent field of 255 is
         * an infinity or a NaN in that face row */
        __m256i eb = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(_mm256_packus_epi32(e[0], e[1]),
                                                                     _mm256_packus_epi32(e[2], e[3])), order);
        _mm_storeu_si128((__m128i *)(out + h * 16), _mm256_castsi256_si128(eb));
        _mm_storeu_si128((__m128i *)(out + (2 + h) * 16), _mm256_extracti128_si256(eb, 1));
        nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpeq_epi8(eb, _mm256_set1_epi8((char)0xFF)));
        __m256i tiny = _mm256_setzero_si256();
        __m256 scale[4];
        for (int g = 0; g < 4; g++) {         /* 0 < E < 24 anywhere: the integer steps for this half */
            tiny = _mm256_or_si256(tiny, _mm256_andnot_si256(_mm256_cmpeq_epi32(e[g], _mm256_setzero_si256()),
                                                             _mm256_cmpgt_epi32(_mm256_set1_epi32(24), e[g])));
            scale[g] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(277),
                                                             _mm256_max_epu32(e[g], _mm256_set1_epi32(24))), 23));
        }
        int exact = !_mm256_testz_si256(tiny, tiny);
        for (int jj = 0; jj < FACE; jj++) {
            __m256i c[4];
            for (int g = 0; g < 4; g++) {
                __m256i v = _mm256_load_si256((const __m256i *)&vals[jj][8 * g]);
                c[g] = exact ? codes_avx2(v, _mm256_srli_epi32(_mm256_and_si256(v, absm), 23), e[g], width)
                             : codes_scaled_avx2(v, scale[g], width);
            }
            __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3]));
            _mm256_store_si256((__m256i *)codes[jj], _mm256_permutevar8x32_epi32(b, order));
        }
        for (int q = 0; q < 2; q++) {         /* columns 16q.. are face 2q + h; column k is its row k */
            __m128i r[16];
            for (int jj = 0; jj < FACE; jj++) r[jj] = _mm_load_si128((const __m128i *)&codes[jj][16 * q]);
            transpose16x16(r);
            int f = 2 * q + h;
            for (int k = 0; k < FACE; k++) {
                if (fmt == FMT_BFP8) {
                    _mm_storeu_si128((__m128i *)(out + 64 + f * 256 + k * 16), r[k]);
                } else {
                    __m128i nib = _mm_or_si128(_mm_and_si128(r[k], _mm_set1_epi16(0x000F)),
                                               _mm_and_si128(_mm_srli_epi16(r[k], 4), _mm_set1_epi16(0x00F0)));
                    _mm_storel_epi64((__m128i *)(out + 64 + f * 128 + k * 8), _mm_packus_epi16(nib, nib));
                }
            }
        }
    }
    return !_mm256_testz_si256(nonfinite, nonfinite);
}

AVX2 static int pack_avx2(const void *src, int kind, int64_t stride, int64_t n_rows,
        int64_t n_cols, int64_t strips, int64_t ct, int fmt, int transposed, uint8_t *out) {
    uint32_t a[TILE * TILE] __attribute__((aligned(64))), b[TILE * TILE] __attribute__((aligned(64)));
    int tb = tile_bytes(fmt);
    for (int64_t s = 0; s < strips; s++)
        for (int64_t c = 0; c < ct; c++) {
            if (transposed && (fmt == FMT_BFP8 || fmt == FMT_BFP4) && n_rows - s * TILE >= TILE && n_cols - c * TILE >= TILE) {
                if (pack_nmajor_avx2(out + (s * ct + c) * tb, src, kind, stride, s * TILE, c * TILE, fmt))
                    return TP_NONFINITE;
                continue;
            }
            if (gather_avx2(a, src, kind, stride, s * TILE, n_rows, c * TILE, n_cols) >= 0x7F800000u) return TP_NONFINITE;
            if (transposed) transpose32(b, a);
            pack_tile_avx2(out + (s * ct + c) * tb, transposed ? b : a, fmt);
        }
    return TP_OK;
}
#endif

static int pack_portable(const void *src, int kind, int64_t stride, int64_t n_rows, int64_t n_cols,
        int64_t strips, int64_t ct, int fmt, int transposed, uint8_t *out) {
    return pack_body(src, kind, stride, n_rows, n_cols, strips, ct, fmt, transposed, out);
}

static int pack(const void *src, int kind, int64_t stride, int64_t n_rows, int64_t n_cols, int64_t strips,
        int64_t ct, int fmt, int transposed, uint8_t *out) {
#if TP_X86
    if (HAVE_AVX2 && USE_SIMD) return pack_avx2(src, kind, stride, n_rows, n_cols, strips, ct, fmt, transposed, out);
#endif
    return pack_portable(src, kind, stride, n_rows, n_cols, strips, ct, fmt, transposed, out);
}

/* `strips` strips of 32 rows (n_rows of them present, each `stride` elements apart, n_cols
 * values used, the rest zero) to strips * ct tiles at `out`. TP_NONFINITE if any value is an
 * infinity or a NaN (the caller then names it). */
int tp_pack(const void *src, int kind, int64_t stride, int64_t n_rows, int64_t n_cols, int64_t strips,
        int64_t ct, int fmt, int transposed, uint8_t *out) {
    pthread_once(&INIT, init_tables);
    if (!tile_bytes(fmt) || kind < 0 || kind > 2 || n_cols > ct * TILE || n_rows > strips * TILE) return TP_BADARG;
    return pack(src, kind, stride, n_rows, n_cols, strips, ct, fmt, transposed, out);
}

/* 0: the portable body even where AVX2 is there (tests compare both); 1: the fastest. */
void tp_set_simd(int on) { pthread_once(&INIT, init_tables); USE_SIMD = on; }

/* ---- CRC-32 (zlib's: reflected 0xEDB88320, inverted in and out) ------------------------------- */

static uint32_t crc_table(uint32_t crc, const uint8_t *p, int64_t n) {
    while (n--) crc = CRC_TABLE[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if TP_X86
/* Folding by four 128-bit lanes with carry-less multiplies, then a Barrett reduction (Intel,
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"; the constants are zlib's
 * crc32_simd for this polynomial). `n` is at least 64 and a multiple of 16; crc not inverted. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_clmul(uint32_t crc, const uint8_t *buf, int64_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i mask = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    n -= 64;
    while (n >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        n -= 64;
    }
    x0 = k3k4;                                   /* four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x4), x5);
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
        buf += 16;
        n -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);     /* 128 bits to 64 */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x00), x2);
    x0 = poly;                                   /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, mask);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, mask);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_run(uint32_t crc, const uint8_t *p, int64_t n, int fast) {
    crc = ~crc;
#if TP_X86
    if (fast && HAVE_CLMUL && n >= 64) {
        int64_t body = n & ~(int64_t)15;
        crc = crc_clmul(crc, p, body);
        p += body;
        n -= body;
    }
#endif
    return ~crc_table(crc, p, n);
}

/* zlib.crc32(buf, crc); `fast` 0 forces the table (tests compare both). */
uint32_t tp_crc32(uint32_t crc, const uint8_t *p, int64_t n, int fast) {
    pthread_once(&INIT, init_tables);
    return crc32_run(crc, p, n, fast);
}

/* a * b modulo the CRC polynomial, bit-reflected (zlib's multmodp) */
static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ 0xEDB88320u : b >> 1;
    }
    return p;
}

/* The CRC of A then B from crc(A), crc(B) and B's length (zlib's crc32_combine). */
uint32_t tp_crc32_combine(uint32_t a, uint32_t b, int64_t len_b) {
    uint32_t x = 1u << 30, p = 1u << 31;         /* x^1 and x^0 */
    for (uint64_t n = (uint64_t)len_b * 8; n; n >>= 1) {
        if (n & 1) p = multmodp(x, p);
        x = multmodp(x, x);
    }
    return multmodp(p, a) ^ b;
}

/* ---- one tensor, file to file ---------------------------------------------------------------- */

typedef struct {
    int fd_in, kind, fmt, transposed, fd_out;
    int64_t in_off, rows, cols, matrices, out_off, block_strips;
    int64_t strips, ct, esize, blocks_per_matrix, nblocks, tb;
    uint32_t *crcs;
    int64_t *lens;
    int64_t next, first_bad;                     /* shared, atomic */
    int status, err;                             /* the first fatal error (under lock) */
    pthread_mutex_t lock;
} job_t;

static void fail(job_t *j, int status, int err) {
    pthread_mutex_lock(&j->lock);
    if (!j->status) { j->status = status; j->err = err; }
    pthread_mutex_unlock(&j->lock);
}

static int full_pwrite(int fd, const uint8_t *buf, int64_t n, int64_t off, int *err) {
    while (n > 0) {
        ssize_t put = pwrite(fd, buf, (size_t)n, off);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) { *err = put < 0 ? errno : ENOSPC; return -1; }
        buf += put; n -= put; off += put;
    }
    return 0;
}

#define READ_AHEAD ((int64_t)64 << 20)
#define PREFETCH_STEP ((int64_t)4 << 20)

typedef struct { int fd; int64_t from, to; } prefetch_t;

static void *prefetch(void *arg) {
    prefetch_t *p = arg;
    for (int64_t off = p->from; off < p->to; off += PREFETCH_STEP)
        if (readahead(p->fd, off, (size_t)PREFETCH_STEP)) break;
    return NULL;
}

static void *worker(void *arg) {
    job_t *j = arg;
    int64_t row_bytes = j->cols * j->esize, page = sysconf(_SC_PAGESIZE);
    uint8_t *out = malloc((size_t)(j->block_strips * j->ct * j->tb));
    if (!out) { fail(j, TP_NOMEM, ENOMEM); goto done; }
    for (;;) {
        int64_t b = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (b >= j->nblocks || b > __atomic_load_n(&j->first_bad, __ATOMIC_RELAXED)) break;
        if (__atomic_load_n(&j->status, __ATOMIC_RELAXED)) break;
        int64_t m = b / j->blocks_per_matrix, s0 = (b % j->blocks_per_matrix) * j->block_strips;
        int64_t strips = j->strips - s0 < j->block_strips ? j->strips - s0 : j->block_strips;
        int64_t n_rows = j->rows - s0 * TILE < strips * TILE ? j->rows - s0 * TILE : strips * TILE;
        /* The block's source rows, mapped (no copy) just for this block: the reader's resident
         * memory stays at a block per thread, and the page cache pages are only mapped. */
        int err = 0;
        int64_t at = j->in_off + (m * j->rows + s0 * TILE) * row_bytes, start = at / page * page;
        size_t span = (size_t)(at + n_rows * row_bytes - start);
        uint8_t *map = mmap(NULL, span, PROT_READ, MAP_SHARED | MAP_POPULATE, j->fd_in, start);
        if (map == MAP_FAILED) {
            fail(j, TP_READ, errno);
            break;
        }
        int packed = pack(map + (at - start), j->kind, j->cols, n_rows, j->cols, strips, j->ct, j->fmt, j->transposed, out);
        munmap(map, span);
        if (packed != TP_OK) {
            int64_t seen = __atomic_load_n(&j->first_bad, __ATOMIC_RELAXED);
            while (b < seen && !__atomic_compare_exchange_n(&j->first_bad, &seen, b, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
            continue;
        }
        int64_t n = strips * j->ct * j->tb;
        j->crcs[b] = crc32_run(0, out, n, 1);
        j->lens[b] = n;
        if (full_pwrite(j->fd_out, out, n, j->out_off + (m * j->strips + s0) * j->ct * j->tb, &err)) {
            fail(j, TP_WRITE, err);
            break;
        }
    }
done:
    free(out);
    return NULL;
}

/* Convert one 2-D (or stacked) tensor: `matrices` matrices of rows x cols source values (kind)
 * at in_off of fd_in, to their tiles at out_off of fd_out, `block_strips` strips a block.
 * Returns TP_OK with *crc (the CRC-32 of all the tensor's bytes), TP_NONFINITE with *bad_row
 * (the first source row of the first block holding an infinity or a NaN), TP_READ (short read:
 * *err 0, or an errno), TP_WRITE (*err: errno), TP_NOMEM, TP_BADARG. */
int tp_convert(int fd_in, int64_t in_off, int kind, int64_t rows, int64_t cols, int64_t matrices, int fmt,
        int transposed, int fd_out, int64_t out_off, int64_t block_strips, int threads,
        uint32_t *crc, int64_t *bad_row, int *err) {
    pthread_once(&INIT, init_tables);
    if (!tile_bytes(fmt) || kind < 0 || kind > 2 || rows < 1 || cols < 1 || matrices < 1 || block_strips < 1)
        return TP_BADARG;
    job_t j = {.fd_in = fd_in, .kind = kind, .fmt = fmt, .transposed = transposed, .fd_out = fd_out,
               .in_off = in_off, .rows = rows, .cols = cols, .matrices = matrices, .out_off = out_off};
    j.strips = (rows + TILE - 1) / TILE;
    j.ct = (cols + TILE - 1) / TILE;
    j.block_strips = block_strips < j.strips ? block_strips : j.strips;
    j.esize = kind == SRC_F32 ? 4 : 2;
    j.tb = tile_bytes(fmt);
    j.blocks_per_matrix = (j.strips + j.block_strips - 1) / j.block_strips;
    j.nblocks = j.blocks_per_matrix * matrices;
    j.first_bad = INT64_MAX;
    j.crcs = calloc((size_t)j.nblocks, sizeof *j.crcs);
    j.lens = calloc((size_t)j.nblocks, sizeof *j.lens);
    pthread_mutex_init(&j.lock, NULL);
    if (!j.crcs || !j.lens) { j.status = TP_NOMEM; j.err = ENOMEM; goto out; }
    struct stat st;                              /* mapping past the end would be SIGBUS, not an error */
    if (fstat(fd_in, &st)) { j.status = TP_READ; j.err = errno; goto out; }
    if (st.st_size < in_off + matrices * rows * cols * j.esize) { j.status = TP_READ; j.err = 0; goto out; }
    /* Blocks are mapped with MAP_POPULATE, which reads a page cache miss synchronously, block by
     * block: a third thread reads the tensor, and READ_AHEAD bytes past it (a GGUF's tensors lie
     * in order), into the page cache ahead of the packers, so a cold file streams from the disk
     * while they work. On a warm file it finds every page present and costs nothing. */
    prefetch_t pf = {.fd = fd_in, .from = in_off, .to = in_off + matrices * rows * cols * j.esize + READ_AHEAD};
    pthread_t pf_tid;
    int pf_started = pthread_create(&pf_tid, NULL, prefetch, &pf) == 0;
    if (threads < 1) threads = 1;
    if (threads > 16) threads = 16;
    pthread_t tid[16];
    int started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&tid[started], NULL, worker, &j)) break;
    worker(&j);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    if (pf_started) pthread_join(pf_tid, NULL);
    if (!j.status && j.first_bad != INT64_MAX) {
        j.status = TP_NONFINITE;
        *bad_row = (j.first_bad / j.blocks_per_matrix) * rows + (j.first_bad % j.blocks_per_matrix) * j.block_strips * TILE;
    }
    if (!j.status) {
        uint32_t c = 0;
        for (int64_t b = 0; b < j.nblocks; b++) c = tp_crc32_combine(c, j.crcs[b], j.lens[b]);
        *crc = c;
    }
out:
    *err = j.err;
    free(j.crcs);
    free(j.lens);
    pthread_mutex_destroy(&j.lock);
    return j.status;
}
