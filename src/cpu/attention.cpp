// CPU attention.
// Decode (few query rows per kv head: <= 8 = the GQA group x q_len, no attn_mask, float32 /
// bfloat16 / float16): each (batch, kv head, key split) streams its K and V rows once in blocks
// of kDecodeKeys. Scores of the block's keys against 4 query rows at a time accumulate one
// vector per (row, key) and take their horizontal sums in one ConcatEven / ConcatOdd tree, then
// an online softmax per row (the block max, exp_sum's vector exp, the running sum and output
// rescaled when the max grows), and o += p V by a Highway loop that widens each V row once for
// all rows. Splits of one kv head meet in a combine. float32 accumulation, one rounding.
// Otherwise, for each (batch, kv head) the query rows of every query head that reads it
// (grouped-query heads share one read of K and V) go in chunks through two BLAS products:
// scores = Q K^T over the valid keys, the row softmax in place (scale, mask, causal limit,
// max-subtracted exp, row sums), then O = P V and one division and rounding per output. float32
// for float32 / bfloat16 / float16 (operands widened once per kv head), float64 for float64.
// BLAS runs its own threads; the loops around it are sequential.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/attention.h"
#include "cpu/simd.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// s[r * lds + j] = dot(q[r, :], k[j, :]) for r < 4 and j < keys; q is [4, E] float32 (rows past
// the caller's zero), k rows float32 / bfloat16 / float16 at stride_k elements. Lanes(df) (row,
// key) products accumulate at once (4 rows x Lanes / 4 keys); their horizontal sums come out of
// one ConcatEven / ConcatOdd tree as one vector, instead of one reduction per product. Columns
// past the last whole vector are added by a scalar loop.
template <typename T>
void ScoresT(const T* HWY_RESTRICT k, int64_t stride_k, const float* HWY_RESTRICT q, int64_t E, int64_t keys,
             float* HWY_RESTRICT s, int64_t lds) {
#if HWY_TARGET == HWY_SCALAR
  for (int r = 0; r < 4; ++r)
    for (int64_t j = 0; j < keys; ++j) {
      float t = 0.f;
      for (int64_t c = 0; c < E; ++c) t += q[r * E + c] * static_cast<float>(k[j * stride_k + c]);
      s[r * lds + j] = t;
    }
#else
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(df));
  constexpr int64_t G = N / 4;  // keys per group
  static_assert(N >= 4 && N <= 16);
  HWY_ALIGN float sums[N];
  const int64_t whole = E / N * N;
  for (int64_t j0 = 0; j0 < keys; j0 += G) {
    const T* kr[G];
    for (int64_t g = 0; g < G; ++g) kr[g] = k + std::min(j0 + g, keys - 1) * stride_k;
    V acc[N];
    for (int64_t i = 0; i < N; ++i) acc[i] = hn::Zero(df);
    for (int64_t c = 0; c < whole; c += N) {
      V kv[G], qv[4];
      for (int64_t g = 0; g < G; ++g) kv[g] = LoadAsF32(df, kr[g] + c);
      for (int r = 0; r < 4; ++r) qv[r] = hn::LoadU(df, q + r * E + c);
      for (int r = 0; r < 4; ++r)
        for (int64_t g = 0; g < G; ++g) acc[r * G + g] = hn::MulAdd(qv[r], kv[g], acc[r * G + g]);
    }
    // Tree: each level halves the vectors; lane order stays acc[0] .. acc[N - 1].
    for (int64_t n = N; n > 1; n /= 2)
      for (int64_t i = 0; i < n / 2; ++i)
        acc[i] = hn::Add(hn::ConcatEven(df, acc[2 * i + 1], acc[2 * i]), hn::ConcatOdd(df, acc[2 * i + 1], acc[2 * i]));
    hn::Store(acc[0], df, sums);
    const int64_t ng = std::min(G, keys - j0);
    for (int r = 0; r < 4; ++r)
      for (int64_t g = 0; g < ng; ++g) {
        float t = sums[r * G + g];
        for (int64_t c = whole; c < E; ++c) t += q[r * E + c] * static_cast<float>(kr[g][c]);
        s[r * lds + j0 + g] = t;
      }
  }
#endif
}

void ScoresF32(const void* k, int64_t sk, const float* q, int64_t E, int64_t keys, float* s, int64_t lds) {
  ScoresT(static_cast<const float*>(k), sk, q, E, keys, s, lds);
}
void ScoresBF16(const void* k, int64_t sk, const float* q, int64_t E, int64_t keys, float* s, int64_t lds) {
  ScoresT(static_cast<const BFloat16*>(k), sk, q, E, keys, s, lds);
}
void ScoresF16(const void* k, int64_t sk, const float* q, int64_t E, int64_t keys, float* s, int64_t lds) {
  ScoresT(static_cast<const Half*>(k), sk, q, E, keys, s, lds);
}

// Rows [r0, r0 + nr) (nr <= 4) x NC vectors of columns from c0: accumulators in registers over
// all keys, each V row widened once, then added to o.
template <int NC, typename T>
HWY_INLINE void PvGroup(const T* HWY_RESTRICT v, int64_t stride_v, const float* HWY_RESTRICT p, int64_t ldp,
                        int64_t r0, int nr, int64_t keys, int64_t cols, int64_t c0, float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  V acc[4][NC];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = hn::Zero(df);
  for (int64_t j = 0; j < keys; ++j) {
    const T* vr = v + j * stride_v + c0;
    V vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = LoadAsF32(df, vr + c * N);
    for (int r = 0; r < 4; ++r) {
      if (r >= nr) break;
      const V pr = hn::Set(df, p[(r0 + r) * ldp + j]);
      for (int c = 0; c < NC; ++c) acc[r][c] = hn::MulAdd(pr, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < NC; ++c) {
      float* dst = o + (r0 + r) * cols + c0 + c * N;
      hn::StoreU(hn::Add(hn::LoadU(df, dst), acc[r][c]), df, dst);
    }
}

// o[r, c] += sum_{j < keys} p[r * ldp + j] * v[j * stride_v + c] for r < rows (<= 8), c < cols;
// o is [rows, cols] contiguous float32. Rows go in groups of 4 and columns in groups of up to 4
// vectors (16 accumulators in registers); columns past the last whole vector take a scalar loop.
template <typename T>
void PvAccumulate(const T* HWY_RESTRICT v, int64_t stride_v, const float* HWY_RESTRICT p, int64_t ldp, int64_t rows,
                  int64_t keys, int64_t cols, float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t whole = cols / N;
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int nr = static_cast<int>(std::min<int64_t>(4, rows - r0));
    for (int64_t g = 0; g < whole; g += 4) {
      switch (std::min<int64_t>(4, whole - g)) {
        case 4: PvGroup<4>(v, stride_v, p, ldp, r0, nr, keys, cols, g * N, o); break;
        case 3: PvGroup<3>(v, stride_v, p, ldp, r0, nr, keys, cols, g * N, o); break;
        case 2: PvGroup<2>(v, stride_v, p, ldp, r0, nr, keys, cols, g * N, o); break;
        default: PvGroup<1>(v, stride_v, p, ldp, r0, nr, keys, cols, g * N, o); break;
      }
    }
    for (int64_t c = whole * N; c < cols; ++c)
      for (int r = 0; r < nr; ++r) {
        float a = 0.f;
        for (int64_t j = 0; j < keys; ++j) a += p[(r0 + r) * ldp + j] * static_cast<float>(v[j * stride_v + c]);
        o[(r0 + r) * cols + c] += a;
      }
  }
}

void PvF32(const void* v, int64_t sv, const float* p, int64_t ldp, int64_t rows, int64_t keys, int64_t cols, float* o) {
  PvAccumulate(static_cast<const float*>(v), sv, p, ldp, rows, keys, cols, o);
}
void PvBF16(const void* v, int64_t sv, const float* p, int64_t ldp, int64_t rows, int64_t keys, int64_t cols, float* o) {
  PvAccumulate(static_cast<const BFloat16*>(v), sv, p, ldp, rows, keys, cols, o);
}
void PvF16(const void* v, int64_t sv, const float* p, int64_t ldp, int64_t rows, int64_t keys, int64_t cols, float* o) {
  PvAccumulate(static_cast<const Half*>(v), sv, p, ldp, rows, keys, cols, o);
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu {
namespace simd {
HWY_EXPORT(ScoresF32);
HWY_EXPORT(ScoresBF16);
HWY_EXPORT(ScoresF16);
HWY_EXPORT(PvF32);
HWY_EXPORT(PvBF16);
HWY_EXPORT(PvF16);
}  // namespace simd

namespace {

// The query heads [h0, h1) that read kv head hk: those with h * n_kv_heads / n_heads == hk, a
// contiguous range.
void kv_group(const AttentionParams& p, int64_t hk, int64_t& h0, int64_t& h1) {
  h0 = (hk * p.n_heads + p.n_kv_heads - 1) / p.n_kv_heads;
  h1 = std::min(p.n_heads, ((hk + 1) * p.n_heads + p.n_kv_heads - 1) / p.n_kv_heads);
}

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
    for (int64_t hk = 0; hk < p.n_kv_heads; ++hk) {
      int64_t h0, h1;
      kv_group(p, hk, h0, h1);
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

// ---- decode: few query rows per kv head, K and V streamed once

constexpr int64_t kDecodeRows = 8;    // query rows per kv head (two passes of the 4-row scores)
constexpr int64_t kDecodeKeys = 128;  // keys per block: the block's V rows stay in L1 for p V
constexpr int64_t kSplitKeys = 512;   // fewest keys per split of one kv head

void scores(DType t, const void* k, int64_t sk, const float* q, int64_t E, int64_t keys, float* s, int64_t lds) {
  dispatch_float_types(t, "[attention]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, BFloat16>) HWY_DYNAMIC_DISPATCH(simd::ScoresBF16)(k, sk, q, E, keys, s, lds);
    else if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(simd::ScoresF16)(k, sk, q, E, keys, s, lds);
    else if constexpr (std::is_same_v<T, float>) HWY_DYNAMIC_DISPATCH(simd::ScoresF32)(k, sk, q, E, keys, s, lds);
    else throw DTypeError("[attention] the decode kernels take bfloat16, float16 or float32");  // (use_decode)
  });
}

void pv_accumulate(DType t, const void* v, int64_t sv, const float* p, int64_t ldp, int64_t rows, int64_t keys,
                   int64_t cols, float* o) {
  dispatch_float_types(t, "[attention]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, BFloat16>) HWY_DYNAMIC_DISPATCH(simd::PvBF16)(v, sv, p, ldp, rows, keys, cols, o);
    else if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(simd::PvF16)(v, sv, p, ldp, rows, keys, cols, o);
    else if constexpr (std::is_same_v<T, float>) HWY_DYNAMIC_DISPATCH(simd::PvF32)(v, sv, p, ldp, rows, keys, cols, o);
    else throw DTypeError("[attention] the decode kernels take bfloat16, float16 or float32");  // (use_decode)
  });
}

bool use_decode(const AttentionParams& p) {
  if (p.mask || p.head_dim < 1 || p.v_head_dim < 1 || p.dtype == DType::Float64) return false;
  const int64_t group = (p.n_heads + p.n_kv_heads - 1) / p.n_kv_heads;
  return group * p.q_len <= kDecodeRows;
}

// One (batch, kv head, split): its rows' running max m, sum l and unnormalised output o over
// keys [k0, k1) of the batch's valid keys.
struct DecodePart {
  float m[kDecodeRows], l[kDecodeRows];
  float* o;  // [rows, v_head_dim] in the call's one output buffer
};

template <typename T>
void decode_part(const AttentionParams& p, int64_t b, int64_t hk, int64_t k0, int64_t k1, DecodePart& part) {
  const int64_t E = p.head_dim, Ev = p.v_head_dim;
  const int64_t len = p.kv_lens ? std::clamp<int64_t>(p.kv_lens[b], 0, p.kv_len) : p.kv_len;
  int64_t h0, h1;
  kv_group(p, hk, h0, h1);
  const int64_t rows = (h1 - h0) * p.q_len;
  const int64_t rows4 = (rows + 3) / 4 * 4;  // the scores kernel takes 4 rows at a time
  // Per-thread scratch, grown once and reused by every part and call on this thread.
  thread_local std::vector<float> q32, s, e;
  q32.assign(static_cast<size_t>(rows4 * E), 0.f);
  s.resize(static_cast<size_t>(rows4 * kDecodeKeys));
  e.resize(static_cast<size_t>(rows * kDecodeKeys));
  int64_t limit[kDecodeRows];
  const float scale = static_cast<float>(p.scale);  // folded into q
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = h0 + r / p.q_len, i = r % p.q_len;
    const T* qr = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1] + i * p.stride_q[2];
    for (int64_t c = 0; c < E; ++c) q32[static_cast<size_t>(r * E + c)] = static_cast<float>(qr[c]) * scale;
    limit[r] = p.causal ? std::clamp<int64_t>(i + 1 + (p.causal_from_end ? len - p.q_len : 0), 0, len) : len;
    part.m[r] = -INFINITY;
    part.l[r] = 0.f;
  }
  std::fill(part.o, part.o + rows * Ev, 0.f);
  const T* kp = static_cast<const T*>(p.k) + b * p.stride_k[0] + hk * p.stride_k[1];
  const T* vp = static_cast<const T*>(p.v) + b * p.stride_v[0] + hk * p.stride_v[1];
  const int64_t end = std::min(k1, len);
  for (int64_t j0 = k0; j0 < end; j0 += kDecodeKeys) {
    const int64_t nb = std::min(kDecodeKeys, end - j0);
    // Scores of 4 rows at a time (rows padded to a multiple of 4 with zero q rows). 2 Zen 5
    // threads, bf16 32q/8kv, 4K keys, hd64 / hd80 / hd128: the GEMV dots (one horizontal sum
    // per row and key) 418 / 480 / 642 us, bf16 pair-product dots 1222 us at hd80, this 318-347
    // / 358-376 / 512-515 us; 32K hd80 4992 -> 4859 us (compute-bound on both).
    for (int64_t r0 = 0; r0 < rows; r0 += 4)
      scores(p.dtype, kp + j0 * p.stride_k[2], p.stride_k[2], q32.data() + r0 * E, E, nb, s.data() + r0 * kDecodeKeys,
             kDecodeKeys);
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s.data() + r * kDecodeKeys;
      float* er = e.data() + r * kDecodeKeys;
      for (int64_t j = std::max<int64_t>(0, limit[r] - j0); j < nb; ++j) sr[j] = -INFINITY;  // causal
      // A NaN score may or may not become the max; either way the row ends NaN. mx stays -inf
      // while no key is valid: terms are then NaN for NaN scores and 0 otherwise.
      const float mx = std::max(part.m[r], simd::row_max(sr, nb));
      float add = 0.f;
      if (mx == -INFINITY) {
        for (int64_t j = 0; j < nb; ++j) add += er[j] = std::isnan(sr[j]) ? sr[j] : 0.f;
      } else {
        add = simd::exp_sum(sr, er, nb, mx);
      }
      if (mx != part.m[r]) {  // the running max grew: rescale what is accumulated
        const float alpha = part.m[r] == -INFINITY ? 0.f : std::exp(part.m[r] - mx);
        part.l[r] *= alpha;
        float* orow = part.o + r * Ev;
        for (int64_t c = 0; c < Ev; ++c) orow[c] *= alpha;
        part.m[r] = mx;
      }
      part.l[r] += add;
    }
    pv_accumulate(p.dtype, vp + j0 * p.stride_v[2], p.stride_v[2], e.data(), kDecodeKeys, rows, nb, Ev, part.o);
  }
}

template <typename T>
void attention_decode(const AttentionParams& p) {
  const int64_t Ev = p.v_head_dim;
  const int64_t heads = p.batch * p.n_kv_heads;
  const int64_t threads = omp_get_max_threads();
  // Splits of one kv head's keys while the heads leave threads idle, each >= kSplitKeys keys.
  const int64_t splits =
      std::clamp<int64_t>((2 * threads + heads - 1) / heads, 1, std::max<int64_t>(1, p.kv_len / kSplitKeys));
  const int64_t chunk = (p.kv_len + splits - 1) / splits;
  std::vector<DecodePart> parts(static_cast<size_t>(heads * splits));
  const int64_t max_rows = (p.n_heads + p.n_kv_heads - 1) / p.n_kv_heads * p.q_len;  // <= kDecodeRows
  std::vector<float> outs(static_cast<size_t>(heads * splits * max_rows * Ev));
  for (size_t u = 0; u < parts.size(); ++u) parts[u].o = outs.data() + u * static_cast<size_t>(max_rows * Ev);
#pragma omp parallel for schedule(dynamic, 1) if (heads * splits > 1 && heads * p.kv_len >= 2 * kSplitKeys)
  for (int64_t u = 0; u < heads * splits; ++u) {
    const int64_t b = u / (p.n_kv_heads * splits), hk = u / splits % p.n_kv_heads, sp = u % splits;
    decode_part<T>(p, b, hk, sp * chunk, (sp + 1) * chunk, parts[static_cast<size_t>(u)]);
  }
  // Combine the splits of each (batch, kv head) in order; one division and rounding per output.
  std::vector<float> acc(static_cast<size_t>(Ev));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t hk = 0; hk < p.n_kv_heads; ++hk) {
      int64_t h0, h1;
      kv_group(p, hk, h0, h1);
      const DecodePart* ps = parts.data() + (b * p.n_kv_heads + hk) * splits;
      for (int64_t r = 0; r < (h1 - h0) * p.q_len; ++r) {
        float m = -INFINITY;
        for (int64_t sp = 0; sp < splits; ++sp) m = std::max(m, ps[sp].m[r]);
        float l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t sp = 0; sp < splits; ++sp) {
          // A split whose max is below m is scaled down; one with no valid key (max -inf) adds
          // nothing unless it carries a NaN (then l is NaN and so is the row).
          const float w = ps[sp].m[r] == m ? 1.f : ps[sp].m[r] == -INFINITY ? 0.f : std::exp(ps[sp].m[r] - m);
          l += w == 0.f ? (std::isnan(ps[sp].l[r]) ? ps[sp].l[r] : 0.f) : ps[sp].l[r] * w;
          const float* o = ps[sp].o + r * Ev;
          if (w != 0.f)
            for (int64_t c = 0; c < Ev; ++c) acc[static_cast<size_t>(c)] += o[c] * w;
        }
        const int64_t h = h0 + r / p.q_len, i = r % p.q_len;
        T* out = static_cast<T*>(p.out) + b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2];
        for (int64_t c = 0; c < Ev; ++c) out[c] = T(l == 0.f ? 0.f : acc[static_cast<size_t>(c)] / l);
      }
    }
  }
}

}  // namespace

void attention(const AttentionParams& p) {
  dispatch_float_types(p.dtype, "[attention]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, double>) {
      if (use_decode(p)) return attention_decode<T>(p);
    }
    attention_typed<T>(p);
  });
}

}  // namespace anvil::cpu
#endif  // HWY_ONCE
