// CPU topk and token sampling.
// topk: per row of [outer, dim, inner], (key, index) pairs ranked by key descending, then index
// ascending. The key orders the dtype's values as unsigned integers, with every NaN above +inf
// and -0 equal to +0; smallest takes its complement, so NaN ranks last. std::partial_sort
// (sorted) or std::nth_element (unsorted); rows in parallel.
// sample: per row with the same ranking; weights in float32 (sample_exp), sums in double. Keys,
// weights and the pick (top-p cut, inverse CDF, sums in rank order) are core/sampling.h, shared
// with the CUDA top-k path, so both backends draw the same token bit for bit there.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/topk.h"
#include "cpu/simd.h"
#include "core/philox.h"
#include "core/sampling.h"

namespace anvil::cpu {
namespace {

// Below this many elements in all, one thread does the work.
constexpr int64_t kParallelElements = 16384;

using sampling::float_key;
using sampling::order_key;
using sampling::sample_exp;

template <typename K>
struct Ranked {
  K key;
  int64_t idx;
};
template <typename K>
bool ranks_before(const Ranked<K>& a, const Ranked<K>& b) {
  return a.key > b.key || (a.key == b.key && a.idx < b.idx);
}

template <typename T>
void topk_typed(const TopkParams& p) {
  using K = decltype(order_key(T{}));
  const T* in = static_cast<const T*>(p.in);
  T* values = static_cast<T*>(p.values);
  const int64_t n = p.dim_size, inner = p.inner, k = p.k, rows = p.outer * p.inner;
  const K flip = p.largest ? K{0} : ~K{0};
#pragma omp parallel if (rows > 1 && rows * n >= kParallelElements)
  {
    std::vector<Ranked<K>> items;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      items.resize(static_cast<size_t>(n));
      const int64_t o = r / inner, i = r % inner;
      const T* x = in + o * n * inner + i;
      for (int64_t j = 0; j < n; ++j)
        items[static_cast<size_t>(j)] = {static_cast<K>(order_key(x[j * inner]) ^ flip), j};
      if (p.sorted)
        std::partial_sort(items.begin(), items.begin() + k, items.end(), ranks_before<K>);
      else if (k < n)
        std::nth_element(items.begin(), items.begin() + (k - 1), items.end(), ranks_before<K>);
      for (int64_t s = 0; s < k; ++s) {
        const int64_t j = items[static_cast<size_t>(s)].idx, at = (o * k + s) * inner + i;
        values[at] = x[j * inner];
        p.indices[at] = j;
      }
    }
  }
}

// ---- sampling (order keys, weights and the pick come from core/sampling.h, shared with CUDA)

// The token among c >= 1 candidates with logits xs in rank order (ids: their token ids, null: the
// position): e = exp((x - m) / t) in float; keep the prefix whose mass before each token is
// < top_p * sum (top_p 1: all); the first token whose running sum exceeds u * (kept mass); when
// rounding leaves none (or the logits hold NaN), the last kept token of positive weight (else the
// first). Sums in double, in order. `e` holds c.
int64_t pick_ranked(const float* xs, const int64_t* ids, int64_t c, float m, float t, float top_p, float u, float* e) {
  for (int64_t j = 0; j < c; ++j) e[j] = sample_exp((xs[j] - m) / t);
  const int64_t j = sampling::pick_position<int64_t>(e, c, top_p, u);
  return ids ? ids[j] : j;
}

// (sizing all five for a 151936 vocabulary cost ~3 ms per call).
struct SampleScratch {
  std::vector<float> x, xs, e;
  std::vector<int64_t> ids;
  std::vector<Ranked<uint32_t>> items;
};
template <typename V>
void grow(V& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

int64_t sample_row(const SampleParams& p, const float* x, float u, SampleScratch& s) {
  const int64_t n = p.vocab;
  // argmax: NaN first, then the lowest index of the largest value (float_key's order).
  if (p.top_k == 1) return simd::argmax_f32(x, n);
  if (p.top_k == 0 && p.top_p >= 1.0f) {  // no cut: the whole row in index order
    grow(s.e, n);
    const int64_t best = simd::argmax_f32(x, n);
    return pick_ranked(x, nullptr, n, x[best], p.temperature, 1.0f, u, s.e.data());
  }
  const int64_t c = p.top_k > 0 ? p.top_k : n;
  grow(s.items, n);
  grow(s.ids, c);
  grow(s.xs, c);
  grow(s.e, c);
  for (int64_t j = 0; j < n; ++j) s.items[static_cast<size_t>(j)] = {float_key(x[j]), j};
  std::partial_sort(s.items.begin(), s.items.begin() + c, s.items.end(), ranks_before<uint32_t>);
  for (int64_t j = 0; j < c; ++j) {
    s.ids[static_cast<size_t>(j)] = s.items[static_cast<size_t>(j)].idx;
    s.xs[static_cast<size_t>(j)] = x[s.items[static_cast<size_t>(j)].idx];
  }
  return pick_ranked(s.xs.data(), s.ids.data(), c, s.xs[0], p.temperature, p.top_p, u, s.e.data());
}

}  // namespace

void topk(const TopkParams& p) {
  dispatch_real_types(p.dtype, "[topk]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, Complex64> && !std::is_same_v<T, Float8_e4m3fn> &&
                  !std::is_same_v<T, Float8_e5m2>)
      topk_typed<T>(p);
  });
}

void sample(const SampleParams& p) {
  const uint64_t seed = static_cast<uint64_t>(p.rng_state[0]), counter = static_cast<uint64_t>(p.rng_state[1]);
  const int64_t n = p.vocab;
  const size_t elem = element_size(p.dtype);
  const char* logits = static_cast<const char*>(p.logits);
#pragma omp parallel if (p.rows > 1 && p.rows * n >= kParallelElements)
  {
    SampleScratch s;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const void* row = logits + static_cast<size_t>(r * p.stride_row) * elem;
      const float* x = static_cast<const float*>(row);
      if (p.dtype != DType::Float32) {
        grow(s.x, n);
        simd::decode_f32(p.dtype, row, s.x.data(), n);
        x = s.x.data();
      }
      const float u = static_cast<float>(philox_uniform(seed, counter + static_cast<uint64_t>(r), 24));
      p.out[r] = sample_row(p, x, u, s);
    }
  }
  p.rng_state[1] = static_cast<int64_t>(counter + static_cast<uint64_t>(p.rows));
}

}  // namespace anvil::cpu
