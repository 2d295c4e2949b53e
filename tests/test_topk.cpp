// topk and sample. topk: one case table (shape x dim x k x dtype x layout x largest x sorted)
// against the float64 reference, long rows (151936) through every kernel path, the router shape,
// ties, NaN / inf / -0 placement, 0-dim, errors. sample: greedy and top_k = 1 against argmax,
// drawn frequencies against the reference distribution (binomial tolerance), excluded tokens,
// the counter contract (seed, counter + row; counter += rows), CPU == CUDA, errors, CUDA graphs.
#include <algorithm>
#include <cmath>
#include <limits>

#include "harness.h"
#include "reference/ref_topk.h"

namespace {

using namespace anvil;
using th::Layout;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- topk ------------------------------------------------------------------------------------

struct TopkCase {
  Shape sizes;
  int64_t dim;
};

// Rows of length 1, 7, 128, 1000; first / last / middle dims; empty inputs.
const std::vector<TopkCase>& table_cases() {
  static const std::vector<TopkCase> v = {
      {{1}, 0},          {{7}, 0},       {{7}, -1},       {{128}, 0},      {{1000}, 0},
      {{5, 1}, 1},       {{3, 7}, 1},    {{3, 7}, 0},     {{4, 128}, -1},  {{4, 1000}, 1},
      {{1000, 3}, 0},    {{3, 7, 5}, 1}, {{2, 33, 3}, 1}, {{33, 7, 3}, 0}, {{2, 3, 1000}, 2},
      {{2, 1000, 3}, 1}, {{0}, 0},       {{3, 0}, 1},     {{0, 5}, 1},     {{3, 0, 2}, 0},
  };
  return v;
}

int64_t dim_size(const Shape& s, int64_t dim) {
  return s[static_cast<size_t>(ref::wrap_dim(dim, static_cast<int64_t>(s.size())))];
}

// k = 0, 1, 8, 33, 100, size(dim), as far as they fit.
std::vector<int64_t> ks_for(int64_t n, std::vector<int64_t> ks = {0, 1, 8, 33, 100}) {
  ks.push_back(n);
  std::vector<int64_t> out;
  for (int64_t k : ks)
    if (k <= n && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  return out;
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Sorted: values and indices equal the reference's (the order is total: ties by index).
// Unsorted: per row the same index set, and each value is x at its index.
// The first k along dim of the reference's full order.
ref::Array first_k(const ref::Array& a, int64_t dim, int64_t k) {
  const int64_t d = ref::wrap_dim(dim, a.dim());
  Shape sizes = a.sizes;
  sizes[static_cast<size_t>(d)] = k;
  ref::Array out(sizes);
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(d) + 1; i < sizes.size(); ++i) inner *= sizes[i];
  if (out.numel() == 0) return out;
  const int64_t n = a.sizes[static_cast<size_t>(d)], outer = out.numel() / (k * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = 0; s < k; ++s)
      for (int64_t i = 0; i < inner; ++i)
        out.v[static_cast<size_t>((o * k + s) * inner + i)] = a.v[static_cast<size_t>((o * n + s) * inner + i)];
  return out;
}

// `full`: the reference topk with k = size(dim).
::testing::AssertionResult check_topk(const Tensor& values, const Tensor& indices, const ref::Array& x,
                                      const ref::TopkResult& full, int64_t k, int64_t dim, bool sorted, DType t) {
  const ref::TopkResult want{first_k(full.values, dim, k), first_k(full.indices, dim, k)};
  if (auto r = th::expect_shape(values, want.values.sizes, t); !r) return r << " (values)";
  if (auto r = th::expect_shape(indices, want.indices.sizes, kInt64); !r) return r << " (indices)";
  if (sorted) {
    if (auto r = th::expect_equal(values, want.values); !r) return r << " (values)";
    return th::expect_equal(indices, want.indices) << " (indices)";
  }
  const ref::Array gv = th::to_array(values), gi = th::to_array(indices);
  const int64_t d = ref::wrap_dim(dim, x.dim());
  Shape row_sizes = x.sizes;
  row_sizes[static_cast<size_t>(d)] = 1;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  bool failed = false;
  ref::for_each_index(row_sizes, [&](const Shape& idx) {
    if (failed) return;
    Shape at = idx, xat = idx;
    std::vector<double> got, exp;
    for (int64_t s = 0; s < k; ++s) {
      at[static_cast<size_t>(d)] = s;
      got.push_back(gi.at(at));
      exp.push_back(want.indices.at(at));
      xat[static_cast<size_t>(d)] = static_cast<int64_t>(gi.at(at));
      if (gi.at(at) < 0 || gi.at(at) >= static_cast<double>(x.sizes[static_cast<size_t>(d)]) ||
          !same_value(gv.at(at), x.at(xat))) {
        failed = true;
        result = ::testing::AssertionFailure() << "row " << ref::shape_to_string(idx) << " slot " << s << ": index "
                                               << gi.at(at) << " value " << gv.at(at) << " does not match the input";
        return;
      }
    }
    std::sort(got.begin(), got.end());
    std::sort(exp.begin(), exp.end());
    if (got != exp) {
      failed = true;
      result = ::testing::AssertionFailure() << "row " << ref::shape_to_string(idx) << ": index set differs";
    }
  });
  return result;
}

// Values for dtype t: floats in [-10, 10) (bfloat16 / float16 rounding makes ties), integers in
// narrow ranges (many ties), int64 over 2^50.
th::Input topk_input(const Shape& sizes, DType t, Device dev, Layout l, th::Gen& g) {
  switch (t) {
    case kUInt8:
      return th::make_input(sizes, t, dev, l, g, 0, 255);
    case kInt16:
      return th::make_input(sizes, t, dev, l, g, -300, 300);
    case kInt32:
      return th::make_input(sizes, t, dev, l, g, -50, 50);
    case kInt64:
      return th::make_input(sizes, t, dev, l, g, -1e15, 1e15);
    default:
      return th::make_input(sizes, t, dev, l, g, -10, 10);
  }
}

class Topk : public th::DeviceTest {
 protected:
  void run_cases(const std::vector<TopkCase>& cases, const std::vector<DType>& dtypes,
                 const std::vector<Layout>& layouts, const std::vector<int64_t>& ks, uint64_t seed,
                 bool inject_nan = false) {
    th::CaseLoop loop;
    th::Gen g(seed);
    for (const TopkCase& c : cases) {
      for (DType t : dtypes) {
        for (Layout l : t == kFloat32 ? layouts : std::vector<Layout>{Layout::Contiguous}) {
          if (!loop.run(th::case_name(c.sizes, t, l, dev()) + " dim " + std::to_string(c.dim), [&] {
                th::Input x = topk_input(c.sizes, t, dev(), l, g);
                if (inject_nan && is_floating_point(t)) {  // a few NaN and inf anywhere in the rows
                  for (size_t i = 0; i < x.a.v.size(); i += 9973) x.a.v[i] = kNaN;
                  for (size_t i = 77; i < x.a.v.size(); i += 30011) x.a.v[i] = kInf;
                  x.t = th::make_tensor(x.a, t, dev(), l);
                }
                const auto before = th::storage_bits(x.t);
                const int64_t n = dim_size(c.sizes, c.dim);
                for (bool largest : {true, false}) {
                  const ref::TopkResult full = ref::topk(x.a, n, c.dim, largest);
                  for (int64_t k : ks_for(n, ks)) {
                    for (bool sorted : {true, false}) {
                      auto [values, indices] = topk(x.t, k, c.dim, largest, sorted);
                      ASSERT_EQ(values.device(), dev());
                      ASSERT_EQ(indices.device(), dev());
                      ASSERT_TRUE(check_topk(values, indices, x.a, full, k, c.dim, sorted, t))
                          << "k " << k << (largest ? " largest" : " smallest") << (sorted ? " sorted" : " unsorted");
                    }
                  }
                }
                ASSERT_TRUE(th::storage_unchanged(x.t, before));
              }))
            return;
        }
      }
    }
  }
};

TEST_P(Topk, Table) {
  run_cases(table_cases(), {kFloat32, kBFloat16, kFloat16, kFloat64, kInt32, kInt64, kInt16, kUInt8},
            {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}, {0, 1, 8, 33, 100}, 6000);
}

// One vocabulary row: k through every CUDA path (two-stage select up to 64, one block per row
// up to 1024, a full sort above when sorted), with NaN and inf in a second pass.
TEST_P(Topk, LongRows) {
  const std::vector<TopkCase> cases = {{{1, 151936}, -1}, {{2, 151936}, 1}, {{151936}, 0}};
  const std::vector<int64_t> ks = {1, 8, 50, 64, 65, 1000, 2000};
  run_cases(cases, {kFloat32, kBFloat16}, {Layout::Contiguous, Layout::Strided}, ks, 6001);
  run_cases({{{2, 151936}, 1}}, {kFloat32, kFloat16, kInt32}, {Layout::Contiguous}, ks, 6002, true);
}

// MoE routers: [tokens, experts] with k = 8; also rows of 512 / 513 around the warp path's limit.
TEST_P(Topk, RouterShapes) {
  const std::vector<TopkCase> cases = {{{4096, 128}, -1}, {{1, 128}, 1}, {{64, 512}, 1}, {{64, 513}, 1}, {{9, 60}, 1}};
  run_cases(cases, {kFloat32, kBFloat16}, {Layout::Contiguous, Layout::Transposed}, {1, 2, 8, 32, 33}, 6003);
}

// Equal values give the lower index first, largest and smallest, on every path.
TEST_P(Topk, TiesTakeTheLowerIndex) {
  th::CaseLoop loop;
  for (int64_t n : {7, 128, 1000, 20000}) {
    for (DType t : {kFloat32, kBFloat16, kInt32}) {
      if (!loop.run(th::case_name({3, n}, t, Layout::Contiguous, dev()), [&] {
            ref::Array a({3, n}, 2.0);  // row 0 all equal; row 1 two values; row 2 equal except the last
            for (int64_t j = 0; j < n; ++j) a.v[static_cast<size_t>(n + j)] = (j % 3 == 0) ? 5.0 : 1.0;
            a.v[static_cast<size_t>(3 * n - 1)] = 7.0;
            Tensor x = th::make_tensor(a, t, dev());
            for (int64_t k : ks_for(n, {1, 8, 50})) {
              for (bool largest : {true, false}) {
                auto [values, indices] = topk(x, k, 1, largest, true);
                ASSERT_TRUE(check_topk(values, indices, a, ref::topk(a, n, 1, largest), k, 1, true, t))
                    << "k " << k << " largest " << largest;
                const ref::Array gi = th::to_array(indices);
                for (int64_t s = 0; s < k; ++s)
                  ASSERT_EQ(gi.v[static_cast<size_t>(s)], static_cast<double>(s)) << "row 0 slot " << s;
              }
            }
          }))
        return;
    }
  }
}

// NaN ranks above every number: first when largest, last when smallest; -0 ties with +0.
TEST_P(Topk, NaNInfAndSignedZero) {
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    SCOPED_TRACE(th::dtype_str(t));
    const ref::Array a({8}, 0.0);
    ref::Array x = a;
    x.v = {1.0, kNaN, 3.0, kNaN, -kInf, kInf, 0.0, -0.0};
    Tensor xt = th::make_tensor(x, t, dev());
    auto [v1, i1] = topk(xt, 8, 0, true, true);
    EXPECT_EQ(th::to_array(i1).v, (std::vector<double>{1, 3, 5, 2, 0, 6, 7, 4}));
    auto [v2, i2] = topk(xt, 8, 0, false, true);
    EXPECT_EQ(th::to_array(i2).v, (std::vector<double>{4, 6, 7, 0, 2, 5, 1, 3}));
    auto [v3, i3] = topk(xt, 3, 0, false, true);
    EXPECT_EQ(th::to_array(i3).v, (std::vector<double>{4, 6, 7}));
    const ref::Array vals = th::to_array(v3);
    EXPECT_FALSE(std::signbit(vals.v[1]));  // the values are the input's elements, -0 kept
    EXPECT_TRUE(std::signbit(vals.v[2]));
    auto [v4, i4] = topk(xt, 2, 0, true, false);
    std::vector<double> got = th::to_array(i4).v;
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<double>{1, 3}));
  }
}

TEST_P(Topk, ZeroDim) {
  for (DType t : {kFloat32, kInt64, kBFloat16}) {
    Tensor x = th::make_tensor(ref::Array({}, 3.0), t, dev());
    for (int64_t k : {0, 1}) {
      for (int64_t dim : {0, -1}) {
        auto [values, indices] = topk(x, k, dim);
        EXPECT_TRUE(th::expect_shape(values, {}, t));
        EXPECT_TRUE(th::expect_equal(values, ref::Array({}, 3.0)));
        EXPECT_TRUE(th::expect_equal(indices, ref::Array({}, 0.0)));
      }
    }
    EXPECT_THROWS_OP(IndexError, "topk", topk(x, 2));
  }
}

TEST_P(Topk, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor x = zeros({2, 5}, f);
  EXPECT_THROWS_OP(IndexError, "topk", topk(x, 6));
  EXPECT_THROWS_OP(IndexError, "topk", topk(x, 3, 0));
  EXPECT_THROWS_OP(IndexError, "topk", topk(x, -1));
  EXPECT_THROWS_OP(IndexError, "topk", topk(x, 1, 2));
  EXPECT_THROWS_OP(IndexError, "topk", topk(x, 1, -3));
  EXPECT_THROWS_OP(IndexError, "topk", topk(zeros({0}, f), 1));
  EXPECT_THROWS_OP(DTypeError, "topk", topk(x.to(kFloat8_e4m3fn), 1));
  EXPECT_THROWS_OP(DTypeError, "topk", topk(x.to(kFloat8_e5m2), 1));
  EXPECT_THROWS_OP(DTypeError, "topk", topk(x.to(kComplex64), 1));
  EXPECT_THROWS_OP(DTypeError, "topk", topk(x.to(kBool), 1));
  EXPECT_THROWS_OP(Error, "topk", topk(Tensor(), 1));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Topk);

// ---- sample ----------------------------------------------------------------------------------

std::vector<double> row_of(const ref::Array& a, int64_t r) {
  const int64_t n = a.sizes.back();
  return std::vector<double>(a.v.begin() + r * n, a.v.begin() + (r + 1) * n);
}

std::string opt_str(const SamplingOptions& o) {
  return "temperature " + std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) + " top_p " +
         std::to_string(o.top_p);
}

// Draws `rows` tokens of the same logits (a broadcast [rows, vocab] view) in one call and checks
// each token's count against rows * p within 5 binomial standard deviations; tokens of
// probability 0 never come up. The kept set must not sit on a rounding boundary of top_p.
::testing::AssertionResult check_frequencies(Device dev, DType t, const std::vector<double>& logits,
                                             const SamplingOptions& o, int64_t rows, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(logits.size());
  ref::Array a({1, n});
  a.v = logits;
  Tensor x = th::make_tensor(a, t, dev).expand({rows, n});
  const std::vector<double> p = ref::sample_probs(logits, o.temperature, o.top_k, o.top_p);
  if (ref::top_p_margin(logits, o.temperature, o.top_k, o.top_p) < 1e-5)
    return ::testing::AssertionFailure() << "test design: the top-p cut is within rounding of a token boundary";
  Tensor state = sampler_state(seed, dev);
  const ref::Array tokens = th::to_array(sample(x, o, state));
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  for (double v : tokens.v) {
    if (v < 0 || v >= static_cast<double>(n)) return ::testing::AssertionFailure() << "token " << v << " out of range";
    ++count[static_cast<size_t>(v)];
  }
  for (int64_t j = 0; j < n; ++j) {
    const double pj = p[static_cast<size_t>(j)], want = static_cast<double>(rows) * pj;
    const double got = static_cast<double>(count[static_cast<size_t>(j)]);
    if (pj == 0 && got > 0)
      return ::testing::AssertionFailure() << "excluded token " << j << " drawn " << got << " times";
    const double tol = 5 * std::sqrt(want * (1 - pj)) + 2;
    if (std::fabs(got - want) > tol)
      return ::testing::AssertionFailure()
             << "token " << j << ": " << got << " draws, expected " << want << " +- " << tol;
  }
  const ref::Array st = th::to_array(state);
  if (st.v[0] != static_cast<double>(seed) || st.v[1] != static_cast<double>(rows))
    return ::testing::AssertionFailure() << "rng_state after the call: {" << st.v[0] << ", " << st.v[1] << "}";
  return ::testing::AssertionSuccess();
}

class Sample : public th::DeviceTest {};

// temperature 0 and top_k = 1 (any temperature) give the argmax: first index on ties, NaN first.
TEST_P(Sample, GreedyAndTopOneAreArgmax) {
  th::CaseLoop loop;
  th::Gen g(6100);
  const std::vector<SamplingOptions> opts = {{0.0, 0, 1.0}, {0.0, 40, 0.3}, {0.7, 1, 1.0}, {3.0, 1, 0.5}};
  for (const Shape& sizes : {Shape{37, 1000}, Shape{151936}, Shape{3, 151936}, Shape{5, 7}, Shape{4, 1}}) {
    for (DType t : {kFloat32, kBFloat16, kFloat16}) {
      if (!loop.run(th::case_name(sizes, t, Layout::Contiguous, dev()), [&] {
            ref::Array a = th::random_array(sizes, t, g, -4, 4);  // 16-bit rounding makes tied maxima
            const int64_t n = sizes.back(), rows = a.numel() / n;
            if (rows > 2) a.v[static_cast<size_t>(2 * n + n / 2)] = kNaN;  // row 2: NaN wins
            Tensor x = th::make_tensor(a, t, dev());
            ref::Array a2 = a;
            a2.sizes = {rows, n};
            const ref::Array want = ref::max_min_dim(a2, 1, false, true).indices;
            for (const SamplingOptions& o : opts) {
              Tensor tok = sample(x, o, sampler_state(11, dev()));
              ASSERT_TRUE(th::expect_shape(tok, sizes.size() == 1 ? Shape{} : Shape{rows}, kInt64));
              ASSERT_EQ(th::to_array(tok).v, want.v) << opt_str(o);
            }
          }))
        return;
    }
  }
}

// Four tokens, 20000 draws in one call, for cuts of every kind.
TEST_P(Sample, FrequenciesMatchTheDistribution) {
  th::CaseLoop loop;
  const std::vector<double> logits = {2.0, 1.0, 0.5, -1.0};  // p = .610 .224 .136 .030 (cumulative .610 .834 .970)
  const std::vector<SamplingOptions> opts = {
      {1.0, 0, 1.0}, {1.0, 0, 0.7}, {1.0, 0, 0.9},  {1.0, 0, 0.5},  {0.5, 0, 1.0}, {2.0, 3, 1.0},
      {1.0, 2, 1.0}, {1.0, 3, 0.8}, {0.7, 0, 0.95}, {4.0, 0, 0.99}, {1.0, 4, 1.0},
  };
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    for (const SamplingOptions& o : opts) {
      if (!loop.run(th::dtype_str(t) + " " + opt_str(o),
                    [&] { ASSERT_TRUE(check_frequencies(dev(), t, logits, o, 20000, 1234)); }))
        return;
    }
  }
}

// A wider row: three likely tokens over 1997 unlikely ones (both paths of the full row on
// CUDA: index order with no cut, a sort for top_p alone or top_k > 1024).
TEST_P(Sample, FrequenciesOnAWideRow) {
  th::CaseLoop loop;
  th::Gen g(6101);
  std::vector<double> logits(2000);
  for (double& v : logits) v = th::round_to_dtype(g.uniform(-4, -1), kBFloat16);
  logits[7] = 3.0;
  logits[1500] = 2.5;
  logits[1999] = 2.0;
  const std::vector<SamplingOptions> opts = {
      {1.0, 0, 1.0}, {1.0, 0, 0.9}, {0.8, 40, 0.95}, {1.0, 1500, 1.0}, {1.5, 1200, 0.97}};
  for (const SamplingOptions& o : opts) {
    if (!loop.run(opt_str(o), [&] { ASSERT_TRUE(check_frequencies(dev(), kBFloat16, logits, o, 4000, 99)); })) return;
  }
}

// Every drawn token lies in its row's kept set (top-k, nucleus) for random logits.
TEST_P(Sample, ExcludedTokensAreNeverDrawn) {
  th::CaseLoop loop;
  th::Gen g(6102);
  const int64_t rows = 300, n = 1000;
  const ref::Array a = th::random_array({rows, n}, kFloat32, g, -6, 6);
  Tensor x = th::make_tensor(a, kFloat32, dev());
  for (const SamplingOptions& o :
       std::vector<SamplingOptions>{{1.0, 5, 1.0}, {1.0, 0, 0.5}, {0.5, 20, 0.8}, {2.0, 1100, 0.3}}) {
    if (!loop.run(opt_str(o), [&] {
          for (int round = 0; round < 3; ++round) {
            const ref::Array tok = th::to_array(sample(x, o, sampler_state(static_cast<uint64_t>(round), dev())));
            for (int64_t r = 0; r < rows; ++r) {
              if (ref::top_p_margin(row_of(a, r), o.temperature, o.top_k, o.top_p) < 1e-5)
                continue;  // a borderline cut
              const std::vector<double> p = ref::sample_probs(row_of(a, r), o.temperature, o.top_k, o.top_p);
              ASSERT_GT(p[static_cast<size_t>(tok.v[static_cast<size_t>(r)])], 0.0)
                  << "row " << r << " round " << round;
            }
          }
        }))
      return;
  }
}

// Row r of a call with counter c draws Philox(seed, c + r): the same token as row r alone with
// counter c + r; the same state gives the same tokens; every call adds rows to the counter.
TEST_P(Sample, CounterContract) {
  th::Gen g(6103);
  const int64_t rows = 8;
  for (const Shape& sizes : {Shape{rows, 1000}, Shape{rows, 151936}}) {
    const ref::Array a = th::random_array(sizes, kFloat32, g, -3, 3);
    Tensor x = th::make_tensor(a, kFloat32, dev());
    for (const SamplingOptions& o :
         std::vector<SamplingOptions>{{1.0, 0, 1.0}, {1.0, 50, 0.9}, {1.0, 0, 0.9}, {0.0, 0, 1.0}, {1.0, 2000, 1.0}}) {
      SCOPED_TRACE(ref::shape_to_string(sizes) + " " + opt_str(o));
      Tensor state = tensor(std::vector<int64_t>{77, 100}, std::nullopt, TensorOptions(kInt64).device(dev()));
      const ref::Array all = th::to_array(sample(x, o, state));
      EXPECT_EQ(th::to_array(state).v, (std::vector<double>{77, static_cast<double>(100 + rows)}));
      for (int64_t r = 0; r < rows; ++r) {
        Tensor one = tensor(std::vector<int64_t>{77, 100 + r}, std::nullopt, TensorOptions(kInt64).device(dev()));
        const ref::Array tok = th::to_array(sample(x.select(0, r), o, one));
        EXPECT_EQ(tok.v[0], all.v[static_cast<size_t>(r)]) << "row " << r;
        EXPECT_EQ(th::to_array(one).v, (std::vector<double>{77, static_cast<double>(101 + r)}));
      }
      Tensor again = tensor(std::vector<int64_t>{77, 100}, std::nullopt, TensorOptions(kInt64).device(dev()));
      EXPECT_EQ(th::to_array(sample(x, o, again)).v, all.v) << "same state, same tokens";
    }
  }
  // Fresh numbers on each call: 64 rows of 50 equally likely tokens never repeat as a whole.
  Tensor flat = zeros({64, 50}, TensorOptions(kFloat32).device(dev()));
  Tensor state = sampler_state(5, dev());
  const ref::Array first = th::to_array(sample(flat, {}, state));
  const ref::Array second = th::to_array(sample(flat, {}, state));
  EXPECT_NE(first.v, second.v);
  EXPECT_EQ(th::to_array(state).v, (std::vector<double>{5, 128}));
}

// Rows with a padded stride (a slice of wider rows) or transposed draw what contiguous rows draw.
TEST_P(Sample, StridedRows) {
  th::Gen g(6104);
  const ref::Array a = th::random_array({16, 999}, kBFloat16, g, -3, 3);
  Tensor contiguous = th::make_tensor(a, kBFloat16, dev());
  Tensor padded = th::make_tensor(a, kBFloat16, dev(), Layout::RowPadded);
  Tensor transposed = th::make_tensor(a, kBFloat16, dev(), Layout::Transposed);
  for (const SamplingOptions& o : std::vector<SamplingOptions>{{1.0, 0, 1.0}, {0.9, 30, 0.9}, {1.0, 0, 0.8}}) {
    const ref::Array want = th::to_array(sample(contiguous, o, sampler_state(3, dev())));
    EXPECT_EQ(th::to_array(sample(padded, o, sampler_state(3, dev()))).v, want.v) << opt_str(o);
    EXPECT_EQ(th::to_array(sample(transposed, o, sampler_state(3, dev()))).v, want.v) << opt_str(o);
  }
}

TEST_P(Sample, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor x = zeros({2, 5}, f), st = sampler_state(1, dev());
  EXPECT_THROWS_OP(Error, "sample", sample(x, {-1.0, 0, 1.0}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {kNaN, 0, 1.0}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {kInf, 0, 1.0}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {1.0, -1, 1.0}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {1.0, 0, 0.0}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {1.0, 0, 1.5}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {1.0, 0, kNaN}, st));
  EXPECT_THROWS_OP(DTypeError, "sample", sample(x.to(kInt32), {}, st));
  EXPECT_THROWS_OP(DTypeError, "sample", sample(x.to(kFloat64), {}, st));
  EXPECT_THROWS_OP(DTypeError, "sample", sample(x.to(kFloat8_e4m3fn), {}, st));
  EXPECT_THROWS_OP(ShapeError, "sample", sample(zeros({2, 3, 4}, f), {}, st));
  EXPECT_THROWS_OP(ShapeError, "sample", sample(zeros({}, f), {}, st));
  EXPECT_THROWS_OP(ShapeError, "sample", sample(zeros({2, 0}, f), {}, st));
  EXPECT_THROWS_OP(DTypeError, "sample", sample(x, {}, st.to(kInt32)));
  EXPECT_THROWS_OP(ShapeError, "sample", sample(x, {}, zeros({3}, TensorOptions(kInt64).device(dev()))));
  EXPECT_THROWS_OP(ShapeError, "sample",
                   sample(x, {}, zeros({2, 2}, TensorOptions(kInt64).device(dev())).select(1, 0)));
  EXPECT_THROWS_OP(Error, "sample", sample(Tensor(), {}, st));
  EXPECT_THROWS_OP(Error, "sample", sample(x, {}, Tensor()));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "sample", sample(x, {}, sampler_state(1, kCPU)));
  }
  // No rows: an empty result and an unchanged counter.
  EXPECT_TRUE(th::expect_shape(sample(zeros({0, 5}, f), {}, st), {0}, kInt64));
  EXPECT_EQ(th::to_array(st).v, (std::vector<double>{1, 0}));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Sample);

// ---- CUDA: the same tokens as the CPU, and graph replays --------------------------------------

// Tokens equal the CPU's: exactly on the top-k path (the same float operations in the same
// order), up to one row in 64 where the full row is summed in parallel (a draw within rounding
// of a boundary between two tokens).
TEST(SampleCuda, SameTokensAsCpu) {
  ANVIL_REQUIRE_CUDA();
  th::Gen g(6200);
  const Device gpu(kCUDA, 0);
  for (const Shape& sizes : {Shape{64, 151936}, Shape{256, 1000}}) {
    for (DType t : {kFloat32, kBFloat16}) {
      const ref::Array a = th::random_array(sizes, t, g, -8, 8);
      Tensor xc = th::make_tensor(a, t, kCPU), xg = th::make_tensor(a, t, gpu);
      const std::vector<SamplingOptions> opts = {{0.0, 0, 1.0}, {1.0, 50, 0.9}, {0.7, 1024, 0.95}, {1.0, 8, 1.0},
                                                 {1.0, 0, 1.0}, {0.8, 0, 0.9},  {1.0, 2000, 1.0}};
      for (const SamplingOptions& o : opts) {
        SCOPED_TRACE(th::dtype_str(t) + " " + ref::shape_to_string(sizes) + " " + opt_str(o));
        const ref::Array c = th::to_array(sample(xc, o, sampler_state(21, kCPU)));
        const ref::Array d = th::to_array(sample(xg, o, sampler_state(21, gpu)));
        int64_t differ = 0;
        for (size_t r = 0; r < c.v.size(); ++r) differ += c.v[r] != d.v[r];
        const bool exact = o.temperature == 0 || (o.top_k > 0 && o.top_k <= 1024);
        EXPECT_LE(differ, exact ? 0 : static_cast<int64_t>(c.v.size()) / 64) << differ << " rows differ";
      }
    }
  }
}

// Captured sample() replays with a fresh counter each time: replay i equals an eager call with
// counter i * rows, and the state ends advanced by one call per replay.
TEST(SampleCuda, GraphReplaysDrawFreshNumbers) {
  ANVIL_REQUIRE_CUDA();
  const Device gpu(kCUDA, 0);
  Stream s = Stream::create(gpu);
  StreamGuard guard(s);
  th::Gen g(6201);
  struct GraphCase {
    Shape sizes;
    SamplingOptions o;
  };
  const std::vector<GraphCase> cases = {{{1, 151936}, {0.8, 50, 0.9}}, {{64, 1000}, {1.0, 0, 0.95}},
                                        {{64, 1000}, {1.0, 0, 1.0}},   {{64, 1000}, {1.0, 2000, 1.0}},
                                        {{3, 151936}, {0.0, 0, 1.0}},  {{64, 50}, {1.0, 20, 1.0}}};
  for (const GraphCase& c : cases) {
    SCOPED_TRACE(ref::shape_to_string(c.sizes) + " " + opt_str(c.o));
    const ref::Array a = th::random_array(c.sizes, kBFloat16, g, -1, 1);
    Tensor x = th::make_tensor(a, kBFloat16, gpu);
    Tensor warm = sample(x, c.o, sampler_state(9, gpu));
    Tensor state = sampler_state(9, gpu);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    Tensor tok = sample(x, c.o, state);
    graph.capture_end();
    const int64_t rows = c.sizes[0];
    std::vector<ref::Array> replays;
    for (int round = 0; round < 2; ++round) {
      graph.replay();
      s.synchronize();
      replays.push_back(th::to_array(tok));
      Tensor eager_state =
          tensor(std::vector<int64_t>{9, round * rows}, std::nullopt, TensorOptions(kInt64).device(gpu));
      EXPECT_EQ(replays.back().v, th::to_array(sample(x, c.o, eager_state)).v) << "replay " << round;
    }
    EXPECT_EQ(th::to_array(state).v, (std::vector<double>{9, static_cast<double>(2 * rows)}));
    if (rows == 64) {
      EXPECT_NE(replays[0].v, replays[1].v) << "replays drew the same tokens";
    }
    graph.reset();
  }
}

}  // namespace
