// Layer and group norm (anvil/norm.h): forward (out, mean, rstd) against float64 loops, the
// backward's three gradients against central differences of those loops, PyTorch's shape
// errors, on every device.
#include <cmath>

#include "expect_throws.h"
#include "finite_diff.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

// Rows of m elements normalised: out = (x - mean) * rstd * w[col(i)] + b[col(i)], with the
// affine index col(i) given per element.
struct RefNorm {
  std::vector<double> out, mean, rstd;
};
template <typename Col>
RefNorm ref_norm(const std::vector<double>& x, int64_t rows, int64_t m, const std::vector<double>& w,
                 const std::vector<double>& b, double eps, Col col) {
  RefNorm r{std::vector<double>(x.size()), {}, {}};
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < m; ++j) mu += x[i * m + j];
    mu /= static_cast<double>(m);
    for (int64_t j = 0; j < m; ++j) var += (x[i * m + j] - mu) * (x[i * m + j] - mu);
    var /= static_cast<double>(m);
    const double rs = 1.0 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (int64_t j = 0; j < m; ++j) {
      const size_t e = static_cast<size_t>(i * m + j);
      const int64_t c = col(e);
      r.out[e] = (x[e] - mu) * rs * (w.empty() ? 1.0 : w[c]) + (b.empty() ? 0.0 : b[c]);
    }
  }
  return r;
}

using th::array_of;
using th::central_differences;

class LayerGroupNorm : public th::DeviceTest {};

TEST_P(LayerGroupNorm, LayerNormForwardTable) {
  th::CaseLoop loop;
  th::Gen g(5300);
  struct C {
    Shape x, norm;
    bool affine;
  };
  const std::vector<C> cases = {{{4, 7}, {7}, true}, {{2, 3, 5}, {3, 5}, false}, {{3, 1000}, {1000}, true}, {{6}, {6}, true}};
  for (const C& c : cases)
    for (DType t : {kFloat32, kBFloat16, kFloat64, kFloat16}) {
      if (!loop.run(th::case_name(c.x, t, Layout::Contiguous, dev()) + " norm " + ref::shape_to_string(c.norm), [&] {
            th::Input x = th::make_input(c.x, t, dev(), Layout::Transposed, g, -2, 4);
            th::Input w = th::make_input(c.norm, t, dev(), Layout::Contiguous, g, 0.5, 1.5);
            th::Input b = th::make_input(c.norm, t, dev(), Layout::Contiguous, g, -1, 1);
            const int64_t m = ref::numel_of(c.norm), rows = ref::numel_of(c.x) / m;
            auto [y, mean, rstd] = native_layer_norm(x.t, c.norm, c.affine ? w.t : Tensor(), c.affine ? b.t : Tensor(), 1e-5);
            const RefNorm want = ref_norm(x.a.v, rows, m, c.affine ? w.a.v : std::vector<double>{},
                                          c.affine ? b.a.v : std::vector<double>{}, 1e-5,
                                          [&](size_t e) { return static_cast<int64_t>(e) % m; });
            Shape ss(c.x.begin(), c.x.end() - static_cast<std::ptrdiff_t>(c.norm.size()));
            ss.resize(c.x.size(), 1);
            const double u = th::unit_roundoff(th::compute_dtype(t)), uo = th::unit_roundoff(t);
            // Moments in the compute type, then one rounding: a few ulps of it times the scale (|x| <= 4).
            ASSERT_TRUE(th::expect_close(y, array_of(c.x, want.out), th::Tol{64 * u * std::sqrt(static_cast<double>(m)), 2 * uo}));
            ASSERT_TRUE(th::expect_close(mean, array_of(ss, want.mean), th::Tol{16 * u, 2 * uo}));
            ASSERT_TRUE(th::expect_close(rstd, array_of(ss, want.rstd), th::Tol{0, 2 * uo + 64 * u * std::sqrt(static_cast<double>(m))}));
            ASSERT_TRUE(th::expect_equal(layer_norm(x.t, c.norm, c.affine ? w.t : Tensor(), c.affine ? b.t : Tensor()), th::to_array(y)));
          }))
        return;
    }
}

TEST_P(LayerGroupNorm, GroupNormForwardTable) {
  th::CaseLoop loop;
  th::Gen g(5301);
  struct C {
    Shape x;
    int64_t groups;
  };
  // [1, 64, 64, 64] in 8 groups: CUDA cuts each row into 16 chunks; [2, 6, 5, 7]: element loads.
  const std::vector<C> cases = {{{2, 6, 5}, 3},      {{3, 4, 2, 3}, 2},      {{1, 8, 17}, 8}, {{2, 32, 9, 9}, 4},
                                {{4, 5}, 1},         {{1, 64, 64, 64}, 8}, {{2, 6, 5, 7}, 6}, {{3, 4}, 4}};
  for (const C& c : cases)
    for (DType t : {kFloat32, kBFloat16, kFloat64}) {
      if (!loop.run(th::case_name(c.x, t, Layout::Contiguous, dev()) + " groups " + std::to_string(c.groups), [&] {
            th::Input x = th::make_input(c.x, t, dev(), Layout::Contiguous, g, -2, 4);
            const int64_t n = c.x[0], ch = c.x[1], hxw = ref::numel_of(c.x) / (n * ch);
            th::Input w = th::make_input({ch}, t, dev(), Layout::Contiguous, g, 0.5, 1.5);
            th::Input b = th::make_input({ch}, t, dev(), Layout::Contiguous, g, -1, 1);
            auto [y, mean, rstd] = native_group_norm(x.t, w.t, b.t, n, ch, hxw, c.groups, 1e-5);
            const int64_t m = ch / c.groups * hxw;
            const RefNorm want = ref_norm(x.a.v, n * c.groups, m, w.a.v, b.a.v, 1e-5,
                                          [&](size_t e) { return (static_cast<int64_t>(e) / hxw) % ch; });
            const double u = th::unit_roundoff(th::compute_dtype(t)), uo = th::unit_roundoff(t);
            ASSERT_TRUE(th::expect_close(y, array_of(c.x, want.out), th::Tol{64 * u * std::sqrt(static_cast<double>(m)), 2 * uo}));
            ASSERT_TRUE(th::expect_close(mean, array_of({n, c.groups}, want.mean), th::Tol{16 * u * std::sqrt(static_cast<double>(m)), 2 * uo}));
            ASSERT_TRUE(th::expect_close(rstd, array_of({n, c.groups}, want.rstd), th::Tol{0, 2 * uo + 64 * u * std::sqrt(static_cast<double>(m))}));
            ASSERT_TRUE(th::expect_equal(group_norm(x.t, c.groups, w.t, b.t), th::to_array(y)));
            ASSERT_EQ(group_norm_plan(x.t, c.groups), FusedPlan::Fused);
          }))
        return;
    }
}

// Every gradient against central differences of sum(grad_out * out) in float64.
TEST_P(LayerGroupNorm, BackwardMatchesFiniteDifferences) {
  th::Gen g(5302);
  for (bool group : {false, true}) {
    SCOPED_TRACE(group ? "group_norm" : "layer_norm");
    const Shape xs = group ? Shape{2, 4, 3} : Shape{3, 2, 4};
    const Shape ws = group ? Shape{4} : Shape{2, 4};
    th::Input x = th::make_input(xs, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
    th::Input w = th::make_input(ws, kFloat64, dev(), Layout::Contiguous, g, 0.5, 1.5);
    th::Input b = th::make_input(ws, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
    th::Input go = th::make_input(xs, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
    const int64_t groups = 2, n = xs[0], c = xs[1], hxw = 3;
    auto forward = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
      const RefNorm r = group ? ref_norm(xv, n * groups, c / groups * hxw, wv, bv, 1e-5,
                                         [&](size_t e) { return (static_cast<int64_t>(e) / hxw) % c; })
                              : ref_norm(xv, 3, 8, wv, bv, 1e-5, [&](size_t e) { return static_cast<int64_t>(e) % 8; });
      double s = 0;
      for (size_t i = 0; i < r.out.size(); ++i) s += go.a.v[i] * r.out[i];
      return s;
    };
    const std::vector<double> dx = central_differences(x.a.v, [&](const std::vector<double>& v) { return forward(v, w.a.v, b.a.v); });
    const std::vector<double> dw = central_differences(w.a.v, [&](const std::vector<double>& v) { return forward(x.a.v, v, b.a.v); });
    const std::vector<double> db = central_differences(b.a.v, [&](const std::vector<double>& v) { return forward(x.a.v, w.a.v, v); });
    Tensor gx, gw, gb;
    if (group) {
      auto [y, mean, rstd] = native_group_norm(x.t, w.t, b.t, n, c, hxw, groups, 1e-5);
      std::tie(gx, gw, gb) = native_group_norm_backward(go.t, x.t, mean, rstd, w.t, n, c, hxw, groups);
    } else {
      auto [y, mean, rstd] = native_layer_norm(x.t, ws, w.t, b.t, 1e-5);
      std::tie(gx, gw, gb) = native_layer_norm_backward(go.t, x.t, ws, mean, rstd, w.t, b.t);
    }
    EXPECT_TRUE(th::expect_close(gx, array_of(xs, dx), th::Tol{1e-7, 1e-6}));
    EXPECT_TRUE(th::expect_close(gw, array_of(ws, dw), th::Tol{1e-7, 1e-6}));
    EXPECT_TRUE(th::expect_close(gb, array_of(ws, db), th::Tol{1e-7, 1e-6}));
  }
  // output_mask leaves the unasked gradients undefined.
  th::Input x = th::make_input({2, 3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  auto [y, mean, rstd] = native_layer_norm(x.t, {3}, {}, {}, 1e-5);
  auto [gx, gw, gb] = native_layer_norm_backward(ones_like(y), x.t, {3}, mean, rstd, {}, {}, {true, false, false});
  EXPECT_TRUE(gx.defined());
  EXPECT_FALSE(gw.defined());
  EXPECT_FALSE(gb.defined());
}

// rms_norm's backward against central differences of sum(g * x * rsqrt(mean(x^2) + eps) * w) in
// float64, and in bfloat16 against that float64 gradient within a few of its ulps.
TEST_P(LayerGroupNorm, RmsNormBackward) {
  th::Gen g(5303);
  for (DType t : {kFloat64, kBFloat16, kFloat32}) {
    SCOPED_TRACE(th::dtype_str(t));
    const Shape xs = {3, 2, 8}, ws = {8};
    th::Input x = th::make_input(xs, t, dev(), Layout::Contiguous, g, -2, 2);
    th::Input w = th::make_input(ws, t, dev(), Layout::Contiguous, g, 0.5, 1.5);
    th::Input go = th::make_input(xs, t, dev(), Layout::Contiguous, g, -1, 1);
    const double eps = 1e-6;
    auto objective = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
      double s = 0;
      for (int64_t i = 0; i < 6; ++i) {
        double ms = 0;
        for (int64_t j = 0; j < 8; ++j) ms += xv[i * 8 + j] * xv[i * 8 + j];
        const double r = 1.0 / std::sqrt(ms / 8 + eps);
        for (int64_t j = 0; j < 8; ++j) s += go.a.v[i * 8 + j] * xv[i * 8 + j] * r * wv[j];
      }
      return s;
    };
    const std::vector<double> dx = central_differences(x.a.v, [&](const std::vector<double>& v) { return objective(v, w.a.v); });
    const std::vector<double> dw = central_differences(w.a.v, [&](const std::vector<double>& v) { return objective(x.a.v, v); });
    auto [gx, gw] = rms_norm_backward(go.t, x.t, {8}, w.t, eps);
    ASSERT_TRUE(th::expect_shape(gx, xs, t));
    ASSERT_TRUE(th::expect_shape(gw, ws, t));
    const double uo = th::unit_roundoff(t), tol = t == kFloat64 ? 1e-7 : 32 * th::unit_roundoff(th::compute_dtype(t));
    EXPECT_TRUE(th::expect_close(gx, array_of(xs, dx), th::Tol{tol * 4, 2 * uo + 1e-6}));
    EXPECT_TRUE(th::expect_close(gw, array_of(ws, dw), th::Tol{tol * 8, 2 * uo + 1e-6}));
  }
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  auto [gx, gw] = rms_norm_backward(ones({2, 3}, f), ones({2, 3}, f), {3}, {}, std::nullopt, {true, false});
  EXPECT_TRUE(gx.defined());
  EXPECT_FALSE(gw.defined());
}

TEST_P(LayerGroupNorm, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  EXPECT_THROWS_SAYING(ShapeError, "layer_norm", "Given normalized_shape=[4], expected input with shape [*, 4], but got input of size[2, 3]",
                       layer_norm(ones({2, 3}, f), {4}));
  EXPECT_THROWS_SAYING(ShapeError, "layer_norm", "Expected weight to be of same shape as normalized_shape",
                       layer_norm(ones({2, 3}, f), {3}, ones({2}, f)));
  EXPECT_THROWS_SAYING(ShapeError, "group_norm", "Expected number of channels in input to be divisible by num_groups",
                       group_norm(ones({2, 6, 3}, f), 4));
  EXPECT_THROWS_SAYING(ShapeError, "group_norm", "Expected weight to be a vector of size equal to the number of channels",
                       group_norm(ones({2, 6, 3}, f), 3, ones({5}, f)));
  EXPECT_THROWS_SAYING(DTypeError, "layer_norm", "expected a floating input",
                       layer_norm(ones({2, 3}, TensorOptions(kInt32).device(dev())), {3}));
}

}  // namespace

ANVIL_INSTANTIATE_DEVICE_TESTS(LayerGroupNorm);
