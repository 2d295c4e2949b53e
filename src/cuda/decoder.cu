// The persistent decoder step on CUDA (compute capability 9.0: the bulk copy engine): one block
// per SM, each working through its list of items (core/kernels/decoder.h) in op order.
//  - A loader warp walks the block's Gemv tiles ahead of the compute warps and streams their
//    weights into a ring of shared-memory slots with cp.async.bulk, a unit (8 rows of up to 4096
//    bytes, one copy a row) in one slot or two, across op boundaries: weights depend on nothing,
//    so the next op's stream is in flight while the compute warps wait for this op's inputs.
//  - Eight compute warps run the items. An op's first item in a block waits until the counter of
//    the op it depends on reaches that op's total (thread 0 spins on an acquire load, then a
//    barrier of the compute warps), then its prologue makes the op's input row in shared memory
//    once per block; each tile is mma.sync m16n8k16 over its units (one mma per 32 columns: the
//    weights as A, x as B) and its 8 outputs are stored. When a block is done with an op's tiles
//    it adds their number to the op's counter (release: barrier, fence, atomic add).
//  - Attention items: (kv head, key split). Each split normalises and rotates its q heads (the
//    split holding the new position also k, and writes k and v into the cache), runs over its
//    keys 32 at a time (scores on 8 threads per key, online softmax per head, p v on a thread per
//    column) and writes (max, sum, output) partials; the split that finishes last for its kv head
//    (a ticket counter) combines them and counts the kv head done.
//  - Routed (MoE) ops: the router is a Gemv whose output is the logits; the loader, at the first
//    item of a routed op, waits for the router's count and routes with one warp (the same
//    function as moe_router's), then streams the chosen experts' tiles; the compute warps route
//    again for the weights of the combine (ExpertsSum), so no block waits for another's routing.
//  - No grid-wide barrier: the ops form a chain of counters, and every op's items depend only on
//    earlier ops, so blocks that run their lists in order always make progress.
//  - The last block to finish zeroes the counters and tickets for the next launch. A wait longer
//    than params.timeout_ns sets status (the waiting op + 1) and the abort flag: every wait then
//    returns at once and the launch runs to its end with garbage instead of hanging.
// Rows are computed with the standalone kernels' row functions (cuda/device/row_ops.cuh) in the
// same order and roundings as the eager step; the products and attention sums run in a different
// order, so results agree to float32 rounding of the sums, not bit for bit.
#include <algorithm>
#include <cmath>

#include "core/dispatch.h"
#include "core/kernels/decoder.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/mbarrier.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/device/moe_route.cuh"
#include "cuda/device/row_ops.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::bulk_copy_g2s;
using cuda_device::from_compute;
using cuda_device::mbar_arrive;
using cuda_device::mbar_arrive_expect_tx;
using cuda_device::mbar_init;
using cuda_device::mbar_init_fence;
using cuda_device::mbar_try_wait;
using cuda_device::mbar_wait;
using cuda_device::Pack;
using cuda_device::smem_u32;
using cuda_device::to_compute;

constexpr int kWarps = 8;                          // compute warps
constexpr int kComputeThreads = kWarps * 32;
constexpr int kThreads = kComputeThreads + 32;     // + the loader warp
// The ring: slots of 8 rows x kSlotRowBytes; a unit (a tile's weights over one run of columns)
// is 8 rows of up to kUnitRowBytes, in one slot (rows of at most kSlotRowBytes) or two adjacent
// ones. Rows are at a pitch of their bytes + 64 (64 mod 128 spreads a quarter warp's two rows
// over the banks). Measured on an H100 (Qwen3-30B-A3B's lm_head, persistent step): 2048-byte
// rows, 8 bulk copies a unit, streamed 13.6 GB/s per SM; 4096-byte rows 24 GB/s.
constexpr int kSlotRowBytes = 2048;
constexpr int kUnitRowBytes = 2 * kSlotRowBytes;
constexpr int kPitch1 = kSlotRowBytes + 64, kPitch2 = kUnitRowBytes + 64;
constexpr int kSlotBytes = kDecoderTileRows * kPitch1;
static_assert(kDecoderTileRows * kPitch2 <= 2 * kSlotBytes);
constexpr int kMaxStages = 12;  // slots
constexpr int kMinStages = 4;
constexpr int kKeys = 32;                          // attention keys per tile
constexpr int kMaxGroup = 16;                      // q heads per kv head
constexpr float kLog2e = 1.4426950408889634f;

constexpr int kItemBatch = 64;  // items the compute warps read from global memory at once
constexpr int kOpWords = static_cast<int>(sizeof(DecoderOp) / 4);
static_assert(sizeof(DecoderOp) % 4 == 0 && kOpWords <= kComputeThreads && kItemBatch <= kComputeThreads);

// The block's static shared memory. The compute warps read their op's record and their items
// from here: global loads after an acquire would each pay an L2 round trip, dependent ones in
// series (the first version lost ~1 us per item to them).
struct Shared {
  uint64_t full[kMaxStages], empty[kMaxStages];
  float partial[2][kDecoderMaxTopK][kWarps][kDecoderTileRows];  // a tile's sums per slot, warp and row
  float red[kWarps];
  float route_w[kDecoderMaxTopK];      // the compute warps' routing weights and experts, of router op route_for
  int32_t route_e[kDecoderMaxTopK];
  int32_t route_ids[kDecoderMaxTopK];  // the loader's experts (of its router op `routed_by`)
  int route_for;
  DecoderOp op;                    // the compute warps' current op
  DecoderItem items[kItemBatch];   // their current batch of items
  int32_t in[3];                   // params.in: token, cache row, cache length
  int flag;
};

// Floats of an attention item's work area: q rows, a tile's scores, (max, sum, rescale) per
// row, and the p v partials of the key groups past the first.
constexpr int64_t attention_floats(int64_t group, int64_t d) {
  return group * d + group * kKeys + 3 * group + (kComputeThreads / d - 1) * group * d;
}
// Bytes of the work area: the largest Gemv input row and its norm weights (copied in while the
// op waits for its inputs), or the attention work, 128-byte rounded.
int64_t work_bytes(const DecoderStepParams& p) {
  const int64_t att = p.head_dim > 0 ? attention_floats(p.max_group, p.head_dim) * 4 : 0;
  return (std::max(p.max_k * 4, att) + 127) / 128 * 128;
}

__device__ __forceinline__ void compute_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kComputeThreads) : "memory"); }

__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ bool aborted(const DecoderStepParams& p) {
  return *reinterpret_cast<const volatile int32_t*>(p.status + 1) != 0;
}

// One thread, for op `waiter`: until op `dep`'s counter reaches `target` (then an acquire fence:
// the producers' writes are visible to this thread), or the launch is aborted (by this wait timing
// out or another's). A poll is one L2 round trip: the abort flag and the clock are read every 32nd.
__device__ void wait_count(const DecoderStepParams& p, int waiter, int dep, uint32_t target) {
  const uint32_t* c = p.counters + dep;
  const uint64_t t0 = now_ns();
  for (uint32_t i = 1; load_relaxed(c) < target; ++i) {
    if (i % 32 != 0) continue;
    if (aborted(p)) return;
    if (now_ns() - t0 > static_cast<uint64_t>(p.timeout_ns)) {
      atomicCAS(p.status, 0, waiter + 1);
      atomicExch(p.status + 1, 1);
      __threadfence();
      return;
    }
  }
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// A stage's phase, or the abort flag (then the stage holds garbage, which the aborted launch
// computes with).
__device__ __forceinline__ bool wait_stage(const DecoderStepParams& p, uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
    if (aborted(p)) return false;
  }
  return true;
}

__device__ __forceinline__ bool runs(const DecoderStepParams& p, int op) { return op >= p.op_begin && op < p.op_end; }

// A Gemv item's tile of 8 weight rows and its slot (an Experts item: slot * tiles + tile).
struct ItemTile {
  int tile, slot;
};
__device__ __forceinline__ ItemTile item_tile(const DecoderOp& op, int item) {
  if (op.routing != DecoderRouting::Experts) return {item, 0};
  const int tiles = static_cast<int>((op.n + kDecoderTileRows - 1) / kDecoderTileRows);
  return {item % tiles, item / tiles};
}

// A warp: the routing of routed op `op` from its router's logits (written in this launch: read
// through L2) into ids and / or weights by slot; then __syncwarp.
template <typename T, int P>
__device__ void route_warp_p(const DecoderOp& op, int32_t* ids, float* weights) {
  const unsigned short* lg = static_cast<const unsigned short*>(op.logits);
  float prob[P];
  int slot[P];
  const float scale = cuda_device::warp_top_k<P>(
      op.experts, op.top_k, [&](int e) { return to_compute(T::from_bits(__ldcg(lg + e))); }, prob, slot);
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int j = 0; j < P; ++j) {
    if (slot[j] < 0) continue;
    if (ids) ids[slot[j]] = lane * P + j;
    if (weights) weights[slot[j]] = op.norm_topk ? prob[j] * scale : prob[j];
  }
  __syncwarp();
}
template <typename T>
__device__ void route_warp(const DecoderOp& op, int32_t* ids, float* weights) {
  if (op.experts <= 128) route_warp_p<T, 4>(op, ids, weights);
  else route_warp_p<T, kDecoderMaxExperts / 32>(op, ids, weights);
}

// A unit of a row of k columns from column c0 (esize bytes each): its columns and its slots.
struct Unit {
  int cols, slots;
};
__device__ __forceinline__ Unit unit_at(int64_t k, int64_t c0, int esize) {
  const int cols = static_cast<int>(std::min<int64_t>(kUnitRowBytes / esize, k - c0));
  return {cols, cols * esize > kSlotRowBytes ? 2 : 1};
}

// The ring as the loader and the compute warps both walk it: a unit takes the next 1 or 2 slots,
// a 2-slot unit that would wrap skips the last slot first (the loader completes that slot's
// phase with a plain arrival, the compute warps wait for it and release it). Each slot's full and
// empty barriers advance one phase per taking or skip.
struct RingWalk {
  int h = 0;
  uint32_t parity = 0;  // bit j: the parity of slot j's next phase
  uint32_t used = 0;    // bit j: slot j has been taken or skipped before
  __device__ __forceinline__ uint32_t phase(int j) const { return (parity >> j) & 1; }
  __device__ __forceinline__ void advance(int j) { parity ^= 1u << j, used |= 1u << j; }
  // The unit's first slot; skip(j) first for a slot passed over at the ring's end.
  template <typename Skip>
  __device__ __forceinline__ int take(int slots, int stages, Skip skip) {
    if (h + slots > stages) {
      for (int j = h; j < stages; ++j) skip(j);
      h = 0;
    }
    const int first = h;
    h += slots;
    if (h == stages) h = 0;
    return first;
  }
};

// ---- the loader: one lane streams the block's Gemv tiles into the ring, unit by unit along the
// RingWalk, as the compute warps consume them in the same order. (Asking L2 for the
// units past the ring as well was measured slower: H100, Qwen3-0.6B, 12 units ahead 646 tok/s,
// 24 ahead 633, none 791; the prefetches compete with the ring's own reads for DRAM and L2.)

// The loader warp reads 32 items (and their ops' weight fields) at once, a lane each, so the
// item list costs one pair of dependent loads per 32 items; lane 0 issues the copies. A routed
// op's weights wait for its router: at its router's first routed item the warp waits for the
// router's count and routes (the experts are the same for every routed op of one router).
// Returns early on an abort; walk: lane 0's place in the ring (the slots it has armed).
template <typename T>
__device__ void issue_tiles(const DecoderStepParams& p, Shared& sh, unsigned char* ring, int stages, int begin, int end,
                            RingWalk& walk) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int routed_by = -1;  // the router op whose experts sh.route_ids holds
  for (int base = begin; base < end; base += 32) {
    const char* w = nullptr;  // this lane's item: a Gemv tile's first row (expert 0's when routed), its k and rows (0: no tile)
    int64_t k = 0, expert_bytes = 0;
    int rows = 0, op_i = 0, slot = 0, slots = 1, esize = static_cast<int>(sizeof(T));
    DecoderRouting routing = DecoderRouting::None;
    if (base + lane < end) {
      const DecoderItem it = p.items[base + lane];
      if (runs(p, it.op)) {
        const DecoderOp* op = p.ops + it.op;
        if (op->kind == DecoderOpKind::Gemv) {
          routing = op->routing;
          const ItemTile at = item_tile(*op, it.index);
          const int64_t row0 = static_cast<int64_t>(at.tile) * kDecoderTileRows;
          k = op->k;
          rows = static_cast<int>(std::min<int64_t>(kDecoderTileRows, op->n - row0));
          if (op->scaling != DecoderScale::None) esize = 1;
          w = static_cast<const char*>(op->w) + row0 * k * esize;
          op_i = it.op;
          if (routing != DecoderRouting::None) {
            expert_bytes = op->n * k * esize;
            slot = at.slot;
            slots = routing == DecoderRouting::ExpertsSum ? op->top_k : 1;
          }
        }
      }
    }
    const int n = std::min(32, end - base);
    for (int j = 0; j < n; ++j) {
      const int rj = __shfl_sync(0xffffffffu, rows, j);
      if (rj == 0) continue;
      const int64_t kj = __shfl_sync(0xffffffffu, k, j);
      const char* wj = reinterpret_cast<const char*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(w), j));
      const auto routing_j = static_cast<DecoderRouting>(__shfl_sync(0xffffffffu, static_cast<int>(routing), j));
      const int64_t expert_bytes_j = __shfl_sync(0xffffffffu, expert_bytes, j);
      const int slot_j = __shfl_sync(0xffffffffu, slot, j), slots_j = __shfl_sync(0xffffffffu, slots, j);
      const int esize_j = __shfl_sync(0xffffffffu, esize, j);
      if (routing_j != DecoderRouting::None) {
        const int oj = __shfl_sync(0xffffffffu, op_i, j);
        const DecoderOp& op = p.ops[oj];
        if (op.route_op != routed_by) {
          // (else an earlier launch ran the router). A timeout names the op after the router.
          // With the __syncwarp, lane 0's acquire orders the other lanes' logit reads after the count.
          if (lane == 0 && op.route_op >= p.op_begin) wait_count(p, op.route_op + 1, op.route_op, op.route_count);
          __syncwarp();
          if (__shfl_sync(0xffffffffu, aborted(p) ? 1 : 0, 0)) return;
          route_warp<T>(op, sh.route_ids, nullptr);
          routed_by = op.route_op;
        }
      }
      for (int si = 0; si < slots_j; ++si) {
        const int64_t expert = routing_j == DecoderRouting::None ? 0 : sh.route_ids[routing_j == DecoderRouting::Experts ? slot_j : si];
        const char* ws = wj + expert * expert_bytes_j;
        for (int64_t c0 = 0; c0 < kj; c0 += kUnitRowBytes / esize_j) {
          const Unit un = unit_at(kj, c0, esize_j);
          // Lane 0: a slot is taken again once its last phase is released and its copies have
          // landed (the compute warps waited for them, unless an abort let them go on).
          int ok = 1, first = 0;
          if (lane == 0) {
            auto free = [&](int slot) {
              if (ok && ((walk.used >> slot) & 1)) {
                ok = wait_stage(p, smem_u32(&sh.empty[slot]), walk.phase(slot) ^ 1);
                mbar_wait(smem_u32(&sh.full[slot]), walk.phase(slot) ^ 1);
              }
            };
            first = walk.take(un.slots, stages, [&](int slot) {
              free(slot);
              if (!ok) return;  // aborted: the slot's phase stays (the drain waits for armed phases only)
              mbar_arrive(smem_u32(&sh.full[slot]));
              walk.advance(slot);
            });
            for (int q = 0; q < un.slots; ++q) free(first + q);
          }
          if (!__shfl_sync(0xffffffffu, ok, 0)) return;
          if (lane == 0) {
            const uint32_t bytes = static_cast<uint32_t>(un.cols * esize_j);
            const int pitch = un.slots == 2 ? kPitch2 : kPitch1;
            mbar_arrive_expect_tx(smem_u32(&sh.full[first]), bytes * rj);
            for (int r = 0; r < rj; ++r)
              bulk_copy_g2s(smem_u32(ring + first * kSlotBytes + r * pitch), ws + (r * kj + c0) * esize_j, bytes,
                            smem_u32(&sh.full[first]));
            if (un.slots == 2) mbar_arrive(smem_u32(&sh.full[first + 1]));
            for (int q = 0; q < un.slots; ++q) walk.advance(first + q);
          }
        }
      }
    }
  }
}

// The loader; before it leaves, every copy it issued has landed (after an abort the compute warps
// stop waiting for them, and a block must not exit with bulk copies into its shared memory).
template <typename T>
__device__ void load_tiles(const DecoderStepParams& p, Shared& sh, unsigned char* ring, int stages, int begin, int end) {
  RingWalk walk;
  issue_tiles<T>(p, sh, ring, stages, begin, end, walk);
  if (threadIdx.x % 32 == 0)
    for (int j = 0; j < stages; ++j)
      if ((walk.used >> j) & 1) mbar_wait(smem_u32(&sh.full[j]), walk.phase(j) ^ 1);
}

// ---- Gemv

// The op's input row into xs (k elements), by the compute warps. first: this block holds tile 0
// (it writes the AddNorm sum); norm: the norm weights' copy in shared memory.
template <typename T>
__device__ void prologue(const DecoderStepParams& p, const DecoderOp& op, bool first, T* xs, const T* norm, Shared& sh) {
  using P = Pack<T, 8>;
  const int tid = static_cast<int>(threadIdx.x);
  const int packs = static_cast<int>(op.k / 8);
  const T* a = static_cast<const T*>(op.a);
  switch (op.prologue) {
    case DecoderPrologue::AddNorm: {
      const T* b = static_cast<const T*>(op.b) + (op.gather ? static_cast<int64_t>(sh.in[0]) * op.k : 0);
      cuda_device::add_rms_norm_row<T>(a, b, op.norm_w ? norm : nullptr, first ? static_cast<T*>(op.sum_out) : nullptr,
                                       xs, op.k, op.eps, tid, kComputeThreads, sh.red, [] { compute_sync(); });
      return;
    }
    case DecoderPrologue::SiluMul: {  // a row per slot of an ExpertsSum
      const int rows = op.routing == DecoderRouting::ExpertsSum ? op.top_k : 1;
      for (int q = tid; q < rows * packs; q += kComputeThreads) {
        const int r = q / packs, c = q % packs;
        const P gv = reinterpret_cast<const P*>(a + 2 * r * op.k)[c], uv = reinterpret_cast<const P*>(a + (2 * r + 1) * op.k)[c];
        P y;
#pragma unroll
        for (int e = 0; e < 8; ++e) y.v[e] = from_compute<T>(cuda_device::silu_mul_one(to_compute(gv.v[e]), to_compute(uv.v[e])));
        reinterpret_cast<P*>(xs)[q] = y;
      }
      break;
    }
    case DecoderPrologue::Copy:
      for (int q = tid; q < packs; q += kComputeThreads) reinterpret_cast<P*>(xs)[q] = reinterpret_cast<const P*>(a)[q];
      break;
  }
  compute_sync();
}

// One 32-column chunk of a tile's 8 weight rows against x as one mma.sync m16n8k16 (fragments
// as mma.cuh lays them out): lane (g, t) holds elements 8 t .. 8 t + 7 of weight row g, the first
// four as A row g (a0, a2) and the last four as A row g + 8 (a1, a3); x is B, its column 0 elements
// 8 t .. 8 t + 3 (from the lanes of even g), column 1 elements 8 t + 4 .. 8 t + 7 (odd g), the
// other columns copies of those. D[g][0] + D[g + 8][1], d[0] + d[3] of lane (g, 0), is row g's
// dot over the chunk: every A and B element is a weight or x value (no zero operands).
template <typename T>
__device__ __forceinline__ void mma_chunk32(float (&d)[4], uint2 x, uint4 w) {
  cuda_device::mma_m16n8k16<T>(d, w.x, w.z, w.y, w.w, x.x, x.y);
}

// A unit's chunks: warp w takes chunks w, w + kWarps, ...; lane (g, t) reads weight elements
// from column kk = chunk * 32 + 8 t and x from kk + xo (xo = 4 (g & 1)).

// A column's block of scales: col >> shift when the block width is a power of two (shift >= 0),
// else col / bk; 32-bit (a 64-bit division is a ~70-instruction call, and this runs per chunk).
struct BlockCols {
  int shift;
  uint32_t bk;
  __device__ __forceinline__ uint32_t of(uint32_t col) const { return shift >= 0 ? col >> shift : col / bk; }
};
__device__ __forceinline__ BlockCols block_cols(int64_t bk) {
  const auto b = static_cast<uint32_t>(bk);
  return {b != 0 && (b & (b - 1)) == 0 ? __ffs(static_cast<int>(b)) - 1 : -1, b};
}
// The block scales of this warp's chunks i0 .. i0 + kN - 1 of the unit at column c0 (bk % 32 ==
// 0: one block per chunk); chunks past cols read the last column's scale (their products are
// zeros), so there is no branch per chunk.
template <int kN>
__device__ __forceinline__ void load_chunk_scales(float (&sc)[kN], const float* block, uint32_t c0, int cols, int warp,
                                                  BlockCols bc, int i0) {
  auto col = [&](int i) { return c0 + static_cast<uint32_t>(std::min((warp + kWarps * (i0 + i)) * 32, cols - 1)); };
  if (bc.shift >= 0) {
#pragma unroll
    for (int i = 0; i < kN; ++i) sc[i] = __ldg(block + (col(i) >> bc.shift));
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) sc[i] = __ldg(block + col(i) / bc.bk);
  }
}

// One unit of a tile: its 8 weight rows (row: the lane's, g; 16-bit, or float8 e4m3fn decoded in
// registers) against x over `cols` columns, kN chunks a warp, accumulated into acc (lane (g, 0):
// acc[0] + acc[3] is row g's dot). Full: cols is the whole unit (kN * 256); else zeros past cols
// (stale slot bytes may be NaN). Block: each chunk's product times its scale (the tile's row of
// block scales from column c0; row scales: applied after the sum).
template <typename T, int kN, bool kF8, bool kFull, bool kBlock>
__device__ __forceinline__ void stage_dot(float (&acc)[4], const T* x, const unsigned char* row, int cols, int warp,
                                          int t, int xo, const float* block, uint32_t c0, BlockCols bc) {
  constexpr int kG = kN < 8 ? kN : 8;  // chunks per group of scales loaded at once (registers)
  float sc[kBlock ? kG : 1];
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if constexpr (kBlock) {
      if (i % kG == 0) load_chunk_scales<kG>(sc, block, c0, cols, warp, bc, i);
    }
    const int kk = (warp + kWarps * i) * 32 + t * 8;
    uint2 xv = make_uint2(0, 0);
    uint4 wv = make_uint4(0, 0, 0, 0);
    if (kFull || kk < cols) {
      xv = *reinterpret_cast<const uint2*>(x + kk + xo);
      if constexpr (kF8) wv = cuda_device::e4m3x8_to<T>(*reinterpret_cast<const uint2*>(row + kk));
      else wv = *reinterpret_cast<const uint4*>(row + kk * 2);
    }
    if constexpr (kBlock) {
      float d[4] = {};
      mma_chunk32<T>(d, xv, wv);
      acc[0] = fmaf(sc[i % kG], d[0], acc[0]);
      acc[3] = fmaf(sc[i % kG], d[3], acc[3]);
    } else {
      mma_chunk32<T>(acc, xv, wv);
    }
  }
}
// The same for a unit of either size (wide: 2 slots, 2 kN chunks) and either fullness.
template <typename T, int kN, bool kF8, bool kBlock>
__device__ __forceinline__ void unit_dot(bool wide, float (&acc)[4], const T* x, const unsigned char* row, int cols, int warp,
                                         int t, int xo, const float* block, uint32_t c0, BlockCols bc) {
  if (wide) {
    if (cols == 2 * kN * 256) stage_dot<T, 2 * kN, kF8, true, kBlock>(acc, x, row, cols, warp, t, xo, block, c0, bc);
    else stage_dot<T, 2 * kN, kF8, false, kBlock>(acc, x, row, cols, warp, t, xo, block, c0, bc);
  } else {
    if (cols == kN * 256) stage_dot<T, kN, kF8, true, kBlock>(acc, x, row, cols, warp, t, xo, block, c0, bc);
    else stage_dot<T, kN, kF8, false, kBlock>(acc, x, row, cols, warp, t, xo, block, c0, bc);
  }
}

// One item: 8 weight rows against xs over the tile's stages (per slot of an ExpertsSum, against
// its row of xs); walk: the compute warps' place in the ring. waited: ns thread 0 spent waiting
// for units (profiling).
template <typename T>
__device__ void gemv_tile(const DecoderStepParams& p, const DecoderOp& op, int item, const T* xs, const unsigned char* ring,
                          int stages, RingWalk& walk, int& par, Shared& sh, uint64_t& waited) {
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4, xo = 4 * (g & 1);
  const ItemTile at = item_tile(op, item);
  const int tile = at.tile;
  const int slots = op.routing == DecoderRouting::ExpertsSum ? op.top_k : 1;
  const bool f8 = op.scaling != DecoderScale::None, blocks = op.scaling == DecoderScale::Block;
  const int esize = f8 ? 1 : static_cast<int>(sizeof(T));
  const BlockCols bc = block_cols(op.scale_bk);
  // The expert of slot si (0 when not routed), for the scales.
  auto expert = [&](int si) -> int64_t {
    if (op.routing == DecoderRouting::None) return 0;
    return sh.route_e[op.routing == DecoderRouting::Experts ? at.slot : si];
  };
  for (int si = 0; si < slots; ++si) {
    const T* x = xs + si * op.k;
    const float* block = nullptr;
    if (blocks) {
      const auto row_block = static_cast<uint32_t>(tile * kDecoderTileRows) / static_cast<uint32_t>(op.scale_bn);
      block = op.w_scale + expert(si) * op.scale_expert + static_cast<int64_t>(row_block) * (bc.of(static_cast<uint32_t>(op.k) - 1) + 1);
    }
    float acc[4] = {};
    for (int64_t c0 = 0; c0 < op.k; c0 += kUnitRowBytes / esize) {
      const Unit un = unit_at(op.k, c0, esize);
      const int first = walk.take(un.slots, stages, [&](int slot) {  // a skipped slot: released once filled
        wait_stage(p, smem_u32(&sh.full[slot]), walk.phase(slot));
        __syncwarp();
        if (lane == 0) mbar_arrive(smem_u32(&sh.empty[slot]));
        walk.advance(slot);
      });
      const uint64_t t0 = p.trace && tid == 0 ? now_ns() : 0;
      wait_stage(p, smem_u32(&sh.full[first]), walk.phase(first));
      if (p.trace && tid == 0) waited += now_ns() - t0;
      __syncwarp();  // mma.sync needs the whole warp
      const bool wide = un.slots == 2;
      const unsigned char* row = ring + first * kSlotBytes + g * (wide ? kPitch2 : kPitch1);
      const T* xc = x + c0;
      const auto c = static_cast<uint32_t>(c0);
      if (!f8) unit_dot<T, 4, false, false>(wide, acc, xc, row, un.cols, warp, t, xo, block, c, bc);
      else if (blocks) unit_dot<T, 8, true, true>(wide, acc, xc, row, un.cols, warp, t, xo, block, c, bc);
      else unit_dot<T, 8, true, false>(wide, acc, xc, row, un.cols, warp, t, xo, block, c, bc);
      __syncwarp();
      for (int q = 0; q < un.slots; ++q) {
        if (lane == 0) mbar_arrive(smem_u32(&sh.empty[first + q]));
        walk.advance(first + q);
      }
    }
    // Lane (g, 0) holds row g's sum over this warp's chunks: summed over the warps below.
    if (t == 0) sh.partial[par][si][warp][g] = acc[0] + acc[3];
  }
  compute_sync();
  if (tid < 8) {
    const int64_t j = static_cast<int64_t>(tile) * kDecoderTileRows + tid;
    if (j < op.n) {
      auto product = [&](int si) {
        float v = 0.f;
        for (int w = 0; w < kWarps; ++w) v += sh.partial[par][si][w][tid];
        if (op.scaling == DecoderScale::Row) v *= __ldg(op.w_scale + expert(si) * op.scale_expert + j);
        return from_compute<T>(v);
      };
      T r;
      if (op.routing == DecoderRouting::ExpertsSum) {
        float sum = 0.f;
        for (int si = 0; si < slots; ++si) sum += sh.route_w[si] * to_compute(product(si));
        r = from_compute<T>(sum);
      } else {
        r = product(0);
      }
      void* y = op.y ? op.y : p.out;
      const int64_t o = j + static_cast<int64_t>(at.slot) * op.n;  // Experts: slot's row of y
      if (op.out_f32) static_cast<float*>(y)[o] = to_compute(r);
      else static_cast<T*>(y)[o] = r;
    }
  }
  par ^= 1;  // the next tile writes the other half, so no second barrier is needed
}

// N (2, 4, 8 or 16) 16-bit elements at p (aligned to their size) through L2 only, as raw words:
// the loads of the next key tile are issued before this tile's math and converted only when used.
template <int N>
__device__ __forceinline__ void load_raw(const void* p, uint32_t (&w)[N / 2]) {
  if constexpr (N >= 8) {
#pragma unroll
    for (int q = 0; q < N / 8; ++q) {
      const uint4 v = __ldcg(static_cast<const uint4*>(p) + q);
      w[4 * q] = v.x, w[4 * q + 1] = v.y, w[4 * q + 2] = v.z, w[4 * q + 3] = v.w;
    }
  } else if constexpr (N == 4) {
    const uint2 v = __ldcg(static_cast<const uint2*>(p));
    w[0] = v.x, w[1] = v.y;
  } else {
    static_assert(N == 2);
    w[0] = __ldcg(static_cast<const unsigned*>(p));
  }
}
template <typename T, int N>
__device__ __forceinline__ void raw_to_float(const uint32_t (&w)[N / 2], float (&out)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) out[e] = to_compute(T::from_bits(static_cast<unsigned short>(w[e / 2] >> (16 * (e % 2)))));
}

// Keys [k0, k1) of split s of a kv head at cache length len: splits of at least kMinChunk keys
// (a multiple of kKeys), as many as the schedule's S allow; `active` splits hold keys, the others
// have nothing to do.
constexpr int64_t kMinChunk = 64;
struct KeySplit {
  int64_t k0, k1;
  int active;
};
__device__ __forceinline__ KeySplit key_split(int64_t len, int S, int s) {
  const int64_t per = ((len + S - 1) / S + kKeys - 1) / kKeys * kKeys;
  const int64_t chunk = per > kMinChunk ? per : kMinChunk;
  const int64_t k0 = std::min<int64_t>(len, s * chunk);
  return {k0, std::min<int64_t>(len, k0 + chunk), static_cast<int>((len + chunk - 1) / chunk)};
}

// ---- attention: item = kv head * splits + split.

template <typename T, int D>
__device__ void attention_item(const DecoderStepParams& p, const DecoderOp& op, int op_index, int item, float* work,
                               Shared& sh) {
  constexpr int kGroups = kComputeThreads / D;  // key groups of p v
  constexpr int kSub = kComputeThreads / kKeys;  // threads per key for the scores
  constexpr int kDims = D / kSub;                // their dims each
  constexpr int kVals = kKeys / kGroups;         // v values per thread and tile
  constexpr int kPairs = D >= 64 ? D / 64 : 1;   // QkRope: rotated pairs per lane (full rotary)
  static_assert(kDims >= 2 && kKeys == 32);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int S = op.splits, g = item / S, s = item % S;
  const int group = op.n_heads / op.n_kv;
  const int64_t pos = sh.in[1], len = sh.in[2];
  const KeySplit ks = key_split(len, S, s);
  const int64_t k0 = ks.k0, k1 = ks.k1;
  const int active = ks.active;
  if (s >= active) return;  // no keys: the active splits alone make the output
  float* qf = work;                    // [group][D]
  float* sc = qf + group * D;          // [group][kKeys]
  float* ms = sc + group * kKeys;      // [group]
  float* ls = ms + group;
  float* al = ls + group;
  float* red = al + group;             // [kGroups - 1][group][D]
  const T* qkv = static_cast<const T*>(op.qkv);
  T* kc = static_cast<T*>(op.k_cache) + static_cast<int64_t>(g) * op.cache_rows * D;
  T* vc = static_cast<T*>(op.v_cache) + static_cast<int64_t>(g) * op.cache_rows * D;
  const bool writes = pos >= k0 && pos < k1 && pos < op.cache_rows;

  // Heads, a warp each: q rows 0 .. group - 1 into qf (rounded to T as qk_norm_rope_cache's
  // output), then, in the split holding pos, k (normed and rotated) and v into the cache row.
  for (int r = warp; r < group + (writes ? 2 : 0); r += kWarps) {
    if (r == group + 1) {
      const T* x = qkv + static_cast<int64_t>(op.n_heads + op.n_kv + g) * D;
      for (int c = lane; c < D; c += 32) vc[pos * D + c] = x[c];
      continue;
    }
    const bool is_q = r < group;
    const T* x = qkv + static_cast<int64_t>(is_q ? g * group + r : op.n_heads + g) * D;
    const T* nw = static_cast<const T*>(is_q ? op.q_norm : op.k_norm);
    cuda_device::QkRope<float, kPairs, 1> rope;
    rope.load(nw, op.inv_freq, D, D, lane);
    if (is_q)
      rope.apply(x, nw != nullptr, op.eps, pos, lane, [&](int64_t c, float v) { qf[r * D + c] = to_compute(from_compute<T>(v)); });
    else
      rope.apply(x, nw != nullptr, op.eps, pos, lane, [&](int64_t c, float v) { kc[pos * D + c] = from_compute<T>(v); });
  }
  if (tid < group) {
    ms[tid] = -INFINITY;
    ls[tid] = 0.f;
  }
  compute_sync();

  const float scale_log2 = op.scale * kLog2e;
  const int j = tid / kSub, sub = tid % kSub;  // scores: key j of the tile, dims sub * kDims ..
  const int d = tid % D, kg = tid / D;         // p v: column d over keys kg, kg + kGroups, ..
  float acc[kMaxGroup] = {};
  // This thread's loads of a tile: its K slice (key kt + j) and its V column (keys kt + kg + q
  // kGroups), raw; the next tile's are in flight during this one's math.
  uint32_t kraw[kDims / 2];
  uint32_t vraw[kVals / 2];  // two raw values a register
  auto load_tile = [&](int64_t kt) {
    load_raw<kDims>(kc + std::min(kt + j, k1 - 1) * D + sub * kDims, kraw);
#pragma unroll
    for (int q = 0; q < kVals; ++q) {
      const int64_t kk = std::min(kt + kg + q * kGroups, k1 - 1);
      const uint32_t v = __ldcg(reinterpret_cast<const unsigned short*>(vc + kk * D + d));
      vraw[q / 2] = q % 2 == 0 ? v : vraw[q / 2] | (v << 16);
    }
  };
  if (k0 < k1) load_tile(k0);
  for (int64_t kt = k0; kt < k1; kt += kKeys) {
    const int64_t key = kt + j;
    float kf[kDims];
    raw_to_float<T, kDims>(kraw, kf);
    uint32_t vcur[kVals / 2];  // this tile's values, raw (converted where used: fewer registers)
#pragma unroll
    for (int q = 0; q < kVals / 2; ++q) vcur[q] = vraw[q];
    if (kt + kKeys < k1) load_tile(kt + kKeys);
#pragma unroll
    for (int r = 0; r < kMaxGroup; ++r) {
      if (r >= group) break;
      const float* qr = qf + r * D + sub * kDims;
      float dot = 0.f;
      if constexpr (kDims % 4 == 0) {
#pragma unroll
        for (int e = 0; e < kDims; e += 4) {
          const float4 qv = *reinterpret_cast<const float4*>(qr + e);
          dot += qv.x * kf[e] + qv.y * kf[e + 1] + qv.z * kf[e + 2] + qv.w * kf[e + 3];
        }
      } else {
#pragma unroll
        for (int e = 0; e < kDims; ++e) dot += qr[e] * kf[e];
      }
#pragma unroll
      for (int o = kSub / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (sub == 0) sc[r * kKeys + j] = key < k1 ? dot * scale_log2 : -INFINITY;
    }
    compute_sync();
    for (int r = warp; r < group; r += kWarps) {  // online softmax: a warp per row, a lane per key
      const float v = sc[r * kKeys + lane];
      float mx = v;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = ms[r], m_new = fmaxf(m_old, mx), m_use = m_new == -INFINITY ? 0.f : m_new;
      const float e = exp2f(v - m_use);
      sc[r * kKeys + lane] = e;
      float sum = e;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();  // every lane has read ms[r] before lane 0 rewrites it (racecheck's warnings)
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_use);
        al[r] = alpha;
        ls[r] = ls[r] * alpha + sum;
        ms[r] = m_new;
      }
    }
    compute_sync();
#pragma unroll
    for (int r = 0; r < kMaxGroup; ++r) {
      if (r >= group) break;
      float a = acc[r] * al[r];
#pragma unroll
      for (int q = 0; q < kVals; ++q) {
        if (kt + kg + q * kGroups < k1)
          a += sc[r * kKeys + kg + q * kGroups] * to_compute(T::from_bits(static_cast<unsigned short>(vcur[q / 2] >> (16 * (q % 2)))));
      }
      acc[r] = a;
    }
    compute_sync();  // the next tile rewrites sc
  }

  // This split's partials: key group 0 adds the others' outputs.
  if (kg > 0) {
#pragma unroll
    for (int r = 0; r < kMaxGroup; ++r) {
      if (r >= group) break;
      red[((kg - 1) * group + r) * D + d] = acc[r];
    }
  }
  compute_sync();
  T* out = static_cast<T*>(op.out) + static_cast<int64_t>(g) * group * D;
  auto done = [&] {  // the kv head's output is written: count it
    compute_sync();
    if (tid == 0) {
      __threadfence();
      atomicAdd(p.counters + op_index, 1u);
    }
  };
  // The key groups' outputs summed: the output itself when one split is active, else a partial.
  const int64_t stride = D + 2;  // partial row: output [D], max, sum
  float* part = op.part + (static_cast<int64_t>(g) * group * S) * stride;
  if (kg == 0) {
#pragma unroll
    for (int r = 0; r < kMaxGroup; ++r) {
      if (r >= group) break;
      float o = acc[r];
      for (int x = 1; x < kGroups; ++x) o += red[((x - 1) * group + r) * D + d];
      if (active == 1) out[r * D + d] = from_compute<T>(ls[r] == 0.f ? 0.f : o / ls[r]);
      else part[(r * S + s) * stride + d] = o;
    }
  }
  if (active == 1) {
    done();
    return;
  }
  if (tid < group) {
    part[(tid * S + s) * stride + D] = ms[tid];
    part[(tid * S + s) * stride + D + 1] = ls[tid];
  }
  compute_sync();
  if (tid == 0) {
    __threadfence();
    sh.flag = atomicAdd(op.tickets + g, 1u) == static_cast<uint32_t>(active - 1);
    __threadfence();
  }
  compute_sync();
  if (!sh.flag) return;
  // The last split of kv head g: out = sum_s w_s o_s / sum_s w_s l_s, w_s = 2^(m_s - max). The
  // (max, sum) pairs first, all loads at once; then a warp per row; then the outputs.
  float* wm = work;                // [group][active]: m, then w
  float* wl = wm + group * active;  // [group][active]: l
  float* tot = wl + group * active;  // [group]
  for (int idx = tid; idx < group * active; idx += kComputeThreads) {
    const int r = idx / active, x = idx % active;
    wm[idx] = __ldcg(part + (r * S + x) * stride + D);
    wl[idx] = __ldcg(part + (r * S + x) * stride + D + 1);
  }
  compute_sync();
  for (int r = warp; r < group; r += kWarps) {
    float mx = -INFINITY;
    for (int x = lane; x < active; x += 32) mx = fmaxf(mx, wm[r * active + x]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float l = 0.f;
    for (int x = lane; x < active; x += 32) {
      const float m = wm[r * active + x], w = m == -INFINITY ? 0.f : exp2f(m - mx);
      wm[r * active + x] = w;
      l += w * wl[r * active + x];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) tot[r] = l;
  }
  compute_sync();
  for (int idx = tid; idx < group * D; idx += kComputeThreads) {
    const int r = idx / D, dd = idx % D;
    const float* row = part + static_cast<int64_t>(r) * S * stride + dd;
    float o = 0.f;
#pragma unroll 8
    for (int x = 0; x < active; ++x) o += wm[r * active + x] * __ldcg(row + x * stride);
    out[r * D + dd] = from_compute<T>(tot[r] == 0.f ? 0.f : o / tot[r]);
  }
  done();
}

// Before an attention op's inputs are ready: L2 is asked for the keys and values of this block's
// items of it in the current batch (the rows before the new position were written by earlier
// launches).
template <int D>
__device__ void prefetch_keys(const Shared& sh, const DecoderOp& op, int op_index, int j, int n) {
  const int64_t len = sh.in[2];
  for (; j < n && sh.items[j].op == op_index; ++j) {
    const int S = op.splits, g = sh.items[j].index / S;
    const KeySplit ks = key_split(len, S, sh.items[j].index % S);
    if (ks.k1 <= ks.k0) continue;
    const int64_t off = (static_cast<int64_t>(g) * op.cache_rows + ks.k0) * D * 2;
    const uint32_t bytes = static_cast<uint32_t>((ks.k1 - ks.k0) * D * 2);
    cuda_device::prefetch_l2(static_cast<const char*>(op.k_cache) + off, bytes);
    cuda_device::prefetch_l2(static_cast<const char*>(op.v_cache) + off, bytes);
  }
}

// ---- the kernel

template <typename T, int D>
__device__ void compute_items(const DecoderStepParams& p, Shared& sh, const unsigned char* ring, unsigned char* work,
                              int stages, int begin, int end) {
  const int tid = static_cast<int>(threadIdx.x);
  RingWalk walk;  // each compute thread's copy
  uint32_t done = 0;
  int par = 0, cur = -1;
  uint64_t waited = 0;  // profiling: this op's stage waits
  auto stamp = [&](int op, int which) {
    if (p.trace && tid == 0) p.trace[(static_cast<int64_t>(blockIdx.x) * p.n_ops + op) * kTraceSlots + which] = now_ns();
  };
  auto finish = [&] {  // this block's items of op `cur` are done: count its tiles
    if (cur < 0) return;
    if (done > 0) {
      compute_sync();
      if (tid == 0) {
        __threadfence();
        atomicAdd(p.counters + cur, done);
      }
      done = 0;
    }
    stamp(cur, 3);
    if (p.trace && tid == 0) p.trace[(static_cast<int64_t>(blockIdx.x) * p.n_ops + cur) * kTraceSlots + 4] = waited;
    waited = 0;
  };
  // Items in batches, the next batch's loads in flight during this one; the op record of the
  // op after the current one likewise (ops follow one another in every block's list).
  const uint32_t* op_words = reinterpret_cast<const uint32_t*>(p.ops);
  uint32_t pre_word = 0;
  int pre_op = -1;
  DecoderItem pre_item{};
  if (tid < kItemBatch && begin + tid < end) pre_item = p.items[begin + tid];
  for (int base = begin; base < end; base += kItemBatch) {
    compute_sync();  // the batch before is read
    if (tid < kItemBatch) {
      sh.items[tid] = pre_item;
      if (base + kItemBatch + tid < end) pre_item = p.items[base + kItemBatch + tid];
    }
    compute_sync();
    const int n = (end - base < kItemBatch ? end - base : kItemBatch);
    for (int j = 0; j < n; ++j) {
      const DecoderItem it = sh.items[j];
      if (!runs(p, it.op)) continue;
      if (it.op != cur) {
        finish();
        compute_sync();  // nobody reads the op record any more
        cur = it.op;
        if (tid < kOpWords) {
          reinterpret_cast<uint32_t*>(&sh.op)[tid] = pre_op == cur ? pre_word : op_words[cur * kOpWords + tid];
          pre_op = cur + 1;
          if (pre_op < p.n_ops) pre_word = op_words[pre_op * kOpWords + tid];
        }
        compute_sync();
        const DecoderOp& op = sh.op;
        stamp(cur, 0);
        if (op.kind == DecoderOpKind::Attention && tid == 0) prefetch_keys<D>(sh, op, it.op, j, n);
        T* norm = reinterpret_cast<T*>(work) + p.max_k;  // the norm weights do not wait for the inputs
        if (op.kind == DecoderOpKind::Gemv && op.prologue == DecoderPrologue::AddNorm && op.norm_w) {
          using P = Pack<T, 8>;
          for (int q = tid; q < op.k / 8; q += kComputeThreads)
            reinterpret_cast<P*>(norm)[q] = reinterpret_cast<const P*>(op.norm_w)[q];
        }
        if (op.dep >= p.op_begin && tid == 0) {  // earlier launches ran the ops before op_begin
          wait_count(p, it.op, op.dep, op.dep_count);  // its acquire + the barrier below order every thread
        }
        stamp(cur, 1);
        compute_sync();
        // The routing's weights (the sum) and experts (their scales) where the op needs them.
        const bool route = op.routing == DecoderRouting::ExpertsSum ||
                           (op.routing == DecoderRouting::Experts && op.scaling != DecoderScale::None);
        if (route && sh.route_for != op.route_op) {  // every thread decides before anyone writes route_for
          if (tid < 32) route_warp<T>(op, sh.route_e, sh.route_w);
          compute_sync();
          if (tid == 0) sh.route_for = op.route_op;  // read again only after the op's next barrier
        }
        if (op.kind == DecoderOpKind::Gemv) prologue<T>(p, op, it.index == 0, reinterpret_cast<T*>(work), norm, sh);
        stamp(cur, 2);
      }
      const DecoderOp& op = sh.op;
      if (op.kind == DecoderOpKind::Gemv) {
        gemv_tile<T>(p, op, it.index, reinterpret_cast<const T*>(work), ring, stages, walk, par, sh, waited);
        ++done;
      } else {
        attention_item<T, D>(p, op, it.op, it.index, reinterpret_cast<float*>(work), sh);
      }
    }
  }
  finish();
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) decoder_step_kernel(const __grid_constant__ DecoderStepParams p, int stages,
                                                                   int64_t ring_bytes) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ Shared sh;
  unsigned char* ring = smem;
  unsigned char* work = smem + ring_bytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(smem_u32(&sh.full[s]), 1);
      mbar_init(smem_u32(&sh.empty[s]), kWarps);
    }
    mbar_init_fence();
  }
  if (threadIdx.x < 3) sh.in[threadIdx.x] = p.in[threadIdx.x];
  if (threadIdx.x == 0) sh.route_for = -1;
  __syncthreads();
  const int begin = p.block_begin[blockIdx.x], end = p.block_begin[blockIdx.x + 1];
  if (threadIdx.x >= kComputeThreads) {
    load_tiles<T>(p, sh, ring, stages, begin, end);
  } else {
    compute_items<T, D>(p, sh, ring, work, stages, begin, end);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the last block out resets the counters and tickets for the next launch
    __threadfence();
    if (atomicAdd(p.counters + p.n_ops, 1u) == static_cast<uint32_t>(p.blocks - 1)) {
      for (int o = 0; o < p.n_ops; ++o) {
        p.counters[o] = 0;
        const DecoderOp& op = p.ops[o];
        if (op.kind == DecoderOpKind::Attention)
          for (int g = 0; g < op.n_kv; ++g) op.tickets[g] = 0;
      }
      p.counters[p.n_ops] = 0;
      __threadfence();
    }
  }
}

// ---- launch

// Ring stages that fit beside the work area and the static shared memory.
int ring_stages(const DecoderStepParams& p, int device) {
  const int64_t room = max_shared_memory_optin(device) - static_cast<int64_t>(sizeof(Shared)) - work_bytes(p) - 1024;
  return static_cast<int>(std::min<int64_t>(kMaxStages, std::max<int64_t>(0, room / kSlotBytes)));
}

// The kernel for (T, D), its dynamic shared memory limit raised once per instance to the most any
// launch may ask: the device's opt-in limit less the kernel's static shared memory (a larger value
// is an invalid argument; ring_stages fits under it).
template <typename T, int D>
auto configured_kernel(int device) {
  static const cudaError_t set = [device] {
    cudaFuncAttributes attr{};
    const cudaError_t got = cudaFuncGetAttributes(&attr, decoder_step_kernel<T, D>);
    if (got != cudaSuccess) return got;
    const int dynamic = max_shared_memory_optin(device) - static_cast<int>(attr.sharedSizeBytes);
    return cudaFuncSetAttribute(decoder_step_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic);
  }();
  ANVIL_CUDA_CHECK("[decoder_step]", set);
  return decoder_step_kernel<T, D>;
}

template <typename F>
void with_kernel(const DecoderStepParams& p, int device, F&& f) {
  dispatch_half_types(p.dtype, "[decoder_step]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.head_dim == 16) f(configured_kernel<T, 16>(device));
    else if (p.head_dim == 64) f(configured_kernel<T, 64>(device));
    else f(configured_kernel<T, 128>(device));
  });
}

}  // namespace

// Fused: compute capability 9.0 or later, 16-bit activations, head_dim 16, 64 or 128 (or no
// attention), at most 16 q heads per kv head, Gemv rows a multiple of 8 columns, routed ops over
// at most kDecoderMaxExperts experts and kDecoderMaxTopK per token, and room for kMinStages ring
// stages; one block per SM.
FusedPlan decoder_step_plan(const DecoderStepParams& p) {
  if (p.dtype != kBFloat16 && p.dtype != kFloat16) return FusedPlan::Composed;
  if (!(p.head_dim == 0 || p.head_dim == 16 || p.head_dim == 64 || p.head_dim == 128) || p.max_group > kMaxGroup || p.max_k % 8 != 0)
    return FusedPlan::Composed;
  if (p.max_experts > kDecoderMaxExperts || p.max_top_k > kDecoderMaxTopK) return FusedPlan::Composed;
  const int device = p.device;
  if (compute_capability(device) < 90 || p.blocks < 1 || p.blocks > multiprocessor_count(device)) return FusedPlan::Composed;
  return ring_stages(p, device) >= kMinStages ? FusedPlan::Fused : FusedPlan::Composed;
}

void decoder_step(const DecoderStepParams& p) {
  const char* op = "[decoder_step]";
  ANVIL_CHECK(decoder_step_plan(p) == FusedPlan::Fused, Error, op, " the params are outside the persistent kernel's plan");
  KernelLaunch launch(p.counters);
  const int stages = ring_stages(p, launch.device());
  const int64_t ring = static_cast<int64_t>(stages) * kSlotBytes;
  const size_t smem = static_cast<size_t>(ring + work_bytes(p));
  with_kernel(p, launch.device(),
              [&](auto kernel) { kernel<<<p.blocks, kThreads, smem, launch.stream()>>>(p, stages, ring); });
  launch.check(op);
}

}  // namespace anvil::cuda_backend
