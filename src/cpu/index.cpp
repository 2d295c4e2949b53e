// CPU index_select / gather / scatter. Indices are validated while they are read; an
// out-of-range index raises IndexError after the loop (no exception crosses OpenMP).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/index.h"
#include "core/kernels/attention.h"
#include "cpu/loop.h"

namespace anvil::cpu {
namespace {

[[noreturn]] void throw_range(const char* op, int64_t bad, int64_t size) {
  throw IndexError(detail::cat_message(op, " index ", bad, " is out of bounds for dimension with size ", size));
}
[[noreturn]] void throw_flat_range(const char* op, int64_t bad, int64_t numel) {  // PyTorch's take / put_ text
  throw IndexError(detail::cat_message(op, " out of range: tried to access index ", bad, " on a tensor of ", numel,
                                       " elements."));
}

// Offsets of index element i (over the index's sizes) in the index, self and other tensors.
inline void offsets(const GatherParams& p, int64_t i, int64_t& oi, int64_t& os, int64_t& oo) {
  oi = os = oo = 0;
  for (int d = p.ndim - 1; d >= 0; --d) {
    int64_t idx = i % p.sizes[d];
    i /= p.sizes[d];
    oi += idx * p.index_strides[d];
    oo += idx * p.other_strides[d];
    if (d != p.dim) os += idx * p.self_strides[d];
  }
}

}  // namespace

void index_select(const IndexSelectParams& p) {
  std::atomic<bool> bad{false};
  std::atomic<int64_t> bad_value{0};
  const size_t es = element_size(p.dtype);
  const size_t row = static_cast<size_t>(p.inner) * es;
  const char* in = static_cast<const char*>(p.in);
  char* out = static_cast<char*>(p.out);
#pragma omp parallel for schedule(static) if (p.outer * p.n_index * p.inner >= kParallelGrain)
  for (int64_t oj = 0; oj < p.outer * p.n_index; ++oj) {
    int64_t o = oj / p.n_index, j = oj % p.n_index;
    int64_t k = p.index[j];
    if (k < 0 || k >= p.in_dim) {
      bad.store(true);
      bad_value.store(k);
      std::memset(out + static_cast<size_t>(oj) * row, 0, row);
      continue;
    }
    std::memcpy(out + static_cast<size_t>(oj) * row, in + (static_cast<size_t>(o * p.in_dim + k)) * row, row);
  }
  if (bad.load())
    throw IndexError(detail::cat_message("[index_select] index out of range in self: index ", bad_value.load(),
                                         " for a dimension of size ", p.in_dim));
}

void gather(const GatherParams& p) {
  std::atomic<bool> bad{false};
  std::atomic<int64_t> bad_value{0};
  dispatch_all_types(p.dtype, "[gather]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* self = static_cast<const T*>(p.self);
    T* out = static_cast<T*>(p.out_or_src);
    const int64_t ds = p.self_strides[p.dim];
#pragma omp parallel for schedule(static) if (p.numel >= kParallelGrain)
    for (int64_t i = 0; i < p.numel; ++i) {
      int64_t oi, os, oo;
      offsets(p, i, oi, os, oo);
      int64_t k = p.index[oi];
      if (p.flat && k < 0 && k >= -p.self_dim_size) k += p.self_dim_size;
      if (k < 0 || k >= p.self_dim_size) {
        bad.store(true);
        bad_value.store(p.index[oi]);
        out[oo] = T{};
        continue;
      }
      out[oo] = self[os + k * ds];
    }
  });
  if (bad.load() && p.flat) throw_flat_range("[take]", bad_value.load(), p.self_dim_size);
  if (bad.load()) throw_range("[gather]", bad_value.load(), p.self_dim_size);
}

void scatter(const GatherParams& p) {
  // Sequential: duplicate indices make the last write win (and sums deterministic), as PyTorch CPU.
  bool bad = false;
  int64_t bad_value = 0;
  dispatch_all_types(p.dtype, "[scatter]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    T* self = static_cast<T*>(p.self);
    const T* src = static_cast<const T*>(p.out_or_src);
    const T value = scalar_as<T>(p.scalar0);
    const int64_t ds = p.self_strides[p.dim];
    for (int64_t i = 0; i < p.numel; ++i) {
      int64_t oi, os, oo;
      offsets(p, i, oi, os, oo);
      int64_t k = p.index[oi];
      if (p.flat && k < 0 && k >= -p.self_dim_size) k += p.self_dim_size;
      if (k < 0 || k >= p.self_dim_size) {
        bad = true;
        bad_value = p.index[oi];
        continue;
      }
      T v = src ? src[oo] : value;
      T& dst = self[os + k * ds];
      if (p.accumulate) {
        bool dz = false;
        dst = T(apply_binary<M>(BinaryOp::Add, static_cast<M>(dst), static_cast<M>(v), M(1), &dz));
      } else {
        dst = v;
      }
    }
  });
  if (bad && p.flat) throw_flat_range("[put_]", bad_value, p.self_dim_size);
  if (bad) throw_range(p.accumulate ? "[scatter_add]" : "[scatter]", bad_value, p.self_dim_size);
}

// bincount: privatised histograms. Each thread counts its contiguous share of x into bins of
// its own (int64 counts, or float64 sums of the weights), then the threads' bins are added in
// thread order and rounded once to the output dtype. One thread when bins outnumber values.
// Values outside [0, bins) are skipped (with `range`, the same pass flags negatives and finds
// the maximum).
template <typename I, typename W, typename Out>
void bincount_typed(const BincountParams& p) {
  using Acc = std::conditional_t<std::is_same_v<W, void>, int64_t, double>;
  const I* x = static_cast<const I*>(p.x);
  Out* out = static_cast<Out*>(p.out);
  const uint64_t nbins = static_cast<uint64_t>(p.bins);
  const int nt = p.n >= kParallelGrain && p.bins <= p.n / 4 ? omp_get_max_threads() : 1;
  // Counts go to 4 interleaved copies of a thread's bins (value i to copy i % 4), so that a hot
  // bin is 4 independent chains of increments rather than one that waits on each store.
  const int copies = std::is_same_v<W, void> && p.bins <= p.n / 16 ? 4 : 1, slots = nt * copies;
  std::vector<Acc> part(static_cast<size_t>(slots) * static_cast<size_t>(p.bins), Acc{});
  int64_t hi = 0;
  bool negative = false;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(max : hi) reduction(|| : negative)
  {
    const int t = omp_get_thread_num();
    const int64_t i0 = p.n * t / nt, i1 = p.n * (t + 1) / nt;
    Acc* h = part.data() + static_cast<size_t>(t) * static_cast<size_t>(copies) * static_cast<size_t>(p.bins);
    // Out-of-range values (rare: only a speculative pass sees them) count into no bin.
    auto see = [&](int64_t v) {
      hi = v > hi ? v : hi;
      negative = negative || v < 0;
      return static_cast<uint64_t>(v) < nbins;
    };
    if constexpr (std::is_same_v<W, void>) {
      if (copies == 4) {
        Acc* h1 = h + p.bins;
        Acc* h2 = h1 + p.bins;
        Acc* h3 = h2 + p.bins;
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) {
          const int64_t v0 = x[i], v1 = x[i + 1], v2 = x[i + 2], v3 = x[i + 3];
          if (see(v0)) ++h[v0];
          if (see(v1)) ++h1[v1];
          if (see(v2)) ++h2[v2];
          if (see(v3)) ++h3[v3];
        }
        for (; i < i1; ++i)
          if (see(x[i])) ++h[x[i]];
      } else {
        for (int64_t i = i0; i < i1; ++i)
          if (see(x[i])) ++h[x[i]];
      }
    } else {
      const W* w = static_cast<const W*>(p.weights);
      for (int64_t i = i0; i < i1; ++i)
        if (see(x[i])) h[x[i]] += static_cast<double>(w[i]);
    }
  }
  if (p.range != nullptr) {
    p.range[0] = negative ? 1 : 0;
    p.range[1] = hi;
  }
#pragma omp parallel for schedule(static) if (p.bins * slots >= kParallelGrain)
  for (int64_t b = 0; b < p.bins; ++b) {
    Acc sum = part[static_cast<size_t>(b)];
    for (int t = 1; t < slots; ++t) sum += part[static_cast<size_t>(t) * static_cast<size_t>(p.bins) + static_cast<size_t>(b)];
    out[b] = static_cast<Out>(sum);
  }
}

void bincount(const BincountParams& p) {
  auto with_input = [&](auto itag) {
    using I = typename decltype(itag)::type;
    if (p.weights == nullptr) bincount_typed<I, void, int64_t>(p);
    else if (p.out_dtype == kFloat32) bincount_typed<I, float, float>(p);
    else bincount_typed<I, double, double>(p);
  };
  if (p.x_dtype == kInt32) with_input(TypeTag<int32_t>{});
  else with_input(TypeTag<int64_t>{});
}

// nonzero: chunks counted over the team, offsets by one serial scan, rows written per chunk.
void nonzero_count(const NonzeroParams& p) {
  parallel_for(p.chunks, p.n >= kParallelGrain, [&](int64_t c) {
    const int64_t b = c * p.chunk, e = std::min(p.n, b + p.chunk);
    int64_t k = 0;
    for (int64_t i = b; i < e; ++i) k += p.mask[i] != 0;
    p.counts[c] = k;
  });
  int64_t total = 0;
  for (int64_t c = 0; c < p.chunks; ++c) {
    const int64_t k = p.counts[c];
    p.counts[c] = total;
    total += k;
  }
  p.counts[p.chunks] = total;
}

void nonzero_fill(const NonzeroParams& p) {
  parallel_for(p.chunks, p.n >= kParallelGrain, [&](int64_t c) {
    int64_t* row = p.out + p.counts[c] * p.ndim;
    const int64_t b = c * p.chunk, e = std::min(p.n, b + p.chunk);
    for (int64_t i = b; i < e; ++i) {
      if (!p.mask[i]) continue;
      for (int64_t d = p.ndim - 1, r = i; d >= 0; --d) {
        row[d] = r % p.sizes[d];
        r /= p.sizes[d];
      }
      row += p.ndim;
    }
  });
}

}  // namespace anvil::cpu

namespace anvil::cpu {

void cache_write(const CacheWriteParams& p) {
  const size_t row_bytes = static_cast<size_t>(p.cols * p.elem_size);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t start = p.pos[b];
    for (int64_t h = 0; h < p.n_heads; ++h)
      for (int64_t l = 0; l < p.rows; ++l) {
        const int64_t row = start + l;
        if (row < 0 || row >= p.cache_rows) continue;
        char* dst = static_cast<char*>(p.cache) +
                    (b * p.stride_cache[0] + h * p.stride_cache[1] + row * p.stride_cache[2]) * p.elem_size;
        const char* src = static_cast<const char*>(p.src) +
                          (b * p.stride_src[0] + h * p.stride_src[1] + l * p.stride_src[2]) * p.elem_size;
        std::memcpy(dst, src, row_bytes);
      }
  }
}

}  // namespace anvil::cpu
