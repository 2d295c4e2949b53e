#pragma once
// Indexing references (indices are held as doubles: exact for |i| < 2^53).
#include "reference/ref_array.h"

namespace ref {

// out[..., j, ...] = x[..., index[j], ...] along `dim`; negative indices are not accepted.
Array index_select(const Array& x, int64_t dim, const Array& index);
// out[p] = x[p with p[dim] = index[p]], p over index's shape.
Array gather(const Array& x, int64_t dim, const Array& index);
// copy of x with x[p with p[dim] = index[p]] = src[p] (src may be larger than index).
Array scatter(const Array& x, int64_t dim, const Array& index, const Array& src);
Array scatter_value(const Array& x, int64_t dim, const Array& index, double value);
Array scatter_add(const Array& x, int64_t dim, const Array& index, const Array& src);
// x where mask (broadcast to x) is zero, `value` elsewhere.
Array masked_fill(const Array& x, const Array& mask, double value);
// weight [V, D], indices of any shape -> indices.shape + [D].
Array embedding(const Array& weight, const Array& indices);

}  // namespace ref
