// Batch norm (anvil/norm.h): native_batch_norm's out, save_mean, save_invstd and running
// statistics against float64 loops in training and eval, contiguous and channels-last (which
// stays channels-last), the save dtype rule, batch_norm's cumulative average, the backward's
// three gradients against central differences, PyTorch's messages, on every device.
#include <cmath>

#include "expect_throws.h"
#include "finite_diff.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::array_of;
using th::central_differences;
using th::Layout;

// x [N, C, S] row-major in float64. Training: batch mean / biased var normalise and the running
// statistics move by momentum (unbiased var); eval: the running statistics normalise.
struct RefBatchNorm {
  std::vector<double> out, mean, invstd, running_mean, running_var;
};
RefBatchNorm ref_batch_norm(const std::vector<double>& x, int64_t n, int64_t c, int64_t s, const std::vector<double>& w,
                            const std::vector<double>& b, std::vector<double> rm, std::vector<double> rv, bool training,
                            double momentum, double eps) {
  RefBatchNorm r{std::vector<double>(x.size()), {}, {}, {}, {}};
  const int64_t m = n * s;
  for (int64_t ch = 0; ch < c; ++ch) {
    auto at = [&](int64_t i, int64_t j) { return static_cast<size_t>((i * c + ch) * s + j); };
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) mu += x[at(i, j)];
    mu /= static_cast<double>(m);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) var += (x[at(i, j)] - mu) * (x[at(i, j)] - mu);
    const double biased = var / static_cast<double>(m), unbiased = var / static_cast<double>(m - 1);
    double use_mu = mu, use_var = biased;
    if (training) {
      if (!rm.empty()) rm[static_cast<size_t>(ch)] = (1 - momentum) * rm[static_cast<size_t>(ch)] + momentum * mu;
      if (!rv.empty()) rv[static_cast<size_t>(ch)] = (1 - momentum) * rv[static_cast<size_t>(ch)] + momentum * unbiased;
    } else {
      use_mu = rm[static_cast<size_t>(ch)];
      use_var = rv[static_cast<size_t>(ch)];
    }
    const double is = 1.0 / std::sqrt(use_var + eps);
    r.mean.push_back(mu);
    r.invstd.push_back(1.0 / std::sqrt(biased + eps));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j)
        r.out[at(i, j)] = (x[at(i, j)] - use_mu) * is * (w.empty() ? 1.0 : w[static_cast<size_t>(ch)]) +
                          (b.empty() ? 0.0 : b[static_cast<size_t>(ch)]);
  }
  r.running_mean = rm;
  r.running_var = rv;
  return r;
}

int64_t spatial(const Shape& s) {
  int64_t p = 1;
  for (size_t d = 2; d < s.size(); ++d) p *= s[d];
  return p;
}

class BatchNorm : public th::DeviceTest {};

TEST_P(BatchNorm, ForwardTable) {
  th::CaseLoop loop;
  th::Gen g(7200);
  // The last two take CUDA's chunked statistics (several blocks per channel), its 16-byte loads
  // ([8, 16, 40, 41]: runs of 1640, channels-last rows of 16) and its element loads.
  const std::vector<Shape> shapes = {{4, 3},    {2, 5, 7},    {3, 4, 5, 6}, {2, 3, 2, 3, 4},
                                     {5, 2, 1, 1}, {2, 16, 33}, {8, 16, 40, 41}, {3, 7, 33, 35}};
  for (const Shape& xs : shapes)
    for (DType t : {kFloat32, kBFloat16, kFloat64, kFloat16})
      for (bool training : {true, false})
        for (bool cl : {false, true}) {
          if (cl && xs.size() < 4) continue;
          const std::string name = th::case_name(xs, t, Layout::Contiguous, dev()) + (training ? " train" : " eval") +
                                   (cl ? " channels_last" : "");
          if (!loop.run(name, [&] {
                const int64_t n = xs[0], c = xs[1], s = spatial(xs);
                th::Input x = th::make_input(xs, t, dev(), Layout::Contiguous, g, -2, 4);
                th::Input w = th::make_input({c}, t, dev(), Layout::Contiguous, g, 0.5, 1.5);
                th::Input b = th::make_input({c}, t, dev(), Layout::Contiguous, g, -1, 1);
                th::Input rm = th::make_input({c}, t, dev(), Layout::Contiguous, g, -1, 1);
                th::Input rv = th::make_input({c}, t, dev(), Layout::Contiguous, g, 0.5, 2);
                Tensor xin = x.t;
                if (cl) xin = x.t.contiguous(xs.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d);
                auto [y, sm, si] = native_batch_norm(xin, w.t, b.t, rm.t, rv.t, training, 0.1, 1e-5);
                const RefBatchNorm want = ref_batch_norm(x.a.v, n, c, s, w.a.v, b.a.v, rm.a.v, rv.a.v, training, 0.1, 1e-5);
                const double u = th::unit_roundoff(th::compute_dtype(t)), uo = th::unit_roundoff(t);
                const double m = static_cast<double>(n * s);
                ASSERT_TRUE(th::expect_close(y, array_of(xs, want.out), th::Tol{64 * u * std::sqrt(m), 2 * uo}));
                if (cl) {
                  ASSERT_TRUE(y.is_contiguous(xs.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d));
                }
                if (training) {
                  // Sums of m terms (both sides): a random walk of roundings, 16 u sqrt(m).
                  ASSERT_TRUE(th::expect_close(sm, array_of({c}, want.mean), th::Tol{16 * u * std::sqrt(m), 2 * uo}));
                  ASSERT_TRUE(th::expect_close(si, array_of({c}, want.invstd), th::Tol{0, 2 * uo + 64 * u * std::sqrt(m)}));
                } else {
                  ASSERT_EQ(sm.numel(), 0);
                  ASSERT_EQ(si.numel(), 0);
                }
                ASSERT_EQ(sm.dtype(), t);
                // Running statistics: one rounding to t of the float64 update of the rounded batch moments.
                ASSERT_TRUE(th::expect_close(rm.t, array_of({c}, want.running_mean), th::Tol{16 * u * std::sqrt(m), 2 * uo}));
                ASSERT_TRUE(th::expect_close(rv.t, array_of({c}, want.running_var), th::Tol{16 * u, 2 * uo + 64 * u * std::sqrt(m)}));
              }))
            return;
        }
}

// A float32 parameter with a bfloat16 input gives float32 statistics; no affine, no running
// statistics in training; batch_norm equals native_batch_norm's out.
TEST_P(BatchNorm, MixedDtypesAndOptionalParams) {
  th::Gen g(7201);
  th::Input x = th::make_input({4, 3, 5}, kBFloat16, dev(), Layout::Transposed, g, -2, 2);
  th::Input w = th::make_input({3}, kFloat32, dev(), Layout::Contiguous, g, 0.5, 1.5);
  th::Input rm = th::make_input({3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  th::Input rv = th::make_input({3}, kFloat32, dev(), Layout::Contiguous, g, 0.5, 2);
  auto [y, sm, si] = native_batch_norm(x.t, w.t, Tensor(), rm.t, rv.t, true, 0.3, 1e-3);
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(sm.dtype(), kFloat32);
  EXPECT_EQ(si.dtype(), kFloat32);
  const RefBatchNorm want = ref_batch_norm(x.a.v, 4, 3, 5, w.a.v, {}, rm.a.v, rv.a.v, true, 0.3, 1e-3);
  const double u = th::unit_roundoff(kFloat32), uo = th::unit_roundoff(kBFloat16);
  EXPECT_TRUE(th::expect_close(y, array_of({4, 3, 5}, want.out), th::Tol{64 * u * std::sqrt(20.0), 2 * uo}));
  EXPECT_TRUE(th::expect_close(rm.t, array_of({3}, want.running_mean), th::Tol{16 * u, 4 * u}));
  EXPECT_TRUE(th::expect_close(rv.t, array_of({3}, want.running_var), th::Tol{16 * u, 64 * u * std::sqrt(20.0)}));

  auto [y2, sm2, si2] = native_batch_norm(x.t, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  const RefBatchNorm plain = ref_batch_norm(x.a.v, 4, 3, 5, {}, {}, {}, {}, true, 0.1, 1e-5);
  EXPECT_EQ(sm2.dtype(), kBFloat16);
  EXPECT_TRUE(th::expect_close(y2, array_of({4, 3, 5}, plain.out), th::Tol{64 * u * std::sqrt(20.0), 2 * uo}));
  EXPECT_TRUE(th::expect_equal(batch_norm(x.t, Tensor(), Tensor(), Tensor(), Tensor(), true), th::to_array(y2)));
}

// Running statistics the fused kernel updates in place (contiguous) and those it leaves to the
// composition after it (a strided view) move the same way; bfloat16 ones round once from float64.
TEST_P(BatchNorm, RunningStatisticsLayouts) {
  th::Gen g(7204);
  th::Input x = th::make_input({6, 4, 7}, kBFloat16, dev(), Layout::Contiguous, g, -2, 2);
  const TensorOptions bf = TensorOptions(kBFloat16).device(dev());
  Tensor rm = full({4}, 0.25, bf), rv = full({4}, 1.5, bf);
  Tensor wide_m = full({4, 2}, 0.25, bf), wide_v = full({4, 2}, 1.5, bf);
  Tensor rm_strided = wide_m.select(1, 0), rv_strided = wide_v.select(1, 1);  // stride 2
  ASSERT_FALSE(rm_strided.is_contiguous());
  auto [y, sm, si] = native_batch_norm(x.t, Tensor(), Tensor(), rm, rv, true, 0.2, 1e-5);
  auto [y2, sm2, si2] = native_batch_norm(x.t, Tensor(), Tensor(), rm_strided, rv_strided, true, 0.2, 1e-5);
  EXPECT_TRUE(th::expect_equal(y2, th::to_array(y)));
  EXPECT_TRUE(th::expect_equal(rm_strided, th::to_array(rm)));
  EXPECT_TRUE(th::expect_equal(rv_strided, th::to_array(rv)));
  const RefBatchNorm want = ref_batch_norm(x.a.v, 6, 4, 7, {}, {}, std::vector<double>(4, 0.25),
                                           std::vector<double>(4, 1.5), true, 0.2, 1e-5);
  const double u = th::unit_roundoff(kFloat32), uo = th::unit_roundoff(kBFloat16);
  EXPECT_TRUE(th::expect_close(rm, array_of({4}, want.running_mean), th::Tol{16 * u, uo}));
  EXPECT_TRUE(th::expect_close(rv, array_of({4}, want.running_var), th::Tol{64 * u * std::sqrt(42.0), uo}));
  // save_invstd: 1 / sqrt(var + eps) of the batch, as the normalisation used it.
  EXPECT_TRUE(th::expect_close(si, array_of({4}, want.invstd), th::Tol{16 * u * std::sqrt(42.0), uo}));
}

// momentum = nullopt: nn.BatchNorm's cumulative average over the batches seen, counted in
// num_batches_tracked (incremented in training only).
TEST_P(BatchNorm, CumulativeAverage) {
  th::Gen g(7202);
  const TensorOptions f = TensorOptions(kFloat64).device(dev());
  Tensor rm = zeros({2}, f), rv = ones({2}, f);
  Tensor count = zeros({}, TensorOptions(kInt64).device(dev()));
  std::vector<double> mean_sum(2, 0.0), var_sum(2, 0.0);
  for (int step = 0; step < 3; ++step) {
    th::Input x = th::make_input({3, 2, 4}, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
    (void)batch_norm(x.t, Tensor(), Tensor(), rm, rv, true, std::nullopt, 1e-5, count);
    const RefBatchNorm r = ref_batch_norm(x.a.v, 3, 2, 4, {}, {}, {0, 0}, {0, 0}, true, 1.0, 1e-5);
    for (size_t ch = 0; ch < 2; ++ch) {
      mean_sum[ch] += r.running_mean[ch];
      var_sum[ch] += r.running_var[ch];
    }
  }
  EXPECT_EQ(th::to_array(count).v[0], 3);
  EXPECT_TRUE(th::expect_close(rm, array_of({2}, {mean_sum[0] / 3, mean_sum[1] / 3}), th::Tol{1e-15, 1e-14}));
  EXPECT_TRUE(th::expect_close(rv, array_of({2}, {var_sum[0] / 3, var_sum[1] / 3}), th::Tol{1e-15, 1e-14}));
  // Eval leaves the count and the statistics alone.
  th::Input x = th::make_input({3, 2, 4}, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
  const ref::Array before = th::to_array(rm);
  (void)batch_norm(x.t, Tensor(), Tensor(), rm, rv, false, std::nullopt, 1e-5, count);
  EXPECT_EQ(th::to_array(count).v[0], 3);
  EXPECT_TRUE(th::expect_equal(rm, before));
}

// Every gradient against central differences of sum(grad_out * out) in float64, training and
// eval, contiguous and channels-last; output_mask; bfloat16 near the float64 gradients.
TEST_P(BatchNorm, BackwardMatchesFiniteDifferences) {
  th::Gen g(7203);
  const Shape xs{3, 2, 2, 3};
  const int64_t n = 3, c = 2, s = 6;
  for (bool training : {true, false})
    for (bool cl : {false, true}) {
      SCOPED_TRACE(std::string(training ? "train" : "eval") + (cl ? " channels_last" : ""));
      th::Input x = th::make_input(xs, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
      th::Input w = th::make_input({c}, kFloat64, dev(), Layout::Contiguous, g, 0.5, 1.5);
      th::Input b = th::make_input({c}, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
      th::Input rm = th::make_input({c}, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
      th::Input rv = th::make_input({c}, kFloat64, dev(), Layout::Contiguous, g, 0.5, 2);
      th::Input go = th::make_input(xs, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
      auto forward = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
        const RefBatchNorm r = ref_batch_norm(xv, n, c, s, wv, bv, rm.a.v, rv.a.v, training, 0.1, 1e-5);
        double sum = 0;
        for (size_t i = 0; i < r.out.size(); ++i) sum += go.a.v[i] * r.out[i];
        return sum;
      };
      const auto dx = central_differences(x.a.v, [&](const std::vector<double>& v) { return forward(v, w.a.v, b.a.v); });
      const auto dw = central_differences(w.a.v, [&](const std::vector<double>& v) { return forward(x.a.v, v, b.a.v); });
      const auto db = central_differences(b.a.v, [&](const std::vector<double>& v) { return forward(x.a.v, w.a.v, v); });
      const Tensor xin = cl ? x.t.contiguous(MemoryFormat::ChannelsLast) : x.t;
      const Tensor rm0 = rm.t.clone(), rv0 = rv.t.clone();
      auto [y, sm, si] = native_batch_norm(xin, w.t, b.t, rm.t.clone(), rv.t.clone(), training, 0.1, 1e-5);
      auto [gx, gw, gb] = native_batch_norm_backward(go.t, xin, w.t, rm0, rv0, sm, si, training, 1e-5);
      EXPECT_TRUE(th::expect_close(gx, array_of(xs, dx), th::Tol{1e-7, 1e-6}));
      EXPECT_TRUE(th::expect_close(gw, array_of({c}, dw), th::Tol{1e-7, 1e-6}));
      EXPECT_TRUE(th::expect_close(gb, array_of({c}, db), th::Tol{1e-7, 1e-6}));
      if (cl) {
        EXPECT_TRUE(gx.is_contiguous(MemoryFormat::ChannelsLast));
      }
      auto [only_x, no_w, no_b] = native_batch_norm_backward(go.t, xin, w.t, rm0, rv0, sm, si, training, 1e-5,
                                                             {true, false, false});
      EXPECT_TRUE(th::expect_equal(only_x, th::to_array(gx)));
      EXPECT_FALSE(no_w.defined());
      EXPECT_FALSE(no_b.defined());

      // bfloat16: the float64 gradients within the float32 computation's error and one rounding.
      const Tensor xb = xin.to(kBFloat16), gob = go.t.to(kBFloat16), wb = w.t.to(kBFloat16);
      const ref::Array xr = th::to_array(xb), gr = th::to_array(gob), wr = th::to_array(wb);
      const Tensor rmb = rm.t.to(kBFloat16), rvb = rv.t.to(kBFloat16);
      auto forward_b = [&](const std::vector<double>& xv) {
        const RefBatchNorm r = ref_batch_norm(xv, n, c, s, wr.v, {}, th::to_array(rmb).v, th::to_array(rvb).v, training, 0.1, 1e-5);
        double sum = 0;
        for (size_t i = 0; i < r.out.size(); ++i) sum += gr.v[i] * r.out[i];
        return sum;
      };
      const auto dxb = central_differences(xr.v, forward_b);
      auto [yb, smb, sib] = native_batch_norm(xb, wb, Tensor(), rmb.clone(), rvb.clone(), training, 0.1, 1e-5);
      auto [gxb, gwb, gbb] = native_batch_norm_backward(gob, xb, wb, rmb, rvb, smb, sib, training, 1e-5);
      // The saved statistics round to bfloat16 before the backward uses them.
      EXPECT_TRUE(th::expect_close(gxb, array_of(xs, dxb), th::Tol{0.05, 0.02}));
    }
}

TEST_P(BatchNorm, EmptyAndErrors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor rm = zeros({3}, f), rv = ones({3}, f);
  auto [e, sm, si] = native_batch_norm(empty({0, 3, 4}, f), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  EXPECT_EQ(e.sizes(), (Shape{0, 3, 4}));
  EXPECT_EQ(sm.numel(), 3);
  EXPECT_TRUE(th::expect_equal(rm, array_of({3}, {0, 0, 0})));

  const Tensor x = ones({2, 3, 4}, f);
  EXPECT_THROWS_SAYING(ShapeError, "native_batch_norm", "running_mean should contain 3 elements not 4",
                       native_batch_norm(x, Tensor(), Tensor(), zeros({4}, f), rv, true, 0.1, 1e-5));
  EXPECT_THROWS_SAYING(ShapeError, "native_batch_norm", "weight should contain 3 elements not 2",
                       native_batch_norm(x, zeros({2}, f), Tensor(), rm, rv, true, 0.1, 1e-5));
  EXPECT_THROWS_SAYING(Error, "native_batch_norm", "running_mean and running_var must be defined in evaluation mode",
                       native_batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5));
  EXPECT_THROWS_SAYING(ShapeError, "batch_norm", "Expected more than 1 value per channel when training, got input size [1, 3]",
                       batch_norm(ones({1, 3}, f), Tensor(), Tensor(), rm, rv, true));
  EXPECT_THROWS_SAYING(ShapeError, "native_batch_norm", "Expected at least 2 dimensions",
                       native_batch_norm(ones({3}, f), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5));
  EXPECT_THROWS_SAYING(DTypeError, "native_batch_norm", "expected a floating input",
                       native_batch_norm(ones({2, 3}, TensorOptions(kInt32).device(dev())), Tensor(), Tensor(), rm, rv,
                                         true, 0.1, 1e-5));
  EXPECT_THROWS_SAYING(DTypeError, "native_batch_norm", "Expected running_mean to have the input's dtype",
                       native_batch_norm(x, Tensor(), Tensor(), zeros({3}, TensorOptions(kFloat64).device(dev())), rv,
                                         true, 0.1, 1e-5));
  EXPECT_THROWS_SAYING(Error, "batch_norm", "needs num_batches_tracked",
                       batch_norm(x, Tensor(), Tensor(), rm, rv, true, std::nullopt));
  EXPECT_THROWS_SAYING(ShapeError, "native_batch_norm_backward", "does not match input",
                       native_batch_norm_backward(ones({2, 3}, f), x, Tensor(), rm, rv, rm, rv, true, 1e-5));
}

}  // namespace

ANVIL_INSTANTIATE_DEVICE_TESTS(BatchNorm);
