// rope (neox-style rotary embedding) and its inverse frequencies: validation, positions
// broadcast to x's leading dims through strides (read on the device, never on the host).
#include <cmath>
#include <vector>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels.h"
#include "core/util.h"

namespace anvil {

Tensor rope(const Tensor& x_in, const Tensor& positions, const Tensor& inv_freq) {
  ANVIL_CHECK(x_in.defined() && positions.defined() && inv_freq.defined(), Error, "[rope] undefined tensor");
  check_same_device("[rope]", x_in, positions);
  check_same_device("[rope]", x_in, inv_freq);
  ANVIL_CHECK(x_in.dim() >= 1, ShapeError, "[rope] x must have a head_dim, got ", describe(x_in));
  dispatch_float_types(x_in.dtype(), "[rope]", [](auto) {});
  ANVIL_CHECK(positions.dtype() == kInt32 || positions.dtype() == kInt64, DTypeError,
              "[rope] positions must be int32 or int64, got ", describe(positions));
  ANVIL_CHECK(inv_freq.dtype() == kFloat32 && inv_freq.dim() == 1, DTypeError,
              "[rope] inv_freq must be a 1-D float32 tensor, got ", describe(inv_freq));
  const int64_t head_dim = x_in.size(-1), rotary_dim = 2 * inv_freq.size(0);
  ANVIL_CHECK(rotary_dim <= head_dim, ShapeError, "[rope] inv_freq ", describe(inv_freq), " rotates ", rotary_dim,
              " columns but x ", describe(x_in), " has head_dim ", head_dim);
  const Shape lead(x_in.sizes().begin(), x_in.sizes().end() - 1);
  ANVIL_CHECK(positions.dim() <= static_cast<int64_t>(lead.size()) && [&] {
    try {
      return broadcast_shapes(positions.sizes(), lead) == lead;
    } catch (const ShapeError&) {
      return false;
    }
  }(), ShapeError, "[rope] positions ", describe(positions), " must broadcast to x's leading dims ", shape_str(lead));
  Tensor out = empty(x_in.sizes(), TensorOptions(x_in.dtype()).device(x_in.device()));
  if (out.numel() == 0) return out;
  Tensor x = head_dim > 1 && x_in.stride(-1) != 1 ? x_in.contiguous() : x_in;
  Tensor pos = positions.expand(lead);
  Tensor freq = inv_freq.contiguous();
  RopeParams p;
  p.x = x.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.positions = pos.raw_data_ptr();
  p.inv_freq = static_cast<const float*>(freq.raw_data_ptr());
  p.dtype = x.dtype();
  p.pos_dtype = pos.dtype();
  p.ndim = static_cast<int>(lead.size());
  ANVIL_CHECK(p.ndim <= kMaxDims, ShapeError, "[rope] at most ", kMaxDims, " leading dims, got ", describe(x_in));
  p.rows = shape_numel(lead);
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  for (int d = 0; d < p.ndim; ++d) {
    p.sizes[d] = lead[d];
    p.stride_x[d] = x.stride(d);
    p.stride_out[d] = out.stride(d);
    p.stride_pos[d] = lead[d] == 1 ? 0 : pos.stride(d);
  }
  ANVIL_KERNEL(x.device(), rope, p);
  return out;
}

Tensor rope_inv_freq(int64_t rotary_dim, double theta, Device device) {
  ANVIL_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, ShapeError, "[rope_inv_freq] rotary_dim must be even and positive, got ",
              rotary_dim);
  ANVIL_CHECK(theta > 0 && std::isfinite(theta), Error, "[rope_inv_freq] theta must be positive and finite, got ", theta);
  // Hugging Face: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), each step in float32.
  std::vector<float> f(static_cast<size_t>(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(e)));
    f[i] = 1.0f / power;
  }
  return tensor<float>(f).to(device);
}

}  // namespace anvil
