/* Attention within short rows on the CPU: as2hub's unpadded ranking pass (inference/small_attention.py builds this
 * file with the machine's C compiler and -march=native, and calls it through ctypes).
 *
 * A question's pairs are packed one after the other: pair p has lengths[p] tokens, its queries attend to its own keys
 * only. For each pair and head the keys are transposed to (head size, keys) in fp32, then blocks of queries get their
 * scores (16 keys per vector with AVX-512, 8 with AVX2), a softmax with the row's maximum subtracted, and the weighted
 * sum of the values, all in fp32 vectors (GCC/Clang vector extensions sized to the target's registers).
 * PyTorch's CPU attention kernel costs about 12 us per (pair, head) at WikiQA's mean pair length (38 tokens) whatever
 * the length, the work itself is about 1 us (inference/BACKENDS.md).
 *
 * Entry points (one per element type; return 0, 1 when out of memory, 2 when the head size is not a multiple of 16):
 *   int as2hub_attend_f32 / as2hub_attend_bf16(q, q_stride, k, v, kv_stride, out, out_stride, lengths, pairs, heads,
 *                                              head_size, scale, first_only)
 * q, k, v, out: row-major with the given row strides (elements), each row heads * head_size wide, heads side by side.
 * first_only = 0: every token's query (q row i for token i), out row i. first_only = 1: q row p holds pair p's first
 * token's query, out row p gets its context.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* LANES floats per vector: one AVX-512 register where the compiler targets AVX-512, else one AVX2 register (wider
 * generic vectors than the target's registers are lowered element by element in places: 3x slower than PyTorch). */
#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
typedef float vecf __attribute__((vector_size(LANES * 4)));
typedef int32_t veci __attribute__((vector_size(LANES * 4)));

#if defined(__clang__)
#define SHUFFLE(x, ...) __builtin_shufflevector((x), (x), __VA_ARGS__)
#define SHUFFLE2(a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define SHUFFLE(x, ...) __builtin_shuffle((x), (veci){__VA_ARGS__})
#define SHUFFLE2(a, b, ...) __builtin_shuffle((a), (b), (veci){__VA_ARGS__})
#endif

#define BLOCK 8 /* queries per block: 8 independent sums per key vector */

static inline vecf load_v(const float *p) { vecf r; memcpy(&r, p, sizeof r); return r; }
static inline void store_v(float *p, vecf x) { memcpy(p, &x, sizeof x); }
static inline vecf select_v(veci mask, vecf a, vecf b) { return (vecf)(((veci)a & mask) | ((veci)b & ~mask)); }
static inline vecf larger_v(vecf a, vecf b) { return select_v(a > b, a, b); }

/* n rounded up to whole vectors */
static inline int64_t lanes_up(int64_t n) { return (n + LANES - 1) / LANES * LANES; }

static inline float lanes_max(vecf x) {
#if LANES == 16
    x = larger_v(x, SHUFFLE(x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    x = larger_v(x, SHUFFLE(x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    x = larger_v(x, SHUFFLE(x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    x = larger_v(x, SHUFFLE(x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
#else
    x = larger_v(x, SHUFFLE(x, 4, 5, 6, 7, 0, 1, 2, 3));
    x = larger_v(x, SHUFFLE(x, 2, 3, 0, 1, 6, 7, 4, 5));
    x = larger_v(x, SHUFFLE(x, 1, 0, 3, 2, 5, 4, 7, 6));
#endif
    return x[0];
}

/* The transpose of a LANES x LANES tile held as LANES vectors (rows), in place. Stage S (1, 2, 4, 8) pairs rows i and
 * i + S (i without bit S) and swaps bit S of the row index with bit S of the lane index: lanes with that bit set come
 * from the partner row (two-input shuffles, indices >= LANES name the second vector); after every stage each element
 * (i, k) sits at (k, i). A scalar gather of the keys by column cost about a sixth of the kernel's time (perf,
 * AMX Xeon, 2026-11-29). */
#if LANES == 16
#define T_LOW_1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define T_HIGH_1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define T_LOW_2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define T_HIGH_2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define T_LOW_4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define T_HIGH_4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define T_LOW_8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define T_HIGH_8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#else
#define T_LOW_1 0, 8, 2, 10, 4, 12, 6, 14
#define T_HIGH_1 1, 9, 3, 11, 5, 13, 7, 15
#define T_LOW_2 0, 1, 8, 9, 4, 5, 12, 13
#define T_HIGH_2 2, 3, 10, 11, 6, 7, 14, 15
#define T_LOW_4 0, 1, 2, 3, 8, 9, 10, 11
#define T_HIGH_4 4, 5, 6, 7, 12, 13, 14, 15
#endif
#define T_STAGE(rows, S, LOW, HIGH)                                                                                    \
    for (int pair = 0; pair < LANES / 2; pair++) {                                                                     \
        const int i = ((pair & ~(S - 1)) << 1) | (pair & (S - 1)); /* the pair's row without bit S */                  \
        const vecf a = rows[i], b = rows[i + S];                                                                       \
        rows[i] = SHUFFLE2(a, b, LOW);                                                                                 \
        rows[i + S] = SHUFFLE2(a, b, HIGH);                                                                            \
    }

static inline void transpose_v(vecf *rows) {
    T_STAGE(rows, 1, T_LOW_1, T_HIGH_1)
    T_STAGE(rows, 2, T_LOW_2, T_HIGH_2)
    T_STAGE(rows, 4, T_LOW_4, T_HIGH_4)
#if LANES == 16
    T_STAGE(rows, 8, T_LOW_8, T_HIGH_8)
#endif
}

static inline float lanes_sum(vecf x) {
#if LANES == 16
    x += SHUFFLE(x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    x += SHUFFLE(x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    x += SHUFFLE(x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    x += SHUFFLE(x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
#else
    x += SHUFFLE(x, 4, 5, 6, 7, 0, 1, 2, 3);
    x += SHUFFLE(x, 2, 3, 0, 1, 6, 7, 4, 5);
    x += SHUFFLE(x, 1, 0, 3, 2, 5, 4, 7, 6);
#endif
    return x[0];
}

/* e^x lane by lane for x <= 0 (scores minus their row's maximum): x log2(e) = n + f with n an integer and |f| <= 1/2,
 * 2^f by its degree-6 Taylor polynomial (relative error below 2e-7), 2^n through the exponent bits; below -87 (where
 * e^x is under float's normal range) it returns e^-87. */
static inline vecf exp_nonpositive(vecf x) {
    const vecf lowest = (vecf){0} - 87.0f;
    x = select_v(x < lowest, lowest, x);
    const vecf t = x * 1.44269504088896341f;
    const vecf n = (t + 12582912.0f) - 12582912.0f; /* round to the nearest integer: add and remove 1.5 * 2^23 */
    const vecf f = t - n;
    vecf p = f * 1.5403530e-4f + 1.3333558e-3f;
    p = p * f + 9.6181291e-3f;
    p = p * f + 5.5504109e-2f;
    p = p * f + 2.4022651e-1f;
    p = p * f + 6.9314718e-1f;
    p = p * f + 1.0f;
    const veci bits = (__builtin_convertvector(n, veci) + 127) << 23;
    return p * (vecf)bits;
}

/* queries qb .. qb + block - 1 of one head: queries (rows of stride qs, scaled), keys_t (d, Lp) and values (rows of
 * stride vs) zero past the L keys; scores in probs (block, Lp); context rows of stride vs */
static inline __attribute__((always_inline)) void attend_block(const float *queries, int64_t qs, const float *keys_t,
                                                               const float *values, int64_t vs, int64_t L, int64_t Lp,
                                                               int64_t D, float *probs, float *context,
                                                               const int block) {
#if LANES == 16
    const vecf lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#else
    const vecf lane = {0, 1, 2, 3, 4, 5, 6, 7};
#endif
    const veci real_in_last = lane < (float)(L - (Lp - LANES)); /* the last chunk of LANES keys: which are real */
    const vecf minus_inf = (vecf){0} - INFINITY;
    vecf top[BLOCK];
    for (int r = 0; r < block; r++) top[r] = minus_inf;
    for (int64_t c = 0; c < Lp; c += LANES) {
        vecf acc[BLOCK];
        for (int r = 0; r < block; r++) acc[r] = (vecf){0};
        for (int64_t d = 0; d < D; d++) {
            const vecf key = load_v(keys_t + d * Lp + c);
            for (int r = 0; r < block; r++) acc[r] += queries[r * qs + d] * key;
        }
        for (int r = 0; r < block; r++) {
            if (c + LANES == Lp) acc[r] = select_v(real_in_last, acc[r], minus_inf);
            top[r] = larger_v(acc[r], top[r]);
            store_v(probs + r * Lp + c, acc[r]);
        }
    }
    float inverse[BLOCK];
    for (int r = 0; r < block; r++) {
        float *row = probs + r * Lp;
        const float most = lanes_max(top[r]);
        vecf total = (vecf){0};
        for (int64_t c = 0; c < Lp; c += LANES) {
            vecf e = exp_nonpositive(load_v(row + c) - most);
            if (c + LANES == Lp) e = select_v(real_in_last, e, (vecf){0});
            total += e;
            store_v(row + c, e);
        }
        inverse[r] = 1.0f / lanes_sum(total);
    }
    for (int64_t dc = 0; dc < D; dc += LANES) {
        vecf acc[BLOCK];
        for (int r = 0; r < block; r++) acc[r] = (vecf){0};
        for (int64_t j = 0; j < L; j++) {
            const vecf value = load_v(values + j * vs + dc);
            for (int r = 0; r < block; r++) acc[r] += probs[r * Lp + j] * value;
        }
        for (int r = 0; r < block; r++) store_v(context + r * vs + dc, acc[r] * inverse[r]);
    }
}

static inline float from_f32(float x) { return x; }
static inline float to_f32(float x) { return x; }
static inline float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t to_bf16(float f) { /* round to nearest even, as torch's conversion */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#define ATTEND(NAME, T, LOAD, STORE)                                                                                 \
    int NAME(const T *q, int64_t q_stride, const T *k, const T *v, int64_t kv_stride, T *out, int64_t out_stride,    \
             const int64_t *lengths, int64_t pairs, int64_t heads, int64_t head_size, float scale, int first_only) { \
        const int64_t D = head_size, W = heads * head_size;                                                          \
        if (D % 16) return 2;                                                                                        \
        int64_t longest = 1;                                                                                         \
        for (int64_t p = 0; p < pairs; p++) longest = lengths[p] > longest ? lengths[p] : longest;                   \
        const int64_t most = lanes_up(longest);                                                                      \
        float *keys = malloc(sizeof(float) * (size_t)(W * most));                                                    \
        float *keys_t = malloc(sizeof(float) * (size_t)(D * most));                                                  \
        float *values = malloc(sizeof(float) * (size_t)(W * most));                                                  \
        float *queries = malloc(sizeof(float) * (size_t)(W * most));                                                 \
        float *context = malloc(sizeof(float) * (size_t)(W * most));                                                 \
        float *probs = malloc(sizeof(float) * (size_t)(BLOCK * most));                                               \
        int status = 0;                                                                                              \
        if (!keys || !keys_t || !values || !queries || !context || !probs) {                                         \
            status = 1;                                                                                              \
            goto done;                                                                                               \
        }                                                                                                            \
        int64_t start = 0;                                                                                           \
        for (int64_t p = 0; p < pairs; p++) {                                                                        \
            const int64_t L = lengths[p], Lp = lanes_up(L);                                                          \
            const int64_t rows = first_only ? 1 : L, padded_rows = (rows + BLOCK - 1) / BLOCK * BLOCK;               \
            for (int64_t j = 0; j < L; j++) {                                                                        \
                const T *kr = k + (start + j) * kv_stride, *vr = v + (start + j) * kv_stride;                        \
                float *kf = keys + j * W, *vf = values + j * W;                                                      \
                for (int64_t c = 0; c < W; c++) kf[c] = LOAD(kr[c]);                                                 \
                for (int64_t c = 0; c < W; c++) vf[c] = LOAD(vr[c]);                                                 \
            }                                                                                                        \
            memset(keys + L * W, 0, sizeof(float) * (size_t)((Lp - L) * W)); /* the last tile's rows past the keys */ \
            for (int64_t i = 0; i < (first_only ? 1 : padded_rows); i++) {                                           \
                float *qf = queries + i * W;                                                                         \
                if (i < rows) {                                                                                      \
                    const T *qr = q + (first_only ? p : start + i) * q_stride;                                       \
                    for (int64_t c = 0; c < W; c++) qf[c] = LOAD(qr[c]) * scale;                                     \
                } else {                                                                                             \
                    for (int64_t c = 0; c < W; c++) qf[c] = 0.0f;                                                    \
                }                                                                                                    \
            }                                                                                                        \
            for (int64_t h = 0; h < heads; h++) {                                                                    \
                for (int64_t j0 = 0; j0 < Lp; j0 += LANES) { /* keys_t (D, Lp): the head's keys, tile by tile */      \
                    for (int64_t d0 = 0; d0 < D; d0 += LANES) {                                                      \
                        vecf tile[LANES];                                                                            \
                        for (int i = 0; i < LANES; i++) tile[i] = load_v(keys + (j0 + i) * W + h * D + d0);          \
                        transpose_v(tile);                                                                           \
                        for (int i = 0; i < LANES; i++) store_v(keys_t + (d0 + i) * Lp + j0, tile[i]);               \
                    }                                                                                                \
                }                                                                                                    \
                if (first_only) {                                                                                    \
                    attend_block(queries + h * D, W, keys_t, values + h * D, W, L, Lp, D, probs, context + h * D, 1); \
                } else {                                                                                             \
                    for (int64_t i = 0; i < padded_rows; i += BLOCK)                                                 \
                        attend_block(queries + i * W + h * D, W, keys_t, values + h * D, W, L, Lp, D, probs,         \
                                     context + i * W + h * D, BLOCK);                                                \
                }                                                                                                    \
            }                                                                                                        \
            for (int64_t i = 0; i < rows; i++) {                                                                     \
                T *orow = out + (first_only ? p : start + i) * out_stride;                                           \
                const float *cf = context + i * W;                                                                   \
                for (int64_t c = 0; c < W; c++) orow[c] = STORE(cf[c]);                                              \
            }                                                                                                        \
            start += L;                                                                                              \
        }                                                                                                            \
    done:                                                                                                            \
        free(keys);                                                                                                  \
        free(keys_t);                                                                                                \
        free(values);                                                                                                \
        free(queries);                                                                                               \
        free(context);                                                                                               \
        free(probs);                                                                                                 \
        return status;                                                                                               \
    }

ATTEND(as2hub_attend_f32, float, from_f32, to_f32)
ATTEND(as2hub_attend_bf16, uint16_t, from_bf16, to_bf16)
