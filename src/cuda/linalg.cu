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

// Many small square matrices go to cuBLAS's batched kernels, the rest to cuSOLVER one matrix
// at a time (PyTorch's BatchLinearAlgebra.cpp split; cuBLAS's batched getrf is square only).
bool use_batched(int64_t batch, int64_t m, int64_t n) { return batch > 1 && m == n && m < 512; }

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
  launch.check("[lu_factor]");
  return ptrs;
}

__global__ void identity_pivots_kernel(int32_t* pivots, int64_t k, int64_t total) {
  for (int64_t i = cuda_device::global_thread(); i < total; i += cuda_device::grid_threads())
    pivots[i] = static_cast<int32_t>(i % k + 1);
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
    std::lock_guard<std::mutex> lock(handles_mutex());
    Handles& h = handles_locked(launch.device());
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

}  // namespace anvil::cuda_backend
