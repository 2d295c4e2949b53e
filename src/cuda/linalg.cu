// CUDA linear algebra: LU through cuSOLVER (one matrix per call) or cuBLAS's batched getrf /
// getrs (many small square matrices, PyTorch's split: batched below 512 rows), determinants and
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

// ---- handles: one cuSOLVER and one cuBLAS handle per device, used under a lock (a handle
// holds the stream it was last given).
struct Handles {
  cusolverDnHandle_t solver = nullptr;
  cublasHandle_t blas = nullptr;
};
std::mutex& handles_mutex() {
  static std::mutex m;
  return m;
}
Handles& handles_locked(int device) {
  static std::unordered_map<int, Handles> all;
  Handles& h = all[device];
  if (!h.solver) {
    if (cusolverDnCreate(&h.solver) != CUSOLVER_STATUS_SUCCESS)
      throw DeviceError("[linalg] cusolverDnCreate failed (is libcusolver installed?)");
    if (cublasCreate(&h.blas) != CUBLAS_STATUS_SUCCESS) throw DeviceError("[linalg] cublasCreate failed");
  }
  return h;
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

cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasDiagType_t diag, int rows,
                    int cols, const float* a, int lda, float* b) {
  const float one = 1.f;
  return cublasStrsm(h, side, uplo, CUBLAS_OP_N, diag, rows, cols, &one, a, lda, b, rows);
}
cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasDiagType_t diag, int rows,
                    int cols, const double* a, int lda, double* b) {
  const double one = 1.0;
  return cublasDtrsm(h, side, uplo, CUBLAS_OP_N, diag, rows, cols, &one, a, lda, b, rows);
}
cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasDiagType_t diag, int rows,
                    int cols, const Complex64* a, int lda, Complex64* b) {
  const cuComplex one = make_cuComplex(1.f, 0.f);
  return cublasCtrsm(h, side, uplo, CUBLAS_OP_N, diag, rows, cols, &one, native(a), lda, native(b), rows);
}
cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasDiagType_t diag,
                            int rows, int cols, const float* const* a, int lda, float* const* b, int batch) {
  const float one = 1.f;
  return cublasStrsmBatched(h, side, uplo, CUBLAS_OP_N, diag, rows, cols, &one, a, lda, b, rows, batch);
}
cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasDiagType_t diag,
                            int rows, int cols, const double* const* a, int lda, double* const* b, int batch) {
  const double one = 1.0;
  return cublasDtrsmBatched(h, side, uplo, CUBLAS_OP_N, diag, rows, cols, &one, a, lda, b, rows, batch);
}
cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasDiagType_t diag,
                            int rows, int cols, const Complex64* const* a, int lda, Complex64* const* b, int batch) {
  const cuComplex one = make_cuComplex(1.f, 0.f);
  return cublasCtrsmBatched(h, side, uplo, CUBLAS_OP_N, diag, rows, cols, &one,
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

// getf2 on one column-major matrix per thread, in place (the pivot rule of core/small_lu.h).
template <typename T>
__global__ void lu_factor_thread_kernel(const __grid_constant__ LuFactorParams p) {
  const int64_t m = p.m, n = p.n, k = m < n ? m : n;
  for (int64_t b = cuda_device::global_thread(); b < p.batch; b += cuda_device::grid_threads()) {
    T* a = static_cast<T*>(p.a) + b * m * n;
    int32_t* piv = p.pivots + b * k;
    int32_t info = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t r = j;
      if (p.pivot) {
        double best = small_lu::abs1(a[j + j * m]);
        for (int64_t i = j + 1; i < m; ++i) {
          const double v = small_lu::abs1(a[i + j * m]);
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
      const T d = a[j + j * m];
      if (d == T(0)) {
        if (info == 0) info = static_cast<int32_t>(j + 1);
        continue;
      }
      for (int64_t i = j + 1; i < m; ++i) a[i + j * m] = a[i + j * m] / d;
      for (int64_t c = j + 1; c < n; ++c) {
        const T f = a[j + c * m];
        for (int64_t i = j + 1; i < m; ++i) a[i + c * m] = a[i + c * m] - a[i + j * m] * f;
      }
    }
    p.info[b] = info;
  }
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
  const cuComplex one = make_cuComplex(1.f, 0.f), minus_one = make_cuComplex(-1.f, 0.f);
  auto at = [&](int64_t i, int64_t j) { return reinterpret_cast<cuComplex*>(a + i + j * m); };
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
    check(cublasCtrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, w, right, &one,
                      at(j0, j0), static_cast<int>(m), at(j0, j0 + nb), static_cast<int>(m)),
          "[lu_factor]");
    if (below > 0)
      check(cublasCgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, below, right, w, &minus_one, at(j0 + nb, j0), static_cast<int>(m),
                        at(j0, j0 + nb), static_cast<int>(m), &one, at(j0 + nb, j0 + nb), static_cast<int>(m)),
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
  using Real = std::conditional_t<std::is_same_v<T, double>, double, float>;
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

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) small_lu_kernel(const __grid_constant__ SmallLuParams p, bool dense_a) {
  for (int64_t b = cuda_device::global_thread(); b < p.batch; b += cuda_device::grid_threads())
    small_lu::run_one<T, N>(p, b, dense_a);
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
    Handles& h = handles_locked(launch.device());
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
    Handles& h = handles_locked(launch.device());
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
    const cublasSideMode_t side = p.left ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT;
    const cublasFillMode_t uplo = p.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const cublasDiagType_t diag = p.unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
    const int rows = static_cast<int>(p.rows), cols = static_cast<int>(p.cols), n = static_cast<int>(p.n);
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch.device());
    check(cublasSetStream(h.blas, launch.stream()), "[triangular_solve]");
    if (p.batch > 1) {
      auto a_ptrs = matrix_pointers(launch, a, p.n * p.n * static_cast<int64_t>(sizeof(T)), p.batch);
      auto b_ptrs = matrix_pointers(launch, x, p.rows * p.cols * static_cast<int64_t>(sizeof(T)), p.batch);
      check(trsm_batched(h.blas, side, uplo, diag, rows, cols, static_cast<const T* const*>(a_ptrs->data), n,
                         static_cast<T* const*>(b_ptrs->data), static_cast<int>(p.batch)),
            "[triangular_solve]");
    } else {
      check(trsm(h.blas, side, uplo, diag, rows, cols, a, n, x), "[triangular_solve]");
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
      Handles& h = handles_locked(launch.device());
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
