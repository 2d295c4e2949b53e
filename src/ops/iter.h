#pragma once
// Builds the iteration space of an elementwise launch: inputs broadcast to the output's shape
// (stride 0), size-1 dims dropped, neighbouring dims merged where every slot allows it.
#include <initializer_list>

#include "anvil/tensor.h"
#include "core/kernels/elementwise.h"

namespace anvil {

// `out` is slot 0, `ins` slots 1..; every input must be broadcastable to out's shape.
ElementwiseParams make_elementwise(const char* op, const Tensor& out, std::initializer_list<const Tensor*> ins);
ScalarArg to_scalar_arg(const Scalar& s);
// An uninitialised tensor shaped as x with options o, laid out as torch's preserve_format lays
// out a copy (clone, to, the *_like factories): x's strides when x is non-overlapping and dense,
// else dense in x.suggest_memory_format()'s order.
Tensor empty_preserving(const Tensor& x, TensorOptions o);
// The output of an elementwise op of shape `shape`: laid out as the first input of that full
// shape when it is non-overlapping and dense (channels-last in, channels-last out, as torch's
// TensorIterator orders the output by its operands' strides), else contiguous.
Tensor empty_elementwise(const Shape& shape, TensorOptions opts, std::initializer_list<const Tensor*> ins);

}  // namespace anvil
