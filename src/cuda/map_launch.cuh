#pragma once
// Host-side launchers of the map kernels (cuda/device/map.cuh): the packed / unrolled / strided
// path and a grid of one wave of resident blocks.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/map.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_device {

inline bool is_aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// Blocks of 256 that run at once on one SM (asked once per kernel instance). A grid of exactly
// that many per SM is one wave in which every block strides over the same amount of work; a
// fixed 8 per SM left a second, mostly idle wave whenever registers allowed fewer.
template <typename Kernel>
int resident_blocks_per_sm(Kernel kernel) {
  return cuda_backend::resident_blocks(kernel, kThreads, 0);
}

inline unsigned grid_for(int64_t items, int per_thread, int64_t max_blocks) {
  int64_t b = ((items + per_thread - 1) / per_thread + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : b > max_blocks ? max_blocks : b);
}

// Whether a strided map runs as rows of V-element packs (MapPath::InnerPacks): the innermost dim
// a multiple of V, dense in the output, dense or broadcast (stride 0) in each input, and every
// dense operand's packs 16-byte aligned (its pointer and every outer stride). One index
// decomposition and one 16-byte access per operand serve V elements (H100, a bf16 bias added
// over [1, 128, 1024, 1024]: 248 us, PyTorch 339; docs/PERFORMANCE.md session 32).
template <typename P>
bool inner_packs_fit(const P& p, int V, const size_t* element_bytes) {
  if (p.contiguous || p.ndim < 1 || p.sizes[p.ndim - 1] % V != 0 || p.strides[0][p.ndim - 1] != 1) return false;
  for (int s = 0; s < p.nargs; ++s) {
    const int64_t inner = p.strides[s][p.ndim - 1];
    if (inner == 0 && s > 0) continue;
    if (inner != 1 || !is_aligned(p.ptr[s], element_bytes[s] * V)) return false;
    for (int d = 0; d + 1 < p.ndim; ++d)
      if (p.strides[s][d] % V != 0) return false;
  }
  return true;
}

template <typename Out, typename In, typename F, typename P>
void launch_map1(const P& p, F f, cudaStream_t stream, int sm_count) {
  static const int resident = resident_blocks_per_sm(map1_kernel<Out, In, F, P>);
  constexpr int V = pack_width<In, Out>();
  const size_t bytes[2] = {sizeof(Out), sizeof(In)};
  MapPath path = p.contiguous ? (is_aligned(p.ptr[0], sizeof(Out) * V) && is_aligned(p.ptr[1], sizeof(In) * V)
                                     ? MapPath::Packed
                                     : MapPath::Elements)
                 : inner_packs_fit(p, V, bytes) ? MapPath::InnerPacks
                                                : MapPath::Strided;
  int per_thread = path == MapPath::Strided ? 1 : path == MapPath::Packed ? 2 * V : path == MapPath::InnerPacks ? V : kUnroll;
  unsigned grid = grid_for(p.numel, per_thread, int64_t{resident} * sm_count);
  map1_kernel<Out, In, F, P><<<grid, kThreads, 0, stream>>>(p, f, path);
}

template <typename Out, typename In, typename F, typename P>
void launch_map2(const P& p, F f, cudaStream_t stream, int sm_count) {
  static const int resident = resident_blocks_per_sm(map2_kernel<Out, In, F, P>);
  constexpr int V = pack_width<In, Out>();
  const size_t bytes[3] = {sizeof(Out), sizeof(In), sizeof(In)};
  MapPath path = p.contiguous ? (is_aligned(p.ptr[0], sizeof(Out) * V) && is_aligned(p.ptr[1], sizeof(In) * V) &&
                                         is_aligned(p.ptr[2], sizeof(In) * V)
                                     ? MapPath::Packed
                                     : MapPath::Elements)
                 : inner_packs_fit(p, V, bytes) ? MapPath::InnerPacks
                                                : MapPath::Strided;
  int per_thread = path == MapPath::Strided ? 1 : path == MapPath::Elements ? kUnroll : V;
  unsigned grid = grid_for(p.numel, per_thread, int64_t{resident} * sm_count);
  map2_kernel<Out, In, F, P><<<grid, kThreads, 0, stream>>>(p, f, path);
}

template <int kSlots, typename F, typename P>
void launch_map_slots(const P& p, F f, cudaStream_t stream, int sm_count) {
  static const int resident = resident_blocks_per_sm(map_slots_kernel<kSlots, F, P>);
  unsigned grid = grid_for(p.numel, 1, int64_t{resident} * sm_count);
  map_slots_kernel<kSlots, F, P><<<grid, kThreads, 0, stream>>>(p, f);
}

}  // namespace anvil::cuda_device
