// Foundation cases: copy, casts, add and sum over 2^28 (CUDA) or 2^26 (CPU) elements.
#include <algorithm>
#include <cmath>

#include "cases.h"

namespace anvil::bench {

int rotations_for(Device dev, double bytes_per_input) {
  const double cache = dev.is_cpu() ? 3.0 * 32 * 1024 * 1024
                                    : 2.0 * static_cast<double>(cuda::get_device_properties(dev.index).l2_cache_size);
  return std::max(1, static_cast<int>(std::ceil(cache / std::max(bytes_per_input, 1.0))));
}

std::vector<Case> core_cases(Device dev) {
  const int64_t n = dev.is_cpu() ? (int64_t{1} << 26) : (int64_t{1} << 28);
  std::vector<Case> cases;
  auto opts = [dev](DType t) { return TensorOptions(t).device(dev); };
  const double f32 = 4.0 * n;
  const std::string ceil = ceiling_for(dev);
  const int rot = rotations_for(dev, f32);
  auto inputs = [=](DType t) {
    std::vector<Tensor> v;
    for (int i = 0; i < rot; ++i) v.push_back(rand({n}, TensorOptions(t).device(dev)));
    return v;
  };
  auto spec = [&](const char* op, DType in, DType out) {
    return nlohmann::json{{"op", op}, {"n", n}, {"dtype", dtype_name(in)}, {"out_dtype", dtype_name(out)}};
  };
  const std::string sn = " " + std::to_string(n);
  auto cast_case = [&](const char* label, DType from, DType to) {
    const double bytes = static_cast<double>(n) * static_cast<double>(element_size(from) + element_size(to));
    cases.push_back({label + sn, bytes, ceil, [=]() -> Runner {
                       auto src = inputs(from);
                       Tensor dst = empty({n}, opts(to));
                       return [=](int i) mutable { dst.copy_(src[i % rot]); };
                     }, "", spec("copy", from, to)});
  };
  cast_case("copy f32", kFloat32, kFloat32);
  cast_case("cast f32->bf16", kFloat32, kBFloat16);
  cast_case("cast f32->fp8e4m3", kFloat32, kFloat8_e4m3fn);
  cast_case("cast bf16->f32", kBFloat16, kFloat32);
  for (DType t : {kFloat32, kBFloat16}) {
    const std::string label = t == kFloat32 ? "add f32" : "add bf16";
    cases.push_back({label + sn, 3.0 * n * element_size(t), ceil, [=]() -> Runner {
                       auto a = inputs(t), b = inputs(t);
                       return [=](int i) { (void)add(a[i % rot], b[i % rot]); };
                     }, "", spec("add", t, t)});
  }
  // A per-channel bias added over an image (bf16 [1, 128, H, W] + [1, 128, 1, 1], the FLUX
  // VAE's largest activation on CUDA): channels-first (a value per row of H * W) and
  // channels-last (a row of 128 values repeated).
  const int64_t side = dev.is_cpu() ? 256 : 1024;
  for (const bool cl : {false, true}) {
    const Shape shape = {1, 128, side, side};
    const int64_t m = 128 * side * side;
    const int brot = rotations_for(dev, 2.0 * m);
    cases.push_back({std::string("add bf16 bias ") + (cl ? "channels-last " : "") + shape_str(shape), 4.0 * m, ceil,
                     [=]() -> Runner {
                       std::vector<Tensor> a;
                       for (int i = 0; i < brot; ++i)
                         a.push_back(rand(shape, opts(kBFloat16)).contiguous(cl ? MemoryFormat::ChannelsLast
                                                                                 : MemoryFormat::Contiguous));
                       const Tensor b = rand({1, 128, 1, 1}, opts(kBFloat16));
                       return [=](int i) { (void)add(a[i % brot], b); };
                     },
                     "", nlohmann::json{{"op", "add"}, {"a", shape}, {"b", Shape{1, 128, 1, 1}}, {"channels_last", cl},
                                        {"dtype", "bfloat16"}, {"out_dtype", "bfloat16"}}});
  }
  for (DType t : {kFloat32, kBFloat16}) {
    const std::string label = t == kFloat32 ? "sum f32" : "sum bf16";
    cases.push_back({label + sn, 1.0 * n * element_size(t), ceil, [=]() -> Runner {
                       auto a = inputs(t);
                       return [=](int i) { (void)sum(a[i % rot]); };
                     }, "", spec("sum", t, t)});
  }
  // Short read-only streams of a decode step's sizes (q_proj's 16.8 MB, the MoE block's 50 MB
  // gate_up): the reference for what a ~5-20 us kernel can read, start and drain included.
  for (const int64_t m : {int64_t{8} << 20, int64_t{24} << 20}) {
    const int mrot = rotations_for(dev, 2.0 * m);
    cases.push_back({"sum bf16 short stream " + std::to_string(m), 2.0 * m, ceil, [=]() -> Runner {
                       std::vector<Tensor> a;
                       for (int i = 0; i < mrot; ++i) a.push_back(rand({m}, TensorOptions(kBFloat16).device(dev)));
                       return [=](int i) { (void)sum(a[i % mrot]); };
                     }, "", nlohmann::json{{"op", "sum"}, {"n", m}, {"dtype", "bfloat16"}, {"out_dtype", "bfloat16"}}});
  }
  return cases;
}

}  // namespace anvil::bench
