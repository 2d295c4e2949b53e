// rope on CUDA (neox style): for c < half = rotary_dim / 2 and angle = float(pos) * inv_freq[c],
//   out[c] = x[c] cos - x[c + half] sin,  out[c + half] = x[c + half] cos + x[c] sin,
// columns >= rotary_dim copied. sincosf is the accurate one (positions reach 32K and more, where
// __sinf's error grows with the argument); float64 takes sin / cos in double of the float angle.
// Products and sums are not contracted into FMAs, as a plain CPU loop computes them.
// A thread takes one pack of V columns (16 bytes, or 1 when rows are misaligned) for up to
// kReuse rows that share a position: positions are broadcast over the heads dim, so the angles of
// a pack are computed once for several heads.
#include <algorithm>

#include "core/dispatch.h"
#include "core/kernels/rope.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/row_ops.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::compute_t;
using cuda_device::from_compute;
using cuda_device::Pack;
using cuda_device::rotate;
using cuda_device::to_compute;

constexpr int kReuse = 4;

// Rows are (outer, j): j runs over the broadcast dim `bd` (size 1 when positions broadcast over
// no dim), outer over the rest (params.sizes[bd] is set to 1 for the offsets of outer).
struct RopeSplit {
  int64_t bd_size = 1, bd_stride_x = 0, bd_stride_out = 0;
  int64_t chunks = 1;     // ceil(bd_size / kReuse)
  int64_t rot_slots = 0;  // packs of the rotated half
  int64_t slots = 0;      // rot_slots + packs of the copied columns
  int64_t total = 0;      // outer rows * chunks * slots
};

template <typename T, int V>
__global__ void __launch_bounds__(256) rope_kernel(const __grid_constant__ RopeParams p, const RopeSplit sp) {
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();
  using A = compute_t<T>;
  using P = Pack<T, V>;
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t half = p.rotary_dim / 2, nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < sp.total; i += nthreads) {
    int64_t rest, slot, outer, chunk;
    cuda_device::divmod(i, sp.slots, rest, slot);
    cuda_device::divmod(rest, sp.chunks, outer, chunk);
    int64_t xo = 0, oo = 0, po = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      int64_t q, r;
      cuda_device::divmod(outer, p.sizes[d], q, r);
      xo += r * p.stride_x[d];
      oo += r * p.stride_out[d];
      po += r * p.stride_pos[d];
      outer = q;
    }
    const int64_t j0 = chunk * kReuse;
    const int nj = static_cast<int>(std::min<int64_t>(kReuse, sp.bd_size - j0));
    xo += j0 * sp.bd_stride_x;
    oo += j0 * sp.bd_stride_out;

    // Every load of the item (position, frequencies, kReuse rows clamped to the valid ones)
    // is issued before the first use.
    if (slot < sp.rot_slots) {
      const int64_t c = slot * V;
      const int64_t pos = p.pos_dtype == kInt64 ? static_cast<const int64_t*>(p.positions)[po]
                                                : static_cast<const int32_t*>(p.positions)[po];
      float freq[V];
#pragma unroll
      for (int e = 0; e < V; ++e) freq[e] = p.inv_freq[c + e];
      P a[kReuse], b[kReuse];
#pragma unroll
      for (int j = 0; j < kReuse; ++j) {
        const T* xr = x + xo + std::min(j, nj - 1) * sp.bd_stride_x + c;
        a[j] = *reinterpret_cast<const P*>(xr);
        b[j] = *reinterpret_cast<const P*>(xr + half);
      }
      A cs[V], sn[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float angle = static_cast<float>(pos) * freq[e];
        if constexpr (std::is_same_v<A, float>) {
          sincosf(angle, &sn[e], &cs[e]);
        } else {
          sincos(static_cast<double>(angle), &sn[e], &cs[e]);
        }
      }
#pragma unroll
      for (int j = 0; j < kReuse; ++j) {
        if (j >= nj) break;
        P ya, yb;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          A ra, rb;
          rotate(to_compute(a[j].v[e]), to_compute(b[j].v[e]), cs[e], sn[e], ra, rb);
          ya.v[e] = from_compute<T>(ra);
          yb.v[e] = from_compute<T>(rb);
        }
        *reinterpret_cast<P*>(out + oo + j * sp.bd_stride_out + c) = ya;
        *reinterpret_cast<P*>(out + oo + j * sp.bd_stride_out + c + half) = yb;
      }
    } else {
      const int64_t c = p.rotary_dim + (slot - sp.rot_slots) * V;
      P v[kReuse];
#pragma unroll
      for (int j = 0; j < kReuse; ++j)
        v[j] = *reinterpret_cast<const P*>(x + xo + std::min(j, nj - 1) * sp.bd_stride_x + c);
#pragma unroll
      for (int j = 0; j < kReuse; ++j) {
        if (j < nj) *reinterpret_cast<P*>(out + oo + j * sp.bd_stride_out + c) = v[j];
      }
    }
  }
}

template <typename T>
void launch_rope(const RopeParams& p_in, const KernelLaunch& launch) {
  constexpr int V16 = 16 / sizeof(T);
  RopeParams p = p_in;
  RopeSplit sp;
  // The broadcast dim of positions with the most rows shares its angles.
  int bd = -1;
  for (int d = 0; d < p.ndim; ++d) {
    if (p.stride_pos[d] == 0 && p.sizes[d] > 1 && (bd < 0 || p.sizes[d] > p.sizes[bd])) bd = d;
  }
  if (bd >= 0) {
    sp.bd_size = p.sizes[bd];
    sp.bd_stride_x = p.stride_x[bd];
    sp.bd_stride_out = p.stride_out[bd];
    p.sizes[bd] = 1;
  }
  const int64_t half = p.rotary_dim / 2, pass = p.head_dim - p.rotary_dim;
  bool vec = half % V16 == 0 && pass % V16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
  for (int d = 0; d < p_in.ndim; ++d) {
    if (p_in.sizes[d] > 1) vec = vec && p_in.stride_x[d] % V16 == 0 && p_in.stride_out[d] % V16 == 0;
  }
  const int V = vec ? V16 : 1;
  sp.chunks = (sp.bd_size + kReuse - 1) / kReuse;
  sp.rot_slots = half / V;
  sp.slots = sp.rot_slots + pass / V;
  sp.total = p.rows / sp.bd_size * sp.chunks * sp.slots;
  if (sp.total == 0) return;
  const unsigned grid = launch.blocks(sp.total);
  launch_pdl("[rope]", vec ? rope_kernel<T, V16> : rope_kernel<T, 1>, dim3(grid), dim3(256), 0, launch.stream(), p, sp);
}

// qk_norm_rope_cache: one warp per (batch, token, head) row of qkv (cuda_device::QkRope, shared
// with the persistent decoder). Lane i holds the rotated pairs (c, c + half) for c = i, i + 32,
// ... < half and the copied columns rotary_dim + i, + 32, ... in registers (up to kPairs and
// kPass of them); its norm weights and frequencies are loaded before pdl_wait (they are constants, not outputs of earlier kernels) and its angles'
// sincos are independent of the row, so only the row's loads and one butterfly sit between the
// previous kernel and the stores. q / k columns are normed as rms_norm does (x * rstd * weight,
// rounded to T) and rotated as rope_kernel does; v rows are copied.
constexpr int kQkThreads = 128;

template <typename T, typename W, int kPairs, int kPass>
__global__ void __launch_bounds__(kQkThreads) qk_norm_rope_cache_kernel(const __grid_constant__ QkNormRopeCacheParams p) {
  using A = compute_t<T>;
  cuda_device::pdl_launch_dependents();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t per_token = p.n_heads + 2 * p.n_kv_heads;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kQkThreads / 32) + threadIdx.x / 32;
  const bool live = r < p.batch * p.len * per_token;
  const int64_t rr = live ? r : 0;
  const int64_t j = rr % per_token, bl = rr / per_token, l = bl % p.len, b = bl / p.len, D = p.head_dim;
  const bool is_q = j < p.n_heads, is_k = !is_q && j < p.n_heads + p.n_kv_heads;
  const W* w = static_cast<const W*>(is_q ? p.q_weight : is_k ? p.k_weight : nullptr);
  cuda_device::QkRope<A, kPairs, kPass> rope;
  rope.load(w, p.inv_freq, p.rotary_dim, p.head_dim, lane);
  cuda_device::pdl_wait();
  if (!live) return;
  const int64_t pos = static_cast<int64_t>(p.start[b]) + l;
  const T* x = static_cast<const T*>(p.qkv) + b * p.stride_qkv[0] + l * p.stride_qkv[1] + j * D;
  T* dst;
  if (is_q) {
    dst = static_cast<T*>(p.q_out) + ((b * p.n_heads + j) * p.len + l) * D;
  } else {
    if (pos < 0 || pos >= p.cache_rows) return;
    const int64_t h = is_k ? j - p.n_heads : j - p.n_heads - p.n_kv_heads;
    const int64_t* st = is_k ? p.stride_k : p.stride_v;
    dst = static_cast<T*>(is_k ? p.k_cache : p.v_cache) + b * st[0] + h * st[1] + pos * st[2];
    if (!is_k) {
      for (int64_t c = lane; c < D; c += 32) dst[c] = x[c];
      return;
    }
  }
  rope.apply(x, w != nullptr, p.eps, pos, lane, [&](int64_t c, A v) { dst[c] = from_compute<T>(v); });
}

template <typename T, typename W>
void launch_qk_norm_rope_cache(const QkNormRopeCacheParams& p, const dim3 grid, cudaStream_t stream) {
  const int64_t half = p.rotary_dim / 2, pass = p.head_dim - p.rotary_dim;
  auto go = [&](auto kernel) { launch_pdl("[qk_norm_rope_cache]", kernel, grid, dim3(kQkThreads), 0, stream, p); };
  if (half <= 32 * 4 && pass <= 32 * 4) go(qk_norm_rope_cache_kernel<T, W, 4, 4>);
  else go(qk_norm_rope_cache_kernel<T, W, 16, 16>);
}

}  // namespace

void rope(const RopeParams& p) {
  if (p.rows == 0 || p.head_dim == 0) return;
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[rope]", [&](auto tag) { launch_rope<typename decltype(tag)::type>(p, launch); });
  launch.check("[rope]");
}

void qk_norm_rope_cache(const QkNormRopeCacheParams& p) {
  const char* op = "[qk_norm_rope_cache]";
  if (p.batch * p.len * p.head_dim == 0) return;
  const int64_t rows = p.batch * p.len * (p.n_heads + 2 * p.n_kv_heads), per_block = kQkThreads / 32;
  ANVIL_CHECK((rows + per_block - 1) / per_block <= 0x7FFFFFFF, ShapeError, op, " ", p.batch * p.len, " tokens of ",
              p.n_heads + 2 * p.n_kv_heads, " heads exceed one launch");
  ANVIL_CHECK(p.rotary_dim / 2 <= 32 * 16 && p.head_dim - p.rotary_dim <= 32 * 16, ShapeError, op,
              " the CUDA kernel takes up to 1024 rotated and 512 copied columns, got head_dim ", p.head_dim,
              " with rotary_dim ", p.rotary_dim);
  KernelLaunch launch(p.q_out);
  const dim3 grid(static_cast<unsigned>((rows + per_block - 1) / per_block));
  dispatch_float_types(p.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.weight_dtype == p.dtype) launch_qk_norm_rope_cache<T, T>(p, grid, launch.stream());
    else launch_qk_norm_rope_cache<T, float>(p, grid, launch.stream());
  });
  launch.check(op);
}

}  // namespace anvil::cuda_backend
