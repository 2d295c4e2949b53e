// Convolution cases at the models' shapes: the Wan2.x VAE decoder's 3-d conv (causally
// pre-padded, bf16), an SD / FLUX VAE decoder conv2d, a ResNet stage's conv2d backward in
// channels-last (bf16, float32) and channels-first (float32), Whisper's strided front-end
// conv1d, an EnCodec-style streaming conv1d (short output, float32), a depthwise short conv1d
// (Mamba-style; forward and backward) and a depthwise 3 x 3 conv2d in channels-last
// (MobileNet-style); on CUDA the ResNet float32
// backward also with cuDNN's FFT / Winograd engines allowed (PyTorch's default picks them).
// Compute-bound: the fraction is of the GEMM FLOP ceiling of the same dtype measured in the same
// run. CPU shapes are smaller.
#include "cases.h"

namespace anvil::bench {
namespace {

struct ConvShape {
  std::string label;
  Shape x, w, stride, padding;
  int64_t groups;
  DType dtype;
  bool channels_last = false;
  bool backward = false;
  bool fft_winograd = false;  // cuDNN may take FFT / Winograd engines (set_cudnn_allow_fft_winograd)
  bool bias = false;          // forward with a bias, as every VAE conv has
  bool bias_after = false;    // the bias added by a separate add (as PyTorch's CUDA convolution does), not in the conv
};

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

Shape output_shape(const ConvShape& c) {
  Shape o{c.x[0], c.w[0]};
  for (size_t i = 2; i < c.x.size(); ++i) {
    const size_t d = i - 2;
    const int64_t s = c.stride.size() == 1 ? c.stride[0] : c.stride[d], p = c.padding.size() == 1 ? c.padding[0] : c.padding[d];
    o.push_back((c.x[i] + 2 * p - (c.w[i] - 1) - 1) / s + 1);
  }
  return o;
}

}  // namespace

std::vector<Case> conv_cases(Device dev) {
  const bool cpu = dev.is_cpu();
  const int64_t c3 = cpu ? 32 : 128, t = cpu ? 2 : 16, c2 = cpu ? 128 : 512, h2 = cpu ? 64 : 128, n4 = cpu ? 4 : 32;
  const int64_t whisper = cpu ? 384 : 1280, dw_len = cpu ? 512 : 2048, dw_n = cpu ? 1 : 8;
  const std::vector<ConvShape> shapes = {
      {"wan vae decoder", {1, c3, t + 2, 92, 162}, {c3, c3, 3, 3, 3}, {1}, {0}, 1, kBFloat16},
      {"sd vae decoder", {1, c2, h2, h2}, {c2, c2, 3, 3}, {1}, {1}, 1, kBFloat16},
      {"sd vae decoder channels-last", {1, c2, h2, h2}, {c2, c2, 3, 3}, {1}, {1}, 1, kBFloat16, true},
      {"resnet stage channels-last", {n4, 64, 56, 56}, {64, 64, 3, 3}, {1}, {1}, 1, kBFloat16, true, true},
      {"resnet stage", {n4, 64, 56, 56}, {64, 64, 3, 3}, {1}, {1}, 1, kFloat32, false, true},
      {"resnet stage channels-last", {n4, 64, 56, 56}, {64, 64, 3, 3}, {1}, {1}, 1, kFloat32, true, true},
      {"resnet stage fft/winograd allowed", {n4, 64, 56, 56}, {64, 64, 3, 3}, {1}, {1}, 1, kFloat32, false, true, true},
      {"whisper conv2", {1, whisper, 3000}, {whisper, whisper, 3}, {2}, {1}, 1, kBFloat16},
      {"encodec streaming", {1, 512, 64}, {512, 512, 7}, {1}, {3}, 1, kFloat32},
      {"depthwise short conv", {1, 1536, dw_len}, {1536, 1, 4}, {1}, {3}, 1536, kBFloat16},
      {"depthwise short conv", {1, 1536, dw_len}, {1536, 1, 4}, {1}, {3}, 1536, kBFloat16, false, true},
      {"depthwise 2d 3x3", {dw_n, 256, 56, 56}, {256, 1, 3, 3}, {1}, {1}, 256, kBFloat16, true},
      // The VAE decoders' convs as they run there: with a bias, at each stage's size.
      {"wan vae decoder +bias", {1, c3, t + 2, 92, 162}, {c3, c3, 3, 3, 3}, {1}, {0}, 1, kBFloat16, false, false, false, true},
      {"sd vae decoder +bias", {1, c2, h2, h2}, {c2, c2, 3, 3}, {1}, {1}, 1, kBFloat16, false, false, false, true},
      {"flux vae decoder 256^2 +bias", {1, c2, 2 * h2, 2 * h2}, {c2, c2, 3, 3}, {1}, {1}, 1, kBFloat16, false, false, false, true},
      {"flux vae decoder 1024^2 +bias", {1, c2 / 4, 8 * h2, 8 * h2}, {c2 / 4, c2 / 4, 3, 3}, {1}, {1}, 1, kBFloat16, false, false, false, true},
      {"flux vae decoder 1024^2 channels-last +bias", {1, c2 / 4, 8 * h2, 8 * h2}, {c2 / 4, c2 / 4, 3, 3}, {1}, {1}, 1, kBFloat16, true, false, false, true},
      {"flux vae conv_out +bias", {1, c2 / 4, 8 * h2, 8 * h2}, {3, c2 / 4, 3, 3}, {1}, {1}, 1, kBFloat16, false, false, false, true},
      {"flux vae decoder 1024^2 +bias added after", {1, c2 / 4, 8 * h2, 8 * h2}, {c2 / 4, c2 / 4, 3, 3}, {1}, {1}, 1, kBFloat16, false, false, false, true, true},
      {"wan vae decoder +bias added after", {1, c3, t + 2, 92, 162}, {c3, c3, 3, 3, 3}, {1}, {0}, 1, kBFloat16, false, false, false, true, true},
  };
  std::vector<Case> cases;
  for (const ConvShape& c : shapes) {
    if (c.fft_winograd && cpu) continue;  // a cuDNN switch
    const Shape out = output_shape(c);
    int64_t per_out = c.w[1];
    for (size_t i = 2; i < c.w.size(); ++i) per_out *= c.w[i];
    const double flops = 2.0 * static_cast<double>(numel(out)) * static_cast<double>(per_out) * (c.backward ? 2 : 1);
    const double es = static_cast<double>(element_size(c.dtype));
    const double bytes = es * static_cast<double>(numel(c.x) + numel(c.w) + numel(out)) * (c.backward ? 2 : 1);
    const std::string name = std::string(c.backward ? "conv backward " : "conv ") + dtype_name(c.dtype) + " " +
                             shape_str(c.x) + " k" + std::to_string(c.w.back()) + " " + c.label;
    const MemoryFormat format = !c.channels_last ? MemoryFormat::Contiguous
                                : c.x.size() == 4 ? MemoryFormat::ChannelsLast
                                                  : MemoryFormat::ChannelsLast3d;
    nlohmann::json spec{{"op", c.backward ? "conv_backward" : "conv"}, {"x", c.x}, {"w", c.w}, {"stride", c.stride},
                        {"padding", c.padding}, {"groups", c.groups}, {"dtype", dtype_name(c.dtype)},
                        {"channels_last", c.channels_last}, {"bias", c.bias}, {"flops", flops}};
    Case k{name, bytes, std::string("gemm"), [=]() -> Runner {
             const TensorOptions o = TensorOptions(c.dtype).device(dev);
             const Tensor x = randn(c.x, o).contiguous(format);
             const Tensor w = randn(c.w, o).contiguous(format);
             const Tensor b = c.bias ? randn({c.w[0]}, o) : Tensor();
             if (c.bias_after) {
               Shape bs(c.x.size(), 1);
               bs[1] = c.w[0];
               const Tensor bv = b.view(bs);
               return [=](int) { (void)add(convolution(x, w, {}, c.stride, c.padding, {1}, false, {0}, c.groups), bv); };
             }
             if (!c.backward)
               return [=](int) { (void)convolution(x, w, b, c.stride, c.padding, {1}, false, {0}, c.groups); };
             const Tensor gy = randn(out, o).contiguous(format);
             return [=](int) {
               set_cudnn_allow_fft_winograd(c.fft_winograd);
               (void)convolution_backward(gy, x, w, {}, c.stride, c.padding, {1}, false, {0}, c.groups,
                                          {true, true, false});
               set_cudnn_allow_fft_winograd(false);
             };
           }, "conv", spec};
    k.flops = flops;
    k.dtype = c.dtype;
    cases.push_back(std::move(k));
  }
  return cases;
}

}  // namespace anvil::bench
