#pragma once
// Top-k and the sampler.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// Top-k along the middle dim of a contiguous [outer, dim_size, inner] input: values (input dtype)
// and int64 indices, each contiguous [outer, k, inner]. largest: NaN ranks above every number.
// Ties give the lower index first. sorted: descending (largest) / ascending order; else any order.
struct TopkParams {
  const void* in = nullptr;
  void* values = nullptr;
  int64_t* indices = nullptr;
  DType dtype = kFloat32;
  int64_t outer = 0, dim_size = 0, inner = 0, k = 0;
  bool largest = true, sorted = true;
};

// One token id per row of logits [rows, vocab] (row stride stride_row, unit column stride):
// probabilities softmax(logits / temperature), restricted to the top_k largest (0 = all), then
// to the smallest prefix of them, in descending order, whose mass reaches top_p (1 = all),
// renormalised; one uniform draw per row from Philox(seed = rng_state[0], counter =
// rng_state[1] + row). rng_state [2] int64 lives on the logits' device; the kernel adds `rows`
// to rng_state[1] after drawing, so a replayed CUDA graph draws fresh numbers. Greedy arrives
// as top_k = 1; with no cut at all (top_k 0, top_p 1) the draw walks the row in index order.
struct SampleParams {
  const void* logits = nullptr;
  int64_t* out = nullptr;
  int64_t* rng_state = nullptr;
  DType dtype = kFloat32;
  int64_t rows = 0, vocab = 0, stride_row = 0;
  float temperature = 1.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
};

#define ANVIL_TOPK_KERNELS(X)     \
  X(topk, const TopkParams&)      \
  X(sample, const SampleParams&)
ANVIL_DECLARE_KERNELS(ANVIL_TOPK_KERNELS)

}  // namespace anvil
