// The release's new ops: logspace, frexp, heaviside, special_laguerre_polynomial_l, take /
// put_, bincount. Values against loop-only references written here and against PyTorch's own
// outputs (tests/data/release_op_goldens.json from scripts/make_release_op_goldens.py), on
// every device; every error with its type and [op] prefix.
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "expect_throws.h"
#include "finite_diff.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json goldens() {
  std::ifstream in(th::source_dir() + "/tests/data/release_op_goldens.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

// The goldens' encoding: null for NaN, "inf" / "-inf".
double decode(const nlohmann::json& v) {
  if (v.is_null()) return kNaN;
  if (v.is_string()) return v.get<std::string>() == "inf" ? kInf : -kInf;
  return v.get<double>();
}
std::vector<double> decode_all(const nlohmann::json& a) {
  std::vector<double> v;
  for (const auto& e : a) v.push_back(decode(e));
  return v;
}


using th::array_of;

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

class ReleaseOps : public th::DeviceTest {};

// ---- logspace

TEST_P(ReleaseOps, LogspaceMatchesPyTorch) {
  const nlohmann::json j = goldens();
  ASSERT_GE(j["logspace"].size(), 15u);
  for (const auto& c : j["logspace"]) {
    const DType t = dtype_from_name(c["dtype"].get<std::string>());
    SCOPED_TRACE(c.dump());
    Tensor y = logspace(c["start"].get<double>(), c["end"].get<double>(), c["steps"].get<int64_t>(),
                        c["base"].get<double>(), TensorOptions(t).device(dev()));
    ASSERT_TRUE(th::expect_shape(y, {c["steps"].get<int64_t>()}, t));
    EXPECT_EQ(th::to_array(y).v, decode_all(c["y"]));  // bit for bit: the same operations in the same order
  }
  EXPECT_THROWS_SAYING(ShapeError, "logspace", "number of steps must be non-negative", logspace(0, 1, -1));
  EXPECT_THROWS_SAYING(DTypeError, "logspace", "not implemented for 'bool'", logspace(0, 1, 3, 10, kBool));
  EXPECT_THROWS_SAYING(DTypeError, "logspace", "not implemented for 'complex64'", logspace(0, 1, 3, 10, kComplex64));
}

// ---- frexp

TEST_P(ReleaseOps, FrexpMatchesPyTorch) {
  const nlohmann::json j = goldens();
  for (const auto& c : j["frexp"]) {
    const DType t = dtype_from_name(c["dtype"].get<std::string>());
    SCOPED_TRACE(c["dtype"].get<std::string>());
    const std::vector<double> x = decode_all(c["x"]);
    Tensor xt = th::make_tensor(array_of({static_cast<int64_t>(x.size())}, x), t, dev());
    auto [m, e] = frexp(xt);
    ASSERT_TRUE(th::expect_shape(m, xt.sizes(), t));
    ASSERT_TRUE(th::expect_shape(e, xt.sizes(), kInt32));
    const std::vector<double> got_m = th::to_array(m).v, want_m = decode_all(c["mantissa"]);
    const std::vector<double> got_e = th::to_array(e).v;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_TRUE(same_value(got_m[i], want_m[i])) << "x " << x[i] << ": " << got_m[i] << " vs " << want_m[i];
      EXPECT_EQ(got_e[i], c["exponent"][i].get<double>()) << "x " << x[i];
      EXPECT_EQ(std::signbit(got_m[i]), std::signbit(want_m[i])) << "x " << x[i];
    }
  }
}

// Every binade of float32 and float64 (subnormals, normals, both signs) against C's frexp.
TEST_P(ReleaseOps, FrexpEveryBinade) {
  for (DType t : {kFloat32, kFloat64}) {
    const bool f32 = t == kFloat32;
    const int lo = f32 ? -149 : -1074, hi = f32 ? 127 : 1023;
    std::vector<double> x;
    for (int e = lo; e <= hi; ++e)
      for (double m : {1.0, 1.375, 1.999755859375}) {
        const double v = std::ldexp(m, e);
        if (th::round_to_dtype(v, t) != v) continue;  // below the subnormal grid
        x.push_back(v);
        x.push_back(-v);
      }
    Tensor xt = th::make_tensor(array_of({static_cast<int64_t>(x.size())}, x), t, dev(), Layout::Offset);
    auto [m, e] = frexp(xt);
    const std::vector<double> gm = th::to_array(m).v, ge = th::to_array(e).v;
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 5; ++i) {
      int we = 0;
      const double wm = std::frexp(x[i], &we);
      if (gm[i] != wm || ge[i] != we) {
        ++bad;
        ADD_FAILURE() << th::dtype_str(t) << " x " << x[i] << ": (" << gm[i] << ", " << ge[i] << ") vs (" << wm << ", "
                      << we << ")";
      }
    }
  }
  EXPECT_THROWS_SAYING(DTypeError, "frexp", "only supports floating-point dtypes",
                       frexp(ones({2}, TensorOptions(kInt32).device(dev()))));
}

// ---- heaviside

TEST_P(ReleaseOps, Heaviside) {
  const std::vector<double> xs = {-2.5, -0.0, 0.0, 3.0, kNaN, -kInf, kInf, 1e-30};
  for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    Tensor x = th::make_tensor(array_of({8}, xs), t, dev(), Layout::Offset);
    Tensor v = th::make_tensor(array_of({1}, {0.5}), t, dev());
    Tensor y = heaviside(x, v);
    ASSERT_TRUE(th::expect_shape(y, {8}, t));
    // NaN gives 0 (PyTorch's x == 0 ? v : x > 0), -0 gives the value.
    EXPECT_TRUE(th::expect_equal(y, array_of({8}, {0, 0.5, 0.5, 1, 0, 0, 1, th::round_to_dtype(1e-30, t) > 0 ? 1 : 0.5})));
  }
  // Integer and bool dtypes, values broadcast along a dim.
  Tensor xi = th::make_tensor(array_of({2, 3}, {-3, 0, 7, 0, 0, -1}), kInt32, dev(), Layout::Transposed);
  Tensor vi = th::make_tensor(array_of({3}, {10, 20, 30}), kInt32, dev());
  EXPECT_TRUE(th::expect_equal(heaviside(xi, vi), array_of({2, 3}, {0, 20, 1, 10, 20, 0})));
  Tensor xb = th::make_tensor(array_of({4}, {1, 0, 1, 0}), kBool, dev());
  Tensor vb = th::make_tensor(array_of({4}, {0, 0, 1, 1}), kBool, dev());
  EXPECT_TRUE(th::expect_equal(heaviside(xb, vb), array_of({4}, {1, 0, 1, 1})));
  Tensor xu = th::make_tensor(array_of({3}, {0, 5, 0}), kUInt8, dev());
  EXPECT_TRUE(th::expect_equal(heaviside(xu, th::make_tensor(array_of({}, {9}), kUInt8, dev())), array_of({3}, {9, 1, 9})));
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  EXPECT_THROWS_SAYING(DTypeError, "heaviside", "heaviside is not yet implemented for tensors with different dtypes.",
                       heaviside(ones({2}, f), ones({2}, TensorOptions(kFloat64).device(dev()))));
  EXPECT_THROWS_SAYING(DTypeError, "heaviside", "heaviside is not yet implemented for complex tensors.",
                       heaviside(ones({2}, TensorOptions(kComplex64).device(dev())),
                                 ones({2}, TensorOptions(kComplex64).device(dev()))));
  EXPECT_THROWS_SAYING(ShapeError, "heaviside", "must match", heaviside(ones({2}, f), ones({3}, f)));
}

// ---- special_laguerre_polynomial_l

TEST_P(ReleaseOps, LaguerreMatchesPyTorch) {
  const nlohmann::json j = goldens();
  for (const auto& c : j["laguerre"]) {
    const DType t = dtype_from_name(c["dtype"].get<std::string>());
    const std::vector<double> xs = c["x"].get<std::vector<double>>(), ns = c["n"].get<std::vector<double>>();
    const int64_t nx = static_cast<int64_t>(xs.size()), nn = static_cast<int64_t>(ns.size());
    Tensor x = th::make_tensor(array_of({nx, 1}, xs), t, dev());
    Tensor n = th::make_tensor(array_of({1, nn}, ns), t, dev());
    Tensor y = special_laguerre_polynomial_l(x, n);
    ASSERT_TRUE(th::expect_shape(y, {nx, nn}, t));
    const std::vector<double> got = th::to_array(y).v, want = decode_all(c["y"]);
    // A few ulps per step of the recurrence, of the terms' magnitude: |L_k(x)| <= L_k(-|x|) (all
    // its coefficients then add), which grows with k, so L_n(-|x|) bounds every step's terms.
    // (PyTorch's own CPU kernel is not bit-exact with a plain C++ loop either: FMA contraction.)
    const double u = th::unit_roundoff(t);
    auto l_abs = [](double x, int64_t n) {
      double p = 1, q = 1 + std::fabs(x);
      for (int64_t k = 1; k < n; ++k) {
        const double r = ((2.0 * k + 1 + std::fabs(x)) * q - k * p) / (k + 1);
        p = q;
        q = r;
      }
      return n <= 0 ? 1.0 : q;
    };
    for (int64_t i = 0; i < nx; ++i)
      for (int64_t k = 0; k < nn; ++k) {
        const size_t e = static_cast<size_t>(i * nn + k);
        const int64_t deg = static_cast<int64_t>(std::trunc(ns[k]));
        EXPECT_NEAR(got[e], want[e], 8.0 * u * static_cast<double>(std::max<int64_t>(deg, 0) + 1) * l_abs(xs[i], deg))
            << th::dtype_str(t) << " x " << xs[i] << " n " << ns[k];
      }
  }
  // Integers promote to float32; the scalar overloads wrap their number.
  Tensor xi = th::make_tensor(array_of({3}, {0, 1, 2}), kInt64, dev());
  Tensor y = special_laguerre_polynomial_l(xi, Scalar(2));
  ASSERT_TRUE(th::expect_shape(y, {3}, kFloat32));
  // L_2(x) = (x^2 - 4x + 2) / 2
  EXPECT_TRUE(th::expect_equal(y, array_of({3}, {1, -0.5, -1})));
  Tensor y2 = special_laguerre_polynomial_l(Scalar(2.0), th::make_tensor(array_of({3}, {0, 1, 3}), kFloat64, dev()));
  ASSERT_TRUE(th::expect_shape(y2, {3}, kFloat64));
  // L_3(2) = (-8 + 36 - 36 + 6) / 6 = -1/3
  EXPECT_TRUE(th::expect_close(y2, array_of({3}, {1, -1, -1.0 / 3}), th::Tol{0, 4 * th::unit_roundoff(kFloat64)}));
  EXPECT_THROWS_SAYING(DTypeError, "special_laguerre_polynomial_l", "not implemented for 'bfloat16'",
                       special_laguerre_polynomial_l(ones({2}, TensorOptions(kBFloat16).device(dev())), Scalar(2)));
}

// ---- take / put_

// The row-major positions of a reference array, wrapped like PyTorch's take.
int64_t wrapped(double i, int64_t n) { return static_cast<int64_t>(i) < 0 ? static_cast<int64_t>(i) + n : static_cast<int64_t>(i); }

TEST_P(ReleaseOps, TakeTable) {
  th::CaseLoop loop;
  th::Gen g(5100);
  struct C {
    Shape x, index;
  };
  const std::vector<C> cases = {{{7}, {5}}, {{3, 4}, {2, 3}}, {{2, 3, 5}, {40}}, {{65537}, {300}}, {{4, 1}, {}}, {{3, 2}, {0}}};
  for (const C& c : cases)
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Offset})
      for (DType t : {kFloat32, kBFloat16, kInt64, kBool}) {
        if (!loop.run(th::case_name(c.x, t, l, dev()) + " index " + ref::shape_to_string(c.index), [&] {
              th::Input x = th::make_input(c.x, t, dev(), l, g, -9, 9);
              const int64_t n = x.a.numel();
              ref::Array idx(c.index);
              for (double& v : idx.v) v = static_cast<double>(g.randint(-n, n - 1));  // negative ones too
              Tensor y = take(x.t, th::make_index(idx, dev(), l == Layout::Transposed && c.index.size() == 2 ? l : Layout::Contiguous));
              ref::Array want(c.index);
              for (size_t i = 0; i < want.v.size(); ++i) want.v[i] = x.a.v[static_cast<size_t>(wrapped(idx.v[i], n))];
              ASSERT_TRUE(th::expect_shape(y, c.index, t));
              ASSERT_TRUE(th::expect_equal(y, want));
            }))
          return;
      }
}

TEST_P(ReleaseOps, PutTable) {
  th::CaseLoop loop;
  th::Gen g(5101);
  for (const Shape& s : {Shape{9}, Shape{3, 5}, Shape{2, 3, 4}, Shape{70000}})
    for (Layout l : {Layout::Contiguous, Layout::Transposed})
      for (DType t : {kFloat32, kBFloat16, kInt32, kFloat64})
        for (bool accumulate : {false, true}) {
          if (!loop.run(th::case_name(s, t, l, dev()) + (accumulate ? " accumulate" : ""), [&] {
                th::Input x = th::make_dyadic_input(s, t, dev(), l, g, 8);
                const int64_t n = x.a.numel(), k = std::min<int64_t>(n, 2 + n / 3);
                // Without accumulate, distinct positions (PyTorch leaves the winner of a duplicate
                // unspecified); with it, every position drawn twice or more, negative half the time.
                ref::Array idx({accumulate ? 2 * k : k});
                std::vector<int64_t> perm(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) perm[i] = i;
                for (int64_t i = 0; i < k; ++i) std::swap(perm[i], perm[i + g.randint(0, n - 1 - i)]);
                for (int64_t i = 0; i < idx.numel(); ++i) {
                  const int64_t p = perm[static_cast<size_t>(i % k)];
                  idx.v[i] = static_cast<double>(g.randint(0, 1) ? p - n : p);
                }
                th::Input src = th::make_dyadic_input({idx.numel()}, t, dev(), Layout::Contiguous, g, 8);
                ref::Array want = x.a;
                for (int64_t i = 0; i < idx.numel(); ++i) {
                  double& d = want.v[static_cast<size_t>(wrapped(idx.v[i], n))];
                  d = accumulate ? d + src.a.v[i] : src.a.v[i];
                }
                const Tensor index = th::make_index(idx, dev());
                Tensor y = put(x.t, index, src.t, accumulate);
                if (t == kBFloat16 && accumulate) {
                  ASSERT_TRUE(th::expect_close(y, want, th::Tol{0, 4 * th::unit_roundoff(t)}));
                } else {
                  ASSERT_TRUE(th::expect_equal(y, want));
                }
                // In place on a strided self: written back through its strides.
                Tensor self = x.t.clone();
                if (l == Layout::Transposed && s.size() >= 2) self = th::make_tensor(x.a, t, dev(), Layout::Transposed);
                self.put_(index, src.t, accumulate);
                ASSERT_TRUE(th::expect_equal(self, th::to_array(y)));
              }))
            return;
        }
}

TEST_P(ReleaseOps, TakePutErrors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor x = arange(0, 6, 1, f).reshape({2, 3});
  Tensor i32 = ones({2}, TensorOptions(kInt32).device(dev()));
  EXPECT_THROWS_SAYING(DTypeError, "take", "take(): Expected a long tensor for index, but got int32", take(x, i32));
  EXPECT_THROWS_SAYING(IndexError, "take", "take(): tried to take from an empty tensor",
                       take(zeros({0}, f), zeros({1}, TensorOptions(kInt64).device(dev()))));
  EXPECT_EQ(take(zeros({0}, f), zeros({0}, TensorOptions(kInt64).device(dev()))).numel(), 0);
  auto index = [&](std::vector<double> v) {
    return th::make_index(array_of({static_cast<int64_t>(v.size())}, v), dev());
  };
  // Out of range: IndexError (on CUDA raised by the device-side check at the next synchronisation).
  EXPECT_THROW(th::to_array(take(x, index({0, 6}))), IndexError);
  EXPECT_THROW(th::to_array(take(x, index({-7}))), IndexError);
  if (dev().is_cpu()) {
    EXPECT_THROWS_SAYING(IndexError, "take", "out of range: tried to access index 6 on a tensor of 6 elements.",
                         take(x, index({0, 6})));
    EXPECT_THROWS_SAYING(IndexError, "put", "out of range: tried to access index -7 on a tensor of 6 elements.",
                         put(x, index({-7}), ones({1}, f)));
  }
  EXPECT_THROW(th::to_array(put(x, index({9}), ones({1}, f))), IndexError);
  Tensor y = x.clone();
  EXPECT_THROWS_SAYING(IndexError, "put_",
                       "put_(): Expected source and index to have the same number of elements, but got source.numel() = 2, "
                       "index.numel() = 1",
                       y.put_(index({0}), ones({2}, f)));
  EXPECT_THROWS_SAYING(DTypeError, "put_",
                       "put_(): self and source expected to have the same dtype, but got self.dtype = float32 and "
                       "source.dtype = float64",
                       y.put_(index({0}), ones({1}, TensorOptions(kFloat64).device(dev()))));
  EXPECT_THROWS_SAYING(DTypeError, "put_", "put_(): Expected a long tensor for index, but got int32",
                       y.put_(i32, ones({2}, f)));
  EXPECT_THROWS_SAYING(IndexError, "put_", "put_(): Tried to put elements into an empty tensor",
                       zeros({0}, f).put_(index({0}), ones({1}, f)));
  EXPECT_TRUE(th::expect_equal(y, th::to_array(x)));  // nothing written by the failed calls
}

// ---- bincount

TEST_P(ReleaseOps, BincountTable) {
  th::CaseLoop loop;
  th::Gen g(5102);
  struct C {
    int64_t n, max_value, minlength;
    double hot;  // the fraction of values in bin 3
  };
  const std::vector<C> cases = {{1, 0, 0, 0},          {17, 9, 0, 0},        {1000, 50, 80, 0},
                                {70000, 300, 0, 0.95}, {70000, 12287, 0, 0}, {50000, 12288, 0, 0.5},
                                {40000, 99999, 5, 0},  {3, 4, 1000, 0},
                                // the first pass counts into min(4096, n) bins (at least 64 and
                                // minlength): the largest value just inside and just past them
                                {5000, 4095, 0, 0.9},  {5000, 4096, 0, 0},    {200000, 4095, 0, 0.99},
                                {100, 63, 0, 0},       {100, 64, 0, 0},       {10, 64, 70, 0}};
  for (const C& c : cases)
    for (DType it : {kInt64, kInt32, kUInt8})
      for (int w = 0; w < 4; ++w) {  // no weights, float32, float64, int32 weights
        if (it == kUInt8 && c.max_value > 255) continue;
        const DType wt = w == 1 ? kFloat32 : w == 2 ? kFloat64 : kInt32;
        const std::string name = th::case_name({c.n}, it, Layout::Contiguous, dev()) + " max " + std::to_string(c.max_value) +
                                 (w ? " weights " + th::dtype_str(wt) : "");
        if (!loop.run(name, [&] {
              ref::Array xa({c.n});
              for (double& v : xa.v)
                v = g.uniform(0, 1) < c.hot ? std::min<int64_t>(3, c.max_value) : static_cast<double>(g.randint(0, c.max_value));
              xa.v[0] = static_cast<double>(c.max_value);  // the largest value is present
              Tensor x = th::make_tensor(xa, it, dev());
              th::Input wts = th::make_input({c.n}, wt, dev(), Layout::Contiguous, g, -4, 4);
              Tensor y = w ? bincount(x, wts.t, c.minlength) : bincount(x, {}, c.minlength);
              const int64_t bins = std::max(c.max_value + 1, c.minlength);
              ref::Array want({bins}, 0.0), abs_sum({bins}, 0.0);
              for (int64_t i = 0; i < c.n; ++i) {
                const size_t b = static_cast<size_t>(xa.v[i]);
                want.v[b] += w ? wts.a.v[i] : 1.0;
                abs_sum.v[b] += w ? std::fabs(wts.a.v[i]) : 1.0;
              }
              const DType out = w == 0 ? kInt64 : w == 1 ? kFloat32 : kFloat64;
              ASSERT_TRUE(th::expect_shape(y, {bins}, out));
              if (w == 0 || w == 3) {
                ASSERT_TRUE(th::expect_equal(y, want));  // counts and integer sums are exact
              } else {
                const ref::Array tol = th::sum_tol(out, c.n, abs_sum);
                ASSERT_TRUE(th::expect_close(y, want, th::Tol{}, &tol));
              }
            }))
          return;
      }
}

TEST_P(ReleaseOps, BincountEdgesAndErrors) {
  const TensorOptions l = TensorOptions(kInt64).device(dev());
  // Empty input: minlength int64 zeros, with or without weights (as PyTorch).
  Tensor e = bincount(zeros({0}, l), zeros({0}, TensorOptions(kFloat32).device(dev())), 4);
  ASSERT_TRUE(th::expect_shape(e, {4}, kInt64));
  EXPECT_TRUE(th::expect_equal(e, ref::Array({4}, 0.0)));
  EXPECT_EQ(bincount(zeros({0}, l)).numel(), 0);
  // Half weights give float64 sums.
  Tensor x = th::make_tensor(array_of({4}, {0, 1, 1, 3}), kInt64, dev());
  Tensor wh = th::make_tensor(array_of({4}, {0.5, 1, 2, 4}), kFloat16, dev());
  Tensor yh = bincount(x, wh);
  ASSERT_TRUE(th::expect_shape(yh, {4}, kFloat64));
  EXPECT_TRUE(th::expect_equal(yh, array_of({4}, {0.5, 3, 0, 4})));
  EXPECT_THROWS_SAYING(ValueError, "bincount", "minlength should be >= 0", bincount(x, {}, -1));
  EXPECT_THROWS_SAYING(ValueError, "bincount", "bincount only supports 1-d non-negative integral inputs.",
                       bincount(th::make_tensor(array_of({2}, {1, -1}), kInt64, dev())));
  EXPECT_THROWS_SAYING(ValueError, "bincount", "bincount only supports 1-d non-negative integral inputs.",
                       bincount(th::make_tensor(array_of({3}, {70000, -3, 5}), kInt64, dev())));
  EXPECT_THROWS_SAYING(ShapeError, "bincount", "bincount only supports 1-d non-negative integral inputs.",
                       bincount(zeros({2, 2}, l)));
  EXPECT_THROWS_SAYING(DTypeError, "bincount", "not implemented for 'float32'",
                       bincount(zeros({2}, TensorOptions(kFloat32).device(dev()))));
  EXPECT_THROWS_SAYING(DTypeError, "bincount", "not implemented for 'bool'", bincount(zeros({2}, TensorOptions(kBool).device(dev()))));
  EXPECT_THROWS_SAYING(ShapeError, "bincount", "weights should be 1-d and have the same length as input",
                       bincount(x, ones({3}, TensorOptions(kFloat32).device(dev()))));
}

}  // namespace

ANVIL_INSTANTIATE_DEVICE_TESTS(ReleaseOps);
