// conv{1,2,3}d, conv_transpose{1,2,3}d, convolution, convolution_backward (anvil/conv.h):
// PyTorch's argument and shape rules, then every call as one of three products of a plain
// convolution x [N, C_in, in] * w [C_out, C_in / g, k] -> y [N, C_out, out]:
//   forward       y = W col(x)                        (im2col, GEMM; the bias pre-fills y)
//   input grad    gx = col2im(W^T gy)                 (GEMM into float32 / float64 columns, col2im)
//   weight grad   gw = sum over n, positions gy col(x)^T   (im2col, GEMM accumulating in float32)
// A transposed convolution's forward is the input grad of the plain convolution whose input is
// its output, its input grad that convolution's forward. Columns are built for chunks of output
// rows (outermost spatial axis) of one batch element, so the workspace stays bounded; a
// pointwise convolution (every kernel, stride 1, no padding) reads x as its columns.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <optional>

#include "anvil/conv.h"
#include "anvil/ops.h"
#include "anvil/pad.h"
#include "core/kernels/conv.h"
#include "core/kernels/matmul.h"
#include "core/util.h"

namespace anvil {
namespace {

std::atomic<int64_t> g_workspace_limit{0};

DType accumulation_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

const void* at(const void* base, int64_t elems, DType t) {
  return static_cast<const char*>(base) + elems * static_cast<int64_t>(element_size(t));
}
void* at(void* base, int64_t elems, DType t) {
  return static_cast<char*>(base) + elems * static_cast<int64_t>(element_size(t));
}

// A plain convolution, validated: x [N, c_in, axes.in], w [c_out, c_in / groups, axes.kernel],
// y [N, c_out, axes.out]; spatial dims map to axes 0.. (the rest have extent 1). Tensors are
// in `fmt`'s layout.
struct Problem {
  int spatial = 2;
  std::array<ConvAxis, 3> axes;
  int64_t n = 0, c_in = 0, c_out = 0, groups = 1;
  MemoryFormat fmt = MemoryFormat::Contiguous;
  DType dtype = kFloat32;
  Device device;

  bool channels_last() const { return fmt != MemoryFormat::Contiguous; }
  int64_t taps() const { return axes[0].kernel * axes[1].kernel * axes[2].kernel; }
  int64_t in_plane() const { return axes[0].in * axes[1].in * axes[2].in; }
  int64_t out_plane() const { return axes[0].out * axes[1].out * axes[2].out; }
  int64_t row_plane() const { return axes[1].out * axes[2].out; }  // output positions per chunk row
  int64_t cg() const { return c_in / groups; }
  int64_t cout_g() const { return c_out / groups; }
  int64_t kc() const { return cg() * taps(); }  // GEMM depth of one group
  bool pointwise() const {
    bool r = true;
    for (const ConvAxis& a : axes) r &= a.kernel == 1 && a.stride == 1 && a.pad == 0 && a.in == a.out;
    return r;
  }
  // Output rows per chunk for columns of `col_dtype` within conv_workspace_limit.
  int64_t rows_per_chunk(DType col_dtype) const {
    if (pointwise()) return axes[0].out;
    const int64_t per_row = std::max<int64_t>(1, c_in * taps() * row_plane() * static_cast<int64_t>(element_size(col_dtype)));
    return std::clamp<int64_t>(conv_workspace_limit(device) / per_row, 1, axes[0].out);
  }
  ConvGeometry geometry(int64_t r0, int64_t r1) const {
    ConvGeometry g;
    for (int i = 0; i < 3; ++i) g.axis[i] = axes[static_cast<size_t>(i)];
    g.channels = c_in;
    g.groups = groups;
    g.channels_last = channels_last();
    g.row_begin = r0;
    g.row_end = r1;
    return g;
  }
};

// One GEMM operand: pointer and element strides (batch = group).
struct Operand {
  const void* ptr;
  int64_t batch, row, col;
};

// C[g] (+)= A[g] @ B[g] for every group g; C is c_dtype with the given batch and row strides.
void grouped_gemm(const Problem& p, DType c_dtype, bool accumulate, int64_t m, int64_t n, int64_t k, const Operand& a,
                  const Operand& b, void* c, int64_t c_batch, int64_t c_row) {
  BmmParams q;
  q.a = a.ptr;
  q.b = b.ptr;
  q.c = c;
  q.dtype = p.dtype;
  q.c_dtype = c_dtype;
  q.accumulate = accumulate;
  q.batch = p.groups;
  q.m = m;
  q.n = n;
  q.k = k;
  q.stride_a_batch = a.batch;
  q.stride_a_row = a.row;
  q.stride_a_col = a.col;
  q.stride_b_batch = b.batch;
  q.stride_b_row = b.row;
  q.stride_b_col = b.col;
  q.stride_c_batch = c_batch;
  q.stride_c_row = c_row;
  ANVIL_KERNEL(p.device, bmm, q);
}

// For each batch element and chunk of output rows: f(n, r0, r1, cols) with cols x's columns
// for that chunk (im2col into `work`, or x itself when pointwise).
template <typename F>
void for_each_chunk(const Problem& p, const Tensor& x, F&& f) {
  const int64_t rows = p.rows_per_chunk(p.dtype);
  Tensor work;
  if (!p.pointwise()) work = empty({p.c_in * p.taps() * rows * p.row_plane()}, TensorOptions(p.dtype).device(p.device));
  for (int64_t n = 0; n < p.n; ++n) {
    const void* x_n = at(x.raw_data_ptr(), n * p.c_in * p.in_plane(), p.dtype);
    for (int64_t r0 = 0; r0 < p.axes[0].out; r0 += rows) {
      const int64_t r1 = std::min(p.axes[0].out, r0 + rows);
      const void* cols = x_n;
      if (work.defined()) {
        Im2colParams ip;
        ip.x = x_n;
        ip.col = work.raw_data_ptr();
        ip.dtype = p.dtype;
        ip.geo = p.geometry(r0, r1);
        ANVIL_KERNEL(p.device, im2col, ip);
        cols = work.raw_data_ptr();
      }
      f(n, r0, r1, cols);
    }
  }
}

Tensor bias_view(const Tensor& bias, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[1] = bias.numel();
  return bias.view(s);
}

// The backend's own kernel for one pass (cuDNN on CUDA) when its plan says so.
ConvDirectParams direct_params(const Problem& p, ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y,
                               const Tensor& bias = {}) {
  ConvDirectParams d;
  d.pass = pass;
  d.dtype = p.dtype;
  d.spatial = p.spatial;
  d.n = p.n;
  d.c_in = p.c_in;
  d.c_out = p.c_out;
  d.groups = p.groups;
  for (int i = 0; i < 3; ++i) d.axis[i] = p.axes[static_cast<size_t>(i)];
  d.channels_last = p.channels_last();
  d.device = p.device.index;
  d.x = x.defined() ? x.raw_data_ptr() : nullptr;
  d.w = w.defined() ? w.raw_data_ptr() : nullptr;
  d.y = y.defined() ? y.raw_data_ptr() : nullptr;
  d.bias = bias.defined() ? bias.raw_data_ptr() : nullptr;
  d.has_bias = bias.defined();
  return d;
}

bool run_direct(const ConvDirectParams& d, const Device& device) {
  if (ANVIL_PLAN(device, conv_direct, d) != FusedPlan::Fused) return false;
  ANVIL_KERNEL(device, conv_direct, d);
  return true;
}

// ---- stride-1 convolutions as shifted GEMMs ----------------------------------------------
// With every stride 1, output position o's tap t reads position o + off(t) of the zero-padded
// input. Index outputs by the padded extents E = in + 2 * pad, m(o) = (o0 * E1 + o1) * E2 + o2
// (the positions with o1 >= out1 or o2 >= out2 are junk, computed and never read out): then tap
// t's columns are the padded input itself, shifted by off(t) = (t0 d0 E1 + t1 d1) E2 + t2 d2
// positions, a plain strided GEMM operand. The conv is one GEMM per tap (and group) accumulating
// in float32 / float64 over a bias-filled accumulator, with no columns (taps x the input) at
// all: only a zero-padded copy of a chunk of input rows. The last junk row of a chunk is left
// out of the GEMMs' extent, so no tap reads past the padded chunk. CPU, outputs of 1024
// positions or more, float32 / float64 (OpenBLAS): f32 [4, 64, 56, 56] k3 on 2 Zen 5 threads,
// forward 34 -> 10 ms (torch 10.2), input grad 25 -> 9.5, weight grad 40 -> 12.6; [1, 3, 224,
// 224] k3 -> 64 7.1-14.0 -> 6.9-7.8 ms. bfloat16 / float16 keep im2col: without AMX their GEMM
// widens or copies A per call, so a call per tap did that K times (Zen 5: [1, 64, 112, 112] k3
// bf16 18-21 -> 59-62 ms; SD / Wan / ResNet shapes within noise or up to 1.2x faster).

bool shifted_applies(const Problem& p) {
  if (!p.device.is_cpu() || (p.dtype != kFloat32 && p.dtype != kFloat64) || p.pointwise()) return false;
  // Short outputs have small columns, and one GEMM of depth cg x K beats K of depth cg there:
  // [1, 512, 64] k7 float32 3.7 ms through im2col, 4.3 ms shifted (its GEMM alone 3.2). So does
  // one input channel per group ([1, 1, 224, 224] k3 -> 64: 3.4-5.8 ms vs 4.6-5.9).
  if (p.out_plane() < 1024 || p.cg() < 2) return false;
  for (const ConvAxis& a : p.axes)
    if (a.stride != 1 || a.pad < 0) return false;
  return true;
}

// One image (or chunk) as [C, A0, A1, A2] in p.fmt's memory order, zero-filled while it is
// still one dense block (a fill or copy through the permuted view walks it element by element).
Tensor image_buffer(const Problem& p, int64_t c, int64_t a0, int64_t a1, int64_t a2, DType dtype) {
  const TensorOptions o = TensorOptions(dtype).device(p.device);
  if (!p.channels_last()) return zeros({c, a0, a1, a2}, o);
  return zeros({a0, a1, a2, c}, o).permute({3, 0, 1, 2});
}

// dst := src for [C, A0, A1, A2] views in p.fmt's order, iterated in memory order.
void copy_image(const Problem& p, Tensor dst, const Tensor& src) {
  if (!p.channels_last()) dst.copy_(src);
  else dst.permute({1, 2, 3, 0}).copy_(src.permute({1, 2, 3, 0}));
}

// Batch element n of t [N, C, spatial...] as [C, A0, A1, A2].
Tensor image_view(const Problem& p, const Tensor& t, int64_t n) {
  Tensor v = t.select(0, n);
  for (int i = p.spatial; i < 3; ++i) v = v.unsqueeze(v.dim());
  return v;
}

struct ShiftedChunks {
  int64_t e1, e2;    // padded extents of axes 1 and 2
  int64_t rows;      // output rows per chunk of one image
  int64_t images;    // whole images per chunk when one fits (rows = out0), else 1
};
ShiftedChunks shifted_chunks(const Problem& p) {
  const ConvAxis &a0 = p.axes[0], &a1 = p.axes[1], &a2 = p.axes[2];
  const int64_t e1 = a1.in + 2 * a1.pad, e2 = a2.in + 2 * a2.pad, halo = (a0.kernel - 1) * a0.dilation;
  const int64_t row = (p.c_in + p.c_out) * e1 * e2 * static_cast<int64_t>(element_size(p.dtype));
  const int64_t limit = conv_workspace_limit(p.device);
  const int64_t rows = std::clamp<int64_t>(limit / std::max<int64_t>(1, row) - halo, 1, a0.out);
  const int64_t images = rows < a0.out ? 1 : std::clamp<int64_t>(limit / std::max<int64_t>(1, row * (a0.out + halo)), 1, p.n);
  return {e1, e2, rows, images};
}

// One chunk: output rows [r0, r0 + rows) of images [n0, n0 + images). Each image has a slab of
// rows + (k0 - 1) d0 padded rows, stacked along axis 0 in xp [C, images x slab, E1, E2] (its
// zero-padded input) and in the chunk's output buffers (the rows past `rows` of a slab are junk
// too: their taps run into the next slab). M: the GEMMs' extent, up to the last real output.
struct ShiftedChunk {
  int64_t n0, images, r0, rows, slab, M;
  Tensor xp;
  int64_t plane;  // elements per channel of xp and of an output buffer
};

Tensor chunk_buffer(const Problem& p, const ShiftedChunk& c, const ShiftedChunks& s, int64_t channels, DType dtype) {
  return image_buffer(p, channels, c.images * c.slab, s.e1, s.e2, dtype);
}

// Image n0 + b's real outputs in a chunk's output buffer, as [C, rows, out1, out2].
Tensor real_outputs(const Problem& p, const ShiftedChunk& c, const Tensor& buf, int64_t b) {
  return buf.narrow(1, b * c.slab, c.rows).narrow(2, 0, p.axes[1].out).narrow(3, 0, p.axes[2].out);
}

// f(chunk) for every chunk of images and output rows of a stride-1 problem.
template <typename F>
void for_each_shifted_chunk(const Problem& p, const Tensor& x, const ShiftedChunks& s, F&& f) {
  const ConvAxis &a0 = p.axes[0], &a1 = p.axes[1], &a2 = p.axes[2];
  for (int64_t n0 = 0; n0 < p.n; n0 += s.images)
    for (int64_t r0 = 0; r0 < a0.out; r0 += s.rows) {
      ShiftedChunk c;
      c.n0 = n0;
      c.images = std::min(s.images, p.n - n0);
      c.r0 = r0;
      c.rows = std::min(s.rows, a0.out - r0);
      c.slab = c.rows + (a0.kernel - 1) * a0.dilation;
      c.M = (((c.images - 1) * c.slab + c.rows - 1) * s.e1 + a1.out - 1) * s.e2 + a2.out;
      c.plane = c.images * c.slab * s.e1 * s.e2;
      c.xp = chunk_buffer(p, c, s, p.c_in, p.dtype);
      // Output rows [r0, r0 + rows) read input rows [r0 - pad, r0 + slab - pad).
      const int64_t first = r0 - a0.pad, lo = std::max<int64_t>(0, first), hi = std::min(a0.in, first + c.slab);
      for (int64_t b = 0; b < c.images && hi > lo; ++b)
        copy_image(p, c.xp.narrow(1, b * c.slab + lo - first, hi - lo).narrow(2, a1.pad, a1.in).narrow(3, a2.pad, a2.in),
                   image_view(p, x, n0 + b).narrow(1, lo, hi - lo));
      f(c);
    }
}

// Tap t's columns: the chunk's padded input shifted by off(t) positions.
const void* shifted_columns(const Problem& p, const ShiftedChunk& c, const ShiftedChunks& s, int64_t tap) {
  const ConvAxis &a0 = p.axes[0], &a1 = p.axes[1], &a2 = p.axes[2];
  const int64_t t0 = tap / (a1.kernel * a2.kernel), t1 = tap / a2.kernel % a1.kernel, t2 = tap % a2.kernel;
  const int64_t off = (t0 * a0.dilation * s.e1 + t1 * a1.dilation) * s.e2 + t2 * a2.dilation;
  return at(c.xp.raw_data_ptr(), off * (p.channels_last() ? p.c_in : 1), p.dtype);
}

// y [N, c_out, out] (p.fmt) := conv(x, w) + bias for a stride-1 problem, with wr the weight as
// [K, G, cout_g, cg] contiguous; tap t multiplies wr's tap K - 1 - t when `flip` (the input
// grad's adjoint kernel).
void shifted_forward(const Problem& p, const Tensor& x, const Tensor& wr, bool flip, const Tensor& bias, const Tensor& y) {
  const ShiftedChunks s = shifted_chunks(p);
  const int64_t K = p.taps(), G = p.groups, cg = p.cg(), cog = p.cout_g(), C = p.c_in, Co = p.c_out;
  const Tensor b = bias.defined() ? bias.view({Co, 1, 1, 1}) : bias;
  for_each_shifted_chunk(p, x, s, [&](const ShiftedChunk& c) {
    Tensor acc = chunk_buffer(p, c, s, Co, accumulation_dtype(p.dtype));
    if (b.defined()) copy_image(p, acc, b.expand(acc.sizes()));
    for (int64_t t = 0; t < K; ++t) {
      const void* xs = shifted_columns(p, c, s, t);
      const void* w_t = at(wr.raw_data_ptr(), (flip ? K - 1 - t : t) * G * cog * cg, p.dtype);
      if (!p.channels_last())  // acc_g [cout_g, M] += W_t,g [cout_g, cg] @ xp_g [cg, M] shifted
        grouped_gemm(p, acc.dtype(), true, cog, c.M, cg, {w_t, cog * cg, cg, 1}, {xs, cg * c.plane, c.plane, 1},
                     acc.raw_data_ptr(), cog * c.plane, c.plane);
      else  // acc_g [M, cout_g] += xp_g [M, cg] shifted @ W_t,g^T [cg, cout_g]
        grouped_gemm(p, acc.dtype(), true, c.M, cog, cg, {xs, cg, C, 1}, {w_t, cog * cg, 1, cg}, acc.raw_data_ptr(), cog, Co);
    }
    for (int64_t i = 0; i < c.images; ++i)
      copy_image(p, image_view(p, y, c.n0 + i).narrow(1, c.r0, c.rows), real_outputs(p, c, acc, i));
  });
}

// w [c_out, cg, k...] -> [K, G, cout_g, cg] (or [K, G, cg, cout_g] when `swap`) contiguous.
Tensor tap_major_weight(const Problem& p, const Tensor& w, bool swap) {
  const Tensor v = w.reshape({p.groups, p.cout_g(), p.cg(), p.taps()});
  return (swap ? v.permute({3, 0, 2, 1}) : v.permute({3, 0, 1, 2})).contiguous();
}

// gx for a stride-1 problem as the forward conv of gy with the adjoint kernel (channels swapped,
// taps flipped, padding (k - 1) d - pad) into gx; false (nothing written) when such a pad would
// be negative.
bool shifted_input_grad(const Problem& p, const Tensor& gy, const Tensor& w, const Tensor& bias, const Tensor& gx) {
  Problem q = p;
  q.c_in = p.c_out;
  q.c_out = p.c_in;
  for (size_t i = 0; i < 3; ++i) {
    ConvAxis& a = q.axes[i];
    a.in = p.axes[i].out;
    a.out = p.axes[i].in;
    a.pad = (a.kernel - 1) * a.dilation - p.axes[i].pad;
    if (a.pad < 0) return false;
  }
  shifted_forward(q, gy, tap_major_weight(p, w, true), true, bias, gx);
  return true;
}

// gw [c_out, cg, k...] (p.fmt) = sum over images and positions of gy x^T for a stride-1
// problem: per tap, gw_t,g [cout_g, cg] += gy_g [cout_g, M] @ (xp_g shifted)^T [M, cg], with gy
// copied into the padded positions (zeros at the junk ones, which would otherwise multiply
// real inputs); summed in float32 / float64 over everything, rounded once.
void shifted_weight_grad(const Problem& p, const Tensor& x, const Tensor& gy, Tensor& gw) {
  const ShiftedChunks s = shifted_chunks(p);
  const int64_t K = p.taps(), G = p.groups, cg = p.cg(), cog = p.cout_g(), C = p.c_in, Co = p.c_out;
  Tensor gwr = zeros({K, G, cog, cg}, TensorOptions(accumulation_dtype(p.dtype)).device(p.device));
  for_each_shifted_chunk(p, x, s, [&](const ShiftedChunk& c) {
    Tensor gyp = chunk_buffer(p, c, s, Co, p.dtype);
    for (int64_t i = 0; i < c.images; ++i)
      copy_image(p, real_outputs(p, c, gyp, i), image_view(p, gy, c.n0 + i).narrow(1, c.r0, c.rows));
    for (int64_t t = 0; t < K; ++t) {
      const void* xs = shifted_columns(p, c, s, t);
      void* gw_t = at(gwr.raw_data_ptr(), t * G * cog * cg, gwr.dtype());
      if (!p.channels_last())
        grouped_gemm(p, gwr.dtype(), true, cog, cg, c.M, {gyp.raw_data_ptr(), cog * c.plane, c.plane, 1},
                     {xs, cg * c.plane, 1, c.plane}, gw_t, cog * cg, cg);
      else
        grouped_gemm(p, gwr.dtype(), true, cog, cg, c.M, {gyp.raw_data_ptr(), cog, 1, Co}, {xs, cg, C, 1}, gw_t, cog * cg, cg);
    }
  });
  gw.copy_(gwr.permute({1, 2, 3, 0}).reshape(gw.sizes()));
}

// CUDA half-precision channels-first 2-d convs of one group whose input holds at least
// conv_cuda_channels_last_min_bytes (32 MiB) run channels-last between two tiled layout
// conversions: cuDNN's fast channels-first engines for the FLUX VAE's big convs need more
// workspace than the 128 MiB bound, the engine it falls back to is ~8x slower (H200, [1, 128,
// 1024, 1024] 3x3 bf16 +bias: 10.4 ms kept, 1.23 ms redirected, PyTorch 1.27), while SD's 16 MiB
// [1, 512, 128, 128] runs faster kept (H100: 145 us, 184 redirected; docs/PERFORMANCE.md,
// sessions 30-32). 3-d convs keep their layout (not measured).
bool cuda_channels_last_redirect(const Problem& p) {
  const int64_t bytes = p.n * p.c_in * p.in_plane() * static_cast<int64_t>(element_size(p.dtype));
  return (p.dtype == kBFloat16 || p.dtype == kFloat16) && p.groups == 1 && !p.pointwise() && !p.channels_last() &&
         p.spatial == 2 && bytes >= conv_cuda_channels_last_min_bytes();
}

// A problem in the other memory format, when the backend runs that pass better there: on CUDA,
// cuda_channels_last_redirect's; on the CPU (one group, not pointwise), where its implicit-GEMM
// kernel runs the pass in that format but not in p's: bfloat16 channels-last as channels-first,
// float32 channels-first 2-d / 3-d as channels-last. The caller runs q and converts the result
// back: the layout conversions cost less than the GEMM saves (bf16: Zen 5, 2 threads,
// docs/PERFORMANCE.md session 24; float32: session 29).
std::optional<Problem> other_layout_direct(const Problem& p, ConvPass pass, const Tensor& bias) {
  if (p.device.is_cuda() && cuda_channels_last_redirect(p)) {
    Problem q = p;
    q.fmt = MemoryFormat::ChannelsLast;
    if (ANVIL_PLAN(q.device, conv_direct, direct_params(q, pass, {}, {}, {}, bias)) == FusedPlan::Fused) return q;
    return {};
  }
  if (!p.device.is_cpu() || p.groups != 1 || p.pointwise()) return {};
  Problem q = p;
  if (p.dtype == kBFloat16 && p.channels_last()) q.fmt = MemoryFormat::Contiguous;
  else if (p.dtype == kFloat32 && !p.channels_last() && p.spatial >= 2)
    q.fmt = p.spatial == 2 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d;
  else return {};
  // p's own kernel where it has one (a bf16 channels-last forward with an even channel count).
  if (ANVIL_PLAN(p.device, conv_direct, direct_params(p, pass, {}, {}, {}, bias)) == FusedPlan::Fused) return {};
  if (ANVIL_PLAN(q.device, conv_direct, direct_params(q, pass, {}, {}, {}, bias)) != FusedPlan::Fused) return {};
  return q;
}

// y [N, c_out, out] = conv(x, w) + bias, in p.fmt.
Tensor conv_forward(const Problem& p, const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Shape& y_sizes) {
  // CPU bfloat16, channels-first 4-d, one group: the channels-last GEMM (columns against W^T)
  // runs on the bf16 dot kernel; with the layout conversions it is 2.5x faster (Zen 5, 2 threads, [1, 128,
  // 64, 64] k3: 6.6 ms vs 16.7 ms). Not 5-d: a Wan decoder chunk of 14400 positions x 864 taps
  // made that GEMM widen 50 MB of columns (88 ms vs 17 ms).
  // Both give way to the backend's own kernel where it has one (the CPU's implicit-GEMM bf16 conv,
  // on every CPU with AVX512-BF16, which those measurements' dot kernel needed too: on other CPUs
  // these redirects widen to float32 GEMMs either way and were not re-measured).
  const bool cpu_bf16_gemm = p.device.is_cpu() && p.dtype == kBFloat16 && p.groups == 1 && !p.pointwise() &&
                             ANVIL_PLAN(p.device, conv_direct, direct_params(p, ConvPass::Forward, {}, {}, {}, bias)) !=
                                 FusedPlan::Fused;
  if (cpu_bf16_gemm && !p.channels_last() && y_sizes.size() == 4) {
    Problem q = p;
    q.fmt = MemoryFormat::ChannelsLast;
    return conv_forward(q, x_in, w_in, bias, y_sizes).contiguous();
  }
  // The same for a 1-d conv, run as a 2-d one of width 1 (a 1-d tensor has no channels-last):
  // Whisper's conv2 [1, 384, 3000] k3 s2 8.6 -> 6.6 ms. The length is the row axis, so columns
  // are still made a chunk of positions at a time (as rows of width 1 they were one row of the
  // whole length: 12 GB of columns for a one-channel k3 conv over 2^31 samples). Grouped convs
  // keep their own paths (the depthwise direct kernel is 4x slower channels-last).
  if (cpu_bf16_gemm && y_sizes.size() == 3) {
    Problem q = p;
    q.spatial = 2;
    q.axes = {p.axes[0], ConvAxis{}, ConvAxis{}};
    q.fmt = MemoryFormat::ChannelsLast;
    const Shape y4 = {y_sizes[0], y_sizes[1], y_sizes[2], 1};
    return conv_forward(q, x_in.unsqueeze(3), w_in.unsqueeze(3), bias, y4).contiguous().squeeze(3);
  }
  // The CPU's implicit-GEMM kernel in the other layout (bf16 channels-first, float32 channels-last).
  if (const auto q = other_layout_direct(p, ConvPass::Forward, bias))
    return conv_forward(*q, x_in, w_in, bias, y_sizes).contiguous(p.fmt);
  Tensor y = empty(y_sizes, TensorOptions(p.dtype).device(p.device), p.fmt);
  if (y.numel() == 0) return y;
  const Tensor x = x_in.contiguous(p.fmt), w = w_in.contiguous(p.fmt);
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  if (p.kc() > 0 && p.n > 0 && run_direct(direct_params(p, ConvPass::Forward, x, w, y, b), p.device)) return y;
  if (p.kc() > 0 && p.n > 0 && shifted_applies(p)) {
    shifted_forward(p, x, tap_major_weight(p, w, false), false, b, y);
    return y;
  }
  if (bias.defined()) y.copy_(bias_view(bias, y.dim()).expand(y_sizes));
  if (p.kc() == 0 || p.n == 0) return bias.defined() ? y : y.zero_();
  const int64_t L = p.out_plane(), kc = p.kc(), cog = p.cout_g(), K = p.taps();
  const Operand wt = {w.raw_data_ptr(), cog * kc, kc, 1};  // W_g [cout_g, kc]
  for_each_chunk(p, x, [&](int64_t n, int64_t r0, int64_t r1, const void* cols) {
    const int64_t P = (r1 - r0) * p.row_plane();
    void* y_n = at(y.raw_data_ptr(), n * p.c_out * L, p.dtype);
    if (!p.channels_last()) {  // y_g [cout_g, P] = W_g [cout_g, kc] @ col_g [kc, P]
      grouped_gemm(p, p.dtype, bias.defined(), cog, P, kc, wt, {cols, kc * P, P, 1}, at(y_n, r0 * p.row_plane(), p.dtype),
                   cog * L, L);
    } else {  // y_g [P, cout_g] = col_g [P, kc] @ W_g^T [kc, cout_g]
      grouped_gemm(p, p.dtype, bias.defined(), P, cog, kc, {cols, kc, p.c_in * K, 1}, {w.raw_data_ptr(), cog * kc, 1, kc},
                   at(y_n, r0 * p.row_plane() * p.c_out, p.dtype), cog, p.c_out);
    }
  });
  return y;
}

// gx [N, c_in, in] = conv's adjoint applied to gy [N, c_out, out], plus bias (a transposed
// convolution's) added before the one rounding; in p.fmt.
Tensor conv_input_grad(const Problem& p, const Tensor& gy_in, const Tensor& w_in, const Tensor& bias,
                       const Shape& x_sizes) {
  if (const auto q = other_layout_direct(p, ConvPass::BackwardInput, bias))
    return conv_input_grad(*q, gy_in, w_in, bias, x_sizes).contiguous(p.fmt);
  const TensorOptions opts = TensorOptions(p.dtype).device(p.device);
  Tensor gx = empty(x_sizes, opts, p.fmt);
  if (gx.numel() == 0) return gx;
  const Tensor gy = gy_in.contiguous(p.fmt), w = w_in.contiguous(p.fmt);
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  if (p.cout_g() > 0 && p.n > 0 && p.out_plane() > 0 &&
      (run_direct(direct_params(p, ConvPass::BackwardInput, gx, w, gy, b), p.device) ||
       (shifted_applies(p) && shifted_input_grad(p, gy, w, b, gx))))
    return gx;
  const DType acc = accumulation_dtype(p.dtype);
  const bool pointwise = p.pointwise();
  Tensor sum = pointwise || acc == p.dtype ? gx : empty(x_sizes, TensorOptions(acc).device(p.device), p.fmt);
  if (bias.defined()) sum.copy_(bias_view(bias, sum.dim()).expand(x_sizes));
  else if (!pointwise || p.cout_g() == 0 || p.n == 0) sum.zero_();
  if (p.cout_g() == 0 || p.n == 0 || p.out_plane() == 0) {
    if (sum.raw_data_ptr() != gx.raw_data_ptr()) gx.copy_(sum);
    return gx;
  }
  const int64_t L = p.out_plane(), kc = p.kc(), cog = p.cout_g(), K = p.taps();
  const int64_t rows = p.rows_per_chunk(acc);
  Tensor cols;
  if (!pointwise) cols = empty({p.c_in * K * rows * p.row_plane()}, TensorOptions(acc).device(p.device));
  for (int64_t n = 0; n < p.n; ++n) {
    const void* gy_n = at(gy.raw_data_ptr(), n * p.c_out * L, p.dtype);
    void* sum_n = at(sum.raw_data_ptr(), n * p.c_in * p.in_plane(), sum.dtype());
    for (int64_t r0 = 0; r0 < p.axes[0].out; r0 += rows) {
      const int64_t r1 = std::min(p.axes[0].out, r0 + rows), P = (r1 - r0) * p.row_plane();
      void* dst = pointwise ? sum_n : cols.raw_data_ptr();
      const DType dst_dtype = pointwise ? p.dtype : acc;
      const bool accumulate = pointwise && bias.defined();
      if (!p.channels_last()) {  // col_g [kc, P] = W_g^T [kc, cout_g] @ gy_g [cout_g, P]
        grouped_gemm(p, dst_dtype, accumulate, kc, P, cog, {w.raw_data_ptr(), cog * kc, 1, kc},
                     {at(gy_n, r0 * p.row_plane(), p.dtype), cog * L, L, 1}, dst, kc * P, P);
      } else {  // col_g [P, kc] = gy_g [P, cout_g] @ W_g [cout_g, kc]
        grouped_gemm(p, dst_dtype, accumulate, P, kc, cog, {at(gy_n, r0 * p.row_plane() * p.c_out, p.dtype), cog, p.c_out, 1},
                     {w.raw_data_ptr(), cog * kc, kc, 1}, dst, kc, p.c_in * K);
      }
      if (pointwise) continue;
      Col2imParams cp;
      cp.col = cols.raw_data_ptr();
      cp.x = sum_n;
      cp.dtype = acc;
      cp.geo = p.geometry(r0, r1);
      ANVIL_KERNEL(p.device, col2im, cp);
    }
  }
  if (sum.raw_data_ptr() != gx.raw_data_ptr()) gx.copy_(sum);
  return gx;
}

// gw [c_out, c_in / g, k] = sum over batch and output positions of gy times x's columns, in
// p.fmt, summed in float32 (float64) over all of them and rounded once.
Tensor conv_weight_grad(const Problem& p, const Tensor& x_in, const Tensor& gy_in, const Shape& w_sizes) {
  if (const auto q = other_layout_direct(p, ConvPass::BackwardWeight, {}))
    return conv_weight_grad(*q, x_in, gy_in, w_sizes).contiguous(p.fmt);
  Tensor gw = empty(w_sizes, TensorOptions(p.dtype).device(p.device), p.fmt);
  if (gw.numel() == 0) return gw;
  if (p.n == 0 || p.out_plane() == 0) {
    gw.zero_();
    return gw;
  }
  const Tensor x = x_in.contiguous(p.fmt), gy = gy_in.contiguous(p.fmt);
  if (run_direct(direct_params(p, ConvPass::BackwardWeight, x, gw, gy), p.device)) return gw;
  if (shifted_applies(p)) {
    shifted_weight_grad(p, x, gy, gw);
    return gw;
  }
  const DType acc = accumulation_dtype(p.dtype);
  Tensor sum = acc == p.dtype ? gw : empty(w_sizes, TensorOptions(acc).device(p.device), p.fmt);
  const int64_t L = p.out_plane(), kc = p.kc(), cog = p.cout_g(), K = p.taps();
  bool first = true;
  for_each_chunk(p, x, [&](int64_t n, int64_t r0, int64_t r1, const void* cols) {
    const int64_t P = (r1 - r0) * p.row_plane();
    const void* gy_n = at(gy.raw_data_ptr(), n * p.c_out * L, p.dtype);
    if (!p.channels_last()) {  // gw_g [cout_g, kc] += gy_g [cout_g, P] @ col_g^T [P, kc]
      grouped_gemm(p, acc, !first, cog, kc, P, {at(gy_n, r0 * p.row_plane(), p.dtype), cog * L, L, 1}, {cols, kc * P, 1, P},
                   sum.raw_data_ptr(), cog * kc, kc);
    } else {  // gw_g [cout_g, kc] += gy_g^T [cout_g, P] @ col_g [P, kc]
      grouped_gemm(p, acc, !first, cog, kc, P, {at(gy_n, r0 * p.row_plane() * p.c_out, p.dtype), cog, 1, p.c_out},
                   {cols, kc, p.c_in * K, 1}, sum.raw_data_ptr(), cog * kc, kc);
    }
    first = false;
  });
  if (sum.raw_data_ptr() != gw.raw_data_ptr()) gw.copy_(sum);
  return gw;
}

// ---- arguments ----------------------------------------------------------------------------

struct Args {
  int64_t dims = 0;  // spatial rank
  Shape stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

Shape expand_param(const char* op, const Shape& v, const char* name, int64_t dims) {
  if (v.size() == 1) return Shape(static_cast<size_t>(dims), v[0]);
  ANVIL_CHECK(static_cast<int64_t>(v.size()) == dims, ShapeError, op, " expected ", name,
              " to be a single integer value or a list of ", dims, " values to match the convolution dimensions, but got ",
              name, "=", shape_str(v));
  return v;
}

std::string extents_str(const Shape& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? " x " : "") + std::to_string(s[i]);
  return r;
}

bool is_conv_dtype(DType t) { return t == kFloat16 || t == kBFloat16 || t == kFloat32 || t == kFloat64; }

// PyTorch's checks (aten _convolution and check_shape_forward, in its order); bias_sizes is
// empty without a bias.
Args check_args(const char* op, const Tensor& input, const Tensor& weight, const Shape* bias_sizes, const Shape& stride,
                const Shape& padding, const Shape& dilation, bool transposed, const Shape& output_padding,
                int64_t groups) {
  ANVIL_CHECK(input.defined() && weight.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(weight.dim() >= 3, ShapeError, op, " weight should have at least three dimensions, got weight ",
              describe(weight));
  ANVIL_CHECK(weight.dim() <= 5, ShapeError, op, " only 1-, 2- and 3-d convolutions are supported, got weight ",
              describe(weight));
  ANVIL_CHECK(groups > 0, ShapeError, op, " non-positive groups is not supported");
  Args a;
  a.dims = weight.dim() - 2;
  a.stride = expand_param(op, stride, "stride", a.dims);
  a.padding = expand_param(op, padding, "padding", a.dims);
  a.dilation = expand_param(op, dilation, "dilation", a.dims);
  a.output_padding = expand_param(op, output_padding, "output_padding", a.dims);
  a.transposed = transposed;
  a.groups = groups;
  for (int64_t i = 0; i < a.dims; ++i) {
    ANVIL_CHECK(a.padding[i] >= 0, ShapeError, op, " negative padding is not supported");
    ANVIL_CHECK(a.output_padding[i] >= 0, ShapeError, op, " negative output_padding is not supported");
    ANVIL_CHECK(a.stride[i] > 0, ShapeError, op, " non-positive stride is not supported");
    ANVIL_CHECK(a.dilation[i] > 0, ShapeError, op, " dilation should be greater than zero");
  }
  const Shape ws = weight.sizes();
  ANVIL_CHECK(weight.dim() == input.dim(), ShapeError, op, " Expected ", weight.dim(), "-dimensional input for ",
              weight.dim(), "-dimensional weight ", shape_str(ws), ", but got ", input.dim(), "-dimensional input of size ",
              shape_str(input.sizes()), " instead");
  ANVIL_CHECK(ws[0] >= groups, ShapeError, op, " Given groups=", groups, ", expected weight to be at least ", groups,
              " at dimension 0, but got weight of size ", shape_str(ws), " instead");
  ANVIL_CHECK(ws[0] % groups == 0, ShapeError, op, " Given groups=", groups, ", expected weight to be divisible by ",
              groups, " at dimension 0, but got weight of size ", shape_str(ws), " instead");
  const int64_t bias_channels = transposed ? ws[1] * groups : ws[0];
  const bool bias_ok = !bias_sizes || (bias_sizes->size() == 1 && (*bias_sizes)[0] == bias_channels);
  if (!transposed) {
    ANVIL_CHECK(input.size(1) == ws[1] * groups, ShapeError, op, " Given groups=", groups, ", weight of size ",
                shape_str(ws), ", expected input", shape_str(input.sizes()), " to have ", ws[1] * groups,
                " channels, but got ", input.size(1), " channels instead");
    ANVIL_CHECK(bias_ok, ShapeError, op, " Given weight of size ", shape_str(ws), ", expected bias to be 1-dimensional with ",
                bias_channels, " elements, but got bias of size ", shape_str(*bias_sizes), " instead");
    Shape padded, kernel;
    bool fits = true;
    for (int64_t i = 0; i < a.dims; ++i) {
      padded.push_back(input.size(2 + i) + 2 * a.padding[i]);
      kernel.push_back(a.dilation[i] * (ws[2 + i] - 1) + 1);
      fits &= padded.back() >= kernel.back();
    }
    ANVIL_CHECK(fits, ShapeError, op, " Calculated padded input size per channel: (", extents_str(padded),
                "). Kernel size: (", extents_str(kernel), "). Kernel size can't be greater than actual input size");
  } else {
    ANVIL_CHECK(input.size(1) == ws[0], ShapeError, op, " Given transposed=1, weight of size ", shape_str(ws),
                ", expected input", shape_str(input.sizes()), " to have ", ws[0], " channels, but got ", input.size(1),
                " channels instead");
    ANVIL_CHECK(bias_ok, ShapeError, op, " Given transposed=1, weight of size ", shape_str(ws),
                ", expected bias to be 1-dimensional with ", bias_channels, " elements, but got bias of size ",
                shape_str(*bias_sizes), " instead");
    bool small = true;
    for (int64_t i = 0; i < a.dims; ++i) small &= a.output_padding[i] < a.stride[i] || a.output_padding[i] < a.dilation[i];
    ANVIL_CHECK(small, ShapeError, op, " output padding must be smaller than either stride or dilation, but got output_padding=",
                shape_str(a.output_padding), ", stride=", shape_str(a.stride), ", dilation=", shape_str(a.dilation));
  }
  ANVIL_CHECK(is_conv_dtype(input.dtype()), DTypeError, op, " \"convolution\" not implemented for '",
              dtype_name(input.dtype()), "' (float16, bfloat16, float32, float64)");
  ANVIL_CHECK(input.dtype() == weight.dtype(), DTypeError, op, " Input type (", dtype_name(input.dtype()),
              ") and weight type (", dtype_name(weight.dtype()), ") should be the same");
  check_same_device(op, input, weight);
  return a;
}

// The output extents of the convolution `a` describes for input spatial extents `in`.
Shape output_spatial(const char* op, const Args& a, const Tensor& input, const Tensor& weight) {
  Shape in, out;
  for (int64_t i = 0; i < a.dims; ++i) {
    const int64_t x = input.size(2 + i), k = weight.size(2 + i);
    in.push_back(x);
    if (a.transposed)
      out.push_back((x - 1) * a.stride[i] - 2 * a.padding[i] + a.dilation[i] * (k - 1) + a.output_padding[i] + 1);
    else
      out.push_back((x + 2 * a.padding[i] - a.dilation[i] * (k - 1) - 1) / a.stride[i] + 1);
  }
  bool positive = true;
  for (int64_t o : out) positive &= o > 0;
  ANVIL_CHECK(positive, ShapeError, op, " Given input size per channel: (", extents_str(in),
              "). Calculated output size per channel: (", extents_str(out), "). Output size is too small");
  return out;
}

// PyTorch's suggested conv layout: channels-last when the input or the weight is (4-d / 5-d).
MemoryFormat conv_format(const Tensor& input, const Tensor& weight) {
  if (input.dim() < 4) return MemoryFormat::Contiguous;
  const MemoryFormat fi = input.suggest_memory_format(), fw = weight.suggest_memory_format();
  return fi != MemoryFormat::Contiguous ? fi : fw;
}

// The plain convolution behind `a`: for a transposed one, the convolution whose input has the
// transposed output's extents (out_spatial) and whose output has the transposed input's.
Problem make_problem(const Args& a, const Tensor& input, const Tensor& weight, const Shape& out_spatial) {
  Problem p;
  p.spatial = static_cast<int>(a.dims);
  p.n = input.size(0);
  p.groups = a.groups;
  p.dtype = input.dtype();
  p.device = input.device();
  p.fmt = conv_format(input, weight);
  p.c_out = weight.size(0);
  p.c_in = a.transposed ? weight.size(1) * a.groups : input.size(1);
  for (int64_t i = 0; i < a.dims; ++i) {
    ConvAxis& ax = p.axes[static_cast<size_t>(i)];
    ax.in = a.transposed ? out_spatial[static_cast<size_t>(i)] : input.size(2 + i);
    ax.out = a.transposed ? input.size(2 + i) : out_spatial[static_cast<size_t>(i)];
    ax.kernel = weight.size(2 + i);
    ax.stride = a.stride[static_cast<size_t>(i)];
    ax.pad = a.padding[static_cast<size_t>(i)];
    ax.dilation = a.dilation[static_cast<size_t>(i)];
  }
  return p;
}

Shape with_spatial(int64_t n, int64_t c, const Shape& spatial) {
  Shape s{n, c};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

Tensor convolution_impl(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Shape& stride, const Shape& padding, const Shape& dilation, bool transposed,
                        const Shape& output_padding, int64_t groups) {
  const Shape bias_sizes = bias.defined() ? bias.sizes() : Shape{};
  const Args a = check_args(op, input, weight, bias.defined() ? &bias_sizes : nullptr, stride, padding, dilation,
                            transposed, output_padding, groups);
  if (bias.defined()) {
    ANVIL_CHECK(bias.dtype() == input.dtype(), DTypeError, op, " Input type (", dtype_name(input.dtype()),
                ") and bias type (", dtype_name(bias.dtype()), ") should be the same");
    check_same_device(op, input, bias);
  }
  const Shape out_spatial = output_spatial(op, a, input, weight);
  const Problem p = make_problem(a, input, weight, out_spatial);
  if (!transposed) return conv_forward(p, input, weight, bias, with_spatial(p.n, p.c_out, out_spatial));
  return conv_input_grad(p, input, weight, bias, with_spatial(p.n, p.c_in, out_spatial));
}

// conv{1,2,3}d / conv_transpose{1,2,3}d on batched or unbatched input.
template <typename F>
Tensor batchify(const char* op, const char* name, int64_t dims, const Tensor& input, F&& f) {
  ANVIL_CHECK(input.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(input.dim() == dims + 1 || input.dim() == dims + 2, ShapeError, op, " Expected ", dims + 1,
              "D (unbatched) or ", dims + 2, "D (batched) input to ", name, ", but got input of size: ",
              shape_str(input.sizes()));
  const bool batched = input.dim() == dims + 2;
  Tensor y = f(batched ? input : input.unsqueeze(0));
  return batched ? y : y.squeeze(0);
}

Tensor conv_nd(const char* op, const char* name, int64_t dims, const Tensor& input, const Tensor& weight,
               const Tensor& bias, const Shape& stride, const Shape& padding, const Shape& dilation, int64_t groups) {
  return batchify(op, name, dims, input, [&](const Tensor& x) {
    return convolution_impl(op, x, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

// padding "valid" / "same" (PyTorch's _convolution_mode: an odd total pad adds the extra element
// at the end with constant_pad_nd, then pads symmetrically).
Tensor conv_nd_mode(const char* op, const char* name, int64_t dims, const Tensor& input, const Tensor& weight,
                    const Tensor& bias, const Shape& stride, const ConvPadding& mode, const Shape& dilation,
                    int64_t groups) {
  const std::string& padding = mode.mode;
  if (padding == "valid") return conv_nd(op, name, dims, input, weight, bias, stride, {0}, dilation, groups);
  ANVIL_CHECK(padding == "same", Error, op, " Invalid padding string: '", padding, "'");
  ANVIL_CHECK(weight.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(weight.dim() == dims + 2, ShapeError, op, " Expected ", dims + 2, "-dimensional weight for ", name,
              ", got weight ", describe(weight));
  const Shape s = expand_param(op, stride, "stride", dims), d = expand_param(op, dilation, "dilation", dims);
  for (int64_t v : s) ANVIL_CHECK(v == 1, ShapeError, op, " padding='same' is not supported for strided convolutions");
  return batchify(op, name, dims, input, [&](const Tensor& x) {
    Shape left(static_cast<size_t>(dims)), extra(static_cast<size_t>(2 * dims), 0);
    bool symmetric = true;
    for (int64_t i = 0; i < dims; ++i) {
      const int64_t total = d[static_cast<size_t>(i)] * (weight.size(2 + i) - 1);
      left[static_cast<size_t>(i)] = total / 2;
      extra[static_cast<size_t>(2 * (dims - 1 - i) + 1)] = total % 2;  // constant_pad_nd lists the last dim first
      symmetric &= total % 2 == 0;
    }
    const Tensor padded = symmetric ? x : constant_pad_nd(x, extra, 0);
    return convolution_impl(op, padded, weight, bias, s, left, d, false, {0}, groups);
  });
}

Tensor conv_transpose_nd(const char* op, const char* name, int64_t dims, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const Shape& stride, const Shape& padding, const Shape& output_padding,
                         int64_t groups, const Shape& dilation) {
  return batchify(op, name, dims, input, [&](const Tensor& x) {
    return convolution_impl(op, x, weight, bias, stride, padding, dilation, true, output_padding, groups);
  });
}

}  // namespace

void set_conv_workspace_limit(int64_t bytes) {
  ANVIL_CHECK(bytes >= 0, Error, "[set_conv_workspace_limit] expected bytes >= 0, got ", bytes);
  g_workspace_limit.store(bytes);
}

namespace {
// ANVIL_CONV_WORKSPACE_MB (MiB, read once): the limit when set_conv_workspace_limit has set none.
int64_t env_workspace_limit() {
  static const int64_t bytes = [] {
    const char* s = std::getenv("ANVIL_CONV_WORKSPACE_MB");
    if (!s || !*s) return int64_t{0};
    char* end = nullptr;
    const long long mib = std::strtoll(s, &end, 10);
    ANVIL_CHECK(*end == 0 && mib >= 0 && mib < (int64_t{1} << 40), Error,
                "[conv] ANVIL_CONV_WORKSPACE_MB must be a whole number of MiB >= 0, got '", s, "'");
    return static_cast<int64_t>(mib) << 20;
  }();
  return bytes;
}
}  // namespace

namespace {
std::atomic<int64_t> g_channels_last_min{-1};  // < 0: the default
}  // namespace

void set_conv_cuda_channels_last_min_bytes(int64_t bytes) { g_channels_last_min.store(bytes < 0 ? -1 : bytes); }

int64_t conv_cuda_channels_last_min_bytes() {
  static const int64_t fallback = [] {
    const char* e = std::getenv("ANVIL_CONV_CUDA_KEEP_LAYOUT");
    return e && *e && *e != '0' ? std::numeric_limits<int64_t>::max() : int64_t{32} << 20;
  }();
  const int64_t set = g_channels_last_min.load();
  return set >= 0 ? set : fallback;
}

int64_t conv_workspace_limit(const Device& device) {
  const int64_t set = g_workspace_limit.load() > 0 ? g_workspace_limit.load() : env_workspace_limit();
  return set > 0 ? set : device.is_cpu() ? int64_t{16} << 20 : int64_t{128} << 20;
}

FusedPlan convolution_plan(const Tensor& input, const Tensor& weight, const Shape& stride, const Shape& padding,
                           const Shape& dilation, bool transposed, const Shape& output_padding, int64_t groups,
                           bool has_bias) {
  const char* op = "[convolution_plan]";
  const Args a = check_args(op, input, weight, nullptr, stride, padding, dilation, transposed, output_padding, groups);
  const Problem p = make_problem(a, input, weight, output_spatial(op, a, input, weight));
  if (p.kc() == 0 || p.n == 0 || p.c_out == 0) return FusedPlan::Composed;
  // Tensors not yet in the layout are copied first (fresh, aligned): null stands for those.
  auto given = [&](const Tensor& t) { return t.is_contiguous(p.fmt) ? t : Tensor(); };
  ConvDirectParams d = transposed ? direct_params(p, ConvPass::BackwardInput, Tensor(), given(weight), given(input))
                                  : direct_params(p, ConvPass::Forward, given(input), given(weight), Tensor());
  d.has_bias = has_bias;
  return ANVIL_PLAN(p.device, conv_direct, d);
}

size_t conv_plan_cache_size() { return cuda_backend::conv_plan_cache_size(); }
void set_conv_plan_cache_capacity(size_t plans) { cuda_backend::set_conv_plan_cache_capacity(plans); }
bool cudnn_is_available() { return cuda_backend::cudnn_is_available(); }
void set_cudnn_enabled(bool enabled) { cuda_backend::set_cudnn_enabled(enabled); }
bool cudnn_enabled() { return cuda_backend::cudnn_enabled(); }
void set_cudnn_allow_fft_winograd(bool allow) { cuda_backend::set_cudnn_allow_fft_winograd(allow); }
bool cudnn_allow_fft_winograd() { return cuda_backend::cudnn_allow_fft_winograd(); }

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride, const Shape& padding,
              const Shape& dilation, int64_t groups) {
  return conv_nd("[conv1d]", "conv1d", 1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride, const Shape& padding,
              const Shape& dilation, int64_t groups) {
  return conv_nd("[conv2d]", "conv2d", 2, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride, const Shape& padding,
              const Shape& dilation, int64_t groups) {
  return conv_nd("[conv3d]", "conv3d", 3, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
              const ConvPadding& padding, const Shape& dilation, int64_t groups) {
  return conv_nd_mode("[conv1d]", "conv1d", 1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
              const ConvPadding& padding, const Shape& dilation, int64_t groups) {
  return conv_nd_mode("[conv2d]", "conv2d", 2, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
              const ConvPadding& padding, const Shape& dilation, int64_t groups) {
  return conv_nd_mode("[conv3d]", "conv3d", 3, input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  return conv_transpose_nd("[conv_transpose1d]", "conv_transpose1d", 1, input, weight, bias, stride, padding,
                           output_padding, groups, dilation);
}
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  return conv_transpose_nd("[conv_transpose2d]", "conv_transpose2d", 2, input, weight, bias, stride, padding,
                           output_padding, groups, dilation);
}
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  return conv_transpose_nd("[conv_transpose3d]", "conv_transpose3d", 3, input, weight, bias, stride, padding,
                           output_padding, groups, dilation);
}

Tensor convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                   const Shape& padding, const Shape& dilation, bool transposed, const Shape& output_padding,
                   int64_t groups) {
  return convolution_impl("[convolution]", input, weight, bias, stride, padding, dilation, transposed, output_padding,
                          groups);
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward(const Tensor& grad_output, const Tensor& input,
                                                        const Tensor& weight, const Shape& bias_sizes,
                                                        const Shape& stride, const Shape& padding, const Shape& dilation,
                                                        bool transposed, const Shape& output_padding, int64_t groups,
                                                        std::array<bool, 3> output_mask) {
  const char* op = "[convolution_backward]";
  ANVIL_CHECK(grad_output.defined(), Error, op, " undefined tensor");
  const Args a = check_args(op, input, weight, bias_sizes.empty() ? nullptr : &bias_sizes, stride, padding, dilation,
                            transposed, output_padding, groups);
  ANVIL_CHECK(grad_output.dtype() == input.dtype(), DTypeError, op, " grad_output type (", dtype_name(grad_output.dtype()),
              ") and input type (", dtype_name(input.dtype()), ") should be the same");
  check_same_device(op, input, grad_output);
  const Shape out_spatial = output_spatial(op, a, input, weight);
  const Shape out_sizes = with_spatial(input.size(0), transposed ? weight.size(1) * groups : weight.size(0), out_spatial);
  ANVIL_CHECK(grad_output.sizes() == out_sizes, ShapeError, op, " Expected grad_output of the output's shape ",
              shape_str(out_sizes), ", but got grad_output ", describe(grad_output));
  const Problem p = make_problem(a, input, weight, out_spatial);
  Tensor gx, gw, gb;
  if (!transposed) {
    if (output_mask[0]) gx = conv_input_grad(p, grad_output, weight, {}, input.sizes());
    if (output_mask[1]) gw = conv_weight_grad(p, input, grad_output, weight.sizes());
  } else {  // the plain convolution reads grad_output (its input) and gives input's shape
    if (output_mask[0]) gx = conv_forward(p, grad_output, weight, {}, input.sizes());
    if (output_mask[1]) gw = conv_weight_grad(p, grad_output, input, weight.sizes());
  }
  if (output_mask[2] && !bias_sizes.empty()) {
    Shape dims{0};
    for (int64_t i = 0; i < a.dims; ++i) dims.push_back(2 + i);
    gb = sum(grad_output, dims);
  }
  return {gx, gw, gb};
}

}  // namespace anvil
