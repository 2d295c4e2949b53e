// CPU linear algebra: LAPACK's getrf / getrs from OpenBLAS (its Fortran entry points through
// LAPACK's own lapack.h), batches over the OpenMP team; unpivoted LU, determinants and the
// unpacking of P, L, U as loops. Matrices are column-major (core/kernels/linalg.h).
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>
#include <vector>

#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapack.h>

#include <cblas.h>
#include <omp.h>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/linalg.h"
#include "core/small_lu.h"

namespace anvil::cpu {
namespace {

static_assert(sizeof(lapack_int) == sizeof(int32_t), "pivots are int32: LAPACK with 32-bit integers (LP64)");

void getrf(lapack_int m, lapack_int n, float* a, lapack_int lda, lapack_int* ipiv, lapack_int* info) {
  LAPACK_sgetrf(&m, &n, a, &lda, ipiv, info);
}
void getrf(lapack_int m, lapack_int n, double* a, lapack_int lda, lapack_int* ipiv, lapack_int* info) {
  LAPACK_dgetrf(&m, &n, a, &lda, ipiv, info);
}
void getrf(lapack_int m, lapack_int n, Complex64* a, lapack_int lda, lapack_int* ipiv, lapack_int* info) {
  LAPACK_cgetrf(&m, &n, reinterpret_cast<std::complex<float>*>(a), &lda, ipiv, info);
}
// Row exchanges k1..k2 (1-based, ipiv 1-based over the whole matrix) on n columns.
void laswp(lapack_int n, float* a, lapack_int lda, lapack_int k1, lapack_int k2, const lapack_int* ipiv) {
  const lapack_int inc = 1;
  LAPACK_slaswp(&n, a, &lda, &k1, &k2, ipiv, &inc);
}
void laswp(lapack_int n, double* a, lapack_int lda, lapack_int k1, lapack_int k2, const lapack_int* ipiv) {
  const lapack_int inc = 1;
  LAPACK_dlaswp(&n, a, &lda, &k1, &k2, ipiv, &inc);
}
void laswp(lapack_int n, Complex64* a, lapack_int lda, lapack_int k1, lapack_int k2, const lapack_int* ipiv) {
  const lapack_int inc = 1;
  LAPACK_claswp(&n, reinterpret_cast<std::complex<float>*>(a), &lda, &k1, &k2, ipiv, &inc);
}
// B = L^-1 B (L unit lower, w x w), then C -= A B: the blocked LU's two updates (column-major).
void trsm_lower_unit(int w, int n, const float* l, int lda, float* b) {
  cblas_strsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, w, n, 1.f, l, lda, b, lda);
}
void trsm_lower_unit(int w, int n, const double* l, int lda, double* b) {
  cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, w, n, 1.0, l, lda, b, lda);
}
void trsm_lower_unit(int w, int n, const Complex64* l, int lda, Complex64* b) {
  const std::complex<float> one(1.f, 0.f);
  cblas_ctrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, w, n, &one, l, lda, b, lda);
}
void gemm_minus(int m, int n, int k, const float* a, const float* b, float* c, int ld) {
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, -1.f, a, ld, b, ld, 1.f, c, ld);
}
void gemm_minus(int m, int n, int k, const double* a, const double* b, double* c, int ld) {
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, -1.0, a, ld, b, ld, 1.0, c, ld);
}
void gemm_minus(int m, int n, int k, const Complex64* a, const Complex64* b, Complex64* c, int ld) {
  const std::complex<float> minus_one(-1.f, 0.f), one(1.f, 0.f);
  cblas_cgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, &minus_one, a, ld, b, ld, &one, c, ld);
}
void getrs(char op, lapack_int n, lapack_int nrhs, const float* a, const lapack_int* ipiv, float* b, lapack_int* info) {
  LAPACK_sgetrs(&op, &n, &nrhs, a, &n, ipiv, b, &n, info);
}
void getrs(char op, lapack_int n, lapack_int nrhs, const double* a, const lapack_int* ipiv, double* b, lapack_int* info) {
  LAPACK_dgetrs(&op, &n, &nrhs, a, &n, ipiv, b, &n, info);
}
void getrs(char op, lapack_int n, lapack_int nrhs, const Complex64* a, const lapack_int* ipiv, Complex64* b,
           lapack_int* info) {
  LAPACK_cgetrs(&op, &n, &nrhs, reinterpret_cast<const std::complex<float>*>(a), &n, ipiv,
                reinterpret_cast<std::complex<float>*>(b), &n, info);
}

void trsm(bool left, bool upper, bool unit, int rows, int cols, const float* a, int lda, float* b) {
  cblas_strsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, rows, cols, 1.f, a, lda, b, rows);
}
void trsm(bool left, bool upper, bool unit, int rows, int cols, const double* a, int lda, double* b) {
  cblas_dtrsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, rows, cols, 1.0, a, lda, b, rows);
}
void trsm(bool left, bool upper, bool unit, int rows, int cols, const Complex64* a, int lda, Complex64* b) {
  const std::complex<float> one(1.f, 0.f);
  cblas_ctrsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, rows, cols, &one, a, lda, b, rows);
}
void potrf_lower(lapack_int n, float* a, lapack_int* info) {
  const char uplo = 'L';
  LAPACK_spotrf(&uplo, &n, a, &n, info);
}
void potrf_lower(lapack_int n, double* a, lapack_int* info) {
  const char uplo = 'L';
  LAPACK_dpotrf(&uplo, &n, a, &n, info);
}
void potrf_lower(lapack_int n, Complex64* a, lapack_int* info) {
  const char uplo = 'L';
  LAPACK_cpotrf(&uplo, &n, reinterpret_cast<std::complex<float>*>(a), &n, info);
}

// float64 or complex<double>: where products of many factors are formed.
template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, Complex64>, std::complex<double>, double>;
template <typename T> Wide<T> widen(T v) {
  if constexpr (std::is_same_v<T, Complex64>) return {v.re, v.im};
  else return static_cast<double>(v);
}
template <typename T> T narrow(Wide<T> v) {
  if constexpr (std::is_same_v<T, Complex64>) return Complex64(static_cast<float>(v.real()), static_cast<float>(v.imag()));
  else return static_cast<T>(v);
}

// Right-looking LU without row exchanges (LAPACK has none). A zero pivot is recorded in info
// (the first one) and its column left unscaled, as LAPACK's getf2 leaves a singular column.
template <typename T>
void lu_no_pivot(T* a, int64_t m, int64_t n, int32_t* pivots, int32_t* info) {
  const int64_t k = std::min(m, n);
  *info = 0;
  for (int64_t j = 0; j < k; ++j) {
    pivots[j] = static_cast<int32_t>(j + 1);
    const T d = a[j + j * m];
    if (d == T(0)) {
      if (*info == 0) *info = static_cast<int32_t>(j + 1);
      continue;
    }
    for (int64_t i = j + 1; i < m; ++i) a[i + j * m] = a[i + j * m] / d;
    for (int64_t c = j + 1; c < n; ++c) {
      const T f = a[j + c * m];
      for (int64_t i = j + 1; i < m; ++i) a[i + c * m] = a[i + c * m] - a[i + j * m] * f;
    }
  }
}

// Several matrices: one per thread (LAPACK then runs single-threaded inside the team); one
// matrix: OpenBLAS's own threads.
bool over_batch(int64_t batch) { return batch > 1; }

// OpenBLAS calls on one thread for the scope: it sizes its team from omp_get_max_threads() at
// each call, and this sets only the calling thread's value.
class OneBlasThread {
 public:
  OneBlasThread() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneBlasThread() { omp_set_num_threads(threads_); }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int threads_;
};

// One matrix of at least this order factors by blocks (lu_blocked); smaller ones in one getrf.
constexpr int64_t kBlockedLuMin = 256, kPanel = 64;

// Right-looking blocked LU in LAPACK getrf's order: a panel of kPanel columns factored by
// LAPACK's getrf on one thread, its exchanges applied to the other columns, then U's rows by
// trsm and the trailing matrix by gemm on OpenBLAS's threads. OpenBLAS 0.3.21's own threaded
// getrf spins in libgomp on its OpenMP build (1024^2 float32: 19 ms on 2 threads, 10.8 ms on 1;
// Intel Xeon VM, 2 threads).
template <typename T>
void lu_blocked(T* a, int64_t m, int64_t n, int32_t* pivots, int32_t* info) {
  const int64_t k = std::min(m, n);
  const int ld = static_cast<int>(m);
  *info = 0;
  for (int64_t j0 = 0; j0 < k; j0 += kPanel) {
    const int64_t w = std::min(kPanel, k - j0);
    lapack_int panel_info = 0;
    {
      OneBlasThread one;
      getrf(static_cast<lapack_int>(m - j0), static_cast<lapack_int>(w), a + j0 + j0 * m, ld, pivots + j0, &panel_info);
    }
    if (panel_info > 0 && *info == 0) *info = static_cast<int32_t>(panel_info + j0);
    for (int64_t i = j0; i < j0 + w; ++i) pivots[i] += static_cast<int32_t>(j0);
    const lapack_int k1 = static_cast<lapack_int>(j0 + 1), k2 = static_cast<lapack_int>(j0 + w);
    if (j0 > 0) laswp(static_cast<lapack_int>(j0), a, ld, k1, k2, pivots);
    const int64_t right = n - j0 - w, below = m - j0 - w;
    if (right <= 0) continue;
    laswp(static_cast<lapack_int>(right), a + (j0 + w) * m, ld, k1, k2, pivots);
    trsm_lower_unit(static_cast<int>(w), static_cast<int>(right), a + j0 + j0 * m, ld, a + j0 + (j0 + w) * m);
    if (below > 0)
      gemm_minus(static_cast<int>(below), static_cast<int>(right), static_cast<int>(w), a + (j0 + w) + j0 * m,
                 a + j0 + (j0 + w) * m, a + (j0 + w) + (j0 + w) * m, ld);
  }
}

}  // namespace

void lu_factor(const LuFactorParams& p) {
  dispatch_linalg_types(p.dtype, "[lu_factor]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* a = static_cast<T*>(p.a);
    const int64_t k = std::min(p.m, p.n), mat = p.m * p.n;
    if (p.pivot && p.batch == 1 && k >= kBlockedLuMin) return lu_blocked(a, p.m, p.n, p.pivots, p.info);
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.pivot) {
        lapack_int info = 0;
        getrf(static_cast<lapack_int>(p.m), static_cast<lapack_int>(p.n), a + b * mat, static_cast<lapack_int>(p.m),
              p.pivots + b * k, &info);
        p.info[b] = info;
      } else {
        lu_no_pivot(a + b * mat, p.m, p.n, p.pivots + b * k, p.info + b);
      }
    }
  });
}

void lu_solve(const LuSolveParams& p) {
  const char op = p.op == LinalgOp::Adjoint ? 'C' : p.op == LinalgOp::Transpose ? 'T' : 'N';
  dispatch_linalg_types(p.dtype, "[lu_solve]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* lu = static_cast<const T*>(p.lu);
    T* x = static_cast<T*>(p.b);
    // One matrix: getrs on one thread (OpenBLAS's threaded getrs spins as its getrf does:
    // 1024^2 with 16 right-hand sides 1.9-2.8 ms on 2 threads, 1.3-1.4 ms on 1).
    std::optional<OneBlasThread> one;
    if (p.batch == 1) one.emplace();
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      lapack_int info = 0;  // < 0 only for an argument the op layer never passes
      getrs(op, static_cast<lapack_int>(p.n), static_cast<lapack_int>(p.nrhs), lu + b * p.n * p.n, p.pivots + b * p.n,
            x + b * p.n * p.nrhs, &info);
    }
  });
}

void triangular_solve(const TriangularSolveParams& p) {
  dispatch_linalg_types(p.dtype, "[triangular_solve]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(p.a);
    T* x = static_cast<T*>(p.b);
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b)
      trsm(p.left, p.upper, p.unit, static_cast<int>(p.rows), static_cast<int>(p.cols), a + b * p.n * p.n,
           static_cast<int>(p.n), x + b * p.rows * p.cols);
  });
}

void cholesky(const CholeskyParams& p) {
  dispatch_linalg_types(p.dtype, "[cholesky]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* a = static_cast<T*>(p.a);
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      T* m = a + b * p.n * p.n;
      lapack_int info = 0;
      potrf_lower(static_cast<lapack_int>(p.n), m, &info);
      p.info[b] = info;
      for (int64_t j = 1; j < p.n; ++j)
        for (int64_t i = 0; i < j; ++i) m[i + j * p.n] = T(0);
    }
  });
}

void lu_det(const LuDetParams& p) {
  dispatch_linalg_types(p.dtype, "[lu_det]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Real = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* lu = static_cast<const T*>(p.lu);
    T* det = static_cast<T*>(p.det);
    Real* log_abs = static_cast<Real*>(p.log_abs_det);
#pragma omp parallel for schedule(static) if (p.batch * p.n >= 4096)
    for (int64_t b = 0; b < p.batch; ++b) {
      const T* a = lu + b * p.n * p.n;
      const int32_t* piv = p.pivots + b * p.n;
      bool odd = false;
      for (int64_t i = 0; i < p.n; ++i) odd ^= piv[i] != i + 1;
      Wide<T> prod = odd ? -1.0 : 1.0;
      double log_sum = 0;
      for (int64_t i = 0; i < p.n; ++i) {
        const Wide<T> d = widen(a[i + i * p.n]);
        if (!p.log_abs) {
          prod *= d;
          continue;
        }
        const double mag = std::abs(d);
        log_sum += std::log(mag);
        prod *= mag == 0 ? Wide<T>(0) : d / mag;
      }
      det[b] = narrow<T>(prod);
      if (p.log_abs) log_abs[b] = static_cast<Real>(log_sum);
    }
  });
}

void lu_unpack(const LuUnpackParams& p) {
  dispatch_linalg_types(p.dtype, "[lu_unpack]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t m = p.m, n = p.n, k = std::min(m, n);
    const T* lu = static_cast<const T*>(p.lu);
#pragma omp parallel for schedule(static) if (p.batch * m * std::max(m, n) >= 16384)
    for (int64_t b = 0; b < p.batch; ++b) {
      const T* a = lu + b * m * n;
      if (p.p) {
        int32_t* r = p.scratch + b * m;
        std::iota(r, r + m, 0);
        for (int64_t i = 0; i < k; ++i) std::swap(r[i], r[p.pivots[b * k + i] - 1]);
        T* out = static_cast<T*>(p.p) + b * m * m;
        std::fill(out, out + m * m, T(0));
        for (int64_t j = 0; j < m; ++j) out[r[j] * m + j] = T(1);
      }
      if (p.l) {
        T* out = static_cast<T*>(p.l) + b * m * k;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k; ++j) out[i * k + j] = i > j ? a[i + j * m] : i == j ? T(1) : T(0);
      }
      if (p.u) {
        T* out = static_cast<T*>(p.u) + b * k * n;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < n; ++j) out[i * n + j] = i <= j ? a[i + j * m] : T(0);
      }
    }
  });
}

FusedPlan small_lu_plan(const SmallLuParams& p) { return small_lu::plan(p); }

void small_lu(const SmallLuParams& p) {
  small_lu::dispatch(p, [&](auto tag, auto order) {
    using T = typename decltype(tag)::type;
    constexpr int N = decltype(order)::value;
#pragma omp parallel for schedule(static) if (p.batch >= 4096)
    for (int64_t b = 0; b < p.batch; ++b) small_lu::run_one<T, N>(p, b, false);
  });
}

}  // namespace anvil::cpu
