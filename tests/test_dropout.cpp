// Dropout: the mask against the documented Philox keep rule (scalar Philox-4x32-10 of
// core/philox.h, itself checked against Random123's known answer), values against x * mask *
// scale rounded once, the generator's counter contract, keep frequencies within binomial bounds,
// p = 0 / p = 1 (NaN stays NaN) / eval / empty as PyTorch, layouts, the backward, CPU == CUDA
// bits, and the errors, on every device.
#include <cmath>
#include <limits>

#include "core/kernels/dropout.h"
#include "expect_throws.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

// The mask the rule of core/kernels/dropout.h gives for n elements from counter `offset`.
std::vector<double> keep_rule(uint64_t seed, uint64_t offset, int64_t n, double p) {
  const uint32_t thr = dropout_threshold(1.0 - p);
  std::vector<double> m(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    m[static_cast<size_t>(i)] = dropout_keeps(philox4x32(seed, offset + static_cast<uint64_t>(i / 4)).v[i % 4], thr);
  return m;
}

// x * (kept ? scale : 0) in float32 (float64 for float64), rounded once to t.
double masked(double x, bool kept, double scale, DType t) {
  if (t == kFloat64) return x * (kept ? scale : 0.0);
  const float v = static_cast<float>(x) * (kept ? static_cast<float>(scale) : 0.0f);
  return th::round_to_dtype(v, t);
}

// Same values, NaN meeting NaN and zeros by sign.
::testing::AssertionResult same_values(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) ||
                      (got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]));
    if (!same) return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  }
  return ::testing::AssertionSuccess();
}

class Dropout : public th::DeviceTest {};

// Random123's known answer for Philox-4x32-10 at counter 0, key 0: 6627e8d5 e169c58d bc57ac4c
// 9b00dbd8. With p = 0.5 an element keeps when its word is below 2^31: only the first.
TEST_P(Dropout, PhiloxKnownAnswer) {
  const Philox4 r = philox4x32(0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  manual_seed(0);
  auto [out, mask] = native_dropout(ones({4}, TensorOptions(kFloat32).device(dev())), 0.5, true);
  EXPECT_EQ(mask.dtype(), kBool);
  EXPECT_EQ(th::to_array(mask).v, (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(th::to_array(out).v, (std::vector<double>{2, 0, 0, 0}));
}

// Every dtype and odd size: the mask is the rule's from the generator's counter, the values
// x * mask * scale rounded once; consecutive calls continue the counter by ceil(n / 4).
TEST_P(Dropout, MaskAndValuesFollowTheRule) {
  th::CaseLoop loop;
  th::Gen g(7100);
  for (const Shape& s : std::vector<Shape>{{1}, {3}, {4}, {17}, {63}, {4096}, {4097}, {3, 1000}, {2, 3, 4, 1031}})
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64})
      for (double p : {0.1, 0.5, 0.9, 1.0 / 3.0})
        if (!loop.run(th::case_name(s, t, Layout::Contiguous, dev()) + " p" + std::to_string(p), [&] {
              const th::Input x = th::make_input(s, t, dev(), Layout::Contiguous, g, -4, 4);
              const int64_t n = x.t.numel();
              manual_seed(99);
              (void)native_dropout(zeros({5}, TensorOptions(t).device(dev())), p);  // counters 0, 1
              auto [out, mask] = native_dropout(x.t, p);
              const std::vector<double> want_mask = keep_rule(99, 2, n, p);
              ASSERT_EQ(th::to_array(mask).v, want_mask);
              std::vector<double> want(static_cast<size_t>(n));
              for (size_t i = 0; i < want.size(); ++i) want[i] = masked(x.a.v[i], want_mask[i] != 0, 1.0 / (1.0 - p), t);
              ASSERT_TRUE(same_values(th::to_array(out).v, want));
              ASSERT_EQ(out.dtype(), t);
              ASSERT_EQ(out.sizes(), s);
              // The next call starts past this one's counters; dropout draws as native_dropout.
              const Tensor next = dropout(ones({8}, TensorOptions(kFloat32).device(dev())), p);
              const std::vector<double> next_mask = keep_rule(99, 2 + static_cast<uint64_t>((n + 3) / 4), 8, p);
              std::vector<double> next_want(8);
              for (size_t i = 0; i < 8; ++i) next_want[i] = masked(1.0, next_mask[i] != 0, 1.0 / (1.0 - p), kFloat32);
              ASSERT_TRUE(same_values(th::to_array(next).v, next_want));
            }))
          return;
}

// The kept fraction of 2^20 draws lies within 6 binomial standard deviations of 1 - p.
TEST_P(Dropout, KeepFrequency) {
  const int64_t n = 1 << 20;
  manual_seed(2024);
  for (double p : {0.05, 0.25, 0.5, 0.8}) {
    auto [out, mask] = native_dropout(ones({n}, TensorOptions(kBFloat16).device(dev())), p);
    const double kept = th::to_array(sum(mask.to(kFloat64))).v[0];
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(kept, n * (1 - p), 6 * sd) << "p " << p;
  }
}

// p = 1 zeroes by x * 0 (NaN and inf give NaN, -x gives -0); p = 0, eval and empty inputs
// return x itself from dropout; native_dropout copies in eval and draws for p = 0.
TEST_P(Dropout, EdgesAsPyTorch) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  ref::Array a({6});
  a.v = {nan, inf, -inf, -2.0, 0.0, 3.5};
  for (DType t : {kFloat32, kBFloat16, kFloat64}) {
    SCOPED_TRACE(th::dtype_str(t));
    const Tensor x = th::make_tensor(a, t, dev());
    const std::vector<double> zeroed = {nan, nan, nan, -0.0, 0.0, 0.0};
    EXPECT_TRUE(same_values(th::to_array(dropout(x, 1.0)).v, zeroed));
    auto [out, mask] = native_dropout(x, 1.0);
    EXPECT_TRUE(same_values(th::to_array(out).v, zeroed));
    EXPECT_EQ(th::to_array(mask).v, std::vector<double>(6, 0.0));

    EXPECT_EQ(dropout(x, 0.0).raw_data_ptr(), x.raw_data_ptr());
    EXPECT_EQ(dropout(x, 0.5, false).raw_data_ptr(), x.raw_data_ptr());
    auto [eval_out, eval_mask] = native_dropout(x, 0.5, false);
    EXPECT_NE(eval_out.raw_data_ptr(), x.raw_data_ptr());
    EXPECT_TRUE(same_values(th::to_array(eval_out).v, a.v));
    EXPECT_EQ(eval_mask.dtype(), kBool);
    EXPECT_EQ(th::to_array(eval_mask).v, std::vector<double>(6, 1.0));

    manual_seed(5);
    auto [p0_out, p0_mask] = native_dropout(x, 0.0);
    EXPECT_TRUE(same_values(th::to_array(p0_out).v, a.v));
    EXPECT_EQ(th::to_array(p0_mask).v, std::vector<double>(6, 1.0));
    // It took its two counters: the next draw starts at counter 2.
    auto [after, after_mask] = native_dropout(ones({4}, TensorOptions(kFloat32).device(dev())), 0.5);
    EXPECT_EQ(th::to_array(after_mask).v, keep_rule(5, 2, 4, 0.5));

    const Tensor e = empty({0, 3}, TensorOptions(t).device(dev()));
    EXPECT_EQ(dropout(e, 0.5).raw_data_ptr(), e.raw_data_ptr());
    auto [e_out, e_mask] = native_dropout(e, 0.5);
    EXPECT_EQ(e_out.sizes(), (Shape{0, 3}));
    EXPECT_EQ(e_mask.dtype(), kBool);
    EXPECT_EQ(e_mask.sizes(), (Shape{0, 3}));
    EXPECT_EQ(native_dropout_backward(e, e_mask, 2.0).sizes(), (Shape{0, 3}));
  }
}

// A channels-last input stays channels-last, the counter running in its memory order; strided
// inputs give x * mask * scale element by element; the backward is grad * mask * scale.
TEST_P(Dropout, LayoutsAndBackward) {
  th::Gen g(7101);
  const double p = 0.3, scale = 1.0 / 0.7;
  for (DType t : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(th::dtype_str(t));
    const th::Input x = th::make_input({2, 5, 3, 7}, t, dev(), Layout::Contiguous, g, -2, 2);
    const Tensor cl = x.t.contiguous(MemoryFormat::ChannelsLast);
    manual_seed(11);
    auto [out, mask] = native_dropout(cl, p);
    EXPECT_TRUE(out.is_contiguous(MemoryFormat::ChannelsLast));
    EXPECT_TRUE(mask.is_contiguous(MemoryFormat::ChannelsLast));
    // Memory order: the permuted [N, H, W, C] view is row-major.
    const std::vector<double> want_mask = keep_rule(11, 0, x.t.numel(), p);
    EXPECT_EQ(th::to_array(mask.permute({0, 2, 3, 1})).v, want_mask);
    const ref::Array xm = th::to_array(cl.permute({0, 2, 3, 1}));
    std::vector<double> want(want_mask.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = masked(xm.v[i], want_mask[i] != 0, scale, t);
    EXPECT_TRUE(same_values(th::to_array(out.permute({0, 2, 3, 1})).v, want));

    for (Layout l : {Layout::Transposed, Layout::Strided, Layout::Offset}) {
      SCOPED_TRACE(th::layout_name(l));
      const th::Input y = th::make_input({9, 33}, t, dev(), l, g, -2, 2);
      auto [yo, ym] = native_dropout(y.t, p);
      const ref::Array m = th::to_array(ym);
      std::vector<double> yw(m.v.size());
      for (size_t i = 0; i < yw.size(); ++i) yw[i] = masked(y.a.v[i], m.v[i] != 0, scale, t);
      EXPECT_TRUE(same_values(th::to_array(yo).v, yw));

      // Backward over a gradient in this layout (NaN where the mask drops stays NaN).
      th::Input gr = th::make_input({9, 33}, t, dev(), l, g, -3, 3);
      const Tensor gi = native_dropout_backward(gr.t, ym, scale);
      std::vector<double> gw(m.v.size());
      for (size_t i = 0; i < gw.size(); ++i) gw[i] = masked(gr.a.v[i], m.v[i] != 0, scale, t);
      EXPECT_TRUE(same_values(th::to_array(gi).v, gw));
    }
    const Tensor nan_grad = full({8}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(t).device(dev()));
    const Tensor none = zeros({8}, TensorOptions(kBool).device(dev()));
    for (double v : th::to_array(native_dropout_backward(nan_grad, none, 2.0)).v) EXPECT_TRUE(std::isnan(v));
  }
}

// The vector Philox across the 2^32 boundary of the counter's low word (set_rng_offset), against
// the scalar rule; rng_offset reports the counters a call took.
TEST_P(Dropout, CounterCarryPast32Bits) {
  const int64_t n = 4 * 300 + 3;
  for (uint64_t offset : {0xFFFFFFF0ull, 0x1FFFFFFFDull}) {
    manual_seed(0x0123456789ABCDEFull);
    set_rng_offset(offset);
    EXPECT_EQ(rng_offset(), offset);
    auto [out, mask] = native_dropout(ones({n}, TensorOptions(kFloat32).device(dev())), 0.5);
    EXPECT_EQ(rng_offset(), offset + 301);
    const std::vector<double> want = keep_rule(0x0123456789ABCDEFull, offset, n, 0.5);
    EXPECT_EQ(th::to_array(mask).v, want) << "offset " << offset;
    std::vector<double> want_out(want.size());
    for (size_t i = 0; i < want.size(); ++i) want_out[i] = 2.0 * want[i];
    EXPECT_EQ(th::to_array(out).v, want_out);
  }
}

// CUDA draws the CPU's mask and values bit for bit for a seed.
TEST_P(Dropout, SameBitsOnCpuAndCuda) {
  if (!dev().is_cuda()) GTEST_SKIP() << "compares a CUDA device with the CPU";
  th::Gen g(7102);
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64})
    for (const Shape& s : std::vector<Shape>{{5}, {1000003}, {3, 4097}}) {
      SCOPED_TRACE(th::case_name(s, t, Layout::Contiguous, dev()));
      const ref::Array a = th::random_array(s, t, g, -3, 3);
      manual_seed(77);
      auto [co, cm] = native_dropout(th::make_tensor(a, t, Device(kCPU)), 0.37);
      manual_seed(77);
      auto [go, gm] = native_dropout(th::make_tensor(a, t, dev()), 0.37);
      EXPECT_EQ(th::to_bits(gm), th::to_bits(cm));
      EXPECT_EQ(th::to_bits(go), th::to_bits(co));
      const Tensor gg = th::make_tensor(a, t, dev());
      EXPECT_EQ(th::to_bits(native_dropout_backward(gg, gm, 1.0 / 0.63)),
                th::to_bits(native_dropout_backward(th::to_cpu(gg), cm, 1.0 / 0.63)));
    }
}

TEST_P(Dropout, Errors) {
  const Tensor x = zeros({4}, TensorOptions(kFloat32).device(dev()));
  EXPECT_THROWS_SAYING(ShapeError, "dropout", "dropout probability has to be between 0 and 1, but got 1.5",
                       dropout(x, 1.5));
  EXPECT_THROWS_SAYING(ShapeError, "native_dropout", "between 0 and 1", native_dropout(x, -0.1));
  EXPECT_THROWS_SAYING(ShapeError, "dropout", "between 0 and 1", dropout(x, std::nan("")));
  EXPECT_THROWS_SAYING(DTypeError, "dropout", "expected a floating input",
                       dropout(zeros({4}, TensorOptions(kInt64).device(dev())), 0.5));
  EXPECT_THROWS_SAYING(DTypeError, "native_dropout", "expected a floating input",
                       native_dropout(zeros({4}, TensorOptions(kFloat8_e4m3fn).device(dev())), 0.5));
  const Tensor m = ones({4}, TensorOptions(kBool).device(dev()));
  EXPECT_THROWS_SAYING(DTypeError, "native_dropout_backward", "Mask should be Bool Scalar Type",
                       native_dropout_backward(x, zeros({4}, TensorOptions(kFloat32).device(dev())), 2.0));
  EXPECT_THROWS_SAYING(ShapeError, "native_dropout_backward", "must have the shape of grad_output",
                       native_dropout_backward(x, ones({5}, TensorOptions(kBool).device(dev())), 2.0));
  EXPECT_THROWS_SAYING(DTypeError, "native_dropout_backward", "expected a floating grad_output",
                       native_dropout_backward(zeros({4}, TensorOptions(kInt32).device(dev())), m, 2.0));
}

}  // namespace

ANVIL_INSTANTIATE_DEVICE_TESTS(Dropout);
