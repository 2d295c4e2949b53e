#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a): shared-memory tile layouts, matrix descriptors and the
// fences around the asynchronous products (the instructions themselves are in wgmma_ops.cuh);
// the tensor-memory-accelerator (TMA) tile loads and their barriers are in mbarrier.cuh.
//
// Tile layout (both operands, K-major and MN-major alike): a row-major [rows][cols] 16-bit
// tile is cut into column atoms of Sw bytes (Sw = 32, 64 or 128, the swizzle width); atom a
// holds bytes [a Sw, (a + 1) Sw) of every row, rows Sw bytes apart, and inside each group of 8
// rows the 16-byte chunks are permuted (chunk c of row r sits at c ^ (r / (128 / Sw) % (Sw / 16)),
// i.e. address bits [4, 4 + log2(Sw / 16)) ^= bits [7, ...)). Atoms lie one after another.
//   K-major (q, k: the product's reduction runs along the row): 8-row groups are 8 Sw apart;
//     the k16 step s starts 32 s bytes into its atom.
//   MN-major (v as the B operand of p v: the reduction runs down the rows): the k16 step s
//     starts at row 16 s; atoms (Sw / 2 columns each) are rows x Sw bytes apart.
// Every tile base must be 1024-byte aligned (the permutation reads absolute address bits).
#include <cstdint>

#include "cuda/device/mbarrier.cuh"

namespace anvil::cuda_device {

template <int Sw>
struct WgmmaTile {
  static_assert(Sw == 32 || Sw == 64 || Sw == 128);
  static constexpr uint64_t kLayout = Sw == 128 ? 1 : Sw == 64 ? 2 : 3;  // descriptor swizzle mode
  // Byte offset of (row, byte column `col`, a multiple of 16) in a tile of `rows` rows.
  static __device__ __forceinline__ uint32_t offset(int rows, int row, int col) {
    const uint32_t x = static_cast<uint32_t>(row * Sw + col % Sw);
    return static_cast<uint32_t>(col / Sw * rows * Sw) + (x ^ (((x >> 7) & (Sw / 16 - 1)) << 4));
  }
  // Descriptor fields: start address, leading and stride byte offsets (all >> 4), layout type.
  static __device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lead, uint32_t stride) {
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lead & 0x3FFFF) >> 4) << 16 |
           static_cast<uint64_t>((stride & 0x3FFFF) >> 4) << 32 | kLayout << 62;
  }
  // K-major operand: rows [row0, row0 + 64 or N) of a `rows`-row tile at `base`, k16 step 0;
  // step s is k_major(...) + k_step(rows, s) (the start address field cannot carry: shared
  // addresses stay below 2^18).
  static __device__ __forceinline__ uint64_t k_major(uint32_t base, int rows, int row0) {
    return desc(base + static_cast<uint32_t>(row0 * Sw), 16, 8 * Sw);
  }
  static constexpr uint64_t k_step(int rows, int s) { return static_cast<uint64_t>(s * 32 / Sw * rows * Sw + s * 32 % Sw) >> 4; }
  // MN-major operand: rows [0, 16) of a `rows`-row tile at `base`, all its columns; rows
  // [16 s, 16 s + 16) are mn_major(...) + mn_step(s).
  static __device__ __forceinline__ uint64_t mn_major(uint32_t base, int rows) {
    return desc(base, static_cast<uint32_t>(rows * Sw), 8 * Sw);
  }
  static constexpr uint64_t mn_step(int s) { return static_cast<uint64_t>(s * 16 * Sw) >> 4; }
  // Moves a descriptor by `bytes` (a multiple of 16) of shared memory.
  static constexpr uint64_t shift(uint32_t bytes) { return bytes >> 4; }
};

// Orders this thread's register and shared-memory writes before the warpgroup's next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the
// async proxy that wgmma reads through; before the block barrier that publishes the tile.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Keeps the compiler from moving accesses of an accumulator across a wgmma / wait boundary.
__device__ __forceinline__ void reg_fence(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }

}  // namespace anvil::cuda_device
