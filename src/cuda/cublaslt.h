#pragma once
// cuBLASLt state shared by the CUDA backend's GEMMs (bmm in matmul.cpp, FP8 scaled_mm): one
// handle per device, one workspace per (device, stream), and plans (descriptors, layouts and the
// heuristic's algorithm) cached by everything the heuristic saw. All of it lives for the process.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>

namespace anvil::cuda_backend::lt {

// NVIDIA's recommended cuBLASLt workspace on Hopper; one per stream, kept for the process.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Throws DeviceError("<op> cuBLASLt error: <name>: <text>") unless s is CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t s, const char* op);

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // the heuristic had an algorithm for this configuration
};

// key[0] tells the callers apart (kKeyBmm, kKeyScaledMm); the rest is theirs to fill.
using PlanKey = std::array<int64_t, 20>;
constexpr int64_t kKeyBmm = 1, kKeyScaledMm = 2;

struct Context {
  cublasLtHandle_t handle;
  void* workspace;  // kWorkspaceBytes, used only on `stream`
};
Context context(int device, cudaStream_t stream);

// The plan cached under key, made by make(handle) on first use (under the cache's lock).
const Plan& plan(int device, const PlanKey& key, const std::function<Plan(cublasLtHandle_t)>& make);

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int64_t batch = 1,
                                   int64_t batch_stride = 0);

// Largest power of two (<= 256) dividing the address of every batch's matrix: cuBLASLt picks
// kernels assuming 256-byte alignment unless told otherwise.
uint32_t alignment_of(const void* ptr, int64_t batch_stride_bytes = 0, int64_t batch = 1);

// Fills plan.algo with the heuristic's first choice for plan.desc and the layouts (out serves
// as C and D), given the operands' alignments {first, second, out}; sets plan.found. Split-k
// partials are added in the compute type. Returns the heuristic's status.
cublasStatus_t choose_algo(cublasLtHandle_t handle, Plan& plan, const std::array<uint32_t, 3>& align);

// Releases the descriptors of a plan that will not be cached as usable.
void destroy(Plan& plan);

}  // namespace anvil::cuda_backend::lt
