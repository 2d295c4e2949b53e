// Indexing: index_select, gather, scatter / scatter_add, masked_fill, embedding.
#include <algorithm>

#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/index.h"
#include "core/kernels/attention.h"
#include "core/util.h"
#include "ops/iter.h"

namespace anvil {
namespace {

Tensor as_index(const char* name, const Tensor& index, bool allow_int32) {
  ANVIL_CHECK(index.defined(), Error, name, " undefined index tensor");
  ANVIL_CHECK(index.dtype() == kInt64 || (allow_int32 && index.dtype() == kInt32), DTypeError, name,
              " Expected dtype int64", allow_int32 ? " or int32" : "", " for index, got ", describe(index));
  return index.to(kInt64).contiguous();
}

void fill_gather_params(const char* name, GatherParams& p, const Tensor& self, const Tensor& index, const Tensor* other,
                        int64_t dim) {
  ANVIL_CHECK(self.dim() <= kMaxDims, ShapeError, name, " too many dims");
  ANVIL_CHECK(index.dim() == std::max<int64_t>(self.dim(), 1) || (self.dim() == 0 && index.dim() <= 1), ShapeError, name,
              " Index tensor must have the same number of dimensions as input tensor: index ", describe(index),
              ", input ", describe(self));
  int64_t nd = std::max<int64_t>(self.dim(), 1);
  p.ndim = static_cast<int>(nd);
  p.dim = static_cast<int>(dim);
  p.numel = index.numel();
  p.dtype = self.dtype();
  p.self_dim_size = self.dim() == 0 ? 1 : self.size(dim);
  for (int64_t d = 0; d < nd; ++d) {
    int64_t is = index.dim() == 0 ? 1 : index.size(d);
    p.sizes[d] = is;
    p.index_strides[d] = index.dim() == 0 ? 0 : index.stride(d);
    p.self_strides[d] = self.dim() == 0 ? 0 : self.stride(d);
    if (self.dim() > 0 && d != dim)
      ANVIL_CHECK(is <= self.size(d), ShapeError, name, " Size does not match at dimension ", d,
                  " expected index ", describe(index), " to be no larger than self ", describe(self),
                  " apart from dimension ", dim);
    if (other) {
      p.other_strides[d] = other->dim() == 0 ? 0 : other->stride(d);
      if (other->dim() > 0)
        ANVIL_CHECK(is <= other->size(d), ShapeError, name, " Expected index ", describe(index),
                    " to be no larger than src ", describe(*other), " in dimension ", d);
    }
  }
}

Tensor scatter_impl(const char* name, const Tensor& x, int64_t dim, const Tensor& index_in, const Tensor* src,
                    const Scalar* value, bool accumulate) {
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  int64_t d = wrap_dim(dim, x.dim(), name);
  Tensor index = as_index(name, index_in, false);
  check_same_device(name, x, index);
  Tensor out = x.clone();
  dispatch_arith_types(x.dtype(), name, [](auto) {});
  Tensor srcc;
  if (src) {
    check_same_device(name, x, *src);
    ANVIL_CHECK(src->dtype() == x.dtype(), DTypeError, name, " Expected self.dtype to be equal to src.dtype: self ",
                describe(x), ", src ", describe(*src));
    srcc = *src;
  }
  if (index.numel() == 0) return out;
  GatherParams p;
  fill_gather_params(name, p, out, index, src ? &srcc : nullptr, d);
  p.self = out.raw_data_ptr();
  p.out_or_src = src ? srcc.raw_data_ptr() : nullptr;
  p.index = static_cast<const int64_t*>(index.raw_data_ptr());
  p.accumulate = accumulate;
  if (value) p.scalar0 = to_scalar_arg(*value);
  ANVIL_KERNEL(x.device(), scatter, p);
  return out;
}

}  // namespace

Tensor index_select(const Tensor& x_in, int64_t dim, const Tensor& index_in) {
  const char* name = "[index_select]";
  ANVIL_CHECK(x_in.defined(), Error, name, " undefined tensor");
  int64_t d = wrap_dim(dim, x_in.dim(), name);
  ANVIL_CHECK(index_in.defined() && index_in.dim() <= 1, ShapeError, name,
              " Index is supposed to be a vector, got ", describe(index_in));
  Tensor index = as_index(name, index_in, true);
  check_same_device(name, x_in, index);
  Tensor x = x_in.dim() == 0 ? x_in.reshape({1}) : x_in.contiguous();
  Shape out_shape = x.sizes();
  out_shape[d] = index.numel();
  if (x_in.dim() == 0) out_shape = index_in.dim() == 0 ? Shape{} : Shape{index.numel()};
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  IndexSelectParams p;
  p.dtype = x.dtype();
  p.in_dim = x.size(d);
  p.n_index = index.numel();
  p.outer = 1;
  p.inner = 1;
  for (int64_t i = 0; i < d; ++i) p.outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) p.inner *= x.size(i);
  if (out.numel() == 0 && p.n_index == 0) return out;
  ANVIL_CHECK(p.in_dim > 0 || p.n_index == 0, IndexError, name, " index out of range in self: selecting from ",
              describe(x_in), " along an empty dim ", d);
  if (out.numel() == 0) return out;
  p.in = x.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.index = static_cast<const int64_t*>(index.raw_data_ptr());
  ANVIL_KERNEL(x.device(), index_select, p);
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index_in) {
  const char* name = "[gather]";
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  int64_t d = wrap_dim(dim, x.dim(), name);
  Tensor index = as_index(name, index_in, false);
  check_same_device(name, x, index);
  Tensor out = empty(index_in.sizes(), TensorOptions(x.dtype()).device(x.device()));
  GatherParams p;
  fill_gather_params(name, p, x, index, &out, d);
  if (out.numel() == 0) return out;
  p.self = x.raw_data_ptr();
  p.out_or_src = out.raw_data_ptr();
  p.index = static_cast<const int64_t*>(index.raw_data_ptr());
  ANVIL_KERNEL(x.device(), gather, p);
  return out;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("[scatter]", x, dim, index, &src, nullptr, false);
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  return scatter_impl("[scatter]", x, dim, index, nullptr, &value, false);
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("[scatter_add]", x, dim, index, &src, nullptr, true);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  const char* name = "[masked_fill]";
  ANVIL_CHECK(x.defined() && mask.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(mask.dtype() == kBool, DTypeError, name, " expected mask dtype to be Bool but got ", dtype_name(mask.dtype()));
  check_same_device(name, x, mask);
  Shape shape = as_op(name, [&] { return broadcast_shapes(x.sizes(), mask.sizes()); });
  Tensor out = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  // out = keep ? x : value, with keep = !mask: the where kernel's scalar operand is the "else".
  Tensor keep = logical_not(mask);
  ElementwiseParams p = make_elementwise(name, out, {&keep, &x});
  p.dtype = x.dtype();
  p.scalar0 = to_scalar_arg(value);
  ANVIL_KERNEL(out.device(), where, p);
  return out;
}

Tensor nonzero(const Tensor& x) {
  const char* name = "[nonzero]";
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(x.dim() <= kMaxDims, ShapeError, name, " at most ", kMaxDims, " dims, got ", describe(x));
  // The kernels read a contiguous bool mask: other dtypes compare with 0 first (x != 0 keeps
  // NaN, and a complex number with either part non-zero).
  const Tensor mask = (x.dtype() == kBool ? x : as_op(name, [&] { return ne(x, Scalar(int64_t{0})); })).contiguous();
  NonzeroParams p;
  p.mask = static_cast<const uint8_t*>(mask.raw_data_ptr());
  p.n = mask.numel();
  p.ndim = static_cast<int>(x.dim());
  for (int d = 0; d < p.ndim; ++d) p.sizes[d] = x.size(d);
  p.chunk = 8192;
  p.chunks = (p.n + p.chunk - 1) / p.chunk;
  const TensorOptions i64 = TensorOptions(kInt64).device(x.device());
  if (p.chunks == 0) return empty({0, x.dim()}, i64);
  Tensor counts = empty({p.chunks + 1}, i64);
  p.counts = static_cast<int64_t*>(counts.raw_data_ptr());
  ANVIL_KERNEL(x.device(), nonzero_count, p);
  const int64_t total = counts.narrow(0, p.chunks, 1).to(Device(kCPU)).data_ptr<int64_t>()[0];
  Tensor out = empty({total, x.dim()}, i64);
  if (total == 0 || x.dim() == 0) return out;
  p.out = static_cast<int64_t*>(out.raw_data_ptr());
  ANVIL_KERNEL(x.device(), nonzero_fill, p);
  return out;
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  const char* name = "[masked_select]";
  ANVIL_CHECK(x.defined() && mask.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(mask.dtype() == kBool, DTypeError, name, " masked_select: expected BoolTensor for mask, got ",
              dtype_name(mask.dtype()));
  check_same_device(name, x, mask);
  const Shape shape = as_op(name, [&] { return broadcast_shapes(x.sizes(), mask.sizes()); });
  const Tensor flat = nonzero(mask.expand(shape).reshape({-1})).reshape({-1});
  return take(x.expand(shape), flat);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  ANVIL_CHECK(weight.defined() && weight.dim() == 2, ShapeError, "[embedding] weight must be 2-D, got ", describe(weight));
  ANVIL_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32), DTypeError,
              "[embedding] Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ",
              describe(indices));
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  Tensor flat = indices.reshape({-1});
  return as_op("[embedding]", [&] { return index_select(weight, 0, flat).view(out_shape); });
}

void cache_prefetch(const Tensor& x, const Tensor& index) {
  const char* name = "[cache_prefetch]";
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  if (x.numel() == 0) return;
  PrefetchParams p;
  p.base = x.raw_data_ptr();
  // The bytes a slice spans (strides are never negative): the whole tensor without index.
  const int64_t first = index.defined() ? 1 : 0;
  int64_t span = 1;
  for (int64_t d = first; d < x.dim(); ++d) span += (x.size(d) - 1) * x.stride(d);
  p.span_bytes = span * static_cast<int64_t>(element_size(x.dtype()));
  Tensor idx;
  if (index.defined()) {
    ANVIL_CHECK(x.dim() >= 1, ShapeError, name, " an index needs a tensor with a dim 0, got ", describe(x));
    ANVIL_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, DTypeError, name,
                " Expected dtype int64 or int32 for index, got ", describe(index));
    check_same_device(name, x, index);
    idx = index.contiguous();
    p.index = idx.raw_data_ptr();
    p.index64 = idx.dtype() == kInt64;
    p.slices = idx.numel();
    p.count = x.size(0);
    p.stride_bytes = x.stride(0) * static_cast<int64_t>(element_size(x.dtype()));
  }
  if (p.slices == 0) return;
  ANVIL_KERNEL(x.device(), cache_prefetch, p);
}

}  // namespace anvil

// ---- take / put_: the tensor as its flat row-major sequence (strides do not matter)

namespace anvil {

Tensor take(const Tensor& x, const Tensor& index) {
  const char* name = "[take]";
  ANVIL_CHECK(x.defined() && index.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(index.dtype() == kInt64, DTypeError, name, " take(): Expected a long tensor for index, but got ",
              dtype_name(index.dtype()));
  check_same_device(name, x, index);
  ANVIL_CHECK(!(x.numel() == 0 && index.numel() != 0), IndexError, name, " take(): tried to take from an empty tensor");
  Tensor out = empty(index.sizes(), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  const Tensor flat = x.contiguous().reshape({x.numel()});
  const Tensor idx = index.contiguous().reshape({index.numel()});
  Tensor o = out.reshape({out.numel()});
  GatherParams p;
  fill_gather_params(name, p, flat, idx, &o, 0);
  p.flat = true;
  p.self = flat.raw_data_ptr();
  p.out_or_src = o.raw_data_ptr();
  p.index = static_cast<const int64_t*>(idx.raw_data_ptr());
  ANVIL_KERNEL(x.device(), gather, p);
  return out;
}

Tensor& Tensor::put_(const Tensor& index, const Tensor& source, bool accumulate) {
  const char* name = "[put_]";
  ANVIL_CHECK(defined() && index.defined() && source.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(index.dtype() == kInt64, DTypeError, name, " put_(): Expected a long tensor for index, but got ",
              dtype_name(index.dtype()));
  ANVIL_CHECK(source.dtype() == dtype(), DTypeError, name,
              " put_(): self and source expected to have the same dtype, but got self.dtype = ", dtype_name(dtype()),
              " and source.dtype = ", dtype_name(source.dtype()));
  check_same_device(name, *this, index);
  check_same_device(name, *this, source);
  ANVIL_CHECK(source.numel() == index.numel(), IndexError, name,
              " put_(): Expected source and index to have the same number of elements, but got source.numel() = ",
              source.numel(), ", index.numel() = ", index.numel());
  ANVIL_CHECK(!(numel() == 0 && index.numel() != 0), IndexError, name,
              " put_(): Tried to put elements into an empty tensor");
  if (accumulate) dispatch_arith_types(dtype(), name, [](auto) {});
  if (index.numel() == 0) return *this;
  // A strided self is updated through a contiguous copy, written back after.
  Tensor target = is_contiguous() ? *this : contiguous();
  Tensor flat = target.reshape({numel()});
  const Tensor idx = index.contiguous().reshape({index.numel()});
  const Tensor src = source.contiguous().reshape({source.numel()});
  GatherParams p;
  fill_gather_params(name, p, flat, idx, &src, 0);
  p.flat = true;
  p.accumulate = accumulate;
  p.self = flat.raw_data_ptr();
  p.out_or_src = const_cast<void*>(src.raw_data_ptr());
  p.index = static_cast<const int64_t*>(idx.raw_data_ptr());
  ANVIL_KERNEL(device(), scatter, p);
  if (!is_contiguous()) copy_(target);
  return *this;
}

Tensor put(const Tensor& x, const Tensor& index, const Tensor& source, bool accumulate) {
  ANVIL_CHECK(x.defined(), Error, "[put] undefined tensor");
  Tensor out = x.clone();
  as_op("[put]", [&] { return out.put_(index, source, accumulate); });
  return out;
}

// ---- bincount

Tensor bincount(const Tensor& x_in, const Tensor& weights_in, int64_t minlength) {
  const char* name = "[bincount]";
  ANVIL_CHECK(x_in.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(minlength >= 0, ValueError, name, " minlength should be >= 0");
  const DType t = x_in.dtype();
  ANVIL_CHECK(t == kUInt8 || t == kInt8 || t == kInt16 || t == kInt32 || t == kInt64, DTypeError, name,
              " \"bincount\" not implemented for '", dtype_name(t), "'");
  const bool weighted = weights_in.defined();
  // PyTorch returns int64 zeros for an empty input, with or without weights.
  if (x_in.dim() == 1 && x_in.numel() == 0) return zeros({minlength}, TensorOptions(kInt64).device(x_in.device()));
  ANVIL_CHECK(x_in.dim() == 1, ShapeError, name, " bincount only supports 1-d non-negative integral inputs.");
  if (weighted) {
    check_same_device(name, x_in, weights_in);
    ANVIL_CHECK(weights_in.dim() == 1 && weights_in.size(0) == x_in.size(0), ShapeError, name,
                " weights should be 1-d and have the same length as input");
  }
  const Tensor x = t == kInt32 ? x_in.contiguous() : x_in.to(kInt64).contiguous();
  const DType out_dtype = !weighted ? kInt64 : weights_in.dtype() == kFloat32 ? kFloat32 : kFloat64;
  Tensor w;
  if (weighted) w = weights_in.to(out_dtype).contiguous();
  BincountParams p;
  p.x = x.raw_data_ptr();
  p.x_dtype = x.dtype();
  p.n = x.numel();
  p.weights = weighted ? w.raw_data_ptr() : nullptr;
  p.out_dtype = out_dtype;
  // The output's length is max(x) + 1, which only the data knows: a first pass counts into a
  // guess of at least minlength bins and finds max(x) as it goes; the host reads the max back
  // (the op's one sync, as PyTorch's) and only when it was past the guess counts again.
  constexpr int64_t kGuessBins = 4096;
  const int64_t guess = std::max(minlength, std::min(kGuessBins, std::max<int64_t>(p.n, 64)));
  // Counts are int64 like the range: both come from one zero fill.
  Tensor out = zeros({weighted ? guess : guess + 2}, TensorOptions(out_dtype).device(x_in.device()));
  Tensor range = weighted ? zeros({2}, TensorOptions(kInt64).device(x.device())) : out.narrow(0, guess, 2);
  if (!weighted) out = out.narrow(0, 0, guess);
  p.range = static_cast<int64_t*>(range.raw_data_ptr());
  p.out = out.raw_data_ptr();
  p.bins = guess;
  ANVIL_KERNEL(x.device(), bincount, p);
  range = range.to(Device(kCPU));
  const int64_t* flags = static_cast<const int64_t*>(range.raw_data_ptr());
  ANVIL_CHECK(flags[0] == 0, ValueError, name, " bincount only supports 1-d non-negative integral inputs.");
  const int64_t bins = std::max(flags[1] + 1, minlength);
  if (bins <= guess) return out.narrow(0, 0, bins);
  out = zeros({bins}, TensorOptions(out_dtype).device(x_in.device()));
  p.range = nullptr;
  p.out = out.raw_data_ptr();
  p.bins = bins;
  ANVIL_KERNEL(x.device(), bincount, p);
  return out;
}

}  // namespace anvil
