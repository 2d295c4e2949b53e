// CPU neox-style rotary embedding: one task per row of the leading dims, angle =
// float(pos) * inv_freq[c] in float32, rotation in float32 (float64 for float64). Rows that
// share a position (the heads of one token) reuse the cos / sin table of the previous row;
// low-precision rows are widened and rounded back with the SIMD converters.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/rope.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

struct RowOffsets {
  int64_t x = 0, out = 0, pos = 0;
};
RowOffsets row_offsets(const RopeParams& p, int64_t row) {
  RowOffsets o;
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t idx = row % p.sizes[d];
    row /= p.sizes[d];
    o.x += idx * p.stride_x[d];
    o.out += idx * p.stride_out[d];
    o.pos += idx * p.stride_pos[d];
  }
  return o;
}

int64_t position(const RopeParams& p, int64_t offset) {
  return p.pos_dtype == DType::Int32 ? static_cast<const int32_t*>(p.positions)[offset]
                                     : static_cast<const int64_t*>(p.positions)[offset];
}

// cos / sin of the float32 angles float(pos) * inv_freq[c], c < half.
template <typename A>
void angle_table(int64_t pos, const float* inv_freq, int64_t half, A* cs, A* sn) {
  const float fpos = static_cast<float>(pos);
  for (int64_t c = 0; c < half; ++c) {
    const float angle = fpos * inv_freq[c];
    cs[c] = std::cos(static_cast<A>(angle));
    sn[c] = std::sin(static_cast<A>(angle));
  }
}

template <typename A>
void rotate(const A* x, A* y, const A* cs, const A* sn, int64_t half) {
  for (int64_t c = 0; c < half; ++c) {
    const A a = x[c], b = x[c + half];
    y[c] = a * cs[c] - b * sn[c];
    y[c + half] = b * cs[c] + a * sn[c];
  }
}

// A row of n elements of `dtype` widened to A / rounded back from A.
template <typename A>
void load_row(DType dtype, const void* src, A* out, int64_t n) {
  if constexpr (std::is_same_v<A, double>) {
    if (dtype == DType::Float64) std::memcpy(out, src, static_cast<size_t>(n) * sizeof(double));
    else for (int64_t c = 0; c < n; ++c) out[c] = static_cast<const float*>(src)[c];  // float32 weights
  } else {
    simd::decode_f32(dtype, src, out, n);
  }
}
template <typename A>
void store_row(DType dtype, const A* in, void* dst, int64_t n) {
  if constexpr (std::is_same_v<A, double>) std::memcpy(dst, in, static_cast<size_t>(n) * sizeof(double));
  else simd::encode_f32(dtype, in, dst, n);
}

// y = the rotation of row a (rotary_dim = 2 half columns), the columns past it copied.
template <typename A>
void rotate_row(const A* a, A* y, const A* cs, const A* sn, int64_t half, int64_t d) {
  rotate(a, y, cs, sn, half);
  for (int64_t c = 2 * half; c < d; ++c) y[c] = a[c];
}

template <typename A>
void rope_rows(const RopeParams& p) {
  const int64_t half = p.rotary_dim / 2, d = p.head_dim;
  const size_t es = element_size(p.dtype);
#pragma omp parallel if (p.rows * d >= kParallelGrain)
  {
    std::vector<A> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half)), a(static_cast<size_t>(d)),
        y(static_cast<size_t>(d));
    int64_t table_pos = std::numeric_limits<int64_t>::min();
#pragma omp for schedule(static)
    for (int64_t row = 0; row < p.rows; ++row) {
      const RowOffsets o = row_offsets(p, row);
      const int64_t pos = position(p, o.pos);
      if (pos != table_pos) {
        angle_table(pos, p.inv_freq, half, cs.data(), sn.data());
        table_pos = pos;
      }
      const char* xr = static_cast<const char*>(p.x) + static_cast<size_t>(o.x) * es;
      char* yr = static_cast<char*>(p.out) + static_cast<size_t>(o.out) * es;
      load_row(p.dtype, xr, a.data(), d);
      rotate_row(a.data(), y.data(), cs.data(), sn.data(), half, d);
      store_row(p.dtype, y.data(), yr, d);
    }
  }
}

// One task per (batch, token, head) row; the heads of a token share its cos / sin table. q / k
// rows are normed as rms_norm computes them (float32, or float64, sum of squares then
// x * inv * weight), rounded to the dtype, and rotated as rope_rows.
template <typename A>
void qk_norm_rope_cache_rows(const QkNormRopeCacheParams& p) {
  const int64_t D = p.head_dim, half = p.rotary_dim / 2, per_token = p.n_heads + 2 * p.n_kv_heads;
  const int64_t rows = p.batch * p.len * per_token;
  const size_t es = element_size(p.dtype);
  std::vector<A> qw(p.q_weight ? static_cast<size_t>(D) : 0), kw(p.k_weight ? static_cast<size_t>(D) : 0);
  if (p.q_weight) load_row(p.weight_dtype, p.q_weight, qw.data(), D);
  if (p.k_weight) load_row(p.weight_dtype, p.k_weight, kw.data(), D);
#pragma omp parallel if (rows * D >= kParallelGrain)
  {
    std::vector<A> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half)), a(static_cast<size_t>(D)),
        y(static_cast<size_t>(D));
    std::vector<char> rounded(static_cast<size_t>(D) * es);
    int64_t table_pos = std::numeric_limits<int64_t>::min();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t j = r % per_token, bl = r / per_token, l = bl % p.len, b = bl / p.len;
      const int64_t pos = static_cast<int64_t>(p.start[b]) + l;
      const char* x = static_cast<const char*>(p.qkv) + static_cast<size_t>(b * p.stride_qkv[0] + l * p.stride_qkv[1] + j * D) * es;
      const bool is_q = j < p.n_heads, is_k = !is_q && j < p.n_heads + p.n_kv_heads;
      char* dst;
      if (is_q) {
        dst = static_cast<char*>(p.q_out) + static_cast<size_t>(((b * p.n_heads + j) * p.len + l) * D) * es;
      } else {
        if (pos < 0 || pos >= p.cache_rows) continue;
        const int64_t h = is_k ? j - p.n_heads : j - p.n_heads - p.n_kv_heads;
        const int64_t* st = is_k ? p.stride_k : p.stride_v;
        dst = static_cast<char*>(is_k ? p.k_cache : p.v_cache) + static_cast<size_t>(b * st[0] + h * st[1] + pos * st[2]) * es;
        if (!is_k) {
          std::memcpy(dst, x, static_cast<size_t>(D) * es);
          continue;
        }
      }
      load_row(p.dtype, x, a.data(), D);
      const std::vector<A>& w = is_q ? qw : kw;
      if (is_q ? p.q_weight : p.k_weight) {
        A ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < D; ++c) ss += a[static_cast<size_t>(c)] * a[static_cast<size_t>(c)];
        const A inv = A(1) / std::sqrt(ss / static_cast<A>(D) + static_cast<A>(p.eps));
        for (int64_t c = 0; c < D; ++c) a[static_cast<size_t>(c)] = a[static_cast<size_t>(c)] * inv * w[static_cast<size_t>(c)];
        store_row(p.dtype, a.data(), rounded.data(), D);  // the composition's rounding of the normed row
        load_row(p.dtype, rounded.data(), a.data(), D);
      }
      if (pos != table_pos) {
        angle_table(pos, p.inv_freq, half, cs.data(), sn.data());
        table_pos = pos;
      }
      rotate_row(a.data(), y.data(), cs.data(), sn.data(), half, D);
      store_row(p.dtype, y.data(), dst, D);
    }
  }
}

}  // namespace

void rope(const RopeParams& p) {
  if (p.dtype == DType::Float64) rope_rows<double>(p);
  else rope_rows<float>(p);
}

void qk_norm_rope_cache(const QkNormRopeCacheParams& p) {
  if (p.dtype == DType::Float64) qk_norm_rope_cache_rows<double>(p);
  else qk_norm_rope_cache_rows<float>(p);
}

}  // namespace anvil::cpu
