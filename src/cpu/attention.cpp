// CPU attention: one (batch, query head, query row) per work item; the row's scores over its
// valid keys in the accumulation type (float32, float64 for float64), max-subtracted exp, the
// weighted sum of value rows, one division and one rounding. Keys and values are read in place
// through their strides (the head-dim stride is 1).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"

namespace anvil::cpu {
namespace {

// Dot product with eight independent partial sums (vectorisable without reassociation flags).
template <typename A, typename T>
A dot(const T* a, const T* b, int64_t n) {
  A part[8] = {};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int u = 0; u < 8; ++u) part[u] += static_cast<A>(a[d + u]) * static_cast<A>(b[d + u]);
  A s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; d < n; ++d) s += static_cast<A>(a[d]) * static_cast<A>(b[d]);
  return s;
}

template <typename T>
void attention_typed(const AttentionParams& p) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t rows = p.batch * p.heads_q * p.q_len;
  const int64_t work = rows * p.kv_len * (p.head_dim + p.v_head_dim);
#pragma omp parallel if (work >= (1 << 16))
  {
    std::vector<A> score(static_cast<size_t>(p.kv_len)), acc(static_cast<size_t>(p.v_head_dim));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % p.q_len, h = r / p.q_len % p.heads_q, b = r / (p.q_len * p.heads_q);
      const int64_t hk = h * p.heads_kv / p.heads_q;
      int64_t len = p.kv_len;
      if (p.kv_lens) len = std::clamp<int64_t>(p.kv_lens[b], 0, p.kv_len);
      int64_t limit = len;  // keys [0, limit) may be attended
      if (p.causal) limit = std::clamp<int64_t>(i + 1 + (p.causal_from_end ? len - p.q_len : 0), 0, len);
      const T* q = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1] + i * p.stride_q[2];
      const T* k = static_cast<const T*>(p.k) + b * p.stride_k[0] + hk * p.stride_k[1];
      const T* v = static_cast<const T*>(p.v) + b * p.stride_v[0] + hk * p.stride_v[1];
      const char* mask = static_cast<const char*>(p.mask);
      const int64_t mask_row = b * p.stride_mask[0] + h * p.stride_mask[1] + i * p.stride_mask[2];
      A mx = -INFINITY;
      bool any = false;
      for (int64_t j = 0; j < limit; ++j) {
        A s = dot<A>(q, k + j * p.stride_k[2], p.head_dim) * static_cast<A>(p.scale);
        if (mask) {
          const int64_t m = mask_row + j * p.stride_mask[3];
          if (p.mask_dtype == DType::Bool) {
            if (!reinterpret_cast<const bool*>(mask)[m]) s = -INFINITY;
          } else {
            dispatch_float_types(p.mask_dtype, "[attention]", [&](auto tag) {
              using M = typename decltype(tag)::type;
              s += static_cast<A>(reinterpret_cast<const M*>(mask)[m]);
            });
          }
        }
        score[static_cast<size_t>(j)] = s;
        if (!(s == -INFINITY)) any = true;
        if (s > mx) mx = s;
      }
      T* out = static_cast<T*>(p.out) + b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2];
      std::fill(acc.begin(), acc.end(), A(0));
      if (!any) {  // no key left: zeros, as PyTorch's safe softmax
        for (int64_t d = 0; d < p.v_head_dim; ++d) out[d] = T(A(0));
        continue;
      }
      // A NaN score leaves mx at the others' max; exp(NaN) spreads NaN through the sum, as torch.
      if (mx == -INFINITY || std::isnan(mx)) mx = 0;
      A sum = 0;
      for (int64_t j = 0; j < limit; ++j) {
        const A e = std::exp(score[static_cast<size_t>(j)] - mx);
        if (e == A(0)) continue;
        sum += e;
        const T* vj = v + j * p.stride_v[2];
        for (int64_t d = 0; d < p.v_head_dim; ++d) acc[static_cast<size_t>(d)] += e * static_cast<A>(vj[d]);
      }
      for (int64_t d = 0; d < p.v_head_dim; ++d) out[d] = T(acc[static_cast<size_t>(d)] / sum);
    }
  }
}

}  // namespace

void attention(const AttentionParams& p) {
  dispatch_float_types(p.dtype, "[attention]", [&](auto tag) { attention_typed<typename decltype(tag)::type>(p); });
}

}  // namespace anvil::cpu
