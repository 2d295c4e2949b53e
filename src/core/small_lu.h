#pragma once
// LU with partial pivoting of one matrix of order N <= 4 held in registers, and what the small
// linalg kernels derive from it (inverse, solve, det, slogdet). The CPU loop and the CUDA kernel
// (one thread per matrix) share these functions, so both backends give the same bits. The
// algorithm is LAPACK getf2's: the pivot is the first row of largest |Re| + |Im|, the column
// below it divided by it, a zero pivot recorded (info, 1-based) and its column left as it is.
// Row exchanges are predicated loops over constant indices: a runtime index into the register
// arrays would put them in local memory on the GPU.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "anvil/numeric.h"
#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/linalg.h"

// Loops over the order N (<= 4): unrolled on both compilers.
#if defined(__CUDACC__)
#define ANVIL_UNROLL_SMALL _Pragma("unroll")
#else
#define ANVIL_UNROLL_SMALL _Pragma("GCC unroll 4")
#endif

namespace anvil::small_lu {

constexpr int kMaxN = 4;

// The small kernels take matrices of order 1..kMaxN (the plan's predicate).
inline bool fits(int64_t n) { return n >= 1 && n <= kMaxN; }

template <typename T> ANVIL_HD double abs1(T v) {
  if constexpr (std::is_same_v<T, Complex64>) return std::fabs(static_cast<double>(v.re)) + std::fabs(static_cast<double>(v.im));
  else return std::fabs(static_cast<double>(v));
}

template <typename T, int N>
ANVIL_HD void swap_rows(T (&a)[N][N], int j, int p) {
ANVIL_UNROLL_SMALL
  for (int i = 0; i < N; ++i)
    if (i > j && i == p)
ANVIL_UNROLL_SMALL
      for (int c = 0; c < N; ++c) {
        const T t = a[j][c];
        a[j][c] = a[i][c];
        a[i][c] = t;
      }
}

// Factors a in place (L below the diagonal, U on and above); piv[j] = the row exchanged with j
// (0-based). Returns info.
template <typename T, int N>
ANVIL_HD int factor(T (&a)[N][N], int (&piv)[N]) {
  int info = 0;
ANVIL_UNROLL_SMALL
  for (int j = 0; j < N; ++j) {
    int p = j;
    double best = abs1(a[j][j]);
ANVIL_UNROLL_SMALL
    for (int i = j + 1; i < N; ++i) {
      const double v = abs1(a[i][j]);
      if (v > best) {
        best = v;
        p = i;
      }
    }
    piv[j] = p;
    swap_rows(a, j, p);
    const T d = a[j][j];
    if (d == T(0)) {
      if (info == 0) info = j + 1;
      continue;
    }
ANVIL_UNROLL_SMALL
    for (int i = j + 1; i < N; ++i) a[i][j] = a[i][j] / d;
ANVIL_UNROLL_SMALL
    for (int i = j + 1; i < N; ++i)
ANVIL_UNROLL_SMALL
      for (int c = j + 1; c < N; ++c) a[i][c] = a[i][c] - a[i][j] * a[j][c];
  }
  return info;
}

// x = A^-1 x from the factors: the exchanges, then forward (unit L) and back (U) substitution.
template <typename T, int N>
ANVIL_HD void solve(const T (&a)[N][N], const int (&piv)[N], T (&x)[N]) {
ANVIL_UNROLL_SMALL
  for (int j = 0; j < N; ++j)
ANVIL_UNROLL_SMALL
    for (int i = j + 1; i < N; ++i)
      if (i == piv[j]) {
        const T t = x[j];
        x[j] = x[i];
        x[i] = t;
      }
ANVIL_UNROLL_SMALL
  for (int i = 1; i < N; ++i)
ANVIL_UNROLL_SMALL
    for (int l = 0; l < i; ++l) x[i] = x[i] - a[i][l] * x[l];
ANVIL_UNROLL_SMALL
  for (int i = N - 1; i >= 0; --i) {
ANVIL_UNROLL_SMALL
    for (int l = i + 1; l < N; ++l) x[i] = x[i] - a[i][l] * x[l];
    x[i] = x[i] / a[i][i];
  }
}

// det = (-1)^exchanges * prod U[i][i], the product in float64 (complex: as (re, im) doubles),
// as the large path's lu_det. Returns (re, im).
template <typename T, int N>
ANVIL_HD void det(const T (&a)[N][N], const int (&piv)[N], bool log_abs, double& re, double& im, double& log_sum) {
  bool odd = false;
ANVIL_UNROLL_SMALL
  for (int j = 0; j < N; ++j) odd ^= piv[j] != j;
  re = odd ? -1.0 : 1.0;
  im = 0.0;
  log_sum = 0.0;
ANVIL_UNROLL_SMALL
  for (int i = 0; i < N; ++i) {
    double dr, di = 0.0;
    if constexpr (std::is_same_v<T, Complex64>) {
      dr = a[i][i].re;
      di = a[i][i].im;
    } else {
      dr = static_cast<double>(a[i][i]);
    }
    if (log_abs) {
      const double mag = std::hypot(dr, di);
      log_sum += std::log(mag);
      dr = mag == 0 ? 0.0 : dr / mag;
      di = mag == 0 ? 0.0 : di / mag;
    }
    const double r = re * dr - im * di;
    im = re * di + im * dr;
    re = r;
  }
}

// Whole 16-byte chunks of an N x N matrix of T: dense matrices move as vector loads / stores on
// the GPU (a thread's 64-byte 4x4 float32 matrix as 4 stores instead of 16: H100, 100,000
// 4x4 float32 inverses 21.1 -> 7.0 us).
template <typename T, int N>
inline constexpr bool kVectorMatrix = sizeof(T) * N * N % 16 == 0;

template <typename T, int N>
ANVIL_HD void load_dense(const T* src, T (&m)[N][N]) {
#if defined(__CUDA_ARCH__)
  if constexpr (kVectorMatrix<T, N>) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
ANVIL_UNROLL_SMALL
    for (int q = 0; q < N * N / kPer; ++q) {
      const uint4 v = reinterpret_cast<const uint4*>(src)[q];
      __builtin_memcpy(&m[q * kPer / N][q * kPer % N], &v, 16);
    }
  } else
#endif
  {
ANVIL_UNROLL_SMALL
    for (int i = 0; i < N; ++i)
ANVIL_UNROLL_SMALL
      for (int j = 0; j < N; ++j) m[i][j] = src[i * N + j];
  }
}

template <typename T, int N>
ANVIL_HD void store_dense(T* dst, const T (&m)[N][N]) {
#if defined(__CUDA_ARCH__)
  if constexpr (kVectorMatrix<T, N>) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
ANVIL_UNROLL_SMALL
    for (int q = 0; q < N * N / kPer; ++q) {
      uint4 v;
      __builtin_memcpy(&v, &m[q * kPer / N][q * kPer % N], 16);
      reinterpret_cast<uint4*>(dst)[q] = v;
    }
  } else
#endif
  {
ANVIL_UNROLL_SMALL
    for (int i = 0; i < N; ++i)
ANVIL_UNROLL_SMALL
      for (int j = 0; j < N; ++j) dst[i * N + j] = m[i][j];
  }
}

// A of p is a dense row-major batch at a 16-byte aligned address (vector loads on the GPU).
inline bool dense_aligned_a(const SmallLuParams& p, int64_t elem_bytes) {
  return p.stride_a_col == 1 && p.stride_a_row == p.n && (p.batch == 1 || p.stride_a_batch == p.n * p.n) &&
         reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && p.n * p.n * elem_bytes % 16 == 0;
}

// Matrix b of p, loaded (dense_a: as whole rows; else any strides), factored, and its result
// written (the inverse through registers as whole rows).
template <typename T, int N>
ANVIL_HD void run_one(const SmallLuParams& p, int64_t b, bool dense_a) {
  const T* a = static_cast<const T*>(p.a) + b * p.stride_a_batch;
  T m[N][N];
  if (dense_a) {
    load_dense<T, N>(a, m);
  } else {
ANVIL_UNROLL_SMALL
    for (int i = 0; i < N; ++i)
ANVIL_UNROLL_SMALL
      for (int j = 0; j < N; ++j) m[i][j] = a[i * p.stride_a_row + j * p.stride_a_col];
  }
  int piv[N];
  const int info = factor(m, piv);
  if (p.result == SmallLuResult::Inverse) {
    T inv[N][N];
ANVIL_UNROLL_SMALL
    for (int c = 0; c < N; ++c) {
      T x[N];
ANVIL_UNROLL_SMALL
      for (int i = 0; i < N; ++i) x[i] = T(i == c ? 1 : 0);
      solve(m, piv, x);
ANVIL_UNROLL_SMALL
      for (int i = 0; i < N; ++i) inv[i][c] = x[i];
    }
    store_dense<T, N>(static_cast<T*>(p.out) + b * N * N, inv);
    p.info[b] = info;
    return;
  }
  if (p.result == SmallLuResult::Solve) {
    const T* rhs = static_cast<const T*>(p.b) + b * p.stride_b_batch;
    T* out = static_cast<T*>(p.out) + b * N * p.nrhs;
    for (int64_t c = 0; c < p.nrhs; ++c) {
      T x[N];
ANVIL_UNROLL_SMALL
      for (int i = 0; i < N; ++i) x[i] = rhs[i * p.stride_b_row + c * p.stride_b_col];
      solve(m, piv, x);
ANVIL_UNROLL_SMALL
      for (int i = 0; i < N; ++i) out[i * p.nrhs + c] = x[i];
    }
    p.info[b] = info;
    return;
  }
  double re, im, log_sum;
  det(m, piv, p.result == SmallLuResult::SignLogAbsDet, re, im, log_sum);
  if constexpr (std::is_same_v<T, Complex64>) static_cast<T*>(p.out)[b] = Complex64(static_cast<float>(re), static_cast<float>(im));
  else static_cast<T*>(p.out)[b] = static_cast<T>(re);
  using Real = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if (p.result == SmallLuResult::SignLogAbsDet) static_cast<Real*>(p.log_abs_det)[b] = static_cast<Real>(log_sum);
}

// Both backends' plan for the small kernel.
inline FusedPlan plan(const SmallLuParams& p) { return fits(p.n) ? FusedPlan::Fused : FusedPlan::Composed; }

// f(TypeTag<T>, std::integral_constant<int, N>) for p's dtype and order (host side).
template <typename F>
void dispatch(const SmallLuParams& p, F&& f) {
  dispatch_linalg_types(p.dtype, "[small_lu]", [&](auto tag) {
    switch (p.n) {
      case 1: return f(tag, std::integral_constant<int, 1>{});
      case 2: return f(tag, std::integral_constant<int, 2>{});
      case 3: return f(tag, std::integral_constant<int, 3>{});
      case 4: return f(tag, std::integral_constant<int, 4>{});
      default: throw ShapeError(detail::cat_message("[small_lu] matrices of order 1 to ", kMaxN, " only, got ", p.n));
    }
  });
}

// LAPACK's getf2 on one column-major m x n matrix of any size, in place, column by column (the
// CUDA kernel's thread per matrix and the CPU's LU without row exchanges): the pivot rule above,
// or no exchanges when !pivot; piv (min(m, n)) 1-based. Returns info.
template <typename T>
ANVIL_HD int32_t getf2(T* a, int64_t m, int64_t n, int32_t* piv, bool pivot) {
  const int64_t k = m < n ? m : n;
  int32_t info = 0;
  for (int64_t j = 0; j < k; ++j) {
    T* aj = a + j * m;
    int64_t r = j;
    if (pivot) {
      double best = abs1(aj[j]);
      for (int64_t i = j + 1; i < m; ++i) {
        const double v = abs1(aj[i]);
        if (v > best) {
          best = v;
          r = i;
        }
      }
    }
    piv[j] = static_cast<int32_t>(r + 1);
    if (r != j)
      for (int64_t c = 0; c < n; ++c) {
        const T t = a[j + c * m];
        a[j + c * m] = a[r + c * m];
        a[r + c * m] = t;
      }
    const T d = aj[j];
    if (d == T(0)) {
      if (info == 0) info = static_cast<int32_t>(j + 1);
      continue;
    }
    for (int64_t i = j + 1; i < m; ++i) aj[i] = aj[i] / d;
    for (int64_t c = j + 1; c < n; ++c) {
      T* ac = a + c * m;
      const T f = ac[j];
      for (int64_t i = j + 1; i < m; ++i) ac[i] = ac[i] - aj[i] * f;
    }
  }
  return info;
}

}  // namespace anvil::small_lu
