// linear (y = x w^T + b): one case table (input shape x weight rows x bias kind x operand
// layouts x dtype) against the float64 reference with matmul's gamma_k bound, exact checks on
// small integers, the fused bias's single rounding on the GEMV path, many-row and lm_head-like
// shapes, errors, and CUDA graph replay of the GEMV path.
#include <cmath>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

// The bias a case adds: none; [n] (fused on the GEMV path); [1, n] and the output's own shape
// (both added after the product, never fused). With a 1-D weight (output [*]) Vec is 0-dim and
// Row is [1].
enum class Bias { None, Vec, Row, Full };

const char* bias_name(Bias b) {
  switch (b) {
    case Bias::None: return "no bias";
    case Bias::Vec: return "bias [n]";
    case Bias::Row: return "bias [1, n]";
    case Bias::Full: return "bias [*, n]";
  }
  return "?";
}

struct LinearCase {
  Shape x;    // [*, k]
  int64_t n;  // weight [n, k]; -1: a 1-D weight [k]
  Bias bias;
};

Shape out_shape(const LinearCase& c) {
  Shape s(c.x.begin(), c.x.end() - 1);
  if (c.n >= 0) s.push_back(c.n);
  return s;
}

Shape bias_shape(const LinearCase& c) {
  switch (c.bias) {
    case Bias::Vec: return c.n >= 0 ? Shape{c.n} : Shape{};
    case Bias::Row: return c.n >= 0 ? Shape{1, c.n} : Shape{1};
    case Bias::Full: return out_shape(c);
    default: return {};
  }
}

Shape weight_shape(const LinearCase& c) { return c.n >= 0 ? Shape{c.n, c.x.back()} : Shape{c.x.back()}; }

std::string linear_name(const LinearCase& c, DType t, Layout lx, Layout lw, Device d) {
  return th::case_name(c.x, t, lx, d) + " x weight " + ref::shape_to_string(weight_shape(c)) + " " + th::layout_name(lw) +
         ", " + bias_name(c.bias);
}

// Odd sizes: not multiples of the 8 / 16 / 32-element vectors, around 64 and 128, and large.
const std::vector<int64_t> kOddSizes = {1, 3, 17, 63, 65, 127, 129, 1000, 2049};

// Rows 0 .. 16 around the GEMV / GEMM switch, 300 (GEMM), and 4096 with a small k and n.
const std::vector<LinearCase>& rows_cases() {
  static const std::vector<LinearCase> v = [] {
    std::vector<LinearCase> r;
    for (int64_t m : {0, 1, 2, 7, 8, 9, 16, 300}) r.push_back({{m, 129}, 63, Bias::Vec});
    for (int64_t m : {1, 2, 8, 9, 16}) r.push_back({{m, 65}, 17, Bias::None});
    for (int64_t m : {1, 7, 9}) r.push_back({{m, 33}, 5, Bias::Full});
    r.push_back({{4096, 16}, 8, Bias::Vec});
    return r;
  }();
  return v;
}

// Odd k at one row, at three rows and past the GEMV rows.
const std::vector<LinearCase>& odd_k_cases() {
  static const std::vector<LinearCase> v = [] {
    std::vector<LinearCase> r;
    for (int64_t k : kOddSizes) {
      r.push_back({{k}, 33, Bias::Vec});
      r.push_back({{3, k}, 17, Bias::None});
      r.push_back({{9, k}, 7, Bias::Vec});
    }
    return r;
  }();
  return v;
}

// Odd n at one row and at five.
const std::vector<LinearCase>& odd_n_cases() {
  static const std::vector<LinearCase> v = [] {
    std::vector<LinearCase> r;
    for (int64_t n : kOddSizes) {
      r.push_back({{1, 65}, n, Bias::Vec});
      r.push_back({{5, 17}, n, Bias::Row});
    }
    return r;
  }();
  return v;
}

// Decode-like leading dims, 1-D weights, bias kinds, k == 0, n == 0, m == 0.
const std::vector<LinearCase>& shape_cases() {
  static const std::vector<LinearCase> v = {
      {{1, 1, 1000}, 127, Bias::Vec}, {{4, 1, 1000}, 127, Bias::Vec}, {{4, 1, 65}, 33, Bias::None},
      {{2, 3, 65}, 129, Bias::Full},  {{2, 3, 65}, 129, Bias::Row},   {{2, 3, 65}, 17, Bias::Vec},
      {{1, 1, 17}, 3, Bias::Row},     {{7, 33}, -1, Bias::None},      {{33}, -1, Bias::None},
      {{2, 3, 17}, -1, Bias::Full},   {{5, 129}, -1, Bias::Vec},      {{12, 129}, -1, Bias::Row},
      {{3, 0}, 5, Bias::Vec},         {{0}, 4, Bias::Vec},            {{2, 0}, 5, Bias::Full},
      {{1, 1, 0}, 6, Bias::None},     {{3, 7}, 0, Bias::Vec},         {{3, 7}, 0, Bias::None},
      {{1, 7}, 0, Bias::None},        {{0, 7}, 5, Bias::Vec},         {{2, 0, 7}, 5, Bias::None},
  };
  return v;
}

// Input layouts: transposed (last-dim stride != 1), sliced with step 2, misaligned by one
// element, rows padded and misaligned, broadcast rows. Weight layouts: row-padded with unit
// last stride (the GEMV reads it in place), transposed (GEMM only), misaligned.
const std::vector<Layout> kXLayouts = {Layout::Contiguous, Layout::Transposed, Layout::Strided,
                                       Layout::Offset,     Layout::RowPadded,  Layout::Broadcast};
const std::vector<Layout> kWLayouts = {Layout::Contiguous, Layout::RowPadded, Layout::Transposed, Layout::Offset};
const std::vector<Layout> kFewXLayouts = {Layout::Contiguous, Layout::RowPadded, Layout::Transposed};

// |got - want| <= 2 k u_acc (|x| |w|^T)_ij + 2 u_O |want|, + 2 u_O |x w^T|_ij with a bias: it
// may be added after the product was rounded (the GEMM path, biases other than [n]).
::testing::AssertionResult check_linear(const Tensor& y, const ref::Array& x, const ref::Array& w, const ref::Array* b,
                                        DType t) {
  ref::Array want = ref::linear(x, w, b);
  ref::Array scale = ref::linear(ref::abs(x), ref::abs(w));
  ref::Array product = ref::linear(x, w);
  const double k = static_cast<double>(x.sizes.back());
  const double uacc = th::unit_roundoff(th::compute_dtype(t)), uo = th::unit_roundoff(t);
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i)
    extra.v[i] = 2.0 * k * uacc * scale.v[i] + (b ? 2.0 * uo * std::fabs(product.v[i]) : 0.0);
  return th::expect_close(y, want, th::Tol{th::underflow_atol(t), 2 * uo}, &extra);
}

class Linear : public th::DeviceTest {
 protected:
  void run_table(const std::vector<LinearCase>& cases, uint64_t seed) {
    th::CaseLoop loop;
    th::Gen g(seed);
    int ci = 0;
    for (const LinearCase& c : cases) {
      ++ci;
      const int64_t mnk = ref::numel_of(out_shape(c)) * c.x.back();
      for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
        if (t == kFloat64 && mnk > 200000) continue;
        const std::vector<Layout>& xls = t == kFloat32 ? kXLayouts : kFewXLayouts;
        for (size_t li = 0; li < xls.size(); ++li) {
          const Layout lx = xls[li], lw = kWLayouts[(li + static_cast<size_t>(ci)) % kWLayouts.size()];
          const Layout lb = li % 2 ? Layout::Strided : Layout::Contiguous;
          if (!loop.run(linear_name(c, t, lx, lw, dev()), [&] {
            th::Input x = th::make_input(c.x, t, dev(), lx, g, -1, 1);
            th::Input w = th::make_input(weight_shape(c), t, dev(), lw, g, -1, 1);
            th::Input b;
            if (c.bias != Bias::None) b = th::make_input(bias_shape(c), t, dev(), lb, g, -1, 1);
            const auto x_before = th::storage_bits(x.t), w_before = th::storage_bits(w.t);
            Tensor y = linear(x.t, w.t, b.t);
            ASSERT_TRUE(th::expect_shape(y, out_shape(c), t));
            ASSERT_EQ(y.device(), dev());
            ASSERT_TRUE(check_linear(y, x.a, w.a, b.t.defined() ? &b.a : nullptr, t));
            ASSERT_TRUE(th::storage_unchanged(x.t, x_before)) << "input";
            ASSERT_TRUE(th::storage_unchanged(w.t, w_before)) << "weight";
          }))
            return;
        }
      }
    }
  }
};

TEST_P(Linear, RowsTable) { run_table(rows_cases(), 4000); }
TEST_P(Linear, OddKTable) { run_table(odd_k_cases(), 4001); }
TEST_P(Linear, OddNTable) { run_table(odd_n_cases(), 4007); }
TEST_P(Linear, ShapesAndBiasTable) { run_table(shape_cases(), 4002); }

// Small integers: every partial sum is an integer below 2^24, exact in a float32 accumulator in
// any order, so the result is the exact value rounded once to the dtype. Catches dropped
// k-tails, rows read with the wrong stride, a bias added twice or to the wrong column.
TEST_P(Linear, ExactOnSmallIntegers) {
  th::CaseLoop loop;
  th::Gen g(4003);
  for (const std::vector<LinearCase>* cases : {&rows_cases(), &odd_k_cases(), &odd_n_cases(), &shape_cases()}) {
    int ci = 0;
    for (const LinearCase& c : *cases) {
      ++ci;
      for (DType t : {kFloat32, kBFloat16, kFloat16}) {
        // A bias added after a rounded product would round twice: keep bf16 / f16 bias-free here
        // (the fused single rounding has its own test below).
        LinearCase cc = c;
        if (t != kFloat32) cc.bias = Bias::None;
        const Layout lx = kXLayouts[static_cast<size_t>(ci) % kXLayouts.size()];
        const Layout lw = kWLayouts[static_cast<size_t>(ci) % kWLayouts.size()];
        if (!loop.run("exact " + linear_name(cc, t, lx, lw, dev()), [&] {
          th::Input x = th::make_input(cc.x, kInt32, dev(), lx, g, -2, 2);
          th::Input w = th::make_input(weight_shape(cc), kInt32, dev(), lw, g, -2, 2);
          Tensor xt = th::make_tensor(x.a, t, dev(), lx), wt = th::make_tensor(w.a, t, dev(), lw);
          th::Input b;
          if (cc.bias != Bias::None) {
            b = th::make_input(bias_shape(cc), kInt32, dev(), Layout::Contiguous, g, -8, 8);
            b.t = th::make_tensor(b.a, t, dev());
          }
          ref::Array want = ref::linear(x.a, w.a, b.t.defined() ? &b.a : nullptr);
          for (double& v : want.v) v = th::round_to_dtype(v, t);
          ASSERT_TRUE(th::expect_equal(linear(xt, wt, b.t), want));
        }))
          return;
      }
    }
  }
}

// On the GEMV path (one row, bias [n]) the bias is added in float32 before the one rounding:
// x . w = 1 + s/2 + s/8 (s = the dtype's spacing at 1) and bias -1 give s/2 + s/8 exactly,
// where rounding the product first gives 1 + s and then s.
TEST_P(Linear, GemvFusedBiasRoundsOnce) {
  for (DType t : {kBFloat16, kFloat16}) {
    const double s = 2 * th::unit_roundoff(t);
    for (int64_t k : {3, 65, 1000}) {
      for (const Shape& xs : {Shape{k}, Shape{1, k}, Shape{1, 1, k}}) {
        SCOPED_TRACE(th::dtype_str(t) + " x " + ref::shape_to_string(xs));
        const int64_t n = 9;
        ref::Array x(xs, 0.0), w({n, k}, 1.0), b({n}, -1.0);
        x.v[0] = 1;
        x.v[static_cast<size_t>(k / 2)] = s / 2;
        x.v[static_cast<size_t>(k - 1)] = s / 8;
        Tensor y = linear(th::make_tensor(x, t, dev()), th::make_tensor(w, t, dev()), th::make_tensor(b, t, dev()));
        Shape ys(xs.begin(), xs.end() - 1);
        ys.push_back(n);
        EXPECT_TRUE(th::expect_equal(y, ref::Array(ys, s / 2 + s / 8)));
      }
    }
  }
}

TEST_P(Linear, Float32AccumulatesInFloat32) {
  // (1 + 2^-20)^2 summed over k = 15 is 15 (1 + 2^-19), exact in float32; a TF32 or bfloat16
  // multiply gives 15. One row (GEMV) and 16 rows (GEMM).
  const int64_t k = 15;
  for (int64_t m : {1, 16}) {
    ref::Array x({m, k}, 1.0 + std::ldexp(1.0, -20)), w({3, k}, 1.0 + std::ldexp(1.0, -20));
    Tensor y = linear(th::make_tensor(x, kFloat32, dev()), th::make_tensor(w, kFloat32, dev()));
    EXPECT_TRUE(th::expect_equal(y, ref::Array({m, 3}, static_cast<float>(k * (1.0 + std::ldexp(1.0, -19)))))) << "m " << m;
  }
}

// A long k through the GEMV and the GEMM (a transposed weight, and 16 rows) on integers up to
// 16 (31 weight rows: passes of four rows and a tail): every partial sum is an integer below 2^24, exact in a float32 accumulator in any order,
// so the result is the exact sum rounded once; partial sums of magnitude ~10^3 rounded to
// bfloat16 / float16 on the way (a split-k reduced in the output type, a low-precision
// accumulator) give other values. The gamma_k bound of the random tables is too loose at this
// k to see that.
TEST_P(Linear, ExactLongKOnIntegers) {
  th::CaseLoop loop;
  th::Gen g(4008);
  for (DType t : {kBFloat16, kFloat16, kFloat32}) {
    for (int64_t m : {1, 4, 16}) {
      for (int64_t k : {1000, 4096, 8235}) {  // 8235: the CPU's four-rows-per-pass GEMV (k >= 8192) with a tail
        for (Layout lw : {Layout::Transposed, Layout::Contiguous}) {
          const LinearCase c{{m, k}, 31, Bias::None};
          if (!loop.run("exact " + linear_name(c, t, Layout::Contiguous, lw, dev()), [&] {
            th::Input x = th::make_input(c.x, kInt32, dev(), Layout::Contiguous, g, -16, 16);
            th::Input w = th::make_input(weight_shape(c), kInt32, dev(), lw, g, -16, 16);
            ref::Array want = ref::linear(x.a, w.a);
            for (double& v : want.v) v = th::round_to_dtype(v, t);
            ASSERT_TRUE(th::expect_equal(linear(th::make_tensor(x.a, t, dev()), th::make_tensor(w.a, t, dev(), lw)), want));
          }))
            return;
        }
      }
    }
  }
}

// The CUDA GEMV's block shapes (H200, 132 SMs): k <= 2048 takes k / 256 warps (520: two warps
// and a tail step; 1024: four), longer k up to 16 (2880: 11) up to one block per SM; by weight
// rows n 1000 (one wave), 2000 (8-warp blocks, one wave), 3500 (4 blocks per SM when k <= 2048), 6000
// (several waves).
TEST_P(Linear, GemvBlockShapesExactOnIntegers) {
  th::CaseLoop loop;
  th::Gen g(4009);
  for (DType t : {kBFloat16, kFloat16}) {
    for (int64_t n : {1000, 2000, 3500, 6000}) {
      for (int64_t k : {520, 1024, 2048, 2056, 2880}) {
        const int64_t m = n == 3500 ? 3 : 1;
        const LinearCase c{{m, k}, n, Bias::None};
        if (!loop.run("exact " + linear_name(c, t, Layout::Contiguous, Layout::Contiguous, dev()), [&] {
          th::Input x = th::make_input(c.x, kInt32, dev(), Layout::Contiguous, g, -16, 16);
          th::Input w = th::make_input(weight_shape(c), kInt32, dev(), Layout::Contiguous, g, -16, 16);
          ref::Array want = ref::linear(x.a, w.a);
          for (double& v : want.v) v = th::round_to_dtype(v, t);
          ASSERT_TRUE(th::expect_equal(linear(th::make_tensor(x.a, t, dev()), th::make_tensor(w.a, t, dev())), want));
        }))
          return;
      }
    }
  }
}

// 65536+ rows: a 16-bit row index or a grid dim past 65535 breaks here.
TEST_P(Linear, MoreThan65536Rows) {
  th::CaseLoop loop;
  th::Gen g(4004);
  const LinearCase c{{70000, 16}, 8, Bias::Vec};
  for (const auto& [t, lx] : {std::pair{kFloat32, Layout::Contiguous}, std::pair{kFloat32, Layout::RowPadded},
                              std::pair{kBFloat16, Layout::Offset}}) {
    if (!loop.run(linear_name(c, t, lx, Layout::Contiguous, dev()), [&] {
      th::Input x = th::make_input(c.x, t, dev(), lx, g, -1, 1);
      th::Input w = th::make_input(weight_shape(c), t, dev(), Layout::Contiguous, g, -1, 1);
      th::Input b = th::make_input(bias_shape(c), t, dev(), Layout::Contiguous, g, -1, 1);
      Tensor y = linear(x.t, w.t, b.t);
      ASSERT_TRUE(th::expect_shape(y, out_shape(c), t));
      ASSERT_TRUE(check_linear(y, x.a, w.a, &b.a, t));
    }))
      return;
  }
}

// lm_head-like: n = 151936 (Qwen's vocabulary) with a small k, one row and two.
TEST_P(Linear, LmHeadWideN) {
  th::CaseLoop loop;
  th::Gen g(4005);
  for (const auto& [t, c] : {std::pair{kFloat32, LinearCase{{1, 16}, 151936, Bias::None}},
                             std::pair{kFloat32, LinearCase{{2, 1, 16}, 151936, Bias::Vec}},
                             std::pair{kBFloat16, LinearCase{{1, 1, 8}, 151936, Bias::Vec}}}) {
    if (!loop.run(linear_name(c, t, Layout::Contiguous, Layout::Contiguous, dev()), [&] {
      th::Input x = th::make_input(c.x, t, dev(), Layout::Contiguous, g, -1, 1);
      th::Input w = th::make_input(weight_shape(c), t, dev(), Layout::Contiguous, g, -1, 1);
      th::Input b;
      if (c.bias != Bias::None) b = th::make_input(bias_shape(c), t, dev(), Layout::Contiguous, g, -1, 1);
      Tensor y = linear(x.t, w.t, b.t);
      ASSERT_TRUE(th::expect_shape(y, out_shape(c), t));
      ASSERT_TRUE(check_linear(y, x.a, w.a, b.t.defined() ? &b.a : nullptr, t));
    }))
      return;
  }
}

TEST_P(Linear, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor x = zeros({2, 3}, f), w = zeros({4, 3}, f), b = zeros({4}, f);
  // dtypes
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x, w.to(kBFloat16)));
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x.to(kFloat16), w));
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x.to(kInt32), w.to(kInt32)));
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x.to(kInt64), w.to(kInt64), b.to(kInt64)));
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x.to(kFloat8_e4m3fn), w.to(kFloat8_e4m3fn)));
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x, w, b.to(kFloat64)));
  EXPECT_THROWS_OP(DTypeError, "linear", linear(x.to(kBFloat16), w.to(kBFloat16), b));
  // shapes
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, zeros({4, 5}, f)));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, zeros({5}, f)));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, zeros({2, 4, 3}, f)));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, zeros({}, f)));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(zeros({}, f), w));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(zeros({2, 0}, f), w));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, w, zeros({5}, f)));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, w, zeros({3, 4}, f)));
  EXPECT_THROWS_OP(ShapeError, "linear", linear(x, w, zeros({2, 2, 4}, f)));  // broadcasts, but not to [2, 4]
  EXPECT_THROWS_OP(ShapeError, "linear", linear(zeros({0, 3}, f), w, zeros({3}, f)));  // checked before the empty early out
  // undefined tensors (an undefined bias is "no bias")
  EXPECT_THROWS_OP(Error, "linear", linear(Tensor(), w));
  EXPECT_THROWS_OP(Error, "linear", linear(x, Tensor()));
  EXPECT_TRUE(th::expect_equal(linear(x, w, Tensor()), ref::Array({2, 4}, 0.0)));
  if (dev().is_cuda()) {
    const TensorOptions c = TensorOptions(kFloat32);
    EXPECT_THROWS_OP(DeviceError, "linear", linear(x, zeros({4, 3}, c)));
    EXPECT_THROWS_OP(DeviceError, "linear", linear(x, w, zeros({4}, c)));
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Linear);

// ---- CUDA graph ------------------------------------------------------------------------------
// One GEMV call with a fused bias captured on a side stream; new values copied into the same
// inputs; the replay must equal an eager call on them bit for bit (and the reference).
TEST(LinearGraph, GemvWithBiasReplaysNewInputs) {
  ANVIL_REQUIRE_CUDA();
  const Device g(kCUDA, 0);
  Stream s = Stream::create(g);
  StreamGuard guard(s);
  th::Gen gen(4006);
  for (DType t : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(th::dtype_str(t));
    const int64_t k = 1000, n = 129;
    th::Input x = th::make_input({1, k}, t, g, Layout::Contiguous, gen, -1, 1);
    th::Input w = th::make_input({n, k}, t, g, Layout::Contiguous, gen, -1, 1);
    th::Input b = th::make_input({n}, t, g, Layout::Contiguous, gen, -1, 1);
    Tensor warm = linear(x.t, w.t, b.t);  // first-call setup outside the capture
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    Tensor y = linear(x.t, w.t, b.t);
    graph.capture_end();
    for (int round = 0; round < 3; ++round) {
      th::Input nx = th::make_input({1, k}, t, g, Layout::Contiguous, gen, -1, 1);
      th::Input nw = th::make_input({n, k}, t, g, Layout::Contiguous, gen, -1, 1);
      th::Input nb = th::make_input({n}, t, g, Layout::Contiguous, gen, -1, 1);
      x.t.copy_(nx.t);
      w.t.copy_(nw.t);
      b.t.copy_(nb.t);
      graph.replay();
      s.synchronize();
      Tensor eager = linear(x.t, w.t, b.t);
      s.synchronize();
      EXPECT_EQ(th::to_bits(y), th::to_bits(eager)) << "round " << round;
      EXPECT_TRUE(check_linear(y, nx.a, nw.a, &nb.a, t)) << "round " << round;
    }
    graph.reset();
  }
}

}  // namespace
