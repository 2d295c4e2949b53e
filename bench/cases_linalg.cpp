// Linear algebra at the release's shapes: batched inverses and solves of 3x3 / 4x4 float32
// matrices (camera geometry: 100,000 at once, the one-kernel small path), LU of one 1024^2
// matrix and of a batch of 64^2 ones (cuSOLVER / cuBLAS batched, LAPACK on the CPU), a solve
// with 16 right-hand sides, batched unit triangular solves of 16^2 / 32^2 / 64^2 systems and
// single ones of 1024^2 / 4096^2 (4096 or 64 right-hand sides), reduced
// QR and SVD (U, S, Vh without full matrices) of 1024^2, of
// 256 64^2 and (SVD: cuSOLVER's batched Jacobi) of 4096 16^2. Matrices are randn + n I (well conditioned). The _ex forms:
// no read back of info, as torch.linalg's *_ex.
#include "cases.h"

namespace anvil::bench {
namespace {

Tensor well_conditioned(const Shape& shape, DType t, Device dev) {
  const int64_t n = shape.back();
  return add(randn(shape, TensorOptions(t).device(dev)), mul(eye(n, TensorOptions(t).device(dev)), static_cast<double>(n)));
}

}  // namespace

std::vector<Case> linalg_cases(Device dev) {
  std::vector<Case> cases;
  const std::string ceil = ceiling_for(dev);
  // Small matrices: memory-bound (A read, the inverse / solution written).
  for (int64_t n : {3, 4})
    for (const char* fn : {"inv_ex", "solve_ex"}) {
      const int64_t batch = 100000;
      const bool solve = std::string(fn) == "solve_ex";
      const Shape shape = {batch, n, n};
      // A read, the inverse (n x n) or the solution and B (n each) moved, info written.
      const double bytes = 4.0 * static_cast<double>(batch * n * n) * (solve ? 1 : 2) +
                           (solve ? 8.0 * static_cast<double>(batch * n) : 0.0) + 4.0 * static_cast<double>(batch);
      nlohmann::json spec{{"op", "linalg"}, {"fn", fn}, {"shape", shape}, {"rhs", 1}, {"dtype", "float32"}};
      cases.push_back({std::string("linalg ") + fn + " float32 " + shape_str(shape) + (solve ? " x [" + std::to_string(n) + ", 1]" : ""),
                       bytes, ceil, [=]() -> Runner {
                         const int rot = rotations_for(dev, 4.0 * static_cast<double>(batch * n * n));
                         std::vector<Tensor> as, bs;
                         for (int r = 0; r < rot; ++r) {
                           as.push_back(well_conditioned(shape, kFloat32, dev));
                           bs.push_back(randn({batch, n, 1}, TensorOptions(kFloat32).device(dev)));
                         }
                         if (solve) return [=](int i) { (void)linalg::solve_ex(as[i % rot], bs[i % rot]); };
                         return [=](int i) { (void)linalg::inv_ex(as[i % rot]); };
                       }, "linalg", spec});
    }
  // Batched unit lower triangular solves (Gated DeltaNet's chunk solves, (I + L) X = B with B of
  // head-dim columns): memory-bound, A and B read, X written.
  struct Tri {
    int64_t batch, n, rhs;
  };
  for (Tri c : {Tri{2048, 64, 128}, Tri{4096, 32, 64}, Tri{8192, 16, 16}}) {
    const Shape shape = {c.batch, c.n, c.n};
    const double bytes = 4.0 * static_cast<double>(c.batch * (c.n * c.n + 2 * c.n * c.rhs));
    nlohmann::json spec{{"op", "linalg"}, {"fn", "solve_triangular"}, {"shape", shape}, {"rhs", c.rhs}, {"dtype", "float32"}};
    cases.push_back({"linalg solve_triangular float32 " + shape_str(shape) + " x " + std::to_string(c.rhs) + " rhs", bytes,
                     ceil, [=]() -> Runner {
                       const TensorOptions f32 = TensorOptions(kFloat32).device(dev);
                       const Tensor a = mul(randn(shape, f32), 1.0 / static_cast<double>(c.n));
                       const Tensor b = randn({c.batch, c.n, c.rhs}, f32);
                       return [=](int) { (void)linalg::solve_triangular(a, b, false, true, true); };
                     }, "linalg", spec});
  }
  // Large triangular solves (CUDA: the blocked plan, gemm between 128-order trsm blocks) against
  // the GEMM ceiling, n^2 k flops.
  for (Tri c : {Tri{1, 4096, 4096}, Tri{1, 4096, 64}, Tri{1, 1024, 1024}}) {
    const Shape shape = {c.batch, c.n, c.n};
    nlohmann::json spec{{"op", "linalg"}, {"fn", "solve_triangular"}, {"shape", shape}, {"rhs", c.rhs}, {"dtype", "float32"}};
    Case tc{"linalg solve_triangular float32 " + shape_str(shape) + " x " + std::to_string(c.rhs) + " rhs", 0, "gemm",
            [=]() -> Runner {
              const TensorOptions f32 = TensorOptions(kFloat32).device(dev);
              const Tensor a = mul(randn(shape, f32), 1.0 / static_cast<double>(c.n));
              const Tensor b = randn({c.batch, c.n, c.rhs}, f32);
              return [=](int) { (void)linalg::solve_triangular(a, b, false, true, true); };
            }, "linalg", spec};
    tc.flops = static_cast<double>(c.n) * static_cast<double>(c.n) * static_cast<double>(c.rhs);
    tc.dtype = kFloat32;
    cases.push_back(std::move(tc));
  }
  // LU and solves against the GEMM ceiling: 2/3 n^3 flops per LU, + 2 n^2 k per solve.
  struct Big {
    const char* fn;
    Shape shape;
    int64_t rhs;
    DType dtype;
  };
  const std::vector<Big> bigs = {{"lu_factor_ex", {1024, 1024}, 0, kFloat32},
                                 {"lu_factor_ex", {256, 64, 64}, 0, kFloat32},
                                 {"lu_factor_ex", {1024, 1024}, 0, kFloat64},
                                 {"solve_ex", {1024, 1024}, 16, kFloat32},
                                 {"qr", {1024, 1024}, 0, kFloat32},
                                 {"qr", {256, 64, 64}, 0, kFloat32},
                                 {"svd", {1024, 1024}, 0, kFloat32},
                                 {"svd", {256, 64, 64}, 0, kFloat32},
                                 {"svd", {4096, 16, 16}, 0, kFloat32}};
  for (const Big& b : bigs) {
    const int64_t n = b.shape.back(), batch = b.shape.size() == 3 ? b.shape[0] : 1;
    const std::string fn = b.fn;
    // Nominal flops: LU 2/3 n^3 (+ 2 n^2 k per solve), QR 4/3 n^3 + 4/3 n^3 to form Q, the SVD
    // with U and V 22 n^3 (Golub & Van Loan's count for the R-SVD).
    const double cube = static_cast<double>(n) * n * n;
    const double per = fn == "qr" ? 8.0 / 3.0 * cube : fn == "svd" ? 22.0 * cube : 2.0 / 3.0 * cube + 2.0 * n * n * b.rhs;
    const double flops = static_cast<double>(batch) * per;
    nlohmann::json spec{{"op", "linalg"}, {"fn", b.fn}, {"shape", b.shape}, {"rhs", b.rhs}, {"dtype", dtype_name(b.dtype)}};
    Case c{std::string("linalg ") + b.fn + " " + dtype_name(b.dtype) + " " + shape_str(b.shape) +
               (b.rhs ? " x " + std::to_string(b.rhs) + " rhs" : ""),
           0, "gemm", [=]() -> Runner {
             const Tensor a = well_conditioned(b.shape, b.dtype, dev);
             const Tensor r = randn({n, std::max<int64_t>(b.rhs, 1)}, TensorOptions(b.dtype).device(dev));
             if (fn == "qr") return [=](int) { (void)linalg::qr(a); };
             if (fn == "svd") return [=](int) { (void)linalg::svd(a, false); };
             if (b.rhs) return [=](int) { (void)linalg::solve_ex(a, r); };
             return [=](int) { (void)linalg::lu_factor_ex(a); };
           }, "linalg", spec};
    // LU / solves: milliseconds per call, launch gaps do not matter (tests cover capture); the SVD
    // reads its convergence info back (no capture); QR of a batch is a loop of small cuSOLVER
    // orgqr calls whose launch gaps do matter, and captures.
    c.graphable = fn == "qr";
    c.flops = flops;
    c.dtype = b.dtype;
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace anvil::bench
