#pragma once
// Padding references, written from the definitions rather than from the kernels' index maps:
// reflection mirrors until the index lands inside, circular follows PyTorch's _pad_circular
// (crop, then copy slices of the output into its own borders dim by dim), and every backward
// is the scatter-add of the forward's map (the kernels gather instead).
#include "reference/ref_array.h"

namespace ref {

enum class PadKind { Constant, Reflect, Replicate, Circular };

// pad lists (before, after) pairs from the last dim backwards, as F.pad; negatives crop.
Array pad(const Array& x, const Shape& pad, PadKind kind, double value = 0.0);
// d(sum(w * pad(x))) / dx for grad_output w (the padded shape) and an input of `in_sizes`.
Array pad_backward(const Array& grad_output, const Shape& in_sizes, const Shape& pad, PadKind kind);

}  // namespace ref
