// bfloat16 GEMM on x86 CPUs with AMX-BF16 (Sapphire Rapids and later): C = A B in float32 from
// blocks of 32 x 32 outputs, each four 16 x 16 float32 tiles fed by two A tiles (16 rows x 32 k)
// and two B tiles (16 k pairs x 16 columns) per 32 k. A is packed as dense rows padded to a
// multiple of 32 k, B in panels of 32 columns whose k pairs are interleaved (row p of a panel:
// B[2p, j], B[2p + 1, j] for its 32 columns j), both zero-padded. tdpbf16ps adds the products of
// each k pair to float32 accumulators, k ascending in blocks of 32; it reads inputs below 2^-126
// as zero and flushes such results (the caveat of cpu/bf16_dots_x86.cpp's vdpbf16ps). On the dev
// machine's AMX core: 1.15 TFLOP/s per core for an L2-resident block, where float32 FMAs give
// 0.19 and vdpbf16ps 0.11 (docs/PERFORMANCE.md). Without AMX (or the kernel's permission to use
// its tile state) callers keep their float32 panel path.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ANVIL_AMX 1
#define ANVIL_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))
#endif

namespace anvil::cpu::simd {

#ifdef ANVIL_AMX
namespace {

constexpr int64_t kBlock = 32;  // rows and columns of a block of C; k per step

// AMX-BF16 and AMX-TILE in CPUID leaf 7 (EDX bits 22 and 24), and Linux's permission for this
// process to use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM of XFEATURE_XTILEDATA).
bool amx_usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 22) & 1) || !((d >> 24) & 1)) return false;
    constexpr long kReqPerm = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kReqPerm, kTileData) == 0;
  }();
  return usable;
}

// Palette 1: tiles 0-3 C (16 rows of 16 float32), 4-5 A (16 rows of 32 bfloat16), 6-7 B (16 k
// pairs of 16 columns).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
constexpr TileConfig make_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  return cfg;
}
// A constant object: GCC 12 drops stores to a local one before ldtilecfg (it does not see the
// builtin read them).
constexpr TileConfig kTileConfig = make_config();
ANVIL_TARGET_AMX void configure_tiles() { _tile_loadconfig(&kTileConfig); }
ANVIL_TARGET_AMX void release_tiles() { _tile_release(); }

// One 32 x 32 block: a (32 rows of lda bfloat16), b (a panel: kp rows of 64 bfloat16), kp pairs;
// c (row stride ldc floats) gets the block.
ANVIL_TARGET_AMX void block(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t kp, float* c, int64_t ldc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t p = 0; p < kp; p += 16) {
    _tile_loadd(4, a + 2 * p, lda * 2);
    _tile_loadd(5, a + 16 * lda + 2 * p, lda * 2);
    _tile_loadd(6, b + p * 64, 128);
    _tile_loadd(7, b + p * 64 + 32, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

uint16_t at(const uint16_t* x, int64_t i, int64_t j, int64_t s_i, int64_t s_j) { return x[i * s_i + j * s_j]; }

}  // namespace

bool bf16_gemm(const uint16_t* a, int64_t sa_row, int64_t sa_col, const uint16_t* b, int64_t sb_row, int64_t sb_col,
               int64_t m, int64_t n, int64_t k, const std::function<void(int64_t, int64_t, const float*)>& emit) {
  if (!amx_usable()) return false;
  const int64_t kpad = (k + kBlock - 1) / kBlock * kBlock, kp = kpad / 2;
  const int64_t panels = (n + kBlock - 1) / kBlock, npad = panels * kBlock;
  // B: panel t's pair row p at bp[(t * kp + p) * 64], its 32 columns' two values adjacent.
  std::vector<uint16_t> bp(static_cast<size_t>(panels * kp * 64));
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 16))
  for (int64_t t = 0; t < panels; ++t)
    for (int64_t p = 0; p < kp; ++p) {
      uint16_t* dst = bp.data() + (t * kp + p) * 64;
      for (int64_t j = 0; j < kBlock; ++j) {
        const int64_t col = t * kBlock + j;
        const bool in = col < n;
        dst[2 * j] = in && 2 * p < k ? at(b, 2 * p, col, sb_row, sb_col) : 0;
        dst[2 * j + 1] = in && 2 * p + 1 < k ? at(b, 2 * p + 1, col, sb_row, sb_col) : 0;
      }
    }
  // Row blocks whose packed A and float32 C stay within ~8 MiB.
  const int64_t mb = std::min((m + kBlock - 1) / kBlock * kBlock,
                              std::max<int64_t>(kBlock, (int64_t{8} << 20) / (2 * kpad + 4 * npad) / kBlock * kBlock));
  std::vector<uint16_t> ap(static_cast<size_t>(mb * kpad));
  std::vector<float> c(static_cast<size_t>(mb * npad));
  for (int64_t i0 = 0; i0 < m; i0 += mb) {
    const int64_t rows = std::min(mb, m - i0), slivers = (rows + kBlock - 1) / kBlock;
#pragma omp parallel if (rows * n * k >= (int64_t{1} << 18))
    {
      // Dense rows whose k is a whole number of steps are read in place, all but a partial last sliver.
      const bool direct = sa_col == 1 && k == kpad;
      const int64_t first_packed = direct ? rows / kBlock * kBlock : 0;
#pragma omp for schedule(static)
      for (int64_t i = first_packed; i < slivers * kBlock; ++i) {
        uint16_t* dst = ap.data() + i * kpad;
        if (i >= rows) {
          std::memset(dst, 0, static_cast<size_t>(kpad) * 2);
          continue;
        }
        const uint16_t* row = a + (i0 + i) * sa_row;
        if (sa_col == 1) std::memcpy(dst, row, static_cast<size_t>(k) * 2);
        else
          for (int64_t q = 0; q < k; ++q) dst[q] = row[q * sa_col];
        std::memset(dst + k, 0, static_cast<size_t>(kpad - k) * 2);
      }
      configure_tiles();  // tile state is per thread
      // Panel-major: a thread's blocks run down one panel of B while it stays in cache.
#pragma omp for schedule(static) collapse(2)
      for (int64_t t = 0; t < panels; ++t)
        for (int64_t s = 0; s < slivers; ++s) {
          const bool in_place = s * kBlock < first_packed;
          block(in_place ? a + (i0 + s * kBlock) * sa_row : ap.data() + s * kBlock * kpad, in_place ? sa_row : kpad,
                bp.data() + t * kp * 64, kp, c.data() + s * kBlock * npad + t * kBlock, npad);
        }
      release_tiles();
    }
    // emit takes [rows, n] dense: drop the padded columns in place.
    if (npad != n)
      for (int64_t i = 1; i < rows; ++i) std::memmove(c.data() + i * n, c.data() + i * npad, static_cast<size_t>(n) * 4);
    emit(i0, rows, c.data());
  }
  return true;
}

#else

bool bf16_gemm(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
               const std::function<void(int64_t, int64_t, const float*)>&) {
  return false;
}

#endif

}  // namespace anvil::cpu::simd
