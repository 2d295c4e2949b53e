#pragma once
// Helpers of the linear-algebra tests: random matrices as float64 references and as tensors of
// any dtype, layout and device, and back.
#include <complex>
#include <random>
#include <vector>

#include "harness.h"

namespace linalg_util {

using namespace anvil;
using ref::CMatrix;
using ref::Cplx;

inline const std::vector<DType> kLinalgDtypes = {kFloat32, kFloat64, kComplex64};

inline double eps_of(DType t) { return th::unit_roundoff(t); }

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
inline Shape with(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail);
  return s;
}

// `count` matrices of uniform [-1, 1] entries (imaginary parts too for complex64), plus `shift`
// on the diagonal.
inline std::vector<CMatrix> random_mats(int64_t count, int64_t m, int64_t n, DType t, uint64_t seed, double shift = 0) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<CMatrix> out;
  for (int64_t b = 0; b < count; ++b) {
    CMatrix a(m, n);
    for (Cplx& x : a.v) x = Cplx(u(g), t == kComplex64 ? u(g) : 0.0);
    for (int64_t i = 0; i < std::min(m, n); ++i) a.at(i, i) += shift;
    out.push_back(a);
  }
  return out;
}

// Values rounded to the dtype (what the op actually sees).
inline std::vector<CMatrix> rounded(std::vector<CMatrix> mats, DType t) {
  for (CMatrix& a : mats)
    for (Cplx& x : a.v)
      if (t != kFloat64) x = Cplx(static_cast<float>(x.real()), static_cast<float>(x.imag()));
  return mats;
}

// A tensor (batch..., rows, cols) of the matrices; transposed: built as the transpose of a
// contiguous (batch..., cols, rows) tensor (a column-major view).
inline Tensor to_tensor(const std::vector<CMatrix>& mats, const Shape& batch, int64_t rows, int64_t cols, DType t, Device dev,
                 bool transposed = false) {
  const Shape sizes = transposed ? with(batch, {cols, rows}) : with(batch, {rows, cols});
  std::vector<std::complex<float>> cf;
  std::vector<double> d;
  for (const CMatrix& a : mats)
    for (int64_t i = 0; i < (transposed ? cols : rows); ++i)
      for (int64_t j = 0; j < (transposed ? rows : cols); ++j) {
        const Cplx x = transposed ? a.at(j, i) : a.at(i, j);
        cf.emplace_back(static_cast<float>(x.real()), static_cast<float>(x.imag()));
        d.push_back(x.real());
      }
  Tensor out = t == kComplex64 ? anvil::tensor(cf, sizes) : anvil::tensor(d, sizes).to(t);
  out = out.to(dev);
  return transposed ? out.transpose(-2, -1) : out;
}

// The matrices of a (batch..., rows, cols) tensor, any layout and device.
inline std::vector<CMatrix> from_tensor(const Tensor& t) {
  const Tensor c = th::to_cpu(t);
  const ref::Array re = th::to_array(c);
  const ref::Array im = t.dtype() == kComplex64 ? th::to_array_imag(c) : ref::Array(c.sizes());
  const int64_t rows = t.size(-2), cols = t.size(-1), count = numel_of(Shape(t.sizes().begin(), t.sizes().end() - 2));
  std::vector<CMatrix> out;
  for (int64_t b = 0; b < count; ++b) {
    CMatrix a(rows, cols);
    for (int64_t e = 0; e < rows * cols; ++e) a.v[static_cast<size_t>(e)] = Cplx(re.v[b * rows * cols + e], im.v[b * rows * cols + e]);
    out.push_back(a);
  }
  return out;
}

inline std::vector<int> ints_of(const Tensor& t) {
  const Tensor c = th::to_cpu(t).contiguous();
  return std::vector<int>(c.data_ptr<int32_t>(), c.data_ptr<int32_t>() + c.numel());
}

}  // namespace linalg_util
