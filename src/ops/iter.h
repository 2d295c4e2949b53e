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

}  // namespace anvil
