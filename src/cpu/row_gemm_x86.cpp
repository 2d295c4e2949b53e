// GEMMs whose operands' rows are given by pointers (cpu/simd.h's RowGemm: implicit-GEMM
// convolutions read their taps' runs in place), in float32 on x86 CPUs with AVX-512: bfloat16
// operands by AVX512-BF16 pair products (vdpbf16ps), float32 ones by fused multiply-adds. One
// driver for both: B packed a panel of kNr columns at a time, C's rows kMr at a time against it,
// k ascending; the element type's policy (Bf16Pairs, F32Fma) packs and multiplies. Highway 1.0
// has no target with vdpbf16ps, hence intrinsics behind a run-time CPU check; callers fall back.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "anvil/error.h"
#include "cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ANVIL_ROW_GEMM 1
#define ANVIL_TARGET_VBMI_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))
#define ANVIL_TARGET_AVX512 __attribute__((target("avx512f,avx512vl")))
#endif

namespace anvil::cpu::simd {

#ifdef ANVIL_ROW_GEMM
namespace {

constexpr int64_t kNr = kPairPanel;

// Calls kernel(MR, i) over m rows in groups of at most Mr (<= 12) rows from row i, as even as
// the count of groups allows (64 rows in 12s: 11, 11, 11, 11, 10, 10, not five 12s and a 4).
template <int Mr, typename F>
void by_row_groups(int64_t m, F&& kernel) {
  static_assert(Mr >= 1 && Mr <= 12, "row groups of 1 to 12 rows");
  const int64_t groups = (m + Mr - 1) / Mr;
  for (int64_t g = 0, i = 0; g < groups; ++g) {
    const int64_t rows = m / groups + (g < m % groups ? 1 : 0);
    switch (rows) {
      case 1: kernel(std::integral_constant<int, 1>{}, i); break;
      case 2: kernel(std::integral_constant<int, 2>{}, i); break;
      case 3: kernel(std::integral_constant<int, 3>{}, i); break;
      case 4: kernel(std::integral_constant<int, 4>{}, i); break;
      case 5: kernel(std::integral_constant<int, 5>{}, i); break;
      case 6: kernel(std::integral_constant<int, 6>{}, i); break;
      case 7: kernel(std::integral_constant<int, 7>{}, i); break;
      case 8: if constexpr (Mr >= 8) kernel(std::integral_constant<int, 8>{}, i); break;
      case 9: if constexpr (Mr >= 9) kernel(std::integral_constant<int, 9>{}, i); break;
      case 10: if constexpr (Mr >= 10) kernel(std::integral_constant<int, 10>{}, i); break;
      case 11: if constexpr (Mr >= 11) kernel(std::integral_constant<int, 11>{}, i); break;
      case 12: if constexpr (Mr >= 12) kernel(std::integral_constant<int, 12>{}, i); break;
      default: break;
    }
    i += rows;
  }
}

// The pair-product GEMM: B's columns in panels of kNr, its rows in pairs interleaved (pair q of
// column j at bp[(q * kNr + j) * 2 + {0, 1}]), so one vdpbf16ps multiplies a broadcast pair of
// A's row by the same pair of 16 columns and adds both products into float32.
}  // namespace

// (cpu/simd.h)
ANVIL_TARGET_VBMI_BF16 void pack_pairs(const uint16_t* const* rows, int64_t segs, int64_t s, int64_t k, int64_t j0,
                                       int64_t w, uint16_t* bp) {
  alignas(64) static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const __mmask32 mask = w >= 32 ? ~__mmask32{0} : (__mmask32{1} << w) - 1;
  for (int64_t q = 0; q < (k + 1) / 2; ++q) {
    const __m512i r0 = _mm512_maskz_loadu_epi16(mask, rows[2 * q * segs + s] + j0);
    const __m512i r1 =
        2 * q + 1 < k ? _mm512_maskz_loadu_epi16(mask, rows[(2 * q + 1) * segs + s] + j0) : _mm512_setzero_si512();
    _mm512_storeu_si512(bp + q * kNr * 2, _mm512_permutex2var_epi16(r0, lo, r1));
    _mm512_storeu_si512(bp + q * kNr * 2 + 32, _mm512_permutex2var_epi16(r0, hi, r1));
  }
}

namespace {

// C[i0 .. i0 + MR, panel] = A's rows x the packed panel, over all k (pairs), stored to c (ldc)
// for the panel's first w columns, or added to it when `accumulate`. Row r is segs runs of
// k / segs elements, a[r * segs + s] (one run of k when segs is 1; an even run length otherwise),
// its pair q at a[r * segs + s] + Step q: Step 2 for plain rows, 2 kNr for rows of A packed in
// pairs as B is (pack_pairs; zero-padded to whole pairs, segs 1).
template <int MR, int Step>
ANVIL_TARGET_VBMI_BF16 void pair_kernel(const uint16_t* const* a, int64_t segs, const uint16_t* bp, int64_t k, float* c,
                                        int64_t ldc, int64_t w, bool accumulate) {
  const __mmask16 m0 = w >= 16 ? __mmask16(0xffff) : __mmask16((1u << w) - 1);
  const __mmask16 m1 = w >= 32 ? __mmask16(0xffff) : w <= 16 ? __mmask16(0) : __mmask16((1u << (w - 16)) - 1);
  __m512 acc[MR][2];
  const uint16_t* row[MR] = {};  // set per segment (segs >= 1); the braces quiet GCC's maybe-uninitialized
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = accumulate ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = accumulate ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  const int64_t pairs = k / 2, seg_pairs = segs == 1 ? pairs : k / segs / 2;
  for (int64_t s = 0; s < segs; ++s) {
    for (int r = 0; r < MR; ++r) row[r] = a[r * segs + s];
    const uint16_t* bs = bp + s * seg_pairs * kNr * 2;
    for (int64_t q = 0; q < seg_pairs; ++q) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bs + q * kNr * 2);
      const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bs + q * kNr * 2 + 32);
      for (int r = 0; r < MR; ++r) {
        int32_t pair;
        std::memcpy(&pair, row[r] + Step * q, sizeof pair);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
      }
    }
  }
  if (k % 2) {  // the last row of B pairs with zeros: A's odd element pairs with a zero of its own
    const int64_t q = pairs;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * kNr * 2);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * kNr * 2 + 32);
    for (int r = 0; r < MR; ++r) {
      int32_t pair;  // plain rows end on a lone element; packed ones hold (a, 0)
      if constexpr (Step == 2) pair = static_cast<int32_t>(row[r][2 * q]);
      else std::memcpy(&pair, row[r] + Step * q, sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

// The float32 GEMM: B's columns in panels of kNr, row q of a panel at bp[q * kNr]; one FMA
// multiplies a broadcast element of A's row by 16 columns of that row.
// Packs columns [j0, j0 + w) of B's k rows into bp (zeros past w), as pack_pairs.
ANVIL_TARGET_AVX512 void pack_f32(const float* const* rows, int64_t segs, int64_t s, int64_t k, int64_t j0, int64_t w,
                                  float* bp) {
  const __mmask16 m0 = w >= 16 ? __mmask16(0xffff) : __mmask16((1u << w) - 1);
  const __mmask16 m1 = w >= 32 ? __mmask16(0xffff) : w <= 16 ? __mmask16(0) : __mmask16((1u << (w - 16)) - 1);
  for (int64_t q = 0; q < k; ++q) {
    const float* r = rows[q * segs + s] + j0;
    _mm512_storeu_ps(bp + q * kNr, _mm512_maskz_loadu_ps(m0, r));
    _mm512_storeu_ps(bp + q * kNr + 16, _mm512_maskz_loadu_ps(m1, r + 16));
  }
}

// Where a row group's A and a panel's B are: A row r (of the group) is a[(i0 + r) * segs + s] + q
// for element q of run s (plain rows), or, k-major, element (r, q) is a[q * segs + a_run][i0 + r]
// (its rows in segs runs: the group's rows lie in run a_run, from its row i0); B's row q is
// bp[(q - bk0) * kNr] (packed from row bk0 on).
struct FmaOperands {
  const float* const* a = nullptr;
  int64_t segs = 1, i0 = 0, a_run = 0;
  const float* bp = nullptr;
  int64_t bk0 = 0;
};

// C[row group, panel] (+)= A x B over a k block: runs [s0, s1) of L = k / segs elements each
// (whole runs; or elements [q0, q1) of the one run when segs is 1), c the group's first row.
template <int MR, bool kKMajorA>
ANVIL_TARGET_AVX512 void fma_kernel(const FmaOperands& o, int64_t seg_len, int64_t s0, int64_t s1, int64_t q0,
                                    int64_t q1, float* c, int64_t ldc, int64_t w, bool accumulate) {
  const __mmask16 m0 = w >= 16 ? __mmask16(0xffff) : __mmask16((1u << w) - 1);
  const __mmask16 m1 = w >= 32 ? __mmask16(0xffff) : w <= 16 ? __mmask16(0) : __mmask16((1u << (w - 16)) - 1);
  __m512 acc[MR][2];
  const float* row[MR] = {};
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = accumulate ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = accumulate ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t s = s0; s < s1; ++s) {
    if constexpr (!kKMajorA)
      for (int r = 0; r < MR; ++r) row[r] = o.a[(o.i0 + r) * o.segs + s];
    const int64_t k_run = s * seg_len;  // k of the run's element 0
    for (int64_t q = q0; q < q1; ++q) {
      const __m512 b0 = _mm512_loadu_ps(o.bp + (k_run + q - o.bk0) * kNr);
      const __m512 b1 = _mm512_loadu_ps(o.bp + (k_run + q - o.bk0) * kNr + 16);
      const float* ak = nullptr;
      if constexpr (kKMajorA) {
        ak = o.a[(k_run + q) * o.segs + o.a_run] + o.i0;
        // One base register for the row group's broadcasts (GCC otherwise keeps an index register
        // per row, spilling with 11 or 12 rows).
        asm("" : "+r"(ak));
      }
      for (int r = 0; r < MR; ++r) {
        const __m512 av = _mm512_set1_ps(kKMajorA ? ak[r] : row[r][q]);
        acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

// A's rows from row i0 on, as the driver hands them to a policy: plain (row i's run s at
// rows[i * segs + s]) or k-major (packed by the driver into per-row pointers when the policy's
// kPackKMajorA says so, else A^T's rows as the caller gave them: column q's run s, rows
// [s run_rows, (s + 1) run_rows), at rows[q * segs + s]).
template <typename E>
struct ARef {
  const E* const* rows;
  int64_t segs, i0;
  bool k_major;
  int64_t run_rows;
};

// The element types' policies: E, the k rows one packed row holds (kDepth), the rows per kernel
// call (kMr), and rows (against a packed panel) / panel (a panel of B's rows, packed or not).
struct Bf16Pairs {
  using E = uint16_t;
  static constexpr int64_t kDepth = 2;
  static constexpr int kMr = 8;  // rows of C per kernel call: 16 float32 accumulators
  static constexpr bool kPackKMajorA = true;
  static constexpr const char* kName = "[bf16_pair_gemm]";
  static bool supported() { return bf16_dots_supported(); }
  static void pack(const E* const* rows, int64_t segs, int64_t s, int64_t k, int64_t j0, int64_t w, E* bp) {
    pack_pairs(rows, segs, s, k, j0, w, bp);
  }
  static void rows(const ARef<E>& a, const E* bp, int64_t m, int64_t k, float* c, int64_t ldc, int64_t w,
                   bool accumulate) {
    auto run = [&](auto step, const E* const* rows, int64_t segs) {
      by_row_groups<kMr>(m, [&](auto mr, int64_t i) {
        pair_kernel<decltype(mr)::value, decltype(step)::value>(rows + i * segs, segs, bp, k, c + i * ldc, ldc, w,
                                                                accumulate);
      });
    };
    if (a.k_major) run(std::integral_constant<int, 2 * kNr>{}, a.rows + a.i0, 1);
    else run(std::integral_constant<int, 2>{}, a.rows + a.i0 * a.segs, a.segs);
  }
  // One panel of B (its rows' columns [j0, j0 + w) of segment b_seg) packed whole into bp, then
  // every row against it.
  static void panel(const E* const* b_rows, int64_t b_segs, int64_t b_seg, int64_t j0, const ARef<E>& a, E* bp,
                    int64_t m, int64_t k, float* c, int64_t ldc, int64_t w, bool accumulate) {
    pack(b_rows, b_segs, b_seg, k, j0, w, bp);
    rows(a, bp, m, k, c, ldc, w, accumulate);
  }
};

struct F32Fma {
  using E = float;
  static constexpr int64_t kDepth = 1;
  // 12 rows, 24 accumulators. Intel Xeon VM with AVX-512 (2026-12-05; FMA peak measured 211
  // GFLOP/s per core, 175-185 for a broadcast-and-FMA kernel on data in L1), 1 thread, 96 rows x 64
  // columns x k 576 from L2 in k blocks of 192: 8 rows 154 GFLOP/s, 10-14 rows 162.
  static constexpr int kMr = 12;
  // k-major A is read in place (a row group's elements of one k are adjacent there).
  static constexpr bool kPackKMajorA = false;
  static constexpr const char* kName = "[f32_row_gemm]";
  static bool supported() { return f32_row_gemm_supported(); }
  static void pack(const E* const* rows, int64_t segs, int64_t s, int64_t k, int64_t j0, int64_t w, E* bp) {
    pack_f32(rows, segs, s, k, j0, w, bp);
  }
  // k in blocks whose part of B stays in L1 (kBlockBytes) while every row group runs over it, C
  // added to from the second block on: f(s0, s1, q0, q1, first) per block, of whole runs (of
  // k's elements when segs is 1), as even as the count of blocks allows. The same VM, 1 thread, a
  // [3136, 576] x [576, 64] conv GEMM (9 runs of 64): the whole panel (72 KB) at once 145
  // GFLOP/s, in blocks of 3 runs 157.
  static constexpr int64_t kBlockBytes = 32 << 10;
  template <typename F>
  static void k_blocks(const ARef<E>& a, int64_t k, F&& f) {
    const int64_t block_k = kBlockBytes / static_cast<int64_t>(kNr * sizeof(E));  // packed rows of B
    const int64_t segs = a.k_major ? 1 : a.segs;
    const int64_t seg_k = k / segs;
    const int64_t units = segs > 1 ? segs : k, unit_k = segs > 1 ? seg_k : 1;
    const int64_t blocks = std::max<int64_t>(1, (units * unit_k + block_k - 1) / std::max(block_k, unit_k));
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t u0 = units * b / blocks, u1 = units * (b + 1) / blocks;
      if (segs > 1) f(u0, u1, int64_t{0}, seg_k, b == 0);
      else f(int64_t{0}, int64_t{1}, u0, u1, b == 0);
    }
  }
  // Every row group over k block (s0, s1, q0, q1) of B packed at o.bp.
  static void block(const FmaOperands& given, const ARef<E>& a, int64_t seg_len, int64_t s0, int64_t s1, int64_t q0,
                    int64_t q1, int64_t m, float* c, int64_t ldc, int64_t w, bool accumulate) {
    if (!a.k_major) {
      by_row_groups<kMr>(m, [&](auto mr, int64_t i) {
        FmaOperands o = given;
        o.i0 = a.i0 + i;
        fma_kernel<decltype(mr)::value, false>(o, seg_len, s0, s1, q0, q1, c + i * ldc, ldc, w, accumulate);
      });
      return;
    }
    // k-major: groups within A's row runs.
    for (int64_t i = 0; i < m;) {
      const int64_t row = a.i0 + i, run = row / a.run_rows, in_run = row % a.run_rows;
      const int64_t len = std::min(m - i, a.run_rows - in_run);
      by_row_groups<kMr>(len, [&](auto mr, int64_t j) {
        FmaOperands o = given;
        o.a_run = run;
        o.i0 = in_run + j;
        fma_kernel<decltype(mr)::value, true>(o, seg_len, s0, s1, q0, q1, c + (i + j) * ldc, ldc, w, accumulate);
      });
      i += len;
    }
  }
  // A packed panel (kept for many row blocks).
  static void rows(const ARef<E>& a, const E* bp, int64_t m, int64_t k, float* c, int64_t ldc, int64_t w,
                   bool accumulate) {
    const int64_t segs = a.k_major ? 1 : a.segs;
    k_blocks(a, k, [&](int64_t s0, int64_t s1, int64_t q0, int64_t q1, bool first) {
      block({.a = a.rows, .segs = a.segs, .bp = bp}, a, k / segs, s0, s1, q0, q1, m, c, ldc, w, accumulate || !first);
    });
  }
  // A panel used once: each k block packed into bp (in L1) just before every row group runs
  // over it (a packed whole panel went out to L2 and came back: a channels-last weight grad's
  // panel of 3136 positions is 400 KB; B's rows read in place by the kernel: 2x slower).
  static void panel(const E* const* b_rows, int64_t b_segs, int64_t b_seg, int64_t j0, const ARef<E>& a, E* bp,
                    int64_t m, int64_t k, float* c, int64_t ldc, int64_t w, bool accumulate) {
    const int64_t segs = a.k_major ? 1 : a.segs, seg_len = k / segs;
    k_blocks(a, k, [&](int64_t s0, int64_t s1, int64_t q0, int64_t q1, bool first) {
      const int64_t k0 = s0 * seg_len + q0, kb = (s1 - s0 - 1) * seg_len + q1 - q0;
      pack(b_rows + k0 * b_segs, b_segs, b_seg, kb, j0, w, bp);
      block({.a = a.rows, .segs = a.segs, .bp = bp, .bk0 = k0}, a, seg_len, s0, s1, q0, q1, m, c, ldc, w,
            accumulate || !first);
    });
  }
};

template <class Kern>
bool row_gemm(const RowGemm<typename Kern::E>& g) {
  using E = typename Kern::E;
  constexpr int64_t D = Kern::kDepth;
  const char* name = Kern::kName;
  constexpr int kMr = Kern::kMr;
  if (!Kern::supported() || g.m < 1 || g.n < 1 || g.k < 1) return false;
  ANVIL_CHECK(!g.rows_done || g.c, Error, name, " rows_done needs C in c");
  const int64_t segs = g.a_segments;
  ANVIL_CHECK(segs == 1 || g.a_k_major || (segs > 1 && g.k % segs == 0 && g.k / segs % D == 0), Error, name,
              " A's rows must split into runs of a multiple of ", D, " elements, got k ", g.k, " in ", segs, " runs");
  const int64_t b_segs = g.b_segments, b_len = g.n / std::max<int64_t>(b_segs, 1);
  ANVIL_CHECK(b_segs == 1 || (b_segs > 1 && g.n % b_segs == 0 && b_len % kNr == 0), Error, name,
              " B's rows must split into runs of a multiple of ", kNr, " columns, got n ", g.n, " in ", b_segs, " runs");
  ANVIL_CHECK(!g.a_k_major || segs == 1 || (!Kern::kPackKMajorA && g.m % segs == 0), Error, name,
              " A given by its k rows splits them into runs of m / a_segments rows (float32), got m ", g.m, " in ",
              segs, " runs");
  const int64_t m = g.m, n = g.n, k = g.k, panels = (n + kNr - 1) / kNr;
  const int64_t panel_elems = (k + D - 1) / D * kNr * D;  // one packed panel of kNr columns (or A rows)
  // A given by its k rows: packed as B's panels are where the policy asks (all of A, once per
  // call, parallel over panels of kNr rows), row r's packed rows then kNr D elements apart.
  const bool pack_a_k_major = g.a_k_major && Kern::kPackKMajorA;
  const int64_t a_panels = pack_a_k_major ? (m + kNr - 1) / kNr : 0;
  thread_local std::vector<E> ap;
  thread_local std::vector<const E*> ap_rows;
  const E* const* a_rows = g.a_rows;
  if (pack_a_k_major) {
    if (ap.size() < static_cast<size_t>(a_panels * panel_elems)) ap.resize(static_cast<size_t>(a_panels * panel_elems));
    ap_rows.resize(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) ap_rows[static_cast<size_t>(r)] = ap.data() + r / kNr * panel_elems + r % kNr * D;
    a_rows = ap_rows.data();
  }
  E* const ap_data = ap.data();
  auto pack_a = [&](int64_t pa) {
    Kern::pack(g.a_rows, 1, 0, k, pa * kNr, std::min(kNr, m - pa * kNr), ap_data + pa * panel_elems);
  };
  auto a_from = [&](int64_t i0) { return ARef<E>{a_rows, segs, i0, g.a_k_major, m / segs}; };
  // Rows [i0, i0 + rows_m) of A against a packed panel.
  auto rows = [&](int64_t i0, const E* bp, int64_t rows_m, float* c, int64_t ldc, int64_t w, bool accumulate) {
    Kern::rows(a_from(i0), bp, rows_m, k, c, ldc, w, accumulate);
  };
  // Panel j0 (w columns; bp its buffer where the policy packs it) against rows [i0, i0 + rows_m).
  auto panel = [&](int64_t j0, int64_t w, int64_t i0, E* bp, int64_t rows_m, float* c, int64_t ldc, bool accumulate) {
    Kern::panel(g.b_rows, b_segs, j0 / b_len, j0 % b_len, a_from(i0), bp, rows_m, k, c, ldc, w, accumulate);
  };
  // Into c: with fewer panels than threads, each panel's rows split too (at multiples of kMr; each
  // part packs the panel itself). Through emit: whole panels.
  const int64_t threads = omp_get_max_threads();
  const int64_t parts = g.c && panels < threads ? std::min((threads + panels - 1) / panels, (m + kMr - 1) / kMr) : 1;
  if (g.rows_done) {
    // Row blocks: each thread packs every panel of B once and takes blocks of kRowBlock rows,
    // each block's panels one after another, then hands the block's rows to rows_done while they
    // are in cache. (Panels over all m rows wrote a channels-last conv's whole float32 result
    // before its rounding pass read it back: 800 KB per image of [4, 64, 56, 56].)
    constexpr int64_t kRowBlock = 8 * kMr;
#pragma omp parallel if (m * n * k >= (int64_t{1} << 18))
    {
      thread_local std::vector<E> bp_all;
      if (bp_all.size() < static_cast<size_t>(panels * panel_elems))
        bp_all.resize(static_cast<size_t>(panels * panel_elems));
      for (int64_t pnl = 0; pnl < panels; ++pnl)
        Kern::pack(g.b_rows, b_segs, pnl * kNr / b_len, k, pnl * kNr % b_len, std::min(kNr, n - pnl * kNr),
                   bp_all.data() + pnl * panel_elems);
#pragma omp for schedule(static)
      for (int64_t pa = 0; pa < a_panels; ++pa) pack_a(pa);
      // Each thread its own share of rows (multiples of kMr), in blocks: blocks dealt out whole left
      // one thread a block more than the other (bf16's 64-row blocks: 25 vs 24 for 3136 positions).
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num(), groups = (m + kMr - 1) / kMr;
      const int64_t r_begin = std::min(m, groups * t / nt * kMr), r_end = std::min(m, groups * (t + 1) / nt * kMr);
      for (int64_t i0 = r_begin; i0 < r_end; i0 += kRowBlock) {
        const int64_t rows_m = std::min(kRowBlock, r_end - i0);
        for (int64_t pnl = 0; pnl < panels; ++pnl)
          rows(i0, bp_all.data() + pnl * panel_elems, rows_m, g.c + i0 * g.ldc + pnl * kNr, g.ldc,
               std::min(kNr, n - pnl * kNr), g.accumulate);
        g.rows_done(i0, rows_m);
      }
    }
    return true;
  }
  thread_local std::vector<float> tile;  // per thread, through emit: [m, kNr]
#pragma omp parallel if (m * n * k >= (int64_t{1} << 18))
  {
    // The packed panel, kept per thread between calls: a fresh one (215 KiB for a channels-last
    // ResNet weight grad's k of 3362) came back from malloc as new pages, faulted in every call.
    thread_local std::vector<E> bp;
    if (bp.size() < static_cast<size_t>(panel_elems)) bp.resize(static_cast<size_t>(panel_elems));
#pragma omp for schedule(static)
    for (int64_t pa = 0; pa < a_panels; ++pa) pack_a(pa);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < panels * parts; ++task) {
      const int64_t pnl = task / parts, part = task % parts;
      const int64_t j0 = pnl * kNr, w = std::min(kNr, n - j0);
      const int64_t i0 = (m + kMr - 1) / kMr * part / parts * kMr, i1 = std::min(m, (m + kMr - 1) / kMr * (part + 1) / parts * kMr);
      if (i1 <= i0) continue;
      if (g.c) {
        panel(j0, w, i0, bp.data(), i1 - i0, g.c + i0 * g.ldc + j0, g.ldc, g.accumulate);
        continue;
      }
      if (tile.size() < static_cast<size_t>(m * kNr)) tile.resize(static_cast<size_t>(m * kNr));
      panel(j0, w, 0, bp.data(), m, tile.data(), kNr, false);
      g.emit(j0, w, tile.data());
    }
  }
  return true;
}

}  // namespace

bool bf16_pair_gemm(const PairGemm& g) { return row_gemm<Bf16Pairs>(g); }
bool f32_row_gemm(const RowGemm<float>& g) { return row_gemm<F32Fma>(g); }
bool f32_row_gemm_supported() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return supported;
}

#else

bool bf16_pair_gemm(const PairGemm&) { return false; }
bool f32_row_gemm(const RowGemm<float>&) { return false; }
bool f32_row_gemm_supported() { return false; }

#endif

}  // namespace anvil::cpu::simd
