#pragma once
// Grouped products with group ends on the device.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// Which operand's dimension offs partitions (see grouped_mm in anvil/nn.h).
enum class GroupedLayout : int8_t {
  RowsByGroup,  // a [m, k], b [G, k, n] -> out [m, n]: rows [s_g, e_g) of a use b[g]
  ColsByGroup,  // a [G, m, k], b [k, n] -> out [m, n]: columns [s_g, e_g) of b use a[g]
  KByGroup,     // a [m, k], b [k, n] -> out [G, m, n]: out[g] = a[:, s_g:e_g] @ b[s_g:e_g, :]
  Batched,      // a [G, m, k], b [G, k, n] -> out [G, m, n], no offs
};

// Grouped product with group ends read on the device: e_g = clamp(offs[g], 0, extent) with the
// extent the partitioned size (m, n or k), s_g = e_{g-1} (0 for g = 0), a group with e_g <= s_g
// is empty (KByGroup writes zeros for it). Rows (columns) past e_{G-1} are not written.
// b is addressed as [.., k, n] (stride_b_row steps k, stride_b_col steps n); any strides.
// out has unit column stride. float32 accumulation, one rounding to out_dtype. The FP8 form
// (RowsByGroup only): b float8 with scale_b [G, n] contiguous, a float8 with scale_a [m] or a
// float dtype with scale_a null; out = round(acc * scale_a[i] * scale_b[g, j]).
struct GroupedMmParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  const int32_t* offs = nullptr;  // [groups] on the operands' device; null for Batched
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  DType a_dtype = kBFloat16, b_dtype = kBFloat16, out_dtype = kBFloat16;
  GroupedLayout layout = GroupedLayout::RowsByGroup;
  int64_t groups = 0, m = 0, n = 0, k = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 1;
  int64_t stride_b_batch = 0, stride_b_row = 0, stride_b_col = 1;
  int64_t stride_out_batch = 0, stride_out_row = 0;
};

#define ANVIL_GROUPED_MM_KERNELS(X)      \
  X(grouped_mm, const GroupedMmParams&)
ANVIL_DECLARE_KERNELS(ANVIL_GROUPED_MM_KERNELS)

}  // namespace anvil
