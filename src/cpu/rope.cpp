// CPU neox-style rotary embedding: one task per row of the leading dims, angle =
// float(pos) * inv_freq[c] in float32, rotation in float32 (float64 for float64).
#include <cmath>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"
#include "cpu/loop.h"

namespace anvil::cpu {

void rope(const RopeParams& p) {
  dispatch_float_types(p.dtype, "[rope]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T* x = static_cast<const T*>(p.x);
    T* out = static_cast<T*>(p.out);
    const int64_t half = p.rotary_dim / 2;
#pragma omp parallel for schedule(static) if (p.rows * p.head_dim >= kParallelGrain)
    for (int64_t row = 0; row < p.rows; ++row) {
      int64_t ox = 0, oo = 0, op = 0, rem = row;
      for (int d = p.ndim - 1; d >= 0; --d) {
        const int64_t idx = rem % p.sizes[d];
        rem /= p.sizes[d];
        ox += idx * p.stride_x[d];
        oo += idx * p.stride_out[d];
        op += idx * p.stride_pos[d];
      }
      const int64_t pos = p.pos_dtype == DType::Int32 ? static_cast<const int32_t*>(p.positions)[op]
                                                       : static_cast<const int64_t*>(p.positions)[op];
      const float fpos = static_cast<float>(pos);
      const T* xr = x + ox;
      T* yr = out + oo;
      for (int64_t c = 0; c < half; ++c) {
        const float angle = fpos * p.inv_freq[c];
        const A cs = std::cos(static_cast<A>(angle)), sn = std::sin(static_cast<A>(angle));
        const A a = static_cast<A>(xr[c]), b = static_cast<A>(xr[c + half]);
        yr[c] = convert<T>(a * cs - b * sn);
        yr[c + half] = convert<T>(b * cs + a * sn);
      }
      for (int64_t c = p.rotary_dim; c < p.head_dim; ++c) yr[c] = xr[c];
    }
  });
}

}  // namespace anvil::cpu
