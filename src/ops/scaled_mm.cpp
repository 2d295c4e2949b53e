// FP8 products: scaled_mm (PyTorch 2.15's validation and messages), scaled_linear (weight-only
// FP8) and quantize_fp8. The kernels see a [m, k] and the weight-like view w [n, k] of mat_b.
#include <limits>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/scaled_mm.h"
#include "core/util.h"
#include "ops/block_scale.h"

namespace anvil {
namespace {


bool is_out_dtype(DType t) { return t == kFloat32 || t == kBFloat16 || t == kFloat16; }

const char* recipe_name(ScalingType r) {
  switch (r) {
    case ScalingType::TensorWise: return "TensorWise";
    case ScalingType::RowWise: return "RowWise";
    case ScalingType::BlockWise1x16: return "BlockWise1x16";
    case ScalingType::BlockWise1x32: return "BlockWise1x32";
    case ScalingType::BlockWise1x128: return "BlockWise1x128";
    case ScalingType::BlockWise128x128: return "BlockWise128x128";
  }
  return "unknown";
}

// A size-1 dim's stride is meaningless; give it the value the kernels' fast paths look for.
int64_t dim_stride(const Tensor& t, int64_t d, int64_t unit) { return t.size(d) == 1 ? unit : t.stride(d); }

void check_scale(const char* op, const Tensor& scale, const char* name, const Tensor& like) {
  ANVIL_CHECK(scale.defined(), Error, op, " ", name, " is undefined");
  check_same_device(op, like, scale);
  ANVIL_CHECK(scale.dtype() == kFloat32, DTypeError, op, " ", name, " must be float32, got ", describe(scale));
}

// The bias rules of scaled_mm (a bias is [n], bfloat16 / float16 and the output's dtype).
void check_bias(const char* op, const Tensor& bias, const Tensor& like, DType out, int64_t n) {
  if (!bias.defined()) return;
  check_same_device(op, like, bias);
  ANVIL_CHECK(out != kFloat32, DTypeError, op, " Bias is not supported when out_dtype is set to Float32");
  ANVIL_CHECK(bias.dtype() == kBFloat16 || bias.dtype() == kFloat16, DTypeError, op,
              " Bias must be BFloat16 or Half, but got ", dtype_name(bias.dtype()));
  ANVIL_CHECK(out != kBFloat16 || bias.dtype() == kBFloat16, DTypeError, op,
              " Bias must be BFloat16 to compute BFloat16 output, but got ", dtype_name(bias.dtype()));
  ANVIL_CHECK(out != kFloat16 || bias.dtype() == kFloat16, DTypeError, op,
              " Bias must be Float16 to compute Half output, but got ", dtype_name(bias.dtype()));
  ANVIL_CHECK(bias.numel() == n && bias.dim() <= 1, ShapeError, op, " bias must have ", n,
              " elements (one per output column), got ", describe(bias));
}

bool is_block_recipe(ScalingType r) { return r == ScalingType::BlockWise1x128 || r == ScalingType::BlockWise128x128; }

// torch._scaled_mm's text for scales that fit no recipe (ScaledBlas.cpp, get_joint_scaling).
std::string invalid_scaling(const Tensor& a, const Tensor& sa, const Tensor& b, const Tensor& sb) {
  auto dt = [](const Tensor& t) { return t.defined() ? std::string(dtype_name(t.dtype())) : std::string("undefined"); };
  auto sz = [](const Tensor& t) { return t.defined() ? shape_str(t.sizes()) : std::string("[]"); };
  auto st = [](const Tensor& t) { return t.defined() ? shape_str(t.strides()) : std::string("[]"); };
  return detail::cat_message(
      "Invalid scaling configuration.\n"
      "- For BlockWise 1x128 scaling, a and b should be float8, scales should be float, scale_a should be (M, L) and "
      "scale_b should be (L, N), and both should be outer-dim-major.\n"
      "- For BlockWise 128x128 scaling, a and b should be float8, scales should be float, scale_a should be "
      "(ceil(M/128), L) and scale_b should be (ceil(K/128), ceil(N/128)), and both should be near-inner-dim-major "
      "(with 16-byte aligned strides).\n"
      "Got a.dtype()=",
      dt(a), ", scale_a.dtype()=", dt(sa), ", scale_a.size()=", sz(sa), ", scale_a.stride()=", st(sa),
      ", b.dtype()=", dt(b), ", scale_b.dtype()=", dt(sb), ", scale_b.size()=", sz(sb),
      " and scale_b.stride()=", st(sb));
}

// size (rows, cols) with strides (s0, s1), a stride of a size-1 dim not checked (PyTorch's
// check_size_stride).
bool size_stride(const Tensor& t, int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  return t.dim() == 2 && t.size(0) == rows && t.size(1) == cols &&
         (t.numel() == 0 || ((rows == 1 || t.stride(0) == s0) && (cols == 1 || t.stride(1) == s1)));
}

// The block-wise recipes of torch._scaled_mm (the layouts its DeepSeek-style kernels take), for
// a [M, K], b [K, N], L = ceil(K / 128): BlockWise1x128 scale_a (M, L) strides (1, M), scale_b
// (L, N) strides (N, 1) (both outer-dim-major: the M / N index has stride 1); BlockWise128x128
// scale_a (ceil(M / 128), L) strides (L, 1), scale_b (L, ceil(N / 128)) strides (1, L). The
// pairs 1x128 x 1x128, 1x128 x 128x128 and 128x128 x 1x128. Fills p's a_block / w_block (w is
// b's transpose: w_block's row index is b's column block).
void block_recipes(const Tensor& a, const Tensor& sa, ScalingType ra, const Tensor& b, const Tensor& sb,
                   ScalingType rb, ScaledMmParams& p) {
  const char* op = "[scaled_mm]";
  constexpr int64_t kB = 128;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), l = (k + kB - 1) / kB;
  const bool a_rows = ra == ScalingType::BlockWise1x128, b_rows = rb == ScalingType::BlockWise1x128;
  ANVIL_CHECK(is_block_recipe(ra) && is_block_recipe(rb) && (a_rows || b_rows), Error, op, " ",
              invalid_scaling(a, sa, b, sb));
  ANVIL_CHECK(!(a.dtype() == kFloat8_e5m2 && b.dtype() == kFloat8_e5m2), DTypeError, op,
              " Multiplication of two Float8_e5m2 matrices is not supported");
  ANVIL_CHECK(sa.defined() && sb.defined(), Error, op, " ", invalid_scaling(a, sa, b, sb));
  check_same_device(op, a, sa);
  check_same_device(op, a, sb);
  const int64_t mb = (m + kB - 1) / kB, nb = (n + kB - 1) / kB;
  ANVIL_CHECK(sa.dtype() == kFloat32 && sb.dtype() == kFloat32, DTypeError, op, " ", invalid_scaling(a, sa, b, sb));
  const bool a_ok = a_rows ? size_stride(sa, m, l, 1, m) : size_stride(sa, mb, l, l, 1);
  const bool b_ok = b_rows ? size_stride(sb, l, n, n, 1) : size_stride(sb, l, nb, 1, l);
  ANVIL_CHECK(a_ok && b_ok, ShapeError, op, " ", invalid_scaling(a, sa, b, sb));
  // The kernels' views: a's grid [rows / block, L], w's grid [n / block, L] = scale_b^T. The
  // strides of size-1 dims are the layout's (a size-1 dim's stride may be anything).
  p.a_block.scale = static_cast<const float*>(sa.raw_data_ptr());
  p.a_block.block_n = a_rows ? 1 : kB;
  p.a_block.block_k = kB;
  p.a_block.stride_row = a_rows ? 1 : l;
  p.a_block.stride_col = a_rows ? m : 1;
  p.w_block.scale = static_cast<const float*>(sb.raw_data_ptr());
  p.w_block.block_n = b_rows ? 1 : kB;
  p.w_block.block_k = kB;
  p.w_block.stride_row = b_rows ? 1 : l;
  p.w_block.stride_col = b_rows ? n : 1;
}

}  // namespace

Tensor scaled_mm(const Tensor& mat_a, const Tensor& mat_b, const Tensor& scale_a, ScalingType recipe_a,
                 const Tensor& scale_b, ScalingType recipe_b, const Tensor& bias, DType output_dtype) {
  const char* op = "[scaled_mm]";
  ANVIL_CHECK(mat_a.defined() && mat_b.defined(), Error, op, " undefined tensor");
  check_same_device(op, mat_a, mat_b);
  ANVIL_CHECK(is_float8(mat_a.dtype()) && is_float8(mat_b.dtype()), DTypeError, op,
              " Expected both inputs to be fp8 or fp4 types but got mat_a.dtype=", dtype_name(mat_a.dtype()),
              " and mat_b.dtype=", dtype_name(mat_b.dtype()));
  ANVIL_CHECK(mat_a.dim() == 2, ShapeError, op, " mat_a must be a matrix, got ", describe(mat_a));
  ANVIL_CHECK(mat_b.dim() == 2, ShapeError, op, " mat_b must be a matrix, got ", describe(mat_b));
  const int64_t m = mat_a.size(0), k = mat_a.size(1), n = mat_b.size(1);
  ANVIL_CHECK(mat_b.size(0) == k, ShapeError, op, " mat_a and mat_b shapes cannot be multiplied (", m, "x", k,
              " and ", mat_b.size(0), "x", n, ")");
  ANVIL_CHECK(is_out_dtype(output_dtype), DTypeError, op,
              " supports Float, Half and BFloat16 outputs, got ", dtype_name(output_dtype));
  const bool tensor_wise = recipe_a == ScalingType::TensorWise && recipe_b == ScalingType::TensorWise;
  const bool row_wise = recipe_a == ScalingType::RowWise && recipe_b == ScalingType::RowWise;
  const bool block_wise = is_block_recipe(recipe_a) || is_block_recipe(recipe_b);
  ANVIL_CHECK(tensor_wise || row_wise || block_wise, Error, op,
              " supports TensorWise or RowWise scaling with one Float scale per operand, or the BlockWise1x128 / "
              "BlockWise128x128 pairs, got recipe_a=[",
              recipe_name(recipe_a), "] and recipe_b=[", recipe_name(recipe_b), "]");
  ScaledMmParams p;
  if (block_wise) {
    block_recipes(mat_a, scale_a, recipe_a, mat_b, scale_b, recipe_b, p);
  } else {
    check_scale(op, scale_a, "scale_a", mat_a);
    check_scale(op, scale_b, "scale_b", mat_a);
  }
  if (tensor_wise) {
    ANVIL_CHECK(scale_a.numel() == 1, ShapeError, op, " scale_a must have 1 Float element, got ", describe(scale_a));
    ANVIL_CHECK(scale_b.numel() == 1, ShapeError, op, " scale_b must have 1 Float element, got ", describe(scale_b));
  } else if (row_wise) {
    ANVIL_CHECK(scale_a.dim() == 2 && scale_b.dim() == 2 && scale_a.size(0) == m && scale_a.size(1) == 1 &&
                    scale_b.size(0) == 1 && scale_b.size(1) == n,
                ShapeError, op, " scale_a must be (M, 1) and scale_b (1, N), got ", shape_str(scale_a.sizes()),
                " and ", shape_str(scale_b.sizes()), " for M = ", m, ", N = ", n);
    ANVIL_CHECK(scale_a.stride(1) == 1, ShapeError, op, " expected scale_a.stride(1) to be 1, but got ",
                scale_a.stride(1));
    ANVIL_CHECK(scale_b.stride(1) == 1, ShapeError, op, " expected scale_b.stride(1) to be 1, but got ",
                scale_b.stride(1));
  }
  check_bias(op, bias, mat_a, output_dtype, n);

  const TensorOptions opts = TensorOptions(output_dtype).device(mat_a.device());
  if (m == 0 || n == 0) return empty({m, n}, opts);
  if (k == 0) {
    Tensor out = zeros({m, n}, opts);
    return bias.defined() ? add(out, bias.reshape({n})) : out;
  }
  Tensor out = empty({m, n}, opts);
  const Tensor b = bias.defined() ? bias.reshape({n}).contiguous() : Tensor();
  p.a = mat_a.raw_data_ptr();
  p.w = mat_b.raw_data_ptr();
  const Tensor sa = block_wise ? Tensor() : scale_a.contiguous(), sb = block_wise ? Tensor() : scale_b.contiguous();
  if (!block_wise) {
    p.scale_a = static_cast<const float*>(sa.raw_data_ptr());
    p.scale_w = static_cast<const float*>(sb.raw_data_ptr());
    p.scale_a_per_row = p.scale_w_per_row = row_wise;
  }
  p.bias = b.defined() ? b.raw_data_ptr() : nullptr;
  p.bias_dtype = b.defined() ? b.dtype() : output_dtype;
  p.out = out.raw_data_ptr();
  p.a_dtype = mat_a.dtype();
  p.w_dtype = mat_b.dtype();
  p.out_dtype = output_dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.stride_a_row = dim_stride(mat_a, 0, k);
  p.stride_a_col = dim_stride(mat_a, 1, 1);
  p.stride_w_row = dim_stride(mat_b, 1, k);  // w[j, q] = mat_b[q, j]
  p.stride_w_col = dim_stride(mat_b, 0, 1);
  p.stride_out_row = n;
  ANVIL_KERNEL(mat_a.device(), scaled_mm, p);
  return out;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Tensor dequantize_fp8(const Tensor& weight, const Tensor& scale, const Shape& block, DType dtype) {
  const char* op = "[dequantize_fp8]";
  ANVIL_CHECK(weight.defined() && scale.defined(), Error, op, " undefined tensor");
  check_same_device(op, weight, scale);
  ANVIL_CHECK(is_float8(weight.dtype()), DTypeError, op, " weight must be float8_e4m3fn or float8_e5m2, got ",
              describe(weight));
  ANVIL_CHECK(dtype == kFloat32 || dtype == kBFloat16 || dtype == kFloat16, DTypeError, op,
              " dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  ANVIL_CHECK(weight.dim() >= 2, ShapeError, op, " weight must be [..., n, k], got ", describe(weight));
  check_block_scale(op, scale, "scale", weight, block);
  const int64_t n = weight.size(-2), k = weight.size(-1), nb = scale.size(-2), kb = scale.size(-1);
  Shape lead(weight.sizes().begin(), weight.sizes().end() - 2), grid = lead, full = lead;
  for (int64_t v : {nb, int64_t{1}, kb, int64_t{1}}) grid.push_back(v);
  for (int64_t v : {nb, block[0], kb, block[1]}) full.push_back(v);
  if (n % block[0] == 0 && k % block[1] == 0) {
    // Whole blocks: the scale grid broadcast over a [.., nb, bn, kb, bk] view (the float8 values
    // are exact in dtype; the product is float32 and rounded once).
    return mul(weight.to(dtype).reshape(full), scale.reshape(grid)).to(dtype).view(weight.sizes());
  }
  // Partial blocks: each scale repeated over its block (the grid padded to whole blocks, then cut
  // to [n, k]).
  Shape padded = lead;
  padded.push_back(nb * block[0]);
  padded.push_back(kb * block[1]);
  const Tensor s = scale.reshape(grid).expand(full).reshape(padded).narrow(-2, 0, n).narrow(-1, 0, k);
  return mul(weight.to(kFloat32), s).to(dtype);  // one float32 product, one rounding
}

Tensor scaled_linear(const Tensor& input, const Tensor& weight, const Tensor& weight_scale, const Tensor& bias,
                     const Shape& block) {
  const char* op = "[scaled_linear]";
  ANVIL_CHECK(input.defined() && weight.defined() && weight_scale.defined(), Error, op, " undefined tensor");
  check_same_device(op, input, weight);
  const DType t = input.dtype();
  ANVIL_CHECK(t == kFloat32 || t == kBFloat16 || t == kFloat16, DTypeError, op,
              " input must be float32, bfloat16 or float16, got ", describe(input));
  ANVIL_CHECK(is_float8(weight.dtype()), DTypeError, op, " weight must be float8_e4m3fn or float8_e5m2, got ",
              describe(weight));
  ANVIL_CHECK(input.dim() >= 1, ShapeError, op, " input must have at least one dim, got ", describe(input));
  ANVIL_CHECK(weight.dim() == 2, ShapeError, op, " weight must be [out_features, in_features], got ", describe(weight));
  const int64_t k = input.size(-1), n = weight.size(0);
  Shape out_shape(input.sizes().begin(), input.sizes().end() - 1);
  const int64_t m = shape_numel(out_shape);
  out_shape.push_back(n);
  ANVIL_CHECK(weight.size(1) == k, ShapeError, op, " input and weight.T shapes cannot be multiplied (", m, "x", k,
              " and ", weight.size(1), "x", n, ")");
  check_scale(op, weight_scale, "weight_scale", input);
  const bool blocked = !block.empty();
  const bool per_row = !blocked && weight_scale.numel() != 1;
  if (blocked) {
    check_block_scale(op, weight_scale, "weight_scale", weight, block);
  } else {
    ANVIL_CHECK(weight_scale.numel() == 1 ||
                    (weight_scale.numel() == n && weight_scale.size(0) == n &&
                     (weight_scale.dim() == 1 || (weight_scale.dim() == 2 && weight_scale.size(1) == 1))),
                ShapeError, op, " weight_scale must be [", n, "] or [", n,
                ", 1] (one per weight row) or one element, got ", describe(weight_scale));
  }
  if (bias.defined()) {
    check_same_device(op, input, bias);
    ANVIL_CHECK(bias.dtype() == t, DTypeError, op, " expected bias to have dtype ", dtype_name(t), ", but got ",
                dtype_name(bias.dtype()));
    ANVIL_CHECK(bias.numel() == n && bias.dim() == 1, ShapeError, op, " bias must be [", n, "], got ", describe(bias));
  }

  const TensorOptions opts = TensorOptions(t).device(input.device());
  if (m == 0 || n == 0) return empty(out_shape, opts);
  const Tensor scale = blocked ? weight_scale.contiguous() : weight_scale.reshape({weight_scale.numel()}).contiguous();
  if (k == 0 || m > kGemvMaxRows || weight.stride(1) != 1) {
    // Prefill: the GEMM with the weight converted to the input's dtype. Row scales multiply the
    // product (exact float8 values in the GEMM, the scale in float32: two roundings); block
    // scales are applied to the weight first (dequantize_fp8: one more rounding of the weight).
    if (blocked) {
      Tensor y = mm(input.reshape({m, k}), dequantize_fp8(weight, scale, block, t).t());
      if (bias.defined()) y = add(y, bias);
      return y.view(out_shape);
    }
    Tensor y = mul(mm(input.reshape({m, k}), weight.to(t).t()), scale.reshape({1, per_row ? n : 1}));
    if (bias.defined()) y = add(y, bias);
    return y.to(t).view(out_shape);
  }
  const Tensor x = as_rows(input, m, k);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor out = empty({m, n}, opts);
  ScaledMmParams p;
  p.a = x.raw_data_ptr();
  p.w = weight.raw_data_ptr();
  if (blocked) p.w_block = block_scale_of(scale, block);
  else p.scale_w = static_cast<const float*>(scale.raw_data_ptr());
  p.scale_w_per_row = per_row;
  p.bias = b.defined() ? b.raw_data_ptr() : nullptr;
  p.bias_dtype = t;
  p.out = out.raw_data_ptr();
  p.a_dtype = t;
  p.w_dtype = weight.dtype();
  p.out_dtype = t;
  p.m = m;
  p.n = n;
  p.k = k;
  p.stride_a_row = row_stride(x);
  p.stride_w_row = n == 1 ? k : weight.stride(0);
  p.stride_out_row = n;
  ANVIL_KERNEL(input.device(), scaled_mm, p);
  return out.view(out_shape);
}

std::tuple<Tensor, Tensor> quantize_fp8(const Tensor& x, ScalingType recipe, DType dtype) {
  const char* op = "[quantize_fp8]";
  ANVIL_CHECK(x.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(x.dtype() == kFloat32 || x.dtype() == kBFloat16 || x.dtype() == kFloat16 || x.dtype() == kFloat64,
              DTypeError, op, " input must be a floating dtype, got ", describe(x));
  ANVIL_CHECK(is_float8(dtype), DTypeError, op, " dtype must be float8_e4m3fn or float8_e5m2, got ", dtype_name(dtype));
  const bool blocks = recipe == ScalingType::BlockWise128x128, rows = recipe == ScalingType::BlockWise1x128;
  ANVIL_CHECK(recipe == ScalingType::RowWise || recipe == ScalingType::TensorWise || blocks || rows, Error, op,
              " only RowWise, TensorWise, BlockWise1x128 and BlockWise128x128 quantisation exist, got ",
              recipe_name(recipe));
  ANVIL_CHECK(recipe == ScalingType::TensorWise || x.dim() >= (blocks ? 2 : 1), ShapeError, op, " ",
              recipe_name(recipe), " needs at least ", blocks ? 2 : 1, " dims, got ", describe(x));
  ANVIL_CHECK(!rows || x.dim() == 2, ShapeError, op, " BlockWise1x128 quantises a matrix [m, k], got ", describe(x));
  const double fp8_max = dtype == kFloat8_e4m3fn ? 448.0 : 57344.0;
  const TensorOptions f32 = TensorOptions(kFloat32).device(x.device());
  // An all-zero row (block) keeps scale 1 (any scale decodes zeros back to zeros).
  auto scale_of = [&](const Tensor& amax_abs) {
    const Tensor s = div(amax_abs, fp8_max);
    return where(eq(s, 0.0), full({}, 1.0, f32), s);
  };
  if (rows) {
    // x [m, k] zero-padded to whole 128-column blocks: scale [m, ceil(k / 128)] with strides
    // (1, m), the outer-dim-major layout scaled_mm's BlockWise1x128 takes.
    constexpr int64_t kB = 128;
    const int64_t m = x.size(0), k = x.size(1), kb = ceil_div(k, kB);
    Tensor xp = zeros({m, kb * kB}, f32);
    xp.narrow(-1, 0, k).copy_(x);
    const Tensor scale = scale_of(amax(abs(xp.view({m, kb, kB})), {2}, /*keepdim=*/true));  // [m, kb, 1]
    const Tensor q = div(xp.view({m, kb, kB}), scale).to(dtype).view({m, kb * kB}).narrow(-1, 0, k).contiguous();
    return {q, scale.reshape({m, kb}).t().contiguous().t()};
  }
  if (blocks) {
    // x [..., n, k] zero-padded to whole 128 x 128 blocks: scale [..., ceil(n / 128), ceil(k / 128)].
    constexpr int64_t kB = 128;
    const int64_t n = x.size(-2), k = x.size(-1), nb = ceil_div(n, kB), kb = ceil_div(k, kB);
    Shape lead(x.sizes().begin(), x.sizes().end() - 2), padded = lead, tiles = lead, grid = lead;
    for (int64_t v : {nb * kB, kb * kB}) padded.push_back(v);
    for (int64_t v : {nb, kB, kb, kB}) tiles.push_back(v);
    for (int64_t v : {nb, int64_t{1}, kb, int64_t{1}}) grid.push_back(v);
    Tensor xp = zeros(padded, f32);
    xp.narrow(-2, 0, n).narrow(-1, 0, k).copy_(x);
    const int64_t d = static_cast<int64_t>(lead.size());
    const Tensor scale = scale_of(amax(abs(xp.view(tiles)), {d + 1, d + 3}, /*keepdim=*/true));  // [..., nb, 1, kb, 1]
    const Tensor q = div(xp.view(tiles), scale).to(dtype).view(padded).narrow(-2, 0, n).narrow(-1, 0, k).contiguous();
    Shape out = lead;
    for (int64_t v : {nb, kb}) out.push_back(v);
    return {q, scale.reshape(out)};
  }
  const Tensor x32 = x.to(kFloat32);
  const Tensor amax_abs = recipe == ScalingType::RowWise ? amax(abs(x32), {-1}, /*keepdim=*/true) : amax(abs(x32));
  const Tensor scale = scale_of(amax_abs);
  Tensor q = div(x32, scale).to(dtype);  // the cast saturates to the fp8 range
  return {q, scale};
}

}  // namespace anvil
