// Reductions: one case table (shape x dims x keepdim x layout x dtype) against the float64
// reference, with tolerances from sum_tol (random values) and exact checks on dyadic values
// whose sums are exact in float32 in any order.
#include <cmath>
#include <limits>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct ReduceCase {
  Shape sizes;
  Shape dims;  // empty: all dims
};

const std::vector<ReduceCase>& reduce_cases(bool full) {
  static const std::vector<ReduceCase> big = {
      {{0}, {}},          {{1}, {0}},          {{7}, {}},          {{33}, {-1}},
      {{1023}, {0}},     {{65535}, {}},      {{65536}, {0}},      {{65537}, {}},      {{70000}, {0}},
      {{3, 0}, {0}},     {{3, 0}, {1}},      {{0, 5}, {1}},       {{7, 33}, {0}},     {{7, 33}, {1}},
      {{7, 33}, {}},     {{7, 33}, {0, 1}},  {{33, 7, 3}, {0, 2}}, {{33, 7, 3}, {1}}, {{33, 7, 3}, {-1}},
      {{2, 3, 5, 7}, {1, 3}}, {{2, 3, 5, 7}, {0}}, {{2, 65537}, {1}}, {{2, 65537}, {0}}, {{65537, 2}, {0}},
      {{}, {}}};
  static const std::vector<ReduceCase> small = {{{0}, {}},       {{7}, {}},          {{1023}, {0}},
                                                {{3, 0}, {1}},  {{7, 33}, {0}},  {{7, 33}, {1}},     {{33, 7, 3}, {0, 2}},
                                                {{2, 3, 5, 7}, {1, 3}}, {{65537}, {}}, {{2, 1025}, {1}}, {{}, {}}};
  return full ? big : small;
}

const std::vector<Layout>& layouts_for(DType t) {
  static const std::vector<Layout> few = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
  return t == kFloat32 ? th::all_layouts() : few;
}

DType sum_dtype(DType t) { return is_integral(t, true) ? kInt64 : t; }

std::string red_name(const char* op, const ReduceCase& c, bool keepdim) {
  return std::string(op) + " dims " + ref::shape_to_string(c.dims) + (keepdim ? " keepdim" : "");
}

class Reduce : public th::DeviceTest {};

TEST_P(Reduce, SumMeanTable) {
  th::CaseLoop loop;
  th::Gen g(1000);
  for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt8, kUInt8, kBool, kInt64}) {
    int k = 0;
    for (const ReduceCase& c : reduce_cases(t == kFloat32)) {
      for (Layout l : layouts_for(t)) {
        bool keepdim = (k++ % 2) == 1;
        if (!loop.run(red_name("sum", c, keepdim) + " " + th::case_name(c.sizes, t, l, dev()), [&] {
          th::Input x = th::make_input(c.sizes, t, dev(), l, g, -1.0, 1.0);
          if (is_integral(t)) x = th::make_input(c.sizes, t, dev(), l, g, -100, 100);
          int64_t n = ref::reduction_length(c.sizes, c.dims);
          Tensor s = sum(x.t, c.dims, keepdim);
          ref::Array want = ref::reduce(x.a, c.dims, keepdim, ref::Red::Sum);
          DType out = sum_dtype(t);
          ASSERT_TRUE(th::expect_shape(s, want.sizes, out));
          ref::Array tol = th::sum_tol(out, n, ref::reduce(x.a, c.dims, keepdim, ref::Red::AbsSum));
          ASSERT_TRUE(th::expect_close(s, want, th::Tol{0, 2 * th::unit_roundoff(out)}, &tol));
          if (!is_floating_point(t)) return;
          Tensor m = mean(x.t, c.dims, keepdim);
          ref::Array wm = ref::reduce(x.a, c.dims, keepdim, ref::Red::Mean);
          ASSERT_TRUE(th::expect_shape(m, wm.sizes, t));
          for (double& v : tol.v) v /= static_cast<double>(std::max<int64_t>(n, 1));
          ASSERT_TRUE(th::expect_close(m, wm, th::Tol{0, 2 * th::unit_roundoff(t)}, &tol));
        }))
          return;
      }
    }
  }
}

// Sums of k/8 values (|k| <= 16) stay exactly representable in float32 whatever the order, so
// the result must equal the exact sum rounded once to the output dtype: any dropped, repeated or
// misaddressed element, or a low-precision accumulator, shows up bit for bit.
TEST_P(Reduce, SumMeanExactOnDyadicValues) {
  th::CaseLoop loop;
  th::Gen g(1001);
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    for (const ReduceCase& c : reduce_cases(true)) {
      for (Layout l : layouts_for(t)) {
        if (!loop.run(red_name("sum", c, false) + " " + th::case_name(c.sizes, t, l, dev()), [&] {
          th::Input x = th::make_dyadic_input(c.sizes, t, dev(), l, g, 2);
          ref::Array want = ref::reduce(x.a, c.dims, false, ref::Red::Sum);
          for (double& v : want.v) v = th::round_to_dtype(v, t);
          ASSERT_TRUE(th::expect_equal(sum(x.t, c.dims), want));
        }))
          return;
      }
    }
  }
  // 65537 ones in bfloat16: a bfloat16 accumulator would stop at 256.
  Tensor ones_bf = ones({65537}, TensorOptions(kBFloat16).device(dev()));
  EXPECT_TRUE(th::expect_equal(sum(ones_bf), ref::Array({}, th::round_to_dtype(65537, kBFloat16))));
  EXPECT_TRUE(th::expect_equal(sum(ones_bf, {}, false, kFloat32), ref::Array({}, 65537)));
  EXPECT_TRUE(th::expect_equal(mean(ones_bf), ref::Array({}, 1.0)));
  Tensor ones_h = ones({70000}, TensorOptions(kFloat16).device(dev()));
  EXPECT_EQ(th::to_array(sum(ones_h)).v[0], std::numeric_limits<double>::infinity()) << "70000 overflows float16";
  EXPECT_TRUE(th::expect_equal(mean(ones_h), ref::Array({}, 1.0)));
}

TEST_P(Reduce, SumWithDTypeArgument) {
  th::Gen g(1002);
  th::Input x = th::make_input({7, 33}, kInt32, dev(), Layout::Transposed, g, -1000, 1000);
  Tensor s = sum(x.t, {1}, false, kFloat64);
  ASSERT_TRUE(th::expect_shape(s, {7}, kFloat64));
  EXPECT_TRUE(th::expect_equal(s, ref::reduce(x.a, {1}, false, ref::Red::Sum)));
  th::Input b = th::make_input({1023}, kBFloat16, dev(), Layout::Strided, g, -1, 1);
  Tensor sb = sum(b.t, {}, false, kFloat32);
  ASSERT_TRUE(th::expect_shape(sb, {}, kFloat32));
  ref::Array tol = th::sum_tol(kFloat32, 1023, ref::reduce(b.a, {}, false, ref::Red::AbsSum));
  EXPECT_TRUE(th::expect_close(sb, ref::reduce(b.a, {}, false, ref::Red::Sum), th::Tol{0, 2 * th::unit_roundoff(kFloat32)}, &tol));
  Tensor mi = mean(x.t, {0}, true, kFloat32);
  ASSERT_TRUE(th::expect_shape(mi, {1, 33}, kFloat32));
  EXPECT_TRUE(th::expect_close(mi, ref::reduce(x.a, {0}, true, ref::Red::Mean), th::elementwise_tol(kFloat32, 8, 1000)));
}

TEST_P(Reduce, ProdTable) {
  th::CaseLoop loop;
  th::Gen g(1003);
  for (DType t : {kFloat32, kFloat64, kBFloat16, kInt32, kInt64}) {
    for (const ReduceCase& c : reduce_cases(t == kFloat32)) {
      for (Layout l : layouts_for(t)) {
        if (!loop.run(red_name("prod", c, true) + " " + th::case_name(c.sizes, t, l, dev()), [&] {
          int64_t n = ref::reduction_length(c.sizes, c.dims);
          // Exact values: +-1, with a 2 or a 1/2 (ints: 2 or 1) every 4096 elements.
          ref::Array base = th::random_array(c.sizes, kBool, g, 0, 1);
          ref::Array a(c.sizes);
          for (size_t i = 0; i < a.v.size(); ++i)
            a.v[i] = (base.v[i] != 0 ? -1.0 : 1.0) * (i % 4096 == 5 ? 2.0 : (i % 4096 == 77 && !is_integral(t)) ? 0.5 : 1.0);
          if (l == Layout::Broadcast) return;  // values must vary along dim 0
          Tensor x = th::make_tensor(a, t, dev(), l);
          Tensor p = prod(x, c.dims, true);
          ref::Array want = ref::reduce(a, c.dims, true, ref::Red::Prod);
          ASSERT_TRUE(th::expect_shape(p, want.sizes, sum_dtype(t)));
          ASSERT_TRUE(th::expect_equal(p, want));
          if (!is_floating_point(t) || n > 1023) return;
          // Random values near 1: relative error <= (n + 1) u of the accumulator, then the output rounding.
          th::Input r = th::make_input(c.sizes, t, dev(), l, g, 0.9, 1.1);
          Tensor pr = prod(r.t, c.dims, false);
          ref::Array wr = ref::reduce(r.a, c.dims, false, ref::Red::Prod);
          double rtol = 2.0 * (static_cast<double>(n + 1) * th::unit_roundoff(th::compute_dtype(t)) + th::unit_roundoff(t));
          ASSERT_TRUE(th::expect_close(pr, wr, th::Tol{0, rtol}));
        }))
          return;
      }
    }
  }
}

TEST_P(Reduce, AmaxAminMaxMinArgmaxTable) {
  th::CaseLoop loop;
  th::Gen g(1004);
  for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt8, kUInt8, kInt64, kBool}) {
    int k = 0;
    for (const ReduceCase& c : reduce_cases(t == kFloat32)) {
      if (ref::reduction_length(c.sizes, c.dims) == 0) continue;  // an error, see test_errors
      for (Layout l : layouts_for(t)) {
        bool keepdim = (k++ % 2) == 0;
        if (!loop.run(red_name("amax/amin", c, keepdim) + " " + th::case_name(c.sizes, t, l, dev()), [&] {
          // Few distinct values for integers: many ties, which must resolve to the first index.
          th::Input x = is_floating_point(t) ? th::make_input(c.sizes, t, dev(), l, g, -100, 100)
                                             : th::make_input(c.sizes, t, dev(), l, g, -3, 3);
          for (bool is_max : {true, false}) {
            Tensor y = is_max ? amax(x.t, c.dims, keepdim) : amin(x.t, c.dims, keepdim);
            ref::Array want = ref::reduce(x.a, c.dims, keepdim, is_max ? ref::Red::Amax : ref::Red::Amin);
            ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
            ASSERT_TRUE(th::expect_equal(y, want));
          }
          if (c.dims.empty()) {
            Tensor mx = max(x.t), mn = min(x.t);
            ASSERT_TRUE(th::expect_shape(mx, {}, t));
            ASSERT_TRUE(th::expect_equal(mx, ref::reduce(x.a, {}, false, ref::Red::Amax)));
            ASSERT_TRUE(th::expect_equal(mn, ref::reduce(x.a, {}, false, ref::Red::Amin)));
            if (t != kBool) {
              Tensor am = argmax(x.t);
              ASSERT_TRUE(th::expect_shape(am, {}, kInt64));
              ASSERT_EQ(am.item<int64_t>(), ref::arg_extreme_flat(x.a, true));
              ASSERT_EQ(argmin(x.t).item<int64_t>(), ref::arg_extreme_flat(x.a, false));
            }
          }
          if (c.dims.size() != 1 || t == kBool) return;
          int64_t d = c.dims[0];
          for (bool is_max : {true, false}) {
            auto [vals, idx] = is_max ? max(x.t, d, keepdim) : min(x.t, d, keepdim);
            ref::ValuesIndices want = ref::max_min_dim(x.a, d, keepdim, is_max);
            ASSERT_TRUE(th::expect_shape(vals, want.values.sizes, t));
            ASSERT_TRUE(th::expect_shape(idx, want.indices.sizes, kInt64));
            ASSERT_TRUE(th::expect_equal(vals, want.values));
            ASSERT_TRUE(th::expect_equal(idx, want.indices)) << "index of the first extreme";
            Tensor ai = is_max ? argmax(x.t, d, keepdim) : argmin(x.t, d, keepdim);
            ASSERT_TRUE(th::expect_shape(ai, want.indices.sizes, kInt64));
            ASSERT_TRUE(th::expect_equal(ai, want.indices));
          }
        }))
          return;
      }
    }
  }
}

TEST_P(Reduce, NaNPropagatesAndWinsTheIndex) {
  for (int64_t n : {7, 33, 1023, 65537}) {
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " NaN at " + std::to_string(pos));
      ref::Array a({n});
      for (int64_t i = 0; i < n; ++i) a.v[static_cast<size_t>(i)] = static_cast<double>((i * 37) % 101) - 50.0;
      a.v[static_cast<size_t>(pos)] = kNaN;
      if (pos + 1 < n) a.v[static_cast<size_t>(pos + 1)] = kNaN;  // the first NaN wins
      Tensor x = th::make_tensor(a, kFloat32, dev(), Layout::Strided);
      EXPECT_TRUE(std::isnan(amax(x).item<double>()));
      EXPECT_TRUE(std::isnan(amin(x).item<double>()));
      EXPECT_TRUE(std::isnan(max(x).item<double>()));
      EXPECT_TRUE(std::isnan(sum(x).item<double>()));
      EXPECT_EQ(argmax(x).item<int64_t>(), pos);
      EXPECT_EQ(argmin(x).item<int64_t>(), pos);
      auto [v, i] = max(x.unsqueeze(0), 1);
      EXPECT_TRUE(std::isnan(v.item<double>()));
      EXPECT_EQ(i.item<int64_t>(), pos);
      auto [v2, i2] = min(x.unsqueeze(0), 1);
      EXPECT_EQ(i2.item<int64_t>(), pos);
    }
  }
}

TEST_P(Reduce, VarStdTable) {
  th::CaseLoop loop;
  th::Gen g(1005);
  for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    int k = 0;
    for (const ReduceCase& c : reduce_cases(t == kFloat32)) {
      for (Layout l : layouts_for(t)) {
        for (double correction : {1.0, 0.0, 2.0}) {
          bool keepdim = (k++ % 2) == 0;
          if (!loop.run(red_name("var/std", c, keepdim) + " correction " + std::to_string(correction) + " " +
                       th::case_name(c.sizes, t, l, dev()), [&] {
            th::Input x = th::make_input(c.sizes, t, dev(), l, g, 2.0, 4.0);  // mean 3: a one-pass formula cancels
            int64_t n = ref::reduction_length(c.sizes, c.dims);
            Tensor v = var(x.t, c.dims, correction, keepdim);
            ref::Array wv = ref::reduce(x.a, c.dims, keepdim, ref::Red::Var, correction);
            ASSERT_TRUE(th::expect_shape(v, wv.sizes, t));
            // |err| <= 4 u_C (sqrt(n) + 1) sum (x - mean)^2 / max(1, n - c) + 2 u_O |var|: the
            // centred sum of squares; a naive E[x^2] - E[x]^2 loses ~ 9/var of it here and fails.
            ref::Array centred = ref::reduce(x.a, c.dims, keepdim, ref::Red::Var, 0.0);
            ref::Array tol(wv.sizes);
            double uc = th::unit_roundoff(th::compute_dtype(t));
            double denom = std::max(1.0, static_cast<double>(n) - correction);
            for (size_t i = 0; i < tol.v.size(); ++i)
              tol.v[i] = 8.0 * uc * (std::sqrt(static_cast<double>(n)) + 1.0) * centred.v[i] * static_cast<double>(n) / denom;
            ASSERT_TRUE(th::expect_close(v, wv, th::Tol{0, 2 * th::unit_roundoff(t)}, &tol));
            Tensor s = anvil::std(x.t, c.dims, correction, keepdim);
            ref::Array ws = ref::reduce(x.a, c.dims, keepdim, ref::Red::Std, correction);
            ASSERT_TRUE(th::expect_shape(s, ws.sizes, t));
            ref::Array stol(ws.sizes);
            for (size_t i = 0; i < stol.v.size(); ++i)  // |sqrt(a) - sqrt(b)| <= |a - b| / (2 sqrt(b)), and <= sqrt|a - b|
              stol.v[i] = ws.v[i] > 0 ? std::min(tol.v[i] / (2 * ws.v[i]), std::sqrt(tol.v[i])) : std::sqrt(tol.v[i]);
            ASSERT_TRUE(th::expect_close(s, ws, th::Tol{0, 2 * th::unit_roundoff(t)}, &stol));
            // var_mean / std_mean: the same kernel, so the same bits, and the mean from that pass.
            auto [vm, mv] = var_mean(x.t, c.dims, correction, keepdim);
            auto [sm, ms] = std_mean(x.t, c.dims, correction, keepdim);
            ASSERT_TRUE(th::expect_equal(vm, th::to_array(v)));
            ASSERT_TRUE(th::expect_equal(sm, th::to_array(s)));
            ref::Array wm = ref::reduce(x.a, c.dims, keepdim, ref::Red::Mean);
            ASSERT_TRUE(th::expect_shape(mv, wm.sizes, t));
            // The mean of values in [2, 4): a sum's bound (sum_tol) relative to it, |x| <= 2 |mean|.
            const double un = 8 * th::unit_roundoff(th::compute_dtype(t)) * (std::sqrt(static_cast<double>(n)) + 1.0);
            const th::Tol mtol{0, 2 * th::unit_roundoff(t) + un};
            ASSERT_TRUE(th::expect_close(mv, wm, mtol));
            ASSERT_TRUE(th::expect_equal(ms, th::to_array(mv)));
          }))
            return;
        }
      }
    }
  }
}

TEST_P(Reduce, EmptyAndDegenerateReductions) {
  TensorOptions o = TensorOptions(kFloat32).device(dev());
  EXPECT_TRUE(th::expect_equal(sum(zeros({0}, o)), ref::Array({}, 0.0)));
  EXPECT_TRUE(th::expect_equal(prod(zeros({0}, o)), ref::Array({}, 1.0)));
  EXPECT_TRUE(th::expect_equal(mean(zeros({0}, o)), ref::Array({}, kNaN)));
  EXPECT_TRUE(th::expect_equal(sum(zeros({3, 0}, o), {1}), ref::Array({3}, 0.0)));
  EXPECT_TRUE(th::expect_equal(sum(zeros({3, 0}, o), {0}), ref::Array({0}, 0.0)));
  EXPECT_TRUE(th::expect_equal(sum(zeros({3, 0}, o), {1}, true), ref::Array({3, 1}, 0.0)));
  // Several reduced dims, one of them empty (a conv's bias gradient of an empty batch).
  EXPECT_TRUE(th::expect_equal(sum(zeros({0, 4, 3, 3}, o), {0, 2, 3}), ref::Array({4}, 0.0)));
  EXPECT_TRUE(th::expect_equal(mean(zeros({2, 0, 3}, o), {1, 2}), ref::Array({2}, kNaN)));
  // var of one element with correction 1: 0 / 0.
  EXPECT_TRUE(th::expect_equal(var(ones({1}, o)), ref::Array({}, kNaN)));
  // var_mean as PyTorch: empty gives (nan, nan); n - correction < 0 gives inf with the mean.
  auto [ve, me] = var_mean(zeros({0}, o));
  EXPECT_TRUE(th::expect_equal(ve, ref::Array({}, kNaN)));
  EXPECT_TRUE(th::expect_equal(me, ref::Array({}, kNaN)));
  auto [vc, mc] = var_mean(arange(1, 4, 1, o), {}, 5);
  EXPECT_TRUE(th::expect_equal(vc, ref::Array({}, std::numeric_limits<double>::infinity())));
  EXPECT_TRUE(th::expect_equal(mc, ref::Array({}, 2.0)));
  auto [se, sme] = std_mean(zeros({2, 0}, o), {1}, 1, true);
  EXPECT_EQ(se.sizes(), (Shape{2, 1}));
  EXPECT_TRUE(th::expect_equal(sme, ref::Array({2, 1}, kNaN)));
  EXPECT_TRUE(th::expect_equal(var(ones({1}, o), {}, 0), ref::Array({}, 0.0)));
  EXPECT_TRUE(th::expect_equal(anvil::std(full({4}, 2.0, o), {}, 1), ref::Array({}, 0.0)));
  // Reducing a 0-dim tensor over dim 0 / -1 is the identity.
  Tensor s = full({}, 2.5, o);
  EXPECT_TRUE(th::expect_equal(sum(s, {0}), ref::Array({}, 2.5)));
  EXPECT_TRUE(th::expect_equal(amax(s, {-1}), ref::Array({}, 2.5)));
  auto [v, i] = max(s, 0);
  EXPECT_EQ(v.item<double>(), 2.5);
  EXPECT_EQ(i.item<int64_t>(), 0);
  // Integer sums do not overflow int32: they are int64.
  Tensor big = full({70000}, 2147483647, TensorOptions(kInt32).device(dev()));
  EXPECT_EQ(sum(big).item<int64_t>(), int64_t{2147483647} * 70000);
  Tensor b = ones({65537}, TensorOptions(kBool).device(dev()));
  EXPECT_EQ(sum(b).item<int64_t>(), 65537);
  EXPECT_EQ(sum(b).dtype(), kInt64);
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Reduce);

}  // namespace
