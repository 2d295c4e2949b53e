#pragma once
// Reduction references: plain loops in float64 over the reduced multi-indices.
#include "reference/ref_array.h"

namespace ref {

enum class Red { Sum, Mean, Prod, Amax, Amin, Var, Std, AbsSum, SumSq };

// Reduces `dims` (empty = all dims) with PyTorch's semantics: amax/amin propagate NaN, mean of
// nothing is NaN, var/std divide by max(0, n - correction). AbsSum (sum of |x|) and SumSq are
// for tolerances.
Array reduce(const Array& x, const Shape& dims, bool keepdim, Red op, double correction = 1.0);

struct ValuesIndices {
  Array values;
  Array indices;
};
// max/min over one dim: the first index of the extreme value; a NaN wins (the first NaN).
ValuesIndices max_min_dim(const Array& x, int64_t dim, bool keepdim, bool is_max);
// argmax/argmin over the flattened input (dim = nullopt in PyTorch).
int64_t arg_extreme_flat(const Array& x, bool is_max);

// The number of elements that reduce into each output.
int64_t reduction_length(const Shape& sizes, const Shape& dims);

}  // namespace ref
