#pragma once
// Matrix product references: triple loops in float64.
#include "reference/ref_array.h"

namespace ref {

Array mm(const Array& a, const Array& b);   // [m, k] x [k, n]
Array bmm(const Array& a, const Array& b);  // [B, m, k] x [B, k, n]
// torch.matmul: 1-D x 1-D dot; 1-D operands get a dim prepended / appended and removed after;
// batch dims broadcast.
Array matmul(const Array& a, const Array& b);
// Same as matmul on |a| and |b|: the scale of each output's rounding error.
Array matmul_abs(const Array& a, const Array& b);

}  // namespace ref
