// cuBLASLt handles, workspaces and the plan cache (see cublaslt.h).
#include "cuda/cublaslt.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "anvil/error.h"
#include "cuda/allocator.h"

namespace anvil::cuda_backend::lt {
namespace {

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct State {
  std::mutex mu;
  std::unordered_map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans;  // read-only once built; nodes are stable
};

// Never destroyed: cuBLASLt objects are released with the process.
State& state() {
  static auto* s = new State;
  return *s;
}

cublasLtHandle_t handle_locked(State& s, int device) {
  auto it = s.handles.find(device);
  if (it != s.handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  check(cublasLtCreate(&h), "[cublasLt]");
  s.handles.emplace(device, h);
  return h;
}

}  // namespace

void check(cublasStatus_t s, const char* op) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  cudaGetLastError();
  throw DeviceError(
      detail::cat_message(op, " cuBLASLt error: ", cublasLtGetStatusName(s), ": ", cublasLtGetStatusString(s)));
}

Context context(int device, cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cublasLtHandle_t h = handle_locked(s, device);
  auto key = std::make_pair(device, stream);
  auto it = s.workspaces.find(key);
  if (it == s.workspaces.end())
    it = s.workspaces.emplace(key, allocator::allocate(device, kWorkspaceBytes, stream, /*persistent=*/true)).first;
  return {h, it->second};
}

const Plan& plan(int device, const PlanKey& key, const std::function<Plan(cublasLtHandle_t)>& make) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.plans.find(key);
  if (it == s.plans.end()) it = s.plans.emplace(key, make(handle_locked(s, device))).first;
  return it->second;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int64_t batch,
                                   int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld), "[cublasLt]");
  if (batch != 1) {
    int32_t count = static_cast<int32_t>(batch);
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
          "[cublasLt]");
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                           sizeof(batch_stride)),
          "[cublasLt]");
  }
  return layout;
}

uint32_t alignment_of(const void* ptr, int64_t batch_stride_bytes, int64_t batch) {
  uint64_t a = reinterpret_cast<uintptr_t>(ptr) | 256u;
  if (batch > 1) a |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<uint32_t>(a & (~a + 1));
}

cublasStatus_t choose_algo(cublasLtHandle_t handle, Plan& plan, const std::array<uint32_t, 3>& align) {
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "[cublasLt]");
  uint64_t ws = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
        "[cublasLt]");
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]}};
  for (const auto& [attr, bytes] : alignments)
    check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)), "[cublasLt]");
  // Split-k partials must be added in the compute type: the in-place and output-type schemes add
  // them in bf16 (H200: bf16 [4, 1000] x [1000, 127] with row-major B was off by 5e-2).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                             sizeof(reduction)),
        "[cublasLt]");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.first, plan.second, plan.out,
                                                           plan.out, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan.found) plan.algo = result.algo;
  return st;
}

void destroy(Plan& plan) {
  if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  if (plan.first) cublasLtMatrixLayoutDestroy(plan.first);
  if (plan.second) cublasLtMatrixLayoutDestroy(plan.second);
  if (plan.out) cublasLtMatrixLayoutDestroy(plan.out);
  plan.desc = nullptr;
  plan.first = plan.second = plan.out = nullptr;
}

}  // namespace anvil::cuda_backend::lt
