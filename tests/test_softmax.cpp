// softmax / log_softmax: one case table (shape x dim x layout x dtype) against the float64
// reference, long rows (151936) and many short rows, the dtype= argument, -inf / NaN rows,
// large offsets that overflow exp without the max shift, errors, and CUDA graph replay.
#include <cmath>
#include <limits>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct SoftmaxCase {
  Shape sizes;
  int64_t dim;
};

// Rows of length 1, 7, 1024 / 1025, 2048 / 2049, 4096; inner > 1 (dim 0 or middle); negative
// dims; empty and 0-dim inputs.
const std::vector<SoftmaxCase>& table_cases() {
  static const std::vector<SoftmaxCase> v = {
      {{0}, 0},          {{3, 0}, 1},       {{3, 0}, 0},         {{0, 5}, 1},          {{0, 5}, -2},
      {{1}, 0},          {{5, 1}, 1},       {{1, 1, 1}, 1},      {{7}, 0},             {{3, 7}, -1},
      {{2, 1024}, 1},    {{2, 1025}, -1},   {{2, 2048}, 1},      {{2, 2049}, 1},       {{2, 4096}, -1},
      {{4, 1000}, -1},   {{7, 33}, 0},      {{33, 7, 3}, 1},     {{33, 7, 3}, 0},      {{33, 7, 3}, -1},
      {{2, 3, 5, 7}, 2}, {{2, 3, 5, 7}, -3}, {{1025, 3}, 0},     {{3, 2049, 2}, 1},    {{}, 0},
      {{}, -1},
  };
  return v;
}

// One row of Qwen's vocabulary and 2^16 + 1; many short rows (a batch of attention scores)
// and the same through the strided (inner > 1) path.
const std::vector<SoftmaxCase>& long_row_cases() {
  static const std::vector<SoftmaxCase> v = {{{1, 151936}, 1}, {{65537}, 0}};
  return v;
}
const std::vector<SoftmaxCase>& many_row_cases() {
  static const std::vector<SoftmaxCase> v = {{{4096, 128}, 1}, {{128, 4096}, 0}};
  return v;
}

int64_t row_length(const Shape& s, int64_t dim) { return s.empty() ? 1 : s[static_cast<size_t>(ref::wrap_dim(dim, static_cast<int64_t>(s.size())))]; }

// y = exp(x - m) / s: the float32 value is within e u_C relative of the exact one, with
//   e = 2 k_exp (exp of the element, and of each term of s) + 2 |x - m| (the rounded
//       argument x - m, maybe scaled by log2 e) + 4 (sqrt(n) + 1) (the sum of n positive terms)
// and rounding it once to the output adds u_O: rtol = u_O + 2 e u_C. log_softmax: (x - m) -
// log s, absolute error 2 u_C (|x - m| + (k + 1) |log s| + k + 4 (sqrt(n) + 1)), plus 2 u_O |want|.
::testing::AssertionResult check_softmax(const Tensor& y, const ref::Array& x, int64_t dim, DType in, DType out, bool log) {
  const ref::Array want = log ? ref::log_softmax(x, dim) : ref::softmax(x, dim);
  const ref::SoftmaxScale sc = ref::softmax_scale(x, dim);
  const double n = static_cast<double>(row_length(x.sizes, dim));
  const double uc = std::max(th::unit_roundoff(th::compute_dtype(in)), th::unit_roundoff(th::compute_dtype(out)));
  const double uo = th::unit_roundoff(out), k = 8;
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i) {
    const double spread = std::isfinite(sc.spread.v[i]) ? sc.spread.v[i] : 0.0;  // -inf entries: exactly 0 / -inf
    const double lse = std::isfinite(sc.log_sum.v[i]) ? std::fabs(sc.log_sum.v[i]) : 0.0;
    const double sum_err = 4 * (std::sqrt(n) + 1);
    if (log) extra.v[i] = 2 * uc * (spread + (k + 1) * lse + k + sum_err);
    else extra.v[i] = 2 * uc * (2 * k + 2 * spread + sum_err) * std::fabs(want.v[i]);
  }
  return th::expect_close(y, want, th::Tol{th::underflow_atol(out), log ? 2 * uo : uo}, &extra);
}

std::string sm_name(const SoftmaxCase& c, DType t, Layout l, Device d) {
  return th::case_name(c.sizes, t, l, d) + " dim " + std::to_string(c.dim);
}

class Softmax : public th::DeviceTest {
 protected:
  // float32 in every layout of `f32_layouts`, the other dtypes contiguous and transposed
  // (only contiguous when `lowp_contiguous`: their inputs cost most to build).
  void run_cases(const std::vector<SoftmaxCase>& cases, const std::vector<DType>& dtypes,
                 const std::vector<Layout>& f32_layouts, bool lowp_contiguous, uint64_t seed) {
    static const std::vector<Layout> few = {Layout::Contiguous, Layout::Transposed}, one = {Layout::Contiguous};
    th::CaseLoop loop;
    th::Gen g(seed);
    for (const SoftmaxCase& c : cases) {
      for (DType t : dtypes) {
        for (Layout l : t == kFloat32 ? f32_layouts : lowp_contiguous ? one : few) {
          if (!loop.run(sm_name(c, t, l, dev()), [&] {
            th::Input x = th::make_input(c.sizes, t, dev(), l, g, -10, 10);
            const auto before = th::storage_bits(x.t);
            for (bool log : {false, true}) {
              Tensor y = log ? log_softmax(x.t, c.dim) : softmax(x.t, c.dim);
              ASSERT_TRUE(th::expect_shape(y, c.sizes, t));
              ASSERT_EQ(y.device(), dev());
              ASSERT_TRUE(check_softmax(y, x.a, c.dim, t, t, log)) << (log ? "log_softmax" : "softmax");
            }
            ASSERT_TRUE(th::storage_unchanged(x.t, before));
          }))
            return;
        }
      }
    }
  }
};

TEST_P(Softmax, Table) {
  run_cases(table_cases(), {kFloat32, kBFloat16, kFloat16, kFloat64}, th::all_layouts(), false, 5000);
}

TEST_P(Softmax, LongRows) {
  run_cases(long_row_cases(), {kFloat32, kBFloat16, kFloat16}, {Layout::Contiguous, Layout::Strided}, true, 5001);
}

TEST_P(Softmax, ManyShortRows) {
  run_cases(many_row_cases(), {kFloat32, kBFloat16}, {Layout::Contiguous, Layout::Transposed}, true, 5006);
}

TEST_P(Softmax, ZeroDimIsOneAndZero) {
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    Tensor x = th::make_tensor(ref::Array({}, 3.5), t, dev());
    for (int64_t dim : {0, -1}) {
      EXPECT_TRUE(th::expect_equal(softmax(x, dim), ref::Array({}, 1.0))) << th::dtype_str(t);
      EXPECT_TRUE(th::expect_equal(log_softmax(x, dim), ref::Array({}, 0.0))) << th::dtype_str(t);
    }
  }
}

// torch's dtype=: the input is cast first (integers included), the output has the dtype.
TEST_P(Softmax, DTypeArgument) {
  th::CaseLoop loop;
  th::Gen g(5002);
  struct DCase {
    DType in, out;
    Shape sizes;
    int64_t dim;
  };
  const std::vector<DCase> cases = {
      {kBFloat16, kFloat32, {4, 1025}, 1}, {kFloat16, kFloat32, {33, 7, 3}, 1}, {kBFloat16, kFloat32, {1, 151936}, -1},
      {kFloat32, kFloat64, {3, 129}, 1},   {kFloat32, kBFloat16, {3, 2049}, 1}, {kFloat64, kFloat32, {7, 33}, 0},
      {kBFloat16, kBFloat16, {2, 65}, 1},  {kInt64, kFloat32, {5, 300}, 1},     {kInt32, kFloat64, {33, 7}, 0},
      {kInt64, kBFloat16, {4, 129}, -1},   {kUInt8, kFloat32, {2, 17}, 1},
  };
  for (const DCase& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Strided}) {
      if (!loop.run(th::case_name(c.sizes, c.in, l, dev()) + " dtype=" + th::dtype_str(c.out), [&] {
        th::Input x = th::make_input(c.sizes, c.in, dev(), l, g, -10, 10);
        if (is_integral(c.in)) x = th::make_input(c.sizes, c.in, dev(), l, g, is_unsigned(c.in) ? 0 : -12, 12);
        ref::Array xa = x.a;  // the input cast to the output dtype first (exact for these integers)
        for (double& v : xa.v) v = is_integral(c.in) ? th::round_to_dtype(v, c.out) : v;
        for (bool log : {false, true}) {
          Tensor y = log ? log_softmax(x.t, c.dim, c.out) : softmax(x.t, c.dim, c.out);
          ASSERT_TRUE(th::expect_shape(y, c.sizes, c.out));
          ASSERT_TRUE(check_softmax(y, xa, c.dim, is_integral(c.in) ? c.out : c.in, c.out, log)) << (log ? "log_softmax" : "softmax");
        }
      }))
        return;
    }
  }
}

// -inf entries (masked scores) give exactly 0 / -inf; a row of all -inf is NaN (PyTorch CPU);
// a NaN or a +inf anywhere in a row makes the row NaN. At the first, a middle and the last position, so
// the vector body and the tails both see them.
TEST_P(Softmax, InfAndNaNRows) {
  th::CaseLoop loop;
  th::Gen g(5003);
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    for (int64_t n : {1, 7, 33, 1025, 4099, 20011}) {  // 20011: CUDA's split rows (parts of 2048)
      for (Layout l : {Layout::Contiguous, Layout::Transposed}) {
        if (!loop.run(th::case_name({7, n}, t, l, dev()) + " -inf / NaN rows", [&] {
          ref::Array a = th::random_array({7, n}, t, g, -5, 5);
          auto at = [&](int64_t r, int64_t j) -> double& { return a.v[static_cast<size_t>(r * n + j)]; };
          // row 0: -inf at first / middle / last (kept finite somewhere unless n == 1)
          if (n > 1) {
            at(0, 0) = -kInf;
            at(0, n / 2) = -kInf;
            at(0, n - 1) = -kInf;
            if (n == 3 || n / 2 == n - 1 || n / 2 == 0) at(0, 1) = 1.0;
            for (int64_t j = 0; j < n / 3; ++j) at(0, j) = -kInf;  // long rows: whole parts of -inf
          }
          for (int64_t j = 0; j < n; ++j) at(1, j) = -kInf;  // row 1: all -inf
          at(2, n - 1) = kNaN;                                // row 2: NaN last
          at(3, n / 2) = kNaN;                                // row 3: NaN in the middle
          for (int64_t j = 1; j < n; j += 2) at(4, j) = -kInf;  // row 4: every other -inf
          at(5, 0) = kNaN;                                    // row 5: NaN first
          if (n > 1) at(5, n - 1) = -kInf;
          at(6, n / 2) = kInf;                                // row 6: +inf (max - max is NaN)
          Tensor x = th::make_tensor(a, t, dev(), l);
          for (bool log : {false, true}) {
            Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
            ASSERT_TRUE(check_softmax(y, a, 1, t, t, log)) << (log ? "log_softmax" : "softmax");
            ref::Array got = th::to_array(y);
            for (int64_t j = 0; j < n; ++j) {
              ASSERT_TRUE(std::isnan(got.v[static_cast<size_t>(1 * n + j)])) << "all -inf row at " << j;
              ASSERT_TRUE(std::isnan(got.v[static_cast<size_t>(2 * n + j)])) << "NaN row at " << j;
              ASSERT_TRUE(std::isnan(got.v[static_cast<size_t>(6 * n + j)])) << "+inf row at " << j;
            }
            if (n > 1) {
              ASSERT_EQ(got.v[static_cast<size_t>(n - 1)], log ? -kInf : 0.0) << "-inf entry";
            }
          }
        }))
          return;
      }
    }
  }
}

// Offsets of +-1e4: exp(1e4) overflows every float type, so only a max-shifted kernel passes;
// also a row whose maximum comes last, after many smaller values.
TEST_P(Softmax, BigOffsetsDoNotOverflow) {
  th::CaseLoop loop;
  th::Gen g(5004);
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    for (double offset : {1e4, -1e4, 80.0, -80.0}) {
      for (int64_t n : {7, 1025, 4096}) {
        if (!loop.run(th::case_name({3, n}, t, Layout::Contiguous, dev()) + " offset " + std::to_string(offset), [&] {
          ref::Array a = th::random_array({3, n}, t, g, offset, offset + 20);
          for (int64_t j = 0; j < n; ++j)  // row 2 increasing: the running maximum changes at every step
            a.v[static_cast<size_t>(2 * n + j)] = th::round_to_dtype(offset + 20.0 * static_cast<double>(j) / static_cast<double>(n), t);
          Tensor x = th::make_tensor(a, t, dev());
          for (bool log : {false, true}) {
            Tensor y = log ? log_softmax(x, -1) : softmax(x, -1);
            ASSERT_TRUE(check_softmax(y, a, -1, t, t, log)) << (log ? "log_softmax" : "softmax");
          }
        }))
          return;
      }
    }
  }
}

TEST_P(Softmax, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor x = zeros({2, 3}, f);
  EXPECT_THROWS_OP(DTypeError, "softmax", softmax(x.to(kInt64), 1));
  EXPECT_THROWS_OP(DTypeError, "log_softmax", log_softmax(x.to(kInt32), 1));
  EXPECT_THROWS_OP(DTypeError, "softmax", softmax(x.to(kBool), 0));
  EXPECT_THROWS_OP(DTypeError, "softmax", softmax(x, 1, kInt32));
  EXPECT_THROWS_OP(DTypeError, "log_softmax", log_softmax(x, 1, kFloat8_e4m3fn));
  EXPECT_THROWS_OP(DTypeError, "softmax", softmax(x.to(kFloat8_e5m2), 1));
  EXPECT_THROWS_OP(IndexError, "softmax", softmax(x, 2));
  EXPECT_THROWS_OP(IndexError, "softmax", softmax(x, -3));
  EXPECT_THROWS_OP(IndexError, "log_softmax", log_softmax(x, 5));
  EXPECT_THROWS_OP(IndexError, "softmax", softmax(zeros({}, f), 1));
  EXPECT_THROWS_OP(IndexError, "log_softmax", log_softmax(zeros({0}, f), -2));
  EXPECT_THROWS_OP(Error, "softmax", softmax(Tensor(), 0));
  EXPECT_THROWS_OP(Error, "log_softmax", log_softmax(Tensor(), 0));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Softmax);

// ---- CUDA graph ------------------------------------------------------------------------------
TEST(SoftmaxGraph, ReplaysNewInputs) {
  ANVIL_REQUIRE_CUDA();
  const Device g(kCUDA, 0);
  Stream s = Stream::create(g);
  StreamGuard guard(s);
  th::Gen gen(5005);
  for (const Shape& sizes : {Shape{1, 151936}, Shape{4, 1000}}) {
    for (DType t : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(th::dtype_str(t) + " " + ref::shape_to_string(sizes));
      th::Input x = th::make_input(sizes, t, g, Layout::Contiguous, gen, -10, 10);
      Tensor warm = softmax(x.t, -1), warm_log = log_softmax(x.t, -1);
      s.synchronize();
      cuda::Graph graph;
      graph.capture_begin();
      Tensor y = softmax(x.t, -1);
      Tensor ly = log_softmax(x.t, -1);
      graph.capture_end();
      for (int round = 0; round < 3; ++round) {
        th::Input nx = th::make_input(sizes, t, g, Layout::Contiguous, gen, -10 - round, 10 + 5 * round);
        x.t.copy_(nx.t);
        graph.replay();
        s.synchronize();
        Tensor ey = softmax(x.t, -1), ely = log_softmax(x.t, -1);
        s.synchronize();
        EXPECT_EQ(th::to_bits(y), th::to_bits(ey)) << "softmax, round " << round;
        EXPECT_EQ(th::to_bits(ly), th::to_bits(ely)) << "log_softmax, round " << round;
        EXPECT_TRUE(check_softmax(y, nx.a, -1, t, t, false)) << "round " << round;
        EXPECT_TRUE(check_softmax(ly, nx.a, -1, t, t, true)) << "round " << round;
      }
      graph.reset();
    }
  }
}

}  // namespace
