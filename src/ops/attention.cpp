// scaled_dot_product_attention and decode_attention: PyTorch's validation, the leading dims
// broadcast and flattened into one batch dim, heads mapped for grouped-query attention, and one
// kernel call over [batch, head, row, col] strides.
#include <algorithm>
#include <cmath>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/kernels/attention.h"
#include "core/util.h"

namespace anvil {
namespace {

bool is_attention_dtype(DType t) { return t == kFloat32 || t == kBFloat16 || t == kFloat16 || t == kFloat64; }

// x with leading size-1 dims up to `rank` dims.
Tensor pad_rank(const Tensor& x, int64_t rank) {
  Tensor r = x;
  while (r.dim() < rank) r = r.unsqueeze(0);
  return r;
}

// [*batch, h, rows, cols] expanded to batch shape `b` and h heads, as [prod(b), h, rows, cols].
Tensor as_batch_heads(const Tensor& x, const Shape& b, int64_t heads) {
  Shape full = b;
  full.push_back(heads);
  full.push_back(x.size(-2));
  full.push_back(x.size(-1));
  Tensor e = x.expand(full);
  Tensor r = e.reshape({shape_numel(b), heads, x.size(-2), x.size(-1)});
  return r.size(3) > 1 && r.stride(3) != 1 ? r.contiguous() : r;
}

void copy_strides(int64_t* dst, const Tensor& x) {
  for (int d = 0; d < 4; ++d) dst[d] = x.size(d) == 1 ? 0 : x.stride(d);
}

void run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                   const Tensor& kv_lens, double scale, bool causal, bool from_end) {
  AttentionParams p;
  p.q = q.raw_data_ptr();
  p.k = k.raw_data_ptr();
  p.v = v.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.mask = mask.defined() ? mask.raw_data_ptr() : nullptr;
  p.mask_dtype = mask.defined() ? mask.dtype() : kBool;
  p.kv_lens = kv_lens.defined() ? static_cast<const int32_t*>(kv_lens.raw_data_ptr()) : nullptr;
  p.dtype = q.dtype();
  p.batch = out.size(0);
  p.n_heads = out.size(1);
  p.n_kv_heads = k.size(1);
  p.q_len = q.size(2);
  p.kv_len = k.size(2);
  p.head_dim = q.size(3);
  p.v_head_dim = v.size(3);
  copy_strides(p.stride_q, q);
  copy_strides(p.stride_k, k);
  copy_strides(p.stride_v, v);
  copy_strides(p.stride_out, out);
  p.stride_q[3] = p.stride_k[3] = p.stride_v[3] = p.stride_out[3] = 1;
  if (mask.defined()) copy_strides(p.stride_mask, mask);
  p.scale = scale;
  p.causal = causal;
  p.causal_from_end = from_end;
  ANVIL_KERNEL(q.device(), attention, p);
}

// CUDA prefill past head_dim 256 (the VAEs' one-head attention over 512 to 1024 channels) has
// only the attention kernel's simple path (16 query rows per block, products one lane at a time):
// a FLUX 1024 x 1024 VAE decode took 1.155 s on the H200 with it, 0.334 s with the composition
// below (diffusers: 0.086 s; docs/PERFORMANCE.md, session 24).
// Without a mask or causality it runs instead as its composition on cuBLAS: scores = q k^T in
// float32 (bmm out_dtype), softmax(scale x scores), p rounded to the input dtype as the prefill
// kernels do, o = p v; a block of query rows at a time, the scores within 256 MiB.
bool attention_by_matmuls(const Tensor& q, const Tensor& v, const Tensor& mask, bool causal) {
  return q.device().is_cuda() && q.dtype() != kFloat64 && !mask.defined() && !causal &&
         (q.size(-1) > 256 || v.size(-1) > 256);
}

void run_attention_by_matmuls(const Tensor& q4, const Tensor& k4, const Tensor& v4, const Tensor& o4, double scale) {
  const int64_t B = q4.size(0), H = q4.size(1), L = q4.size(2), E = q4.size(3), Hk = k4.size(1), S = k4.size(2),
                Ev = v4.size(3);
  // Each query head's keys and values (grouped-query heads share theirs), as [B H, S, *].
  auto per_head = [&](const Tensor& t) {
    return t.unsqueeze(2).expand({B, Hk, H / Hk, S, t.size(3)}).reshape({B * H, S, t.size(3)});
  };
  const Tensor kt = per_head(k4).transpose(1, 2), v = per_head(v4);
  const int64_t rows = std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(1, S * 4), 1, L);
  for (int64_t r0 = 0; r0 < L; r0 += rows) {
    const int64_t n = std::min(rows, L - r0);
    const Tensor qs = q4.narrow(2, r0, n).reshape({B * H, n, E});
    const Tensor p = softmax(mul(bmm(qs, kt, kFloat32), Scalar(scale)), -1).to(q4.dtype());
    o4.narrow(2, r0, n).copy_(bmm(p, v).view({B, H, n, Ev}));
  }
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const char* op = "[scaled_dot_product_attention]";
  ANVIL_CHECK(query.defined() && key.defined() && value.defined(), Error, op, " undefined tensor");
  check_same_device(op, query, key);
  check_same_device(op, query, value);
  ANVIL_CHECK(query.dtype() == key.dtype() && query.dtype() == value.dtype(), DTypeError, op,
              " Expected query, key, and value to have the same dtype, but got query.dtype: ", dtype_name(query.dtype()),
              " key.dtype: ", dtype_name(key.dtype()), " and value.dtype: ", dtype_name(value.dtype()), " instead.");
  ANVIL_CHECK(is_attention_dtype(query.dtype()), DTypeError, op,
              " expected float32, bfloat16, float16 or float64 inputs, got ", dtype_name(query.dtype()));
  ANVIL_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2, ShapeError, op,
              " query, key and value need at least 2 dims (..., L, E), got ", describe(query), ", ", describe(key),
              ", ", describe(value));
  ANVIL_CHECK(key.size(-1) == query.size(-1), ShapeError, op, " key's last dim ", key.size(-1),
              " must equal query's ", query.size(-1));
  ANVIL_CHECK(value.size(-2) == key.size(-2), ShapeError, op, " value has ", value.size(-2), " positions, key has ",
              key.size(-2));
  ANVIL_CHECK(dropout_p == 0.0, Error, op, " dropout_p must be 0 (anvil's attention is inference-only), got ",
              dropout_p);
  ANVIL_CHECK(!(is_causal && attn_mask.defined()), Error, op,
              " Explicit attn_mask should not be set when is_causal=True");

  const int64_t rank = std::max<int64_t>({query.dim(), key.dim(), value.dim(), 3});
  const Tensor q = pad_rank(query, rank), k = pad_rank(key, rank), v = pad_rank(value, rank);
  const int64_t hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
  int64_t n_heads = 0, n_kv_heads = 0;
  if (enable_gqa) {
    ANVIL_CHECK(hk == hv && hk > 0 && hq % hk == 0, ShapeError, op,
                " Number of heads in key and value must divide the number of heads in query, got ", hq, " query, ",
                hk, " key and ", hv, " value heads");
    n_heads = hq;
    n_kv_heads = hk;
  } else {
    n_kv_heads = as_op(op, [&] { return broadcast_shapes({hk}, {hv}); })[0];
    n_heads = as_op(op, [&] { return broadcast_shapes({hq}, {n_kv_heads}); })[0];
  }
  const Shape qb(q.sizes().begin(), q.sizes().end() - 3), kb(k.sizes().begin(), k.sizes().end() - 3),
      vb(v.sizes().begin(), v.sizes().end() - 3);
  const Shape batch = as_op(op, [&] { return broadcast_shapes(broadcast_shapes(qb, kb), vb); });
  const int64_t L = q.size(-2), S = k.size(-2), Ev = v.size(-1);

  Shape out_shape = batch;
  out_shape.push_back(n_heads);
  out_shape.push_back(L);
  out_shape.push_back(Ev);
  Tensor mask;
  if (attn_mask.defined()) {
    check_same_device(op, query, attn_mask);
    ANVIL_CHECK(attn_mask.dtype() == kBool || attn_mask.dtype() == query.dtype() || attn_mask.dtype() == kFloat32,
                DTypeError, op, " Expected attn_mask dtype to be bool or float or to match query dtype, got ",
                dtype_name(attn_mask.dtype()), " for ", dtype_name(query.dtype()), " query");
    Shape scores = batch;
    scores.push_back(n_heads);
    scores.push_back(L);
    scores.push_back(S);
    ANVIL_CHECK(attn_mask.dim() <= static_cast<int64_t>(scores.size()) &&
                    as_op(op, [&] { return broadcast_shapes(attn_mask.sizes(), scores); }) == scores,
                ShapeError, op, " attn_mask of shape ", shape_str(attn_mask.sizes()),
                " does not broadcast to the attention scores' shape ", shape_str(scores));
    mask = as_batch_heads(pad_rank(attn_mask, static_cast<int64_t>(scores.size())), batch, n_heads);
  }
  // The output keeps the inputs' largest rank (leading size-1 dims from padding dropped).
  const int64_t out_rank = std::max({query.dim(), key.dim(), value.dim()});
  Shape user_shape(out_shape.end() - out_rank, out_shape.end());
  Tensor out = empty(out_shape, TensorOptions(query.dtype()).device(query.device()));
  if (out.numel() == 0) return out.view(user_shape);
  const Tensor q4 = as_batch_heads(q, batch, n_heads), k4 = as_batch_heads(k, batch, n_kv_heads),
               v4 = as_batch_heads(v, batch, n_kv_heads);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  Tensor o4 = out.view({shape_numel(batch), n_heads, L, Ev});
  if (attention_by_matmuls(q4, v4, mask, is_causal)) run_attention_by_matmuls(q4, k4, v4, o4, s);
  else run_attention(q4, k4, v4, mask, o4, {}, s, is_causal, false);
  return out.view(user_shape);
}

Tensor decode_attention(const Tensor& query, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cache_lens,
                        std::optional<double> scale) {
  const char* op = "[decode_attention]";
  ANVIL_CHECK(query.defined() && k_cache.defined() && v_cache.defined() && cache_lens.defined(), Error, op,
              " undefined tensor");
  check_same_device(op, query, k_cache);
  check_same_device(op, query, v_cache);
  check_same_device(op, query, cache_lens);
  ANVIL_CHECK(query.dtype() == k_cache.dtype() && query.dtype() == v_cache.dtype(), DTypeError, op,
              " query, k_cache and v_cache must share a dtype, got ", dtype_name(query.dtype()), ", ",
              dtype_name(k_cache.dtype()), " and ", dtype_name(v_cache.dtype()));
  ANVIL_CHECK(is_attention_dtype(query.dtype()), DTypeError, op,
              " expected float32, bfloat16, float16 or float64 inputs, got ", dtype_name(query.dtype()));
  ANVIL_CHECK(cache_lens.dtype() == kInt32, DTypeError, op, " cache_lens must be int32, got ", describe(cache_lens));
  ANVIL_CHECK(query.dim() == 4 && k_cache.dim() == 4 && v_cache.dim() == 4, ShapeError, op,
              " expected query [B, Hq, L, E] and caches [B, H, S_max, E], got ", describe(query), ", ",
              describe(k_cache), ", ", describe(v_cache));
  const int64_t B = query.size(0), hq = query.size(1), L = query.size(2), E = query.size(3);
  const int64_t h = k_cache.size(1), S = k_cache.size(2);
  ANVIL_CHECK(k_cache.size(0) == B && v_cache.size(0) == B && v_cache.size(1) == h && v_cache.size(2) == S &&
                  k_cache.size(3) == E,
              ShapeError, op, " caches must be [", B, ", H, S_max, ", E, "] (and value [", B, ", H, S_max, Ev]), got ",
              describe(k_cache), " and ", describe(v_cache));
  ANVIL_CHECK(h > 0 && hq % h == 0, ShapeError, op, " the cache's ", h, " heads must divide the query's ", hq);
  ANVIL_CHECK(cache_lens.dim() == 1 && cache_lens.size(0) == B, ShapeError, op, " cache_lens must be [", B,
              "], got ", describe(cache_lens));
  Tensor out = empty({B, hq, L, v_cache.size(3)}, TensorOptions(query.dtype()).device(query.device()));
  if (out.numel() == 0) return out;
  auto unit_last = [](const Tensor& x) { return x.size(3) > 1 && x.stride(3) != 1 ? x.contiguous() : x; };
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  run_attention(unit_last(query), unit_last(k_cache), unit_last(v_cache), {}, out, cache_lens.contiguous(), s, true,
                true);
  return out;
}

}  // namespace anvil

namespace anvil {

Tensor& cache_write(Tensor& cache, const Tensor& values, const Tensor& positions) {
  const char* op = "[cache_write]";
  ANVIL_CHECK(cache.defined() && values.defined() && positions.defined(), Error, op, " undefined tensor");
  check_same_device(op, cache, values);
  check_same_device(op, cache, positions);
  ANVIL_CHECK(cache.dtype() == values.dtype(), DTypeError, op, " values dtype ", dtype_name(values.dtype()),
              " must match the cache's ", dtype_name(cache.dtype()));
  ANVIL_CHECK(positions.dtype() == kInt32, DTypeError, op, " positions must be int32, got ", describe(positions));
  ANVIL_CHECK(cache.dim() == 4 && values.dim() == 4 && values.size(0) == cache.size(0) &&
                  values.size(1) == cache.size(1) && values.size(3) == cache.size(3),
              ShapeError, op, " expected cache [B, H, S_max, D] and values [B, H, L, D], got ", describe(cache), " and ",
              describe(values));
  ANVIL_CHECK(positions.dim() == 1 && positions.size(0) == cache.size(0), ShapeError, op, " positions must be [",
              cache.size(0), "], got ", describe(positions));
  ANVIL_CHECK(cache.size(3) <= 1 || cache.stride(3) == 1, ShapeError, op,
              " the cache's last dim must be unit-stride, got strides ", shape_str(cache.strides()));
  const Tensor src = values.size(3) > 1 && values.stride(3) != 1 ? values.contiguous() : values;
  const Tensor pos = positions.contiguous();
  CacheWriteParams p;
  p.cache = cache.raw_data_ptr();
  p.src = src.raw_data_ptr();
  p.pos = static_cast<const int32_t*>(pos.raw_data_ptr());
  p.elem_size = static_cast<int64_t>(element_size(cache.dtype()));
  p.batch = cache.size(0);
  p.n_heads = cache.size(1);
  p.rows = values.size(2);
  p.cols = cache.size(3);
  p.cache_rows = cache.size(2);
  for (int d = 0; d < 3; ++d) {
    p.stride_cache[d] = cache.stride(d);
    p.stride_src[d] = src.stride(d);
  }
  ANVIL_KERNEL(cache.device(), cache_write, p);
  return cache;
}

}  // namespace anvil
