// softmax / log_softmax: validation, the reduced dim as the middle of [outer, dim, inner].
#include "anvil/nn.h"
#include "core/dispatch.h"
#include "core/kernels/softmax.h"
#include "core/util.h"

namespace anvil {
namespace {

Tensor softmax_impl(const char* name, const Tensor& x_in, int64_t dim_in, std::optional<DType> dtype, bool log) {
  ANVIL_CHECK(x_in.defined(), Error, name, " undefined tensor");
  const DType out_dtype = dtype.value_or(x_in.dtype());
  dispatch_float_types(out_dtype, name, [](auto) {});
  // The kernels convert float inputs on load; anything else is cast first, as torch's dtype=.
  Tensor x = is_floating_point(x_in.dtype()) && !is_float8(x_in.dtype()) ? x_in : x_in.to(out_dtype);
  const int64_t dim = wrap_dim(dim_in, x.dim(), name);
  Tensor out = empty(x.sizes(), TensorOptions(out_dtype).device(x.device()));
  if (out.numel() == 0) return out;
  x = x.contiguous();
  SoftmaxParams p;
  p.in = x.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.in_dtype = x.dtype();
  p.out_dtype = out_dtype;
  p.dim_size = x.dim() == 0 ? 1 : x.size(dim);
  p.outer = 1;
  for (int64_t d = 0; d < dim; ++d) p.outer *= x.size(d);
  p.inner = x.numel() / (p.outer * p.dim_size);
  p.log = log;
  ANVIL_KERNEL(x.device(), softmax, p);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl("[softmax]", x, dim, dtype, false);
}

Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl("[log_softmax]", x, dim, dtype, true);
}

}  // namespace anvil
