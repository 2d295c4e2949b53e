// CPU reductions: one pass per output over the reduced dims (odometer), OpenMP over outputs,
// or over chunks of the reduced range when there is a single output.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/reduce.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

template <typename T> struct Acc { using type = opmath_t<T>; };
template <> struct Acc<bool> { using type = int64_t; };
template <> struct Acc<uint8_t> { using type = int64_t; };
template <> struct Acc<int8_t> { using type = int64_t; };
template <> struct Acc<uint16_t> { using type = int64_t; };
template <> struct Acc<int16_t> { using type = int64_t; };
template <> struct Acc<uint32_t> { using type = int64_t; };
template <> struct Acc<int32_t> { using type = int64_t; };
template <> struct Acc<uint64_t> { using type = int64_t; };
// float32 and the reduced floats accumulate in double in the generic path: as accurate as
// PyTorch's cascade sum and no slower here (the loop is bound by the strided loads).
template <> struct Acc<float> { using type = double; };
template <> struct Acc<Half> { using type = double; };
template <> struct Acc<BFloat16> { using type = double; };

// Element offset of linear index i over (sizes, strides), innermost dim fastest.
inline int64_t strided_offset(int ndim, const int64_t* sizes, const int64_t* strides, int64_t i) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}
inline int64_t out_offset(const ReduceParams& p, int64_t o) { return strided_offset(p.out_ndim, p.out_sizes, p.out_strides, o); }

// Visits the reduced elements of one output in [r0, r1) in order: f(value, r).
template <typename T, typename F>
void visit(const ReduceParams& p, const T* base, int64_t r0, int64_t r1, F&& f) {
  if (r1 <= r0) return;  // an empty reduction (a reduced dim of size 0: its odometer would divide by it)
  if (p.red_ndim <= 1) {
    const int64_t s = p.red_ndim == 0 ? 0 : p.red_strides[0];
    for (int64_t r = r0; r < r1; ++r) f(base[r * s], r);
    return;
  }
  // An odometer over the reduced dims, the innermost as a plain strided loop: no division per
  // element (a batch-norm-style reduction over N, H, W visits every element this way).
  const int nd = p.red_ndim;
  const int64_t inner = p.red_sizes[nd - 1], s_inner = p.red_strides[nd - 1];
  int64_t idx[kMaxDims] = {}, rem = r0 / inner, off = 0;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = rem % p.red_sizes[d];
    rem /= p.red_sizes[d];
    off += idx[d] * p.red_strides[d];
  }
  int64_t r = r0, j = r0 % inner;
  while (r < r1) {
    const int64_t stop = std::min(r1 - r, inner - j);
    for (int64_t k = 0; k < stop; ++k) f(base[off + (j + k) * s_inner], r + k);
    r += stop;
    j = 0;
    for (int d = nd - 2; d >= 0; --d) {  // the next row of the innermost dim
      off += p.red_strides[d];
      if (++idx[d] < p.red_sizes[d]) break;
      off -= idx[d] * p.red_strides[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void reduce_typed(const ReduceParams& p) {
  using A = typename Acc<T>::type;
  const T* in = static_cast<const T*>(p.in);
  const ReduceOp op = p.op;
  const int64_t n = p.n_red;

  auto one_output = [&](int64_t o, const T* base) {
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      A acc = A(0);
      visit(p, base, 0, n, [&](T v, int64_t) {
        if constexpr (is_int_v<A>) acc = wrap_add(acc, static_cast<A>(v));
        else acc = acc + static_cast<A>(v);
      });
      if (op == ReduceOp::Mean) {
        if constexpr (!is_int_v<A> && !is_complex_v<A>) acc = acc / static_cast<A>(n);
      }
      if (p.out_dtype == DType::Int64) static_cast<int64_t*>(p.out)[o] = convert<int64_t>(acc);
      else static_cast<T*>(p.out)[o] = convert<T>(acc);
    } else if (op == ReduceOp::Prod) {
      A acc = A(1);
      visit(p, base, 0, n, [&](T v, int64_t) {
        if constexpr (is_int_v<A>) acc = wrap_mul(acc, static_cast<A>(v));
        else acc = acc * static_cast<A>(v);
      });
      if (p.out_dtype == DType::Int64) static_cast<int64_t*>(p.out)[o] = convert<int64_t>(acc);
      else static_cast<T*>(p.out)[o] = convert<T>(acc);
    } else if constexpr (!is_complex_v<T>) {
      using M = opmath_t<T>;
      if (op == ReduceOp::Var || op == ReduceOp::Std) {
        // One pass over memory, two levels in float64: each chunk's mean and centred sum of
        // squares by two passes over the chunk (still in cache), chunks merged as Chan et al.
        constexpr int64_t kChunk = 2048;
        double mean = 0, m2 = 0;
        for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
          const int64_t c1 = std::min(n, c0 + kChunk);
          const double nb = static_cast<double>(c1 - c0), na = static_cast<double>(c0);
          double cm = 0, cs = 0;
          visit(p, base, c0, c1, [&](T v, int64_t) { cm += static_cast<double>(static_cast<M>(v)); });
          cm /= nb;
          visit(p, base, c0, c1, [&](T v, int64_t) {
            const double d = static_cast<double>(static_cast<M>(v)) - cm;
            cs += d * d;
          });
          const double delta = cm - mean, w = nb / (na + nb);
          mean += delta * w;
          m2 += cs + delta * delta * na * w;
        }
        double var = m2 / std::max(0.0, static_cast<double>(n) - p.correction);
        if (n == 0) var = mean = std::numeric_limits<double>::quiet_NaN();
        double r = op == ReduceOp::Std ? std::sqrt(var) : var;
        static_cast<T*>(p.out)[o] = convert<T>(r);
        if (p.out_mean) static_cast<T*>(p.out_mean)[o] = convert<T>(mean);
      } else {
        // Amax/Amin/Max/Min/Argmax/Argmin: NaN wins at its first index; ties keep the first index.
        bool is_max = op == ReduceOp::Amax || op == ReduceOp::Max || op == ReduceOp::Argmax;
        M best = M(0);
        int64_t best_i = -1;
        bool best_nan = false;
        visit(p, base, 0, n, [&](T tv, int64_t r) {
          M v = static_cast<M>(tv);
          if (best_nan) return;
          if (is_nan(v)) {
            best = v;
            best_i = r;
            best_nan = true;
            return;
          }
          if (best_i < 0 || (is_max ? v > best : v < best)) {
            best = v;
            best_i = r;
          }
        });
        if (op == ReduceOp::Argmax || op == ReduceOp::Argmin) {
          static_cast<int64_t*>(p.out)[o] = best_i;
        } else {
          static_cast<T*>(p.out)[o] = T(best);
          if (p.out_index) p.out_index[o] = best_i;
        }
      }
    }
  };

  if (p.n_out == 1 && (op == ReduceOp::Sum || op == ReduceOp::Mean) && p.red_ndim == 1 && p.red_strides[0] == 1 &&
      n >= kParallelGrain) {
    // One long contiguous row: per-thread partial sums (SIMD where available), then combine.
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      const int64_t chunk = 1 << 16;
      const int64_t nchunks = (n + chunk - 1) / chunk;
      std::vector<double> partial(nchunks);
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < nchunks; ++c) {
        int64_t b = c * chunk, len = std::min(chunk, n - b);
        double s = 0;
        simd::sum(dtype_of_v<T>, in + b, len, &s);
        partial[c] = s;
      }
      double total = 0;
      for (double v : partial) total += v;
      if (op == ReduceOp::Mean) total /= static_cast<double>(n);
      static_cast<T*>(p.out)[0] = convert<T>(total);
      return;
    }
  }
  parallel_for(p.n_out, p.n_out * std::max<int64_t>(n, 1) >= kParallelGrain && p.n_out > 1,
               [&](int64_t o) { one_output(o, in + out_offset(p, o)); });
}

}  // namespace

void reduce(const ReduceParams& p) {
  dispatch_all_types(p.in_dtype, "[reduce]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>) {
      throw DTypeError("[reduce] not implemented for float8");
    } else {
      reduce_typed<T>(p);
    }
  });
}

}  // namespace anvil::cpu
