// CPU attention. For each (batch, kv head) the query rows of every query head that reads it
// (grouped-query heads share one read of K and V) go in chunks through two BLAS products:
// scores = Q K^T over the valid keys, the row softmax in place (scale, mask, causal limit,
// max-subtracted exp, row sums), then O = P V and one division and rounding per output. float32
// for float32 / bfloat16 / float16 (operands widened once per kv head), float64 for float64.
// BLAS runs its own threads; the loops around it are sequential.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"

namespace anvil::cpu {
namespace {

constexpr int64_t kChunkRows = 64;  // query rows per product: scores stay at 64 x S values

void gemm(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.f, c,
              static_cast<int>(ldc));
}
void gemm(bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
          double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0, c,
              static_cast<int>(ldc));
}

// rows x cols of src (row stride s_row, unit column stride) as an A matrix: in place when T is A
// and the row stride is a valid leading dim, else widened into buf. Returns (pointer, ld).
template <typename A, typename T>
std::pair<const A*, int64_t> as_matrix(const T* src, int64_t rows, int64_t cols, int64_t s_row, std::vector<A>& buf) {
  if constexpr (std::is_same_v<A, T>) {
    if (rows <= 1 || s_row >= cols) return {src, std::max<int64_t>({s_row, cols, 1})};
  }
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[static_cast<size_t>(r * cols + c)] = static_cast<A>(src[r * s_row + c]);
  return {buf.data(), std::max<int64_t>(cols, 1)};
}

template <typename T>
void attention_typed(const AttentionParams& p) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t E = p.head_dim, Ev = p.v_head_dim;
  std::vector<A> kbuf, vbuf, q(static_cast<size_t>(kChunkRows * E)), s, o(static_cast<size_t>(kChunkRows * Ev));
  std::vector<A> sum(kChunkRows);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = p.kv_lens ? std::clamp<int64_t>(p.kv_lens[b], 0, p.kv_len) : p.kv_len;
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      // Query heads h with h * heads_kv / heads_q == hk form one contiguous range.
      const int64_t h0 = (hk * p.heads_q + p.heads_kv - 1) / p.heads_kv;
      const int64_t h1 = std::min(p.heads_q, ((hk + 1) * p.heads_q + p.heads_kv - 1) / p.heads_kv);
      if (h0 >= h1) continue;
      const T* kp = static_cast<const T*>(p.k) + b * p.stride_k[0] + hk * p.stride_k[1];
      const T* vp = static_cast<const T*>(p.v) + b * p.stride_v[0] + hk * p.stride_v[1];
      const auto [K, ldk] = as_matrix<A>(kp, len, E, p.stride_k[2], kbuf);
      const auto [V, ldv] = as_matrix<A>(vp, len, Ev, p.stride_v[2], vbuf);
      s.resize(static_cast<size_t>(kChunkRows * std::max<int64_t>(len, 1)));
      const int64_t rows = (h1 - h0) * p.q_len;
      for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
        const int64_t nr = std::min(kChunkRows, rows - r0);
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t h = h0 + (r0 + r) / p.q_len, i = (r0 + r) % p.q_len;
          const T* qr = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1] + i * p.stride_q[2];
          for (int64_t e = 0; e < E; ++e) q[static_cast<size_t>(r * E + e)] = static_cast<A>(qr[e]);
        }
        if (len > 0 && E > 0) gemm(true, nr, len, E, q.data(), E, K, ldk, s.data(), len);
        if (E == 0) std::fill(s.begin(), s.begin() + nr * len, A(0));
        // Row softmax in place: keys past the causal limit or masked out get weight 0.
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t h = h0 + (r0 + r) / p.q_len, i = (r0 + r) % p.q_len;
          int64_t limit = len;
          if (p.causal) limit = std::clamp<int64_t>(i + 1 + (p.causal_from_end ? len - p.q_len : 0), 0, len);
          A* row = s.data() + r * len;
          const char* mask = static_cast<const char*>(p.mask);
          const int64_t mrow = b * p.stride_mask[0] + h * p.stride_mask[1] + i * p.stride_mask[2];
          A mx = -INFINITY;
          for (int64_t j = 0; j < limit; ++j) {
            A v = row[j] * static_cast<A>(p.scale);
            if (mask) {
              const int64_t m = mrow + j * p.stride_mask[3];
              if (p.mask_dtype == DType::Bool) {
                if (!reinterpret_cast<const bool*>(mask)[m]) v = -INFINITY;
              } else {
                dispatch_float_types(p.mask_dtype, "[attention]", [&](auto tag) {
                  v += static_cast<A>(reinterpret_cast<const typename decltype(tag)::type*>(mask)[m]);
                });
              }
            }
            row[j] = v;
            if (v > mx) mx = v;
          }
          // mx stays -inf when no key is left (the row gives zeros) or when every score is NaN.
          A total = 0;
          for (int64_t j = 0; j < len; ++j) {
            const A e = j < limit && mx != -INFINITY ? std::exp(row[j] - mx) : (j < limit && std::isnan(row[j]) ? row[j] : A(0));
            row[j] = e;
            total += e;
          }
          sum[static_cast<size_t>(r)] = total;
        }
        if (len > 0 && Ev > 0) gemm(false, nr, Ev, len, s.data(), len, V, ldv, o.data(), Ev);
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t h = h0 + (r0 + r) / p.q_len, i = (r0 + r) % p.q_len;
          T* out = static_cast<T*>(p.out) + b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2];
          const A total = sum[static_cast<size_t>(r)];
          for (int64_t e = 0; e < Ev; ++e)
            out[e] = T(total == A(0) ? A(0) : o[static_cast<size_t>(r * Ev + e)] / total);
        }
      }
    }
  }
}

}  // namespace

void attention(const AttentionParams& p) {
  dispatch_float_types(p.dtype, "[attention]", [&](auto tag) { attention_typed<typename decltype(tag)::type>(p); });
}

}  // namespace anvil::cpu
