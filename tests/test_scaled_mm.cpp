// scaled_mm (FP8 x FP8, tensor-wise, row-wise and block-wise scales), scaled_linear (weight-only FP8) and
// quantize_fp8: case tables against the float64 reference (rows around the GEMV switch, odd and
// 16-multiple K and N for both CUDA paths, every float8 pairing, the three outputs, bias, operand
// layouts), exact small-integer products, PyTorch's emulated-reference test, NaN weights, the
// empty and K = 0 shapes, errors, and CUDA graph replay.
#include <cmath>

#include "harness.h"
#include "reference/ref_matmul.h"

namespace {

using namespace anvil;
using th::Layout;

struct MmCase {
  int64_t m, k, n;
};

// Rows around the GEMV switch (8) and past it; K and N odd, or multiples of 16 (cuBLASLt's
// requirement on CUDA), small and large.
const std::vector<MmCase>& mm_cases() {
  static const std::vector<MmCase> v = {
      {1, 16, 16},  {1, 17, 3},   {1, 1000, 33}, {2, 64, 48},  {3, 65, 17},  {7, 128, 32}, {8, 129, 63},
      {9, 64, 32},  {9, 65, 33},  {16, 32, 16},  {33, 100, 40}, {64, 256, 128}, {300, 128, 48}, {5, 1, 7},
      {1, 2048, 1}, {12, 48, 1},
  };
  return v;
}

std::string mm_name(const MmCase& c, DType ta, DType tb, DType out, bool row_wise, Layout la, Layout lb, bool bias,
                    Device d) {
  return "m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) + " " +
         th::dtype_str(ta) + " x " + th::dtype_str(tb) + " -> " + th::dtype_str(out) +
         (row_wise ? " row-wise" : " tensor-wise") + ", a " + th::layout_name(la) + ", b " + th::layout_name(lb) +
         (bias ? ", bias" : "") + " on " + d.str();
}

// mat_b [k, n] in layout `l`: Transposed is b = W^T of a row-major W [n, k] (the layout of a
// linear weight, the fast one); Contiguous is a row-major b.
Tensor make_b(const ref::Array& b, DType t, Device dev, Layout l) {
  if (l == Layout::Transposed) {
    ref::Array w({b.sizes[1], b.sizes[0]});
    for (int64_t q = 0; q < b.sizes[0]; ++q)
      for (int64_t j = 0; j < b.sizes[1]; ++j) w.at({j, q}) = b.at({q, j});
    return th::make_tensor(w, t, dev).t();
  }
  return th::make_tensor(b, t, dev, l);
}

std::vector<double> values(const ref::Array& a) { return a.v; }

// The transpose of a matrix.
ref::Array transposed(const ref::Array& m) {
  const int64_t rows = m.sizes[0], cols = m.sizes[1];
  ref::Array t({cols, rows});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t.v[static_cast<size_t>(j * rows + i)] = m.v[static_cast<size_t>(i * cols + j)];
  return t;
}

// Cosine similarity of two arrays of the same size (PyTorch's FP8 tests bound it by 0.999).
double cosine(const ref::Array& a, const ref::Array& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.v.size(); ++i) {
    dot += a.v[i] * b.v[i];
    na += a.v[i] * a.v[i];
    nb += b.v[i] * b.v[i];
  }
  return dot / std::sqrt(na * nb);
}

// float32 dots (2 k u32 |a| |b| |sa sb|), the scale product and the bias in float32 (4 u32 of
// the result's parts), one rounding to the output. On CUDA the FP8 tensor cores (cuBLASLt's path
// for more than 8 rows, as PyTorch's _scaled_mm) add their partial sums in fewer bits than
// float32: measured up to 2^-13.7 of sum |a b| |sa sb| at k = 256; allowed 2^-10.
::testing::AssertionResult check_scaled(const Tensor& got, const ref::Array& a, const ref::Array& b,
                                        const std::vector<double>& sa, const std::vector<double>& sb,
                                        const ref::Array* bias, DType out) {
  const double acc_u = got.device().is_cuda() ? std::ldexp(1.0, -10) : 0.0;
  ref::Array want = ref::scaled_mm(a, b, sa, sb, bias);
  std::vector<double> asa(sa.size()), asb(sb.size());
  for (size_t i = 0; i < sa.size(); ++i) asa[i] = std::fabs(sa[i]);
  for (size_t i = 0; i < sb.size(); ++i) asb[i] = std::fabs(sb[i]);
  ref::Array scale = ref::scaled_mm(ref::abs(a), ref::abs(b), asa, asb);
  const double k = static_cast<double>(a.sizes[1]);
  const double u32 = th::unit_roundoff(kFloat32), uo = th::unit_roundoff(out);
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i) extra.v[i] = ((2.0 * k + 4.0) * u32 + acc_u) * scale.v[i];
  if (bias)
    for (int64_t i = 0; i < want.sizes[0]; ++i)
      for (int64_t j = 0; j < want.sizes[1]; ++j)
        extra.v[static_cast<size_t>(i * want.sizes[1] + j)] += 4.0 * u32 * std::fabs(bias->v[static_cast<size_t>(j)]);
  return th::expect_close(got, want, th::Tol{th::underflow_atol(out), 2 * uo}, &extra);
}

struct Scales {
  th::Input a, b;
};
// Decode scales of a plausible range (amax / 448 of unit-scale data is ~1/448; large ones too).
Scales make_scales(bool row_wise, int64_t m, int64_t n, Device dev, th::Gen& g) {
  Scales s;
  s.a = th::make_input(row_wise ? Shape{m, 1} : Shape{}, kFloat32, dev, Layout::Contiguous, g, 1.0 / 512, 4.0);
  s.b = th::make_input(row_wise ? Shape{1, n} : Shape{1}, kFloat32, dev, Layout::Contiguous, g, 1.0 / 512, 4.0);
  return s;
}

class ScaledMm : public th::DeviceTest {};

TEST_P(ScaledMm, Table) {
  th::CaseLoop loop;
  th::Gen g(5000);
  const std::vector<std::pair<DType, DType>> pairs = {{kFloat8_e4m3fn, kFloat8_e4m3fn},
                                                      {kFloat8_e4m3fn, kFloat8_e5m2},
                                                      {kFloat8_e5m2, kFloat8_e4m3fn},
                                                      {kFloat8_e5m2, kFloat8_e5m2}};
  const std::vector<Layout> a_layouts = {Layout::Contiguous, Layout::RowPadded, Layout::Transposed, Layout::Offset};
  const std::vector<Layout> b_layouts = {Layout::Transposed, Layout::Contiguous, Layout::Transposed, Layout::Strided};
  int ci = 0;
  for (const MmCase& c : mm_cases()) {
    for (size_t pi = 0; pi < pairs.size(); ++pi) {
      for (DType out : {kBFloat16, kFloat16, kFloat32}) {
        ++ci;
        const auto [ta, tb] = pairs[pi];
        const bool row_wise = ci % 2 == 0, with_bias = out != kFloat32 && ci % 3 == 0;
        const Layout la = a_layouts[static_cast<size_t>(ci) % a_layouts.size()];
        const Layout lb = b_layouts[static_cast<size_t>(ci / 4) % b_layouts.size()];
        if (!loop.run(mm_name(c, ta, tb, out, row_wise, la, lb, with_bias, dev()), [&] {
          // Values spread over the float8 range of unit-scale data, subnormals included.
          th::Input a = th::make_input({c.m, c.k}, ta, dev(), la, g, -6, 6);
          ref::Array bv = th::random_array({c.k, c.n}, tb, g, -6, 6);
          Tensor b = make_b(bv, tb, dev(), lb);
          Scales s = make_scales(row_wise, c.m, c.n, dev(), g);
          th::Input bias;
          if (with_bias) bias = th::make_input({c.n}, out, dev(), Layout::Contiguous, g, -4, 4);
          const auto a_before = th::storage_bits(a.t), b_before = th::storage_bits(b);
          const ScalingType r = row_wise ? ScalingType::RowWise : ScalingType::TensorWise;
          Tensor y = scaled_mm(a.t, b, s.a.t, r, s.b.t, r, bias.t, out);
          ASSERT_TRUE(th::expect_shape(y, {c.m, c.n}, out));
          ASSERT_TRUE(check_scaled(y, a.a, bv, values(s.a.a), values(s.b.a), with_bias ? &bias.a : nullptr, out));
          ASSERT_TRUE(th::storage_unchanged(a.t, a_before)) << "mat_a";
          ASSERT_TRUE(th::storage_unchanged(b, b_before)) << "mat_b";
        }))
          return;
      }
    }
  }
}

// Small integers times power-of-two scales: every partial sum is exact in float32, so the
// result is the exact value rounded once (a bias rounded before the add, a scale applied to a
// rounded partial or a dropped K tail would show).
TEST_P(ScaledMm, ExactOnSmallIntegers) {
  th::CaseLoop loop;
  th::Gen g(5001);
  for (const MmCase& c : mm_cases()) {
    for (DType out : {kBFloat16, kFloat32}) {
      for (bool row_wise : {false, true}) {
        if (!loop.run(mm_name(c, kFloat8_e4m3fn, kFloat8_e4m3fn, out, row_wise, Layout::Contiguous,
                              Layout::Transposed, out != kFloat32, dev()),
                      [&] {
          th::Input a = th::make_input({c.m, c.k}, kInt32, dev(), Layout::Contiguous, g, -4, 4);
          ref::Array bv = th::random_array({c.k, c.n}, kInt32, g, -4, 4);
          ref::Array sa(row_wise ? Shape{c.m, 1} : Shape{}), sb(row_wise ? Shape{1, c.n} : Shape{});
          for (double& v : sa.v) v = std::ldexp(1.0, static_cast<int>(g.randint(-3, 1)));
          for (double& v : sb.v) v = std::ldexp(1.0, static_cast<int>(g.randint(-2, 2)));
          th::Input bias;
          if (out != kFloat32) bias = th::make_input({c.n}, kInt32, dev(), Layout::Contiguous, g, -8, 8);
          const ScalingType r = row_wise ? ScalingType::RowWise : ScalingType::TensorWise;
          Tensor y = scaled_mm(th::make_tensor(a.a, kFloat8_e4m3fn, dev()), make_b(bv, kFloat8_e4m3fn, dev(), Layout::Transposed),
                               th::make_tensor(sa, kFloat32, dev()), r, th::make_tensor(sb, kFloat32, dev()), r,
                               bias.t.defined() ? th::make_tensor(bias.a, out, dev()) : Tensor(), out);
          ref::Array want = ref::scaled_mm(a.a, bv, sa.v, sb.v, bias.t.defined() ? &bias.a : nullptr);
          for (double& v : want.v) v = th::round_to_dtype(v, out);
          ASSERT_TRUE(th::expect_equal(y, want));
        }))
          return;
      }
    }
  }
}

// PyTorch's test_scaled_mm_vs_emulated: quantise x and y with amax scales, multiply with the
// reciprocal scales, compare with the float32 product of the dequantised operands. Tolerances
// are PyTorch's (bf16 / fp16 7e-2, fp32 3e-3; row-wise fp32 2e-3 and cosine >= 0.999).
TEST_P(ScaledMm, MatchesEmulatedLikePyTorch) {
  th::Gen g(5002);
  for (bool row_wise : {false, true}) {
    for (DType out : {kBFloat16, kFloat16, kFloat32}) {
      for (int64_t m : {1, 16}) {
        SCOPED_TRACE(th::dtype_str(out) + (row_wise ? " row-wise" : " tensor-wise") + " m " + std::to_string(m));
        const ScalingType r = row_wise ? ScalingType::RowWise : ScalingType::TensorWise;
        th::Input x = th::make_input({m, 16}, kFloat32, dev(), Layout::Contiguous, g, -3, 3);
        th::Input w = th::make_input({32, 16}, kFloat32, dev(), Layout::Contiguous, g, -3, 3);
        auto [xq, xs] = quantize_fp8(x.t, r);
        auto [wq, ws] = quantize_fp8(w.t, r);  // row-wise: one scale per row of W = column of b
        Tensor sb = row_wise ? ws.reshape({1, 32}) : ws;
        Tensor y = scaled_mm(xq, wq.t(), xs, r, sb, r, {}, out);
        // Emulated: the dequantised operands' float64 product.
        ref::Array xd = th::to_array(mul(xq.to(kFloat32), xs)), wd = th::to_array(mul(wq.to(kFloat32), ws));
        ref::Array want = ref::mm(xd, transposed(wd));
        const double tol = out == kFloat32 ? (row_wise ? 2e-3 : 3e-3) : 7e-2;
        EXPECT_TRUE(th::expect_close(y, want, th::Tol{tol, tol}));
        if (row_wise) {
          EXPECT_GE(cosine(th::to_array(y), want), 0.999);
        }
        // And the quantisation itself is within e4m3's half-ulp of the input (relative 2^-4).
        ref::Array xr = th::to_array(mul(xq.to(kFloat32), xs));
        ref::Array xscale = th::to_array(xs);
        ref::Array extra(x.a.sizes);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t q = 0; q < 16; ++q)
            extra.at({i, q}) = std::ldexp(1.0, -10) * xscale.v[static_cast<size_t>(row_wise ? i : 0)];
        EXPECT_TRUE(th::expect_close(mul(xq.to(kFloat32), xs), x.a, th::Tol{0, std::ldexp(1.0, -4) * 1.01}, &extra));
      }
    }
  }
}

// A NaN weight byte (0x7F) poisons exactly its output column, on the GEMV and the GEMM paths.
TEST_P(ScaledMm, NanWeightPoisonsItsColumn) {
  for (int64_t m : {1, 4, 32}) {
    for (DType tb : {kFloat8_e4m3fn, kFloat8_e5m2}) {
      SCOPED_TRACE("m " + std::to_string(m) + " " + th::dtype_str(tb));
      const int64_t k = 64, n = 32;
      ref::Array w({n, k}, 1.0);
      w.at({5, 17}) = std::nan("");
      Tensor b = th::make_tensor(w, tb, dev()).t();
      Tensor a = th::make_tensor(ref::Array({m, k}, 1.0), kFloat8_e4m3fn, dev());
      Tensor one = ones({}, TensorOptions(kFloat32).device(dev()));
      ref::Array want({m, n}, static_cast<double>(k));
      for (int64_t i = 0; i < m; ++i) want.at({i, 5}) = std::nan("");
      EXPECT_TRUE(th::expect_equal(scaled_mm(a, b, one, ScalingType::TensorWise, one, ScalingType::TensorWise, {}, kFloat32), want));
    }
  }
}

// The same through scaled_linear with bfloat16 activations (the CPU's table-decode path): NaN
// bytes inside a 64-weight chunk and in the tail past the last chunk.
TEST_P(ScaledMm, NanWeightPoisonsItsColumnScaledLinear) {
  for (int64_t m : {1, 3}) {
    for (DType tb : {kFloat8_e4m3fn, kFloat8_e5m2}) {
      SCOPED_TRACE("m " + std::to_string(m) + " " + th::dtype_str(tb));
      const int64_t k = 100, n = 16;
      ref::Array w({n, k}, 1.0);
      w.at({5, 17}) = std::nan("");
      w.at({9, 90}) = std::nan("");
      Tensor x = th::make_tensor(ref::Array({m, k}, 0.5), kBFloat16, dev());
      Tensor s = ones({n}, TensorOptions(kFloat32).device(dev()));
      ref::Array want({m, n}, 0.5 * static_cast<double>(k));
      for (int64_t i = 0; i < m; ++i) want.at({i, 5}) = want.at({i, 9}) = std::nan("");
      EXPECT_TRUE(th::expect_equal(scaled_linear(x, th::make_tensor(w, tb, dev()), s).to(kFloat32), want));
    }
  }
}

TEST_P(ScaledMm, EmptyAndZeroK) {
  const TensorOptions f8 = TensorOptions(kFloat8_e4m3fn).device(dev());
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev());
  Tensor one = ones({1}, f32);
  const ScalingType tw = ScalingType::TensorWise;
  EXPECT_TRUE(th::expect_shape(scaled_mm(zeros({0, 16}, f8), zeros({16, 32}, f8), one, tw, one, tw), {0, 32}, kBFloat16));
  EXPECT_TRUE(th::expect_shape(scaled_mm(zeros({4, 16}, f8), zeros({16, 0}, f8), one, tw, one, tw), {4, 0}, kBFloat16));
  EXPECT_TRUE(th::expect_equal(scaled_mm(zeros({3, 0}, f8), zeros({0, 5}, f8), one, tw, one, tw, {}, kFloat32),
                               ref::Array({3, 5}, 0.0)));
  Tensor bias = full({5}, 2.0, TensorOptions(kBFloat16).device(dev()));
  EXPECT_TRUE(th::expect_equal(scaled_mm(zeros({3, 0}, f8), zeros({0, 5}, f8), one, tw, one, tw, bias),
                               ref::Array({3, 5}, 2.0)));
}

TEST_P(ScaledMm, Errors) {
  const TensorOptions f8 = TensorOptions(kFloat8_e4m3fn).device(dev());
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev());
  Tensor a = zeros({4, 32}, f8), b = zeros({32, 16}, f8), one = ones({}, f32);
  Tensor ra = ones({4, 1}, f32), rb = ones({1, 16}, f32);
  const ScalingType tw = ScalingType::TensorWise, rw = ScalingType::RowWise;
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a.to(kBFloat16), b, one, tw, one, tw));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b.to(kFloat32), one, tw, one, tw));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, {}, kFloat8_e4m3fn));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, {}, kInt32));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(zeros({4}, f8), b, one, tw, one, tw));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, zeros({2, 32, 16}, f8), one, tw, one, tw));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, zeros({31, 16}, f8), one, tw, one, tw));
  // recipes
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, one, tw, rb, rw));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, ra, ScalingType::BlockWise1x16, rb, ScalingType::BlockWise1x16));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, ra, ScalingType::RowWise, rb, ScalingType::BlockWise1x128));
  // scales
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({2}, f32), tw, one, tw));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one.to(kBFloat16), tw, one, tw));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({4}, f32), rw, rb, rw));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ra, rw, ones({16, 1}, f32), rw));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({1, 4}, f32).t(), rw, rb, rw));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, Tensor(), tw, one, tw));
  // bias
  const TensorOptions bf = TensorOptions(kBFloat16).device(dev());
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, zeros({16}, f32), kFloat32));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, zeros({16}, bf), kFloat32));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, zeros({16}, f32)));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, zeros({16}, bf), kFloat16));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, one, tw, one, tw, zeros({15}, bf)));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(Tensor(), b, one, tw, one, tw));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "scaled_mm", scaled_mm(a, zeros({32, 16}, kFloat8_e4m3fn), one, tw, one, tw));
    EXPECT_THROWS_OP(DeviceError, "scaled_mm", scaled_mm(a, b, ones({}, kFloat32), tw, one, tw));
  }
  // scaled_linear and quantize_fp8
  Tensor x = zeros({2, 32}, bf), w = zeros({16, 32}, f8), s = ones({16}, f32);
  EXPECT_THROWS_OP(DTypeError, "scaled_linear", scaled_linear(x, w.to(kBFloat16), s));
  EXPECT_THROWS_OP(DTypeError, "scaled_linear", scaled_linear(x.to(kInt32), w, s));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, zeros({16, 31}, f8), s));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, w, ones({15}, f32)));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, w, ones({16, 2}, f32)));
  EXPECT_THROWS_OP(DTypeError, "scaled_linear", scaled_linear(x, w, s.to(kBFloat16)));
  EXPECT_THROWS_OP(DTypeError, "scaled_linear", scaled_linear(x, w, s, zeros({16}, f32)));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, w, s, zeros({15}, bf)));
  EXPECT_THROWS_OP(DTypeError, "quantize_fp8", quantize_fp8(zeros({2}, TensorOptions(kInt32).device(dev()))));
  EXPECT_THROWS_OP(DTypeError, "quantize_fp8", quantize_fp8(x, ScalingType::RowWise, kBFloat16));
  EXPECT_THROWS_OP(Error, "quantize_fp8", quantize_fp8(x, ScalingType::BlockWise1x32));
  EXPECT_THROWS_OP(ShapeError, "quantize_fp8", quantize_fp8(zeros({8}, f32), ScalingType::BlockWise128x128));
  EXPECT_THROWS_OP(ShapeError, "quantize_fp8", quantize_fp8(zeros({8}, f32), ScalingType::BlockWise1x128));
  EXPECT_THROWS_OP(ShapeError, "quantize_fp8", quantize_fp8(zeros({2, 2, 8}, f32), ScalingType::BlockWise1x128));
}

// ---- block-wise recipes (DeepSeek-style 1x128 / 128x128 scales) ------------------------------

const char* recipe_str(ScalingType r) { return r == ScalingType::BlockWise1x128 ? "1x128" : "128x128"; }

// Scale grids in scaled_mm's layouts with values in [1/512, 4]: a's [ceil(m / a_rows), L] (1x128:
// strides (1, m)), b's [L, ceil(n / b_cols)] (128x128: strides (1, L)).
struct BlockScales {
  th::Input a, b;
  int64_t a_rows, b_cols;
};
BlockScales make_block_scales(ScalingType ra, ScalingType rb, int64_t m, int64_t k, int64_t n, Device dev,
                              th::Gen& g) {
  BlockScales s;
  const int64_t l = (k + 127) / 128;
  s.a_rows = ra == ScalingType::BlockWise1x128 ? 1 : 128;
  s.b_cols = rb == ScalingType::BlockWise1x128 ? 1 : 128;
  s.a = th::make_input({(m + s.a_rows - 1) / s.a_rows, l}, kFloat32, dev,
                       s.a_rows == 1 ? Layout::Transposed : Layout::Contiguous, g, 1.0 / 512, 4.0);
  s.b = th::make_input({l, (n + s.b_cols - 1) / s.b_cols}, kFloat32, dev,
                       s.b_cols == 1 ? Layout::Contiguous : Layout::Transposed, g, 1.0 / 512, 4.0);
  return s;
}

// As check_scaled, per block: float32 dots of each block (2 k u32 of sum |a b| |sa sb|), the
// scale products in float32; the FP8 tensor cores' fewer-bit adds on CUDA (cuBLASLt) allowed 2^-10.
::testing::AssertionResult check_blocks(const Tensor& got, const ref::Array& a, const ref::Array& b,
                                        const BlockScales& s, const ref::Array* bias, DType out) {
  const double acc_u = got.device().is_cuda() ? std::ldexp(1.0, -10) : 0.0;
  ref::Array want = ref::scaled_mm_blocks(a, b, s.a.a, s.a_rows, s.b.a, s.b_cols, bias);
  ref::Array mag = ref::scaled_mm_blocks(ref::abs(a), ref::abs(b), s.a.a, s.a_rows, s.b.a, s.b_cols);
  const double k = static_cast<double>(a.sizes[1]), u32 = th::unit_roundoff(kFloat32);
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i) extra.v[i] = ((2.0 * k + 6.0) * u32 + acc_u) * mag.v[i];
  if (bias)
    for (int64_t i = 0; i < want.sizes[0]; ++i)
      for (int64_t j = 0; j < want.sizes[1]; ++j)
        extra.v[static_cast<size_t>(i * want.sizes[1] + j)] += 4.0 * u32 * std::fabs(bias->v[static_cast<size_t>(j)]);
  return th::expect_close(got, want, th::Tol{th::underflow_atol(out), 2 * th::unit_roundoff(out)}, &extra);
}

// Rows around the GEMV switch and past it, K and N partial blocks (not multiples of 128), 16-
// multiples (cuBLASLt on CUDA) and not (the tiled kernel), grids whose row-block stride cuBLASLt
// wants padded (L = 3), several 128-row blocks of a.
TEST_P(ScaledMm, BlockWiseTable) {
  th::CaseLoop loop;
  th::Gen g(5020);
  const std::vector<MmCase> cases = {{1, 128, 16},  {1, 200, 48},   {2, 384, 130},  {5, 1000, 33},
                                     {8, 300, 256}, {9, 256, 128},  {33, 208, 144}, {64, 320, 160},
                                     {130, 512, 272}, {200, 336, 384}, {257, 1280, 384}, {300, 130, 40},
                                     {12, 48, 1}};
  const std::vector<std::pair<ScalingType, ScalingType>> pairs = {
      {ScalingType::BlockWise1x128, ScalingType::BlockWise1x128},
      {ScalingType::BlockWise1x128, ScalingType::BlockWise128x128},
      {ScalingType::BlockWise128x128, ScalingType::BlockWise1x128}};
  const std::vector<DType> outs = {kBFloat16, kFloat32, kFloat16};
  const std::vector<Layout> a_layouts = {Layout::Contiguous, Layout::RowPadded, Layout::Contiguous, Layout::Transposed};
  int ci = 0;
  for (const MmCase& c : cases) {
    for (const auto& [ra, rb] : pairs) {
      ++ci;
      const DType out = outs[static_cast<size_t>(ci) % outs.size()];
      const bool with_bias = out != kFloat32 && ci % 2 == 0;
      const Layout la = a_layouts[static_cast<size_t>(ci) % a_layouts.size()];
      const Layout lb = ci % 5 == 0 ? Layout::Contiguous : Layout::Transposed;
      const DType tb = ci % 7 == 0 ? kFloat8_e5m2 : kFloat8_e4m3fn;
      const std::string name = "m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) +
                               " " + recipe_str(ra) + " x " + recipe_str(rb) + " e4m3 x " + th::dtype_str(tb) +
                               " -> " + th::dtype_str(out) + ", a " + th::layout_name(la) + ", b " +
                               th::layout_name(lb) + (with_bias ? ", bias" : "") + " on " + dev().str();
      if (!loop.run(name, [&, ra = ra, rb = rb] {
            th::Input a = th::make_input({c.m, c.k}, kFloat8_e4m3fn, dev(), la, g, -6, 6);
            ref::Array bv = th::random_array({c.k, c.n}, tb, g, -6, 6);
            Tensor b = make_b(bv, tb, dev(), lb);
            BlockScales s = make_block_scales(ra, rb, c.m, c.k, c.n, dev(), g);
            th::Input bias;
            if (with_bias) bias = th::make_input({c.n}, out, dev(), Layout::Contiguous, g, -4, 4);
            const auto a_before = th::storage_bits(a.t), b_before = th::storage_bits(b);
            Tensor y = scaled_mm(a.t, b, s.a.t, ra, s.b.t, rb, bias.t, out);
            ASSERT_TRUE(th::expect_shape(y, {c.m, c.n}, out));
            ASSERT_TRUE(check_blocks(y, a.a, bv, s, with_bias ? &bias.a : nullptr, out));
            ASSERT_TRUE(th::storage_unchanged(a.t, a_before)) << "mat_a";
            ASSERT_TRUE(th::storage_unchanged(b, b_before)) << "mat_b";
          }))
        return;
    }
  }
}

// PyTorch's block-wise numerics test in our terms: x [m, k] and y [n, k] quantised by
// quantize_fp8 (1x128 rows of x, 128 x 128 blocks of y, or 1x128 rows of both), then
// scaled_mm(xq, yq^T, ...) against x @ y^T: cosine >= 0.999 (PyTorch's bound), and against the
// float64 product of the quantised operands within the dot's rounding.
TEST_P(ScaledMm, BlockWiseMatchesEmulatedLikePyTorch) {
  th::Gen g(5021);
  for (const MmCase& c : {MmCase{1, 512, 256}, MmCase{6, 300, 200}, MmCase{256, 512, 768}, MmCase{384, 1280, 128}}) {
    for (const bool y_blocks : {true, false}) {
      SCOPED_TRACE("m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) +
                   (y_blocks ? " 1x128 x 128x128" : " 1x128 x 1x128"));
      th::Input x = th::make_input({c.m, c.k}, kFloat32, dev(), Layout::Contiguous, g, -2, 2);
      th::Input y = th::make_input({c.n, c.k}, kFloat32, dev(), Layout::Contiguous, g, -2, 2);
      auto [xq, xs] = quantize_fp8(x.t, ScalingType::BlockWise1x128);
      const ScalingType rb = y_blocks ? ScalingType::BlockWise128x128 : ScalingType::BlockWise1x128;
      auto [yq, ys] = quantize_fp8(y.t, rb);
      const int64_t l = (c.k + 127) / 128;
      ASSERT_TRUE(th::expect_shape(xs, {c.m, l}, kFloat32));
      if (c.m > 1 && l > 1) {
        EXPECT_EQ(xs.stride(0), 1);
        EXPECT_EQ(xs.stride(1), c.m);
      }
      Tensor out = scaled_mm(xq, yq.t(), xs, ScalingType::BlockWise1x128, ys.t(), rb, {}, kBFloat16);
      EXPECT_GE(cosine(th::to_array(out.to(kFloat32)), ref::mm(x.a, transposed(y.a))), 0.999);
      // Against the emulated product (the quantised operands times their scales, float64).
      const BlockScales s{{xs, th::to_array(xs)}, {ys.t(), th::to_array(ys.t())}, 1, y_blocks ? 128 : 1};
      EXPECT_TRUE(check_blocks(out, th::to_array(xq), th::to_array(yq.t()), s, nullptr, kBFloat16));
    }
  }
}

TEST_P(ScaledMm, BlockWiseErrors) {
  const TensorOptions f8 = TensorOptions(kFloat8_e4m3fn).device(dev());
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev());
  const ScalingType r1 = ScalingType::BlockWise1x128, r2 = ScalingType::BlockWise128x128;
  // a [4, 300], b [300, 32]: L = 3.
  Tensor a = zeros({4, 300}, f8), b = zeros({32, 300}, f8).t();
  Tensor sa1 = ones({3, 4}, f32).t(), sb1 = ones({3, 32}, f32), sa2 = ones({1, 3}, f32), sb2 = ones({1, 3}, f32).t();
  EXPECT_NO_THROW(scaled_mm(a, b, sa1, r1, sb1, r1));
  EXPECT_NO_THROW(scaled_mm(a, b, sa1, r1, sb2, r2));
  EXPECT_NO_THROW(scaled_mm(a, b, sa2, r2, sb1, r1));
  auto invalid = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()).find("Invalid scaling configuration") != std::string::npos;
    }
    return false;
  };
  // The pair PyTorch has no kernel for, and mixed recipes.
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, sa2, r2, sb2, r2));
  EXPECT_TRUE(invalid([&] { scaled_mm(a, b, sa2, r2, sb2, r2); }));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, sa1, r1, ones({}, f32), ScalingType::TensorWise));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, sa1, ScalingType::BlockWise1x32, sb1, r1));
  // Layouts: row-major 1x128 grids (not outer-dim-major), a transposed 128x128 grid.
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({4, 3}, f32), r1, sb1, r1));
  EXPECT_TRUE(invalid([&] { scaled_mm(a, b, ones({4, 3}, f32), r1, sb1, r1); }));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, sa1, r1, ones({32, 3}, f32).t(), r1));
  Tensor a2 = zeros({130, 300}, f8), b2 = zeros({130, 300}, f8).t();  // two 128-row blocks each
  EXPECT_NO_THROW(scaled_mm(a2, b2, ones({2, 3}, f32), r2, ones({3, 130}, f32), r1));
  EXPECT_NO_THROW(scaled_mm(a2, b2, ones({3, 130}, f32).t(), r1, ones({2, 3}, f32).t(), r2));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a2, b2, ones({3, 2}, f32).t(), r2, ones({3, 130}, f32), r1));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a2, b2, ones({3, 130}, f32).t(), r1, ones({3, 2}, f32), r2));
  // Shapes: L from k, the row blocks from m / n.
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({2, 4}, f32).t(), r1, sb1, r1));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, sa1, r1, ones({3, 31}, f32), r1));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, sa1, r1, ones({2, 3}, f32).t(), r2));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({3, 5}, f32).t(), r1, sb1, r1));
  EXPECT_THROWS_OP(ShapeError, "scaled_mm", scaled_mm(a, b, ones({3}, f32), r1, sb1, r1));
  // dtypes and undefined scales.
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a, b, sa1.to(kBFloat16), r1, sb1, r1));
  EXPECT_THROWS_OP(DTypeError, "scaled_mm", scaled_mm(a.to(kFloat8_e5m2), b.to(kFloat8_e5m2), sa1, r1, sb1, r1));
  EXPECT_THROWS_OP(Error, "scaled_mm", scaled_mm(a, b, Tensor(), r1, sb1, r1));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "scaled_mm", scaled_mm(a, b, ones({3, 4}, kFloat32).t(), r1, sb1, r1));
  }
}

// quantize_fp8's 1x128 rows: layout, values within one e4m3 rounding, the scale of each block.
TEST_P(ScaledMm, BlockWise1x128Quantize) {
  th::Gen g(5022);
  th::Input x = th::make_input({5, 300}, kFloat32, dev(), Layout::Contiguous, g, -3, 3);
  auto [q, s] = quantize_fp8(x.t, ScalingType::BlockWise1x128);
  ASSERT_TRUE(th::expect_shape(q, {5, 300}, kFloat8_e4m3fn));
  ASSERT_TRUE(th::expect_shape(s, {5, 3}, kFloat32));
  EXPECT_EQ(s.stride(0), 1);
  EXPECT_EQ(s.stride(1), 5);
  const ref::Array qa = th::to_array(q), sa = th::to_array(s);
  ref::Array d(qa.sizes), amax({5, 3});
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t c = 0; c < 300; ++c) {
      d.v[static_cast<size_t>(i * 300 + c)] = qa.at({i, c}) * sa.at({i, c / 128});
      double& m = amax.v[static_cast<size_t>(i * 3 + c / 128)];
      m = std::max(m, std::fabs(x.a.at({i, c})));
    }
  for (double& m : amax.v) m /= 448.0;
  EXPECT_TRUE(th::expect_close(s, amax, th::Tol{0, 2 * th::unit_roundoff(kFloat32)}));
  EXPECT_TRUE(th::expect_close(th::make_tensor(d, kFloat32, kCPU), x.a, th::Tol{std::ldexp(3.0 / 448, -10), std::ldexp(1.0, -4)}));
}

// ---- scaled_linear ---------------------------------------------------------------------------

struct LinCase {
  Shape x;  // [*, k]
  int64_t n;
};

TEST_P(ScaledMm, ScaledLinearTable) {
  th::CaseLoop loop;
  th::Gen g(5003);
  const std::vector<LinCase> cases = {{{1, 64}, 32},     {{1, 1, 1000}, 33}, {{4, 1, 65}, 17}, {{2, 129}, 63},
                                      {{8, 17}, 3},      {{9, 64}, 48},      {{33, 100}, 40},  {{1, 2048}, 1},
                                      {{3, 1, 16}, 129}, {{0, 16}, 8},       {{2, 0}, 5}};
  int ci = 0;
  for (const LinCase& c : cases) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      for (DType tw : {kFloat8_e4m3fn, kFloat8_e5m2}) {
        ++ci;
        const int64_t k = c.x.back();
        Shape out_shape(c.x.begin(), c.x.end() - 1);
        out_shape.push_back(c.n);
        const int scale_kind = ci % 3;  // [n], [n, 1], one element
        const bool with_bias = ci % 2 == 0;
        const Layout lx = ci % 4 == 1 ? Layout::RowPadded : Layout::Contiguous;
        const Layout lw = ci % 5 == 2 ? Layout::RowPadded : Layout::Contiguous;
        const std::string name = th::case_name(c.x, t, lx, dev()) + " x " + th::dtype_str(tw) + " [" +
                                 std::to_string(c.n) + ", " + std::to_string(k) + "] " + th::layout_name(lw) +
                                 " scale kind " + std::to_string(scale_kind) + (with_bias ? " bias" : "");
        if (!loop.run(name, [&] {
          th::Input x = th::make_input(c.x, t, dev(), lx, g, -2, 2);
          th::Input w = th::make_input({c.n, k}, tw, dev(), lw, g, -6, 6);
          const Shape ss = scale_kind == 0 ? Shape{c.n} : scale_kind == 1 ? Shape{c.n, 1} : Shape{1};
          th::Input s = th::make_input(ss, kFloat32, dev(), Layout::Contiguous, g, 1.0 / 512, 2.0);
          th::Input b;
          if (with_bias) b = th::make_input({c.n}, t, dev(), Layout::Contiguous, g, -1, 1);
          Tensor y = scaled_linear(x.t, w.t, s.t, b.t);
          ASSERT_TRUE(th::expect_shape(y, out_shape, t));
          // Reference on [m, k] x [k, n] with the per-row scale as a column scale.
          const int64_t m = ref::numel_of(Shape(c.x.begin(), c.x.end() - 1));
          ref::Array x2 = x.a;
          x2.sizes = {m, k};
          const ref::Array wt = transposed(w.a);
          ref::Array want = ref::scaled_mm(x2, wt, {1.0}, s.a.v, with_bias ? &b.a : nullptr);
          std::vector<double> abs_s(s.a.v.size());
          for (size_t i = 0; i < abs_s.size(); ++i) abs_s[i] = std::fabs(s.a.v[i]);
          ref::Array scale = ref::scaled_mm(ref::abs(x2), ref::abs(wt), {1.0}, abs_s);
          const double uo = th::unit_roundoff(t), u32 = th::unit_roundoff(kFloat32);
          ref::Array extra(want.sizes);
          // Few rows: float32 dots, one rounding. More rows: the product rounded to t before the
          // scale (2 u_t more) and the GEMM's own accumulation.
          const double per = (2.0 * static_cast<double>(k) + 4.0) * u32 + (m > 8 ? 2.0 * uo : 0.0);
          for (size_t i = 0; i < extra.v.size(); ++i) extra.v[i] = per * scale.v[i] + (with_bias ? 2 * uo : 0.0);
          want.sizes = out_shape;
          extra.sizes = out_shape;
          ASSERT_TRUE(th::expect_close(y, want, th::Tol{th::underflow_atol(t), 2 * uo}, &extra));
        }))
          return;
      }
    }
  }
}

// scaled_linear with block scales (the Hub's FP8 checkpoints' weight_scale_inv): blocks whose
// k is a multiple of 64 (the in-dot GEMV paths: CPU vdpbf16ps, CUDA mma) and others (the CPU's
// scaled rows, CUDA's tiled kernel), partial blocks on both edges, the few-row and the prefill
// (dequantised weight) paths, padded inputs, bias; against the float64 dot of x with q * scale.
TEST_P(ScaledMm, ScaledLinearBlockTable) {
  th::CaseLoop loop;
  th::Gen g(5011);
  struct BlockCase {
    Shape x;
    int64_t n;
    Shape block;
  };
  const std::vector<BlockCase> cases = {
      {{1, 256}, 40, {16, 128}}, {{1, 200}, 33, {32, 64}},   {{3, 100}, 17, {8, 32}},    {{8, 384}, 64, {128, 128}},
      {{1, 1000}, 9, {4, 48}},   {{2, 1, 130}, 20, {16, 64}}, {{9, 130}, 20, {16, 64}}, {{33, 64}, 40, {32, 32}},
      {{1, 2048}, 384, {128, 128}}, {{4, 64}, 1, {1, 1}},
  };
  int ci = 0;
  for (const BlockCase& c : cases) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      ++ci;
      const DType tw = ci % 4 == 3 ? kFloat8_e5m2 : kFloat8_e4m3fn;
      const int64_t k = c.x.back(), nb = (c.n + c.block[0] - 1) / c.block[0], kb = (k + c.block[1] - 1) / c.block[1];
      Shape out_shape(c.x.begin(), c.x.end() - 1);
      out_shape.push_back(c.n);
      const bool with_bias = ci % 2 == 0;
      const Layout lx = ci % 3 == 1 ? Layout::RowPadded : Layout::Contiguous;
      const std::string name = th::case_name(c.x, t, lx, dev()) + " x " + th::dtype_str(tw) + " [" +
                               std::to_string(c.n) + ", " + std::to_string(k) + "] blocks " + shape_str(c.block) +
                               (with_bias ? " bias" : "");
      if (!loop.run(name, [&] {
        th::Input x = th::make_input(c.x, t, dev(), lx, g, -2, 2);
        th::Input w = th::make_input({c.n, k}, tw, dev(), Layout::Contiguous, g, -6, 6);
        th::Input s = th::make_input({nb, kb}, kFloat32, dev(), Layout::Contiguous, g, 1.0 / 512, 2.0);
        th::Input b;
        if (with_bias) b = th::make_input({c.n}, t, dev(), Layout::Contiguous, g, -1, 1);
        Tensor y = scaled_linear(x.t, w.t, s.t, b.t, c.block);
        ASSERT_TRUE(th::expect_shape(y, out_shape, t));
        const int64_t m = ref::numel_of(Shape(c.x.begin(), c.x.end() - 1));
        ref::Array x2 = x.a, wt({k, c.n}), awt({k, c.n});
        x2.sizes = {m, k};
        for (int64_t j = 0; j < c.n; ++j)
          for (int64_t q = 0; q < k; ++q) {
            wt.at({q, j}) = w.a.at({j, q}) * s.a.at({j / c.block[0], q / c.block[1]});
            awt.at({q, j}) = std::fabs(wt.at({q, j}));
          }
        ref::Array want = ref::scaled_mm(x2, wt, {1.0}, {1.0}, with_bias ? &b.a : nullptr);
        ref::Array scale = ref::scaled_mm(ref::abs(x2), awt, {1.0}, {1.0});
        const double uo = th::unit_roundoff(t), u32 = th::unit_roundoff(kFloat32);
        // Few rows: float32 block sums times their scale (one more rounding each), one rounding.
        // More rows: the dequantised weight rounded to t, then t's GEMM with float32 sums.
        const double per = (2.0 * static_cast<double>(k) + 6.0) * u32 + (m > 8 ? 2.0 * uo : 0.0);
        ref::Array extra(want.sizes);
        for (size_t i = 0; i < extra.v.size(); ++i) extra.v[i] = per * scale.v[i] + (with_bias ? 2 * uo : 0.0);
        want.sizes = out_shape;
        extra.sizes = out_shape;
        ASSERT_TRUE(th::expect_close(y, want, th::Tol{th::underflow_atol(t), 2 * uo}, &extra));
      }))
        return;
    }
  }
  // Scales that do not match the weight and block, and bad blocks: typed, named errors.
  Tensor x = ones({1, 64}, TensorOptions(kBFloat16).device(dev()));
  Tensor w = ones({40, 64}, TensorOptions(kFloat8_e4m3fn).device(dev()));
  Tensor s = ones({3, 2}, TensorOptions(kFloat32).device(dev()));
  EXPECT_NO_THROW(scaled_linear(x, w, s, {}, {16, 32}));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, w, s, {}, {32, 32}));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, w, s, {}, {16}));
  EXPECT_THROWS_OP(ShapeError, "scaled_linear", scaled_linear(x, w, s, {}, {0, 32}));
  EXPECT_THROWS_OP(DTypeError, "scaled_linear", scaled_linear(x, w, s.to(kBFloat16), {}, {16, 32}));
}

// dequantize_fp8 and quantize_fp8's 128 x 128 blocks: values, partial blocks, round trip.
TEST_P(ScaledMm, BlockQuantizeRoundTrip) {
  th::Gen g(5013);
  for (const Shape& shape : {Shape{300, 200}, Shape{2, 128, 256}, Shape{5, 7}}) {
    SCOPED_TRACE(shape_str(shape));
    th::Input x = th::make_input(shape, kFloat32, dev(), Layout::Contiguous, g, -3, 3);
    auto [q, s] = quantize_fp8(x.t, ScalingType::BlockWise128x128);
    Shape grid(shape.begin(), shape.end() - 2);
    grid.push_back((shape[shape.size() - 2] + 127) / 128);
    grid.push_back((shape.back() + 127) / 128);
    ASSERT_TRUE(th::expect_shape(s, grid, kFloat32));
    ASSERT_TRUE(th::expect_shape(q, shape, kFloat8_e4m3fn));
    const ref::Array qa = th::to_array(q), sa = th::to_array(s);
    const Tensor d = dequantize_fp8(q, s, {128, 128}, kFloat32);
    ref::Array want(qa.sizes);
    const int64_t n = shape[shape.size() - 2], k = shape.back(), nb = grid[grid.size() - 2], kb = grid.back();
    for (int64_t i = 0; i < qa.numel(); ++i) {
      const int64_t b = i / (n * k), j = i / k % n, c = i % k;
      want.v[static_cast<size_t>(i)] = qa.v[static_cast<size_t>(i)] * sa.v[static_cast<size_t>((b * nb + j / 128) * kb + c / 128)];
    }
    EXPECT_TRUE(th::expect_close(d, want, th::Tol{0, th::unit_roundoff(kFloat32)}));
    // Within one e4m3 rounding of x: 2^-4 relative, or half its smallest subnormal (2^-10)
    // times the block's scale (at most 3 / 448) absolute.
    EXPECT_TRUE(th::expect_close(d, x.a, th::Tol{std::ldexp(3.0 / 448, -10), std::ldexp(1.0, -4)}));
  }
  // Bad input: typed errors naming the op.
  const Tensor q = ones({40, 64}, TensorOptions(kFloat8_e4m3fn).device(dev()));
  const Tensor s = ones({3, 2}, TensorOptions(kFloat32).device(dev()));
  EXPECT_NO_THROW(dequantize_fp8(q, s, {16, 32}));
  EXPECT_THROWS_OP(ShapeError, "dequantize_fp8", dequantize_fp8(q, s, {32, 32}));
  EXPECT_THROWS_OP(ShapeError, "dequantize_fp8", dequantize_fp8(q, s, {16, 0}));
  EXPECT_THROWS_OP(DTypeError, "dequantize_fp8", dequantize_fp8(q.to(kBFloat16), s, {16, 32}));
  EXPECT_THROWS_OP(DTypeError, "dequantize_fp8", dequantize_fp8(q, s.to(kBFloat16), {16, 32}));
  EXPECT_THROWS_OP(DTypeError, "dequantize_fp8", dequantize_fp8(q, s, {16, 32}, kInt32));
  EXPECT_THROWS_OP(ShapeError, "dequantize_fp8", dequantize_fp8(q.view({2560}), s, {16, 32}));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(ScaledMm);

// ---- CUDA graph ------------------------------------------------------------------------------
// scaled_mm (GEMV and GEMM sizes, row-wise) and scaled_linear captured once; new inputs and
// scales copied in; the replay equals an eager call bit for bit.
TEST(ScaledMmGraph, ReplaysNewInputs) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(5004);
  for (int64_t m : {1, 64}) {
    SCOPED_TRACE("m " + std::to_string(m));
    const int64_t k = 256, n = 128;
    auto fresh = [&] {
      return std::tuple{th::make_input({m, k}, kFloat8_e4m3fn, dev, Layout::Contiguous, gen, -4, 4).t,
                        th::make_input({n, k}, kFloat8_e4m3fn, dev, Layout::Contiguous, gen, -4, 4).t,
                        th::make_input({m, 1}, kFloat32, dev, Layout::Contiguous, gen, 0.01, 1).t,
                        th::make_input({1, n}, kFloat32, dev, Layout::Contiguous, gen, 0.01, 1).t,
                        th::make_input({m, k}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t};
    };
    auto [a, w, sa, sb, x] = fresh();
    const ScalingType rw = ScalingType::RowWise;
    Tensor ws = sb.reshape({n});
    scaled_mm(a, w.t(), sa, rw, sb, rw);
    scaled_linear(x, w, ws);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    Tensor y = scaled_mm(a, w.t(), sa, rw, sb, rw);
    Tensor z = scaled_linear(x, w, ws);
    graph.capture_end();
    for (int round = 0; round < 2; ++round) {
      auto [na, nw, nsa, nsb, nx] = fresh();
      a.copy_(na);
      w.copy_(nw);
      sa.copy_(nsa);
      sb.copy_(nsb);
      x.copy_(nx);
      graph.replay();
      s.synchronize();
      Tensor ey = scaled_mm(a, w.t(), sa, rw, sb, rw), ez = scaled_linear(x, w, ws);
      s.synchronize();
      EXPECT_EQ(th::to_bits(y), th::to_bits(ey)) << "round " << round;
      EXPECT_EQ(th::to_bits(z), th::to_bits(ez)) << "round " << round;
    }
    graph.reset();
  }
}

// Block-wise recipes captured at GEMV and GEMM sizes, with 128 x 128 grids whose row-block stride
// (L = 3) cuBLASLt takes padded (the copy into its layout is part of the graph).
TEST(ScaledMmGraph, ReplaysBlockWise) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(5023);
  const ScalingType r1 = ScalingType::BlockWise1x128, r2 = ScalingType::BlockWise128x128;
  for (int64_t m : {1, 200}) {
    for (const bool a_rows : {true, false}) {
      SCOPED_TRACE("m " + std::to_string(m) + (a_rows ? " 1x128 x 128x128" : " 128x128 x 1x128"));
      const int64_t k = 336, n = 256;
      const ScalingType ra = a_rows ? r1 : r2, rb = a_rows ? r2 : r1;
      auto fresh = [&] {
        return std::tuple{th::make_input({m, k}, kFloat8_e4m3fn, dev, Layout::Contiguous, gen, -4, 4).t,
                          th::make_input({n, k}, kFloat8_e4m3fn, dev, Layout::Contiguous, gen, -4, 4).t,
                          make_block_scales(ra, rb, m, k, n, dev, gen)};
      };
      auto [a, w, sc] = fresh();
      scaled_mm(a, w.t(), sc.a.t, ra, sc.b.t, rb);
      s.synchronize();
      cuda::Graph graph;
      graph.capture_begin();
      Tensor y = scaled_mm(a, w.t(), sc.a.t, ra, sc.b.t, rb);
      graph.capture_end();
      for (int round = 0; round < 2; ++round) {
        auto [na, nw, nsc] = fresh();
        a.copy_(na);
        w.copy_(nw);
        sc.a.t.copy_(nsc.a.t);
        sc.b.t.copy_(nsc.b.t);
        graph.replay();
        s.synchronize();
        Tensor ey = scaled_mm(a, w.t(), sc.a.t, ra, sc.b.t, rb);
        s.synchronize();
        EXPECT_EQ(th::to_bits(y), th::to_bits(ey)) << "round " << round;
      }
      graph.reset();
    }
  }
}

}  // namespace
