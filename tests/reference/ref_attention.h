#pragma once
// Attention reference in float64: scaled_dot_product_attention / decode_attention semantics over
// [B, Hq, L, E] queries and [B, Hk, S, E] / [B, Hk, S, Ev] keys / values (query head h reads kv
// head h * Hk / Hq), with the tolerance term the kernels' float32 arithmetic needs.
#include <vector>

#include "reference/ref_array.h"

namespace ref {

struct AttentionRef {
  Array out;  // [B, Hq, L, Ev]; rows with no key left are zeros
  Array err;  // per element: float32 dots move a score by 2 E u |q||k| (the weights by twice
              // that), exp and the sums over S keys add (2 S + 16) u; times sum_j p_j |v_j|
  Array mag;  // per element: sum_j p_j |v_j| (p the normalised weights); a kernel that rounds p
              // to a type of unit roundoff u_p before the p v product adds up to u_p mag
};
// mask: null or the full [B, Hq, L, S], bool (0 / 1, true attends) when mask_bool, else added.
// lens: per-batch valid key counts (clamped to S) or null. causal: key j <= i (+ len - L when
// from_end). u: the unit roundoff of the kernels' accumulation type (float32's by default).
AttentionRef attention(const Array& q, const Array& k, const Array& v, const Array* mask, bool mask_bool,
                       const std::vector<int64_t>* lens, bool causal, bool from_end, double scale,
                       double u = 0x1p-24);

}  // namespace ref
