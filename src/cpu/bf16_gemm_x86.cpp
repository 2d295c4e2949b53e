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

// One step of 32 k of a 32 x 32 block in tiles 0-3: A tiles of 16 rows at a and a + 16 lda
// (lda elements between rows), B tiles the 16 pair rows of a packed panel at b (128 bytes each),
// every load just before its first use.
ANVIL_TARGET_AMX inline void step_2x2(const uint16_t* a, int64_t lda, const uint16_t* b) {
  _tile_loadd(4, a, lda * 2);
  _tile_loadd(6, b, 128);
  _tile_dpbf16ps(0, 4, 6);
  _tile_loadd(7, b + 32, 128);
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(5, a + 16 * lda, lda * 2);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// Tiles 0-3 (a 32 x 32 block) to c, ldc floats between rows.
ANVIL_TARGET_AMX inline void store_2x2(float* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

// Tiles 0-3 to zero (a fresh 32 x 32 block).
ANVIL_TARGET_AMX inline void zero_2x2() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// Blocks of 32 rows per group of the tap GEMMs: their float32 rows (ldc floats each) within 256
// KiB, beside one panel of B in L2.
int64_t group_blocks(int64_t ldc) { return std::clamp<int64_t>((int64_t{256} << 10) / (kBlock * ldc * 4), 1, 32); }

// One 32 x 32 block: a (32 rows of lda bfloat16), b (a panel: kp rows of 64 bfloat16), kp pairs;
// c (row stride ldc floats) gets the block.
ANVIL_TARGET_AMX void block(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t kp, float* c, int64_t ldc) {
  zero_2x2();
  for (int64_t p = 0; p < kp; p += 16) step_2x2(a + 2 * p, lda, b + p * 64);
  store_2x2(c, ldc);
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

namespace {

// One A tile of 16 rows x 32 bfloat16 for bf16_amx_row_gemm: the rows' runs from column c0 on,
// loaded in place when their starts lie at one stride (16 consecutive positions of a
// channels-last input, away from its edges), else gathered into buf (rows past `rows` zero).
ANVIL_TARGET_AMX inline void load_a_tile(int tile, const uint16_t* const* starts, int64_t segs, int rows, int64_t stride,
                                         int64_t c0, uint16_t* buf) {
  if (stride != 0) {
    const uint16_t* p = starts[0] + c0;
    if (tile == 4) _tile_loadd(4, p, stride);
    else _tile_loadd(5, p, stride);
    return;
  }
  for (int r = 0; r < 16; ++r) {
    if (r < rows) std::memcpy(buf + r * 32, starts[r * segs] + c0, 64);
    else std::memset(buf + r * 32, 0, 64);
  }
  if (tile == 4) _tile_loadd(4, buf, 64);
  else _tile_loadd(5, buf, 64);
}

// The byte stride at which the run-s starts of the 16 rows from row i lie (positive, one stride
// for all), else 0 (also for a group of fewer rows).
int64_t uniform_stride(const uint16_t* const* a_rows, int64_t segs, int64_t s, int64_t i, int rows) {
  if (rows < 16) return 0;
  const auto* p0 = reinterpret_cast<const char*>(a_rows[i * segs + s]);
  const int64_t stride = reinterpret_cast<const char*>(a_rows[(i + 1) * segs + s]) - p0;
  if (stride <= 0) return 0;
  for (int r = 2; r < 16; ++r)
    if (reinterpret_cast<const char*>(a_rows[(i + r) * segs + s]) - p0 != r * stride) return 0;
  return stride;
}

// Blocks [b0, b1) of 32 rows of bf16_amx_row_gemm's C against every packed panel of B (bp, as
// bf16_gemm packs it), then rows_done for each block.
ANVIL_TARGET_AMX void amx_row_blocks(const PairGemm& g, const uint16_t* bp, int64_t b0, int64_t b1) {
  const int64_t segs = g.a_segments, m = g.m, n = g.n, run = g.k / segs, kp = g.k / 2;
  const int64_t panels = (n + kBlock - 1) / kBlock;
  configure_tiles();  // tile state is per thread
  alignas(64) uint16_t abuf[2][16 * 32];
  alignas(64) float cbuf[32 * 32];
  std::vector<int64_t> strides(static_cast<size_t>(2 * segs));
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t i0 = b * kBlock;
    const int rows = static_cast<int>(std::min<int64_t>(kBlock, m - i0));
    const int rows0 = std::min(rows, 16), rows1 = std::max(rows - 16, 0);
    for (int64_t s = 0; s < segs; ++s) {
      strides[static_cast<size_t>(2 * s)] = uniform_stride(g.a_rows, segs, s, i0, rows0);
      strides[static_cast<size_t>(2 * s + 1)] = uniform_stride(g.a_rows, segs, s, i0 + 16, rows1);
    }
    for (int64_t t = 0; t < panels; ++t) {
      zero_2x2();
      for (int64_t s = 0; s < segs; ++s)
        for (int64_t c0 = 0; c0 < run; c0 += kBlock) {
          load_a_tile(4, g.a_rows + i0 * segs + s, segs, rows0, strides[static_cast<size_t>(2 * s)], c0, abuf[0]);
          if (rows1 > 0)
            load_a_tile(5, g.a_rows + (i0 + 16) * segs + s, segs, rows1, strides[static_cast<size_t>(2 * s + 1)], c0,
                        abuf[1]);
          const uint16_t* bt = bp + (t * kp + (s * run + c0) / 2) * 64;
          _tile_loadd(6, bt, 128);
          _tile_loadd(7, bt + 32, 128);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          if (rows1 > 0) {
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
        }
      const int64_t j0 = t * kBlock, w = std::min<int64_t>(kBlock, n - j0);
      float* c = g.c + i0 * g.ldc + j0;
      if (rows == kBlock && w == kBlock && !g.accumulate) {
        store_2x2(c, g.ldc);
        continue;
      }
      store_2x2(cbuf, 32);
      for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < w; ++j) c[r * g.ldc + j] = (g.accumulate ? c[r * g.ldc + j] : 0.f) + cbuf[r * 32 + j];
    }
    if (g.rows_done) g.rows_done(i0, rows);
  }
  release_tiles();
}

// Blocks [b0, b1) of bf16_amx_shifted_gemm's outputs (block b: row block b / panels of 32 rows
// (t, ch), column panel b % panels), over the positions in steps of kSpan: a step's A rows
// (32 channels x kSpan positions per tap) and B panel stay in L1 across the blocks, the C tiles
// go back to c between steps.
ANVIL_TARGET_AMX void amx_shifted_blocks(const AmxShiftedGemm& g, int64_t b0, int64_t b1) {
  constexpr int64_t kSpan = 4096;
  const int64_t panels = g.co / kBlock, cblocks = g.channels / kBlock, kp = g.positions / 2;
  configure_tiles();  // tile state is per thread
  for (int64_t k0 = 0; k0 < g.positions; k0 += kSpan) {
    const int64_t k1 = std::min(k0 + kSpan, g.positions);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t rb = b / panels, panel = b % panels, tap = rb / cblocks, ch = rb % cblocks * kBlock;
      float* c = g.c + (tap * g.channels + ch) * g.ldc + panel * kBlock;
      if (k0 == 0 && !g.accumulate) {
        zero_2x2();
      } else {
        _tile_loadd(0, c, g.ldc * 4);
        _tile_loadd(1, c + 16, g.ldc * 4);
        _tile_loadd(2, c + 16 * g.ldc, g.ldc * 4);
        _tile_loadd(3, c + 16 * g.ldc + 16, g.ldc * 4);
      }
      const uint16_t* a = g.at + ch * g.ld_at + g.offsets[tap];
      const uint16_t* bt = g.bp + panel * kp * 64;
      for (int64_t k = k0; k < k1; k += kBlock) step_2x2(a + k, g.ld_at, bt + k * 32);
      store_2x2(c, g.ldc);
    }
  }
  release_tiles();
}

// One A tile of bf16_amx_row_tap_gemm: the 16 positions from w0 of tap t in row r, in place (at
// *stride bytes apart) when they all lie inside the input row, else gathered into buf (16 rows of
// the tile's channels, zeros outside the row).
inline const uint16_t* row_tap_tile(const AmxRowTapGemm& g, const uint16_t* row, int64_t t, int64_t w0, uint16_t* buf,
                                    int64_t* stride) {
  const int64_t c0 = w0 * g.stride + g.shift[t], c15 = c0 + 15 * g.stride;
  if (c0 >= 0 && c15 < g.in_width) {
    *stride = g.stride * g.ldx * 2;
    return row + c0 * g.ldx;
  }
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t c = c0 + i * g.stride;
    if (c >= 0 && c < g.in_width)
      std::memcpy(buf + i * g.channels, row + c * g.ldx, static_cast<size_t>(g.channels) * 2);
    else
      std::memset(buf + i * g.channels, 0, static_cast<size_t>(g.channels) * 2);
  }
  *stride = g.channels * 2;
  return buf;
}

// bf16_amx_row_tap_gemm's blocks [b0, b1) (block b: row b / per_row, positions from b % per_row
// 32) on one thread.
ANVIL_TARGET_AMX void amx_row_tap_blocks(const AmxRowTapGemm& g, int64_t b0, int64_t b1) {
  const int64_t panels = (g.co + kBlock - 1) / kBlock, ldc = panels * kBlock, kp = g.taps * g.channels / 2;
  const int64_t per_row = (g.width + kBlock - 1) / kBlock;
  const int64_t group = group_blocks(ldc);
  // Each (block of the group, tap, tile)'s A operand, found (and gathered) at the first panel and
  // reused by the others (gathered again per panel: SD [1, 128, 64, 64] channels-last 0.70-0.72
  // vs 0.68 ms, ResNet [4, 64, 56, 56] 0.815-0.82 vs 0.80).
  const int64_t tiles = group * g.taps * 2;
  thread_local std::vector<float> cbuf;
  thread_local std::vector<uint16_t> gather;
  thread_local std::vector<const uint16_t*> a_tile;
  thread_local std::vector<int64_t> a_stride;
  cbuf.resize(static_cast<size_t>(group * kBlock * ldc));
  gather.resize(static_cast<size_t>(tiles * 16 * g.channels));
  a_tile.resize(static_cast<size_t>(tiles));
  a_stride.resize(static_cast<size_t>(tiles));
  configure_tiles();  // tile state is per thread
  for (int64_t g0 = b0; g0 < b1; g0 += group) {
    const int64_t g1 = std::min(b1, g0 + group);
    for (int64_t j = 0; j < panels; ++j) {
      const uint16_t* panel = g.bp + j * kp * 64;
      for (int64_t b = g0; b < g1; ++b) {
        const int64_t r = b / per_row, w0 = b % per_row * kBlock;
        const bool both = w0 + 16 < g.width;  // the second tile holds output positions
        zero_2x2();
        for (int64_t t = 0; t < g.taps; ++t) {
          const uint16_t* row = g.a_rows[r * g.taps + t];
          if (row == nullptr) continue;
          const size_t q = static_cast<size_t>(((b - g0) * g.taps + t) * 2);
          if (j == 0) {
            uint16_t* buf = gather.data() + static_cast<int64_t>(q) * 16 * g.channels;
            a_tile[q] = row_tap_tile(g, row, t, w0, buf, &a_stride[q]);
            if (both) a_tile[q + 1] = row_tap_tile(g, row, t, w0 + 16, buf + 16 * g.channels, &a_stride[q + 1]);
          }
          const uint16_t *a0 = a_tile[q], *a1 = a_tile[q + 1];
          const int64_t s0 = a_stride[q], s1 = a_stride[q + 1];
          const uint16_t* bt = panel + t * g.channels * 32;
          for (int64_t c0 = 0; c0 < g.channels; c0 += kBlock) {
            _tile_loadd(4, a0 + c0, s0);
            _tile_loadd(6, bt + c0 * 32, 128);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, bt + c0 * 32 + 32, 128);
            _tile_dpbf16ps(1, 4, 7);
            if (both) {
              _tile_loadd(5, a1 + c0, s1);
              _tile_dpbf16ps(2, 5, 6);
              _tile_dpbf16ps(3, 5, 7);
            }
          }
        }
        float* c = cbuf.data() + (b - g0) * kBlock * ldc;
        store_2x2(c + j * kBlock, ldc);
        if (j + 1 == panels && g.y_rows)  // the block's last panel: bias, rounded into y
          bias_rows_to_bf16(c, ldc, g.bias, g.y_rows[r] + w0 * g.ldy, g.ldy, std::min(kBlock, g.width - w0), g.co);
      }
    }
    if (!g.y_rows) g.rows_done(g0 * kBlock, std::min(g1 * kBlock, g.width) - g0 * kBlock, cbuf.data(), ldc);
  }
  release_tiles();
}

}  // namespace

bool bf16_amx_row_tap_gemm(const AmxRowTapGemm& g) {
  if (!amx_usable() || g.channels % kBlock != 0 || g.taps < 1 || g.co < 1 || g.stride < 1 || (!g.y_rows && g.rows != 1))
    return false;
  const int64_t blocks = g.rows * ((g.width + kBlock - 1) / kBlock);
#pragma omp parallel if (blocks * g.co * g.channels * g.taps >= (int64_t{1} << 16))
  {
    const int64_t nt = omp_get_num_threads(), th = omp_get_thread_num();
    amx_row_tap_blocks(g, blocks * th / nt, blocks * (th + 1) / nt);
  }
  return true;
}

bool bf16_amx_shifted_gemm(const AmxShiftedGemm& g) {
  if (!amx_usable() || g.channels % kBlock != 0 || g.co % kBlock != 0 || g.positions % kBlock != 0 || g.taps < 1)
    return false;
  const int64_t blocks = g.taps * g.channels / kBlock * (g.co / kBlock);
  if (blocks == 0 || g.positions == 0) {
    if (!g.accumulate)
      for (int64_t r = 0; r < g.taps * g.channels; ++r) std::fill(g.c + r * g.ldc, g.c + r * g.ldc + g.co, 0.f);
    return true;
  }
#pragma omp parallel if (blocks * g.positions >= (int64_t{1} << 12))
  {
    const int64_t nt = omp_get_num_threads(), th = omp_get_thread_num();
    amx_shifted_blocks(g, blocks * th / nt, blocks * (th + 1) / nt);
  }
  return true;
}

bool amx_bf16_supported() { return amx_usable(); }

bool bf16_amx_row_gemm(const PairGemm& g) {
  if (!amx_usable() || !bf16_dots_supported() || g.a_k_major || g.b_segments != 1 || !g.c || g.m < 1 || g.n < 1 || g.k < 1) return false;
  const int64_t segs = g.a_segments, m = g.m, n = g.n, k = g.k;
  if (segs < 1 || k % segs != 0 || (k / segs) % kBlock != 0) return false;
  const int64_t kp = k / 2, panels = (n + kBlock - 1) / kBlock;
  // B: panel t's pair row p at bp[(t * kp + p) * 64] (its 32 columns' two values adjacent), the
  // pair GEMM's panels one after another.
  thread_local std::vector<uint16_t> bp_buf;  // the calling thread's: a pointer into it goes to the team
  bp_buf.resize(static_cast<size_t>(panels * kp * 64));
  uint16_t* const bp = bp_buf.data();
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 16))
  for (int64_t t = 0; t < panels; ++t)
    pack_pairs(g.b_rows, 1, 0, k, t * kBlock, std::min<int64_t>(kBlock, n - t * kBlock), bp + t * kp * 64);
  const int64_t blocks = (m + kBlock - 1) / kBlock;
#pragma omp parallel if (m * n * k >= (int64_t{1} << 18))
  {
    // Each thread a contiguous share of the blocks (rows_done sees its rows in order).
    const int64_t nt = omp_get_num_threads(), th = omp_get_thread_num();
    amx_row_blocks(g, bp, blocks * th / nt, blocks * (th + 1) / nt);
  }
  return true;
}

#else

bool amx_bf16_supported() { return false; }
bool bf16_amx_row_gemm(const PairGemm&) { return false; }
bool bf16_amx_shifted_gemm(const AmxShiftedGemm&) { return false; }
bool bf16_amx_row_tap_gemm(const AmxRowTapGemm&) { return false; }

bool bf16_gemm(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
               const std::function<void(int64_t, int64_t, const float*)>&) {
  return false;
}

#endif

}  // namespace anvil::cpu::simd
