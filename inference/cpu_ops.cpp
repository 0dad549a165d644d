// The CPU kernels of torch-int8's unpadded pass (int8_rows.c, small_attention.c) as C++ operators of the dispatcher
// (inference/cpu_ops.py builds this file with them, once per machine, and declares the schemas and shapes): a compiled
// pass calls them from inductor's C++ wrapper without going through Python, an eager pass with less work per call
// than a Python custom operator. Each computes what the Python operator of the same name (namespace as2hub, in
// inference/int8.py and inference/unpadded.py) computes where that one takes the C kernel: with one torch thread, fp32
// rows, heads of a multiple of 16. Anywhere else it hands the call to the Python operator, which decides as it always
// does.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

extern "C" {
int as2hub_quantize(const float *values, int64_t rows, int64_t cols, const float *smooth, int rotate, int8_t *codes,
                    float *out_scale, float *out_zero);
int as2hub_requantize(const int32_t *total, int64_t rows, int64_t cols, const float *row_scale, const float *row_zero,
                      const float *col_sum, const float *col_scale, const float *bias, int use_gelu,
                      const float *smooth, int rotate, int8_t *codes, float *out_scale, float *out_zero);
int as2hub_rescale_norm(const int32_t *total, int64_t rows, int64_t cols, const float *row_scale,
                        const float *row_zero, const float *col_sum, const float *col_scale, const float *bias,
                        const float *residual, const float *gamma, const float *beta, float eps, const float *smooth,
                        int rotate, float *out, int8_t *codes, float *out_scale, float *out_zero);
int as2hub_attend_f32(const float *q, int64_t q_stride, const float *k, const float *v, int64_t kv_stride, float *out,
                      int64_t out_stride, const int64_t *lengths, int64_t pairs, int64_t heads, int64_t head_size,
                      float scale, int first_only);
}

namespace {

using Tensor = at::Tensor;
using Optional = std::optional<Tensor>;
using Codes = std::tuple<Tensor, Tensor, Tensor>;
using NormCodes = std::tuple<Tensor, Tensor, Tensor, Tensor>;

// the Python operator of the same name, called through the dispatcher
template <typename Signature>
c10::TypedOperatorHandle<Signature> python_op(const char *name) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

bool one_thread() { return at::get_num_threads() == 1; }

// fp32 contiguous (the kernels read fp32 rows; the Python operators' inputs are fp32 already)
Tensor f32(const Tensor &t) { return t.to(at::kFloat).contiguous(); }
Optional f32(const Optional &t) { return t.has_value() ? Optional(f32(*t)) : std::nullopt; }
const float *pointer(const Optional &t) { return t.has_value() ? t->const_data_ptr<float>() : nullptr; }

Codes codes_for(int64_t rows, int64_t cols) {
    const auto f = at::TensorOptions().dtype(at::kFloat);
    return {at::empty({rows, cols}, at::TensorOptions().dtype(at::kChar)), at::empty({rows}, f), at::empty({rows}, f)};
}

void check(int status) {
    TORCH_CHECK(status == 0, "as2hub's int8_rows / small_attention kernel failed (",
                status == 1 ? "out of memory" : "a shape it cannot do", ")");
}

Codes quantize_rows(const Tensor &rows, const Optional &smooth, int64_t rotate) {
    if (!one_thread())
        return python_op<Codes(const Tensor &, const Optional &, int64_t)>("as2hub::quantize_rows")
            .call(rows, smooth, rotate);
    const Tensor values = f32(rows);
    const Optional scaled = f32(smooth);
    auto out = codes_for(values.size(0), values.size(1));
    check(as2hub_quantize(values.const_data_ptr<float>(), values.size(0), values.size(1), pointer(scaled),
                          static_cast<int>(rotate), std::get<0>(out).data_ptr<int8_t>(),
                          std::get<1>(out).data_ptr<float>(), std::get<2>(out).data_ptr<float>()));
    return out;
}

Codes gelu_requantize(const Tensor &total, const Tensor &scale, const Tensor &zero, const Tensor &weight_sum,
                      const Tensor &weight_scale, const Tensor &bias, const Optional &smooth, int64_t rotate) {
    if (!one_thread())
        return python_op<Codes(const Tensor &, const Tensor &, const Tensor &, const Tensor &, const Tensor &,
                               const Tensor &, const Optional &, int64_t)>("as2hub::gelu_requantize")
            .call(total, scale, zero, weight_sum, weight_scale, bias, smooth, rotate);
    const Tensor products = total.to(at::kInt).contiguous();
    const Tensor s = f32(scale), z = f32(zero), u = f32(weight_sum), w = f32(weight_scale), b = f32(bias);
    const Optional scaled = f32(smooth);
    auto out = codes_for(products.size(0), products.size(1));
    check(as2hub_requantize(products.const_data_ptr<int32_t>(), products.size(0), products.size(1),
                            s.const_data_ptr<float>(), z.const_data_ptr<float>(), u.const_data_ptr<float>(),
                            w.const_data_ptr<float>(), b.const_data_ptr<float>(), 1, pointer(scaled),
                            static_cast<int>(rotate), std::get<0>(out).data_ptr<int8_t>(),
                            std::get<1>(out).data_ptr<float>(), std::get<2>(out).data_ptr<float>()));
    return out;
}

NormCodes rescale_norm(const Tensor &total, const Tensor &scale, const Tensor &zero, const Tensor &weight_sum,
                       const Tensor &weight_scale, const Tensor &bias, const Tensor &residual, const Tensor &norm_weight,
                       const Tensor &norm_bias, double eps, const Optional &smooth, int64_t rotate) {
    if (!one_thread())
        return python_op<NormCodes(const Tensor &, const Tensor &, const Tensor &, const Tensor &, const Tensor &,
                                   const Tensor &, const Tensor &, const Tensor &, const Tensor &, double,
                                   const Optional &, int64_t)>("as2hub::rescale_norm")
            .call(total, scale, zero, weight_sum, weight_scale, bias, residual, norm_weight, norm_bias, eps, smooth,
                  rotate);
    const Tensor products = total.to(at::kInt).contiguous();
    const Tensor s = f32(scale), z = f32(zero), u = f32(weight_sum), w = f32(weight_scale), b = f32(bias);
    const Tensor res = f32(residual), gamma = f32(norm_weight), beta = f32(norm_bias);
    const Optional scaled = f32(smooth);
    Tensor states = at::empty({products.size(0), products.size(1)}, at::TensorOptions().dtype(at::kFloat));
    auto out = codes_for(products.size(0), products.size(1));
    check(as2hub_rescale_norm(products.const_data_ptr<int32_t>(), products.size(0), products.size(1),
                              s.const_data_ptr<float>(), z.const_data_ptr<float>(), u.const_data_ptr<float>(),
                              w.const_data_ptr<float>(), b.const_data_ptr<float>(), res.const_data_ptr<float>(),
                              gamma.const_data_ptr<float>(), beta.const_data_ptr<float>(), static_cast<float>(eps),
                              pointer(scaled), static_cast<int>(rotate), states.data_ptr<float>(),
                              std::get<0>(out).data_ptr<int8_t>(), std::get<1>(out).data_ptr<float>(),
                              std::get<2>(out).data_ptr<float>()));
    return {states, std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

// the rows' token counts from the attention pattern ((rows, 1, 1, length), true at real keys), as int64
Tensor row_lengths(const Tensor &pattern) { return pattern.reshape({pattern.size(0), -1}).sum(1).to(at::kLong); }

bool attends(const Tensor &t, int64_t head_size) {
    return one_thread() && t.scalar_type() == at::kFloat && t.dim() == 2 && t.stride(1) == 1 && head_size % 16 == 0;
}

Tensor rowwise_attention(const Tensor &qkv, const Tensor &pattern, int64_t heads, double scale) {
    const int64_t width = qkv.size(1) / 3;
    if (!attends(qkv, width / heads))
        return python_op<Tensor(const Tensor &, const Tensor &, int64_t, double)>("as2hub::rowwise_attention")
            .call(qkv, pattern, heads, scale);
    const Tensor lengths = row_lengths(pattern).contiguous();
    Tensor out = at::empty({qkv.size(0), width}, qkv.options());
    const int64_t used = lengths.sum().item<int64_t>();
    if (used < qkv.size(0)) out.narrow(0, used, qkv.size(0) - used).zero_();  // the packed matrix's extra rows
    const float *base = qkv.const_data_ptr<float>();
    check(as2hub_attend_f32(base, qkv.stride(0), base + width, base + 2 * width, qkv.stride(0), out.data_ptr<float>(),
                            out.stride(0), lengths.const_data_ptr<int64_t>(), lengths.numel(), heads, width / heads,
                            static_cast<float>(scale), 0));
    return out;
}

Tensor first_token_attention(const Tensor &query, const Tensor &keys_values, const Tensor &index,
                             const Tensor &pattern, int64_t heads, double scale) {
    const int64_t rows = query.size(0), width = query.size(1);
    if (!attends(query, width / heads) || !attends(keys_values, width / heads))
        return python_op<Tensor(const Tensor &, const Tensor &, const Tensor &, const Tensor &, int64_t, double)>(
                   "as2hub::first_token_attention")
            .call(query, keys_values, index, pattern, heads, scale);
    const Tensor lengths = row_lengths(pattern).contiguous();
    Tensor out = at::empty({rows, width}, query.options());
    const float *kv = keys_values.const_data_ptr<float>();
    check(as2hub_attend_f32(query.const_data_ptr<float>(), query.stride(0), kv, kv + width, keys_values.stride(0),
                            out.data_ptr<float>(), out.stride(0), lengths.const_data_ptr<int64_t>(), lengths.numel(),
                            heads, width / heads, static_cast<float>(scale), 1));
    return out;
}

}  // namespace

// the schemas: inference/cpu_ops.py defines them (with their shapes for compiled passes) before it loads this file
TORCH_LIBRARY_IMPL(as2hub_cpu, CPU, m) {
    m.impl("quantize_rows", &quantize_rows);
    m.impl("gelu_requantize", &gelu_requantize);
    m.impl("rescale_norm", &rescale_norm);
    m.impl("rowwise_attention", &rowwise_attention);
    m.impl("first_token_attention", &first_token_attention);
}
