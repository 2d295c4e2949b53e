#pragma once
// Attention and the KV cache (append, prefetch).
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// Attention over batch x n_heads of q [q_len, head_dim], k [kv_len, head_dim], v [kv_len,
// v_head_dim]; query head h reads key / value head h * n_kv_heads / n_heads (grouped-query heads
// and a broadcast single head alike). Every operand is addressed through strides over [batch,
// head, row, col] (0 for broadcast dims; the last stride of q, k, v and out is 1). For query row
// i of batch b the valid keys are j < len = (kv_lens ? min(kv_lens[b], kv_len) : kv_len), and
// with `causal` also j <= i + (causal_from_end ? len - q_len : 0). score_j = dot(q_i, k_j) *
// scale + mask (mask: null; bool with true = attend; or additive of mask_dtype); a key that is
// not valid or masked out does not take part. p = softmax(scores) in float32; out_i = sum_j p_j
// v_j with float32 accumulation, one rounding to dtype; a row with no key left gives zeros.
struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  const void* mask = nullptr;
  const int32_t* kv_lens = nullptr;  // [batch] on the operands' device, or null
  DType dtype = kFloat32, mask_dtype = kBool;
  int64_t batch = 0, n_heads = 0, n_kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, v_head_dim = 0;
  int64_t stride_q[4] = {}, stride_k[4] = {}, stride_v[4] = {}, stride_out[4] = {}, stride_mask[4] = {};
  double scale = 1.0;
  bool causal = false;
  bool causal_from_end = false;
};

// KV cache append: cache[b, h, pos[b] + l, :] = src[b, h, l, :] for l < rows where pos[b] + l lies
// in [0, cache_rows); nothing else is written. pos int32 [batch] is read on the device. Strides
// in elements over [batch, head, row]; the last dim (cols) is unit-stride in both.
struct CacheWriteParams {
  void* cache = nullptr;
  const void* src = nullptr;
  const int32_t* pos = nullptr;
  int64_t elem_size = 2;
  int64_t batch = 0, n_heads = 0, rows = 0, cols = 0, cache_rows = 0;
  int64_t stride_cache[3] = {}, stride_src[3] = {};
};

// cache_prefetch: `slices` spans of `span_bytes` at base + index[i] * stride_bytes (index null:
// one span at base); indices outside [0, count) are skipped.
struct PrefetchParams {
  const void* base = nullptr;
  const void* index = nullptr;  // int32 / int64 [slices] or null
  bool index64 = true;
  int64_t slices = 1, count = 1, stride_bytes = 0, span_bytes = 0;
};

#define ANVIL_ATTENTION_KERNELS(X)          \
  X(attention, const AttentionParams&)      \
  X(cache_write, const CacheWriteParams&)   \
  X(cache_prefetch, const PrefetchParams&)
ANVIL_DECLARE_KERNELS(ANVIL_ATTENTION_KERNELS)

}  // namespace anvil
