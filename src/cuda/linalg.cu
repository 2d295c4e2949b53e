// CUDA linear algebra: LU through cuSOLVER (one matrix per call) or cuBLAS's batched getrf /
// getrs (many small square matrices, PyTorch's split: batched below 512 rows), QR (geqrf /
// orgqr / ormqr) and the SVD (gesvdj, gesvdjBatched, gesvd) through cuSOLVER, determinants and
// the unpacking of P, L, U as our own kernels. Matrices are column-major (core/kernels/linalg.h);
// workspaces come from anvil's allocator on the current stream, so every call is stream-ordered
// and nothing here waits for the device.
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cusolverDn.h>

#include <algorithm>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/linalg.h"
#include "core/small_lu.h"
#include "cuda/device/map.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::kThreads;

// ---- handles: one cuSOLVER and one cuBLAS handle per (device, stream), used under a lock. A
// handle's internal workspace is not safe to share between streams that run at once, so each
// stream gets its own pair (made on its first linear-algebra call); the lock orders the host-side
// enqueues.
struct Handles {
  cusolverDnHandle_t solver = nullptr;
  cublasHandle_t blas = nullptr;
  gesvdjInfo_t jacobi = nullptr;  // gesvdj's settings (cuSOLVER's defaults)
};
std::mutex& handles_mutex() {
  static std::mutex m;
  return m;
}
struct HandleKey {
  int device;
  cudaStream_t stream;
  bool operator==(const HandleKey& o) const { return device == o.device && stream == o.stream; }
};
struct HandleKeyHash {
  size_t operator()(const HandleKey& k) const {
    return std::hash<const void*>()(k.stream) ^ (static_cast<size_t>(k.device) << 1);
  }
};
Handles& handles_locked(const KernelLaunch& launch) {
  static std::unordered_map<HandleKey, Handles, HandleKeyHash> all;
  const HandleKey key{launch.device(), launch.stream()};
  auto it = all.find(key);
  if (it != all.end()) return it->second;
  // Made once per stream, possibly inside a capture: creation allocates, which the capture's
  // mode would refuse (the handles outlive the graph).
  RelaxedCaptureMode relaxed;
  Handles h;
  if (cusolverDnCreate(&h.solver) != CUSOLVER_STATUS_SUCCESS)
    throw DeviceError("[linalg] cusolverDnCreate failed (is libcusolver installed?)");
  if (cublasCreate(&h.blas) != CUBLAS_STATUS_SUCCESS) {
    cusolverDnDestroy(h.solver);
    throw DeviceError("[linalg] cublasCreate failed");
  }
  return all.emplace(key, h).first->second;
}

void check(cusolverStatus_t s, const char* op) {
  if (s != CUSOLVER_STATUS_SUCCESS) throw DeviceError(detail::cat_message(op, " cuSOLVER error ", static_cast<int>(s)));
}
void check(cublasStatus_t s, const char* op) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(detail::cat_message(op, " cuBLAS error: ", cublasGetStatusName(s), ": ", cublasGetStatusString(s)));
}

// ---- cuSOLVER / cuBLAS entry points per element type.
template <typename T> struct Native;
template <> struct Native<float> { using type = float; };
template <> struct Native<double> { using type = double; };
template <> struct Native<Complex64> { using type = cuComplex; };
template <typename T> auto* native(T* p) { return reinterpret_cast<typename Native<std::remove_const_t<T>>::type*>(p); }
template <typename T> auto* native(const T* p) {
  return reinterpret_cast<const typename Native<std::remove_const_t<T>>::type*>(p);
}

cusolverStatus_t getrf_buffer(cusolverDnHandle_t h, int m, int n, float* a, int* lwork) {
  return cusolverDnSgetrf_bufferSize(h, m, n, a, m, lwork);
}
cusolverStatus_t getrf_buffer(cusolverDnHandle_t h, int m, int n, double* a, int* lwork) {
  return cusolverDnDgetrf_bufferSize(h, m, n, a, m, lwork);
}
cusolverStatus_t getrf_buffer(cusolverDnHandle_t h, int m, int n, Complex64* a, int* lwork) {
  return cusolverDnCgetrf_bufferSize(h, m, n, native(a), m, lwork);
}
cusolverStatus_t getrf(cusolverDnHandle_t h, int m, int n, float* a, float* work, int* ipiv, int* info) {
  return cusolverDnSgetrf(h, m, n, a, m, work, ipiv, info);
}
cusolverStatus_t getrf(cusolverDnHandle_t h, int m, int n, double* a, double* work, int* ipiv, int* info) {
  return cusolverDnDgetrf(h, m, n, a, m, work, ipiv, info);
}
cusolverStatus_t getrf(cusolverDnHandle_t h, int m, int n, Complex64* a, Complex64* work, int* ipiv, int* info) {
  return cusolverDnCgetrf(h, m, n, native(a), m, native(work), ipiv, info);
}
cusolverStatus_t getrs(cusolverDnHandle_t h, cublasOperation_t op, int n, int nrhs, const float* a, const int* ipiv,
                       float* b, int* info) {
  return cusolverDnSgetrs(h, op, n, nrhs, a, n, ipiv, b, n, info);
}
cusolverStatus_t getrs(cusolverDnHandle_t h, cublasOperation_t op, int n, int nrhs, const double* a, const int* ipiv,
                       double* b, int* info) {
  return cusolverDnDgetrs(h, op, n, nrhs, a, n, ipiv, b, n, info);
}
cusolverStatus_t getrs(cusolverDnHandle_t h, cublasOperation_t op, int n, int nrhs, const Complex64* a,
                       const int* ipiv, Complex64* b, int* info) {
  return cusolverDnCgetrs(h, op, n, nrhs, native(a), n, ipiv, native(b), n, info);
}
cublasStatus_t getrf_batched(cublasHandle_t h, int n, float* const* a, int* ipiv, int* info, int batch) {
  return cublasSgetrfBatched(h, n, a, n, ipiv, info, batch);
}
cublasStatus_t getrf_batched(cublasHandle_t h, int n, double* const* a, int* ipiv, int* info, int batch) {
  return cublasDgetrfBatched(h, n, a, n, ipiv, info, batch);
}
cublasStatus_t getrf_batched(cublasHandle_t h, int n, Complex64* const* a, int* ipiv, int* info, int batch) {
  return cublasCgetrfBatched(h, n, reinterpret_cast<cuComplex* const*>(a), n, ipiv, info, batch);
}
cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t op, int n, int nrhs, const float* const* a,
                             const int* ipiv, float* const* b, int* info, int batch) {
  return cublasSgetrsBatched(h, op, n, nrhs, a, n, ipiv, b, n, info, batch);
}
cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t op, int n, int nrhs, const double* const* a,
                             const int* ipiv, double* const* b, int* info, int batch) {
  return cublasDgetrsBatched(h, op, n, nrhs, a, n, ipiv, b, n, info, batch);
}
cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t op, int n, int nrhs, const Complex64* const* a,
                             const int* ipiv, Complex64* const* b, int* info, int batch) {
  return cublasCgetrsBatched(h, op, n, nrhs, reinterpret_cast<const cuComplex* const*>(a), n, ipiv,
                             reinterpret_cast<cuComplex* const*>(b), n, info, batch);
}

cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,
                    cublasDiagType_t diag, int rows, int cols, const float* a, int lda, float* b, int ldb) {
  const float one = 1.f;
  return cublasStrsm(h, side, uplo, op, diag, rows, cols, &one, a, lda, b, ldb);
}
cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,
                    cublasDiagType_t diag, int rows, int cols, const double* a, int lda, double* b, int ldb) {
  const double one = 1.0;
  return cublasDtrsm(h, side, uplo, op, diag, rows, cols, &one, a, lda, b, ldb);
}
cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,
                    cublasDiagType_t diag, int rows, int cols, const Complex64* a, int lda, Complex64* b, int ldb) {
  const cuComplex one = make_cuComplex(1.f, 0.f);
  return cublasCtrsm(h, side, uplo, op, diag, rows, cols, &one, native(a), lda, native(b), ldb);
}
// c (m x n) -= op_a(a) (m x k) op_b(b) (k x n), column-major; full float32 / float64 arithmetic
// (the handles keep cuBLAS's default math mode: no TF32).
cublasStatus_t gemm_subtract(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                             const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  const float one = 1.f, minus_one = -1.f;
  return cublasSgemm(h, op_a, op_b, m, n, k, &minus_one, a, lda, b, ldb, &one, c, ldc);
}
cublasStatus_t gemm_subtract(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                             const double* a, int lda, const double* b, int ldb, double* c, int ldc) {
  const double one = 1.0, minus_one = -1.0;
  return cublasDgemm(h, op_a, op_b, m, n, k, &minus_one, a, lda, b, ldb, &one, c, ldc);
}
cublasStatus_t gemm_subtract(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                             const Complex64* a, int lda, const Complex64* b, int ldb, Complex64* c, int ldc) {
  const cuComplex one = make_cuComplex(1.f, 0.f), minus_one = make_cuComplex(-1.f, 0.f);
  return cublasCgemm(h, op_a, op_b, m, n, k, &minus_one, native(a), lda, native(b), ldb, &one, native(c),
                     ldc);
}
cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,
                            cublasDiagType_t diag, int rows, int cols, const float* const* a, int lda, float* const* b,
                            int batch) {
  const float one = 1.f;
  return cublasStrsmBatched(h, side, uplo, op, diag, rows, cols, &one, a, lda, b, rows, batch);
}
cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,
                            cublasDiagType_t diag, int rows, int cols, const double* const* a, int lda,
                            double* const* b, int batch) {
  const double one = 1.0;
  return cublasDtrsmBatched(h, side, uplo, op, diag, rows, cols, &one, a, lda, b, rows, batch);
}
cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op,
                            cublasDiagType_t diag, int rows, int cols, const Complex64* const* a, int lda,
                            Complex64* const* b, int batch) {
  const cuComplex one = make_cuComplex(1.f, 0.f);
  return cublasCtrsmBatched(h, side, uplo, op, diag, rows, cols, &one,
                            reinterpret_cast<const cuComplex* const*>(a), lda, reinterpret_cast<cuComplex* const*>(b),
                            rows, batch);
}
cusolverStatus_t potrf_buffer(cusolverDnHandle_t h, int n, float* a, int* lwork) {
  return cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, a, n, lwork);
}
cusolverStatus_t potrf_buffer(cusolverDnHandle_t h, int n, double* a, int* lwork) {
  return cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, a, n, lwork);
}
cusolverStatus_t potrf_buffer(cusolverDnHandle_t h, int n, Complex64* a, int* lwork) {
  return cusolverDnCpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, native(a), n, lwork);
}
cusolverStatus_t potrf(cusolverDnHandle_t h, int n, float* a, float* work, int lwork, int* info) {
  return cusolverDnSpotrf(h, CUBLAS_FILL_MODE_LOWER, n, a, n, work, lwork, info);
}
cusolverStatus_t potrf(cusolverDnHandle_t h, int n, double* a, double* work, int lwork, int* info) {
  return cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, a, n, work, lwork, info);
}
cusolverStatus_t potrf(cusolverDnHandle_t h, int n, Complex64* a, Complex64* work, int lwork, int* info) {
  return cusolverDnCpotrf(h, CUBLAS_FILL_MODE_LOWER, n, native(a), n, native(work), lwork, info);
}
cusolverStatus_t potrf_batched(cusolverDnHandle_t h, int n, float** a, int* info, int batch) {
  return cusolverDnSpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, n, a, n, info, batch);
}
cusolverStatus_t potrf_batched(cusolverDnHandle_t h, int n, double** a, int* info, int batch) {
  return cusolverDnDpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, n, a, n, info, batch);
}
cusolverStatus_t potrf_batched(cusolverDnHandle_t h, int n, Complex64** a, int* info, int batch) {
  return cusolverDnCpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, n, reinterpret_cast<cuComplex**>(a), n, info, batch);
}

// ---- QR and the SVD.
cusolverStatus_t geqrf_buffer(cusolverDnHandle_t h, int m, int n, float* a, int* lwork) {
  return cusolverDnSgeqrf_bufferSize(h, m, n, a, m, lwork);
}
cusolverStatus_t geqrf_buffer(cusolverDnHandle_t h, int m, int n, double* a, int* lwork) {
  return cusolverDnDgeqrf_bufferSize(h, m, n, a, m, lwork);
}
cusolverStatus_t geqrf_buffer(cusolverDnHandle_t h, int m, int n, Complex64* a, int* lwork) {
  return cusolverDnCgeqrf_bufferSize(h, m, n, native(a), m, lwork);
}
cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, float* a, float* tau, float* work, int lwork, int* info) {
  return cusolverDnSgeqrf(h, m, n, a, m, tau, work, lwork, info);
}
cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, double* a, double* tau, double* work, int lwork, int* info) {
  return cusolverDnDgeqrf(h, m, n, a, m, tau, work, lwork, info);
}
cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, Complex64* a, Complex64* tau, Complex64* work, int lwork,
                       int* info) {
  return cusolverDnCgeqrf(h, m, n, native(a), m, native(tau), native(work), lwork, info);
}
cublasStatus_t geqrf_batched(cublasHandle_t h, int m, int n, float* const* a, float* const* tau, int* info, int batch) {
  return cublasSgeqrfBatched(h, m, n, a, m, tau, info, batch);
}
cublasStatus_t geqrf_batched(cublasHandle_t h, int m, int n, double* const* a, double* const* tau, int* info,
                             int batch) {
  return cublasDgeqrfBatched(h, m, n, a, m, tau, info, batch);
}
cublasStatus_t geqrf_batched(cublasHandle_t h, int m, int n, Complex64* const* a, Complex64* const* tau, int* info,
                             int batch) {
  return cublasCgeqrfBatched(h, m, n, reinterpret_cast<cuComplex* const*>(a), m,
                             reinterpret_cast<cuComplex* const*>(tau), info, batch);
}
cusolverStatus_t orgqr_buffer(cusolverDnHandle_t h, int m, int n, int k, const float* a, const float* tau, int* lwork) {
  return cusolverDnSorgqr_bufferSize(h, m, n, k, a, m, tau, lwork);
}
cusolverStatus_t orgqr_buffer(cusolverDnHandle_t h, int m, int n, int k, const double* a, const double* tau,
                              int* lwork) {
  return cusolverDnDorgqr_bufferSize(h, m, n, k, a, m, tau, lwork);
}
cusolverStatus_t orgqr_buffer(cusolverDnHandle_t h, int m, int n, int k, const Complex64* a, const Complex64* tau,
                              int* lwork) {
  return cusolverDnCungqr_bufferSize(h, m, n, k, native(a), m, native(tau), lwork);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, float* a, const float* tau, float* work, int lwork,
                       int* info) {
  return cusolverDnSorgqr(h, m, n, k, a, m, tau, work, lwork, info);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, double* a, const double* tau, double* work,
                       int lwork, int* info) {
  return cusolverDnDorgqr(h, m, n, k, a, m, tau, work, lwork, info);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, Complex64* a, const Complex64* tau, Complex64* work,
                       int lwork, int* info) {
  return cusolverDnCungqr(h, m, n, k, native(a), m, native(tau), native(work), lwork, info);
}
// C = op(Q) C from k reflectors (lda m); adjoint: Q^T for the real types, Q^H for complex.
cusolverStatus_t ormqr_buffer(cusolverDnHandle_t h, bool adjoint, int m, int nrhs, int k, const float* a,
                              const float* tau, const float* c, int* lwork) {
  return cusolverDnSormqr_bufferSize(h, CUBLAS_SIDE_LEFT, adjoint ? CUBLAS_OP_T : CUBLAS_OP_N, m, nrhs, k, a, m, tau, c,
                                     m, lwork);
}
cusolverStatus_t ormqr_buffer(cusolverDnHandle_t h, bool adjoint, int m, int nrhs, int k, const double* a,
                              const double* tau, const double* c, int* lwork) {
  return cusolverDnDormqr_bufferSize(h, CUBLAS_SIDE_LEFT, adjoint ? CUBLAS_OP_T : CUBLAS_OP_N, m, nrhs, k, a, m, tau, c,
                                     m, lwork);
}
cusolverStatus_t ormqr_buffer(cusolverDnHandle_t h, bool adjoint, int m, int nrhs, int k, const Complex64* a,
                              const Complex64* tau, const Complex64* c, int* lwork) {
  return cusolverDnCunmqr_bufferSize(h, CUBLAS_SIDE_LEFT, adjoint ? CUBLAS_OP_C : CUBLAS_OP_N, m, nrhs, k, native(a), m,
                                     native(tau), native(c), m, lwork);
}
cusolverStatus_t ormqr(cusolverDnHandle_t h, bool adjoint, int m, int nrhs, int k, const float* a, const float* tau,
                       float* c, float* work, int lwork, int* info) {
  return cusolverDnSormqr(h, CUBLAS_SIDE_LEFT, adjoint ? CUBLAS_OP_T : CUBLAS_OP_N, m, nrhs, k, a, m, tau, c, m, work,
                          lwork, info);
}
cusolverStatus_t ormqr(cusolverDnHandle_t h, bool adjoint, int m, int nrhs, int k, const double* a, const double* tau,
                       double* c, double* work, int lwork, int* info) {
  return cusolverDnDormqr(h, CUBLAS_SIDE_LEFT, adjoint ? CUBLAS_OP_T : CUBLAS_OP_N, m, nrhs, k, a, m, tau, c, m, work,
                          lwork, info);
}
cusolverStatus_t ormqr(cusolverDnHandle_t h, bool adjoint, int m, int nrhs, int k, const Complex64* a,
                       const Complex64* tau, Complex64* c, Complex64* work, int lwork, int* info) {
  return cusolverDnCunmqr(h, CUBLAS_SIDE_LEFT, adjoint ? CUBLAS_OP_C : CUBLAS_OP_N, m, nrhs, k, native(a), m,
                          native(tau), native(c), m, native(work), lwork, info);
}

// The SVD's methods (S of linalg_real_t<T>). V (not V^H) comes out of the Jacobi ones.
struct JacobiCall {
  cusolverEigMode_t jobz;
  int econ, m, n, ldu, ldv;
  gesvdjInfo_t params;
};
cusolverStatus_t gesvdj_buffer(cusolverDnHandle_t h, const JacobiCall& c, const float* a, const float* s,
                               const float* u, const float* v, int* lwork) {
  return cusolverDnSgesvdj_bufferSize(h, c.jobz, c.econ, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, lwork, c.params);
}
cusolverStatus_t gesvdj_buffer(cusolverDnHandle_t h, const JacobiCall& c, const double* a, const double* s,
                               const double* u, const double* v, int* lwork) {
  return cusolverDnDgesvdj_bufferSize(h, c.jobz, c.econ, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, lwork, c.params);
}
cusolverStatus_t gesvdj_buffer(cusolverDnHandle_t h, const JacobiCall& c, const Complex64* a, const float* s,
                               const Complex64* u, const Complex64* v, int* lwork) {
  return cusolverDnCgesvdj_bufferSize(h, c.jobz, c.econ, c.m, c.n, native(a), c.m, s, native(u), c.ldu, native(v),
                                      c.ldv, lwork, c.params);
}
cusolverStatus_t gesvdj(cusolverDnHandle_t h, const JacobiCall& c, float* a, float* s, float* u, float* v, float* work,
                        int lwork, int* info) {
  return cusolverDnSgesvdj(h, c.jobz, c.econ, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, work, lwork, info, c.params);
}
cusolverStatus_t gesvdj(cusolverDnHandle_t h, const JacobiCall& c, double* a, double* s, double* u, double* v,
                        double* work, int lwork, int* info) {
  return cusolverDnDgesvdj(h, c.jobz, c.econ, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, work, lwork, info, c.params);
}
cusolverStatus_t gesvdj(cusolverDnHandle_t h, const JacobiCall& c, Complex64* a, float* s, Complex64* u, Complex64* v,
                        Complex64* work, int lwork, int* info) {
  return cusolverDnCgesvdj(h, c.jobz, c.econ, c.m, c.n, native(a), c.m, s, native(u), c.ldu, native(v), c.ldv,
                           native(work), lwork, info, c.params);
}
cusolverStatus_t gesvdj_batched_buffer(cusolverDnHandle_t h, const JacobiCall& c, const float* a, const float* s,
                                       const float* u, const float* v, int* lwork, int batch) {
  return cusolverDnSgesvdjBatched_bufferSize(h, c.jobz, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, lwork, c.params,
                                             batch);
}
cusolverStatus_t gesvdj_batched_buffer(cusolverDnHandle_t h, const JacobiCall& c, const double* a, const double* s,
                                       const double* u, const double* v, int* lwork, int batch) {
  return cusolverDnDgesvdjBatched_bufferSize(h, c.jobz, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, lwork, c.params,
                                             batch);
}
cusolverStatus_t gesvdj_batched_buffer(cusolverDnHandle_t h, const JacobiCall& c, const Complex64* a, const float* s,
                                       const Complex64* u, const Complex64* v, int* lwork, int batch) {
  return cusolverDnCgesvdjBatched_bufferSize(h, c.jobz, c.m, c.n, native(a), c.m, s, native(u), c.ldu, native(v),
                                             c.ldv, lwork, c.params, batch);
}
cusolverStatus_t gesvdj_batched(cusolverDnHandle_t h, const JacobiCall& c, float* a, float* s, float* u, float* v,
                                float* work, int lwork, int* info, int batch) {
  return cusolverDnSgesvdjBatched(h, c.jobz, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, work, lwork, info, c.params,
                                  batch);
}
cusolverStatus_t gesvdj_batched(cusolverDnHandle_t h, const JacobiCall& c, double* a, double* s, double* u, double* v,
                                double* work, int lwork, int* info, int batch) {
  return cusolverDnDgesvdjBatched(h, c.jobz, c.m, c.n, a, c.m, s, u, c.ldu, v, c.ldv, work, lwork, info, c.params,
                                  batch);
}
cusolverStatus_t gesvdj_batched(cusolverDnHandle_t h, const JacobiCall& c, Complex64* a, float* s, Complex64* u,
                                Complex64* v, Complex64* work, int lwork, int* info, int batch) {
  return cusolverDnCgesvdjBatched(h, c.jobz, c.m, c.n, native(a), c.m, s, native(u), c.ldu, native(v), c.ldv,
                                  native(work), lwork, info, c.params, batch);
}
// QR-iteration SVD (m >= n only): U and V^T directly.
cusolverStatus_t gesvd_buffer(cusolverDnHandle_t h, int m, int n, float*, int* lwork) {
  return cusolverDnSgesvd_bufferSize(h, m, n, lwork);
}
cusolverStatus_t gesvd_buffer(cusolverDnHandle_t h, int m, int n, double*, int* lwork) {
  return cusolverDnDgesvd_bufferSize(h, m, n, lwork);
}
cusolverStatus_t gesvd_buffer(cusolverDnHandle_t h, int m, int n, Complex64*, int* lwork) {
  return cusolverDnCgesvd_bufferSize(h, m, n, lwork);
}
struct QrSvdCall {
  signed char jobu, jobvt;
  int m, n, ldu, ldvt;
};
cusolverStatus_t gesvd(cusolverDnHandle_t h, const QrSvdCall& c, float* a, float* s, float* u, float* vt, float* work,
                       int lwork, float* rwork, int* info) {
  return cusolverDnSgesvd(h, c.jobu, c.jobvt, c.m, c.n, a, c.m, s, u, c.ldu, vt, c.ldvt, work, lwork, rwork, info);
}
cusolverStatus_t gesvd(cusolverDnHandle_t h, const QrSvdCall& c, double* a, double* s, double* u, double* vt,
                       double* work, int lwork, double* rwork, int* info) {
  return cusolverDnDgesvd(h, c.jobu, c.jobvt, c.m, c.n, a, c.m, s, u, c.ldu, vt, c.ldvt, work, lwork, rwork, info);
}
cusolverStatus_t gesvd(cusolverDnHandle_t h, const QrSvdCall& c, Complex64* a, float* s, Complex64* u, Complex64* vt,
                       Complex64* work, int lwork, float* rwork, int* info) {
  return cusolverDnCgesvd(h, c.jobu, c.jobvt, c.m, c.n, native(a), c.m, s, native(u), c.ldu, native(vt), c.ldvt,
                          native(work), lwork, rwork, info);
}

// Many small square matrices go to cuBLAS's batched kernels, the rest to cuSOLVER one matrix
// at a time (PyTorch's BatchLinearAlgebra.cpp split; cuBLAS's batched getrf is square only).
bool use_batched(int64_t batch, int64_t m, int64_t n) { return batch > 1 && m == n && m < 512; }
// cuBLAS's complex getrfBatched and cuSOLVER's cgetrf do not pivot on LAPACK's |Re| + |Im|
// (H100: 4x4 complex64 batched, a different row at step 3; 64x64 cgetrf at step 2): complex
// matrices factor on our own kernels, batches of square ones up to 32 one per thread, the rest
// by blocks (lu_factor_blocked).
constexpr int64_t kThreadLuMax = 32;
bool use_thread_lu(DType t, int64_t batch, int64_t m, int64_t n) {
  return t == kComplex64 && batch > 1 && m == n && m <= kThreadLuMax;
}

// ---- small kernels
__global__ void matrix_pointers_kernel(void** out, char* base, int64_t stride_bytes, int64_t batch) {
  for (int64_t b = cuda_device::global_thread(); b < batch; b += cuda_device::grid_threads())
    out[b] = base + b * stride_bytes;
}

// The batch's matrix addresses in device memory (cuBLAS's batched calls take arrays of them).
std::shared_ptr<StorageImpl> matrix_pointers(const KernelLaunch& launch, const void* base, int64_t stride_bytes,
                                             int64_t batch) {
  auto ptrs = allocate(Device(kCUDA, launch.device()), static_cast<size_t>(batch) * sizeof(void*));
  matrix_pointers_kernel<<<launch.blocks(batch), kThreads, 0, launch.stream()>>>(
      static_cast<void**>(ptrs->data), static_cast<char*>(const_cast<void*>(base)), stride_bytes, batch);
  launch.check("[linalg]");
  return ptrs;
}

__global__ void identity_pivots_kernel(int32_t* pivots, int64_t k, int64_t total) {
  for (int64_t i = cuda_device::global_thread(); i < total; i += cuda_device::grid_threads())
    pivots[i] = static_cast<int32_t>(i % k + 1);
}

// getf2 on one column-major matrix per thread, in place (core/small_lu.h).
template <typename T>
__global__ void lu_factor_thread_kernel(const __grid_constant__ LuFactorParams p) {
  const int64_t k = p.m < p.n ? p.m : p.n;
  for (int64_t b = cuda_device::global_thread(); b < p.batch; b += cuda_device::grid_threads())
    p.info[b] = small_lu::getf2(static_cast<T*>(p.a) + b * p.m * p.n, p.m, p.n, p.pivots + b * k, p.pivot);
}

// ---- blocked LU (complex64): panels of kPanel columns factored by one block with LAPACK's
// pivot rule, the exchanges applied to the other columns, then cuBLAS's trsm and gemm for U's
// rows and the trailing matrix (right-looking, LAPACK getrf's order).
constexpr int64_t kPanel = 32;

// getf2 on columns [j0, j0 + nb) of the column-major m-row matrix a, rows j0.. (one block).
template <typename T>
__global__ void __launch_bounds__(kThreads) lu_panel_kernel(T* a, int64_t m, int64_t j0, int64_t nb, int32_t* piv,
                                                            int32_t* info, bool pivot) {
  __shared__ double best_v[kThreads];
  __shared__ int64_t best_i[kThreads];
  const int tid = threadIdx.x;
  for (int64_t j = j0; j < j0 + nb; ++j) {
    T* col = a + j * m;
    int64_t r = j;
    if (pivot) {  // the first row of largest |Re| + |Im|: ties go to the lower index
      double bv = -1.0;
      int64_t bi = j;
      for (int64_t i = j + tid; i < m; i += kThreads) {
        const double v = small_lu::abs1(col[i]);
        if (v > bv) {
          bv = v;
          bi = i;
        }
      }
      best_v[tid] = bv;
      best_i[tid] = bi;
      __syncthreads();
      for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (tid < s && (best_v[tid + s] > best_v[tid] || (best_v[tid + s] == best_v[tid] && best_i[tid + s] < best_i[tid]))) {
          best_v[tid] = best_v[tid + s];
          best_i[tid] = best_i[tid + s];
        }
        __syncthreads();
      }
      r = best_i[0];
    }
    if (tid == 0) piv[j] = static_cast<int32_t>(r + 1);
    if (r != j)
      for (int64_t c = j0 + tid; c < j0 + nb; c += kThreads) {
        const T t = a[j + c * m];
        a[j + c * m] = a[r + c * m];
        a[r + c * m] = t;
      }
    __syncthreads();
    const T d = col[j];
    if (d == T(0)) {  // the same value in every thread: a uniform branch
      if (tid == 0 && *info == 0) *info = static_cast<int32_t>(j + 1);
      continue;
    }
    for (int64_t i = j + 1 + tid; i < m; i += kThreads) col[i] = col[i] / d;
    __syncthreads();
    for (int64_t c = j + 1; c < j0 + nb; ++c) {
      const T f = a[j + c * m];
      for (int64_t i = j + 1 + tid; i < m; i += kThreads) a[i + c * m] = a[i + c * m] - col[i] * f;
    }
    __syncthreads();
  }
}

// The panel's row exchanges on every column outside it, one thread per column.
template <typename T>
__global__ void lu_swap_rows_kernel(T* a, int64_t m, int64_t n, int64_t j0, int64_t nb, const int32_t* piv) {
  for (int64_t t = cuda_device::global_thread(); t < n - nb; t += cuda_device::grid_threads()) {
    const int64_t c = t < j0 ? t : t + nb;
    for (int64_t j = j0; j < j0 + nb; ++j) {
      const int64_t r = piv[j] - 1;
      if (r == j) continue;
      const T x = a[j + c * m];
      a[j + c * m] = a[r + c * m];
      a[r + c * m] = x;
    }
  }
}

void lu_factor_blocked(const KernelLaunch& launch, cublasHandle_t h, Complex64* a, int64_t m, int64_t n, int32_t* piv,
                       int32_t* info, bool pivot) {
  const int64_t k = std::min(m, n);
  ANVIL_CUDA_CHECK("[lu_factor]", cudaMemsetAsync(info, 0, sizeof(int32_t), launch.stream()));
  auto at = [&](int64_t i, int64_t j) { return a + i + j * m; };
  const int ld = static_cast<int>(m);
  for (int64_t j0 = 0; j0 < k; j0 += kPanel) {
    const int64_t nb = std::min(kPanel, k - j0);
    lu_panel_kernel<Complex64><<<1, kThreads, 0, launch.stream()>>>(a, m, j0, nb, piv, info, pivot);
    launch.check("[lu_factor]");
    if (pivot && n > nb) {
      lu_swap_rows_kernel<Complex64><<<launch.blocks(n - nb), kThreads, 0, launch.stream()>>>(a, m, n, j0, nb, piv);
      launch.check("[lu_factor]");
    }
    const int right = static_cast<int>(n - j0 - nb), below = static_cast<int>(m - j0 - nb), w = static_cast<int>(nb);
    if (right <= 0) continue;
    check(trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, w, right, at(j0, j0), ld,
               at(j0, j0 + nb), ld),
          "[lu_factor]");
    if (below > 0)
      check(gemm_subtract(h, CUBLAS_OP_N, CUBLAS_OP_N, below, right, w, at(j0 + nb, j0), ld, at(j0, j0 + nb), ld,
                          at(j0 + nb, j0 + nb), ld),
            "[lu_factor]");
  }
}

// Zeroes the strict upper triangle of (batch, n, n) column-major matrices.
template <typename T>
__global__ void zero_upper_kernel(T* a, int64_t n, int64_t total) {
  for (int64_t e = cuda_device::global_thread(); e < total; e += cuda_device::grid_threads()) {
    const int64_t i = e % n, j = e / n % n;
    if (i < j) a[e] = T(0);
  }
}

// float64 / complex<double> products of the diagonal, one thread per matrix.
struct Wide {
  double re, im;
};
template <typename T> __device__ Wide widen(T v) {
  if constexpr (std::is_same_v<T, Complex64>) return {v.re, v.im};
  else return {static_cast<double>(v), 0.0};
}
__device__ Wide mul(Wide a, Wide b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }

template <typename T>
__global__ void lu_det_kernel(const __grid_constant__ LuDetParams p) {
  using Real = linalg_real_t<T>;
  for (int64_t b = cuda_device::global_thread(); b < p.batch; b += cuda_device::grid_threads()) {
    const T* a = static_cast<const T*>(p.lu) + b * p.n * p.n;
    const int32_t* piv = p.pivots + b * p.n;
    bool odd = false;
    for (int64_t i = 0; i < p.n; ++i) odd ^= piv[i] != i + 1;
    Wide prod{odd ? -1.0 : 1.0, 0.0};
    double log_sum = 0;
    for (int64_t i = 0; i < p.n; ++i) {
      Wide d = widen(a[i + i * p.n]);
      if (p.log_abs) {
        const double mag = hypot(d.re, d.im);
        log_sum += log(mag);
        d = mag == 0 ? Wide{0, 0} : Wide{d.re / mag, d.im / mag};
      }
      prod = mul(prod, d);
    }
    T* det = static_cast<T*>(p.det);
    if constexpr (std::is_same_v<T, Complex64>) det[b] = Complex64(static_cast<float>(prod.re), static_cast<float>(prod.im));
    else det[b] = static_cast<T>(prod.re);
    if (p.log_abs) static_cast<Real*>(p.log_abs_det)[b] = static_cast<Real>(log_sum);
  }
}

// One block per matrix: thread 0 replays the row exchanges into scratch, then the block writes
// P, L and U (row-major outputs from the column-major factors).
template <typename T>
__global__ void lu_unpack_kernel(const __grid_constant__ LuUnpackParams p) {
  const int64_t m = p.m, n = p.n, k = m < n ? m : n;
  for (int64_t b = blockIdx.x; b < p.batch; b += gridDim.x) {
    const T* a = static_cast<const T*>(p.lu) + b * m * n;
    if (p.p) {
      int32_t* r = p.scratch + b * m;
      for (int64_t i = threadIdx.x; i < m; i += blockDim.x) r[i] = static_cast<int32_t>(i);
      __syncthreads();
      if (threadIdx.x == 0)
        for (int64_t i = 0; i < k; ++i) {
          const int64_t s = p.pivots[b * k + i] - 1;
          const int32_t t = r[i];
          r[i] = r[s];
          r[s] = t;
        }
      __syncthreads();
      T* out = static_cast<T*>(p.p) + b * m * m;
      for (int64_t e = threadIdx.x; e < m * m; e += blockDim.x) out[e] = T(r[e % m] == e / m ? 1 : 0);
    }
    if (p.l) {
      T* out = static_cast<T*>(p.l) + b * m * k;
      for (int64_t e = threadIdx.x; e < m * k; e += blockDim.x) {
        const int64_t i = e / k, j = e % k;
        out[e] = i > j ? a[i + j * m] : T(i == j ? 1 : 0);
      }
    }
    if (p.u) {
      T* out = static_cast<T*>(p.u) + b * k * n;
      for (int64_t e = threadIdx.x; e < k * n; e += blockDim.x) {
        const int64_t i = e / n, j = e % n;
        out[e] = i <= j ? a[i + j * m] : T(0);
      }
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void triangle_kernel(const __grid_constant__ TriangleParams p, int64_t total) {
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  for (int64_t e = cuda_device::global_thread(); e < total; e += cuda_device::grid_threads()) {
    const int64_t j = e % p.cols, i = (e / p.cols) % p.rows;
    const bool keep = p.upper ? j - i >= p.diagonal : j - i <= p.diagonal;
    out[e] = keep ? x[e] : T{};
  }
}

// ---- the SVD's helpers
template <typename T> __device__ T conj_of(T v) {
  if constexpr (std::is_same_v<T, Complex64>) return Complex64(v.re, -v.im);
  else return v;
}
template <typename T> __device__ double abs_max_part(T v) {
  if constexpr (std::is_same_v<T, Complex64>) return fmax(fabs(static_cast<double>(v.re)), fabs(static_cast<double>(v.im)));
  else return fabs(static_cast<double>(v));
}

// A matrix whose largest |entry| lies outside [2^-kScaleRange, 2^kScaleRange] (float32: 40,
// float64: 400) is scaled by the power of two 2^-e that brings it to [0.5, 1): the Jacobi
// methods square entries (1e-30 or 1e30 float32 would underflow or overflow). exps[b] = e, or
// 0 when the matrix is left alone (also when it has no finite nonzero maximum).
template <typename T>
__global__ void __launch_bounds__(kThreads) svd_scale_kernel(T* a, int64_t mat, int64_t batch, int32_t* exps) {
  __shared__ double part[kThreads];
  __shared__ int shift;
  constexpr int range = std::is_same_v<T, double> ? 400 : 40;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    T* x = a + b * mat;
    double v = 0;
    for (int64_t e = threadIdx.x; e < mat; e += blockDim.x) v = fmax(v, abs_max_part(x[e]));
    part[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) part[threadIdx.x] = fmax(part[threadIdx.x], part[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      int e = 0;
      const double top = part[0];
      if (top > 0 && isfinite(top)) ::frexp(top, &e);
      shift = e > range || e < -range ? e : 0;
      exps[b] = shift;
    }
    __syncthreads();
    const int e = shift;
    if (e != 0)
      for (int64_t i = threadIdx.x; i < mat; i += blockDim.x) {
        if constexpr (std::is_same_v<T, Complex64>) x[i] = Complex64(ldexpf(x[i].re, -e), ldexpf(x[i].im, -e));
        else x[i] = static_cast<T>(ldexp(static_cast<double>(x[i]), -e));
      }
    __syncthreads();
  }
}

// S = 2^e S per matrix (undoing svd_scale_kernel).
template <typename R>
__global__ void svd_unscale_kernel(R* s, int64_t k, int64_t total, const int32_t* exps) {
  for (int64_t i = cuda_device::global_thread(); i < total; i += cuda_device::grid_threads()) {
    const int e = exps[i / k];
    if (e != 0) s[i] = static_cast<R>(ldexp(static_cast<double>(s[i]), e));
  }
}

// dst (batch, rows, cols) column-major = the adjoint of src's matrices (src[c + r * ld_src], batch
// stride src_batch): V^H from V, A^H for gesvd's wide case.
template <typename T>
__global__ void adjoint_copy_kernel(T* dst, int64_t rows, int64_t cols, const T* src, int64_t ld_src, int64_t src_batch,
                                    int64_t total) {
  for (int64_t i = cuda_device::global_thread(); i < total; i += cuda_device::grid_threads()) {
    const int64_t b = i / (rows * cols), e = i % (rows * cols), r = e % rows, c = e / rows;
    dst[i] = conj_of(src[b * src_batch + c + r * ld_src]);
  }
}
template <typename T>
void adjoint_copy(const KernelLaunch& launch, T* dst, int64_t rows, int64_t cols, const T* src, int64_t ld_src,
                  int64_t src_batch, int64_t batch) {
  const int64_t total = batch * rows * cols;
  if (total == 0) return;
  adjoint_copy_kernel<T><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(dst, rows, cols, src, ld_src, src_batch,
                                                                                 total);
  launch.check("[svd]");
}

// One matrix per block row (blockIdx.x), a right-hand-side vector per thread: T = A (left) or A^T
// (right) in shared memory, the vector read from B into registers, forward (lower T) or back (upper
// T) substitution fully unrolled, then written to X.
constexpr int kTriangularThreads = 128;
template <int N, bool Lower>
__global__ void __launch_bounds__(kTriangularThreads) small_triangular_kernel(const __grid_constant__ SmallTriangularParams p) {
  __shared__ float t[N][N + 1];
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* x_out = static_cast<float*>(p.x);
  for (int64_t m = blockIdx.x; m < p.batch; m += gridDim.x) {
    const float* am = a + m * p.stride_a_batch;
    for (int e = threadIdx.x; e < N * N; e += blockDim.x) {
      const int i = e / N, j = e % N;  // T[i][j] = A[i][j] (left) or A[j][i] (right)
      const int r = p.left ? i : j, c = p.left ? j : i;
      t[i][j] = am[r * p.stride_a_row + c * p.stride_a_col];
    }
    __syncthreads();
    const int64_t v = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (v < p.nrhs) {
      const float* bm = b + m * p.stride_b_batch + v * p.stride_b_vec;
      float x[N];
#pragma unroll
      for (int i = 0; i < N; ++i) x[i] = bm[i * p.stride_b_elem];
      if constexpr (Lower) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          float s = x[i];
#pragma unroll
          for (int j = 0; j < i; ++j) s = fmaf(-t[i][j], x[j], s);
          x[i] = p.unit ? s : s / t[i][i];
        }
      } else {
#pragma unroll
        for (int i = N - 1; i >= 0; --i) {
          float s = x[i];
#pragma unroll
          for (int j = i + 1; j < N; ++j) s = fmaf(-t[i][j], x[j], s);
          x[i] = p.unit ? s : s / t[i][i];
        }
      }
      float* xm = x_out + m * N * p.nrhs + v;
#pragma unroll
      for (int i = 0; i < N; ++i) xm[i * p.nrhs] = x[i];
    }
    __syncthreads();
  }
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) small_lu_kernel(const __grid_constant__ SmallLuParams p, bool dense_a) {
  for (int64_t b = cuda_device::global_thread(); b < p.batch; b += cuda_device::grid_threads())
    small_lu::run_one<T, N>(p, b, dense_a);
}

// Blocked triangular solve of one system: the triangle split in two at a multiple of
// kTriangularLeaf, recursively; the half that does not depend on the other is solved first, the
// coupling block applied to the rest as one gemm, and blocks of order <= kTriangularLeaf go to
// cuBLAS's trsm, so nearly all flops run in gemm. x: the column-major rows x cols B, overwritten
// with X. cuBLAS's trsm itself recurses the same way to 256-order blocks (a 256 leaf gave its
// bits, H100); 128 is faster for float32 with many right-hand sides, slower with few (k = 1 / 16:
// 0.4-0.5x) and for float64 at 4096^2 (0.78x): H100, left lower, trsm / blocked, n 256 .. 8192:
// k 4096 1.26 / 1.22 / 1.13 / 1.10 / 1.07 / 1.04x, k 512 0.66-1.05x, k 64 0.78-0.96x below
// order 4096, 1.09x at 4096 and 8192.
constexpr int64_t kTriangularLeaf = 128;
// cuBLAS's side / fill / op / diag of a triangular solve's params.
struct TrsmModes {
  cublasSideMode_t side;
  cublasFillMode_t uplo;
  cublasOperation_t op;
  cublasDiagType_t diag;
};
TrsmModes trsm_modes(const TriangularSolveParams& p) {
  return {p.left ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT, p.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
          p.transpose ? CUBLAS_OP_T : CUBLAS_OP_N, p.unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT};
}
bool use_blocked_triangular(const TriangularSolveParams& p) {
  return p.dtype == kFloat32 && p.left && p.n >= 256 && (p.cols >= 1024 || (p.n >= 4096 && p.cols >= 64));
}
template <typename T>
void blocked_triangular(cublasHandle_t h, const TriangularSolveParams& p, const T* a, T* x, int64_t lo, int64_t hi) {
  const int n = static_cast<int>(p.n), ldx = static_cast<int>(p.rows), size = static_cast<int>(hi - lo);
  const TrsmModes md = trsm_modes(p);
  const cublasOperation_t op = md.op;
  // Block (i, j) of op(A), read through op.
  const auto op_a_at = [&](int64_t i, int64_t j) { return p.transpose ? a + j + i * p.n : a + i + j * p.n; };
  // Rows lo.. of X (left) or its columns lo.. (right).
  const auto x_at = [&](int64_t lo_) { return p.left ? x + lo_ : x + lo_ * p.rows; };
  if (size <= kTriangularLeaf) {
    check(trsm(h, md.side, md.uplo, md.op, md.diag, p.left ? size : ldx, p.left ? static_cast<int>(p.cols) : size,
               op_a_at(lo, lo), n, x_at(lo), ldx),
          "[triangular_solve]");
    return;
  }
  const int64_t mid = lo + std::max(kTriangularLeaf, (hi - lo) / 2 / kTriangularLeaf * kTriangularLeaf);
  // op(A) X = B with lower op(A), or X op(A) = B with upper op(A): [lo, mid) first.
  const bool op_upper = p.upper != p.transpose;
  const bool first_part_first = p.left != op_upper;
  const int64_t f0 = first_part_first ? lo : mid, f1 = first_part_first ? mid : hi;  // solved first
  const int64_t s0 = first_part_first ? mid : lo, s1 = first_part_first ? hi : mid;  // updated, then solved
  blocked_triangular(h, p, a, x, f0, f1);
  const int done = static_cast<int>(f1 - f0), rest = static_cast<int>(s1 - s0);
  if (p.left)  // X[s] -= op(A)[s, f] X[f]
    check(gemm_subtract(h, op, CUBLAS_OP_N, rest, static_cast<int>(p.cols), done, op_a_at(s0, f0), n, x_at(f0), ldx,
                        x_at(s0), ldx),
          "[triangular_solve]");
  else  // X[:, s] -= X[:, f] op(A)[f, s]
    check(gemm_subtract(h, CUBLAS_OP_N, op, ldx, rest, done, x_at(f0), ldx, op_a_at(f0, s0), n, x_at(s0), ldx),
          "[triangular_solve]");
  blocked_triangular(h, p, a, x, s0, s1);
}

cublasOperation_t op_of(LinalgOp op) {
  return op == LinalgOp::Adjoint ? CUBLAS_OP_C : op == LinalgOp::Transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

}  // namespace

void lu_factor(const LuFactorParams& p) {
  ANVIL_CHECK(p.m <= INT32_MAX && p.n <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[lu_factor] cuSOLVER takes 32-bit sizes, got batch ", p.batch, " of ", p.m, "x", p.n);
  dispatch_linalg_types(p.dtype, "[lu_factor]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.a);
    const Device dev(kCUDA, launch.device());
    T* a = static_cast<T*>(p.a);
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = std::min(m, n);
    if (use_thread_lu(p.dtype, p.batch, p.m, p.n)) {
      lu_factor_thread_kernel<T><<<launch.blocks(p.batch), kThreads, 0, launch.stream()>>>(p);
      launch.check("[lu_factor]");
      return;
    }
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch);
    if constexpr (std::is_same_v<T, Complex64>) {
      check(cublasSetStream(h.blas, launch.stream()), "[lu_factor]");
      for (int64_t b = 0; b < p.batch; ++b)
        lu_factor_blocked(launch, h.blas, a + b * p.m * p.n, p.m, p.n, p.pivots + b * k, p.info + b, p.pivot);
      return;
    }
    if (use_batched(p.batch, p.m, p.n)) {
      check(cublasSetStream(h.blas, launch.stream()), "[lu_factor]");
      auto ptrs = matrix_pointers(launch, a, p.m * p.n * static_cast<int64_t>(sizeof(T)), p.batch);
      check(getrf_batched(h.blas, n, static_cast<T* const*>(ptrs->data), p.pivot ? p.pivots : nullptr, p.info,
                          static_cast<int>(p.batch)),
            "[lu_factor]");
    } else {
      check(cusolverDnSetStream(h.solver, launch.stream()), "[lu_factor]");
      int lwork = 0;
      check(getrf_buffer(h.solver, m, n, a, &lwork), "[lu_factor]");
      auto work = allocate(dev, static_cast<size_t>(std::max(lwork, 1)) * sizeof(T));
      for (int64_t b = 0; b < p.batch; ++b)
        check(getrf(h.solver, m, n, a + b * p.m * p.n, static_cast<T*>(work->data), p.pivot ? p.pivots + b * k : nullptr,
                    p.info + b),
              "[lu_factor]");
    }
    if (!p.pivot && k > 0) {
      const int64_t total = p.batch * k;
      identity_pivots_kernel<<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p.pivots, k, total);
      launch.check("[lu_factor]");
    }
  });
}

void lu_solve(const LuSolveParams& p) {
  ANVIL_CHECK(p.n <= INT32_MAX && p.nrhs <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[lu_solve] cuSOLVER takes 32-bit sizes, got batch ", p.batch, " of ", p.n, "x", p.nrhs);
  dispatch_linalg_types(p.dtype, "[lu_solve]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.b);
    const Device dev(kCUDA, launch.device());
    const T* lu = static_cast<const T*>(p.lu);
    T* x = static_cast<T*>(p.b);
    const int n = static_cast<int>(p.n), nrhs = static_cast<int>(p.nrhs);
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch);
    if (use_batched(p.batch, p.n, p.n)) {
      check(cublasSetStream(h.blas, launch.stream()), "[lu_solve]");
      auto a_ptrs = matrix_pointers(launch, lu, p.n * p.n * static_cast<int64_t>(sizeof(T)), p.batch);
      auto b_ptrs = matrix_pointers(launch, x, p.n * p.nrhs * static_cast<int64_t>(sizeof(T)), p.batch);
      int info = 0;  // argument checks only, on the host: no wait
      check(getrs_batched(h.blas, op_of(p.op), n, nrhs, static_cast<const T* const*>(a_ptrs->data), p.pivots,
                          static_cast<T* const*>(b_ptrs->data), &info, static_cast<int>(p.batch)),
            "[lu_solve]");
      ANVIL_CHECK(info == 0, DeviceError, "[lu_solve] cublas getrsBatched rejected argument ", -info);
    } else {
      check(cusolverDnSetStream(h.solver, launch.stream()), "[lu_solve]");
      auto info = allocate(dev, sizeof(int));
      for (int64_t b = 0; b < p.batch; ++b)
        check(getrs(h.solver, op_of(p.op), n, nrhs, lu + b * p.n * p.n, p.pivots + b * p.n, x + b * p.n * p.nrhs,
                    static_cast<int*>(info->data)),
              "[lu_solve]");
    }
  });
}

void triangular_solve(const TriangularSolveParams& p) {
  ANVIL_CHECK(p.n <= INT32_MAX && p.rows <= INT32_MAX && p.cols <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[triangular_solve] cuBLAS takes 32-bit sizes, got batch ", p.batch, " of ", p.rows, "x", p.cols);
  dispatch_linalg_types(p.dtype, "[triangular_solve]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.b);
    const T* a = static_cast<const T*>(p.a);
    T* x = static_cast<T*>(p.b);
    const auto [side, uplo, op, diag] = trsm_modes(p);
    const int rows = static_cast<int>(p.rows), cols = static_cast<int>(p.cols), n = static_cast<int>(p.n);
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch);
    check(cublasSetStream(h.blas, launch.stream()), "[triangular_solve]");
    if (use_blocked_triangular(p)) {
      for (int64_t b = 0; b < p.batch; ++b)
        blocked_triangular(h.blas, p, a + b * p.n * p.n, x + b * p.rows * p.cols, 0, p.n);
    } else if (p.batch > 1) {
      auto a_ptrs = matrix_pointers(launch, a, p.n * p.n * static_cast<int64_t>(sizeof(T)), p.batch);
      auto b_ptrs = matrix_pointers(launch, x, p.rows * p.cols * static_cast<int64_t>(sizeof(T)), p.batch);
      check(trsm_batched(h.blas, side, uplo, op, diag, rows, cols, static_cast<const T* const*>(a_ptrs->data), n,
                         static_cast<T* const*>(b_ptrs->data), static_cast<int>(p.batch)),
            "[triangular_solve]");
    } else {
      check(trsm(h.blas, side, uplo, op, diag, rows, cols, a, n, x, rows), "[triangular_solve]");
    }
  });
}

void cholesky(const CholeskyParams& p) {
  ANVIL_CHECK(p.n <= INT32_MAX && p.batch <= INT32_MAX, ShapeError, "[cholesky] cuSOLVER takes 32-bit sizes, got batch ",
              p.batch, " of ", p.n, "x", p.n);
  dispatch_linalg_types(p.dtype, "[cholesky]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.a);
    T* a = static_cast<T*>(p.a);
    const int n = static_cast<int>(p.n);
    {
      std::lock_guard<std::mutex> lock(handles_mutex());
      Handles& h = handles_locked(launch);
      check(cusolverDnSetStream(h.solver, launch.stream()), "[cholesky]");
      if (use_batched(p.batch, p.n, p.n)) {
        auto ptrs = matrix_pointers(launch, a, p.n * p.n * static_cast<int64_t>(sizeof(T)), p.batch);
        check(potrf_batched(h.solver, n, static_cast<T**>(ptrs->data), p.info, static_cast<int>(p.batch)), "[cholesky]");
      } else {
        int lwork = 0;
        check(potrf_buffer(h.solver, n, a, &lwork), "[cholesky]");
        auto work = allocate(Device(kCUDA, launch.device()), static_cast<size_t>(std::max(lwork, 1)) * sizeof(T));
        for (int64_t b = 0; b < p.batch; ++b)
          check(potrf(h.solver, n, a + b * p.n * p.n, static_cast<T*>(work->data), lwork, p.info + b), "[cholesky]");
      }
    }
    const int64_t total = p.batch * p.n * p.n;
    zero_upper_kernel<T><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(a, p.n, total);
    launch.check("[cholesky]");
  });
}

void lu_det(const LuDetParams& p) {
  dispatch_linalg_types(p.dtype, "[lu_det]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.det);
    lu_det_kernel<T><<<launch.blocks(p.batch), kThreads, 0, launch.stream()>>>(p);
    launch.check("[lu_det]");
  });
}

void lu_unpack(const LuUnpackParams& p) {
  dispatch_linalg_types(p.dtype, "[lu_unpack]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.lu);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.batch, launch.max_blocks()));
    lu_unpack_kernel<T><<<blocks, kThreads, 0, launch.stream()>>>(p);
    launch.check("[lu_unpack]");
  });
}

// cuBLAS's batched QR for many small matrices, cuSOLVER's one at a time otherwise (PyTorch's
// geqrf split; cuBLAS's needs m >= n).
bool use_batched_qr(int64_t batch, int64_t m, int64_t n) {
  return m >= n && m <= 256 && batch >= std::max<int64_t>(2, m / 16);
}

void geqrf(const GeqrfParams& p) {
  ANVIL_CHECK(p.m <= INT32_MAX && p.n <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[geqrf] cuSOLVER takes 32-bit sizes, got batch ", p.batch, " of ", p.m, "x", p.n);
  dispatch_linalg_types(p.dtype, "[geqrf]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.a);
    const Device dev(kCUDA, launch.device());
    T* a = static_cast<T*>(p.a);
    T* tau = static_cast<T*>(p.tau);
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = std::min(m, n);
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch);
    if (use_batched_qr(p.batch, p.m, p.n)) {
      check(cublasSetStream(h.blas, launch.stream()), "[geqrf]");
      auto a_ptrs = matrix_pointers(launch, a, p.m * p.n * static_cast<int64_t>(sizeof(T)), p.batch);
      auto tau_ptrs = matrix_pointers(launch, tau, k * static_cast<int64_t>(sizeof(T)), p.batch);
      int info = 0;  // argument checks only, on the host
      check(geqrf_batched(h.blas, m, n, static_cast<T* const*>(a_ptrs->data), static_cast<T* const*>(tau_ptrs->data),
                          &info, static_cast<int>(p.batch)),
            "[geqrf]");
      ANVIL_CHECK(info == 0, DeviceError, "[geqrf] cublas geqrfBatched rejected argument ", -info);
      return;
    }
    check(cusolverDnSetStream(h.solver, launch.stream()), "[geqrf]");
    int lwork = 0;
    check(geqrf_buffer(h.solver, m, n, a, &lwork), "[geqrf]");
    auto work = allocate(dev, static_cast<size_t>(std::max(lwork, 1)) * sizeof(T));
    auto info = allocate(dev, sizeof(int));
    for (int64_t b = 0; b < p.batch; ++b)
      check(geqrf(h.solver, m, n, a + b * p.m * p.n, tau + b * k, static_cast<T*>(work->data), lwork,
                  static_cast<int*>(info->data)),
            "[geqrf]");
  });
}

void orgqr(const OrgqrParams& p) {
  ANVIL_CHECK(p.m <= INT32_MAX && p.n <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[orgqr] cuSOLVER takes 32-bit sizes, got batch ", p.batch, " of ", p.m, "x", p.n);
  dispatch_linalg_types(p.dtype, "[orgqr]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.a);
    const Device dev(kCUDA, launch.device());
    T* a = static_cast<T*>(p.a);
    const T* tau = static_cast<const T*>(p.tau);
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch);
    check(cusolverDnSetStream(h.solver, launch.stream()), "[orgqr]");
    int lwork = 0;
    check(orgqr_buffer(h.solver, m, n, k, a, tau, &lwork), "[orgqr]");
    auto work = allocate(dev, static_cast<size_t>(std::max(lwork, 1)) * sizeof(T));
    auto info = allocate(dev, sizeof(int));
    for (int64_t b = 0; b < p.batch; ++b)
      check(orgqr(h.solver, m, n, k, a + b * p.m * p.n, tau + b * p.k, static_cast<T*>(work->data), lwork,
                  static_cast<int*>(info->data)),
            "[orgqr]");
  });
}

void ormqr(const OrmqrParams& p) {
  ANVIL_CHECK(p.m <= INT32_MAX && p.nrhs <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[ormqr] cuSOLVER takes 32-bit sizes, got batch ", p.batch, " of ", p.m, "x", p.nrhs);
  dispatch_linalg_types(p.dtype, "[ormqr]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.c);
    const Device dev(kCUDA, launch.device());
    const T* a = static_cast<const T*>(p.a);
    const T* tau = static_cast<const T*>(p.tau);
    T* c = static_cast<T*>(p.c);
    const bool adjoint = p.op == LinalgOp::Adjoint;
    const int m = static_cast<int>(p.m), nrhs = static_cast<int>(p.nrhs), k = static_cast<int>(p.k);
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch);
    check(cusolverDnSetStream(h.solver, launch.stream()), "[ormqr]");
    int lwork = 0;
    check(ormqr_buffer(h.solver, adjoint, m, nrhs, k, a, tau, c, &lwork), "[ormqr]");
    auto work = allocate(dev, static_cast<size_t>(std::max(lwork, 1)) * sizeof(T));
    auto info = allocate(dev, sizeof(int));
    for (int64_t b = 0; b < p.batch; ++b)
      check(ormqr(h.solver, adjoint, m, nrhs, k, a + b * p.m * p.a_cols, tau + b * p.k, c + b * p.m * p.nrhs,
                  static_cast<T*>(work->data), lwork, static_cast<int*>(info->data)),
            "[ormqr]");
  });
}

// The SVD: svd_scale_kernel, then (as PyTorch) cuSOLVER's gesvdjBatched for matrices up to
// 32x32, gesvdj one matrix at a time for larger ones, gesvd when asked (on A^H for wide A,
// which it does not take); the Jacobi methods give V, turned into V^H by adjoint_copy.
void svd(const SvdParams& p) {
  ANVIL_CHECK(p.m <= INT32_MAX && p.n <= INT32_MAX && p.batch <= INT32_MAX, ShapeError,
              "[svd] cuSOLVER takes 32-bit sizes, got batch ", p.batch, " of ", p.m, "x", p.n);
  dispatch_linalg_types(p.dtype, "[svd]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = linalg_real_t<T>;
    KernelLaunch launch(p.a);
    const Device dev(kCUDA, launch.device());
    T* a = static_cast<T*>(p.a);
    R* s = static_cast<R*>(p.s);
    const int64_t m = p.m, n = p.n, k = std::min(m, n), batch = p.batch;
    const int64_t u_cols = p.full_matrices ? m : k, vh_rows = p.full_matrices ? n : k;
    auto buffer = [&](int64_t elements) { return allocate(dev, static_cast<size_t>(std::max<int64_t>(elements, 1)) * sizeof(T)); };
    auto exps = allocate(dev, static_cast<size_t>(batch) * sizeof(int32_t));
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(batch, launch.max_blocks()));
    svd_scale_kernel<T><<<blocks, kThreads, 0, launch.stream()>>>(a, m * n, batch, static_cast<int32_t*>(exps->data));
    launch.check("[svd]");
    {
      std::lock_guard<std::mutex> lock(handles_mutex());
      Handles& h = handles_locked(launch);
      check(cusolverDnSetStream(h.solver, launch.stream()), "[svd]");
      if (!h.jacobi) {
        RelaxedCaptureMode relaxed;
        check(cusolverDnCreateGesvdjInfo(&h.jacobi), "[svd]");
      }
      const cusolverEigMode_t jobz = p.compute_uv ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
      if (p.driver != SvdDriver::Gesvd && m <= 32 && n <= 32) {
        // Full U (m x m) and V (n x n) always; U's first k columns are its reduced form.
        const bool u_direct = p.compute_uv && u_cols == m;
        auto u_full = u_direct ? nullptr : buffer(batch * m * m);
        auto v = buffer(batch * n * n);
        T* u = u_direct ? static_cast<T*>(p.u) : static_cast<T*>(u_full->data);
        const JacobiCall call{jobz, 0, static_cast<int>(m), static_cast<int>(n), static_cast<int>(m),
                              static_cast<int>(n), h.jacobi};
        int lwork = 0;
        check(gesvdj_batched_buffer(h.solver, call, a, s, u, static_cast<T*>(v->data), &lwork, static_cast<int>(batch)),
              "[svd]");
        auto work = buffer(lwork);
        check(gesvdj_batched(h.solver, call, a, s, u, static_cast<T*>(v->data), static_cast<T*>(work->data), lwork,
                             p.info, static_cast<int>(batch)),
              "[svd]");
        if (p.compute_uv) {
          if (!u_direct && u_cols > 0)
            ANVIL_CUDA_CHECK("[svd]", cudaMemcpy2DAsync(p.u, static_cast<size_t>(m * u_cols) * sizeof(T), u,
                                                        static_cast<size_t>(m * m) * sizeof(T),
                                                        static_cast<size_t>(m * u_cols) * sizeof(T),
                                                        static_cast<size_t>(batch), cudaMemcpyDeviceToDevice,
                                                        launch.stream()));
          adjoint_copy(launch, static_cast<T*>(p.vh), vh_rows, n, static_cast<const T*>(v->data), n, n * n, batch);
        }
      } else if (p.driver != SvdDriver::Gesvd) {
        const int64_t v_cols = p.full_matrices ? n : k;
        auto u_scratch = p.compute_uv ? nullptr : buffer(m * u_cols);
        auto v = buffer((p.compute_uv ? batch : 1) * n * v_cols);
        const JacobiCall call{jobz, p.full_matrices ? 0 : 1, static_cast<int>(m), static_cast<int>(n),
                              static_cast<int>(std::max<int64_t>(m, 1)), static_cast<int>(std::max<int64_t>(n, 1)),
                              h.jacobi};
        auto u_of = [&](int64_t b) {
          return p.compute_uv ? static_cast<T*>(p.u) + b * m * u_cols : static_cast<T*>(u_scratch->data);
        };
        auto v_of = [&](int64_t b) { return static_cast<T*>(v->data) + (p.compute_uv ? b * n * v_cols : 0); };
        int lwork = 0;
        check(gesvdj_buffer(h.solver, call, a, s, u_of(0), v_of(0), &lwork), "[svd]");
        auto work = buffer(lwork);
        for (int64_t b = 0; b < batch; ++b)
          check(gesvdj(h.solver, call, a + b * m * n, s + b * k, u_of(b), v_of(b), static_cast<T*>(work->data), lwork,
                       p.info + b),
                "[svd]");
        if (p.compute_uv)
          adjoint_copy(launch, static_cast<T*>(p.vh), vh_rows, n, static_cast<const T*>(v->data), n, n * v_cols, batch);
      } else {
        // gesvd takes m >= n: a wide A is factored as A^H = U' S V'^H, so U = V' and V^H = U'^H.
        const bool wide = m < n;
        const int64_t rows = wide ? n : m, cols = wide ? m : n;  // of the matrix gesvd sees
        const int64_t uc = p.full_matrices ? rows : k, vr = p.full_matrices ? cols : k;
        auto at = wide ? buffer(batch * m * n) : nullptr;
        if (wide) adjoint_copy(launch, static_cast<T*>(at->data), n, m, static_cast<const T*>(a), m, m * n, batch);
        T* x = wide ? static_cast<T*>(at->data) : a;
        auto u_w = wide && p.compute_uv ? buffer(batch * rows * uc) : nullptr;
        auto vt_w = wide && p.compute_uv ? buffer(batch * vr * cols) : nullptr;
        T* u = !p.compute_uv ? nullptr : wide ? static_cast<T*>(u_w->data) : static_cast<T*>(p.u);
        T* vt = !p.compute_uv ? nullptr : wide ? static_cast<T*>(vt_w->data) : static_cast<T*>(p.vh);
        const signed char job = !p.compute_uv ? 'N' : p.full_matrices ? 'A' : 'S';
        const QrSvdCall call{job, job, static_cast<int>(rows), static_cast<int>(cols),
                             static_cast<int>(std::max<int64_t>(rows, 1)), static_cast<int>(std::max<int64_t>(vr, 1))};
        int lwork = 0;
        check(gesvd_buffer(h.solver, call.m, call.n, x, &lwork), "[svd]");
        auto work = buffer(lwork);
        auto rwork = allocate(dev, static_cast<size_t>(std::max<int64_t>(k, 1)) * sizeof(R));
        for (int64_t b = 0; b < batch; ++b)
          check(gesvd(h.solver, call, x + b * m * n, s + b * k, u ? u + b * rows * uc : nullptr,
                      vt ? vt + b * vr * cols : nullptr, static_cast<T*>(work->data), lwork,
                      static_cast<R*>(rwork->data), p.info + b),
                "[svd]");
        if (wide && p.compute_uv) {
          adjoint_copy(launch, static_cast<T*>(p.u), m, u_cols, static_cast<const T*>(vt), vr, vr * cols, batch);
          adjoint_copy(launch, static_cast<T*>(p.vh), vh_rows, n, static_cast<const T*>(u), rows, rows * uc, batch);
        }
      }
    }
    const int64_t total = batch * k;
    if (total > 0) {
      svd_unscale_kernel<R><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(s, k, total,
                                                                                   static_cast<int32_t*>(exps->data));
      launch.check("[svd]");
    }
  });
}

void triangle(const TriangleParams& p) {
  dispatch_all_types(p.dtype, "[triangle]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KernelLaunch launch(p.out);
    const int64_t total = p.batch * p.rows * p.cols;
    triangle_kernel<T><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, total);
    launch.check("[triangle]");
  });
}

void lstsq(const LstsqParams&) {
  throw DeviceError(
      "[lstsq] LAPACK's least-squares drivers run on the CPU only (on CUDA the op composes gels from geqrf and ormqr, "
      "gelsd / gelss from the SVD)");
}

// cuBLAS's trsm / trsmBatched outside the rule.
FusedPlan small_triangular_plan(const SmallTriangularParams& p) { return small_triangular_rule(p); }

void small_triangular(const SmallTriangularParams& p) {
  ANVIL_CHECK(small_triangular_plan(p) == FusedPlan::Fused, ShapeError,
              "[small_triangular] float32 systems of order 16, 32 or 64 with >= 8 right-hand sides only, got ",
              dtype_name(p.dtype), " order ", p.n, " with ", p.nrhs);
  KernelLaunch launch(p.b);
  const int threads = static_cast<int>(std::min<int64_t>(kTriangularThreads, (p.nrhs + 31) / 32 * 32));
  const int64_t vector_blocks = (p.nrhs + threads - 1) / threads;
  ANVIL_CHECK(vector_blocks <= 65535, ShapeError, "[small_triangular] too many right-hand sides: ", p.nrhs);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.batch, 1 << 30)), static_cast<unsigned>(vector_blocks));
  const bool lower = p.left ? !p.upper : p.upper;  // T = A or A^T
  auto go = [&](auto order) {
    constexpr int N = decltype(order)::value;
    if (lower) small_triangular_kernel<N, true><<<grid, threads, 0, launch.stream()>>>(p);
    else small_triangular_kernel<N, false><<<grid, threads, 0, launch.stream()>>>(p);
  };
  if (p.n == 16) go(std::integral_constant<int, 16>{});
  else if (p.n == 32) go(std::integral_constant<int, 32>{});
  else go(std::integral_constant<int, 64>{});
  launch.check("[small_triangular]");
}

FusedPlan small_lu_plan(const SmallLuParams& p) { return small_lu::plan(p); }

void small_lu(const SmallLuParams& p) {
  small_lu::dispatch(p, [&](auto tag, auto order) {
    using T = typename decltype(tag)::type;
    constexpr int N = decltype(order)::value;
    KernelLaunch launch(p.a);
    const bool dense_a = small_lu::dense_aligned_a(p, sizeof(T));
    small_lu_kernel<T, N><<<launch.blocks(p.batch), kThreads, 0, launch.stream()>>>(p, dense_a);
    launch.check("[small_lu]");
  });
}

}  // namespace anvil::cuda_backend
