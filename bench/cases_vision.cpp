// The image / video decoders' and a training step's memory-bound ops: dropout on a transformer
// block's activations, batch norm in training on a ResNet stage (channels-last), the SD VAE
// decoder's group norm, and the VAE decoders' upsampling: SD's nearest 2x (NCHW), Wan's nearest-exact 2x over frames as a batch,
// and the bilinear 2x backward of a training step. CPU shapes are 1/8 of the CUDA ones.
#include "cases.h"

namespace anvil::bench {
namespace {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

struct Up {
  std::string label;
  Shape x;
  std::string mode;
  bool backward;
};

}  // namespace

std::vector<Case> vision_cases(Device dev) {
  const bool cpu = dev.is_cpu();
  const std::string ceil = ceiling_for(dev);
  std::vector<Case> cases;
  {
    const Shape shape = {cpu ? 4 : 32, 512, 1024};
    const double bytes = 2.0 * 2.0 * static_cast<double>(numel(shape));
    nlohmann::json spec{{"op", "dropout"}, {"shape", shape}, {"p", 0.1}, {"dtype", "bfloat16"}};
    cases.push_back({"dropout p 0.1 bfloat16 " + shape_str(shape), bytes, ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, 2.0 * static_cast<double>(numel(shape)));
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(rand(shape, TensorOptions(kBFloat16).device(dev)));
                       return [=](int i) { (void)dropout(xs[i % rot], 0.1, true); };
                     }, "vision", spec});
  }
  {
    const Shape shape = {cpu ? 4 : 32, 64, 56, 56};
    const double bytes = 2.0 * 2.0 * static_cast<double>(numel(shape));  // one read, one write
    nlohmann::json spec{{"op", "batch_norm"}, {"shape", shape}, {"dtype", "bfloat16"}, {"channels_last", true}};
    cases.push_back({"batch_norm train bfloat16 " + shape_str(shape) + " channels-last", bytes, ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, 2.0 * static_cast<double>(numel(shape)));
                       const TensorOptions o = TensorOptions(kBFloat16).device(dev);
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(rand(shape, o).contiguous(MemoryFormat::ChannelsLast));
                       const Tensor w = ones({64}, o), b = zeros({64}, o);
                       const Tensor rm = zeros({64}, o), rv = ones({64}, o);  // PyTorch's CPU wants the input's dtype
                       return [=](int i) { (void)batch_norm(xs[i % rot], w, b, rm, rv, true); };
                     }, "vision", spec});
  }
  {  // the Wan VAEs' RMS norm: F.normalize over the channels of [B, C, T, H, W]
    const Shape shape = {1, cpu ? 96 : 384, cpu ? 2 : 4, cpu ? 46 : 90, cpu ? 80 : 160};
    const double bytes = 2.0 * 2.0 * static_cast<double>(numel(shape));
    nlohmann::json spec{{"op", "normalize"}, {"shape", shape}, {"dtype", "bfloat16"}};
    cases.push_back({"normalize dim 1 bfloat16 " + shape_str(shape) + " wan vae rms norm", bytes, ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, 2.0 * static_cast<double>(numel(shape)));
                       const TensorOptions o = TensorOptions(kBFloat16).device(dev);
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(randn(shape, o));
                       return [=](int i) { (void)normalize(xs[i % rot], 2.0, 1); };
                     }, "vision", spec});
  }
  {  // the SD / FLUX VAE decoder's GroupNorm(32) before each conv
    const Shape shape = {1, cpu ? 128 : 512, cpu ? 64 : 128, cpu ? 64 : 128};
    const double bytes = 2.0 * 2.0 * static_cast<double>(numel(shape));
    nlohmann::json spec{{"op", "group_norm"}, {"shape", shape}, {"groups", 32}, {"dtype", "bfloat16"}};
    cases.push_back({"group_norm 32 bfloat16 " + shape_str(shape) + " sd vae decoder", bytes, ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, 2.0 * static_cast<double>(numel(shape)));
                       const TensorOptions o = TensorOptions(kBFloat16).device(dev);
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(rand(shape, o));
                       const Tensor w = ones({shape[1]}, o), b = zeros({shape[1]}, o);
                       return [=](int i) { (void)group_norm(xs[i % rot], 32, w, b); };
                     }, "vision", spec});
  }
  const std::vector<Up> ups = {
      {"sd vae decoder", {1, cpu ? 64 : 512, 64, 64}, "nearest", false},
      {"wan vae decoder frames", {cpu ? 2 : 16, 256, 90, 160}, "nearest-exact", false},
      {"sd vae decoder", {1, cpu ? 64 : 512, 64, 64}, "nearest", true},
      {"training step", {cpu ? 1 : 8, 64, 128, 128}, "bilinear", true},
  };
  for (const Up& u : ups) {
    const Shape out = {u.x[0], u.x[1], 2 * u.x[2], 2 * u.x[3]};
    const double bytes = 2.0 * static_cast<double>(numel(u.x) + numel(out));
    const std::string name = std::string(u.backward ? "upsample backward " : "upsample ") + u.mode + " 2x bfloat16 " +
                             shape_str(u.x) + " " + u.label;
    nlohmann::json spec{{"op", u.backward ? "upsample_backward" : "upsample"}, {"shape", u.x}, {"mode", u.mode},
                        {"dtype", "bfloat16"}};
    cases.push_back({name, bytes, ceil, [=]() -> Runner {
                       const TensorOptions o = TensorOptions(kBFloat16).device(dev);
                       const int rot = rotations_for(dev, 2.0 * static_cast<double>(numel(u.backward ? out : u.x)));
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(rand(u.backward ? out : u.x, o));
                       const Shape size = {out[2], out[3]};
                       if (!u.backward) return [=](int i) { (void)interpolate(xs[i % rot], size, std::nullopt, u.mode); };
                       return [=](int i) { (void)upsample_backward(xs[i % rot], size, u.x, u.mode, false); };
                     }, "vision", spec});
  }
  return cases;
}

}  // namespace anvil::bench
