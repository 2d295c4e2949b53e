#include "ops/iter.h"

#include <algorithm>

#include "core/util.h"

namespace anvil {

ScalarArg to_scalar_arg(const Scalar& s) {
  ScalarArg a;
  std::complex<double> c = s.to_complex();
  a.f = c.real();
  a.im = c.imag();
  a.i = s.is_floating_point() || s.is_complex() ? s.to_int64() : static_cast<int64_t>(s.to_uint64());
  return a;
}

Tensor empty_preserving(const Tensor& x, TensorOptions o) {
  if (x.is_non_overlapping_and_dense() && !x.is_contiguous()) return empty_strided(x.sizes(), x.strides(), o);
  return empty(x.sizes(), o, x.suggest_memory_format());
}

Tensor empty_elementwise(const Shape& shape, TensorOptions opts, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins) {
    if (t->sizes() != shape) continue;
    if (!t->is_contiguous() && t->is_non_overlapping_and_dense()) return empty_strided(shape, t->strides(), opts);
    break;
  }
  return empty(shape, opts);
}

ElementwiseParams make_elementwise(const char* op, const Tensor& out, std::initializer_list<const Tensor*> ins) {
  ElementwiseParams p;
  const Shape& shape = out.sizes();
  int ndim = static_cast<int>(shape.size());
  ANVIL_CHECK(ndim <= kMaxDims, ShapeError, op, " at most ", kMaxDims, " dims are supported, got ", ndim);
  p.nargs = 1 + static_cast<int>(ins.size());
  p.numel = out.numel();
  p.out_dtype = out.dtype();

  // Per-slot strides over the output's dims (0 where broadcast).
  int64_t strides[4][kMaxDims] = {};
  p.ptr[0] = out.raw_data_ptr();
  for (int d = 0; d < ndim; ++d) strides[0][d] = out.strides()[d];
  int slot = 1;
  for (const Tensor* t : ins) {
    Tensor e = t->expand(shape);
    p.ptr[slot] = e.raw_data_ptr();
    for (int d = 0; d < ndim; ++d) strides[slot][d] = e.strides()[d];
    p.dtype = t->dtype();
    ++slot;
  }
  if (ins.size() == 0) p.dtype = out.dtype();

  // Walk the dims in the output's memory order (its strides descending, as TensorIterator
  // reorders them): an elementwise result does not depend on the order, and a channels-last
  // output with channels-last inputs then merges into one dense run like a contiguous one.
  int order[kMaxDims];
  int n_order = 0;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] != 1) order[n_order++] = d;
  std::stable_sort(order, order + n_order, [&](int a, int b) { return strides[0][a] > strides[0][b]; });
  // Drop size-1 dims, then merge dim d into the running dim when contiguous in every slot.
  int nd = 0;
  for (int i = 0; i < n_order; ++i) {
    const int d = order[i];
    if (nd > 0) {
      bool mergeable = true;
      for (int s = 0; s < p.nargs; ++s)
        if (p.strides[s][nd - 1] != strides[s][d] * shape[d]) mergeable = false;
      if (mergeable) {
        p.sizes[nd - 1] *= shape[d];
        for (int s = 0; s < p.nargs; ++s) p.strides[s][nd - 1] = strides[s][d];
        continue;
      }
    }
    p.sizes[nd] = shape[d];
    for (int s = 0; s < p.nargs; ++s) p.strides[s][nd] = strides[s][d];
    ++nd;
  }
  p.ndim = nd;
  p.contiguous = true;
  if (nd > 1) p.contiguous = false;
  if (nd == 1)
    for (int s = 0; s < p.nargs; ++s)
      if (p.strides[s][0] != 1) p.contiguous = false;
  return p;
}

}  // namespace anvil
