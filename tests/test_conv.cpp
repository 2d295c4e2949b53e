// Convolution (anvil/conv.h): convolution / convolution_backward against the float64 loops of
// tests/reference/ref_conv (1-, 2- and 3-d, groups and depthwise, stride, padding, dilation,
// transposed with output_padding, pointwise, bias; four dtypes; contiguous, channels-last
// input, channels-last weight and non-contiguous inputs), the backward also against central
// differences, chunked columns (a tiny workspace limit), the same bits on every run, the
// conv{1,2,3}d / conv_transpose wrappers (unbatched input, "same" / "valid"), extents past
// 2^16, and PyTorch's messages, on every device.
#include <cmath>
#include <cstdlib>
#include <limits>

#include "expect_throws.h"
#include "finite_diff.h"
#include "harness.h"
#include "reference/ref_conv.h"
#include "reference/ref_pad.h"

namespace {

using namespace anvil;
using th::Layout;

class Conv : public th::DeviceTest {};

struct Case {
  Shape x, w;
  Shape stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
  bool bias = false;
};

std::vector<Case> table() {
  return {
      // conv1d
      {{2, 4, 11}, {6, 4, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 6, 17}, {6, 2, 5}, {2}, {2}, {2}, {0}, 3, false, false},
      {{3, 2, 9}, {5, 2, 1}, {1}, {0}, {1}, {0}, 1, false, true},
      {{2, 8, 20}, {8, 1, 7}, {1}, {3}, {1}, {0}, 8, false, true},
      {{2, 4, 7}, {4, 3, 3}, {2}, {1}, {1}, {1}, 1, true, true},
      {{1, 4, 6}, {4, 2, 3}, {3}, {0}, {2}, {2}, 2, true, false},
      // more channels and outputs: 70 output channels, 37 input channels, 150 outputs, groups
      {{1, 37, 30}, {70, 37, 5}, {1}, {2}, {2}, {0}, 1, false, true},
      {{2, 12, 300}, {16, 6, 3}, {2}, {1}, {1}, {0}, 2, false, false},
      // depthwise: transposed with output_padding (stride 2, and stride 1 with dilation 2), a pad
      // past (k - 1) d (CUDA's input grad as a forward conv then pads by a negative amount)
      {{2, 5, 9}, {5, 1, 4}, {2}, {1}, {1}, {1}, 5, true, true},
      {{2, 5, 9}, {5, 1, 4}, {1}, {1}, {2}, {1}, 5, true, true},
      {{1, 4, 6}, {4, 1, 2}, {1}, {3}, {1}, {0}, 4, false, false},
      // conv2d
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 4, 10, 7}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, {0}, 2, false, false},
      {{2, 6, 5, 5}, {6, 1, 3, 3}, {1}, {1}, {1}, {0}, 6, false, true},
      // depthwise over 20 channels: the CPU's channels-last SIMD rows (a 16-lane vector + a tail)
      {{1, 20, 5, 4}, {20, 1, 3, 3}, {1}, {1}, {1}, {0}, 20, false, true},
      // rows long enough for runs of 10 positions and a ragged end (25 interior positions; 19
      // with 5 taps along W)
      {{1, 18, 3, 27}, {18, 1, 3, 3}, {1}, {1}, {1}, {0}, 18, false, true},
      {{1, 17, 2, 23}, {17, 1, 1, 5}, {1}, {0, 2}, {1}, {0}, 17, false, false},
      {{2, 5, 4, 6}, {3, 5, 1, 1}, {1}, {0}, {1}, {0}, 1, false, true},
      // a width-1 image under a 3 x 3 kernel with padding 1 (the outer taps read only padding;
      // a Wan2.2 VAE tile one latent wide)
      {{1, 4, 5, 1}, {6, 4, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 3, 7, 7}, {2, 3, 1, 1}, {2}, {0}, {1}, {0}, 1, false, false},
      {{2, 4, 5, 4}, {4, 3, 4, 4}, {2}, {1}, {1}, {0}, 1, true, true},
      {{1, 4, 3, 5}, {4, 1, 3, 3}, {2, 3}, {0, 1}, {1}, {1, 2}, 4, true, false},
      {{2, 3, 4, 4}, {3, 2, 1, 1}, {1}, {0}, {1}, {0}, 1, true, true},
      // conv3d
      {{1, 3, 4, 6, 5}, {4, 3, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{2, 4, 5, 4, 4}, {4, 2, 3, 1, 3}, {1, 2, 1}, {1, 0, 1}, {2, 1, 1}, {0}, 2, false, false},
      {{1, 2, 3, 3, 4}, {2, 3, 2, 2, 2}, {2}, {0}, {1}, {0}, 1, true, true},
      {{1, 4, 3, 5, 6}, {2, 4, 3, 3, 3}, {1}, {0, 1, 1}, {1}, {0}, 1, false, true},
      {{1, 3, 4, 5, 6}, {3, 1, 2, 3, 2}, {1, 2, 1}, {1, 1, 0}, {1, 1, 2}, {0}, 3, false, true},
      {{1, 3, 4, 1, 1}, {2, 3, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, false},
      // even channel counts with strides and dilation: the CPU's channels-last bf16 kernel (its
      // stride phases, taps as runs of channels)
      {{2, 6, 9, 8}, {5, 6, 3, 3}, {2}, {1}, {1}, {0}, 1, false, true},
      {{1, 4, 5, 6, 7}, {3, 4, 3, 2, 3}, {2, 1, 2}, {1, 0, 2}, {1, 2, 1}, {0}, 1, false, true},
  };
}

ref::ConvSpec spec_of(const Case& c) {
  const size_t k = c.x.size() - 2;
  auto full = [k](const Shape& v) { return v.size() == 1 ? Shape(k, v[0]) : v; };
  return {full(c.stride), full(c.padding), full(c.dilation), full(c.output_padding), c.groups, c.transposed};
}

ref::Array abs_of(ref::Array a) {
  for (double& v : a.v) v = std::abs(v);
  return a;
}

MemoryFormat channels_last_of(size_t rank) { return rank == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d; }

int64_t taps_of(const Case& c) {
  int64_t k = 1;
  for (size_t i = 2; i < c.w.size(); ++i) k *= c.w[i];
  return k;
}
// Products per element at most: of the output (input channels per group times taps, plus the
// bias) and of grad_input (output channels per group times taps).
int64_t fan_in(const Case& c) { return (c.transposed ? c.w[0] / c.groups : c.w[1]) * taps_of(c) + 1; }
int64_t fan_out(const Case& c) { return (c.transposed ? c.w[1] : c.w[0] / c.groups) * taps_of(c); }

// Forward, input / weight / bias gradients of one case, in dtype t and layout `layout`
// (0 contiguous, 1 channels-last input, 2 channels-last weight, 3 non-contiguous input).
void check_case(const Case& c, DType t, int layout, Device dev, th::Gen& g) {
  const ref::ConvSpec s = spec_of(c);
  th::Input x = th::make_input(c.x, t, dev, layout == 3 ? Layout::Transposed : Layout::Contiguous, g, -2, 2);
  th::Input w = th::make_input(c.w, t, dev, Layout::Contiguous, g, -1, 1);
  const int64_t c_out = c.transposed ? c.w[1] * c.groups : c.w[0];
  th::Input b = th::make_input({c_out}, t, dev, Layout::Contiguous, g, -1, 1);
  const Tensor xt = layout == 1 ? x.t.contiguous(channels_last_of(c.x.size())) : x.t;
  const Tensor wt = layout == 2 ? w.t.contiguous(channels_last_of(c.w.size())) : w.t;
  // A 1 x 1 weight is as contiguous as it is channels-last: PyTorch then suggests contiguous.
  const bool cl = layout == 1 || (layout == 2 && wt.suggest_memory_format() != MemoryFormat::Contiguous);
  const Tensor bt = c.bias ? b.t : Tensor();
  Tensor y = convolution(xt, wt, bt, c.stride, c.padding, c.dilation, c.transposed, c.output_padding, c.groups);
  const ref::Array want = ref::conv(x.a, w.a, c.bias ? &b.a : nullptr, s);
  const ref::Array abs_b = abs_of(b.a);
  const ref::Array fwd_abs = ref::conv(abs_of(x.a), abs_of(w.a), c.bias ? &abs_b : nullptr, s);
  ref::Array fwd_extra = th::sum_tol(t, fan_in(c), fwd_abs);
  if (c.bias && dev.is_cuda() && cudnn_enabled()) {
    // cuDNN's engines may round the conv to the dtype before adding the bias (as PyTorch's CUDA
    // path always does): one more rounding, of the conv without its bias.
    const ref::Array conv_only = ref::conv(x.a, w.a, nullptr, s);
    for (size_t i = 0; i < fwd_extra.v.size(); ++i) fwd_extra.v[i] += 2 * th::unit_roundoff(t) * std::abs(conv_only.v[i]);
  }
  ASSERT_TRUE(th::expect_close(y, want, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &fwd_extra)) << "forward";
  if (cl) {
    ASSERT_TRUE(y.is_contiguous(channels_last_of(c.x.size()))) << "channels-last output";
  }

  th::Input gy = th::make_input(want.sizes, t, dev, Layout::Contiguous, g, -1, 1);
  const Tensor gyt = cl ? gy.t.contiguous(channels_last_of(c.x.size())) : gy.t;
  const Shape bias_sizes = c.bias ? Shape{c_out} : Shape{};
  auto [gx, gw, gb] = convolution_backward(gyt, xt, wt, bias_sizes, c.stride, c.padding, c.dilation, c.transposed,
                                           c.output_padding, c.groups);
  int64_t positions = want.sizes[0];
  for (size_t i = 2; i < want.sizes.size(); ++i) positions *= want.sizes[i];
  const ref::Array gx_extra = th::sum_tol(t, fan_out(c), ref::conv_grad_input(abs_of(gy.a), abs_of(w.a), c.x, s));
  ASSERT_TRUE(th::expect_close(gx, ref::conv_grad_input(gy.a, w.a, c.x, s),
                               th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &gx_extra))
      << "grad_input";
  const ref::Array gw_extra = th::sum_tol(t, positions, ref::conv_grad_weight(abs_of(x.a), abs_of(gy.a), c.w, s));
  ASSERT_TRUE(th::expect_close(gw, ref::conv_grad_weight(x.a, gy.a, c.w, s),
                               th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &gw_extra))
      << "grad_weight";
  if (cl) {
    ASSERT_TRUE(gx.is_contiguous(channels_last_of(c.x.size()))) << "channels-last grad_input";
    ASSERT_TRUE(gw.is_contiguous(channels_last_of(c.x.size()))) << "channels-last grad_weight";
  }
  if (c.bias) {
    ref::Array want_gb({c_out}), abs_gb({c_out});
    const int64_t plane = positions / want.sizes[0];
    for (int64_t i = 0; i < gy.a.numel(); ++i) {
      want_gb.v[static_cast<size_t>(i / plane % c_out)] += gy.a.v[static_cast<size_t>(i)];
      abs_gb.v[static_cast<size_t>(i / plane % c_out)] += std::abs(gy.a.v[static_cast<size_t>(i)]);
    }
    const ref::Array gb_extra = th::sum_tol(t, positions, abs_gb);
    ASSERT_TRUE(th::expect_close(gb, want_gb, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &gb_extra));
  } else {
    ASSERT_FALSE(gb.defined());
  }
  auto [gx2, gw2, gb2] = convolution_backward(gyt, xt, wt, bias_sizes, c.stride, c.padding, c.dilation, c.transposed,
                                              c.output_padding, c.groups);
  ASSERT_EQ(th::to_bits(gx2), th::to_bits(gx)) << "the same bits every run";
  ASSERT_EQ(th::to_bits(gw2), th::to_bits(gw)) << "the same bits every run";
}

std::string case_label(const Case& c, DType t, int layout, Device dev) {
  return th::case_name(c.x, t, Layout::Contiguous, dev) + " w " + ref::shape_to_string(c.w) + " s " +
         ref::shape_to_string(c.stride) + " p " + ref::shape_to_string(c.padding) + " d " +
         ref::shape_to_string(c.dilation) + " g " + std::to_string(c.groups) + (c.transposed ? " transposed op " : "") +
         (c.transposed ? ref::shape_to_string(c.output_padding) : "") + (c.bias ? " bias" : "") + " layout " +
         std::to_string(layout);
}

// Restores cuDNN's use when a test ends.
struct CudnnUse {
  explicit CudnnUse(bool on) { set_cudnn_enabled(on); }
  ~CudnnUse() { set_cudnn_enabled(true); }
};

// Sets conv_cuda_channels_last_min_bytes for a test; restores the value before when it ends.
struct ChannelsLastMin {
  explicit ChannelsLastMin(int64_t bytes) : before(conv_cuda_channels_last_min_bytes()) {
    set_conv_cuda_channels_last_min_bytes(bytes);
  }
  ~ChannelsLastMin() { set_conv_cuda_channels_last_min_bytes(before); }
  int64_t before;
};

// On CUDA both plans: cuDNN's (where it has one; half-precision channels-first 2-d convs on its
// channels-last plans between layout conversions, whatever their size) and, with cuDNN turned
// off, the composition. The other tests run those convs in their own layout (below the default
// 32 MiB bound).
TEST_P(Conv, Table) {
  th::CaseLoop loop;
  th::Gen g(8100);
  ChannelsLastMin every(0);
  for (bool direct : {true, false}) {
    if (!direct && dev().is_cpu()) continue;
    CudnnUse use(direct);
    for (const Case& c : table())
      for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64})
        for (int layout = 0; layout < 4; ++layout) {
          if ((layout == 1 || layout == 2) && c.x.size() < 4) continue;
          const std::string name = case_label(c, t, layout, dev()) + (direct ? "" : " composed");
          if (!loop.run(name, [&] { check_case(c, t, layout, dev(), g); })) return;
        }
  }
}

// Which plan runs: the CPU composes, except its own bf16 implicit-GEMM kernel (channels-first,
// one group, not pointwise; AVX512-BF16 CPUs), its float32 one (channels-last; AVX-512 CPUs) and
// depthwise kernel; CUDA runs
// cuDNN where this build has it and libcudnn loads, unless turned off; the plan cache keeps at
// most its capacity.
TEST_P(Conv, Plans) {
  const TensorOptions o = TensorOptions(kBFloat16).device(dev());
  const Tensor x = ones({2, 8, 12, 12}, o), w = ones({16, 8, 3, 3}, o);
  const FusedPlan want = dev().is_cuda() && cudnn_is_available() ? FusedPlan::Fused : FusedPlan::Composed;
  const FusedPlan cpu_bf16 = cpu_has_bf16_dots() ? FusedPlan::Fused : FusedPlan::Composed;
  const FusedPlan dense = dev().is_cpu() ? cpu_bf16 : want;  // a stride-1 bf16 channels-first conv
  EXPECT_EQ(convolution_plan(x, w, {1}, {1}, {1}, false, {0}, 1), dense) << "cudnn_is_available " << cudnn_is_available();
  EXPECT_EQ(convolution_plan(x, w, {2}, {1}, {1}, false, {0}, 1), dense);
  // Channels-last: the CPU's kernel too (an even channel count: its taps' channel runs pair up).
  EXPECT_EQ(convolution_plan(x.contiguous(MemoryFormat::ChannelsLast), w, {1}, {1}, {1}, false, {0}, 1), dense);
  EXPECT_EQ(convolution_plan(x.contiguous(MemoryFormat::ChannelsLast), w, {2}, {1}, {1}, false, {0}, 1), dense);
  EXPECT_EQ(convolution_plan(ones({2, 7, 12, 12}, o).contiguous(MemoryFormat::ChannelsLast), ones({16, 7, 3, 3}, o), {1},
                             {1}, {1}, false, {0}, 1),
            want);
  EXPECT_EQ(convolution_plan(x.to(kFloat32), w.to(kFloat32), {1}, {1}, {1}, false, {0}, 1), want);
  // Channels-first 2-d / 3-d stride-1 forwards of at most 4 output channels and rows of 32 or
  // more: the CPU's row kernel (any float32 / bfloat16 CPU); strided, 1-d, 5 channels or 12-wide
  // rows: not that one (float32 then composed).
  const TensorOptions f32o = TensorOptions(kFloat32).device(dev());
  const Tensor w3 = ones({3, 8, 3, 3}, o), xw = ones({1, 8, 6, 40}, o);
  EXPECT_EQ(convolution_plan(xw.to(kFloat32), w3.to(kFloat32), {1}, {1}, {1}, false, {0}, 1),
            dev().is_cpu() ? FusedPlan::Fused : want);
  EXPECT_EQ(convolution_plan(xw, w3, {1}, {1}, {1}, false, {0}, 1), dev().is_cpu() ? FusedPlan::Fused : want);
  EXPECT_EQ(convolution_plan(xw.to(kFloat32), ones({5, 8, 3, 3}, o).to(kFloat32), {1}, {1}, {1}, false, {0}, 1), want);
  EXPECT_EQ(convolution_plan(xw.to(kFloat32), w3.to(kFloat32), {2}, {1}, {1}, false, {0}, 1), want);
  EXPECT_EQ(convolution_plan(x.to(kFloat32), w3.to(kFloat32), {1}, {1}, {1}, false, {0}, 1), want);
  EXPECT_EQ(convolution_plan(ones({1, 8, 4, 6, 40}, f32o), ones({3, 8, 3, 3, 3}, f32o), {1}, {1}, {1}, false, {0}, 1),
            dev().is_cpu() ? FusedPlan::Fused : want);
  // (1-d: composed on both devices, CUDA's short conv1d by im2col + cuBLASLt.)
  EXPECT_EQ(convolution_plan(ones({1, 8, 40}, f32o), ones({3, 8, 3}, f32o), {1}, {1}, {1}, false, {0}, 1),
            FusedPlan::Composed);
  // float32 channels-last, one group, not pointwise, 32 output channels or more, weights of at
  // most 1 MiB: the CPU's FMA implicit GEMM (AVX-512 CPUs).
  const FusedPlan cpu_f32 = cpu_has_avx512() ? FusedPlan::Fused : FusedPlan::Composed;
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  const Tensor xf = x.to(kFloat32).contiguous(MemoryFormat::ChannelsLast), wf = ones({32, 8, 3, 3}, f);
  EXPECT_EQ(convolution_plan(xf, wf, {1}, {1}, {1}, false, {0}, 1), dev().is_cpu() ? cpu_f32 : want);
  EXPECT_EQ(convolution_plan(xf, wf, {2}, {1}, {1}, false, {0}, 1), dev().is_cpu() ? cpu_f32 : want);
  EXPECT_EQ(convolution_plan(xf, ones({16, 8, 3, 3}, f), {1}, {1}, {1}, false, {0}, 1), want);
  EXPECT_EQ(convolution_plan(xf, ones({32, 8, 1, 1}, f), {1}, {0}, {1}, false, {0}, 1), want);
  EXPECT_EQ(convolution_plan(xf, ones({32, 4, 3, 3}, f), {1}, {1}, {1}, false, {0}, 2), want);
  EXPECT_EQ(convolution_plan(ones({1, 512, 8, 8}, f).contiguous(MemoryFormat::ChannelsLast), ones({512, 512, 3, 3}, f),
                             {1}, {1}, {1}, false, {0}, 1),
            want);
  // cuDNN needs 16-byte aligned tensors: an input one element into its buffer is composed.
  const Tensor shifted = ones({2 * 8 * 12 * 12 + 1}, o).narrow(0, 1, 2 * 8 * 12 * 12).view({2, 8, 12, 12});
  EXPECT_EQ(convolution_plan(shifted, w, {1}, {1}, {1}, false, {0}, 1), dev().is_cpu() ? cpu_bf16 : FusedPlan::Composed);
  EXPECT_EQ(convolution_plan(x, ones({8, 4, 2, 2}, o), {2}, {0}, {1}, true, {1}, 2), want);
  // Channels-first depthwise forwards: our own direct kernel on both devices, with or without
  // cuDNN; channels-last ones: the CPU's kernel, cuDNN on CUDA; a transposed depthwise conv:
  // cuDNN. 1-d convs of <= 256 outputs are composed on CUDA (im2col + cuBLASLt), longer ones go
  // to cuDNN.
  const Tensor w1 = ones({16, 8, 3}, o), wd = ones({8, 1, 3, 3}, o);
  auto own_plans = [&] {
    EXPECT_EQ(convolution_plan(x, wd, {1}, {1}, {1}, false, {0}, 8), FusedPlan::Fused);
    EXPECT_EQ(convolution_plan(ones({2, 8, 256}, o), w1, {1}, {1}, {1}, false, {0}, 1),
              dev().is_cpu() ? cpu_bf16 : FusedPlan::Composed);
  };
  own_plans();
  EXPECT_EQ(convolution_plan(x.contiguous(MemoryFormat::ChannelsLast), wd, {1}, {1}, {1}, false, {0}, 8),
            dev().is_cpu() ? FusedPlan::Fused : want);
  EXPECT_EQ(convolution_plan(x, wd, {2}, {1}, {1}, true, {0}, 8), dev().is_cpu() ? FusedPlan::Composed : want);
  EXPECT_EQ(convolution_plan(ones({2, 8, 259}, o), w1, {1}, {0}, {1}, false, {0}, 1), dense);
  {
    CudnnUse off(false);
    EXPECT_FALSE(cudnn_enabled());
    EXPECT_EQ(convolution_plan(x, w, {1}, {1}, {1}, false, {0}, 1), dev().is_cpu() ? cpu_bf16 : FusedPlan::Composed);
    own_plans();
  }
  EXPECT_TRUE(cudnn_enabled() || dev().is_cpu());
  if (!std::getenv("ANVIL_CONV_CUDA_KEEP_LAYOUT")) {
    EXPECT_EQ(conv_cuda_channels_last_min_bytes(), int64_t{32} << 20);
  }
  {
    ChannelsLastMin every(0);
    EXPECT_EQ(conv_cuda_channels_last_min_bytes(), 0);
    EXPECT_EQ(convolution_plan(x, w, {1}, {1}, {1}, false, {0}, 1), dense);
  }
  if (want == FusedPlan::Fused) {
    set_conv_plan_cache_capacity(2);
    for (int64_t c : {3, 5, 7}) (void)conv2d(ones({1, c, 6, 6}, o), ones({4, c, 3, 3}, o));
    EXPECT_LE(conv_plan_cache_size(), 2u);
    set_conv_plan_cache_capacity(256);
  }
}

// Outputs of 1024 positions or more with every stride 1: the CPU's float32 / float64 shifted
// GEMMs (a GEMM per tap over the zero-padded input, src/ops/conv.cpp; channels-first 2-d
// float32 forwards of <= 4 output channels and rows of 32+ take the row kernel instead) and its bfloat16
// implicit-GEMM kernel (src/cpu/conv.cpp, one group), with dilation, groups, uneven kernels and
// pads, a pad past (k - 1) d (the input grad then takes the columns), 1-d and 3-d, stride-1
// transposed convs, and chunks of a few rows under a small workspace limit.
TEST_P(Conv, ShiftedGemms) {
  th::CaseLoop loop;
  th::Gen g(8105);
  const std::vector<Case> cases = {
      {{1, 3, 36, 32}, {4, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{2, 4, 33, 34}, {6, 2, 3, 3}, {1}, {3}, {2}, {0}, 2, false, false},
      {{1, 2, 40, 30}, {3, 2, 2, 4}, {1}, {0, 2}, {1}, {0}, 1, false, true},
      {{1, 2, 32, 32}, {2, 2, 3, 3}, {1}, {3}, {1}, {0}, 1, false, false},
      {{2, 3, 1100}, {4, 3, 5}, {1}, {4}, {2}, {0}, 1, false, true},
      {{1, 2, 4, 17, 16}, {3, 2, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 2, 5, 16, 18}, {2, 2, 2, 3, 3}, {1}, {1}, {2, 1, 2}, {0}, 1, false, false},
      {{1, 3, 34, 32}, {3, 4, 3, 3}, {1}, {1}, {1}, {0}, 1, true, true},
      {{1, 4, 6, 40, 9}, {4, 3, 3, 2, 3}, {1}, {1, 0, 2}, {2, 1, 1}, {0}, 1, true, true},
      {{1, 37, 12, 90}, {20, 37, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      // Channels-last weight grads with more than one 32-column panel of output channels: every
      // tap in one GEMM (64 input channels) and a GEMM per tap (5).
      {{1, 64, 9, 11}, {40, 64, 3, 3}, {1}, {1}, {1}, {0}, 1, false, false},
      {{1, 5, 10, 12}, {36, 5, 3, 3}, {1}, {1}, {1}, {0}, 1, false, false},
      // Channels-first 2-d bf16 with 32 / 64 output channels runs by positions through
      // channels-last slabs: forwards (strided too) and an input grad (its forward's 32 output
      // channels); the 3-d one stays channels-first (and runs by positions channels-last).
      {{2, 6, 10, 70}, {32, 6, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 4, 13, 34}, {64, 4, 3, 3}, {2}, {1}, {1}, {0}, 1, false, false},
      {{1, 2, 5, 9, 12}, {32, 2, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 32, 9, 40}, {6, 32, 3, 3}, {1}, {1}, {1}, {0}, 1, false, false},
      // Runs of whole 32-channel tiles: on AMX CPUs every such bf16 forward / input grad runs on
      // tiles by positions, channels-first ones through slabs (2-d with 48 output channels, 3-d);
      // float32 takes its FMA GEMM (32+ columns).
      {{1, 32, 7, 9}, {48, 32, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 32, 3, 6, 7}, {32, 32, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      // bf16 channels-last weight grads of whole 32-channel tiles with every stride 1: on AMX
      // CPUs gw^T from shifted views of one transposed input (two images, two panels of output
      // channels; dilation with uneven pads; 1-d).
      {{2, 32, 9, 13}, {64, 32, 3, 3}, {1}, {1}, {1}, {0}, 1, false, false},
      {{1, 64, 8, 10}, {32, 64, 3, 3}, {1}, {2, 1}, {2, 1}, {0}, 1, false, false},
      {{1, 32, 70}, {32, 32, 5}, {1}, {3}, {1}, {0}, 1, false, false},
      // Strided: the forward by positions, its tiles in place and gathered (rows crossing an edge).
      {{1, 32, 9, 70}, {32, 32, 3, 3}, {2}, {1}, {1}, {0}, 1, false, true},
      // Channels-last rows of 16-position tiles read in place (gathered at the row ends and past
      // the output's width): two images and two panels of 40 output channels, a strided dilated
      // 2-d conv, and a 3-d one with its input grad (the adjoint's forward) on the same path.
      {{2, 32, 5, 113}, {40, 32, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{1, 32, 6, 64}, {32, 32, 3, 3}, {1, 2}, {2, 1}, {2, 1}, {0}, 1, false, true},
      {{1, 32, 3, 4, 32}, {32, 32, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      // Channels-first 2-d / 3-d forwards of at most 4 output channels: output rows as sums of shifted
      // input rows (an odd channel count leaves the last bf16 pair half empty; dilation along
      // both axes with a pad past (k - 1) d along H, rows past one 64-position block and not a
      // multiple of it; taps along H only; rows under 32 outputs take the other kernels).
      {{2, 5, 20, 70}, {3, 5, 3, 5}, {1}, {5, 4}, {2, 2}, {0}, 1, false, true},
      {{1, 4, 9, 40}, {2, 4, 3, 1}, {1}, {1, 0}, {1}, {0}, 1, false, false},
      {{1, 3, 6, 5}, {1, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, false},
      // ... and 3-d (rings per depth and height; dilation and a pad past (k - 1) d along D).
      {{1, 3, 4, 6, 40}, {3, 3, 3, 3, 3}, {1}, {1}, {1}, {0}, 1, false, true},
      {{2, 5, 5, 4, 36}, {2, 5, 2, 3, 3}, {1}, {3, 1, 0}, {2, 1, 1}, {0}, 1, false, false},
  };
  for (int64_t limit : {int64_t{0}, int64_t{4096}})
    for (const Case& c : cases)
      for (DType t : {kFloat32, kFloat64, kBFloat16})
        for (int layout = 0; layout < 4; ++layout) {
          if ((layout == 1 || layout == 2) && c.x.size() < 4) continue;
          set_conv_workspace_limit(limit);
          const bool ok = loop.run(case_label(c, t, layout, dev()) + (limit ? " chunked" : ""),
                                   [&] { check_case(c, t, layout, dev(), g); });
          set_conv_workspace_limit(0);
          if (!ok) return;
        }
}

// An inf in the input reaches only the weight-grad taps that read it (the others stay finite and
// exact): the AMX weight grad's grid positions past a row's outputs read inputs times a zero
// gradient, so an input with an inf or NaN takes the exact path there.
TEST_P(Conv, WeightGradInfReachesOnlyItsTaps) {
  th::Gen g(8107);
  const Shape xs = {1, 32, 6, 8}, ws = {32, 32, 3, 3};
  const ref::ConvSpec s{{1, 1}, {1, 1}, {1, 1}, {0, 0}, 1, false};
  for (DType t : {kBFloat16, kFloat32}) {
    th::Input x = th::make_input(xs, t, dev(), Layout::Contiguous, g, -2, 2);
    x.a.v[static_cast<size_t>((0 * 6 + 2) * 8 + 7)] = std::numeric_limits<double>::infinity();  // channel 0, last column
    const Tensor xt = th::make_tensor(x.a, t, dev()).contiguous(MemoryFormat::ChannelsLast);
    th::Input gy = th::make_input(xs, t, dev(), Layout::Contiguous, g, -1, 1);
    const Tensor gyt = gy.t.contiguous(MemoryFormat::ChannelsLast);
    const Tensor wt = zeros(ws, TensorOptions(t).device(dev())).contiguous(MemoryFormat::ChannelsLast);
    auto [gx, gw, gb] = convolution_backward(gyt, xt, wt, {}, {1}, {1}, {1}, false, {0}, 1, {false, true, false});
    const ref::Array want = ref::conv_grad_weight(x.a, gy.a, ws, s);
    const ref::Array extra = th::sum_tol(t, 48, ref::conv_grad_weight(abs_of(x.a), abs_of(gy.a), ws, s));
    ASSERT_TRUE(th::expect_close(gw, want, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &extra))
        << th::dtype_str(t);
    const ref::Array got = th::to_array(gw);
    int64_t finite = 0;
    for (double v : got.v) finite += std::isfinite(v);
    EXPECT_EQ(finite, 32 * 32 * 9 - 32 * 3 * 2) << "only input channel 0's taps kw = 1, 2 read the last column";
  }
}

// set_cudnn_allow_fft_winograd: off by default; on, float32 gradients of a ResNet-style conv may
// come from cuDNN's FFT / Winograd engines: within 1e-5 of the sum of |products| (a direct sum
// is within ~1e-6 of it here), the same bits on every run, and the switch restores the exact
// plans (its own plan-cache key).
TEST_P(Conv, FftWinogradOptIn) {
  EXPECT_FALSE(cudnn_allow_fft_winograd());
  th::Gen g(8106);
  const Shape xs = {2, 16, 20, 20}, ws = {16, 16, 3, 3};
  th::Input x = th::make_input(xs, kFloat32, dev(), Layout::Contiguous, g, -2, 2);
  th::Input w = th::make_input(ws, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  th::Input gy = th::make_input(xs, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  const ref::ConvSpec s{{1, 1}, {1, 1}, {1, 1}, {0, 0}, 1, false};
  auto run = [&] {
    return convolution_backward(gy.t, x.t, w.t, {}, {1}, {1}, {1}, false, {0}, 1, {true, true, false});
  };
  auto [gx_exact, gw_exact, gb_exact] = run();
  set_cudnn_allow_fft_winograd(true);
  if (dev().is_cuda()) {
    EXPECT_TRUE(cudnn_allow_fft_winograd());
  }
  auto [gx, gw, gb] = run();
  auto [gx2, gw2, gb2] = run();
  set_cudnn_allow_fft_winograd(false);
  ASSERT_EQ(th::to_bits(gx2), th::to_bits(gx)) << "the same bits every run";
  ASSERT_EQ(th::to_bits(gw2), th::to_bits(gw)) << "the same bits every run";
  auto scaled = [](ref::Array a, double f) {
    for (double& v : a.v) v *= f;
    return a;
  };
  const ref::Array gx_bound = scaled(ref::conv_grad_input(abs_of(gy.a), abs_of(w.a), xs, s), 1e-5);
  const ref::Array gw_bound = scaled(ref::conv_grad_weight(abs_of(x.a), abs_of(gy.a), ws, s), 1e-5);
  EXPECT_TRUE(th::expect_close(gx, ref::conv_grad_input(gy.a, w.a, xs, s), th::Tol{0, 0}, &gx_bound)) << "grad_input";
  EXPECT_TRUE(th::expect_close(gw, ref::conv_grad_weight(x.a, gy.a, ws, s), th::Tol{0, 0}, &gw_bound)) << "grad_weight";
  // Off again: the exact plans' bits.
  auto [gx3, gw3, gb3] = run();
  EXPECT_EQ(th::to_bits(gx3), th::to_bits(gx_exact));
  EXPECT_EQ(th::to_bits(gw3), th::to_bits(gw_exact));
}

// Restores the default workspace limit when a test ends.
struct WorkspaceLimit {
  explicit WorkspaceLimit(int64_t bytes) { set_conv_workspace_limit(bytes); }
  ~WorkspaceLimit() { set_conv_workspace_limit(0); }
};

// Columns built one or a few output rows at a time (a 1 KiB limit): the same values.
TEST_P(Conv, ChunkedColumns) {
  WorkspaceLimit limit(1024);
  th::CaseLoop loop;
  th::Gen g(8101);
  for (const Case& c : table())
    for (DType t : {kFloat32, kBFloat16})
      for (int layout : {0, 1}) {
        if (layout == 1 && c.x.size() < 4) continue;
        if (!loop.run(case_label(c, t, layout, dev()) + " chunked", [&] { check_case(c, t, layout, dev(), g); })) return;
      }
  EXPECT_EQ(conv_workspace_limit(dev()), 1024);
}

// The backward is the forward's adjoint: central differences of sum(gy * conv(x, w) + b) in float64.
TEST_P(Conv, BackwardMatchesFiniteDifferences) {
  th::Gen g(8102);
  for (const Case& c : std::vector<Case>{{{1, 4, 7, 6}, {4, 2, 3, 2}, {2, 1}, {1, 1}, {1, 2}, {0}, 2, false, true},
                                         {{2, 2, 4, 3}, {2, 3, 3, 3}, {2}, {1}, {1}, {1}, 1, true, true},
                                         {{1, 3, 9}, {3, 1, 3}, {1}, {2}, {2}, {0}, 3, false, true},
                                         {{1, 2, 3, 3, 2}, {2, 2, 2, 2, 2}, {1}, {1}, {1}, {0}, 1, false, false}}) {
    SCOPED_TRACE(case_label(c, kFloat64, 0, dev()));
    const ref::ConvSpec s = spec_of(c);
    th::Input x = th::make_input(c.x, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
    th::Input w = th::make_input(c.w, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
    const int64_t c_out = c.transposed ? c.w[1] * c.groups : c.w[0];
    th::Input b = th::make_input({c_out}, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
    const Shape ys = ref::conv_output_sizes(c.x, c.w, s);
    th::Input gy = th::make_input(ys, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
    auto loss = [&](const ref::Array& xa, const ref::Array& wa, const ref::Array& ba) {
      const ref::Array y = ref::conv(xa, wa, c.bias ? &ba : nullptr, s);
      double sum = 0;
      for (size_t i = 0; i < y.v.size(); ++i) sum += gy.a.v[i] * y.v[i];
      return sum;
    };
    auto [gx, gw, gb] = convolution_backward(gy.t, x.t, w.t, c.bias ? Shape{c_out} : Shape{}, c.stride, c.padding,
                                             c.dilation, c.transposed, c.output_padding, c.groups);
    const th::Tol tol{1e-8, 1e-7};
    EXPECT_TRUE(th::expect_close(gx, th::array_of(c.x, th::central_differences(x.a.v, [&](const std::vector<double>& v) {
                                   return loss(th::array_of(c.x, v), w.a, b.a);
                                 })), tol));
    EXPECT_TRUE(th::expect_close(gw, th::array_of(c.w, th::central_differences(w.a.v, [&](const std::vector<double>& v) {
                                   return loss(x.a, th::array_of(c.w, v), b.a);
                                 })), tol));
    if (c.bias) {
      EXPECT_TRUE(th::expect_close(gb, th::array_of({c_out}, th::central_differences(b.a.v, [&](const std::vector<double>& v) {
                                     return loss(x.a, w.a, th::array_of({c_out}, v));
                                   })), tol));
    }
  }
}

// conv{1,2,3}d / conv_transpose{1,2,3}d: unbatched inputs, padding "same" (odd total pads put
// the extra element at the end, as PyTorch) and "valid".
TEST_P(Conv, Wrappers) {
  th::Gen g(8103);
  const th::Tol tol{1e-5, 1e-5};
  {  // conv2d "same" with an even kernel and dilation: total pads 3 (H) and 2 (W)
    th::Input x = th::make_input({2, 3, 6, 5}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w = th::make_input({4, 3, 4, 2}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    Tensor y = conv2d(x.t, w.t, {}, {1}, "same", {1, 2});
    ASSERT_TRUE(th::expect_shape(y, {2, 4, 6, 5}, kFloat32));
    // left pads 1 (H) and 1 (W); the odd H total adds one more row at the end
    const ref::Array xp = ref::pad(x.a, {1, 1, 1, 2}, ref::PadKind::Constant);
    EXPECT_TRUE(th::expect_close(y, ref::conv(xp, w.a, nullptr, {{1, 1}, {0, 0}, {1, 2}, {0, 0}, 1, false}), tol));
    EXPECT_TRUE(th::expect_close(conv2d(x.t, w.t, {}, {1}, "valid"),
                                 ref::conv(x.a, w.a, nullptr, {{1, 1}, {0, 0}, {1, 1}, {0, 0}, 1, false}), tol));
  }
  {  // conv1d unbatched, "same" symmetric
    th::Input x = th::make_input({3, 10}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w = th::make_input({2, 3, 5}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input b = th::make_input({2}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    Tensor y = conv1d(x.t, w.t, b.t, {1}, "same");
    ASSERT_TRUE(th::expect_shape(y, {2, 10}, kFloat32));
    ref::Array xb = x.a;
    xb.sizes.insert(xb.sizes.begin(), 1);
    ref::Array want = ref::conv(xb, w.a, &b.a, {{1}, {2}, {1}, {0}, 1, false});
    want.sizes.erase(want.sizes.begin());
    EXPECT_TRUE(th::expect_close(y, want, tol));
  }
  {  // conv3d and conv_transpose3d unbatched
    th::Input x = th::make_input({2, 3, 4, 3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w = th::make_input({2, 2, 2, 3, 2}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    ref::Array xb = x.a;
    xb.sizes.insert(xb.sizes.begin(), 1);
    ref::Array want = ref::conv(xb, w.a, nullptr, {{1, 1, 1}, {1, 0, 1}, {1, 1, 1}, {0, 0, 0}, 1, false});
    want.sizes.erase(want.sizes.begin());
    EXPECT_TRUE(th::expect_close(conv3d(x.t, w.t, {}, {1}, {1, 0, 1}), want, tol));
    ref::Array want_t = ref::conv(xb, w.a, nullptr, {{2, 1, 2}, {0, 0, 1}, {1, 1, 1}, {1, 0, 0}, 1, true});
    want_t.sizes.erase(want_t.sizes.begin());
    EXPECT_TRUE(th::expect_close(conv_transpose3d(x.t, w.t, {}, {2, 1, 2}, {0, 0, 1}, {1, 0, 0}), want_t, tol));
  }
  {  // conv_transpose1d / 2d batched with groups and dilation
    th::Input x = th::make_input({2, 4, 5}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w = th::make_input({4, 3, 3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    EXPECT_TRUE(th::expect_close(conv_transpose1d(x.t, w.t, {}, {2}, {1}, {1}, 2, {2}),
                                 ref::conv(x.a, w.a, nullptr, {{2}, {1}, {2}, {1}, 2, true}), tol));
    th::Input x2 = th::make_input({1, 4, 3, 3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w2 = th::make_input({4, 2, 2, 2}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    EXPECT_TRUE(th::expect_close(conv_transpose2d(x2.t, w2.t, {}, {2}),
                                 ref::conv(x2.a, w2.a, nullptr, {{2, 2}, {0, 0}, {1, 1}, {0, 0}, 1, true}), tol));
  }
}

// Spatial extents whose products cross 2^16 (and a 1-d length past it): every element exact
// against the reference.
TEST_P(Conv, ExtentsPast2To16) {
  th::Gen g(8104);
  const th::Tol tol{1e-5, 1e-5};
  {
    th::Input x = th::make_input({1, 2, 70001}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w = th::make_input({3, 2, 3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    const ref::ConvSpec s{{2}, {1}, {1}, {0}, 1, false};
    EXPECT_TRUE(th::expect_close(convolution(x.t, w.t, {}, {2}, {1}, {1}, false, {0}, 1), ref::conv(x.a, w.a, nullptr, s), tol));
  }
  {
    th::Input x = th::make_input({1, 1, 2, 300, 260}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    th::Input w = th::make_input({2, 1, 1, 3, 3}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    const ref::ConvSpec s{{1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, 1, false};
    Tensor xt = x.t.contiguous(MemoryFormat::ChannelsLast3d);
    EXPECT_TRUE(th::expect_close(convolution(xt, w.t, {}, {1}, {0, 1, 1}, {1}, false, {0}, 1), ref::conv(x.a, w.a, nullptr, s), tol));
    th::Input gy = th::make_input(ref::conv_output_sizes(x.a.sizes, w.a.sizes, s), kFloat32, dev(), Layout::Contiguous, g, -1, 1);
    auto [gx, gw, gb] = convolution_backward(gy.t, x.t, w.t, {}, {1}, {0, 1, 1}, {1}, false, {0}, 1, {true, true, false});
    EXPECT_TRUE(th::expect_close(gx, ref::conv_grad_input(gy.a, w.a, x.a.sizes, s), tol));
    const ref::Array gw_extra = th::sum_tol(kFloat32, 2 * 300 * 260, ref::conv_grad_weight(abs_of(x.a), abs_of(gy.a), w.a.sizes, s));
    EXPECT_TRUE(th::expect_close(gw, ref::conv_grad_weight(x.a, gy.a, w.a.sizes, s), th::Tol{0, 0}, &gw_extra));
    EXPECT_FALSE(gb.defined());
  }
}

// Empty batches give empty outputs; zero output channels give empty outputs and zero grads.
TEST_P(Conv, EmptyShapes) {
  const TensorOptions o = TensorOptions(kFloat32).device(dev());
  Tensor y = conv2d(zeros({0, 3, 5, 5}, o), ones({4, 3, 3, 3}, o));
  ASSERT_TRUE(th::expect_shape(y, {0, 4, 3, 3}, kFloat32));
  auto [gx, gw, gb] = convolution_backward(zeros({0, 4, 3, 3}, o), zeros({0, 3, 5, 5}, o), ones({4, 3, 3, 3}, o), {4},
                                           {1}, {0}, {1}, false, {0}, 1);
  ASSERT_TRUE(th::expect_shape(gx, {0, 3, 5, 5}, kFloat32));
  EXPECT_TRUE(th::expect_equal(gw, ref::Array({4, 3, 3, 3})));
  EXPECT_TRUE(th::expect_equal(gb, ref::Array({4})));
}

// The release's headline failure, with the convs themselves: a Wan-style tiled video decode
// (28 tiles, each a little different in H and W, of causal constant / replicate pads then a
// 3 x 3 x 3 conv3d with bias, bf16) must keep the CUDA allocator's reserved memory within 1.25x
// its peak allocation and not growing from one decode to the next, cuDNN's plans (one per tile
// shape, cached) and workspaces (from the allocator) included.
TEST_P(Conv, MemoryStableUnderTiledDecode) {
  if (!dev().is_cuda()) GTEST_SKIP() << "the caching allocator under test is CUDA's";
  const TensorOptions o = TensorOptions(kBFloat16).device(dev());
  const Tensor w = rand({64, 64, 3, 3, 3}, o), b = rand({64}, o);
  auto decode = [&] {
    for (int tile = 0; tile < 28; ++tile) {
      const int64_t h = 60 + (tile * 7) % 13, wd = 90 + (tile * 5) % 17;
      Tensor x = rand({1, 64, 3, h, wd}, o);
      for (int layer = 0; layer < 8; ++layer) {
        Tensor p = layer % 4 == 3 ? pad(x, {1, 1, 1, 1, 2, 0}, "replicate") : constant_pad_nd(x, {1, 1, 1, 1, 2, 0});
        x = conv3d(p, w, b);
      }
    }
  };
  EXPECT_TRUE(th::memory_stable(dev(), decode));
}

TEST_P(Conv, Errors) {
  const TensorOptions o = TensorOptions(kFloat32).device(dev());
  const Tensor x = ones({1, 4, 5, 5}, o), w = ones({6, 4, 3, 3}, o);
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [4, 5]",
                       conv2d(ones({4, 5}, o), w));
  EXPECT_THROWS_SAYING(ShapeError, "convolution", "weight should have at least three dimensions",
                       convolution(x, ones({6, 4}, o), {}, {1}, {0}, {1}, false, {0}, 1));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "non-positive groups is not supported", conv2d(x, w, {}, {1}, {0}, {1}, 0));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d",
                       "expected stride to be a single integer value or a list of 2 values to match the convolution dimensions, but got stride=[1, 1, 1]",
                       conv2d(x, w, {}, {1, 1, 1}));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "negative padding is not supported", conv2d(x, w, {}, {1}, {-1}));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "non-positive stride is not supported", conv2d(x, w, {}, {0}));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "dilation should be greater than zero", conv2d(x, w, {}, {1}, {0}, {0}));
  EXPECT_THROWS_SAYING(ShapeError, "conv_transpose2d", "negative output_padding is not supported",
                       conv_transpose2d(x, ones({4, 2, 3, 3}, o), {}, {2}, {0}, {-1}));
  EXPECT_THROWS_SAYING(ShapeError, "convolution",
                       "Expected 4-dimensional input for 4-dimensional weight [6, 4, 3, 3], but got 5-dimensional input of size [1, 4, 5, 5, 1] instead",
                       convolution(ones({1, 4, 5, 5, 1}, o), w, {}, {1}, {0}, {1}, false, {0}, 1));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "Given groups=8, expected weight to be at least 8 at dimension 0, but got weight of size [6, 4, 3, 3] instead",
                       conv2d(x, w, {}, {1}, {0}, {1}, 8));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "Given groups=4, expected weight to be divisible by 4 at dimension 0, but got weight of size [6, 1, 3, 3] instead",
                       conv2d(x, ones({6, 1, 3, 3}, o), {}, {1}, {0}, {1}, 4));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d",
                       "Given groups=1, weight of size [6, 3, 3, 3], expected input[1, 4, 5, 5] to have 3 channels, but got 4 channels instead",
                       conv2d(x, ones({6, 3, 3, 3}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d",
                       "Given weight of size [6, 4, 3, 3], expected bias to be 1-dimensional with 6 elements, but got bias of size [5] instead",
                       conv2d(x, w, ones({5}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d",
                       "Calculated padded input size per channel: (5 x 5). Kernel size: (7 x 7). Kernel size can't be greater than actual input size",
                       conv2d(x, ones({6, 4, 7, 7}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "Kernel size: (7 x 7)", conv2d(x, w, {}, {1}, {0}, {3}));
  EXPECT_THROWS_SAYING(ShapeError, "conv_transpose2d",
                       "Given transposed=1, weight of size [6, 4, 3, 3], expected input[1, 4, 5, 5] to have 6 channels, but got 4 channels instead",
                       conv_transpose2d(x, w));
  EXPECT_THROWS_SAYING(ShapeError, "conv_transpose2d",
                       "Given transposed=1, weight of size [4, 2, 3, 3], expected bias to be 1-dimensional with 2 elements, but got bias of size [4] instead",
                       conv_transpose2d(x, ones({4, 2, 3, 3}, o), ones({4}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "conv_transpose2d", "output padding must be smaller than either stride or dilation",
                       conv_transpose2d(x, ones({4, 2, 3, 3}, o), {}, {2}, {0}, {2}));
  EXPECT_THROWS_SAYING(ShapeError, "conv_transpose1d", "Output size is too small",
                       conv_transpose1d(ones({1, 4, 1}, o), ones({4, 2, 1}, o), {}, {1}, {1}));
  EXPECT_THROWS_SAYING(ShapeError, "conv2d", "padding='same' is not supported for strided convolutions",
                       conv2d(x, w, {}, {2}, "same"));
  EXPECT_THROWS_SAYING(Error, "conv2d", "Invalid padding string: 'full'", conv2d(x, w, {}, {1}, "full"));
  EXPECT_THROWS_SAYING(DTypeError, "conv2d", "Input type (float32) and weight type (bfloat16) should be the same",
                       conv2d(x, w.to(kBFloat16)));
  EXPECT_THROWS_SAYING(DTypeError, "conv2d", "Input type (float32) and bias type (float64) should be the same",
                       conv2d(x, w, ones({6}, TensorOptions(kFloat64).device(dev()))));
  EXPECT_THROWS_SAYING(DTypeError, "conv2d", "\"convolution\" not implemented for 'int64'",
                       conv2d(x.to(kInt64), w.to(kInt64)));
  EXPECT_THROWS_SAYING(ShapeError, "convolution_backward", "Expected grad_output of the output's shape [1, 6, 3, 3]",
                       convolution_backward(ones({1, 6, 3, 4}, o), x, w, {6}, {1}, {0}, {1}, false, {0}, 1));
  EXPECT_THROWS_SAYING(DTypeError, "convolution_backward", "grad_output type (float64) and input type (float32) should be the same",
                       convolution_backward(ones({1, 6, 3, 3}, TensorOptions(kFloat64).device(dev())), x, w, {6}, {1}, {0}, {1},
                                            false, {0}, 1));
  EXPECT_THROWS_SAYING(Error, "set_conv_workspace_limit", "expected bytes >= 0", set_conv_workspace_limit(-1));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Conv);

}  // namespace
