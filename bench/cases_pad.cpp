// Padding cases at the shapes the models pad: the Wan2.x VAE's causal 3-d conv pad (constant
// and replicate, [1, C, T, H, W] bf16), an SD / FLUX VAE-style 2-d reflect pad in NCHW and
// channels-last, an audio front end's 1-d reflect pad (torch.stft's center pad), and the
// backward of each mode. CPU shapes are 1/8 of the CUDA ones.
#include "cases.h"

namespace anvil::bench {
namespace {

struct PadShape {
  std::string label;
  Shape x, pad;
  std::string mode;
  DType dtype;
  bool channels_last = false;
  bool backward = false;
};

Shape padded(const Shape& x, const Shape& pad) {
  Shape out = x;
  for (size_t i = 0; i < pad.size() / 2; ++i) out[out.size() - 1 - i] += pad[2 * i] + pad[2 * i + 1];
  return out;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

Tensor backward_of(const PadShape& c, const Tensor& grad, const Tensor& x) {
  const int n = static_cast<int>(c.pad.size() / 2);
  if (c.mode == "constant") return constant_pad_nd_backward(grad, c.pad);
  if (c.mode == "circular") return pad_circular_backward(grad, c.pad);
  if (c.mode == "reflect")
    return n == 1 ? reflection_pad1d_backward(grad, x, c.pad)
           : n == 2 ? reflection_pad2d_backward(grad, x, c.pad)
                    : reflection_pad3d_backward(grad, x, c.pad);
  return n == 1 ? replication_pad1d_backward(grad, x, c.pad)
         : n == 2 ? replication_pad2d_backward(grad, x, c.pad)
                  : replication_pad3d_backward(grad, x, c.pad);
}

}  // namespace

std::vector<Case> pad_cases(Device dev) {
  const bool cpu = dev.is_cpu();
  const int64_t t = cpu ? 2 : 16, c3 = cpu ? 32 : 128, c2 = cpu ? 16 : 64;
  const std::vector<PadShape> shapes = {
      {"wan causal conv3d", {1, c3, t, 90, 160}, {1, 1, 1, 1, 2, 0}, "constant", kBFloat16},
      {"wan causal conv3d", {1, c3, t, 90, 160}, {1, 1, 1, 1, 2, 0}, "replicate", kBFloat16},
      {"vae conv2d", {cpu ? 1 : 8, c2, 128, 128}, {1, 1, 1, 1}, "reflect", kBFloat16},
      {"vae conv2d channels-last", {cpu ? 1 : 8, c2, 128, 128}, {1, 1, 1, 1}, "reflect", kBFloat16, true},
      {"stft center", {cpu ? 4 : 32, 1, 480000}, {200, 200}, "reflect", kFloat32},
      {"wan causal conv3d", {1, c3, t, 90, 160}, {1, 1, 1, 1, 2, 0}, "constant", kBFloat16, false, true},
      {"wan causal conv3d", {1, c3, t, 90, 160}, {1, 1, 1, 1, 2, 0}, "replicate", kBFloat16, false, true},
      {"vae conv2d", {cpu ? 1 : 8, c2, 128, 128}, {3, 3, 3, 3}, "reflect", kBFloat16, false, true},
      {"vae conv2d channels-last", {cpu ? 1 : 8, c2, 128, 128}, {3, 3, 3, 3}, "reflect", kBFloat16, true, true},
      {"stft center", {cpu ? 4 : 32, 1, 200000}, {2048, 2048}, "reflect", kFloat32, false, true},
  };
  std::vector<Case> cases;
  const std::string ceil = ceiling_for(dev);
  for (const PadShape& c : shapes) {
    const Shape out = padded(c.x, c.pad);
    const double es = static_cast<double>(element_size(c.dtype));
    const double bytes = es * static_cast<double>(numel(c.x) + numel(out));
    const std::string name = std::string(c.backward ? "pad backward " : "pad ") + c.mode + " " + dtype_name(c.dtype) +
                             " " + shape_str(c.x) + " " + c.label;
    const int rot = rotations_for(dev, es * static_cast<double>(numel(c.backward ? out : c.x)));
    const MemoryFormat format = !c.channels_last ? MemoryFormat::Contiguous
                                : c.x.size() == 4 ? MemoryFormat::ChannelsLast
                                                  : MemoryFormat::ChannelsLast3d;
    nlohmann::json spec{{"op", c.backward ? "pad_backward" : "pad"}, {"shape", c.x}, {"pad", c.pad}, {"mode", c.mode},
                        {"dtype", dtype_name(c.dtype)}, {"channels_last", c.channels_last}};
    cases.push_back({name, bytes, ceil, [=]() -> Runner {
                       std::vector<Tensor> in;
                       const Tensor x = rand(c.x, TensorOptions(c.dtype).device(dev)).contiguous(format);
                       for (int i = 0; i < rot; ++i)
                         in.push_back(c.backward ? rand(out, TensorOptions(c.dtype).device(dev)).contiguous(format)
                                                 : rand(c.x, TensorOptions(c.dtype).device(dev)).contiguous(format));
                       if (c.backward) return [=](int i) { (void)backward_of(c, in[i % rot], x); };
                       return [=](int i) { (void)pad(in[i % rot], c.pad, c.mode); };
                     }, "pad", spec});
  }
  return cases;
}

}  // namespace anvil::bench
