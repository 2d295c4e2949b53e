// copy (strided dtype conversion, every pair of the 16 dtypes), fill and random on CUDA.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/random.h"
#include "core/kernels/attention.h"
#include "core/philox.h"
#include "cuda/device/map.cuh"
#include "cuda/map_launch.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::kThreads;

// The 240 conversion pairs are one small kernel each; keep this functor trivial.
template <typename To, typename From>
struct ConvertOp {
  __device__ To operator()(From x) const { return convert<To>(x); }
};

// float32 -> e4m3fn in one instruction where the GPU has it (sm_89+): cvt.rn.satfinite rounds to
// nearest even and saturates finite overflow and +-inf to +-448 exactly as the scalar rule; only
// NaN differs (the instruction gives 0x7F for both signs), so NaN keeps its sign here. The
// integer emulation ran the H200 cast at 0.76 of copy bandwidth. LargeConvertExhaustive checks
// all 2^32 inputs against the scalar rule.
template <>
struct ConvertOp<Float8_e4m3fn, float> {
  __device__ Float8_e4m3fn operator()(float x) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.f), "f"(x));
    uint8_t b = static_cast<uint8_t>(pair & 0xFFu);
    if (x != x) b = static_cast<uint8_t>(0x7Fu | ((__float_as_uint(x) >> 24) & 0x80u));
    return Float8_e4m3fn::from_bits(b);
#else
    return convert<Float8_e4m3fn>(x);
#endif
  }
};

template <typename U>
struct IdentityOp {
  __device__ U operator()(U x) const { return x; }
};

// Fill stores a bit pattern made on the host, so one kernel per element size serves all dtypes.
template <typename U>
struct FillOp {
  U value;
  __device__ void operator()(const ElementwiseParams& p, const int64_t* off) const {
    static_cast<U*>(p.ptr[0])[off[0]] = value;
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads) random_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset,
                                                          RandomKind kind, int bits, int64_t low, int64_t high) {
  const int64_t stride = cuda_device::grid_threads();
  for (int64_t i = cuda_device::global_thread(); i < n; i += stride) {
    uint64_t counter = offset + static_cast<uint64_t>(i);
    if constexpr (is_complex_v<T>) out[i] = T(0.f, 0.f);  // as the CPU backend: no complex draws
    else if (kind == RandomKind::Uniform) out[i] = convert<T>(philox_uniform(seed, counter, bits));
    else if (kind == RandomKind::Normal) out[i] = convert<T>(philox_normal(seed, counter));
    else out[i] = convert<T>(philox_int(seed, counter, low, high));
  }
}

// A same-dtype copy whose destination and source are dense along different dims (a memory-format
// change, NCHW <-> NHWC): out[o0 + i + j dst_b] = in[o1 + i src_a + j] over 32 x 32 tiles of (i,
// j) staged in shared memory, so both sides move whole 32-element runs (the element map strides
// one side across the tensor: the H100's [1, 128, 1024, 1024] bf16 conversion ran at ~0.2 TB/s).
// o0 / o1 from the other dims (at most kMaxDims - 2).
struct TransposeCopy {
  int64_t na = 0, nb = 0, src_a = 0, dst_b = 0, ta = 0, tb = 0, tasks = 0;
  int n_others = 0;
  int64_t sizes[kMaxDims] = {}, dst[kMaxDims] = {}, src[kMaxDims] = {};
};

template <typename U>
__global__ void __launch_bounds__(256) transpose_copy_kernel(const __grid_constant__ TransposeCopy t, U* out,
                                                             const U* in) {
  __shared__ U tile[32][33];
  const int tx = static_cast<int>(threadIdx.x) % 32, ty = static_cast<int>(threadIdx.x) / 32;
  for (int64_t task = blockIdx.x; task < t.tasks; task += gridDim.x) {
    const int64_t tile_id = task % (t.ta * t.tb), i0 = tile_id / t.tb * 32, j0 = tile_id % t.tb * 32;
    int64_t o0 = 0, o1 = 0, rem = task / (t.ta * t.tb);
    for (int k = t.n_others - 1; k >= 0; --k) {
      const int64_t idx = rem % t.sizes[k];
      rem /= t.sizes[k];
      o0 += idx * t.dst[k];
      o1 += idx * t.src[k];
    }
    for (int r = ty; r < 32; r += 8) {  // rows i, the source's dense dim j across the warp
      const int64_t i = i0 + r, j = j0 + tx;
      if (i < t.na && j < t.nb) tile[r][tx] = in[o1 + i * t.src_a + j];
    }
    __syncthreads();
    for (int r = ty; r < 32; r += 8) {  // rows j, the destination's dense dim i across the warp
      const int64_t i = i0 + tx, j = j0 + r;
      if (i < t.na && j < t.nb) out[o0 + i + j * t.dst_b] = tile[tx][r];
    }
    __syncthreads();
  }
}

// Launches transpose_copy_kernel for p when it is such a copy (both dense dims at least 8 long);
// false otherwise.
bool transpose_copy(const ElementwiseParams& p, const KernelLaunch& launch) {
  int a = -1, b = -1;  // the destination is dense along dim a, the source along dim b
  for (int d = 0; d < p.ndim; ++d) {
    if (p.strides[0][d] == 1) a = d;
    if (p.strides[1][d] == 1) b = d;
  }
  if (a < 0 || b < 0 || a == b || p.sizes[a] < 8 || p.sizes[b] < 8) return false;
  TransposeCopy t;
  int64_t outer = 1;
  for (int d = 0; d < p.ndim; ++d)
    if (d != a && d != b) {
      t.sizes[t.n_others] = p.sizes[d];
      t.dst[t.n_others] = p.strides[0][d];
      t.src[t.n_others++] = p.strides[1][d];
      outer *= p.sizes[d];
    }
  t.na = p.sizes[a];
  t.nb = p.sizes[b];
  t.src_a = p.strides[1][a];
  t.dst_b = p.strides[0][b];
  t.ta = (t.na + 31) / 32;
  t.tb = (t.nb + 31) / 32;
  t.tasks = outer * t.ta * t.tb;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(t.tasks, int64_t{launch.sm_count()} * 8));
  dispatch_element_size(element_size(p.dtype), "[copy_]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    transpose_copy_kernel<U><<<blocks, 256, 0, launch.stream()>>>(t, static_cast<U*>(p.ptr[0]),
                                                                   static_cast<const U*>(p.ptr[1]));
  });
  return true;
}

}  // namespace

void copy(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  if (p.dtype == p.out_dtype && !p.contiguous && transpose_copy(p, launch)) {
    launch.check("[copy_]");
    return;
  }
  if (p.dtype == p.out_dtype) {
    // Bits move as 1/2/4/8-byte words, packed to 16 bytes when contiguous. Not cudaMemcpyAsync:
    // its node replays slowly in a graph (H200, 2 GiB float32: memcpy 510 us eager, 775 us
    // replayed; this kernel 552 us eager, 542 us replayed).
    dispatch_element_size(element_size(p.dtype), "[copy_]", [&](auto tag) {
      using U = typename decltype(tag)::type;
      cuda_device::launch_map1<U, U>(p, IdentityOp<U>{}, launch.stream(), launch.sm_count());
    });
  } else {
    dispatch_all_types(p.out_dtype, "[copy_]", [&](auto to_tag) {
      dispatch_all_types(p.dtype, "[copy_]", [&](auto from_tag) {
        using To = typename decltype(to_tag)::type;
        using From = typename decltype(from_tag)::type;
        if constexpr (!std::is_same_v<To, From>)
          cuda_device::launch_map1<To, From>(p, ConvertOp<To, From>{}, launch.stream(), launch.sm_count());
      });
    });
  }
  launch.check("[copy_]");
}

void fill(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  size_t es = element_size(p.out_dtype);
  uint64_t bits = dispatch_all_types(p.out_dtype, "[fill_]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // As the CPU backend: a bool is true when either the integer or the floating value is.
    T v;
    if constexpr (std::is_same_v<T, bool>) v = p.scalar0.i != 0 || p.scalar0.f != 0;
    else v = scalar_as<T>(p.scalar0);
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
  });
  // Zero, -1 and other one-byte patterns are a memset, which runs at copy-engine speed.
  bool same_bytes = true;
  for (size_t k = 1; k < es; ++k) same_bytes &= ((bits >> (8 * k)) & 0xFF) == (bits & 0xFF);
  if (p.contiguous && same_bytes) {
    ANVIL_CUDA_CHECK("[fill_]", cudaMemsetAsync(p.ptr[0], static_cast<int>(bits & 0xFF),
                                                static_cast<size_t>(p.numel) * es, launch.stream()));
    return;
  }
  dispatch_element_size(es, "[fill_]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    cuda_device::launch_map_slots<1>(p, FillOp<U>{static_cast<U>(bits)}, launch.stream(), launch.sm_count());
  });
  launch.check("[fill_]");
}

void random(const RandomParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.out);
  int bits = random_bits_for(p.dtype);
  dispatch_all_types(p.dtype, "[random]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    random_kernel<T><<<launch.blocks(p.numel), kThreads, 0, launch.stream()>>>(
        static_cast<T*>(p.out), p.numel, p.seed, p.offset, p.kind, bits, p.low, p.high);
  });
  launch.check("[random]");
}

namespace {
constexpr int64_t kPrefetchChunk = 64 << 10;  // bytes per prefetch instruction (one per thread)

// Thread t asks L2 for chunk t % chunks of slice t / chunks, shrunk to 16-byte boundaries.
__global__ void prefetch_kernel(const __grid_constant__ PrefetchParams p, int64_t chunks) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.slices * chunks) return;
  const int64_t s = t / chunks, c = t % chunks;
  int64_t i = 0;
  if (p.index) {
    i = p.index64 ? static_cast<const int64_t*>(p.index)[s] : static_cast<const int32_t*>(p.index)[s];
    if (i < 0 || i >= p.count) return;
  }
  const uintptr_t slice = reinterpret_cast<uintptr_t>(p.base) + static_cast<uintptr_t>(i * p.stride_bytes);
  const uintptr_t lo = slice + static_cast<uintptr_t>(c * kPrefetchChunk);
  const uintptr_t hi = std::min(slice + static_cast<uintptr_t>(p.span_bytes), lo + kPrefetchChunk);
  const uintptr_t a = (lo + 15) & ~uintptr_t{15}, b = hi & ~uintptr_t{15};
  if (b > a) cuda_device::prefetch_l2(reinterpret_cast<const void*>(a), static_cast<uint32_t>(b - a));
}
}  // namespace

void cache_prefetch(const PrefetchParams& p) {
  KernelLaunch launch(p.base);
  const int64_t chunks = (p.span_bytes + kPrefetchChunk - 1) / kPrefetchChunk, threads = p.slices * chunks;
  constexpr int kBlock = 32;  // small blocks: spread over SMs, beside whatever runs
  const int64_t blocks = (threads + kBlock - 1) / kBlock;
  ANVIL_CHECK(blocks <= 0x7FFFFFFF, ShapeError, "[cache_prefetch] ", p.span_bytes, " bytes x ", p.slices,
              " slices are too many");
  prefetch_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, launch.stream()>>>(p, chunks);
  launch.check("[cache_prefetch]");
}

}  // namespace anvil::cuda_backend
