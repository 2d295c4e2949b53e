#pragma once
// Highway kernels for the contiguous hot paths (one source, the best SIMD target chosen at run
// time). Each returns false when it has no kernel for the request, so callers fall back.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/kernels/elementwise.h"

namespace anvil::cpu::simd {

bool convert(DType to, DType from, void* dst, const void* src, int64_t n);
// out = a op b (add / sub with alpha, mul) over n contiguous float32 / bfloat16 elements,
// computed in float32 as apply_binary computes them; false (nothing written) for other ops / dtypes.
bool binary(BinaryOp op, DType t, void* out, const void* a, const void* b, double alpha, int64_t n);
// The same over one row on the calling thread, a / b either a run of n elements (a_run / b_run)
// or one element repeated (a broadcast along the row); for ops and dtypes has_binary_row accepts.
bool has_binary_row(BinaryOp op, DType t);
void binary_row(BinaryOp op, DType t, void* out, const void* a, bool a_run, const void* b, bool b_run, double alpha,
                int64_t n);
// out = op(in) over n contiguous elements of a float32 / bfloat16 / float16 dtype for silu,
// sigmoid and exp (float32 compute, Highway's Exp, one rounding; cpu/activation.cpp); false
// (nothing written) for other ops and dtypes.
bool unary(UnaryOp op, DType t, void* out, const void* in, int64_t n);
// Sum of n contiguous float32 / bfloat16 values: float32 lanes per 4096-element block, blocks in double.
bool sum(DType t, const void* in, int64_t n, double* out);
// The first NaN's index if any, else the first index of the maximum (n > 0).
int64_t argmax_f32(const float* x, int64_t n);
// Columns of one packed panel of B for gemm_panel: two vectors of the dispatched target.
int64_t gemm_panel_width();
// c[i, 0:w] = sum_p a[i, p] * panel[p, 0:width] for i < m, accumulated in float32: a is
// row-major [m, k], panel is [k, gemm_panel_width()] (zero-padded past w), c has row stride ldc.
void gemm_panel(const float* a, int64_t m, int64_t k, const float* panel, float* c, int64_t ldc, int64_t w);
const char* target_name();
// n contiguous float32 / bfloat16 / float16 / float8 values to float32 and back (the encoder
// rounds to nearest even like anvil's scalar conversions, float8 saturating).
void decode_f32(DType from, const void* src, float* out, int64_t n);
// Softmax of one contiguous float32 row (cpu/softmax.cpp's three passes); x and y may alias.
void softmax_row(const float* x, float* y, int64_t n);
// Max of n float32 values (-inf for n = 0); a NaN may or may not win (SIMD max).
float row_max(const float* x, int64_t n);
// Sum over i < n of exp(x[i] - m) for x[i] <= m (-inf gives 0) or NaN (kept), each term within
// about 1 ulp (cpu/softmax.cpp); the terms go to e when e is not null (e may be x: each term
// is stored after its input is loaded).
float exp_sum(const float* x, float* e, int64_t n, float m);
void encode_f32(DType to, const float* in, void* dst, int64_t n);
// y[r ldy + j] = bf16(c[r ldc + j] + bias[j]) for r < rows, j < cols (bias null: none), rounded
// as encode_f32 rounds.
void bias_rows_to_bf16(const float* c, int64_t ldc, const float* bias, uint16_t* y, int64_t ldy, int64_t rows,
                       int64_t cols);
// Normalisation statistics of float32 data (cpu/norm.cpp), each product and sum rounded on its
// own, the same bits on every x86 target. Lanes: lanes[kStatLanes] in float64, lane l adding
// x[i] (or (x[i] - mean)^2) for i % kStatLanes == l over whole groups and the tail x[n_full + t]
// into lane t, in index order; within each block of kStatBlock whole groups a lane sums in
// float32 (the deviation from float(mean)), then adds that partial to its float64 total. A block
// partial's error is at most kStatBlock float32 roundings of its terms' magnitudes; float64
// sums the blocks. A call starts a block, so calls over consecutive chunks whose lengths are
// multiples of kStatLanes * kStatBlock give the bits of one call over their range.
// Columns: s[j] += x[r, j] (or (x[r, j] - float(mu[j]))^2) over rows [rows, c] in order, in
// float32 blocks of kStatBlock rows, each added to the float64 s[j].
constexpr int kStatLanes = 32;
constexpr int64_t kStatBlock = 64;
void lane_sums(const float* x, int64_t n, double* lanes);
// The same over bfloat16 bits, widened as they are loaded (decode_f32 then lane_sums' bits).
void lane_sums(const uint16_t* x, int64_t n, double* lanes);
void lane_squared_deviations(const float* x, int64_t n, double mean, double* lanes);
// The same over bfloat16 bits, widened as they are loaded.
void lane_squared_deviations(const uint16_t* x, int64_t n, double mean, double* lanes);
void column_sums(const float* x, int64_t rows, int64_t c, double* s);
void column_squared_deviations(const float* x, int64_t rows, int64_t c, const double* mu, double* q);
// column_sums of bfloat16 bits widened to float32, stored to `widened` [rows, c] in the same pass.
void decode_column_sums_bf16(const uint16_t* x, int64_t rows, int64_t c, float* widened, double* s);
// y = ((x - mean) * invstd) * w + b in float32, each step rounded, w / b null: skipped; per
// column of [rows, c] or with one set of parameters over n values.
void normalise_columns(const float* x, int64_t rows, int64_t c, const float* mean, const float* invstd, const float* w,
                       const float* b, float* y);
// normalise_columns from and to bfloat16 bits (widened as loaded, rounded as encode_f32 rounds).
void normalise_columns_bf16(const uint16_t* x, int64_t rows, int64_t c, const float* mean, const float* invstd,
                            const float* w, const float* b, uint16_t* y);
void normalise_scalar(const float* x, int64_t n, float mean, float invstd, const float* w, const float* b, float* y);
// normalise_scalar rounded to bfloat16 bits as it is stored (encode_f32's rounding).
void normalise_scalar_bf16(const float* x, int64_t n, float mean, float invstd, const float* w, const float* b,
                           uint16_t* y);
// The same from bfloat16 bits x (widened as loaded).
void normalise_scalar_bf16(const uint16_t* x, int64_t n, float mean, float invstd, const float* w, const float* b,
                           uint16_t* y);
// y[i] += a * x[i] over n values, the product and the sum each rounded (the scalar loop's bits).
void axpy(float a, const float* x, float* y, int64_t n);
// For each position p < positions: y[p * n + i] = init[i] (0 when init is null) + w[0][i] *
// x[0][p * x_step + i] + ... + w[taps - 1][i] * x[taps - 1][p * x_step + i] over n values, added
// in tap order, each product and sum rounded (no fused multiply-add: the scalar loop's bits),
// then stored as dtype; x rows and y of dtype float32 or bfloat16 (false for other dtypes:
// nothing done). A run of positions (a channels-last row of outputs) loads each weight vector
// once for several of them.
bool mul_add_taps(DType dtype, const float* const* w, const void* const* x, int64_t taps, int64_t positions,
                  int64_t x_step, const float* init, void* y, int64_t n);
// A banded, strided gather over rows (an upsampling H x W interior), on rows split into their r
// phases: split_phases writes out[m * stride + j] = x[r * j + m] for r * j + m < n, m < r (r in
// [1, 4]); banded_rows then reads a row's element r * i + off as its phase (off mod r) at
// i + floor(off / r). For each destination row j < nrows, whose source rows are
// x[row_begin[j] .. row_begin[j + 1]) with weights wrow[...], and i in [i0, i1): with w_b(i) =
// sum over t < taps of c[t] * x_b[r * i + off[t]] added in tap order from init (0 for a gather,
// a bias for a convolution), y[j * ystride + i]
// = w_b(i) of its one row when unit, else the sum over its rows of wrow[b] * w_b(i) from 0; each
// product and sum rounded (the scalar loops' bits). Every read lies in its phase; y overlaps no
// row. false for r outside [1, 4] or taps outside [1, 16] (nothing done).
void split_phases(const float* x, int64_t n, int64_t r, float* out, int64_t stride);
bool banded_rows(const float* const* x, int64_t stride, const float* wrow, const int64_t* row_begin, int64_t nrows,
                 bool unit, int64_t r, const int64_t* off, const float* c, int taps, float init, float* y,
                 int64_t ystride, int64_t i0, int64_t i1);
// y[h * n + i] = the sum over a < rh (from 0) of the sum over b < rw (from 0) of
// g[(rh * h + a) * g_row + rw * i + b], for h < rows and i < n, in float32 and stored as t
// (float32 or bfloat16; each sum rounded: the scalar loops' bits): a nearest upsampling's
// backward at integer scales rh, rw in [1, 4]. y must not overlap g; false (nothing done) for
// other dtypes or scales.
bool block_sums(DType t, const void* g, int64_t g_row, int64_t rh, int64_t rw, void* y, int64_t rows, int64_t n);
// y[i] = ((0 + x[0][i]) + x[1][i]) + ... + x[count - 1][i] over n values of float32 or bfloat16
// (t), summed in float32 and stored as t (the scalar loop's bits); y must not overlap any x row;
// false for other dtypes (nothing done).
bool sum_rows(DType t, const void* const* x, int64_t count, void* y, int64_t n);
// dst[r * i + m] = src[i] for m < r, i < n: each element repeated r times, as bits, for elements
// of 1, 2, 4 or 8 bytes; false for r outside [2, 4] or other sizes (nothing done).
bool repeat_lanes(size_t elem, const void* src, void* dst, int64_t n, int r);
// One output row of a stride-1 conv with co <= 4 output channels, in float32:
// out[c * ldo + i] = bias[c] (0 without) + sum over r < nrows (rows[r] null: a padding row,
// skipped) and t < kw of w[(c * nrows + r) * kw + t] * rows[r][i + t d], fused multiply-adds,
// for i < width rounded up to conv_row_few_block() (out and every row readable that far, rows
// (kw - 1) d further).
void conv_row_few(const float* const* rows, int64_t nrows, const float* w, int64_t co, int64_t kw, int64_t d,
                  int64_t width, const float* bias, float* out, int64_t ldo);
int64_t conv_row_few_block();
// conv_row_few in bfloat16 pairs (vdpbf16ps, AVX512-BF16 CPUs: false elsewhere, nothing done):
// rows[r] holds channels (2 j, 2 j + 1) of one input row interleaved, element i the pair at
// position i (the low half the even channel); w[(c * nrows + r) * kw + t] the matching pair of
// weights; widths rounded up to 64 positions.
bool conv_row_pairs(const uint32_t* const* rows, int64_t nrows, const uint32_t* w, int64_t co, int64_t kw, int64_t d,
                    int64_t width, const float* bias, float* out, int64_t ldo);
// out[i] = a[i] | b[i] << 16 for i < n (b null: zeros); false without AVX512-BF16 / VBMI.
bool interleave_u16(const uint16_t* a, const uint16_t* b, uint32_t* out, int64_t n);
// mul_add_taps for groups of kw consecutive taps along the positions' axis (stride and dilation
// 1, positions n apart): y[p * n + i] = init[i] + the sum over g < groups, t < kw (in that
// order) of w[g * kw + t][i] * x[g][(p + t) * n + i], each product and sum rounded, stored as
// dtype; each input vector is loaded once for the kw taps that read it. false (nothing done)
// for dtypes other than float32 / bfloat16 or kw other than 3, 5, 7.
bool mul_add_window(DType dtype, const float* const* w, const void* const* x, int64_t groups, int64_t kw,
                    int64_t positions, const float* init, void* y, int64_t n);
// Software prefetch distance of the GEMV weight streams (cpu/gemv-inl.h, cpu/bf16_dots_x86.cpp),
// bytes ahead into L2; measured in gemv-inl.h.
constexpr int64_t kGemvPrefetchBytes = 4096;
// GEMV dots through the shared core (cpu/gemv-inl.h): d[i * stride_d + j] = dot(x[i, :], w[j, :])
// for weight rows [j0, j1) of w (float32 / bfloat16 / float16 / float8, unit column stride,
// row stride stride_w in elements) and m <= 8 float32 rows x [m, k] contiguous. x_bf16: every x
// value is a bfloat16 value (activations widened from bfloat16 or float8), which lets bfloat16
// and float8 weights take bf16_dots where the CPU has it. block: float8 weights with block scales
// (rows counted from w), applied per block inside the dot (bf16_dots for block_k % 64 == 0, else
// each row decoded and scaled into a float32 buffer first).
void gemv_dots(DType w_dtype, const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, float* d,
               int64_t stride_d, int64_t j0, int64_t j1, bool x_bf16, const BlockScale* block = nullptr);
// The same dots for bfloat16 / float8 weights and bfloat16-valued x by AVX512-BF16 pair products
// (float8 decoded by AVX512-VBMI table lookups; cpu/bf16_dots_x86.cpp); false (nothing written)
// when the CPU or the request has no such path.
bool bf16_dots(DType w_dtype, const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, float* d,
               int64_t stride_d, int64_t j0, int64_t j1, const BlockScale* block = nullptr);
// bf16_dots for bfloat16 weights with x packed once by the caller (xp: [m, k / 64 * 64] bfloat16,
// x's first k / 64 * 64 columns as they are) and reused over many weight blocks (the CPU GEMM);
// x (float32, row i at x + i * stride_x) serves the k % 64 tail: only its columns
// [k / 64 * 64, k) are read.
bool bf16_dots_supported();
// C = A[m, k] B[k, n] in float32, A's and B's rows given by pointers (cpu/row_gemm_x86.cpp): row
// i of A is k contiguous elements from a_rows[i] (or runs of them: a_segments), row q of B n
// contiguous ones from b_rows[q] (plain matrices, or implicit-GEMM operands such as a
// convolution's shifted input rows). E = uint16_t: bfloat16 A and B by AVX512-BF16 pair products
// (bf16_pair_gemm; vdpbf16ps: exact products, float32 sums in pairs; inputs below 2^-126 read as
// zero); E = float: float32 A and B by AVX-512 fused multiply-adds, k ascending
// (f32_row_gemm). OpenMP-parallel over panels of kPairPanel columns of B (and over A's rows when
// there are fewer panels than threads and C goes to c). C goes to c (row-major, ldc; overwritten,
// or added to when `accumulate`), or, when c is null, to emit(j0, w, tile) a panel at a time: tile
// [m, kPairPanel] (row stride kPairPanel, the first w columns valid; the caller may overwrite it),
// called inside the OpenMP region on the thread that computed it. false (nothing written) where
// the CPU lacks the instructions.
constexpr int64_t kPairPanel = 32;
template <typename E>
struct RowGemm {
  const E* const* a_rows = nullptr;
  const E* const* b_rows = nullptr;
  int64_t m = 0, n = 0, k = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  std::function<void(int64_t, int64_t, float*)> emit;
  // A row i as a_segments runs of k / a_segments elements (for bfloat16 an even count when more
  // than one), at a_rows[i * a_segments + s]: an implicit GEMM whose A rows are gathered (a
  // channels-last convolution's taps, each C contiguous channels).
  int64_t a_segments = 1;
  // B's row q as b_segments runs of n / b_segments columns (a multiple of kPairPanel), at
  // b_rows[q * b_segments + s]: a channels-last convolution's weight grad, every tap in one call.
  int64_t b_segments = 1;
  // A given by its k rows instead: a_rows[q] points to the m contiguous elements of A's column q
  // (A^T's row q): a channels-last weight grad's output gradient, untransposed (bfloat16; packed
  // in pairs by the GEMM). float32 also takes A^T's row q as a_segments runs of m / a_segments
  // elements at a_rows[q * a_segments + s] (a channels-last weight grad's input taps, read in
  // place); bfloat16 takes a_segments 1.
  bool a_k_major = false;
  // With c: rows in blocks instead of panels over all rows (for B of a few panels and many rows),
  // rows_done(i0, count) called on the computing thread, inside the OpenMP region, once C's rows
  // [i0, i0 + count) are complete (the caller rounds them while they are in cache).
  std::function<void(int64_t, int64_t)> rows_done{};
};
using PairGemm = RowGemm<uint16_t>;
bool bf16_pair_gemm(const PairGemm& g);
// One panel of bfloat16 B as the pair GEMM and AMX tiles read it: columns [j0, j0 + w) (w <=
// kPairPanel) of k rows, row q's columns from rows[q * segs + s] + j0, into bp with the rows in
// pairs interleaved (pair q of column j at bp[(q * kPairPanel + j) * 2 + {0, 1}]; zeros past w
// and past k). CPUs with AVX512-BF16 / VBMI only (bf16_dots_supported).
void pack_pairs(const uint16_t* const* rows, int64_t segs, int64_t s, int64_t k, int64_t j0, int64_t w, uint16_t* bp);
// bf16_pair_gemm on AMX tiles (cpu/bf16_gemm_x86.cpp) for plain A rows given as runs of a
// multiple of 32 elements (loaded as tiles in place where 16 rows' runs lie at one stride,
// gathered elsewhere), B as plain rows (b_segments 1) and C to c (rows_done after each block of 32
// rows, on the computing thread); tdpbf16ps's sums in another order than vdpbf16ps's. false
// (nothing written) for other requests or CPUs without AMX-BF16.
bool bf16_amx_row_gemm(const PairGemm& g);
// A stride-1 channels-last weight grad's GEMM on AMX tiles: for every tap t < taps,
//   c[(t C + ch) ldc + co] (+)= sum over k < positions of at[ch ld_at + offsets[t] + k] * gy(k, co)
// with at the input transposed ([C][positions], each tap's operand a shifted view of it, read in
// place as A tiles) and gy(k, co) the output gradient packed in pairs as pack_pairs writes it,
// panel after panel (panel j: columns [32 j, 32 j + 32), pair rows at bp + (j positions / 2 +
// q) 64). C and co multiples of 32, positions of 32; at readable through offsets[t] + positions.
// false (nothing written) without AMX-BF16.
struct AmxShiftedGemm {
  const uint16_t* at = nullptr;
  int64_t ld_at = 0;
  const int64_t* offsets = nullptr;
  int64_t taps = 0, channels = 0, co = 0, positions = 0;
  const uint16_t* bp = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
};
bool bf16_amx_shifted_gemm(const AmxShiftedGemm& g);
// A channels-last conv's forward (any strides and dilations) on AMX tiles, reading the input in
// place, rounded to bfloat16 as it goes: for output row r < rows (the positions along the conv's
// innermost axis, width of them) and position w,
//   y_rows[r][w ldy + co] = bf16(bias[co] + sum over taps t, channels ch of
//                                a_rows[r taps + t][(w stride + shift[t]) ldx + ch] w_t(ch, co))
// where a null a_rows entry is a tap that falls in the padding for the whole row and input
// positions outside [0, in_width) read zero. Each tap's A tile is 16 output positions: loaded in
// place (row stride stride ldx) where all 16 lie inside the input row, else gathered with zeros.
// w_t(ch, co) is B's row t C + ch, packed in pairs a panel of 32 columns after another as
// pack_pairs writes them (panel j at bp + j taps C / 2 * 64); bias float32 (null: none). Blocks
// of 32 positions run a group at a time on one thread, panel by panel (a panel's B stays in L2
// across the group), each block rounded into y once its last panel is done; with y_rows null (and
// rows 1), rows_done(w0, count, c, ldc) gets a group's float32 sums instead, on its thread (no
// bias; columns [0, co) valid, c the thread's to overwrite). C a multiple of 32; false (nothing
// done) without AMX-BF16, or with y_rows null and rows other than 1.
struct AmxRowTapGemm {
  const uint16_t* const* a_rows = nullptr;
  int64_t ldx = 0, in_width = 0, stride = 1;
  const int64_t* shift = nullptr;
  int64_t rows = 0, width = 0, taps = 0, channels = 0, co = 0;
  const uint16_t* bp = nullptr;
  const float* bias = nullptr;
  uint16_t* const* y_rows = nullptr;
  int64_t ldy = 0;
  std::function<void(int64_t, int64_t, float*, int64_t)> rows_done{};
};
bool bf16_amx_row_tap_gemm(const AmxRowTapGemm& g);
// Whether the CPU and the OS give AMX-BF16 tiles (bf16_gemm and the bf16_amx_* GEMMs run).
bool amx_bf16_supported();
bool f32_row_gemm(const RowGemm<float>& g);
// Whether f32_row_gemm runs here (AVX-512F and VL).
bool f32_row_gemm_supported();
// dst[c * dst_stride + r] = src[r * src_stride + c] for 16-bit elements, r < rows, c < cols, in 32
// x 32 tiles of AVX-512 permutes (cpu/bf16_dots_x86.cpp); false (nothing written) on CPUs
// without the AVX512-BF16 / VBMI pair (bf16_dots_supported).
bool transpose_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride, int64_t rows,
                   int64_t cols);
// C = A[m, k] B[k, n] in float32 for bfloat16 A and B of any strides (elements) on AMX tiles
// (cpu/bf16_gemm_x86.cpp), OpenMP-parallel; C comes out by blocks of rows: emit(i0, rows, c)
// with c [rows, n] dense, called outside any parallel region. false where the CPU or the OS
// gives no AMX-BF16 (emit not called).
bool bf16_gemm(const uint16_t* a, int64_t sa_row, int64_t sa_col, const uint16_t* b, int64_t sb_row, int64_t sb_col,
               int64_t m, int64_t n, int64_t k, const std::function<void(int64_t, int64_t, const float*)>& emit);
bool bf16_dots_packed(const void* w, int64_t stride_w, const uint16_t* xp, const float* x, int64_t stride_x, int64_t m,
                      int64_t k, float* d, int64_t stride_d, int64_t j0, int64_t j1);

}  // namespace anvil::cpu::simd
