// CPU copy (dtype conversion over strides), fill and the Philox random fill.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/random.h"
#include "core/kernels/attention.h"
#include "core/philox.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

// A copy whose destination and source are dense along different dims (a memory-format change,
// NCHW <-> NHWC): 32 x 32 tiles over those two dims, so that both sides move whole cache lines
// (the element loop strides one side across the whole tensor: contiguous(ChannelsLast) of
// [4, 64, 56, 56] float32 took 738 us, torch 358). false: not such a copy.
template <typename To, typename From>
bool copy_transposed(const ElementwiseParams& p, To* out, const From* in) {
  constexpr int64_t kTile = 32;
  int a = -1, b = -1;  // the destination is dense along dim a, the source along dim b
  for (int d = 0; d < p.ndim; ++d) {
    if (p.strides[0][d] == 1) a = d;
    if (p.strides[1][d] == 1) b = d;
  }
  if (a < 0 || b < 0 || a == b || p.sizes[a] < 8 || p.sizes[b] < 8) return false;
  int others[kMaxDims];
  int n_others = 0;
  int64_t outer = 1;
  for (int d = 0; d < p.ndim; ++d)
    if (d != a && d != b) {
      others[n_others++] = d;
      outer *= p.sizes[d];
    }
  const int64_t na = p.sizes[a], nb = p.sizes[b], ta = (na + kTile - 1) / kTile, tb = (nb + kTile - 1) / kTile;
  const int64_t src_a = p.strides[1][a], dst_b = p.strides[0][b];
#pragma omp parallel for schedule(static) if (p.numel >= kParallelGrain)
  for (int64_t task = 0; task < outer * ta * tb; ++task) {
    const int64_t tile = task % (ta * tb), i0 = tile / tb * kTile, j0 = tile % tb * kTile;
    int64_t o0 = 0, o1 = 0, rem = task / (ta * tb);
    for (int k = n_others - 1; k >= 0; --k) {
      const int d = others[k];
      const int64_t idx = rem % p.sizes[d];
      rem /= p.sizes[d];
      o0 += idx * p.strides[0][d];
      o1 += idx * p.strides[1][d];
    }
    const int64_t i1 = std::min(i0 + kTile, na), j1 = std::min(j0 + kTile, nb);
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = i0; i < i1; ++i) out[o0 + i + j * dst_b] = convert<To>(in[o1 + i * src_a + j]);
  }
  return true;
}

}  // namespace

void copy(const ElementwiseParams& p) {
  if (p.contiguous) {
    if (p.out_dtype == p.dtype) {
      const size_t bytes = static_cast<size_t>(p.numel) * element_size(p.dtype);
      // One large memcpy per thread: one thread does not saturate DRAM here, and large calls
      // let glibc use non-temporal stores (no read-for-ownership of the destination).
      const int64_t chunk = std::max<int64_t>(1 << 20, static_cast<int64_t>(bytes) / omp_get_max_threads() + 4096);
      const int64_t nchunks = (static_cast<int64_t>(bytes) + chunk - 1) / chunk;
      parallel_for(nchunks, nchunks > 1, [&](int64_t c) {
        size_t off = static_cast<size_t>(c) * chunk;
        std::memcpy(static_cast<char*>(p.ptr[0]) + off, static_cast<const char*>(p.ptr[1]) + off,
                    std::min<size_t>(chunk, bytes - off));
      });
      return;
    }
    if (simd::convert(p.out_dtype, p.dtype, p.ptr[0], p.ptr[1], p.numel)) return;
  }
  dispatch_all_types(p.out_dtype, "[copy_]", [&](auto out_tag) {
    using To = typename decltype(out_tag)::type;
    dispatch_all_types(p.dtype, "[copy_]", [&](auto in_tag) {
      using From = typename decltype(in_tag)::type;
      To* out = static_cast<To*>(p.ptr[0]);
      const From* in = static_cast<const From*>(p.ptr[1]);
      if (copy_transposed(p, out, in)) return;
      for_each_element(p, [&](int64_t o0, int64_t o1, int64_t, int64_t) { out[o0] = convert<To>(in[o1]); });
    });
  });
}

void fill(const ElementwiseParams& p) {
  dispatch_all_types(p.out_dtype, "[fill_]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    // Floating values go through double -> dtype like a copy; integers keep all 64 bits.
    if constexpr (is_float_v<T> || is_complex_v<T>) v = scalar_as<T>(p.scalar0);
    else if constexpr (std::is_same_v<T, bool>) v = p.scalar0.i != 0 || p.scalar0.f != 0;
    else v = static_cast<T>(static_cast<uint64_t>(p.scalar0.i));
    T* out = static_cast<T*>(p.ptr[0]);
    for_each_element(p, [&](int64_t o0, int64_t, int64_t, int64_t) { out[o0] = v; });
  });
}

void random(const RandomParams& p) {
  dispatch_all_types(p.dtype, "[random]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(p.out);
    const int bits = random_bits_for(p.dtype);
#pragma omp parallel for schedule(static) if (p.numel >= kParallelGrain)
    for (int64_t i = 0; i < p.numel; ++i) {
      uint64_t ctr = p.offset + static_cast<uint64_t>(i);
      if constexpr (is_complex_v<T>) {
        out[i] = T(0.f, 0.f);
      } else if (p.kind == RandomKind::Uniform) {
        out[i] = convert<T>(philox_uniform(p.seed, ctr, bits));
      } else if (p.kind == RandomKind::Normal) {
        out[i] = convert<T>(philox_normal(p.seed, ctr));
      } else {
        out[i] = convert<T>(philox_int(p.seed, ctr, p.low, p.high));
      }
    }
  });
}

// A weight is larger than the caches and the hardware prefetchers follow the streams.
void cache_prefetch(const PrefetchParams&) {}

}  // namespace anvil::cpu
