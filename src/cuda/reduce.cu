// reduce on CUDA: Sum / Prod / Mean, Amax / Amin / Max / Min / Argmax / Argmin, Var / Std over
// any set of strided dims. The launch shape follows the layout:
//   rows: the reduced dims end in the unit stride -> a warp (n_red <= 512) or a block per output
//         reads consecutive elements;
//   cols: the kept dims end in the unit stride -> a block takes 32 neighbouring outputs with 8
//         threads each along the reduced range, so a warp's loads are one 128-byte line;
//   split: too few outputs to fill the GPU -> the reduced range is cut over grid.y, partial
//         accumulators go to scratch memory and a second kernel combines them.
// Accumulators (as the CPU backend): float for float32 and narrower, double for float64, int64
// (wrapping) for bool and integers, whose sums and products are int64; complex64 for complex.
// Max/Min/Arg*: first index on ties, NaN wins at its first index.
#include <algorithm>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/reduce.h"
#include "cuda/allocator.h"
#include "cuda/device/dispatch.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/reduce.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::strided_offset;
constexpr int kThreads = KernelLaunch::kThreads;
constexpr int kColsX = 32, kColsY = kThreads / kColsX;

// One dispatch per output element (not per input element) keeps the kernels per (input,
// accumulator) pair instead of per (input, accumulator, output) triple; the out dtype is checked
// on the host.
template <typename V>
__device__ void store_converted(void* out, DType t, int64_t i, V v) {
  cuda_device::dispatch_all_types_device(t, [&](auto tag) {
    using O = typename decltype(tag)::type;
    static_cast<O*>(out)[i] = convert<O>(v);
  });
}

// ---- reducers: init / step (one input element and its reduced index) / combine / write

template <typename In, typename Acc>
struct SumProd {
  using acc_t = Acc;
  bool prod, mean;
  __device__ Acc init() const { return convert<Acc>(prod ? 1 : 0); }
  __device__ Acc step(Acc a, In x, int64_t) const { return combine(a, convert<Acc>(x)); }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (is_int_v<Acc>) return prod ? wrap_mul(a, b) : wrap_add(a, b);
    else return prod ? a * b : a + b;
  }
  __device__ void write(const ReduceParams& p, int64_t o, Acc a) const {
    if constexpr (is_complex_v<Acc>) {
      if (mean) a = Complex64(a.re / static_cast<float>(p.n_red), a.im / static_cast<float>(p.n_red));
    } else if constexpr (!is_int_v<Acc>) {
      if (mean) a = a / static_cast<Acc>(p.n_red);  // n_red == 0 gives NaN, as torch.mean
    }
    store_converted(p.out, p.out_dtype, o, a);
  }
};

template <typename In>
struct Extremum {
  using M = opmath_t<In>;
  struct Acc {
    M v;
    int64_t i;  // -1: nothing seen yet
  };
  using acc_t = Acc;
  bool is_max;
  void* values;           // null when only indices are wanted
  int64_t* indices;       // null when only values are wanted
  int64_t* more_indices;  // Argmax / Argmin: out_index when the front end also sets it
  DType value_dtype;
  __device__ Acc init() const { return Acc{M{}, -1}; }
  __device__ Acc step(Acc a, In x, int64_t j) const { return combine(a, Acc{static_cast<M>(x), j}); }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    bool a_nan = is_nan(a.v), b_nan = is_nan(b.v);
    if (a_nan || b_nan) return (a_nan && b_nan) ? (a.i < b.i ? a : b) : (a_nan ? a : b);
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
  __device__ void write(const ReduceParams&, int64_t o, Acc a) const {
    if (values) store_converted(values, value_dtype, o, a.v);
    if (indices) indices[o] = a.i;
    if (more_indices) more_indices[o] = a.i;
  }
};

// Welford / Chan: running mean and sum of squared deviations, merged pairwise.
template <typename T> struct SumAcc { using type = opmath_t<T>; };  // float / double / complex64
template <> struct SumAcc<bool> { using type = int64_t; };
template <> struct SumAcc<uint8_t> { using type = int64_t; };
template <> struct SumAcc<int8_t> { using type = int64_t; };
template <> struct SumAcc<uint16_t> { using type = int64_t; };
template <> struct SumAcc<int16_t> { using type = int64_t; };
template <> struct SumAcc<uint32_t> { using type = int64_t; };
template <> struct SumAcc<int32_t> { using type = int64_t; };
template <> struct SumAcc<uint64_t> { using type = int64_t; };

// Accumulates in double for every input: Welford in float drifts by ~25 ulps on short rows
// with a large mean (float32 [33, 7, 3] over the last dim), past the two-pass error bound the
// CPU backend meets; memory, not the FP64 units, bounds this kernel on H200.
template <typename In>
struct Moments {
  using A = double;
  struct Acc {
    int64_t n;
    A mean, m2;
  };
  using acc_t = Acc;
  double correction;
  bool take_sqrt;
  __device__ Acc init() const { return Acc{0, A(0), A(0)}; }
  __device__ Acc step(Acc a, In x, int64_t) const {
    const A v = static_cast<A>(x);
    a.n += 1;
    const A d = v - a.mean;
    a.mean += d / static_cast<A>(a.n);
    a.m2 += d * (v - a.mean);
    return a;
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    Acc c;
    c.n = a.n + b.n;
    const A w = static_cast<A>(b.n) / static_cast<A>(c.n);
    const A d = b.mean - a.mean;
    c.mean = a.mean + d * w;
    c.m2 = a.m2 + b.m2 + d * d * static_cast<A>(a.n) * w;
    return c;
  }
  __device__ void write(const ReduceParams& p, int64_t o, Acc a) const {
    A divisor = static_cast<A>(a.n) - static_cast<A>(correction);
    A var = a.m2 / (divisor > A(0) ? divisor : A(0));  // torch: max(N - correction, 0)
    store_converted(p.out, p.out_dtype, o, take_sqrt ? sqrt(var) : var);
    if (p.out_mean) store_converted(p.out_mean, p.out_dtype, o, a.n == 0 ? A(NAN) : a.mean);
  }
};

// ---- kernels

__device__ __forceinline__ int64_t reduced_offset(const ReduceParams& p, int64_t j) {
  return p.red_ndim == 1 ? j * p.red_strides[0] : strided_offset(j, p.red_ndim, p.red_sizes, p.red_strides);
}

// `group` threads (32 or 256) per output; blockIdx.y takes the reduced range [y*chunk, ...).
template <typename In, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_kernel(const __grid_constant__ ReduceParams p, R r, int group, int64_t chunk,
                       typename R::acc_t* partial) {
  using Acc = typename R::acc_t;
  __shared__ alignas(16) unsigned char smem_raw[sizeof(Acc) * (kThreads / 32)];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const In* in = static_cast<const In*>(p.in);
  const int lane = threadIdx.x % group, per_block = kThreads / group;
  const int64_t r_begin = blockIdx.y * chunk, r_end = min(p.n_red, r_begin + chunk);
  const bool unit = p.red_ndim == 1 && p.red_strides[0] == 1;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * per_block; o0 < p.n_out;
       o0 += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t o = o0 + threadIdx.x / group;
    Acc acc = r.init();
    if (o < p.n_out) {
      const In* row = in + strided_offset(o, p.out_ndim, p.out_sizes, p.out_strides);
      int64_t j = r_begin + lane;
      if (unit && reinterpret_cast<uintptr_t>(row + r_begin) % 16 == 0) {
        // 16-byte loads, two in flight per thread (chunks are multiples of 16 elements, so an
        // aligned row gives aligned chunks): one scalar load at a time leaves DRAM idle.
        constexpr int V = 16 / sizeof(In);
        using P = cuda_device::Pack<In, V>;
        const P* packs = reinterpret_cast<const P*>(row + r_begin);
        const int64_t npack = (r_end - r_begin) / V;
        int64_t q = lane;
        for (; q + group < npack; q += 2 * group) {
          const P a = packs[q], b = packs[q + group];
          const int64_t ja = r_begin + q * V, jb = ja + static_cast<int64_t>(group) * V;
#pragma unroll
          for (int k = 0; k < V; ++k) acc = r.step(acc, a.v[k], ja + k);
#pragma unroll
          for (int k = 0; k < V; ++k) acc = r.step(acc, b.v[k], jb + k);
        }
        if (q < npack) {
          const P a = packs[q];
#pragma unroll
          for (int k = 0; k < V; ++k) acc = r.step(acc, a.v[k], r_begin + q * V + k);
        }
        j = r_begin + npack * V + lane;
      } else if (unit) {
        // Four independent loads in flight per thread.
        for (; j + 3 * group < r_end; j += 4 * group) {
          const In x0 = row[j], x1 = row[j + group], x2 = row[j + 2 * group], x3 = row[j + 3 * group];
          acc = r.step(r.step(r.step(r.step(acc, x0, j), x1, j + group), x2, j + 2 * group), x3, j + 3 * group);
        }
      }
      for (; j < r_end; j += group) acc = r.step(acc, row[unit ? j : reduced_offset(p, j)], j);
    }
    acc = group == 32 ? cuda_device::warp_reduce(acc, r) : cuda_device::block_reduce(acc, r, smem);
    if (lane == 0 && o < p.n_out) {
      if (partial) partial[blockIdx.y * p.n_out + o] = acc;
      else r.write(p, o, acc);
    }
  }
}

// Block (32, 8): x picks one of 32 neighbouring outputs, y strides the reduced range.
template <typename In, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_cols_kernel(const __grid_constant__ ReduceParams p, R r, int64_t chunk, typename R::acc_t* partial) {
  using Acc = typename R::acc_t;
  __shared__ alignas(16) unsigned char smem_raw[sizeof(Acc) * kThreads];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const In* in = static_cast<const In*>(p.in);
  const int64_t r_begin = blockIdx.y * chunk, r_end = min(p.n_red, r_begin + chunk);
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kColsX; o0 < p.n_out;
       o0 += static_cast<int64_t>(gridDim.x) * kColsX) {
    const int64_t o = o0 + threadIdx.x;
    Acc acc = r.init();
    if (o < p.n_out) {
      const In* col = in + strided_offset(o, p.out_ndim, p.out_sizes, p.out_strides);
      int64_t j = r_begin + threadIdx.y;
      for (; j + 3 * kColsY < r_end; j += 4 * kColsY) {
        const In x0 = col[reduced_offset(p, j)], x1 = col[reduced_offset(p, j + kColsY)];
        const In x2 = col[reduced_offset(p, j + 2 * kColsY)], x3 = col[reduced_offset(p, j + 3 * kColsY)];
        acc = r.step(r.step(r.step(r.step(acc, x0, j), x1, j + kColsY), x2, j + 2 * kColsY), x3, j + 3 * kColsY);
      }
      for (; j < r_end; j += kColsY) acc = r.step(acc, col[reduced_offset(p, j)], j);
    }
    smem[threadIdx.y * kColsX + threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < p.n_out) {
      for (int y = 1; y < kColsY; ++y) acc = r.combine(acc, smem[y * kColsX + threadIdx.x]);
      if (partial) partial[blockIdx.y * p.n_out + o] = acc;
      else r.write(p, o, acc);
    }
    __syncthreads();
  }
}

template <typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_finish_kernel(const __grid_constant__ ReduceParams p, R r, const typename R::acc_t* partial, int splits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < p.n_out; o += stride) {
    auto acc = r.init();
    for (int s = 0; s < splits; ++s) acc = r.combine(acc, partial[s * p.n_out + o]);
    r.write(p, o, acc);
  }
}

// ---- launch shape (see the file comment)

bool reduces_unit_stride(const ReduceParams& p) { return p.red_ndim > 0 && p.red_strides[p.red_ndim - 1] == 1; }
bool keeps_unit_stride(const ReduceParams& p) { return p.out_ndim > 0 && p.out_strides[p.out_ndim - 1] == 1; }

template <typename In, typename R>
void launch_reduce(const ReduceParams& p, const R& r, const KernelLaunch& launch) {
  using Acc = typename R::acc_t;
  const bool rows = reduces_unit_stride(p) || !keeps_unit_stride(p);
  const int group = rows && p.n_red <= 512 ? 32 : kThreads;
  const int64_t per_block = rows ? kThreads / group : kColsX;
  const int64_t blocks = (p.n_out + per_block - 1) / per_block;
  const int64_t target = launch.max_blocks();  // resident blocks of a full GPU
  // A split must keep each thread busy for at least 16 (rows) or 128 (cols) elements.
  const int64_t min_chunk = rows ? group * 16 : kColsY * 128;
  int64_t splits = 1;
  if (blocks < target && p.n_red >= 2 * min_chunk)
    splits = std::clamp<int64_t>(std::min(target / blocks, p.n_red / min_chunk), 1, 65535);
  const int64_t chunk = std::max<int64_t>(((p.n_red + splits - 1) / splits + 15) / 16 * 16, 16);
  if (p.n_red > 0) splits = (p.n_red + chunk - 1) / chunk;

  allocator::Scratch scratch(launch.device(), splits > 1 ? sizeof(Acc) * p.n_out * splits : 0, launch.stream());
  Acc* partial = static_cast<Acc*>(scratch.get());
  dim3 grid(static_cast<unsigned>(std::min(blocks, target)), static_cast<unsigned>(splits));
  if (rows) {
    reduce_rows_kernel<In, R><<<grid, kThreads, 0, launch.stream()>>>(p, r, group, chunk, partial);
  } else {
    reduce_cols_kernel<In, R><<<grid, dim3(kColsX, kColsY), 0, launch.stream()>>>(p, r, chunk, partial);
  }
  if (splits > 1) {
    launch.check("[reduce]");
    reduce_finish_kernel<R><<<launch.blocks(p.n_out), kThreads, 0, launch.stream()>>>(p, r, partial,
                                                                                      static_cast<int>(splits));
  }
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "[sum]";
    case ReduceOp::Prod: return "[prod]";
    case ReduceOp::Mean: return "[mean]";
    case ReduceOp::Amax: return "[amax]";
    case ReduceOp::Amin: return "[amin]";
    case ReduceOp::Max: return "[max]";
    case ReduceOp::Min: return "[min]";
    case ReduceOp::Argmax: return "[argmax]";
    case ReduceOp::Argmin: return "[argmin]";
    case ReduceOp::Var: return "[var]";
    case ReduceOp::Std: return "[std]";
  }
  return "[reduce]";
}

// The out dtype follows the input (int64 for bool and integers), so the accumulator does too.
void reduce_sum_prod(const ReduceParams& p, const KernelLaunch& launch) {
  const bool prod = p.op == ReduceOp::Prod, mean = p.op == ReduceOp::Mean;
  dispatch_arith_types(p.in_dtype, op_name(p.op), [&](auto tag) {
    using In = typename decltype(tag)::type;
    if constexpr (is_arith_v<In>) launch_reduce<In>(p, SumProd<In, typename SumAcc<In>::type>{prod, mean}, launch);
  });
}

// Amax / Amin write values; Max / Min values to `out` and indices to `out_index`; Argmax /
// Argmin indices to `out` (int64), and to `out_index` too when it is set.
void reduce_extremum(const ReduceParams& p, const KernelLaunch& launch) {
  const bool is_max = p.op == ReduceOp::Amax || p.op == ReduceOp::Max || p.op == ReduceOp::Argmax;
  const bool arg = p.op == ReduceOp::Argmax || p.op == ReduceOp::Argmin;
  void* values = arg ? nullptr : p.out;
  int64_t* indices = arg ? static_cast<int64_t*>(p.out) : p.out_index;
  int64_t* more_indices = arg && p.out_index != indices ? p.out_index : nullptr;
  dispatch_real_types(p.in_dtype, op_name(p.op), [&](auto tag) {
    using In = typename decltype(tag)::type;
    if constexpr (is_real_arith_v<In>)
      launch_reduce<In>(p, Extremum<In>{is_max, values, indices, more_indices, p.out_dtype}, launch);
  });
}

void reduce_moments(const ReduceParams& p, const KernelLaunch& launch) {
  const bool take_sqrt = p.op == ReduceOp::Std;
  dispatch_float_types(p.in_dtype, op_name(p.op), [&](auto tag) {
    using In = typename decltype(tag)::type;
    launch_reduce<In>(p, Moments<In>{p.correction, take_sqrt}, launch);
  });
}

}  // namespace

void reduce(const ReduceParams& p) {
  if (p.n_out == 0) return;
  dispatch_all_types(p.out_dtype, op_name(p.op), [](auto) {});  // store_converted's list
  KernelLaunch launch(p.out ? p.out : static_cast<void*>(p.out_index));
  switch (p.op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
    case ReduceOp::Mean:
      reduce_sum_prod(p, launch);
      break;
    case ReduceOp::Amax:
    case ReduceOp::Amin:
    case ReduceOp::Max:
    case ReduceOp::Min:
    case ReduceOp::Argmax:
    case ReduceOp::Argmin:
      reduce_extremum(p, launch);
      break;
    case ReduceOp::Var:
    case ReduceOp::Std:
      reduce_moments(p, launch);
      break;
  }
  launch.check(op_name(p.op));
}

}  // namespace anvil::cuda_backend
