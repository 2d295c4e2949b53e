// topk and token sampling: validation, the selected dim as the middle of [outer, dim, inner],
// the sampling options normalised once so that both backends see the same three cases.
#include <cmath>
#include <limits>

#include "anvil/nn.h"
#include "core/dispatch.h"
#include "core/kernels/topk.h"
#include "core/util.h"

namespace anvil {

std::tuple<Tensor, Tensor> topk(const Tensor& x_in, int64_t k, int64_t dim_in, bool largest, bool sorted) {
  const char* name = "[topk]";
  ANVIL_CHECK(x_in.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(x_in.dtype() != kBool, DTypeError, name, " not implemented for 'bool'");  // as torch
  dispatch_real_types(x_in.dtype(), name, [](auto) {});
  const int64_t dim = wrap_dim(dim_in, x_in.dim(), name);
  const int64_t dim_size = x_in.dim() == 0 ? 1 : x_in.size(dim);
  ANVIL_CHECK(k >= 0 && k <= dim_size, IndexError, name, " selected index k out of range: k = ", k, " for dim ", dim,
              " of size ", dim_size, " in ", describe(x_in));
  const TensorOptions index_opts = TensorOptions(kInt64).device(x_in.device());
  // torch: a 0-dim input gives itself and index 0, for k = 0 and k = 1 alike.
  if (x_in.dim() == 0) return {x_in.clone(), zeros({}, index_opts)};

  Shape out_sizes = x_in.sizes();
  out_sizes[static_cast<size_t>(dim)] = k;
  Tensor values = empty(out_sizes, TensorOptions(x_in.dtype()).device(x_in.device()));
  Tensor indices = empty(out_sizes, index_opts);
  if (values.numel() == 0) return {values, indices};
  const Tensor x = x_in.contiguous();
  TopkParams p;
  p.in = x.raw_data_ptr();
  p.values = values.raw_data_ptr();
  p.indices = static_cast<int64_t*>(indices.raw_data_ptr());
  p.dtype = x.dtype();
  p.dim_size = dim_size;
  p.outer = 1;
  for (int64_t d = 0; d < dim; ++d) p.outer *= x.size(d);
  p.inner = x.numel() / (p.outer * p.dim_size);
  p.k = k;
  p.largest = largest;
  p.sorted = sorted;
  ANVIL_KERNEL(x.device(), topk, p);
  return {values, indices};
}

Tensor sample(const Tensor& logits, const SamplingOptions& options, const Tensor& rng_state) {
  const char* name = "[sample]";
  ANVIL_CHECK(logits.defined() && rng_state.defined(), Error, name, " undefined tensor");
  const DType t = logits.dtype();
  ANVIL_CHECK(t == kFloat32 || t == kBFloat16 || t == kFloat16, DTypeError, name,
              " logits must be float32, bfloat16 or float16, got ", describe(logits));
  ANVIL_CHECK(logits.dim() == 1 || logits.dim() == 2, ShapeError, name,
              " logits must be [vocab] or [rows, vocab], got ", describe(logits));
  const int64_t vocab = logits.size(-1), rows = logits.dim() == 2 ? logits.size(0) : 1;
  ANVIL_CHECK(vocab > 0 && vocab < std::numeric_limits<int32_t>::max(), ShapeError, name,
              " vocab must be in [1, 2^31 - 1), got ", describe(logits));
  ANVIL_CHECK(std::isfinite(options.temperature) && options.temperature >= 0, Error, name,
              " temperature must be finite and >= 0, got ", options.temperature);
  ANVIL_CHECK(options.top_k >= 0, Error, name, " top_k must be >= 0 (0: no top-k cut), got ", options.top_k);
  ANVIL_CHECK(options.top_p > 0 && options.top_p <= 1, Error, name, " top_p must be in (0, 1], got ", options.top_p);
  ANVIL_CHECK(rng_state.dtype() == kInt64, DTypeError, name, " rng_state must be int64 {seed, counter}, got ",
              describe(rng_state));
  ANVIL_CHECK(rng_state.dim() == 1 && rng_state.size(0) == 2 && rng_state.is_contiguous(), ShapeError, name,
              " rng_state must be a contiguous [2] tensor {seed, counter}, got ", describe(rng_state));
  check_same_device(name, logits, rng_state);

  Tensor out = empty(logits.dim() == 2 ? Shape{rows} : Shape{}, TensorOptions(kInt64).device(logits.device()));
  if (rows == 0) return out;
  const Tensor x = as_rows(logits, rows, vocab);
  SampleParams p;
  p.logits = x.raw_data_ptr();
  p.out = static_cast<int64_t*>(out.raw_data_ptr());
  p.rng_state = static_cast<int64_t*>(rng_state.raw_data_ptr());
  p.dtype = t;
  p.rows = rows;
  p.vocab = vocab;
  p.stride_row = row_stride(x);
  // The kernels see three cases: top_k == 1 (argmax; greedy too), a top-k and/or top-p cut in
  // descending order, or neither (the whole row in index order).
  p.temperature = static_cast<float>(options.temperature);
  p.top_k = options.top_k >= vocab ? 0 : options.top_k;
  p.top_p = static_cast<float>(options.top_p);
  if (p.temperature == 0 || p.top_k == 1 || vocab == 1) {
    p.top_k = 1;
    p.top_p = 1;
  }
  ANVIL_KERNEL(logits.device(), sample, p);
  return out;
}

Tensor sampler_state(uint64_t seed, Device device) {
  return tensor(std::vector<int64_t>{static_cast<int64_t>(seed), 0}, std::nullopt,
                TensorOptions(kInt64).device(device));
}

}  // namespace anvil
