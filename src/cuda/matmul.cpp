// bmm on CUDA through cuBLASLt: float32 (CUBLAS_COMPUTE_32F: TF32 off, full float32 products),
// float64, float16 and bfloat16 (float32 accumulation) and complex64.
// cuBLASLt is column-major: the row-major C = A B is computed as C^T = B^T A^T, where a
// row-major matrix read column-major is its transpose, so B is cuBLASLt's first operand.
// Handles, workspaces and the plan cache are shared with scaled_mm (cuda/cublaslt.h).
#include <algorithm>
#include <array>
#include <utility>

#include "core/dispatch.h"
#include "core/kernels/matmul.h"
#include "cuda/cublaslt.h"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

template <typename T> struct LtTraits { static constexpr bool kSupported = false; };
template <> struct LtTraits<float> {
  static constexpr bool kSupported = true;
  static constexpr cudaDataType_t kData = CUDA_R_32F, kScale = CUDA_R_32F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_32F;
  using Scale = float;
};
template <> struct LtTraits<double> {
  static constexpr bool kSupported = true;
  static constexpr cudaDataType_t kData = CUDA_R_64F, kScale = CUDA_R_64F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_64F;
  using Scale = double;
};
template <> struct LtTraits<Half> {
  static constexpr bool kSupported = true;
  static constexpr cudaDataType_t kData = CUDA_R_16F, kScale = CUDA_R_32F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_32F;
  using Scale = float;
};
template <> struct LtTraits<BFloat16> {
  static constexpr bool kSupported = true;
  static constexpr cudaDataType_t kData = CUDA_R_16BF, kScale = CUDA_R_32F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_32F;
  using Scale = float;
};
template <> struct LtTraits<Complex64> {
  static constexpr bool kSupported = true;
  static constexpr cudaDataType_t kData = CUDA_C_32F, kScale = CUDA_C_32F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_32F;
  using Scale = Complex64;
};

// A row-major [rows, cols] matrix X with element strides, seen by cuBLASLt as X^T (cols x rows).
struct Operand {
  cublasOperation_t op;
  uint64_t rows, cols;  // of the stored column-major matrix
  int64_t ld;
};

// The stride of a dim of size 1 is never followed, so it does not decide the layout.
Operand transposed_view(int64_t rows, int64_t cols, int64_t stride_row, int64_t stride_col) {
  const auto r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols);
  if ((stride_col == 1 || cols <= 1) && (rows <= 1 || stride_row >= cols))
    return {CUBLAS_OP_N, c, r, rows <= 1 ? std::max<int64_t>(cols, 1) : stride_row};
  if ((stride_row == 1 || rows <= 1) && (cols <= 1 || stride_col >= rows))
    return {CUBLAS_OP_T, r, c, cols <= 1 ? std::max<int64_t>(rows, 1) : stride_col};
  throw DeviceError(detail::cat_message("[bmm] cuBLASLt needs one unit stride per matrix, got strides (", stride_row,
                                        ", ", stride_col, ") for a [", rows, ", ", cols, "] operand"));
}

constexpr const char* kOp = "[bmm]";

template <typename T>
lt::Plan make_plan(cublasLtHandle_t handle, const BmmParams& p, const Operand& first, const Operand& second,
                   const std::array<uint32_t, 3>& align) {
  using Tr = LtTraits<T>;
  lt::Plan plan;
  lt::check(cublasLtMatmulDescCreate(&plan.desc, Tr::kCompute, Tr::kScale), kOp);
  lt::check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &first.op, sizeof(first.op)), kOp);
  lt::check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &second.op, sizeof(second.op)),
            kOp);
  plan.first = lt::make_layout(Tr::kData, first.rows, first.cols, first.ld, p.batch, p.stride_b_batch);
  plan.second = lt::make_layout(Tr::kData, second.rows, second.cols, second.ld, p.batch, p.stride_a_batch);
  const cudaDataType_t c_type = p.c_dtype == p.dtype ? Tr::kData : CUDA_R_32F;
  plan.out = lt::make_layout(c_type, static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.m), p.stride_c_row, p.batch,
                             p.stride_c_batch);
  const cublasStatus_t st = lt::choose_algo(handle, plan, align);
  if (!plan.found) {
    lt::destroy(plan);
    lt::check(st, kOp);
    throw DeviceError(detail::cat_message(kOp, " cuBLASLt has no algorithm for ", dtype_name(p.dtype), " batch ",
                                          p.batch, ", m ", p.m, ", n ", p.n, ", k ", p.k));
  }
  return plan;
}

template <typename T>
void bmm_lt(BmmParams p, const KernelLaunch& launch) {
  using Tr = LtTraits<T>;
  const int64_t es = sizeof(T), es_c = static_cast<int64_t>(element_size(p.c_dtype));
  ANVIL_CHECK(p.c_dtype == p.dtype || ((p.dtype == kFloat16 || p.dtype == kBFloat16) && p.c_dtype == kFloat32),
              DTypeError, "[bmm] output dtype ", dtype_name(p.c_dtype), " does not fit ", dtype_name(p.dtype),
              " operands");
  // One row of C has no row stride: a conv chunk's row inside an output plane of 2^31 + 40
  // (a one-channel conv1d) gave cuBLASLt a leading dimension it refused (NOT_SUPPORTED).
  if (p.m == 1) p.stride_c_row = p.n;
  // A batched against a shared B with rows continuing across batches is one [batch * m, k] GEMM.
  if (p.batch > 1 && p.stride_b_batch == 0 && p.stride_a_col == 1 && p.stride_a_batch == p.m * p.stride_a_row &&
      p.stride_c_batch == p.m * p.stride_c_row) {
    p.m *= p.batch;
    p.batch = 1;
  }
  ANVIL_CHECK(p.batch <= INT32_MAX, ShapeError, "[bmm] batch ", p.batch, " exceeds cuBLASLt's int32 batch count");
  const Operand first = transposed_view(p.k, p.n, p.stride_b_row, p.stride_b_col);    // B^T: n x k
  const Operand second = transposed_view(p.m, p.k, p.stride_a_row, p.stride_a_col);   // A^T: k x m
  const std::array<uint32_t, 3> align = {lt::alignment_of(p.b, p.stride_b_batch * es, p.batch),
                                         lt::alignment_of(p.a, p.stride_a_batch * es, p.batch),
                                         lt::alignment_of(p.c, p.stride_c_batch * es_c, p.batch)};
  const lt::PlanKey key = {lt::kKeyBmm, launch.device(), static_cast<int64_t>(p.dtype), p.batch, p.m, p.n, p.k,
                           static_cast<int64_t>(first.op), first.ld, static_cast<int64_t>(second.op), second.ld,
                           p.stride_a_batch, p.stride_b_batch, align[0], align[1], align[2],
                           static_cast<int64_t>(p.c_dtype), p.stride_c_batch, p.stride_c_row};
  const lt::Context ctx = lt::context(launch.device(), launch.stream());
  const lt::Plan& plan = lt::plan(launch.device(), key, [&](cublasLtHandle_t handle) {
    return make_plan<T>(handle, p, first, second, align);
  });
  const typename Tr::Scale alpha(1), beta(p.accumulate ? 1 : 0);
  lt::check(cublasLtMatmul(ctx.handle, plan.desc, &alpha, p.b, plan.first, p.a, plan.second, &beta, p.c, plan.out,
                           p.c, plan.out, &plan.algo, ctx.workspace, lt::kWorkspaceBytes, launch.stream()),
            kOp);
}

}  // namespace

void bmm(const BmmParams& p) {
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  KernelLaunch launch(p.c);
  if (p.k == 0) {  // an empty sum: C = 0 (cuBLASLt rejects k = 0), unchanged when accumulating
    if (p.accumulate) return;
    ANVIL_CHECK(p.stride_c_batch == p.m * p.n && p.stride_c_row == p.n, ShapeError,
                "[bmm] an empty sum into a strided C is not supported");
    size_t bytes = static_cast<size_t>(p.batch * p.m * p.n) * element_size(p.c_dtype);
    ANVIL_CUDA_CHECK("[bmm]", cudaMemsetAsync(p.c, 0, bytes, launch.stream()));
    return;
  }
  dispatch_all_types(p.dtype, "[bmm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (LtTraits<T>::kSupported) {
      bmm_lt<T>(p, launch);
    } else {
      throw DTypeError(detail::cat_message("[bmm] not implemented on CUDA for '", dtype_name(p.dtype), "'"));
    }
  });
}

}  // namespace anvil::cuda_backend
