// Float8 GEMV dots against bfloat16-exact activations on x86 CPUs with AVX512-VBMI and
// AVX512-BF16 (Zen 4 / 5, Sapphire Rapids and later): the decode of the Highway core (a dozen
// integer and conversion instructions per 32 weights, ~12 GB/s per Zen 5 core) is replaced by
// two byte-table lookups (vpermi2b over the 128 magnitudes; the sign is one bit-select) that give
// the weights as bfloat16, and vdpbf16ps multiplies them with the activations in pairs. Every
// e4m3fn / e5m2 value is a bfloat16 value and a product of two bfloat16 values is exact in
// float32, so the result is the float32 dot in another summation order (inputs below 2^-126,
// which vdpbf16ps reads as zero, aside). Highway 1.0 has no target with these instructions,
// hence intrinsics behind a run-time CPU check; callers fall back to the Highway core.
#include <cstdint>
#include <cstring>
#include <vector>

#include "anvil/numeric.h"
#include "cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ANVIL_FP8_DOTS 1
#define ANVIL_TARGET_VBMI_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))
#endif

namespace anvil::cpu::simd {

#ifdef ANVIL_FP8_DOTS
namespace {

constexpr int64_t kChunk = 64;             // weights per step (one 64-byte load)
constexpr int64_t kPrefetchBytes = 4096;   // as the Highway core: 4 KiB ahead into L2

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

// x rows as bfloat16 in the order the weights come out of the byte unpacks: for each 64-weight
// chunk, unpacklo gives elements 16L + 0..7 of each 128-bit lane L, unpackhi 16L + 8..15.
void permute_x(const float* x, int64_t m, int64_t k, int64_t k64, std::vector<uint16_t>& xp) {
  xp.resize(static_cast<size_t>(m * k64));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t q = 0; q < k64; q += kChunk) {
      uint16_t* dst = xp.data() + i * k64 + q;
      for (int half = 0; half < 2; ++half) {
        for (int p = 0; p < 32; ++p) {
          const int64_t e = q + (p / 8) * 16 + half * 8 + p % 8;
          uint32_t bits;
          std::memcpy(&bits, x + i * k + e, 4);
          dst[half * 32 + p] = static_cast<uint16_t>(bits >> 16);  // exact: x is bfloat16-valued
        }
      }
    }
  }
}

template <int M>
ANVIL_TARGET_VBMI_BF16 void dots_rows(const uint8_t* w, int64_t stride_w, const uint16_t* xp, const float* x, int64_t k,
                                      int64_t k64, const Tables& tab, float* d, int64_t stride_d, int64_t j0,
                                      int64_t j1) {
  const __m512i lo0 = _mm512_load_si512(tab.lo), lo1 = _mm512_load_si512(tab.lo + 64);
  const __m512i hi0 = _mm512_load_si512(tab.hi), hi1 = _mm512_load_si512(tab.hi + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* wr = w + j * stride_w;
    __m512 acc[M][2];
    for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t q = 0; q < k64; q += kChunk) {
      _mm_prefetch(reinterpret_cast<const char*>(wr + q + kPrefetchBytes), _MM_HINT_T1);
      const __m512i b = _mm512_loadu_si512(wr + q);
      const __m512i lo = _mm512_permutex2var_epi8(lo0, b, lo1);  // index bits 0..6: the magnitude
      __m512i hi = _mm512_permutex2var_epi8(hi0, b, hi1);
      hi = _mm512_ternarylogic_epi32(hi, b, sign, 0xF8);  // hi | (b & 0x80)
      const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
      const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
      for (int i = 0; i < M; ++i) {
        const uint16_t* xr = xp + i * k64 + q;
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, reinterpret_cast<__m512bh>(_mm512_loadu_si512(xr)));
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, reinterpret_cast<__m512bh>(_mm512_loadu_si512(xr + 32)));
      }
    }
    for (int i = 0; i < M; ++i) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, _mm512_add_ps(acc[i][0], acc[i][1]));
      float s = 0.f;
      for (float v : lanes) s += v;
      for (int64_t t = k64; t < k; ++t) {  // the tail: the same table, scalar
        const uint8_t byte = wr[t];
        const uint32_t bits = (static_cast<uint32_t>(tab.hi[byte & 0x7F] | (byte & 0x80)) << 24) |
                              (static_cast<uint32_t>(tab.lo[byte & 0x7F]) << 16);
        float wv;
        std::memcpy(&wv, &bits, 4);
        s += wv * x[i * k + t];
      }
      d[i * stride_d + j] = s;
    }
  }
}

}  // namespace

bool fp8_dots_bf16x(DType w_dtype, const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, float* d,
                    int64_t stride_d, int64_t j0, int64_t j1) {
  static const bool supported = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16");
  if (!supported || (w_dtype != DType::Float8_e4m3fn && w_dtype != DType::Float8_e5m2) || m < 1 || m > 8)
    return false;
  const int64_t k64 = k / kChunk * kChunk;
  thread_local std::vector<uint16_t> xp;
  permute_x(x, m, k, k64, xp);
  const Tables& tab = tables(w_dtype == DType::Float8_e4m3fn);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  switch (m) {
    case 1: dots_rows<1>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    case 2: dots_rows<2>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    case 3: dots_rows<3>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    case 4: dots_rows<4>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    case 5: dots_rows<5>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    case 6: dots_rows<6>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    case 7: dots_rows<7>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
    default: dots_rows<8>(wb, stride_w, xp.data(), x, k, k64, tab, d, stride_d, j0, j1); break;
  }
  return true;
}

#else

bool fp8_dots_bf16x(DType, const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t) {
  return false;
}

#endif

}  // namespace anvil::cpu::simd
