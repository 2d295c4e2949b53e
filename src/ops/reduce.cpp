// Reductions over dims with keepdim. Integer sums and products give int64 like PyTorch;
// low-precision floats accumulate in float32 (the backends pick the accumulator from the dtype).
#include <algorithm>
#include <cmath>

#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/reduce.h"
#include "core/util.h"

namespace anvil {
namespace {

const char* reduce_name(ReduceOp op) {
  static const char* kNames[] = {"[sum]", "[prod]", "[mean]", "[amax]", "[amin]", "[max]",
                                 "[min]", "[argmax]", "[argmin]", "[var]", "[std]"};
  return kNames[static_cast<int>(op)];
}

// Appends (size, stride) to a dim list, merging into the previous dim when contiguous with it.
void push_dim(int& n, int64_t* sizes, int64_t* strides, int64_t size, int64_t stride) {
  if (size == 1) return;
  if (n > 0 && strides[n - 1] == stride * size) {
    sizes[n - 1] *= size;
    strides[n - 1] = stride;
    return;
  }
  sizes[n] = size;
  strides[n] = stride;
  ++n;
}

struct Reduced {
  Tensor values, indices, mean;  // mean: var_mean / std_mean
};

Reduced reduce(ReduceOp op, const Tensor& x_in, const Shape& dims_in, bool keepdim, std::optional<DType> dtype,
               double correction = 1, const char* name_override = nullptr, bool with_mean = false) {
  const char* name = name_override ? name_override : reduce_name(op);
  ANVIL_CHECK(x_in.defined(), Error, name, " undefined tensor");
  Tensor x = x_in;
  if (dtype) x = x.to(*dtype);
  DType in = x.dtype();
  bool want_index = op == ReduceOp::Max || op == ReduceOp::Min || op == ReduceOp::Argmax || op == ReduceOp::Argmin;
  bool ordered = op == ReduceOp::Amax || op == ReduceOp::Amin || want_index;

  DType out_dtype = in;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
      dispatch_arith_types(in, name, [](auto) {});
      if (is_integral(in, true)) out_dtype = kInt64;
      break;
    case ReduceOp::Mean:
    case ReduceOp::Var:
    case ReduceOp::Std:
      ANVIL_CHECK(is_floating_point(in) || is_complex(in), DTypeError, name,
                  " could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ",
                  dtype_name(in));
      dispatch_float_types(in, name, [](auto) {});
      break;
    default:
      dispatch_real_types(in, name, [](auto) {});
      if (op == ReduceOp::Argmax || op == ReduceOp::Argmin) out_dtype = kInt64;
  }

  int64_t nd = x.dim();
  std::vector<bool> reduced(std::max<int64_t>(nd, 1), dims_in.empty());
  std::vector<bool> seen(reduced.size(), false);
  for (int64_t d : dims_in) {
    int64_t w = wrap_dim(d, nd, name);
    ANVIL_CHECK(!seen[w], ShapeError, name, " dim ", w, " appears multiple times in the list of dims");
    seen[w] = true;
    reduced[w] = true;
  }

  ReduceParams p;
  p.op = op;
  p.in_dtype = in;
  p.out_dtype = out_dtype;
  p.correction = correction;
  Shape out_shape;
  // The reduced dims in the input's memory order (strides descending, as TensorIterator orders
  // them), so that a channels-last or permuted input reduces over dense runs; not for the ops
  // that return an index, whose ties go to the first element in logical order.
  std::vector<int64_t> red_dims;
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[d]) red_dims.push_back(d);
  if (!want_index)
    std::stable_sort(red_dims.begin(), red_dims.end(), [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  for (int64_t d : red_dims) {
    push_dim(p.red_ndim, p.red_sizes, p.red_strides, x.size(d), x.stride(d));
    p.n_red *= x.size(d);
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.size(d));
      push_dim(p.out_ndim, p.out_sizes, p.out_strides, x.size(d), x.stride(d));
      p.n_out *= x.size(d);
    }
  }
  if (ordered && p.n_red == 0)
    throw IndexError(detail::cat_message(name, " Expected reduction dim to be specified for input.numel() == 0 / cannot "
                                         "reduce over a zero-size dimension of ", describe(x)));
  Reduced r;
  r.values = empty(out_shape, TensorOptions(op == ReduceOp::Argmax || op == ReduceOp::Argmin ? kInt64 : out_dtype).device(x.device()));
  if (want_index) r.indices = empty(out_shape, TensorOptions(kInt64).device(x.device()));
  if (with_mean) r.mean = empty(out_shape, TensorOptions(out_dtype).device(x.device()));
  if (p.n_out == 0) return r;
  if (with_mean) p.out_mean = r.mean.raw_data_ptr();
  p.in = x.raw_data_ptr();
  p.out = r.values.raw_data_ptr();
  if (want_index) p.out_index = static_cast<int64_t*>(r.indices.raw_data_ptr());
  ANVIL_KERNEL(x.device(), reduce, p);
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  return reduce(ReduceOp::Sum, x, dims, keepdim, dtype).values;
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  return reduce(ReduceOp::Mean, x, dims, keepdim, dtype).values;
}
Tensor prod(const Tensor& x, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  return reduce(ReduceOp::Prod, x, dims, keepdim, dtype).values;
}
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(ReduceOp::Amax, x, dims, keepdim, {}).values; }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(ReduceOp::Amin, x, dims, keepdim, {}).values; }
Tensor max(const Tensor& x) { return reduce(ReduceOp::Amax, x, {}, false, {}, 1, "[max]").values; }
Tensor min(const Tensor& x) { return reduce(ReduceOp::Amin, x, {}, false, {}, 1, "[min]").values; }
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  Reduced r = reduce(ReduceOp::Max, x, {dim}, keepdim, {});
  return {r.values, r.indices};
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  Reduced r = reduce(ReduceOp::Min, x, {dim}, keepdim, {});
  return {r.values, r.indices};
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return reduce(ReduceOp::Argmax, x.reshape({-1}), {0}, false, {}).values.reshape(keepdim ? Shape(x.dim(), 1) : Shape{});
  return reduce(ReduceOp::Argmax, x, {*dim}, keepdim, {}).values;
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return reduce(ReduceOp::Argmin, x.reshape({-1}), {0}, false, {}).values.reshape(keepdim ? Shape(x.dim(), 1) : Shape{});
  return reduce(ReduceOp::Argmin, x, {*dim}, keepdim, {}).values;
}
Tensor var(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  return reduce(ReduceOp::Var, x, dims, keepdim, {}, correction).values;
}
Tensor std(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  return reduce(ReduceOp::Std, x, dims, keepdim, {}, correction).values;
}
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  Reduced r = reduce(ReduceOp::Var, x, dims, keepdim, {}, correction, "[var_mean]", true);
  return {r.values, r.mean};
}
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  Reduced r = reduce(ReduceOp::Std, x, dims, keepdim, {}, correction, "[std_mean]", true);
  return {r.values, r.mean};
}

}  // namespace anvil
