// bmm on CUDA through cuBLASLt: float32 (CUBLAS_COMPUTE_32F: TF32 off, full float32 products),
// float64, float16 and bfloat16 (float32 accumulation) and complex64.
// cuBLASLt is column-major: the row-major C = A B is computed as C^T = B^T A^T, where a
// row-major matrix read column-major is its transpose, so B is cuBLASLt's first operand.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/dispatch.h"
#include "core/kernels.h"
#include "cuda/allocator.h"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

// NVIDIA's recommended cuBLASLt workspace on Hopper; one per stream, kept for the process.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

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

void check_lt(cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  cudaGetLastError();
  throw DeviceError(
      detail::cat_message("[bmm] cuBLASLt error: ", cublasLtGetStatusName(s), ": ", cublasLtGetStatusString(s)));
}

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

// Largest power of two (<= 256) dividing the address of every batch's matrix: cuBLASLt picks
// kernels assuming 256-byte alignment unless told otherwise.
uint32_t alignment_of(const void* ptr, int64_t batch_stride_bytes, int64_t batch) {
  uint64_t a = reinterpret_cast<uintptr_t>(ptr) | 256u;
  if (batch > 1) a |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<uint32_t>(a & (~a + 1));
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

using PlanKey = std::array<int64_t, 17>;

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct LtState {
  std::mutex mu;
  std::unordered_map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans;  // descriptors are read-only once built
};

// Never destroyed: cuBLASLt objects are released with the process.
LtState& lt_state() {
  static auto* s = new LtState;
  return *s;
}

cublasLtHandle_t lt_handle(LtState& s, int device) {
  auto it = s.handles.find(device);
  if (it != s.handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  check_lt(cublasLtCreate(&h));
  s.handles.emplace(device, h);
  return h;
}

void* lt_workspace(LtState& s, int device, cudaStream_t stream) {
  auto key = std::make_pair(device, stream);
  auto it = s.workspaces.find(key);
  if (it != s.workspaces.end()) return it->second;
  void* ws = allocator::allocate(device, kWorkspaceBytes, stream, /*persistent=*/true);
  s.workspaces.emplace(key, ws);
  return ws;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int64_t batch,
                                   int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  int32_t count = static_cast<int32_t>(batch);
  check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                            sizeof(batch_stride)));
  return layout;
}

template <typename T>
Plan make_plan(cublasLtHandle_t handle, const BmmParams& p, const Operand& first, const Operand& second,
               const std::array<uint32_t, 3>& align) {
  using Tr = LtTraits<T>;
  Plan plan;
  check_lt(cublasLtMatmulDescCreate(&plan.desc, Tr::kCompute, Tr::kScale));
  check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &first.op, sizeof(first.op)));
  check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &second.op, sizeof(second.op)));
  plan.first = make_layout(Tr::kData, first.rows, first.cols, first.ld, p.batch, p.stride_b_batch);
  plan.second = make_layout(Tr::kData, second.rows, second.cols, second.ld, p.batch, p.stride_a_batch);
  plan.out = make_layout(Tr::kData, static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.m), p.n, p.batch, p.m * p.n);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]}};
  for (const auto& [attr, bytes] : alignments)
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
  // Split-k partials must be added in the compute type: the in-place and output-type schemes add
  // them in bf16 (H200: bf16 [4, 1000] x [1000, 127] with row-major B was off by 5e-2).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                sizeof(reduction)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.first, plan.second, plan.out, plan.out,
                                                     pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatmulDescDestroy(plan.desc);
    cublasLtMatrixLayoutDestroy(plan.first);
    cublasLtMatrixLayoutDestroy(plan.second);
    cublasLtMatrixLayoutDestroy(plan.out);
    check_lt(st);
    throw DeviceError(detail::cat_message("[bmm] cuBLASLt has no algorithm for ", dtype_name(p.dtype), " batch ",
                                          p.batch, ", m ", p.m, ", n ", p.n, ", k ", p.k));
  }
  plan.algo = result.algo;
  return plan;
}

template <typename T>
void bmm_lt(BmmParams p, const KernelLaunch& launch) {
  using Tr = LtTraits<T>;
  const int64_t es = sizeof(T);
  // A batched against a shared B with rows continuing across batches is one [batch * m, k] GEMM.
  if (p.batch > 1 && p.stride_b_batch == 0 && p.stride_a_col == 1 && p.stride_a_batch == p.m * p.stride_a_row) {
    p.m *= p.batch;
    p.batch = 1;
  }
  ANVIL_CHECK(p.batch <= INT32_MAX, ShapeError, "[bmm] batch ", p.batch, " exceeds cuBLASLt's int32 batch count");
  const Operand first = transposed_view(p.k, p.n, p.stride_b_row, p.stride_b_col);    // B^T: n x k
  const Operand second = transposed_view(p.m, p.k, p.stride_a_row, p.stride_a_col);   // A^T: k x m
  const std::array<uint32_t, 3> align = {alignment_of(p.b, p.stride_b_batch * es, p.batch),
                                         alignment_of(p.a, p.stride_a_batch * es, p.batch),
                                         alignment_of(p.c, p.m * p.n * es, p.batch)};
  const PlanKey key = {launch.device(), static_cast<int64_t>(p.dtype), p.batch, p.m, p.n, p.k,
                       static_cast<int64_t>(first.op), first.ld, static_cast<int64_t>(second.op), second.ld,
                       p.stride_a_batch, p.stride_b_batch, align[0], align[1], align[2], 0, 0};
  LtState& s = lt_state();
  cublasLtHandle_t handle;
  void* workspace;
  const Plan* plan;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    handle = lt_handle(s, launch.device());
    workspace = lt_workspace(s, launch.device(), launch.stream());
    auto it = s.plans.find(key);
    if (it == s.plans.end()) it = s.plans.emplace(key, make_plan<T>(handle, p, first, second, align)).first;
    plan = &it->second;  // unordered_map nodes are stable
  }
  const typename Tr::Scale alpha(1), beta(0);
  check_lt(cublasLtMatmul(handle, plan->desc, &alpha, p.b, plan->first, p.a, plan->second, &beta, p.c, plan->out, p.c,
                          plan->out, &plan->algo, workspace, kWorkspaceBytes, launch.stream()));
}

}  // namespace

void bmm(const BmmParams& p) {
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  KernelLaunch launch(p.c);
  if (p.k == 0) {  // an empty sum: C = 0 (cuBLASLt rejects k = 0)
    size_t bytes = static_cast<size_t>(p.batch * p.m * p.n) * element_size(p.dtype);
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
