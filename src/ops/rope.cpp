// rope (neox-style rotary embedding) and its inverse frequencies: validation, positions
// broadcast to x's leading dims through strides (read on the device, never on the host).
#include <cmath>
#include <vector>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/rope.h"
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

Tensor qk_norm_rope_cache(const Tensor& qkv_in, int64_t n_heads, int64_t n_kv_heads, const Tensor& q_norm_weight,
                          const Tensor& k_norm_weight, double eps, const Tensor& inv_freq, Tensor& k_cache, Tensor& v_cache,
                          const Tensor& start) {
  const char* op = "[qk_norm_rope_cache]";
  ANVIL_CHECK(qkv_in.defined() && inv_freq.defined() && k_cache.defined() && v_cache.defined() && start.defined(), Error, op,
              " undefined tensor");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&inv_freq, &k_cache, &v_cache, &start, &q_norm_weight, &k_norm_weight}) {
    if (t->defined()) check_same_device(op, qkv_in, *t);
  }
  dispatch_float_types(qkv_in.dtype(), op, [](auto) {});
  ANVIL_CHECK(n_heads > 0 && n_kv_heads > 0, ShapeError, op, " n_heads and n_kv_heads must be positive, got ",
              n_heads, " and ", n_kv_heads);
  ANVIL_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(), ShapeError, op,
              " k_cache and v_cache must be [B, Hk, S_max, D] of one shape, got ", describe(k_cache), " and ",
              describe(v_cache));
  const int64_t B = k_cache.size(0), D = k_cache.size(3);
  ANVIL_CHECK(k_cache.size(1) == n_kv_heads, ShapeError, op, " the caches ", describe(k_cache), " must have ",
              n_kv_heads, " kv heads");
  ANVIL_CHECK(qkv_in.dim() == 3 && qkv_in.size(0) == B && qkv_in.size(2) == (n_heads + 2 * n_kv_heads) * D, ShapeError,
              op, " qkv must be [", B, ", L, ", (n_heads + 2 * n_kv_heads) * D, "] (", n_heads, " + 2 x ",
              n_kv_heads, " heads of ", D, "), got ", describe(qkv_in));
  ANVIL_CHECK(k_cache.dtype() == qkv_in.dtype() && v_cache.dtype() == qkv_in.dtype(), DTypeError, op, " the caches ",
              describe(k_cache), " and ", describe(v_cache), " must have qkv's dtype ", dtype_name(qkv_in.dtype()));
  ANVIL_CHECK((D <= 1 || (k_cache.stride(3) == 1 && v_cache.stride(3) == 1)), ShapeError, op,
              " the caches' last dim must be unit-stride, got strides ", shape_str(k_cache.strides()), " and ",
              shape_str(v_cache.strides()));
  ANVIL_CHECK(start.dtype() == kInt32 && start.dim() == 1 && start.size(0) == B, DTypeError, op,
              " start must be int32 [", B, "], got ", describe(start));
  ANVIL_CHECK(inv_freq.dtype() == kFloat32 && inv_freq.dim() == 1, DTypeError, op,
              " inv_freq must be a 1-D float32 tensor, got ", describe(inv_freq));
  ANVIL_CHECK(2 * inv_freq.size(0) <= D, ShapeError, op, " inv_freq ", describe(inv_freq), " rotates ", 2 * inv_freq.size(0),
              " columns but head_dim is ", D);
  DType wdt = qkv_in.dtype();
  bool have_wdt = false;
  for (const Tensor* w : {&q_norm_weight, &k_norm_weight}) {
    if (!w->defined()) continue;
    ANVIL_CHECK(w->dim() == 1 && w->size(0) == D, ShapeError, op, " norm weights must be [", D, "], got ", describe(*w));
    ANVIL_CHECK(w->dtype() == qkv_in.dtype() || w->dtype() == kFloat32, DTypeError, op, " norm weights must be ",
                dtype_name(qkv_in.dtype()), " or float32, got ", describe(*w));
    ANVIL_CHECK(!have_wdt || w->dtype() == wdt, DTypeError, op, " q and k norm weights must share a dtype, got ",
                describe(q_norm_weight), " and ", describe(k_norm_weight));
    wdt = w->dtype();
    have_wdt = true;
  }
  ANVIL_CHECK(std::isfinite(eps) && eps >= 0, Error, op, " eps must be finite and >= 0, got ", eps);
  const int64_t L = qkv_in.size(1);
  Tensor q = empty({B, n_heads, L, D}, TensorOptions(qkv_in.dtype()).device(qkv_in.device()));
  if (q.numel() == 0) return q;
  const Tensor qkv = qkv_in.stride(2) != 1 ? qkv_in.contiguous() : qkv_in;
  const Tensor freq = inv_freq.contiguous(), st = start.contiguous();
  const Tensor qw = q_norm_weight.defined() ? q_norm_weight.contiguous() : Tensor();
  const Tensor kw = k_norm_weight.defined() ? k_norm_weight.contiguous() : Tensor();
  QkNormRopeCacheParams p;
  p.qkv = qkv.raw_data_ptr();
  p.q_weight = qw.defined() ? qw.raw_data_ptr() : nullptr;
  p.k_weight = kw.defined() ? kw.raw_data_ptr() : nullptr;
  p.inv_freq = static_cast<const float*>(freq.raw_data_ptr());
  p.start = static_cast<const int32_t*>(st.raw_data_ptr());
  p.q_out = q.raw_data_ptr();
  p.k_cache = k_cache.raw_data_ptr();
  p.v_cache = v_cache.raw_data_ptr();
  p.dtype = qkv.dtype();
  p.weight_dtype = wdt;
  p.batch = B;
  p.len = L;
  p.n_heads = n_heads;
  p.n_kv_heads = n_kv_heads;
  p.head_dim = D;
  p.rotary_dim = 2 * inv_freq.size(0);
  p.cache_rows = k_cache.size(2);
  p.stride_qkv[0] = qkv.stride(0);
  p.stride_qkv[1] = qkv.stride(1);
  for (int d = 0; d < 3; ++d) {
    p.stride_k[d] = k_cache.stride(d);
    p.stride_v[d] = v_cache.stride(d);
  }
  p.eps = eps;
  ANVIL_KERNEL(qkv.device(), qk_norm_rope_cache, p);
  return q;
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
