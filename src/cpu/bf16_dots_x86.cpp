// GEMV dots of bfloat16 / float8 weights against bfloat16-valued activations on x86 CPUs with
// AVX512-BF16 and AVX512-VBMI (Zen 4 / 5, Sapphire Rapids and later): vdpbf16ps multiplies 32
// weight / activation pairs per instruction with exact products and float32 sums, so the
// result is the float32 dot in another summation order (inputs below 2^-126, which vdpbf16ps
// reads as zero, aside). float8 weights become bfloat16 by two byte-table lookups (vpermi2b over
// the 128 magnitudes; the sign is one bit-select) instead of the Highway core's dozen integer
// and conversion instructions per 32 weights (~12 GB/s per Zen 5 core, decode-bound). Several
// x rows share each weight load and several weight rows each x load. Highway 1.0 has no target
// with these instructions, hence intrinsics behind a run-time CPU check; callers fall back to
// the Highway core.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "anvil/numeric.h"
#include "cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ANVIL_BF16_DOTS 1
#define ANVIL_TARGET_VBMI_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))
#endif

namespace anvil::cpu::simd {

#ifdef ANVIL_BF16_DOTS
namespace {

constexpr int64_t kChunk = 64;  // weights per step

// bfloat16 bits of the 128 float8 magnitudes (bit 7 of the byte is the sign), split into low
// and high bytes: the two 128-entry tables of vpermi2b.
struct Tables {
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t hi[128];
};

template <typename F8>
Tables make_tables() {
  Tables t{};
  for (int m = 0; m < 128; ++m) {
    F8 v;
    const uint8_t byte = static_cast<uint8_t>(m);
    std::memcpy(&v, &byte, 1);
    const BFloat16 b(static_cast<float>(v));  // exact (NaN stays NaN)
    uint16_t bits;
    std::memcpy(&bits, &b, 2);
    t.lo[m] = static_cast<uint8_t>(bits & 0xFF);
    t.hi[m] = static_cast<uint8_t>(bits >> 8);
  }
  return t;
}

const Tables& tables(bool e4m3) {
  static const Tables e4 = make_tables<Float8_e4m3fn>();
  static const Tables e5 = make_tables<Float8_e5m2>();
  return e4m3 ? e4 : e5;
}

// x rows as bfloat16 (exact: x is bfloat16-valued), k64 per row; `permuted`: in the order the
// float8 weights come out of the byte unpacks (per 64-weight chunk, unpacklo gives elements
// 16L + 0..7 of each 128-bit lane L, unpackhi 16L + 8..15), else in order.
void permute_x(const float* x, int64_t m, int64_t k, int64_t k64, bool permuted, std::vector<uint16_t>& xp) {
  xp.resize(static_cast<size_t>(m * k64));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t q = 0; q < k64; q += kChunk) {
      uint16_t* dst = xp.data() + i * k64 + q;
      for (int p = 0; p < 64; ++p) {
        const int64_t e = permuted ? q + (p % 32 / 8) * 16 + (p / 32) * 8 + p % 8 : q + p;
        uint32_t bits;
        std::memcpy(&bits, x + i * k + e, 4);
        dst[p] = static_cast<uint16_t>(bits >> 16);
      }
    }
  }
}

// 64 weights of a row as two vectors of 32 bfloat16 (w0, w1), in the order permute_x gives x.
struct Fp8Weights {
  static constexpr int64_t kBytes = 64;  // bytes per 64 weights
  __m512i lo0, lo1, hi0, hi1, sign;
  ANVIL_TARGET_VBMI_BF16 explicit Fp8Weights(const Tables& tab)
      : lo0(_mm512_load_si512(tab.lo)),
        lo1(_mm512_load_si512(tab.lo + 64)),
        hi0(_mm512_load_si512(tab.hi)),
        hi1(_mm512_load_si512(tab.hi + 64)),
        sign(_mm512_set1_epi8(static_cast<char>(0x80))) {}
  ANVIL_TARGET_VBMI_BF16 void load(const uint8_t* p, __m512bh& w0, __m512bh& w1) const {
    const __m512i b = _mm512_loadu_si512(p);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, b, lo1);  // index bits 0..6: the magnitude
    __m512i hi = _mm512_permutex2var_epi8(hi0, b, hi1);
    hi = _mm512_ternarylogic_epi32(hi, b, sign, 0xF8);  // hi | (b & 0x80)
    w0 = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
    w1 = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
  }
};

struct Bf16Weights {
  static constexpr int64_t kBytes = 128;
  ANVIL_TARGET_VBMI_BF16 void load(const uint8_t* p, __m512bh& w0, __m512bh& w1) const {
    w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
    w1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + 64));
  }
};

// Weight rows [j, j + R) against M rows of x (bfloat16 in xp, k64 per row): A accumulator
// sets per (row, x row) keep enough independent vdpbf16ps chains when R * M is small. Blocked:
// the sums of each bk-column block (bk % 64 == 0) are scaled by their row's block scale
// (srow[r][block]) into a second set of accumulators, one FMA per block.
template <int M, int R, bool Blocked, class W>
ANVIL_TARGET_VBMI_BF16 void dots_block(const W& dec, const uint8_t* w, int64_t stride_w, const uint16_t* xp, int64_t k64,
                                       int64_t j, const float* const (&srow)[R], int64_t bk, float (&out)[R][M]) {
  constexpr int A = R * M <= 2 ? 2 : 1;
  __m512 acc[R][M][A], total[Blocked ? R : 1][Blocked ? M : 1];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) {
      for (int a = 0; a < A; ++a) acc[r][i][a] = _mm512_setzero_ps();
      if constexpr (Blocked) total[r][i] = _mm512_setzero_ps();
    }
  const int64_t span = Blocked ? bk : k64;
  for (int64_t q0 = 0; q0 < k64; q0 += span) {
    const int64_t q1 = std::min(k64, q0 + span);
    for (int64_t q = q0; q < q1; q += kChunk) {
      __m512bh w0[R], w1[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + (j + r) * stride_w + q / kChunk * W::kBytes;
        for (int64_t b = 0; b < W::kBytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b + kGemvPrefetchBytes), _MM_HINT_T1);
        dec.load(p, w0[r], w1[r]);
      }
      for (int i = 0; i < M; ++i) {
        const __m512bh xa = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xp + i * k64 + q));
        const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xp + i * k64 + q + 32));
        for (int r = 0; r < R; ++r) {
          acc[r][i][0] = _mm512_dpbf16_ps(acc[r][i][0], w0[r], xa);
          acc[r][i][A - 1] = _mm512_dpbf16_ps(acc[r][i][A - 1], w1[r], xb);
        }
      }
    }
    if constexpr (Blocked) {
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_set1_ps(srow[r][q0 / bk]);
        for (int i = 0; i < M; ++i) {
          const __m512 b = A == 2 ? _mm512_add_ps(acc[r][i][0], acc[r][i][A - 1]) : acc[r][i][0];
          total[r][i] = _mm512_fmadd_ps(b, s, total[r][i]);
          for (int a = 0; a < A; ++a) acc[r][i][a] = _mm512_setzero_ps();
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) {
      alignas(64) float lanes[16];
      if constexpr (Blocked) _mm512_store_ps(lanes, total[r][i]);
      else _mm512_store_ps(lanes, A == 2 ? _mm512_add_ps(acc[r][i][0], acc[r][i][A - 1]) : acc[r][i][0]);
      float s = 0.f;
      for (float v : lanes) s += v;
      out[r][i] = s;
    }
  }
}

// Weight element t of a row as float32 (the tail past the last 64-weight chunk).
float weight_at(const uint8_t* row, int64_t t, const Tables* tab) {
  uint32_t bits;
  if (tab) {
    const uint8_t byte = row[t];
    bits = (static_cast<uint32_t>(tab->hi[byte & 0x7F] | (byte & 0x80)) << 24) |
           (static_cast<uint32_t>(tab->lo[byte & 0x7F]) << 16);
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * t, 2);
    bits = static_cast<uint32_t>(h) << 16;
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Rows per pass: each x load feeds R weight rows (x of M rows may not fit L1 next to the weight
// stream); R * M accumulators stay within the 32 vector registers.
template <int M>
constexpr int kRowsPerPass = M == 1 ? 1 : M == 2 ? 4 : M <= 4 ? 3 : 2;

template <int M, bool Blocked, class W, int R = kRowsPerPass<M>>
void dots_rows(const W& dec, const Tables* tab, const uint8_t* w, int64_t stride_w, const uint16_t* xp, const float* x,
               int64_t stride_x, int64_t k, int64_t k64, float* d, int64_t stride_d, int64_t j0, int64_t j1,
               const BlockScale* block) {
  const float* srow[R] = {};
  const int64_t bk = Blocked ? block->block_k : k64;
  auto scale_row = [&](int64_t row) { return block->scale + row / block->block_n * block->stride_row; };
  auto finish = [&](int64_t j, int i, float s) {
    const uint8_t* row = w + j * stride_w;
    const float* sr = Blocked ? scale_row(j) : nullptr;
    for (int64_t t = k64; t < k; ++t) s += weight_at(row, t, tab) * x[i * stride_x + t] * (Blocked ? sr[t / bk] : 1.f);
    d[i * stride_d + j] = s;
  };
  int64_t j = j0;
  for (; j + R <= j1; j += R) {
    float out[R][M];
    if constexpr (Blocked)
      for (int r = 0; r < R; ++r) srow[r] = scale_row(j + r);
    dots_block<M, R, Blocked>(dec, w, stride_w, xp, k64, j, srow, bk, out);
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < M; ++i) finish(j + r, i, out[r][i]);
  }
  for (; j < j1; ++j) {
    float out[1][M];
    const float* s1[1] = {Blocked ? scale_row(j) : nullptr};
    dots_block<M, 1, Blocked>(dec, w, stride_w, xp, k64, j, s1, bk, out);
    for (int i = 0; i < M; ++i) finish(j, i, out[0][i]);
  }
}

template <bool Blocked, class W>
void dots_m(const W& dec, const Tables* tab, const uint8_t* w, int64_t stride_w, const uint16_t* xp, const float* x,
            int64_t stride_x, int64_t m, int64_t k, int64_t k64, float* d, int64_t stride_d, int64_t j0, int64_t j1,
            const BlockScale* block) {
  auto rows = [&](auto m_tag) {
    constexpr int kM = decltype(m_tag)::value;
    dots_rows<kM, Blocked>(dec, tab, w, stride_w, xp, x, stride_x, k, k64, d, stride_d, j0, j1, block);
  };
  switch (m) {
    case 1:
      // bfloat16 weights at k >= 8192 (x >= 16 KiB, a third of L1 or more): four rows per x
      // load. 2 Zen 5 threads, interleaved runs: k 8192-14336 +3-15 %, the same at lm_heads;
      // at k <= 5120 one row is faster (4-6 %).
      if constexpr (std::is_same_v<W, Bf16Weights>) {
        if (k >= 8192)
          return dots_rows<1, Blocked, W, 4>(dec, tab, w, stride_w, xp, x, stride_x, k, k64, d, stride_d, j0, j1, block);
      }
      return rows(std::integral_constant<int, 1>{});
    case 2: return rows(std::integral_constant<int, 2>{});
    case 3: return rows(std::integral_constant<int, 3>{});
    case 4: return rows(std::integral_constant<int, 4>{});
    case 5: return rows(std::integral_constant<int, 5>{});
    case 6: return rows(std::integral_constant<int, 6>{});
    case 7: return rows(std::integral_constant<int, 7>{});
    default: return rows(std::integral_constant<int, 8>{});
  }
}

// One 32 x 32 tile of 16-bit elements: dst[c * dst_stride + r] = src[r * src_stride + c] for r <
// rows, c < cols (both <= 32). Five stages swap the off-diagonal b x b blocks of every 2b x 2b
// block (b = 16 .. 1), two vpermt2w per row pair each.
ANVIL_TARGET_VBMI_BF16 void transpose_tile_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst,
                                               int64_t dst_stride, int rows, int cols) {
  alignas(64) static const auto idx = [] {
    std::array<std::array<uint16_t, 64>, 5> t{};  // per stage: the low rows' indices, the high rows'
    for (int s = 0; s < 5; ++s) {
      const int b = 16 >> s;
      for (int c = 0; c < 32; ++c) {
        t[s][c] = static_cast<uint16_t>(c & b ? 32 + c - b : c);
        t[s][32 + c] = static_cast<uint16_t>(c & b ? 32 + c : c + b);
      }
    }
    return t;
  }();
  const __mmask32 col_mask = cols >= 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1;
  __m512i r[32];
  for (int i = 0; i < 32; ++i) r[i] = i < rows ? _mm512_maskz_loadu_epi16(col_mask, src + i * src_stride) : _mm512_setzero_si512();
  for (int s = 0; s < 5; ++s) {
    const int b = 16 >> s;
    const __m512i lo = _mm512_load_si512(idx[s].data()), hi = _mm512_load_si512(idx[s].data() + 32);
    for (int i = 0; i < 32; ++i)
      if (!(i & b)) {
        const __m512i a = r[i], c = r[i + b];
        r[i] = _mm512_permutex2var_epi16(a, lo, c);
        r[i + b] = _mm512_permutex2var_epi16(a, hi, c);
      }
  }
  const __mmask32 row_mask = rows >= 32 ? ~__mmask32{0} : (__mmask32{1} << rows) - 1;
  for (int c = 0; c < cols; ++c) _mm512_mask_storeu_epi16(dst + c * dst_stride, row_mask, r[c]);
}

// conv_row_pairs' kernel, CO output channels x 64 positions in registers.
template <int CO>
ANVIL_TARGET_VBMI_BF16 void conv_row_pairs_to(const uint32_t* const* rows, int64_t nrows, const uint32_t* w,
                                               int64_t kw, int64_t d, int64_t width, const float* bias, float* out,
                                               int64_t ldo) {
  for (int64_t i = 0; i < width; i += 64) {
    __m512 a[CO][4];
    for (int c = 0; c < CO; ++c)
      for (int v = 0; v < 4; ++v) a[c][v] = _mm512_set1_ps(bias ? bias[c] : 0.0f);
    for (int64_t r = 0; r < nrows; ++r) {
      if (!rows[r]) continue;
      for (int64_t t = 0; t < kw; ++t) {
        const uint32_t* x = rows[r] + i + t * d;
        __m512bh xv[4];
        for (int v = 0; v < 4; ++v) {
          __m512i l = _mm512_loadu_si512(x + 16 * v);
          asm("" : "+v"(l));  // kept in a register: GCC otherwise reloads it (a split load) per channel
          xv[v] = (__m512bh)l;
        }
        for (int c = 0; c < CO; ++c) {
          const __m512bh wv = (__m512bh)_mm512_set1_epi32(static_cast<int>(w[(c * nrows + r) * kw + t]));
          for (int v = 0; v < 4; ++v) a[c][v] = _mm512_dpbf16_ps(a[c][v], xv[v], wv);
        }
      }
    }
    for (int c = 0; c < CO; ++c)
      for (int v = 0; v < 4; ++v) _mm512_storeu_ps(out + c * ldo + i + 16 * v, a[c][v]);
  }
}

ANVIL_TARGET_VBMI_BF16 void interleave_pairs(const uint16_t* a, const uint16_t* b, uint32_t* out, int64_t n) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                      5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m512i x = _mm512_loadu_si512(a + j), y = b ? _mm512_loadu_si512(b + j) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + j, _mm512_permutex2var_epi16(x, lo, y));
    _mm512_storeu_si512(out + j + 16, _mm512_permutex2var_epi16(x, hi, y));
  }
  for (; j < n; ++j) out[j] = a[j] | (b ? static_cast<uint32_t>(b[j]) << 16 : 0u);
}

}  // namespace

bool transpose_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride, int64_t rows,
                   int64_t cols) {
  if (!bf16_dots_supported()) return false;
  for (int64_t r0 = 0; r0 < rows; r0 += 32)
    for (int64_t c0 = 0; c0 < cols; c0 += 32)
      transpose_tile_u16(src + r0 * src_stride + c0, src_stride, dst + c0 * dst_stride + r0, dst_stride,
                         static_cast<int>(std::min<int64_t>(32, rows - r0)), static_cast<int>(std::min<int64_t>(32, cols - c0)));
  return true;
}

bool conv_row_pairs(const uint32_t* const* rows, int64_t nrows, const uint32_t* w, int64_t co, int64_t kw, int64_t d,
                    int64_t width, const float* bias, float* out, int64_t ldo) {
  if (!bf16_dots_supported() || co < 1 || co > 4) return false;
  switch (co) {
    case 1: conv_row_pairs_to<1>(rows, nrows, w, kw, d, width, bias, out, ldo); break;
    case 2: conv_row_pairs_to<2>(rows, nrows, w, kw, d, width, bias, out, ldo); break;
    case 3: conv_row_pairs_to<3>(rows, nrows, w, kw, d, width, bias, out, ldo); break;
    default: conv_row_pairs_to<4>(rows, nrows, w, kw, d, width, bias, out, ldo); break;
  }
  return true;
}

bool interleave_u16(const uint16_t* a, const uint16_t* b, uint32_t* out, int64_t n) {
  if (!bf16_dots_supported()) return false;
  interleave_pairs(a, b, out, n);
  return true;
}

bool bf16_dots_supported() {
  static const bool supported = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16");
  return supported;
}

bool bf16_dots_packed(const void* w, int64_t stride_w, const uint16_t* xp, const float* x, int64_t stride_x, int64_t m,
                      int64_t k, float* d, int64_t stride_d, int64_t j0, int64_t j1) {
  if (!bf16_dots_supported() || m < 1 || m > 8) return false;
  dots_m<false>(Bf16Weights(), nullptr, static_cast<const uint8_t*>(w), stride_w * 2, xp, x, stride_x, m, k,
                k / kChunk * kChunk, d, stride_d, j0, j1, nullptr);
  return true;
}

bool bf16_dots(DType w_dtype, const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, float* d,
               int64_t stride_d, int64_t j0, int64_t j1, const BlockScale* block) {
  const bool supported = bf16_dots_supported();
  const bool fp8 = w_dtype == DType::Float8_e4m3fn || w_dtype == DType::Float8_e5m2;
  if (!supported || !(fp8 || w_dtype == DType::BFloat16) || m < 1 || m > 8) return false;
  if (block && (!fp8 || block->block_k % kChunk != 0)) return false;
  const int64_t k64 = k / kChunk * kChunk;
  thread_local std::vector<uint16_t> xp;
  permute_x(x, m, k, k64, fp8, xp);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t sw = stride_w * (fp8 ? 1 : 2);  // bytes
  if (fp8) {
    const Tables& tab = tables(w_dtype == DType::Float8_e4m3fn);
    if (block) dots_m<true>(Fp8Weights(tab), &tab, wb, sw, xp.data(), x, k, m, k, k64, d, stride_d, j0, j1, block);
    else dots_m<false>(Fp8Weights(tab), &tab, wb, sw, xp.data(), x, k, m, k, k64, d, stride_d, j0, j1, nullptr);
  } else {
    dots_m<false>(Bf16Weights(), nullptr, wb, sw, xp.data(), x, k, m, k, k64, d, stride_d, j0, j1, nullptr);
  }
  return true;
}

#else

bool bf16_dots(DType, const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t,
               const BlockScale*) {
  return false;
}
bool bf16_dots_supported() { return false; }
bool conv_row_pairs(const uint32_t* const*, int64_t, const uint32_t*, int64_t, int64_t, int64_t, int64_t, const float*,
                    float*, int64_t) {
  return false;
}
bool interleave_u16(const uint16_t*, const uint16_t*, uint32_t*, int64_t) { return false; }
bool transpose_u16(const uint16_t*, int64_t, uint16_t*, int64_t, int64_t, int64_t) { return false; }
bool bf16_dots_packed(const void*, int64_t, const uint16_t*, const float*, int64_t, int64_t, int64_t, float*, int64_t,
                      int64_t, int64_t) {
  return false;
}

#endif

}  // namespace anvil::cpu::simd
