// CPU GEMM: float32/float64 through OpenBLAS; bfloat16/float16 widened to float32 panels,
// multiplied by sgemm (float32 accumulation, like PyTorch CPU), and rounded once on store.
#include <cblas.h>

#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"
#include "cpu/loop.h"

namespace anvil::cpu {
namespace {

// Row-major (lda = row stride) or column-major (transposed) view of one operand.
struct BlasOperand {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};
BlasOperand blas_layout(int64_t stride_row, int64_t stride_col, int64_t cols) {
  if (stride_col == 1) return {CblasNoTrans, std::max<int64_t>(stride_row, cols)};
  return {CblasTrans, stride_col};
}

template <typename T>
void widen(const T* src, float* dst, int64_t rows, int64_t cols, int64_t stride_row, int64_t stride_col) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(src[r * stride_row + c * stride_col]);
}

}  // namespace

void bmm(const BmmParams& p) {
  const int64_t m = p.m, n = p.n, k = p.k;
  if (p.dtype == DType::Float32 || p.dtype == DType::Float64) {
    BlasOperand la = blas_layout(p.stride_a_row, p.stride_a_col, k);
    BlasOperand lb = blas_layout(p.stride_b_row, p.stride_b_col, n);
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.dtype == DType::Float32) {
        const float* A = static_cast<const float*>(p.a) + b * p.stride_a_batch;
        const float* B = static_cast<const float*>(p.b) + b * p.stride_b_batch;
        float* C = static_cast<float*>(p.c) + b * m * n;
        cblas_sgemm(CblasRowMajor, la.trans, lb.trans, m, n, k, 1.f, A, la.ld, B, lb.ld, 0.f, C, n);
      } else {
        const double* A = static_cast<const double*>(p.a) + b * p.stride_a_batch;
        const double* B = static_cast<const double*>(p.b) + b * p.stride_b_batch;
        double* C = static_cast<double*>(p.c) + b * m * n;
        cblas_dgemm(CblasRowMajor, la.trans, lb.trans, m, n, k, 1.0, A, la.ld, B, lb.ld, 0.0, C, n);
      }
    }
    return;
  }
  dispatch_float_types(p.dtype, "[bmm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      std::vector<float> a(static_cast<size_t>(m * k)), bw(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
      for (int64_t b = 0; b < p.batch; ++b) {
        widen(static_cast<const T*>(p.a) + b * p.stride_a_batch, a.data(), m, k, p.stride_a_row, p.stride_a_col);
        widen(static_cast<const T*>(p.b) + b * p.stride_b_batch, bw.data(), k, n, p.stride_b_row, p.stride_b_col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a.data(), k, bw.data(), n, 0.f, c.data(), n);
        T* C = static_cast<T*>(p.c) + b * m * n;
        for (int64_t i = 0; i < m * n; ++i) C[i] = T(c[i]);
      }
    }
  });
}

}  // namespace anvil::cpu
