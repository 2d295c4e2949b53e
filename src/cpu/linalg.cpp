// CPU linear algebra: LAPACK from OpenBLAS (getrf / getrs, potrf, geqrf / orgqr / ormqr, gesdd,
// the least-squares drivers; its Fortran entry points through LAPACK's own lapack.h), batches
// over the OpenMP team; unpivoted LU, determinants and the unpacking of P, L, U as loops. Matrices are column-major (core/kernels/linalg.h).
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
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

void trsm(bool left, bool upper, bool transpose, bool unit, int rows, int cols, const float* a, int lda, float* b,
          int ldb) {
  cblas_strsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower,
              transpose ? CblasTrans : CblasNoTrans, unit ? CblasUnit : CblasNonUnit, rows, cols, 1.f, a, lda, b, ldb);
}
void trsm(bool left, bool upper, bool transpose, bool unit, int rows, int cols, const double* a, int lda, double* b,
          int ldb) {
  cblas_dtrsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower,
              transpose ? CblasTrans : CblasNoTrans, unit ? CblasUnit : CblasNonUnit, rows, cols, 1.0, a, lda, b, ldb);
}
void trsm(bool left, bool upper, bool transpose, bool unit, int rows, int cols, const Complex64* a, int lda,
          Complex64* b, int ldb) {
  const std::complex<float> one(1.f, 0.f);
  cblas_ctrsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower,
              transpose ? CblasTrans : CblasNoTrans, unit ? CblasUnit : CblasNonUnit, rows, cols, &one, a, lda, b, ldb);
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

// ---- QR, SVD and least squares. Each overload set has one signature for the three types (the
// real ones ignore rwork); workspace sizes come from LAPACK's query (lwork = -1).
using Cf = std::complex<float>;
Cf* cx(Complex64* p) { return reinterpret_cast<Cf*>(p); }
const Cf* cx(const Complex64* p) { return reinterpret_cast<const Cf*>(p); }
double real_part(float v) { return v; }
double real_part(double v) { return v; }
double real_part(Complex64 v) { return v.re; }

// call(work, lwork) once to query the size, then with a workspace of that size.
template <typename T, typename Call>
void with_workspace(Call&& call) {
  T query{};
  call(&query, lapack_int{-1});
  const lapack_int size = std::max<lapack_int>(1, static_cast<lapack_int>(real_part(query)));
  std::vector<T> work(static_cast<size_t>(size) + 16);  // + 16: OpenBLAS kernels may read past the end
  call(work.data(), size);
}

// lda: the leading dimension (m, or the whole matrix's rows for a blocked form's panel).
void geqrf(lapack_int m, lapack_int n, float* a, lapack_int lda, float* tau, float* work, lapack_int lwork,
           lapack_int* info) {
  LAPACK_sgeqrf(&m, &n, a, &lda, tau, work, &lwork, info);
}
void geqrf(lapack_int m, lapack_int n, double* a, lapack_int lda, double* tau, double* work, lapack_int lwork,
           lapack_int* info) {
  LAPACK_dgeqrf(&m, &n, a, &lda, tau, work, &lwork, info);
}
void geqrf(lapack_int m, lapack_int n, Complex64* a, lapack_int lda, Complex64* tau, Complex64* work, lapack_int lwork,
           lapack_int* info) {
  LAPACK_cgeqrf(&m, &n, cx(a), &lda, cx(tau), cx(work), &lwork, info);
}
void orgqr(lapack_int m, lapack_int n, lapack_int k, float* a, lapack_int lda, const float* tau, float* work,
           lapack_int lwork, lapack_int* info) {
  LAPACK_sorgqr(&m, &n, &k, a, &lda, tau, work, &lwork, info);
}
void orgqr(lapack_int m, lapack_int n, lapack_int k, double* a, lapack_int lda, const double* tau, double* work,
           lapack_int lwork, lapack_int* info) {
  LAPACK_dorgqr(&m, &n, &k, a, &lda, tau, work, &lwork, info);
}
void orgqr(lapack_int m, lapack_int n, lapack_int k, Complex64* a, lapack_int lda, const Complex64* tau,
           Complex64* work, lapack_int lwork, lapack_int* info) {
  LAPACK_cungqr(&m, &n, &k, cx(a), &lda, cx(tau), cx(work), &lwork, info);
}
// T of k reflectors (forward, columnwise; n rows), and C = H C or H^H C for H = I - V T V^H.
void larft(lapack_int n, lapack_int k, const float* v, lapack_int ldv, const float* tau, float* t) {
  const char direct = 'F', storev = 'C';
  LAPACK_slarft(&direct, &storev, &n, &k, v, &ldv, tau, t, &k);
}
void larft(lapack_int n, lapack_int k, const double* v, lapack_int ldv, const double* tau, double* t) {
  const char direct = 'F', storev = 'C';
  LAPACK_dlarft(&direct, &storev, &n, &k, v, &ldv, tau, t, &k);
}
void larft(lapack_int n, lapack_int k, const Complex64* v, lapack_int ldv, const Complex64* tau, Complex64* t) {
  const char direct = 'F', storev = 'C';
  LAPACK_clarft(&direct, &storev, &n, &k, cx(v), &ldv, cx(tau), cx(t), &k);
}
template <typename T>
void larfb(bool adjoint, lapack_int m, lapack_int n, lapack_int k, const T* v, lapack_int ldv, const T* t, T* c,
           lapack_int ldc, T* work) {
  const char side = 'L', trans = adjoint ? (is_complex_v<T> ? 'C' : 'T') : 'N', direct = 'F', storev = 'C';
  if constexpr (std::is_same_v<T, float>)
    LAPACK_slarfb(&side, &trans, &direct, &storev, &m, &n, &k, v, &ldv, t, &k, c, &ldc, work, &n);
  else if constexpr (std::is_same_v<T, double>)
    LAPACK_dlarfb(&side, &trans, &direct, &storev, &m, &n, &k, v, &ldv, t, &k, c, &ldc, work, &n);
  else
    LAPACK_clarfb(&side, &trans, &direct, &storev, &m, &n, &k, cx(v), &ldv, cx(t), &k, cx(c), &ldc, cx(work), &n);
}
// C = op(Q) C, Q from k reflectors in a (lda m); adjoint: Q^H ('T' for the real types).
void ormqr(bool adjoint, lapack_int m, lapack_int nrhs, lapack_int k, const float* a, const float* tau, float* c,
           float* work, lapack_int lwork, lapack_int* info) {
  const char side = 'L', trans = adjoint ? 'T' : 'N';
  LAPACK_sormqr(&side, &trans, &m, &nrhs, &k, a, &m, tau, c, &m, work, &lwork, info);
}
void ormqr(bool adjoint, lapack_int m, lapack_int nrhs, lapack_int k, const double* a, const double* tau, double* c,
           double* work, lapack_int lwork, lapack_int* info) {
  const char side = 'L', trans = adjoint ? 'T' : 'N';
  LAPACK_dormqr(&side, &trans, &m, &nrhs, &k, a, &m, tau, c, &m, work, &lwork, info);
}
void ormqr(bool adjoint, lapack_int m, lapack_int nrhs, lapack_int k, const Complex64* a, const Complex64* tau,
           Complex64* c, Complex64* work, lapack_int lwork, lapack_int* info) {
  const char side = 'L', trans = adjoint ? 'C' : 'N';
  LAPACK_cunmqr(&side, &trans, &m, &nrhs, &k, cx(a), &m, cx(tau), cx(c), &m, cx(work), &lwork, info);
}

// The SVD by divide and conquer (PyTorch's CPU method). jobz 'N', 'S' or 'A'.
struct SvdCall {
  char jobz;
  lapack_int m, n, ldu, ldvt;
  lapack_int* iwork;
  lapack_int* info;
};
void gesdd(const SvdCall& c, float* a, float* s, float* u, float* vt, float* /*rwork*/, float* work, lapack_int lwork) {
  LAPACK_sgesdd(&c.jobz, &c.m, &c.n, a, &c.m, s, u, &c.ldu, vt, &c.ldvt, work, &lwork, c.iwork, c.info);
}
void gesdd(const SvdCall& c, double* a, double* s, double* u, double* vt, double* /*rwork*/, double* work,
           lapack_int lwork) {
  LAPACK_dgesdd(&c.jobz, &c.m, &c.n, a, &c.m, s, u, &c.ldu, vt, &c.ldvt, work, &lwork, c.iwork, c.info);
}
void gesdd(const SvdCall& c, Complex64* a, float* s, Complex64* u, Complex64* vt, float* rwork, Complex64* work,
           lapack_int lwork) {
  LAPACK_cgesdd(&c.jobz, &c.m, &c.n, cx(a), &c.m, s, cx(u), &c.ldu, cx(vt), &c.ldvt, cx(work), &lwork, rwork,
                c.iwork, c.info);
}

// The least-squares drivers: b (ldb rows) holds B and gets X. jpvt / iwork / rwork / s as each
// driver needs them.
struct LstsqCall {
  LstsqDriver driver;
  lapack_int m, n, nrhs, ldb;
  lapack_int* jpvt;
  lapack_int* iwork;
  lapack_int* rank;
  lapack_int* info;
};
template <typename T, typename R>
void gels_any(const LstsqCall& c, T* a, T* b, R* s, R rcond, R* rwork, T* work, lapack_int lwork) {
  const char trans = 'N';
  if constexpr (std::is_same_v<T, float>) {
    switch (c.driver) {
      case LstsqDriver::Gels: return LAPACK_sgels(&trans, &c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, work, &lwork, c.info);
      case LstsqDriver::Gelsy:
        return LAPACK_sgelsy(&c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, c.jpvt, &rcond, c.rank, work, &lwork, c.info);
      case LstsqDriver::Gelsd:
        return LAPACK_sgelsd(&c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, s, &rcond, c.rank, work, &lwork, c.iwork, c.info);
      case LstsqDriver::Gelss:
        return LAPACK_sgelss(&c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, s, &rcond, c.rank, work, &lwork, c.info);
    }
  } else if constexpr (std::is_same_v<T, double>) {
    switch (c.driver) {
      case LstsqDriver::Gels: return LAPACK_dgels(&trans, &c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, work, &lwork, c.info);
      case LstsqDriver::Gelsy:
        return LAPACK_dgelsy(&c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, c.jpvt, &rcond, c.rank, work, &lwork, c.info);
      case LstsqDriver::Gelsd:
        return LAPACK_dgelsd(&c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, s, &rcond, c.rank, work, &lwork, c.iwork, c.info);
      case LstsqDriver::Gelss:
        return LAPACK_dgelss(&c.m, &c.n, &c.nrhs, a, &c.m, b, &c.ldb, s, &rcond, c.rank, work, &lwork, c.info);
    }
  } else {
    switch (c.driver) {
      case LstsqDriver::Gels:
        return LAPACK_cgels(&trans, &c.m, &c.n, &c.nrhs, cx(a), &c.m, cx(b), &c.ldb, cx(work), &lwork, c.info);
      case LstsqDriver::Gelsy:
        return LAPACK_cgelsy(&c.m, &c.n, &c.nrhs, cx(a), &c.m, cx(b), &c.ldb, c.jpvt, &rcond, c.rank, cx(work), &lwork,
                             rwork, c.info);
      case LstsqDriver::Gelsd:
        return LAPACK_cgelsd(&c.m, &c.n, &c.nrhs, cx(a), &c.m, cx(b), &c.ldb, s, &rcond, c.rank, cx(work), &lwork,
                             rwork, c.iwork, c.info);
      case LstsqDriver::Gelss:
        return LAPACK_cgelss(&c.m, &c.n, &c.nrhs, cx(a), &c.m, cx(b), &c.ldb, s, &rcond, c.rank, cx(work), &lwork,
                             rwork, c.info);
    }
  }
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

// One matrix with at least this many reflectors is factored (and Q formed) by blocks.
constexpr int64_t kBlockedQrMin = 256;

// Blocked Householder QR in LAPACK geqrf's order: a panel of kPanel columns by geqrf on one
// thread, its block reflector's T by larft, then the trailing columns updated by larfb, whose
// trmm / gemm run on OpenBLAS's threads. OpenBLAS 0.3.21's threaded level-2 calls inside geqrf
// spin (1024^2 float32: 589 ms on 2 threads, 55 ms as one thread; Intel Xeon VM, 2 threads).
template <typename T>
void qr_blocked(T* a, int64_t m, int64_t n, T* tau) {
  const int64_t k = std::min(m, n);
  const lapack_int ld = static_cast<lapack_int>(m);
  std::vector<T> t(static_cast<size_t>(kPanel * kPanel)), work(static_cast<size_t>(n * kPanel));
  for (int64_t j0 = 0; j0 < k; j0 += kPanel) {
    const int64_t w = std::min(kPanel, k - j0), right = n - j0 - w;
    T* panel = a + j0 + j0 * m;
    {
      OneBlasThread one;
      lapack_int info = 0;
      with_workspace<T>([&](T* wk, lapack_int lwork) {
        geqrf(static_cast<lapack_int>(m - j0), static_cast<lapack_int>(w), panel, ld, tau + j0, wk, lwork, &info);
      });
      if (right > 0) larft(static_cast<lapack_int>(m - j0), static_cast<lapack_int>(w), panel, ld, tau + j0, t.data());
    }
    if (right > 0)
      larfb(true, static_cast<lapack_int>(m - j0), static_cast<lapack_int>(right), static_cast<lapack_int>(w), panel, ld,
            t.data(), a + j0 + (j0 + w) * m, ld, work.data());
  }
}

// Q's first n columns from k reflectors by blocks, in LAPACK orgqr's order: the last block (and
// the columns past k) on one thread, then each earlier block applied to the columns on its
// right by larfb (threaded) and to its own columns on one thread.
template <typename T>
void orgqr_blocked(T* a, int64_t m, int64_t n, int64_t k, const T* tau) {
  const lapack_int ld = static_cast<lapack_int>(m);
  const int64_t last = (k - 1) / kPanel * kPanel;  // the first column of the last block
  std::vector<T> t(static_cast<size_t>(kPanel * kPanel)), work(static_cast<size_t>(n * kPanel));
  auto org2r = [&](int64_t i, int64_t cols, int64_t count) {
    OneBlasThread one;
    lapack_int info = 0;
    with_workspace<T>([&](T* wk, lapack_int lwork) {
      orgqr(static_cast<lapack_int>(m - i), static_cast<lapack_int>(cols), static_cast<lapack_int>(count), a + i + i * m,
            ld, tau + i, wk, lwork, &info);
    });
    for (int64_t c = i; c < i + cols; ++c) std::fill(a + c * m, a + c * m + i, T(0));  // rows above the block
  };
  org2r(last, n - last, k - last);
  for (int64_t i = last - kPanel; i >= 0; i -= kPanel) {
    T* panel = a + i + i * m;
    {
      OneBlasThread one;
      larft(static_cast<lapack_int>(m - i), static_cast<lapack_int>(kPanel), panel, ld, tau + i, t.data());
    }
    larfb(false, static_cast<lapack_int>(m - i), static_cast<lapack_int>(n - i - kPanel),
          static_cast<lapack_int>(kPanel), panel, ld, t.data(), a + i + (i + kPanel) * m, ld, work.data());
    org2r(i, kPanel, kPanel);
  }
}

}  // namespace

void lu_factor(const LuFactorParams& p) {
  dispatch_linalg_types(p.dtype, "[lu_factor]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* a = static_cast<T*>(p.a);
    const int64_t k = std::min(p.m, p.n), mat = p.m * p.n;
    if (p.pivot && p.batch == 1 && k >= kBlockedLuMin) return lu_blocked(a, p.m, p.n, p.pivots, p.info);
    // Batches of small matrices stay on LAPACK's getrf: getf2 by columns (core/small_lu.h, the
    // compiler's SSE2 loops) measured slower (256 64^2 float32: 2.30 vs 2.01 ms on 2 threads).
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.pivot) {
        lapack_int info = 0;
        getrf(static_cast<lapack_int>(p.m), static_cast<lapack_int>(p.n), a + b * mat, static_cast<lapack_int>(p.m),
              p.pivots + b * k, &info);
        p.info[b] = info;
      } else {  // LAPACK has no LU without row exchanges
        p.info[b] = small_lu::getf2(a + b * mat, p.m, p.n, p.pivots + b * k, false);
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
    const int n = static_cast<int>(p.n), rows = static_cast<int>(p.rows), cols = static_cast<int>(p.cols);
    // The right-hand-side vectors (left: X's columns, right: its rows) are independent.
    const int64_t vectors = p.left ? p.cols : p.rows;
    if (p.batch == 1 && omp_get_max_threads() > 1 && vectors >= 32 && p.n * p.n * vectors >= (int64_t{1} << 22)) {
      // One large system: the vectors split over our threads, a one-thread trsm each (OpenBLAS's
      // threaded trsm spins in libgomp beside our team: 1024^2 x 1024 float32 7.9 ms, 4.9 ms with
      // passive waiting, 4096^2 x 64 6.2 ms).
#pragma omp parallel
      {
        const int64_t teams = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t v0 = vectors * t / teams, v1 = vectors * (t + 1) / teams;
        const int count = static_cast<int>(v1 - v0);
        if (count > 0) {
          if (p.left) trsm(true, p.upper, p.transpose, p.unit, rows, count, a, n, x + v0 * p.rows, rows);
          else trsm(false, p.upper, p.transpose, p.unit, count, cols, a, n, x + v0, rows);
        }
      }
      return;
    }
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b)
      trsm(p.left, p.upper, p.transpose, p.unit, rows, cols, a + b * p.n * p.n, n, x + b * p.rows * p.cols, rows);
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
    using Real = linalg_real_t<T>;
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

void geqrf(const GeqrfParams& p) {
  dispatch_linalg_types(p.dtype, "[geqrf]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t k = std::min(p.m, p.n);
    if (p.batch == 1 && k >= kBlockedQrMin) return qr_blocked(static_cast<T*>(p.a), p.m, p.n, static_cast<T*>(p.tau));
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      T* a = static_cast<T*>(p.a) + b * p.m * p.n;
      lapack_int info = 0;  // < 0 only for an argument the op layer never passes
      with_workspace<T>([&](T* work, lapack_int lwork) {
        geqrf(static_cast<lapack_int>(p.m), static_cast<lapack_int>(p.n), a, static_cast<lapack_int>(p.m),
              static_cast<T*>(p.tau) + b * k, work, lwork, &info);
      });
    }
  });
}

void orgqr(const OrgqrParams& p) {
  dispatch_linalg_types(p.dtype, "[orgqr]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.batch == 1 && p.k >= kBlockedQrMin)
      return orgqr_blocked(static_cast<T*>(p.a), p.m, p.n, p.k, static_cast<const T*>(p.tau));
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      T* a = static_cast<T*>(p.a) + b * p.m * p.n;
      lapack_int info = 0;
      with_workspace<T>([&](T* work, lapack_int lwork) {
        orgqr(static_cast<lapack_int>(p.m), static_cast<lapack_int>(p.n), static_cast<lapack_int>(p.k), a,
              static_cast<lapack_int>(p.m), static_cast<const T*>(p.tau) + b * p.k, work, lwork, &info);
      });
    }
  });
}

void ormqr(const OrmqrParams& p) {
  dispatch_linalg_types(p.dtype, "[ormqr]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::optional<OneBlasThread> one;  // one matrix: on one thread (as svd)
    if (p.batch == 1) one.emplace();
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      const T* a = static_cast<const T*>(p.a) + b * p.m * p.a_cols;
      const T* tau = static_cast<const T*>(p.tau) + b * p.k;
      T* c = static_cast<T*>(p.c) + b * p.m * p.nrhs;
      lapack_int info = 0;
      with_workspace<T>([&](T* work, lapack_int lwork) {
        ormqr(p.op == LinalgOp::Adjoint, static_cast<lapack_int>(p.m), static_cast<lapack_int>(p.nrhs),
              static_cast<lapack_int>(p.k), a, tau, c, work, lwork, &info);
      });
    }
  });
}

void svd(const SvdParams& p) {
  dispatch_linalg_types(p.dtype, "[svd]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = linalg_real_t<T>;
    const int64_t m = p.m, n = p.n, k = std::min(m, n), mx = std::max(m, n);
    const int64_t u_cols = p.full_matrices ? m : k, vh_rows = p.full_matrices ? n : k;
    const char jobz = !p.compute_uv ? 'N' : p.full_matrices ? 'A' : 'S';
    // One matrix: on one thread (OpenBLAS 0.3.21's threaded level-2 calls inside LAPACK spin:
    // gesdd of 1024^2 float32 1394 ms on 2 threads, 302 ms on 1; Intel Xeon VM).
    std::optional<OneBlasThread> one;
    if (p.batch == 1) one.emplace();
    // cgesdd's real workspace (LAPACK 3.12's bounds).
    const int64_t rwork_size = !is_complex_v<T> ? 1 : jobz == 'N' ? 7 * k : k * std::max(5 * k + 7, 2 * mx + 2 * k + 1);
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      std::vector<lapack_int> iwork(static_cast<size_t>(std::max<int64_t>(8 * k, 1)));
      std::vector<R> rwork(static_cast<size_t>(std::max<int64_t>(rwork_size, 1)));
      lapack_int info = 0;
      T dummy{};
      T* u = p.compute_uv ? static_cast<T*>(p.u) + b * m * u_cols : &dummy;
      T* vt = p.compute_uv ? static_cast<T*>(p.vh) + b * vh_rows * n : &dummy;
      const SvdCall call{jobz,
                         static_cast<lapack_int>(m),
                         static_cast<lapack_int>(n),
                         static_cast<lapack_int>(std::max<int64_t>(m, 1)),
                         static_cast<lapack_int>(p.compute_uv ? std::max<int64_t>(vh_rows, 1) : 1),
                         iwork.data(),
                         &info};
      with_workspace<T>([&](T* work, lapack_int lwork) {
        gesdd(call, static_cast<T*>(p.a) + b * m * n, static_cast<R*>(p.s) + b * k, u, vt, rwork.data(), work, lwork);
      });
      p.info[b] = info;
    }
  });
}

void lstsq(const LstsqParams& p) {
  dispatch_linalg_types(p.dtype, "[lstsq]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = linalg_real_t<T>;
    const int64_t m = p.m, n = p.n, k = std::min(m, n), ldb = std::max<int64_t>({m, n, 1});
    // The drivers' integer and real workspaces (LAPACK 3.12's bounds; gelsd's from its nlvl).
    const int64_t nlvl = std::max<int64_t>(0, static_cast<int64_t>(std::log2(std::max<double>(k, 1) / 26.0)) + 1);
    const int64_t iwork_size = std::max<int64_t>(1, 3 * k * nlvl + 11 * k);
    const int64_t rwork_size =
        !is_complex_v<T> ? 1
        : p.driver == LstsqDriver::Gelsd
            ? std::max<int64_t>(1, 10 * k + 2 * k * 25 + 8 * k * nlvl + 3 * 25 * p.nrhs + std::max<int64_t>(26 * 26, k * (1 + p.nrhs) + 2 * p.nrhs))
            : std::max<int64_t>(1, 5 * k + 2 * n);
    std::optional<OneBlasThread> one;  // one matrix: on one thread (as svd)
    if (p.batch == 1) one.emplace();
#pragma omp parallel for schedule(dynamic, 1) if (over_batch(p.batch))
    for (int64_t b = 0; b < p.batch; ++b) {
      std::vector<lapack_int> jpvt(static_cast<size_t>(std::max<int64_t>(n, 1)), 0);
      std::vector<lapack_int> iwork(static_cast<size_t>(iwork_size));
      std::vector<R> rwork(static_cast<size_t>(rwork_size));
      R s_unused = 0;
      lapack_int rank = 0, info = 0;
      const LstsqCall call{p.driver,
                           static_cast<lapack_int>(m),
                           static_cast<lapack_int>(n),
                           static_cast<lapack_int>(p.nrhs),
                           static_cast<lapack_int>(ldb),
                           jpvt.data(),
                           iwork.data(),
                           &rank,
                           &info};
      R* s = p.s ? static_cast<R*>(p.s) + b * k : &s_unused;
      with_workspace<T>([&](T* work, lapack_int lwork) {
        gels_any(call, static_cast<T*>(p.a) + b * m * n, static_cast<T*>(p.b) + b * ldb * p.nrhs, s,
                 static_cast<R>(p.rcond), rwork.data(), work, lwork);
      });
      if (p.rank) p.rank[b] = rank;
      p.info[b] = info;
    }
  });
}

void triangle(const TriangleParams& p) {
  dispatch_all_types(p.dtype, "[triangle]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(p.x);
    T* out = static_cast<T*>(p.out);
    const int64_t rows = p.batch * p.rows;
#pragma omp parallel for schedule(static) if (rows * p.cols >= 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % p.rows;
      for (int64_t j = 0; j < p.cols; ++j) {
        const bool keep = p.upper ? j - i >= p.diagonal : j - i <= p.diagonal;
        out[r * p.cols + j] = keep ? x[r * p.cols + j] : T{};
      }
    }
  });
}

// trsm per matrix costs ~1 us of call overhead at these sizes.
FusedPlan small_triangular_plan(const SmallTriangularParams& p) { return small_triangular_rule(p); }

// x -= f y over k elements (distinct rows of X: restrict lets the loop vectorize).
void row_minus(float* __restrict x, const float* __restrict y, float f, int64_t k) {
#pragma omp simd
  for (int64_t v = 0; v < k; ++v) x[v] -= f * y[v];
}

// Substitution by rows of X: row i (element i of every right-hand-side vector, contiguous) read
// from B, less T[i][j] times row j, then divided by T[i][i]; the loops over vectors vectorize.
void small_triangular(const SmallTriangularParams& p) {
  ANVIL_CHECK(small_triangular_plan(p) == FusedPlan::Fused, ShapeError,
              "[small_triangular] float32 systems of order 16, 32 or 64 with >= 8 right-hand sides only, got ",
              dtype_name(p.dtype), " order ", p.n, " with ", p.nrhs);
  const int64_t n = p.n, k = p.nrhs;
  const bool lower = p.left ? !p.upper : p.upper;  // T = A (left) or A^T (right)
  const float* a = static_cast<const float*>(p.a);
#pragma omp parallel for schedule(static) if (p.batch * n * n * k >= 65536)
  for (int64_t m = 0; m < p.batch; ++m) {
    const float* am = a + m * p.stride_a_batch;
    auto t = [&](int64_t i, int64_t j) {
      return p.left ? am[i * p.stride_a_row + j * p.stride_a_col] : am[j * p.stride_a_row + i * p.stride_a_col];
    };
    const float* bm = static_cast<const float*>(p.b) + m * p.stride_b_batch;
    float* x = static_cast<float*>(p.x) + m * n * k;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t i = lower ? step : n - 1 - step;
      float* xi = x + i * k;
      const float* bi = bm + i * p.stride_b_elem;
      if (p.stride_b_vec == 1) std::memcpy(xi, bi, static_cast<size_t>(k) * sizeof(float));
      else for (int64_t v = 0; v < k; ++v) xi[v] = bi[v * p.stride_b_vec];
      const int64_t j0 = lower ? 0 : i + 1, j1 = lower ? i : n;
      for (int64_t j = j0; j < j1; ++j) row_minus(xi, x + j * k, t(i, j), k);
      if (!p.unit) {
        const float d = t(i, i);
        for (int64_t v = 0; v < k; ++v) xi[v] /= d;
      }
    }
  }
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
