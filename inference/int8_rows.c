/* The steps between the int8 products of the torch-int8 backend's unpadded pass (inference/int8.py builds this file
 * with the machine's C compiler and -march=native through inference/small_attention.py's build, and calls it through
 * ctypes, with one torch thread).
 *
 * Input: the int32 products of a (rows, k) int8 matrix, each row quantized over its own range (scale s, zero point z,
 * codes shifted by -128), with 7-bit int8 weights (per output column: scale w, sum of the column's weights u). Each
 * output is rescaled to fp32, value = (total + (128 - z) * u) * (s * w) + bias, then
 * - as2hub_requantize (between the two feed-forward products): through GELU;
 * - as2hub_rescale_norm (after the attention output's and the second feed-forward product): plus the residual, through
 *   the layer norm, written out in fp32 (the next residual);
 * and each row is quantized again to 8 bits over its own range, which includes 0 (int8.py's quantize_tokens), after
 * multiplying column c by smooth[c] where smooth is not NULL (the next product's smoothing, int8.py's Int8Linear) and,
 * where rotate > 0, transforming each block of rotate columns (a power of two, 16 .. 128) by the Hadamard matrix of its
 * size, unnormalized (int8.py's hadamard: the next product's weights hold the inverse rotation):
 *   low = min(row, 0), high = max(row, 0), scale = max((high - low) / 255, 1e-12), zero = rint(-low / scale),
 *   code = clamp(rint(value / scale) + zero, 0, 255) - 128.
 * One row at a time, its values held in a row buffer (L1), so the row is read once from the product and its codes
 * written once: inductor's fused kernels made three or four passes over the (rows, 1536) or (rows, 384) matrix, and
 * its GELU (erf) took 60% of the feed-forward step's time.
 *
 * GELU(x) = x / 2 * (1 + erf(x / sqrt(2))), erf from a rational function fitted for this file (least squares on
 * Chebyshev nodes, reweighted): erf(t) ~ t * P(t^2) / Q(t^2) for |t| <= 4 (beyond, +-1 to float precision), P of
 * degree 6 and Q of degree 4; largest error 5.8e-8 in exact arithmetic, 4.4e-7 evaluated in float (PyTorch's
 * vectorized erf: 1.5e-7). An 8-bit step of a GELU row is about 1e-2.
 *
 * Entry points (return 0, 1 when out of memory, 2 for a rotate they cannot do):
 *   int as2hub_quantize(values, rows, cols, smooth, rotate, codes, out_scale, out_zero): fp32 rows quantized as above
 *                       (int8.py's quantize_tokens); smooth may be NULL, rotate 0.
 *   int as2hub_requantize(total, rows, cols, row_scale, row_zero, col_sum, col_scale, bias, gelu, smooth, rotate,
 *                         codes, out_scale, out_zero): bias and smooth may be NULL; gelu = 0 skips GELU; rotate = 0
 *                         skips the rotation.
 *   int as2hub_rescale_norm(total, rows, cols, row_scale, row_zero, col_sum, col_scale, bias, residual, gamma, beta,
 *                           eps, smooth, rotate, out, codes, out_scale, out_zero): smooth may be NULL, codes too (no
 *                           quantization); out holds the states themselves, not multiplied by smooth nor rotated.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* LANES floats per vector: one AVX-512 register where the compiler targets AVX-512, else one AVX2 register */
#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
typedef float vecf __attribute__((vector_size(LANES * 4)));
typedef int32_t veci __attribute__((vector_size(LANES * 4)));

static const float ERF_P[7] = {
    1.1283787488937378e+00f, 2.1377950906753540e-01f, 5.2411314100027084e-02f, 4.2836773209273815e-03f,
    1.5512481331825256e-04f, -1.9850717762892600e-06f, 1.9160303565968206e-08f,
};
static const float ERF_Q[5] = {
    1.0000000000000000e+00f, 5.2278506755828857e-01f, 1.2073050439357758e-01f, 1.5535375103354454e-02f,
    1.0951043805107474e-03f,
};

static inline vecf splat(float x) { return (vecf){} + x; }
static inline vecf select_v(veci mask, vecf a, vecf b) { return (vecf)(((veci)a & mask) | ((veci)b & ~mask)); }

/* the same function on LANES values (vector extensions: GCC and Clang) and on one (the row's tail) */
static inline vecf gelu_v(vecf x) {
    vecf t = x * splat(0.70710678118654752f);
    t = select_v(t > splat(4.0f), splat(4.0f), t);
    t = select_v(t < splat(-4.0f), splat(-4.0f), t);
    const vecf u = t * t;
    vecf p = splat(ERF_P[6]);
    for (int i = 5; i >= 0; i--) p = p * u + splat(ERF_P[i]);
    vecf q = splat(ERF_Q[4]);
    for (int i = 3; i >= 0; i--) q = q * u + splat(ERF_Q[i]);
    return splat(0.5f) * x * (splat(1.0f) + t * p / q);
}

static inline float gelu(float x) {
    float t = x * 0.70710678118654752f;
    t = t > 4.0f ? 4.0f : (t < -4.0f ? -4.0f : t);
    const float u = t * t;
    float p = ERF_P[6];
    for (int i = 5; i >= 0; i--) p = p * u + ERF_P[i];
    float q = ERF_Q[4];
    for (int i = 3; i >= 0; i--) q = q * u + ERF_Q[i];
    return 0.5f * x * (1.0f + t * p / q);
}

static inline vecf load_f(const float *p) { vecf r; memcpy(&r, p, sizeof r); return r; }
static inline veci load_i(const int32_t *p) { veci r; memcpy(&r, p, sizeof r); return r; }

/* the smallest of low_v's lanes and 0, and the largest of high_v's and 0 */
static inline void lanes_range(vecf low_v, vecf high_v, float *low, float *high) {
    *low = 0.0f;
    *high = 0.0f;
    for (int i = 0; i < LANES; i++) {
        *low = low_v[i] < *low ? low_v[i] : *low;
        *high = high_v[i] > *high ? high_v[i] : *high;
    }
}

/* Each block of `block` values of buffer (cols of them) times the Hadamard matrix of that size (Sylvester's, entries
 * +-1), in place: log2(block) butterfly stages. 16 values per vector whatever the lanes (GCC and Clang split a wider
 * vector into the machine's registers), so that the stages inside a vector (pairs 1, 2, 4, 8 apart: one shuffle and
 * one multiply-add each) and those between vectors (16 .. 64 apart: adds and subtracts) are the same on every CPU. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__AVX512F__)
/* GCC notes that a 64-byte vector passed by value would change the ABI without AVX-512: these functions are static */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

#if defined(__AVX512F__)
#include <immintrin.h>
static inline v16f min16(v16f a, v16f b) { return (v16f)_mm512_min_ps((__m512)a, (__m512)b); }
static inline v16f max16(v16f a, v16f b) { return (v16f)_mm512_max_ps((__m512)a, (__m512)b); }
#else
static inline v16f min16(v16f a, v16f b) { const v16i m = a < b; return (v16f)(((v16i)a & m) | ((v16i)b & ~m)); }
static inline v16f max16(v16f a, v16f b) { const v16i m = a > b; return (v16f)(((v16i)a & m) | ((v16i)b & ~m)); }
#endif

static inline v16f pair_stage(v16f v, int h) {
    const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const v16f partner = __builtin_shuffle(v, lane ^ h);
    const v16f sign = __builtin_convertvector(1 + 2 * ((lane & h) != 0), v16f);  /* a true compare is -1 */
    return v * sign + partner;  /* lane i without bit h: x[i] + x[i + h]; with it: x[i - h] - x[i] */
}

/* one block of count vectors (count a constant where inlined: the block stays in registers) rotated in place, its
 * values folded into the running minimum and maximum */
static inline __attribute__((always_inline)) void rotate_block(float *b, const int count, v16f *low, v16f *high) {
    v16f x[8];
    _Pragma("GCC unroll 8") for (int v = 0; v < count; v++) {
        memcpy(&x[v], b + 16 * v, sizeof x[v]);
        x[v] = pair_stage(pair_stage(pair_stage(pair_stage(x[v], 1), 2), 4), 8);
    }
    _Pragma("GCC unroll 8") for (int h = 1; h < count; h *= 2)
        _Pragma("GCC unroll 8") for (int i = 0; i < count; i += 2 * h)
            _Pragma("GCC unroll 8") for (int j = i; j < i + h; j++) {
                const v16f sum = x[j] + x[j + h], difference = x[j] - x[j + h];
                x[j] = sum;
                x[j + h] = difference;
            }
    _Pragma("GCC unroll 8") for (int v = 0; v < count; v++) {
        *low = min16(x[v], *low);
        *high = max16(x[v], *high);
        memcpy(b + 16 * v, &x[v], sizeof x[v]);
    }
}

/* buffer's blocks (of block values: 16, 32, 64 or 128) rotated in place, and the smallest and largest of the results
 * and 0: one pass */
static void hadamard_blocks(float *buffer, int64_t cols, int64_t block, float *low, float *high) {
    v16f low_v = {}, high_v = {};
    for (int64_t start = 0; start < cols; start += block) {
        switch (block) {
            case 128: rotate_block(buffer + start, 8, &low_v, &high_v); break;
            case 64: rotate_block(buffer + start, 4, &low_v, &high_v); break;
            case 32: rotate_block(buffer + start, 2, &low_v, &high_v); break;
            default: rotate_block(buffer + start, 1, &low_v, &high_v); break;
        }
    }
    *low = 0.0f;
    *high = 0.0f;
    for (int i = 0; i < 16; i++) {
        *low = low_v[i] < *low ? low_v[i] : *low;
        *high = high_v[i] > *high ? high_v[i] : *high;
    }
}

static int rotation_ok(int64_t cols, int rotate) {
    return rotate == 0 || ((rotate == 16 || rotate == 32 || rotate == 64 || rotate == 128) && cols % rotate == 0);
}

/* a row of fp32 values (buffer) quantized to 8 bits over its own range, which includes 0; low and high are the row's
 * minimum and maximum */
static inline void quantize_row(const float *buffer, int64_t cols, float low, float high, int8_t *out, float *out_scale,
                                float *out_zero) {
    low = low < 0.0f ? low : 0.0f;
    high = high > 0.0f ? high : 0.0f;
    float step = (high - low) / 255.0f;
    step = step > 1e-12f ? step : 1e-12f;
    const float inverse = 1.0f / step;
    const float zero = __builtin_rintf(-low * inverse);
    for (int64_t c = 0; c < cols; c++) {
        float code = __builtin_rintf(buffer[c] * inverse) + zero;
        code = code < 0.0f ? 0.0f : (code > 255.0f ? 255.0f : code);
        out[c] = (int8_t)((int32_t)code - 128);
    }
    *out_scale = step;
    *out_zero = zero;
}

/* a vector of a row's values folded into its running minimum and maximum, unless the row is rotated (the rotation's
 * pass takes the range of what it writes) */
static inline void fold_range(vecf value, int rotate, vecf *low_v, vecf *high_v) {
    if (rotate) return;
    *low_v = select_v(value < *low_v, value, *low_v);
    *high_v = select_v(value > *high_v, value, *high_v);
}

/* a row's codes from its values (rotated first, in place, where rotate) and their range */
static inline void finish_row(float *values, int64_t cols, int rotate, float low, float high, int8_t *codes,
                              float *out_scale, float *out_zero) {
    if (rotate) hadamard_blocks(values, cols, rotate, &low, &high);
    quantize_row(values, cols, low, high, codes, out_scale, out_zero);
}

int as2hub_quantize(const float *values, int64_t rows, int64_t cols, const float *smooth, int rotate, int8_t *codes,
                    float *out_scale, float *out_zero) {
    if (!rotation_ok(cols, rotate)) return 2;
    float *buffer = malloc(sizeof(float) * (size_t)(cols + LANES));
    if (!buffer) return 1;
    const int64_t whole = cols / LANES * LANES;
    for (int64_t r = 0; r < rows; r++) {
        const float *in = values + r * cols;
        vecf low_v = splat(0.0f), high_v = splat(0.0f);
        for (int64_t c = 0; c < whole; c += LANES) {
            vecf value = load_f(in + c);
            if (smooth) value *= load_f(smooth + c);
            memcpy(buffer + c, &value, sizeof value);
            fold_range(value, rotate, &low_v, &high_v);
        }
        float low, high;
        lanes_range(low_v, high_v, &low, &high);
        for (int64_t c = whole; c < cols; c++) {
            buffer[c] = smooth ? in[c] * smooth[c] : in[c];
            low = buffer[c] < low ? buffer[c] : low;
            high = buffer[c] > high ? buffer[c] : high;
        }
        finish_row(buffer, cols, rotate, low, high, codes + r * cols, out_scale + r, out_zero + r);
    }
    free(buffer);
    return 0;
}

int as2hub_requantize(const int32_t *total, int64_t rows, int64_t cols, const float *row_scale,
                      const float *row_zero, const float *col_sum, const float *col_scale, const float *bias, int use_gelu,
                      const float *smooth, int rotate, int8_t *codes, float *out_scale, float *out_zero) {
    if (!rotation_ok(cols, rotate)) return 2;
    float *buffer = malloc(sizeof(float) * (size_t)(cols + LANES));
    if (!buffer) return 1;
    const int64_t whole = cols / LANES * LANES;
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *in = total + r * cols;
        const float shift = 128.0f - row_zero[r], scale = row_scale[r];
        vecf low_v = splat(0.0f), high_v = splat(0.0f);
        for (int64_t c = 0; c < whole; c += LANES) {
            vecf value = (__builtin_convertvector(load_i(in + c), vecf) + splat(shift) * load_f(col_sum + c)) *
                         (splat(scale) * load_f(col_scale + c));
            if (bias) value += load_f(bias + c);
            if (use_gelu) value = gelu_v(value);
            if (smooth) value *= load_f(smooth + c);
            memcpy(buffer + c, &value, sizeof value);
            fold_range(value, rotate, &low_v, &high_v);
        }
        float low, high;
        lanes_range(low_v, high_v, &low, &high);
        for (int64_t c = whole; c < cols; c++) {
            float value = ((float)in[c] + shift * col_sum[c]) * (scale * col_scale[c]);
            if (bias) value += bias[c];
            if (use_gelu) value = gelu(value);
            if (smooth) value *= smooth[c];
            buffer[c] = value;
            low = value < low ? value : low;
            high = value > high ? value : high;
        }
        finish_row(buffer, cols, rotate, low, high, codes + r * cols, out_scale + r, out_zero + r);
    }
    free(buffer);
    return 0;
}

/* The products of an attention output or second feed-forward layer, rescaled as above, plus the residual, through
 * the layer norm (gamma, beta, eps: torch's LayerNorm, the variance without Bessel's correction): written to out
 * (fp32, the next residual) and, where codes is not NULL, quantized per row for the next product. */
int as2hub_rescale_norm(const int32_t *total, int64_t rows, int64_t cols, const float *row_scale, const float *row_zero,
                        const float *col_sum, const float *col_scale, const float *bias, const float *residual,
                        const float *gamma, const float *beta, float eps, const float *smooth, int rotate, float *out,
                        int8_t *codes, float *out_scale, float *out_zero) {
    if (!rotation_ok(cols, rotate)) return 2;
    float *buffer = malloc(sizeof(float) * (size_t)(cols + LANES));
    if (!buffer) return 1;
    const int64_t whole = cols / LANES * LANES;
    const int staged = smooth || rotate;  /* the codes' values go through buffer rather than out */
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *in = total + r * cols;
        const float *res = residual + r * cols;
        const float shift = 128.0f - row_zero[r], scale = row_scale[r];
        vecf sum_v = splat(0.0f);
        for (int64_t c = 0; c < whole; c += LANES) {
            vecf value = (__builtin_convertvector(load_i(in + c), vecf) + splat(shift) * load_f(col_sum + c)) *
                         (splat(scale) * load_f(col_scale + c));
            value = value + load_f(bias + c) + load_f(res + c);
            memcpy(buffer + c, &value, sizeof value);
            sum_v += value;
        }
        float sum = 0.0f;
        for (int i = 0; i < LANES; i++) sum += sum_v[i];
        for (int64_t c = whole; c < cols; c++) {
            buffer[c] = ((float)in[c] + shift * col_sum[c]) * (scale * col_scale[c]) + bias[c] + res[c];
            sum += buffer[c];
        }
        const float mean = sum / (float)cols;
        vecf square_v = splat(0.0f);
        for (int64_t c = 0; c < whole; c += LANES) {
            const vecf centered = load_f(buffer + c) - splat(mean);
            square_v += centered * centered;
        }
        float square = 0.0f;
        for (int i = 0; i < LANES; i++) square += square_v[i];
        for (int64_t c = whole; c < cols; c++) square += (buffer[c] - mean) * (buffer[c] - mean);
        const float inverse_std = 1.0f / __builtin_sqrtf(square / (float)cols + eps);
        float *row = out + r * cols;
        vecf low_v = splat(0.0f), high_v = splat(0.0f);
        for (int64_t c = 0; c < whole; c += LANES) {
            vecf value = (load_f(buffer + c) - splat(mean)) * splat(inverse_std) * load_f(gamma + c) + load_f(beta + c);
            memcpy(row + c, &value, sizeof value);
            if (smooth) value *= load_f(smooth + c);
            if (staged) memcpy(buffer + c, &value, sizeof value);  /* the codes' values: entry c was read above */
            fold_range(value, rotate, &low_v, &high_v);
        }
        float low, high;
        lanes_range(low_v, high_v, &low, &high);
        for (int64_t c = whole; c < cols; c++) {
            row[c] = (buffer[c] - mean) * inverse_std * gamma[c] + beta[c];
            const float value = smooth ? row[c] * smooth[c] : row[c];
            if (staged) buffer[c] = value;
            low = value < low ? value : low;
            high = value > high ? value : high;
        }
        if (codes) finish_row(staged ? buffer : row, cols, rotate, low, high, codes + r * cols, out_scale + r,
                              out_zero + r);
    }
    free(buffer);
    return 0;
}
