#pragma once
// Rotary embeddings, and the fused q / k norm + rope + KV-cache write of attention layers.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// Neox-style rotary embedding over the last dim (head_dim) of x, one position per row:
//   a = x[.., c], b = x[.., c + half] for c < half = rotary_dim / 2,
//   angle = float(pos) * inv_freq[c], out = (a cos - b sin, b cos + a sin) in float32;
//   columns >= rotary_dim are copied. Rows are the points of the leading `ndim` dims; positions
//   (int32 or int64) are read on the device through their (broadcast, maybe 0) strides.
struct RopeParams {
  const void* x = nullptr;
  void* out = nullptr;
  const void* positions = nullptr;
  const float* inv_freq = nullptr;  // [rotary_dim / 2] float32 on x's device
  DType dtype = kFloat32, pos_dtype = kInt64;
  int ndim = 0;
  int64_t rows = 0, head_dim = 0, rotary_dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t stride_x[kMaxDims] = {}, stride_out[kMaxDims] = {}, stride_pos[kMaxDims] = {};
};

// qk_norm_rope_cache: rows (b, l, j) of qkv, j over n_heads q heads, n_kv_heads k heads, n_kv_heads
// v heads of head_dim columns. q / k heads: rms_norm (no weight pointer: no norm) rounded to the
// dtype, then neox rope at position start[b] + l; q goes to q_out [B, n_heads, L, head_dim]
// (contiguous), k and v to their caches at row start[b] + l (rows outside [0, cache_rows) dropped).
struct QkNormRopeCacheParams {
  const void* qkv = nullptr;        // unit-stride channels
  const void* q_weight = nullptr;   // [head_dim] or null
  const void* k_weight = nullptr;   // [head_dim] or null
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  const int32_t* start = nullptr;   // [batch]
  void* q_out = nullptr;
  void* k_cache = nullptr;          // [batch, n_kv_heads, cache_rows, head_dim], unit-stride last dim
  void* v_cache = nullptr;
  DType dtype = kFloat32, weight_dtype = kFloat32;  // both weights share weight_dtype
  int64_t batch = 0, len = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, rotary_dim = 0, cache_rows = 0;
  int64_t stride_qkv[2] = {};       // batch, token
  int64_t stride_k[3] = {}, stride_v[3] = {};
  double eps = 0;
};

#define ANVIL_ROPE_KERNELS(X)                          \
  X(rope, const RopeParams&)                           \
  X(qk_norm_rope_cache, const QkNormRopeCacheParams&)
ANVIL_DECLARE_KERNELS(ANVIL_ROPE_KERNELS)

}  // namespace anvil
