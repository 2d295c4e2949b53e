// CPU silu_mul: out = silu(gate) * up in float32 (float64 for float64), one rounding.
#include <cmath>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"
#include "cpu/loop.h"

namespace anvil::cpu {

void silu_mul(const SiluMulParams& p) {
  dispatch_float_types(p.dtype, "[silu_mul]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T* gate = static_cast<const T*>(p.gate);
    const T* up = static_cast<const T*>(p.up);
    T* out = static_cast<T*>(p.out);
    const int64_t cols = p.cols;
#pragma omp parallel for schedule(static) if (p.rows * cols >= kParallelGrain)
    for (int64_t r = 0; r < p.rows; ++r) {
      const T* g = gate + r * p.stride_gate_row;
      const T* u = up + r * p.stride_up_row;
      T* y = out + r * p.stride_out_row;
      for (int64_t c = 0; c < cols; ++c) {
        const A v = static_cast<A>(g[c]);
        y[c] = convert<T>(v / (A(1) + std::exp(-v)) * static_cast<A>(u[c]));
      }
    }
  });
}

}  // namespace anvil::cpu
