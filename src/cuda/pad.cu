// CUDA padding, forward and backward, over the index maps of core/kernels/pad.h (the CPU uses
// the same ones, so both read and sum exactly the same elements in the same order).
//
// Both directions work on rows of the innermost dim: a group of `lanes` threads takes a segment
// of one row, works out the row's outer indices once, and moves it in 16-byte units aligned in
// the destination. A unit inside the unpadded middle (forward) or the interior (backward, one
// source per element) reads its 16 bytes as the two aligned vectors that hold them, shifted;
// units at the edges and the rows' ends follow the index maps element by element.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/pad.h"
#include "cuda/device/map.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::divmod;
using cuda_device::global_thread;
using cuda_device::grid_threads;
constexpr int kThreads = KernelLaunch::kThreads;

template <int W>
__device__ __forceinline__ uint4 shifted_words(const uint32_t (&w)[8], unsigned bits) {
  return make_uint4(__funnelshift_r(w[W], w[W + 1], bits), __funnelshift_r(w[W + 1], w[W + 2], bits),
                    __funnelshift_r(w[W + 2], w[W + 3], bits), __funnelshift_r(w[W + 3], w[W + 4], bits));
}

// The 16 bytes at `src` (any element-aligned address) from the aligned vectors that hold them.
// Both vectors hold at least one of those bytes, so neither read leaves the allocation.
__device__ __forceinline__ uint4 load16_shifted(const void* src) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  const uint4* v = reinterpret_cast<const uint4*>(a & ~uintptr_t{15});
  const unsigned sh = static_cast<unsigned>(a & 15);
  const uint4 lo = v[0];
  if (sh == 0) return lo;
  const uint4 hi = v[1];
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const unsigned bits = (sh & 3) * 8;
  switch (sh >> 2) {  // uniform across a row: the source and destination move together
    case 0: return shifted_words<0>(w, bits);
    case 1: return shifted_words<1>(w, bits);
    case 2: return shifted_words<2>(w, bits);
    default: return shifted_words<3>(w, bits);
  }
}

// How a launch splits rows: `lanes` threads (1, 2 or 4) per group, each group one segment of
// `seg_units` 16-byte units of a row, `segs` segments per row. Few lanes per row keep the per-row
// work (its outer indices, its edge elements) from being repeated or serialised across a warp,
// while 2 or 4 lanes still read and write whole 32-byte sectors; long rows are cut into
// segments so that every thread has work. div[d] divides by dims[d]'s extent (the output's in
// the forward, the input's in the backward) when every row index fits 31 bits (`fast`).
struct RowSplit {
  int lanes;
  bool fast;
  int64_t segs, seg_units;
  cuda_device::FastDivmod div[kMaxDims];
};
RowSplit split_rows(const PadParams& p, bool forward, int64_t elem_bytes, const KernelLaunch& launch) {
  const int nd = p.ndim;
  const int64_t row_elems = forward ? p.dims[nd - 1].out : p.dims[nd - 1].in;
  const int64_t rows = (forward ? p.out_numel : p.in_numel) / row_elems;
  const int64_t v = 16 / elem_bytes, units = row_elems / v + 2;  // + the two partial ends
  RowSplit s{1, rows < (int64_t{1} << 31), 1, units, {}};
  while (s.lanes < 4 && s.lanes < units) s.lanes *= 2;
  const int64_t groups = int64_t{launch.max_blocks()} * kThreads / s.lanes;
  const int64_t max_segs = (units + s.lanes - 1) / s.lanes;
  s.segs = rows >= groups ? 1 : std::min(max_segs, std::max<int64_t>(1, groups / rows));
  s.seg_units = (units + s.segs - 1) / s.segs;
  s.seg_units = (s.seg_units + s.lanes - 1) / s.lanes * s.lanes;
  // Few long rows (a 1-d pad of a long signal): segments of at most two units per lane, so that
  // the element-by-element edge units (a reflect backward sums two sources per element there)
  // are spread over many groups instead of a few groups' serial loops (H200, stft reflect f32
  // backward [32, 1, 200000] pad 2048: 24 units per segment 58 us, 8 units 43 us, 4 units 56 us:
  // there the segments' own overhead takes over).
  if (s.segs > 1 && s.seg_units > 2 * s.lanes) {
    s.seg_units = 2 * s.lanes;
    s.segs = (units + s.seg_units - 1) / s.seg_units;
  }
  for (int d = 0; d < nd; ++d) {
    const int64_t e = forward ? p.dims[d].out : p.dims[d].in;
    s.div[d] = cuda_device::FastDivmod(static_cast<uint32_t>(e < (int64_t{1} << 31) ? e : 1));
  }
  return s;
}

// row -> (row / dims[d], row % dims[d]) by the split's fast divisor when it applies.
__device__ __forceinline__ void row_divmod(const RowSplit& s, int d, int64_t row, int64_t extent, int64_t& q,
                                           int64_t& r) {
  if (s.fast) {
    uint32_t q32, r32;
    s.div[d](static_cast<uint32_t>(row), q32, r32);
    q = q32;
    r = r32;
  } else {
    divmod(row, extent, q, r);
  }
}

// Calls f(std::integral_constant<PadMode, mode>) for the runtime mode.
template <typename F>
void with_pad_mode(PadMode mode, F&& f) {
  switch (mode) {
    case PadMode::Constant: return f(std::integral_constant<PadMode, PadMode::Constant>{});
    case PadMode::Reflect: return f(std::integral_constant<PadMode, PadMode::Reflect>{});
    case PadMode::Replicate: return f(std::integral_constant<PadMode, PadMode::Replicate>{});
    case PadMode::Circular: return f(std::integral_constant<PadMode, PadMode::Circular>{});
  }
}

// Input offset of output row `row` (the dims before the last, row-major), or -1 when a constant
// pad's fill covers the whole row.
template <PadMode Mode>
__device__ __forceinline__ int64_t pad_row_source(const PadParams& p, const RowSplit& s, int64_t row) {
  int64_t off = 0;
  bool inside = true;
  for (int d = p.ndim - 2; d >= 0; --d) {
    int64_t q = 0, j = row;
    if (d > 0) row_divmod(s, d, row, p.dims[d].out, q, j);
    const int64_t k = pad_source(Mode, p.dims[d], j);
    inside = inside && k >= 0;
    off += k * p.in_strides[d];
    row = q;
  }
  return inside ? off : -1;
}

// Forward. The output is dense in the dims' order (the front end allocates it so), so output
// row r is elements [r n, (r + 1) n) of flat memory and every full unit is one vector store.
// A segment's units split into the bulk (wholly inside the row's direct middle, or anywhere in
// a row that the fill covers: a load and a store each, unrolled so that loads overlap) and the
// few edge units around it, which follow the index map element by element.
// 5 resident blocks cap it at 48 registers: on H200, 67 us for the Wan pad against 75 us at 64.
template <typename U, PadMode Mode>
__global__ void __launch_bounds__(kThreads, 5) pad_kernel(const __grid_constant__ PadParams p, const RowSplit s) {
  constexpr int V = 16 / sizeof(U);
  union Vec {
    uint4 v;
    U e[V];
  };
  const U* __restrict__ in = static_cast<const U*>(p.src);
  U* __restrict__ out = static_cast<U*>(p.dst);
  const U fill = static_cast<U>(p.fill_bits);
  Vec fills;
#pragma unroll
  for (int v = 0; v < V; ++v) fills.e[v] = fill;
  const PadDim last = p.dims[p.ndim - 1];
  const int64_t n = last.out, s_in = p.in_strides[p.ndim - 1];
  const PadRun run = pad_direct_run(Mode, last);
  const int64_t t = global_thread(), work = p.out_numel / n * s.segs, groups = grid_threads() / s.lanes;
  const int lane = static_cast<int>(t & (s.lanes - 1));
  for (int64_t g = t / s.lanes; g < work; g += groups) {
    int64_t row = g, seg = 0;
    if (s.segs > 1) divmod(g, s.segs, row, seg);
    const int64_t base = pad_row_source<Mode>(p, s, row);
    const int64_t e_begin = row * n, e_end = e_begin + n;
    const int64_t u0 = e_begin / V + seg * s.seg_units, u_end = (e_end + V - 1) / V,
                  u1 = u0 + s.seg_units < u_end ? u0 + s.seg_units : u_end;
    // Bulk elements [m0, m1): output element e reads input element e + shift.
    const bool fill_row = base < 0;
    const int64_t m0 = fill_row ? e_begin : e_begin + run.j0, m1 = fill_row || s_in == 1 ? (fill_row ? e_end : e_begin + run.j1) : m0;
    const int64_t shift = base + run.k0 - (e_begin + run.j0);
    int64_t b0 = (m0 + V - 1) / V, b1 = m1 / V;
    b0 = b0 > u0 ? b0 : u0;
    b1 = b1 < u1 ? b1 : u1;
    if (b1 <= b0) b0 = b1 = u0;
    if (fill_row) {
#pragma unroll 4
      for (int64_t u = b0 + lane; u < b1; u += s.lanes) *reinterpret_cast<uint4*>(out + u * V) = fills.v;
    } else {
#pragma unroll 4
      for (int64_t u = b0 + lane; u < b1; u += s.lanes)
        *reinterpret_cast<uint4*>(out + u * V) = load16_shifted(in + (u * V + shift));
    }
    // Edge elements, spread over the group's lanes: [begin of the segment, bulk) and (bulk, end).
    auto edge = [&](int64_t e0, int64_t e1) {
      e0 = e0 > e_begin ? e0 : e_begin;
      e1 = e1 < e_end ? e1 : e_end;
      for (int64_t e = e0 + lane; e < e1; e += s.lanes) {
        const int64_t k = fill_row ? -1 : pad_source(Mode, last, e - e_begin);
        out[e] = k < 0 ? fill : in[base + k * s_in];
      }
    };
    edge(u0 * V, b0 * V);
    edge(b1 * V, u1 * V);
  }
}

// Backward: a group per segment of a grad_input row. The row's outer sources (every output row
// that reads it) are found once; a unit of V elements sums, in the output's order, the
// grad_output elements of every combination of them (the innermost outer dim fastest), then the
// last dim's sources of each element. An interior unit (one source per element) does that
// with vector loads into V accumulators; any other unit goes element by element, one
// accumulator, so that the edge path's loops stay out of registers. MaxD bounds ndim so that
// the per-dim arrays, indexed in unrolled loops, stay in registers (dims past the padded ones
// are merged by the front end: 5 cover every reflect / replicate).
struct OuterSources {  // one outer dim's sources as int32 ranges (a dim's extent fits in 2^31)
  int n;
  int lo[3], len[3];
};

template <int MaxD>
__device__ __forceinline__ int64_t combo_offset(const PadParams& p, const OuterSources* outer, const int* idx) {
  int64_t off = 0;
#pragma unroll
  for (int d = 0; d < MaxD - 1; ++d) {
    if (d > p.ndim - 2) continue;
    int i = idx[d], j = outer[d].lo[0] + i;  // the i-th source, walking the ranges in order
    if (outer[d].n > 1 && i >= outer[d].len[0]) {
      i -= outer[d].len[0];
      j = outer[d].lo[1] + i;
      if (outer[d].n > 2 && i >= outer[d].len[1]) j = outer[d].lo[2] + i - outer[d].len[1];
    }
    off += j * p.out_strides[d];
  }
  return off;
}

template <int MaxD>
__device__ __forceinline__ void next_combo(const PadParams& p, const int* count, int* idx) {
#pragma unroll
  for (int d = MaxD - 2; d >= 0; --d) {  // the innermost outer dim fastest
    if (d > p.ndim - 2) continue;
    if (++idx[d] < count[d]) return;
    idx[d] = 0;
  }
}

// Resident blocks per SM by MaxD: at 5 dims, 3 (80 registers) measured a little faster than 4
// (64, spilling) and than 2; 1-d and 2-d pads (2 and 3 dims after the front end's merging) need
// fewer registers for their per-dim arrays, and take more blocks.
template <int MaxD>
constexpr int backward_blocks_per_sm() {
  return MaxD <= 2 ? 5 : MaxD <= 3 ? 4 : MaxD <= 5 ? 3 : 1;
}

template <typename T, int MaxD, PadMode Mode>
__global__ void __launch_bounds__(kThreads, backward_blocks_per_sm<MaxD>())
    pad_backward_kernel(const __grid_constant__ PadParams p, const RowSplit s) {
  using Acc = opmath_t<T>;
  constexpr int V = 16 / sizeof(T);
  const T* __restrict__ grad_out = static_cast<const T*>(p.src);
  T* __restrict__ grad_in = static_cast<T*>(p.dst);
  const int nd = p.ndim;
  const PadDim last = p.dims[nd - 1];
  const PadInterior mid = pad_interior(Mode, last);
  const int64_t n = last.in, s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  const int64_t t = global_thread(), work = p.in_numel / n * s.segs, groups = grid_threads() / s.lanes;
  const int lane = static_cast<int>(t & (s.lanes - 1));
  for (int64_t g = t / s.lanes; g < work; g += groups) {
    int64_t row = g, seg = 0;
    if (s.segs > 1) divmod(g, s.segs, row, seg);
    OuterSources outer[MaxD];
    int count[MaxD];
    int64_t combos = 1, in_off = 0;
#pragma unroll
    for (int d = MaxD - 2; d >= 0; --d) {
      if (d > nd - 2) continue;
      int64_t q = 0, k = row;
      if (d > 0) row_divmod(s, d, row, p.dims[d].in, q, k);
      row = q;
      in_off += k * p.in_strides[d];
      const PadSources src = pad_sources(Mode, p.dims[d], k);
      outer[d].n = src.n;
      count[d] = 0;
#pragma unroll
      for (int r = 0; r < 3; ++r) {
        outer[d].lo[r] = static_cast<int>(src.lo[r]);
        outer[d].len[r] = static_cast<int>(src.hi[r] - src.lo[r]);
        if (r < src.n) count[d] += outer[d].len[r];
      }
      combos *= count[d];
    }
    int idx0[MaxD];
#pragma unroll
    for (int d = 0; d < MaxD; ++d) idx0[d] = 0;
    const int64_t off0 = combo_offset<MaxD>(p, outer, idx0);  // the only combination when combos == 1
    // A dense row is flat memory [in_off, in_off + n): units align to it, full ones store as
    // vectors. A strided one stores element by element, units counted from its start. The bulk
    // (units inside the interior, grad_output dense along the row) reads vectors; the edge
    // units around it go element by element.
    const bool flat = s_in == 1;
    const int64_t e_begin = flat ? in_off : 0, e_end = e_begin + n;
    const int64_t u0 = e_begin / V + seg * s.seg_units, u_end = (e_end + V - 1) / V,
                  u1 = u0 + s.seg_units < u_end ? u0 + s.seg_units : u_end;
    int64_t b0 = (e_begin + mid.lo + V - 1) / V, b1 = s_out == 1 ? (e_begin + mid.hi) / V : b0;
    b0 = b0 > u0 ? b0 : u0;
    b1 = b1 < u1 ? b1 : u1;
    if (b1 <= b0) b0 = b1 = u0;
#pragma unroll 2
    for (int64_t u = b0 + lane; u < b1; u += s.lanes) {
      const int64_t k0 = u * V - e_begin;
      Acc acc[V];
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = Acc{};
      int idx[MaxD];
#pragma unroll
      for (int d = 0; d < MaxD; ++d) idx[d] = 0;
      for (int64_t c = 0; c < combos; ++c) {
        const int64_t off = combos == 1 ? off0 : combo_offset<MaxD>(p, outer, idx);
        const uint4 raw = load16_shifted(grad_out + off + k0 + last.before);
        next_combo<MaxD>(p, count, idx);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = acc[v] + static_cast<Acc>(e[v]);
      }
      if (flat) {
        union {
          uint4 v;
          T e[V];
        } vals;
#pragma unroll
        for (int v = 0; v < V; ++v) vals.e[v] = static_cast<T>(acc[v]);
        *reinterpret_cast<uint4*>(grad_in + in_off + k0) = vals.v;
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) grad_in[in_off + (k0 + v) * s_in] = static_cast<T>(acc[v]);
      }
    }
    // Edge elements, spread over the group's lanes: [begin of the segment, bulk) and (bulk, end).
    auto edge = [&](int64_t e0, int64_t e1) {
      e0 = e0 > e_begin ? e0 : e_begin;
      e1 = e1 < e_end ? e1 : e_end;
      for (int64_t e = e0 + lane; e < e1; e += s.lanes) {
        const int64_t k = e - e_begin;
        const PadSources src = pad_sources(Mode, last, k);
        Acc acc = Acc{};
        int idx[MaxD];
#pragma unroll
        for (int d = 0; d < MaxD; ++d) idx[d] = 0;
        for (int64_t c = 0; c < combos; ++c) {
          const int64_t off = combos == 1 ? off0 : combo_offset<MaxD>(p, outer, idx);
          next_combo<MaxD>(p, count, idx);
#pragma unroll
          for (int r = 0; r < 3; ++r) {
            if (r >= src.n) break;
            for (int64_t j = src.lo[r]; j < src.hi[r]; ++j) acc = acc + static_cast<Acc>(grad_out[off + j * s_out]);
          }
        }
        grad_in[in_off + k * s_in] = static_cast<T>(acc);
      }
    };
    edge(u0 * V, b0 * V);
    edge(b1 * V, u1 * V);
  }
}

}  // namespace

void pad(const PadParams& p) {
  if (p.out_numel == 0) return;
  // The kernel writes the output as flat memory: it must be dense in the dims' order.
  int64_t dense = 1;
  for (int d = p.ndim - 1; d >= 0; --d) {
    ANVIL_CHECK(p.out_strides[d] == dense || p.dims[d].out == 1, Error, "[pad] internal: output not dense in dim ", d);
    dense *= p.dims[d].out;
  }
  ANVIL_CHECK(reinterpret_cast<uintptr_t>(p.dst) % 16 == 0, Error, "[pad] internal: output not 16-byte aligned");
  KernelLaunch launch(p.dst);
  dispatch_element_size(element_size(p.dtype), "[pad]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const RowSplit s = split_rows(p, true, sizeof(U), launch);
    const int64_t rows = p.out_numel / p.dims[p.ndim - 1].out;
    with_pad_mode(p.mode, [&](auto mode) {
      pad_kernel<U, decltype(mode)::value><<<launch.blocks(rows * s.segs * s.lanes), kThreads, 0, launch.stream()>>>(p, s);
    });
  });
  launch.check("[pad]");
}

void pad_backward(const PadParams& p) {
  if (p.in_numel == 0) return;
  ANVIL_CHECK(reinterpret_cast<uintptr_t>(p.dst) % 16 == 0, Error, "[pad_backward] internal: grad_input not 16-byte aligned");
  KernelLaunch launch(p.dst);
  dispatch_float_complex_types(p.dtype, "[pad_backward]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RowSplit s = split_rows(p, false, sizeof(T), launch);
    const unsigned blocks = launch.blocks(p.in_numel / p.dims[p.ndim - 1].in * s.segs * s.lanes);
    with_pad_mode(p.mode, [&](auto mode) {
      constexpr PadMode M = decltype(mode)::value;
      if (p.ndim <= 2) pad_backward_kernel<T, 2, M><<<blocks, kThreads, 0, launch.stream()>>>(p, s);
      else if (p.ndim <= 3) pad_backward_kernel<T, 3, M><<<blocks, kThreads, 0, launch.stream()>>>(p, s);
      else if (p.ndim <= 5) pad_backward_kernel<T, 5, M><<<blocks, kThreads, 0, launch.stream()>>>(p, s);
      else pad_backward_kernel<T, kMaxDims, M><<<blocks, kThreads, 0, launch.stream()>>>(p, s);
    });
  });
  launch.check("[pad_backward]");
}

}  // namespace anvil::cuda_backend
