// CPU neox-style rotary embedding: one task per row of the leading dims, angle =
// float(pos) * inv_freq[c] in float32, rotation in float32 (float64 for float64). Rows that
// share a position (the heads of one token) reuse the cos / sin table of the previous row;
// low-precision rows are widened and rounded back with the SIMD converters.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"
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

template <typename A>
void rotate(const A* x, A* y, const A* cs, const A* sn, int64_t half) {
  for (int64_t c = 0; c < half; ++c) {
    const A a = x[c], b = x[c + half];
    y[c] = a * cs[c] - b * sn[c];
    y[c + half] = b * cs[c] + a * sn[c];
  }
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
        const float fpos = static_cast<float>(pos);
        for (int64_t c = 0; c < half; ++c) {
          const float angle = fpos * p.inv_freq[c];
          cs[static_cast<size_t>(c)] = std::cos(static_cast<A>(angle));
          sn[static_cast<size_t>(c)] = std::sin(static_cast<A>(angle));
        }
        table_pos = pos;
      }
      const char* xr = static_cast<const char*>(p.x) + static_cast<size_t>(o.x) * es;
      char* yr = static_cast<char*>(p.out) + static_cast<size_t>(o.out) * es;
      if constexpr (std::is_same_v<A, double>) {
        rotate(reinterpret_cast<const double*>(xr), reinterpret_cast<double*>(yr), cs.data(), sn.data(), half);
        for (int64_t c = p.rotary_dim; c < d; ++c) reinterpret_cast<double*>(yr)[c] = reinterpret_cast<const double*>(xr)[c];
      } else {
        simd::decode_f32(p.dtype, xr, a.data(), d);
        rotate(a.data(), y.data(), cs.data(), sn.data(), half);
        for (int64_t c = p.rotary_dim; c < d; ++c) y[static_cast<size_t>(c)] = a[static_cast<size_t>(c)];
        simd::encode_f32(p.dtype, y.data(), yr, d);
      }
    }
  }
}

}  // namespace

void rope(const RopeParams& p) {
  if (p.dtype == DType::Float64) rope_rows<double>(p);
  else rope_rows<float>(p);
}

}  // namespace anvil::cpu
