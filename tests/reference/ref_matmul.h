#pragma once
// Matrix product references: triple loops in float64.
#include <vector>

#include "reference/ref_array.h"

namespace ref {

Array mm(const Array& a, const Array& b);   // [m, k] x [k, n]
Array bmm(const Array& a, const Array& b);  // [B, m, k] x [B, k, n]
// torch.matmul: 1-D x 1-D dot; 1-D operands get a dim prepended / appended and removed after;
// batch dims broadcast.
Array matmul(const Array& a, const Array& b);
// Same as matmul on |a| and |b|: the scale of each output's rounding error.
Array matmul_abs(const Array& a, const Array& b);

// scaled_mm: (a [m, k] @ b [k, n]) * sa(i) * sb(j) + bias[j]; sa / sb hold one value or one
// per row of a / column of b; bias null or [n].
Array scaled_mm(const Array& a, const Array& b, const std::vector<double>& sa, const std::vector<double>& sb,
                const Array* bias = nullptr);

// scaled_mm's block-wise recipes: sum over the 128-column blocks l of k of sa(i, l) sb(l, j)
// times that block's part of the dot, + bias[j]. sa [ceil(m / a_rows), L] (a_rows = 1 or 128),
// sb [L, ceil(n / b_cols)] (b_cols = 1 or 128), L = ceil(k / 128).
Array scaled_mm_blocks(const Array& a, const Array& b, const Array& sa, int64_t a_rows, const Array& sb,
                       int64_t b_cols, const Array* bias = nullptr);

// grouped_mm in its four layouts, chosen by the ranks as in anvil::grouped_mm; offs (cumulative
// group ends, empty for 3-D x 3-D) clamped to [0, extent], group g = [e_{g-1}, e_g). Elements the
// op does not write (rows / columns past the last end) are NaN. Optional FP8-style scales
// (rows by group only): sa [m] per row of a, sb [G, n] per group and column.
Array grouped_mm(const Array& a, const Array& b, const std::vector<int64_t>& offs,
                 const std::vector<double>* sa = nullptr, const Array* sb = nullptr);

}  // namespace ref
