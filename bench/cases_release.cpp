// The release's counting, moments and losses at the shapes its notes quote: bincount over 4M
// int64 values mostly in one bin (the hot-bin case PyTorch fixed) and spread evenly, var_mean
// over a row-wise and a batch-norm-style (N, H, W) reduction, mse_loss and cross_entropy at a
// small training step's shapes. CPU sizes are 1/4 of the CUDA ones.
#include "cases.h"

namespace anvil::bench {

std::vector<Case> release_cases(Device dev) {
  const bool cpu = dev.is_cpu();
  std::vector<Case> cases;
  const std::string ceil = ceiling_for(dev);
  const int64_t n = cpu ? int64_t{1} << 20 : int64_t{1} << 22;
  for (double hot : {0.95, 0.0}) {
    const int64_t bins = 1024;
    const std::string name = "bincount int64 " + std::to_string(n) + (hot > 0 ? " 95% in one bin" : " uniform") + ", " +
                             std::to_string(bins) + " bins";
    nlohmann::json spec{{"op", "bincount"}, {"n", n}, {"bins", bins}, {"hot", hot}, {"dtype", "int64"}};
    cases.push_back({name, 8.0 * static_cast<double>(n + bins), ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, 8.0 * static_cast<double>(n));
                       std::vector<Tensor> xs;
                       uint64_t s = 0x9E3779B97F4A7C15ull;
                       for (int r = 0; r < rot; ++r) {
                         std::vector<int64_t> v(static_cast<size_t>(n));
                         for (int64_t& e : v) {
                           s = s * 6364136223846793005ull + 1442695040888963407ull;
                           const double u = static_cast<double>(s >> 11) * 0x1p-53;
                           e = u < hot ? 0 : static_cast<int64_t>((s >> 20) % static_cast<uint64_t>(bins));
                         }
                         v[0] = bins - 1;
                         xs.push_back(tensor(v, Shape{n}).to(dev));
                       }
                       return [=](int i) { (void)bincount(xs[i % rot]); };
                     }, "release", spec, false});
  }
  struct M {
    Shape shape, dims;
    DType dtype;
  };
  const std::vector<M> moments = {{{cpu ? 2048 : 8192, 4096}, {-1}, kFloat32},
                                  {{cpu ? 8 : 32, 256, 64, 64}, {0, 2, 3}, kBFloat16}};
  for (const M& m : moments) {
    int64_t numel = 1, kept = 1;
    for (size_t d = 0; d < m.shape.size(); ++d) numel *= m.shape[d];
    kept = m.shape[m.dims.size() == 1 ? 0 : 1];
    const double es = static_cast<double>(element_size(m.dtype));
    const std::string name = std::string("var_mean ") + dtype_name(m.dtype) + " " + shape_str(m.shape) + " dims " +
                             shape_str(m.dims);
    nlohmann::json spec{{"op", "var_mean"}, {"shape", m.shape}, {"dims", m.dims}, {"dtype", dtype_name(m.dtype)}};
    cases.push_back({name, es * static_cast<double>(numel + 2 * kept), ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, es * static_cast<double>(numel));
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(rand(m.shape, TensorOptions(m.dtype).device(dev)));
                       return [=](int i) { (void)var_mean(xs[i % rot], m.dims); };
                     }, "release", spec});
  }
  // Losses at a small training step: a regression head's mse and an LM head's cross entropy.
  {
    const Shape shape = {cpu ? 16 : 64, 4096};
    const int64_t numel = shape[0] * shape[1];
    nlohmann::json spec{{"op", "mse_loss"}, {"shape", shape}, {"dtype", "bfloat16"}};
    cases.push_back({"mse_loss bfloat16 " + shape_str(shape), 4.0 * static_cast<double>(numel), ceil, [=]() -> Runner {
                       const int rot = rotations_for(dev, 4.0 * static_cast<double>(numel));
                       std::vector<Tensor> xs, ys;
                       for (int r = 0; r < rot; ++r) {
                         xs.push_back(rand(shape, TensorOptions(kBFloat16).device(dev)));
                         ys.push_back(rand(shape, TensorOptions(kBFloat16).device(dev)));
                       }
                       return [=](int i) { (void)mse_loss(xs[i % rot], ys[i % rot]); };
                     }, "release", spec});
  }
  {
    const int64_t rows = cpu ? 16 : 64, classes = 32000;
    nlohmann::json spec{{"op", "cross_entropy"}, {"shape", Shape{rows, classes}}, {"dtype", "float32"}};
    cases.push_back({"cross_entropy float32 " + shape_str({rows, classes}), 4.0 * static_cast<double>(rows * classes), ceil,
                     [=]() -> Runner {
                       const int rot = rotations_for(dev, 4.0 * static_cast<double>(rows * classes));
                       std::vector<Tensor> xs;
                       for (int r = 0; r < rot; ++r) xs.push_back(rand({rows, classes}, TensorOptions(kFloat32).device(dev)));
                       std::vector<int64_t> tv(static_cast<size_t>(rows));
                       for (int64_t i = 0; i < rows; ++i) tv[static_cast<size_t>(i)] = (i * 7919) % classes;
                       const Tensor t = tensor(tv, Shape{rows}).to(dev);
                       return [=](int i) { (void)cross_entropy(xs[i % rot], t); };
                     }, "release", spec});
  }
  return cases;
}

}  // namespace anvil::bench
