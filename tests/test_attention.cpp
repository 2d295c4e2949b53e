// scaled_dot_product_attention and decode_attention against a float64 loop reference: decode and
// prefill shapes, grouped-query heads, causal (top-left) and KV-cache (bottom-right) alignment,
// bool and additive masks with broadcast shapes, custom scale, strided q / k / v, PyTorch's
// batch / head broadcasting, fully masked rows (zeros), cache slots past the valid length never
// read, 65536+ batch x heads, errors, and CUDA graph replay with new cache lengths.
#include <cmath>
#include <optional>

#include "harness.h"
#include "reference/ref_attention.h"

namespace {

using namespace anvil;
using th::Layout;

// `computed_on`: the device that computed `got` when it has been copied elsewhere since.
::testing::AssertionResult check_attention(const Tensor& got, const ref::AttentionRef& want, DType t,
                                           std::optional<Device> computed_on = std::nullopt) {
  ref::Array err = want.err;
  const DType acc = t == kFloat64 ? kFloat64 : kFloat32;
  if (acc == kFloat64)
    for (double& e : err.v) e *= th::unit_roundoff(kFloat64) / th::unit_roundoff(kFloat32);
  // CUDA's 16-bit prefill kernels round p to the input type for the p v product.
  if (computed_on.value_or(got.device()).is_cuda() && (t == kBFloat16 || t == kFloat16))
    for (size_t i = 0; i < err.v.size(); ++i) err.v[i] += th::unit_roundoff(t) * want.mag.v[i];
  ref::Array w = want.out;
  w.sizes = got.sizes();
  err.sizes = got.sizes();
  return th::expect_close(got, w, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &err);
}

struct AttnCase {
  int64_t B, Hq, Hk, L, S, E, Ev;
};

std::string attn_name(const AttnCase& c, DType t, const std::string& what, Device d) {
  return "B " + std::to_string(c.B) + " Hq " + std::to_string(c.Hq) + " Hk " + std::to_string(c.Hk) + " L " +
         std::to_string(c.L) + " S " + std::to_string(c.S) + " E " + std::to_string(c.E) + " Ev " +
         std::to_string(c.Ev) + " " + th::dtype_str(t) + " " + what + " on " + d.str();
}

const std::vector<AttnCase>& attn_cases() {
  static const std::vector<AttnCase> v = {
      {1, 1, 1, 1, 1, 8, 8},       {2, 4, 4, 3, 5, 16, 16},     {1, 32, 8, 1, 300, 80, 80},
      {1, 8, 2, 1, 1000, 128, 128}, {2, 4, 2, 7, 33, 64, 64},    {1, 4, 4, 64, 64, 40, 40},
      {1, 2, 1, 130, 130, 96, 96}, {1, 2, 2, 5, 9, 256, 256},   {3, 6, 3, 17, 17, 24, 16},
      {1, 4, 1, 2, 4100, 64, 64},  {1, 2, 2, 9, 3, 8, 8},       {2, 2, 2, 0, 4, 8, 8},
      {1, 1, 1, 3, 0, 8, 8},       {1, 16, 4, 4, 77, 128, 128}, {1, 1, 1, 200, 33, 320, 320},
  };
  return v;
}

// [B, H, N, D] of values `a` in layout: 0 contiguous, 1 the transposed [B, N, H, D] memory of
// Hugging Face's projections (.transpose(1, 2)), 2 a slice of a larger cache along N.
Tensor make_bhnd(const ref::Array& a, DType t, Device dev, int layout) {
  if (layout == 1) {
    ref::Array tr({a.sizes[0], a.sizes[2], a.sizes[1], a.sizes[3]});
    for (int64_t b = 0; b < a.sizes[0]; ++b)
      for (int64_t h = 0; h < a.sizes[1]; ++h)
        for (int64_t n = 0; n < a.sizes[2]; ++n)
          for (int64_t d = 0; d < a.sizes[3]; ++d) tr.at({b, n, h, d}) = a.at({b, h, n, d});
    return th::make_tensor(tr, t, dev).transpose(1, 2);
  }
  if (layout == 2) {
    ref::Array big({a.sizes[0], a.sizes[1], a.sizes[2] + 5, a.sizes[3]}, std::nan(""));
    for (int64_t b = 0; b < a.sizes[0]; ++b)
      for (int64_t h = 0; h < a.sizes[1]; ++h)
        for (int64_t n = 0; n < a.sizes[2]; ++n)
          for (int64_t d = 0; d < a.sizes[3]; ++d) big.at({b, h, n + 2, d}) = a.at({b, h, n, d});
    return th::make_tensor(big, t, dev).narrow(2, 2, a.sizes[2]);
  }
  return th::make_tensor(a, t, dev);
}

std::vector<DType> attn_dtypes(Device d) {
  if (d.is_cpu()) return {kFloat32, kBFloat16, kFloat16, kFloat64};
  return {kFloat32, kBFloat16, kFloat16};
}

class Attention : public th::DeviceTest {};

// Plain, causal and GQA attention over every case, dtype and a rotating operand layout.
TEST_P(Attention, Table) {
  th::CaseLoop loop;
  th::Gen g(8000);
  int ci = 0;
  for (const AttnCase& c : attn_cases()) {
    for (DType t : attn_dtypes(dev())) {
      for (bool causal : {false, true}) {
        ++ci;
        const int lq = ci % 3, lkv = (ci / 3) % 3;
        const bool gqa = c.Hq != c.Hk;
        if (!loop.run(attn_name(c, t, std::string(causal ? "causal" : "full") + " layouts " + std::to_string(lq) +
                                          "/" + std::to_string(lkv),
                                dev()),
                      [&] {
          ref::Array q = th::random_array({c.B, c.Hq, c.L, c.E}, t, g, -1, 1);
          ref::Array k = th::random_array({c.B, c.Hk, c.S, c.E}, t, g, -1, 1);
          ref::Array v = th::random_array({c.B, c.Hk, c.S, c.Ev}, t, g, -1, 1);
          Tensor tq = make_bhnd(q, t, dev(), lq), tk = make_bhnd(k, t, dev(), lkv), tv = make_bhnd(v, t, dev(), lkv);
          const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
          Tensor y = scaled_dot_product_attention(tq, tk, tv, {}, 0.0, causal, std::nullopt, gqa);
          ASSERT_TRUE(th::expect_shape(y, {c.B, c.Hq, c.L, c.Ev}, t));
          ASSERT_TRUE(check_attention(y, ref::attention(q, k, v, nullptr, false, nullptr, causal, false, scale), t));
        }))
          return;
      }
    }
  }
}

// Bool and additive masks (float32 and the query's dtype) in broadcast shapes, a custom scale.
TEST_P(Attention, Masks) {
  th::CaseLoop loop;
  th::Gen g(8001);
  const int64_t B = 2, H = 4, L = 5, S = 37, E = 32;
  const std::vector<Shape> shapes = {{L, S}, {1, H, L, S}, {B, 1, 1, S}, {B, H, L, S}, {S}};
  for (DType t : {kFloat32, kBFloat16}) {
    for (DType mt : {kBool, kFloat32, t}) {
      for (const Shape& ms : shapes) {
        if (!loop.run(th::dtype_str(t) + " mask " + th::dtype_str(mt) + " " + ref::shape_to_string(ms), [&] {
          ref::Array q = th::random_array({B, H, L, E}, t, g, -1, 1), k = th::random_array({B, H, S, E}, t, g, -1, 1),
                     v = th::random_array({B, H, S, E}, t, g, -1, 1);
          ref::Array m = mt == kBool ? th::random_array(ms, kBool, g, 0, 1) : th::random_array(ms, mt, g, -3, 1);
          if (mt != kBool) m.v[0] = -INFINITY;
          ref::Array full({B, H, L, S});
          ref::for_each_index(full.sizes, [&](const Shape& idx) {
            Shape mi(idx.end() - static_cast<int64_t>(ms.size()), idx.end());
            for (size_t d = 0; d < ms.size(); ++d)
              if (ms[d] == 1) mi[d] = 0;
            full.at(idx) = m.at(mi);
          });
          Tensor y = scaled_dot_product_attention(th::make_tensor(q, t, dev()), th::make_tensor(k, t, dev()),
                                                  th::make_tensor(v, t, dev()), th::make_tensor(m, mt, dev()), 0.0,
                                                  false, 0.3);
          ASSERT_TRUE(check_attention(y, ref::attention(q, k, v, &full, mt == kBool, nullptr, false, false, 0.3), t));
        }))
          return;
      }
    }
  }
}

// A row whose keys are all masked out gives zeros (PyTorch's math backend), bool and -inf alike.
TEST_P(Attention, FullyMaskedRowsAreZero) {
  th::Gen g(8002);
  ref::Array q = th::random_array({1, 2, 3, 8}, kFloat32, g, -1, 1), k = th::random_array({1, 2, 5, 8}, kFloat32, g, -1, 1);
  ref::Array mb({3, 5}, 1.0), mf({3, 5}, 0.0);
  for (int64_t j = 0; j < 5; ++j) mb.at({1, j}) = 0, mf.at({1, j}) = -INFINITY;
  Tensor tq = th::make_tensor(q, kFloat32, dev()), tk = th::make_tensor(k, kFloat32, dev());
  for (const Tensor& m : {th::make_tensor(mb, kBool, dev()), th::make_tensor(mf, kFloat32, dev())}) {
    ref::Array y = th::to_array(scaled_dot_product_attention(tq, tk, tk, m));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t e = 0; e < 8; ++e) {
        EXPECT_EQ(y.at({0, h, 1, e}), 0.0);
        EXPECT_TRUE(std::isfinite(y.at({0, h, 0, e})));
      }
  }
  // No keys at all.
  Tensor empty_k = zeros({1, 2, 0, 8}, TensorOptions(kFloat32).device(dev()));
  EXPECT_TRUE(th::expect_equal(scaled_dot_product_attention(tq, empty_k, empty_k), ref::Array({1, 2, 3, 8}, 0.0)));
}

// PyTorch's broadcasting: batch dims like matmul, the head dim too without enable_gqa. The
// 16-bit cases are prefill shapes whose K / V keep stride-0 batch / head dims (on CUDA the
// wgmma prefill's cp.async variant: TMA cannot describe them).
TEST_P(Attention, Broadcasting) {
  th::Gen g(8003);
  struct B {
    Shape q, k, v, out;
    DType t = kFloat32;
  };
  const std::vector<B> cases = {
      {{1, 1, 64}, {2, 1, 1, 64}, {2, 1, 1, 64}, {2, 1, 1, 64}},  // PyTorch #189631
      {{2, 3, 4, 5, 16}, {3, 1, 7, 16}, {3, 1, 7, 8}, {2, 3, 4, 5, 8}},
      {{4, 6, 16}, {1, 9, 16}, {1, 9, 16}, {4, 6, 16}},
      {{6, 16}, {9, 16}, {9, 16}, {6, 16}},
      {{1, 4, 3, 16}, {2, 1, 5, 16}, {2, 4, 5, 16}, {2, 4, 3, 16}},
      {{2, 3, 40, 64}, {1, 1, 70, 64}, {1, 1, 70, 64}, {2, 3, 40, 64}, kBFloat16},
      {{2, 3, 130, 40}, {2, 1, 33, 40}, {2, 1, 33, 40}, {2, 3, 130, 40}, kFloat16},
  };
  for (const B& c : cases) {
    SCOPED_TRACE(ref::shape_to_string(c.q) + " " + ref::shape_to_string(c.k) + " " + ref::shape_to_string(c.v) + " " +
                 th::dtype_str(c.t));
    ref::Array q = th::random_array(c.q, c.t, g, -1, 1), k = th::random_array(c.k, c.t, g, -1, 1),
               v = th::random_array(c.v, c.t, g, -1, 1);
    Tensor y = scaled_dot_product_attention(th::make_tensor(q, c.t, dev()), th::make_tensor(k, c.t, dev()),
                                            th::make_tensor(v, c.t, dev()));
    ASSERT_TRUE(th::expect_shape(y, c.out, c.t));
    // Reference on operands expanded to the output's batch and heads as [Bflat, H, N, D].
    const Shape lead(c.out.begin(), c.out.end() - 2);
    auto expand = [&](const ref::Array& a, int64_t n, int64_t d) {
      Shape full = lead;
      full.push_back(n);
      full.push_back(d);
      ref::Array r(full);
      ref::for_each_index(full, [&](const Shape& idx) {
        Shape src(idx.end() - a.dim(), idx.end());
        for (int64_t x = 0; x < a.dim(); ++x)
          if (a.sizes[static_cast<size_t>(x)] == 1) src[static_cast<size_t>(x)] = 0;
        r.at(idx) = a.at(src);
      });
      const int64_t rows = ref::numel_of(lead);
      r.sizes = {rows, 1, n, d};
      return r;
    };
    const int64_t L = c.q[c.q.size() - 2], S = c.k[c.k.size() - 2];
    ref::AttentionRef want = ref::attention(expand(q, L, c.q.back()), expand(k, S, c.k.back()), expand(v, S, c.v.back()), nullptr,
                                 false, nullptr, false, false, 1.0 / std::sqrt(static_cast<double>(c.q.back())));
    EXPECT_TRUE(check_attention(y, want, c.t));
  }
}

// KV cache: keys [0, len) valid (clamped to S_max), new queries at the end (causal, bottom
// right); cache slots past len hold NaN, so reading one shows.
TEST_P(Attention, DecodeAttentionOverCache) {
  th::CaseLoop loop;
  th::Gen g(8004);
  for (DType t : {kBFloat16, kFloat32, kFloat16}) {
    for (int64_t L : {1, 3}) {
      for (const auto& [Hq, Hk, E] : {std::tuple{8, 2, 64}, std::tuple{32, 8, 80}, std::tuple{4, 4, 128},
                                      std::tuple{2, 1, 256}}) {
        if (!loop.run(th::dtype_str(t) + " L " + std::to_string(L) + " Hq " + std::to_string(Hq) + " Hk " +
                          std::to_string(Hk) + " E " + std::to_string(E),
                      [&] {
          const int64_t B = 4, S = 300;
          const std::vector<int64_t> lens = {L, 57, 300, 450};
          ref::Array q = th::random_array({B, Hq, L, E}, t, g, -1, 1);
          ref::Array k = th::random_array({B, Hk, S, E}, t, g, -1, 1), v = th::random_array({B, Hk, S, E}, t, g, -1, 1);
          ref::Array kp = k, vp = v;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hk; ++h)
              for (int64_t j = std::min(lens[static_cast<size_t>(b)], S); j < S; ++j)
                for (int64_t d = 0; d < E; ++d) kp.at({b, h, j, d}) = vp.at({b, h, j, d}) = std::nan("");
          ref::Array la({B});
          for (int64_t b = 0; b < B; ++b) la.v[static_cast<size_t>(b)] = static_cast<double>(lens[static_cast<size_t>(b)]);
          Tensor y = decode_attention(th::make_tensor(q, t, dev()), th::make_tensor(kp, t, dev()),
                                      th::make_tensor(vp, t, dev()), th::make_tensor(la, kInt32, dev()));
          ASSERT_TRUE(th::expect_shape(y, {B, Hq, L, E}, t));
          ASSERT_TRUE(check_attention(
              y, ref::attention(q, k, v, nullptr, false, &lens, true, true, 1.0 / std::sqrt(static_cast<double>(E))), t));
        }))
          return;
      }
    }
  }
}

// Long caches with few kv heads: the CPU decode path splits one kv head's keys over the
// threads and combines the splits (lengths that leave whole splits empty, one split's NaN key
// reaching only its batch's rows through the combine); head_dim 40 leaves a column tail past
// the scores' whole vectors.
TEST_P(Attention, DecodeLongCacheSplits) {
  th::CaseLoop loop;
  th::Gen g(8009);
  for (DType t : {kBFloat16, kFloat32, kFloat16}) {
    for (const auto& [Hq, Hk, E] : {std::tuple{4, 1, 64}, std::tuple{8, 2, 80}, std::tuple{4, 2, 40}}) {
      if (!loop.run(th::dtype_str(t) + " Hq " + std::to_string(Hq) + " Hk " + std::to_string(Hk), [&] {
        const int64_t B = 3, S = 5000;
        const std::vector<int64_t> lens = {5000, 700, 2600};
        ref::Array q = th::random_array({B, Hq, 1, E}, t, g, -1, 1);
        ref::Array k = th::random_array({B, Hk, S, E}, t, g, -1, 1), v = th::random_array({B, Hk, S, E}, t, g, -1, 1);
        ref::Array kp = k, vp = v;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < Hk; ++h)
            for (int64_t j = lens[static_cast<size_t>(b)]; j < S; ++j)
              for (int64_t d = 0; d < E; ++d) kp.at({b, h, j, d}) = vp.at({b, h, j, d}) = std::nan("");
        v.at({2, 0, 2000, 3}) = vp.at({2, 0, 2000, 3}) = std::nan("");  // batch 2, kv head 0: NaN rows
        ref::Array la({B});
        for (int64_t b = 0; b < B; ++b) la.v[static_cast<size_t>(b)] = static_cast<double>(lens[static_cast<size_t>(b)]);
        Tensor y = decode_attention(th::make_tensor(q, t, dev()), th::make_tensor(kp, t, dev()),
                                    th::make_tensor(vp, t, dev()), th::make_tensor(la, kInt32, dev()));
        ref::AttentionRef want =
            ref::attention(q, k, v, nullptr, false, &lens, true, true, 1.0 / std::sqrt(static_cast<double>(E)));
        ref::Array got = th::to_array(y);
        const int64_t group = Hq / Hk;
        for (int64_t h = 0; h < Hq; ++h) {  // batch 2's heads of kv head 0: NaN in column 3 only
          for (int64_t d = 0; d < E; ++d) {
            const size_t at = static_cast<size_t>(((2 * Hq + h) * 1) * E + d);
            const bool nan_col = h / group == 0 && d == 3;
            ASSERT_EQ(std::isnan(got.v[at]), nan_col) << "head " << h << " col " << d;
            if (nan_col) got.v[at] = want.out.v[at] = want.err.v[at] = want.mag.v[at] = 0.0;
          }
        }
        // head_dim 40 has no CUDA decode kernel: the prefill kernel (p rounded to t) runs it.
        ASSERT_TRUE(check_attention(th::make_tensor(got, t, kCPU), want, t, dev()));
      }))
        return;
    }
  }
}

// batch x heads past 65535 (a grid dim of 65535 or a 16-bit index breaks here).
TEST_P(Attention, ManyBatchHeads) {
  th::Gen g(8005);
  const AttnCase c{2, 40000, 40000, 1, 4, 8, 8};
  ref::Array q = th::random_array({c.B, c.Hq, c.L, c.E}, kBFloat16, g, -1, 1);
  ref::Array k = th::random_array({c.B, c.Hk, c.S, c.E}, kBFloat16, g, -1, 1);
  ref::Array v = th::random_array({c.B, c.Hk, c.S, c.Ev}, kBFloat16, g, -1, 1);
  Tensor y = scaled_dot_product_attention(th::make_tensor(q, kBFloat16, dev()), th::make_tensor(k, kBFloat16, dev()),
                                          th::make_tensor(v, kBFloat16, dev()));
  EXPECT_TRUE(check_attention(y, ref::attention(q, k, v, nullptr, false, nullptr, false, false, 1.0 / std::sqrt(8.0)),
                              kBFloat16));
}

TEST_P(Attention, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor q = zeros({1, 4, 3, 8}, f), k = zeros({1, 2, 5, 8}, f);
  const char* op = "scaled_dot_product_attention";
  EXPECT_THROWS_OP(ShapeError, op, scaled_dot_product_attention(q, k, k));  // heads 4 vs 2 without gqa
  EXPECT_THROWS_OP(ShapeError, op, scaled_dot_product_attention(q, zeros({1, 3, 5, 8}, f), zeros({1, 3, 5, 8}, f), {}, 0, false, {}, true));
  EXPECT_THROWS_OP(DTypeError, op, scaled_dot_product_attention(q, k.to(kFloat64), k.to(kFloat64), {}, 0, false, {}, true));
  EXPECT_THROWS_OP(DTypeError, op, scaled_dot_product_attention(q.to(kInt32), k.to(kInt32), k.to(kInt32), {}, 0, false, {}, true));
  EXPECT_THROWS_OP(ShapeError, op, scaled_dot_product_attention(q, zeros({1, 2, 5, 9}, f), k, {}, 0, false, {}, true));
  EXPECT_THROWS_OP(ShapeError, op, scaled_dot_product_attention(q, k, zeros({1, 2, 6, 8}, f), {}, 0, false, {}, true));
  EXPECT_THROWS_OP(ShapeError, op, scaled_dot_product_attention(zeros({8}, f), k, k));
  EXPECT_THROWS_OP(Error, op, scaled_dot_product_attention(q, k, k, zeros({3, 5}, f), 0, true, {}, true));
  EXPECT_THROWS_OP(Error, op, scaled_dot_product_attention(q, k, k, {}, 0.1, false, {}, true));
  EXPECT_THROWS_OP(ShapeError, op, scaled_dot_product_attention(q, k, k, zeros({4, 5}, f), 0, false, {}, true));
  EXPECT_THROWS_OP(DTypeError, op, scaled_dot_product_attention(q, k, k, zeros({3, 5}, TensorOptions(kInt32).device(dev())), 0, false, {}, true));
  EXPECT_THROWS_OP(Error, op, scaled_dot_product_attention(Tensor(), k, k));
  Tensor lens = zeros({1}, TensorOptions(kInt32).device(dev()));
  EXPECT_THROWS_OP(DTypeError, "decode_attention", decode_attention(q, k, k, lens.to(kInt64)));
  EXPECT_THROWS_OP(ShapeError, "decode_attention", decode_attention(q, zeros({1, 3, 5, 8}, f), zeros({1, 3, 5, 8}, f), lens));
  EXPECT_THROWS_OP(ShapeError, "decode_attention", decode_attention(q, k, k, zeros({2}, TensorOptions(kInt32).device(dev()))));
  EXPECT_THROWS_OP(ShapeError, "decode_attention", decode_attention(q.reshape({4, 3, 8}), k, k, lens));
  EXPECT_THROWS_OP(ShapeError, "decode_attention", decode_attention(q, k, zeros({1, 2, 4, 8}, f), lens));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, op, scaled_dot_product_attention(q, k.to(kCPU), k, {}, 0, false, {}, true));
    EXPECT_THROWS_OP(DeviceError, "decode_attention", decode_attention(q, k, k, lens.to(kCPU)));
  }
}

// cache_write appends at device positions, drops rows outside the cache, leaves the rest.
TEST_P(Attention, CacheWrite) {
  th::Gen g(8007);
  for (DType t : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(th::dtype_str(t));
    const int64_t B = 4, H = 3, S = 10, L = 3, D = 24;
    ref::Array cache({B, H, S, D}, std::nan("")), vals = th::random_array({B, H, L, D}, t, g, -1, 1);
    const std::vector<int64_t> pos = {0, 5, S - 1, -1};
    Tensor tc = th::make_tensor(cache, t, dev());
    ref::Array pa({B});
    for (int64_t b = 0; b < B; ++b) pa.v[static_cast<size_t>(b)] = static_cast<double>(pos[static_cast<size_t>(b)]);
    Tensor& r = cache_write(tc, make_bhnd(vals, t, dev(), 1), th::make_tensor(pa, kInt32, dev()));
    EXPECT_EQ(&r, &tc);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l) {
          const int64_t row = pos[static_cast<size_t>(b)] + l;
          if (row < 0 || row >= S) continue;
          for (int64_t d = 0; d < D; ++d) cache.at({b, h, row, d}) = vals.at({b, h, l, d});
        }
    EXPECT_TRUE(th::expect_equal(tc, cache));
  }
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor c = zeros({1, 2, 8, 4}, f);
  Tensor p = zeros({1}, TensorOptions(kInt32).device(dev()));
  EXPECT_THROWS_OP(DTypeError, "cache_write", cache_write(c, zeros({1, 2, 1, 4}, TensorOptions(kBFloat16).device(dev())), p));
  EXPECT_THROWS_OP(DTypeError, "cache_write", cache_write(c, zeros({1, 2, 1, 4}, f), p.to(kInt64)));
  EXPECT_THROWS_OP(ShapeError, "cache_write", cache_write(c, zeros({1, 3, 1, 4}, f), p));
  EXPECT_THROWS_OP(ShapeError, "cache_write", cache_write(c, zeros({1, 2, 1, 4}, f), zeros({2}, TensorOptions(kInt32).device(dev()))));
}

// The runtime's decode loop: prefill a prompt into the cache, then one token at a time
// cache_write + decode_attention; every step equals causal attention over the whole prefix.
TEST_P(Attention, DecodeLoopMatchesCausalAttention) {
  th::Gen g(8008);
  const int64_t B = 2, Hq = 8, Hk = 2, S = 40, E = 64, prompt = 5, steps = 6;
  const DType t = kFloat32;
  ref::Array q = th::random_array({B, Hq, prompt + steps, E}, t, g, -1, 1);
  ref::Array k = th::random_array({B, Hk, prompt + steps, E}, t, g, -1, 1), v = th::random_array({B, Hk, prompt + steps, E}, t, g, -1, 1);
  Tensor tq = th::make_tensor(q, t, dev()), tk = th::make_tensor(k, t, dev()), tv = th::make_tensor(v, t, dev());
  Tensor kc = zeros({B, Hk, S, E}, TensorOptions(t).device(dev())), vc = zeros({B, Hk, S, E}, TensorOptions(t).device(dev()));
  Tensor want = scaled_dot_product_attention(tq, tk, tv, {}, 0.0, true, std::nullopt, true);
  auto positions = [&](int64_t p) { return full({B}, p, TensorOptions(kInt32).device(dev())); };
  cache_write(kc, tk.narrow(2, 0, prompt), positions(0));
  cache_write(vc, tv.narrow(2, 0, prompt), positions(0));
  Tensor first = decode_attention(tq.narrow(2, 0, prompt), kc, vc, positions(prompt));
  EXPECT_TRUE(th::expect_close(first, th::to_array(want.narrow(2, 0, prompt)), th::Tol{64 * th::unit_roundoff(t), 64 * th::unit_roundoff(t)}));
  for (int64_t s = prompt; s < prompt + steps; ++s) {
    cache_write(kc, tk.narrow(2, s, 1), positions(s));
    cache_write(vc, tv.narrow(2, s, 1), positions(s));
    Tensor y = decode_attention(tq.narrow(2, s, 1), kc, vc, positions(s + 1));
    EXPECT_TRUE(th::expect_close(y, th::to_array(want.narrow(2, s, 1)), th::Tol{64 * th::unit_roundoff(t), 64 * th::unit_roundoff(t)})) << "step " << s;
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Attention);

// decode_attention captured once: the replay reads the new cache lengths and query on the
// device (one graph for every decode position) and equals an eager call bit for bit.
TEST(AttentionGraph, DecodeReplaysNewLengths) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(8006);
  const int64_t B = 2, Hq = 32, Hk = 8, S = 4096, E = 80;
  Tensor q = th::make_input({B, Hq, 1, E}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t;
  ref::Array k = th::random_array({B, Hk, S, E}, kBFloat16, gen, -1, 1), v = th::random_array({B, Hk, S, E}, kBFloat16, gen, -1, 1);
  Tensor tk = th::make_tensor(k, kBFloat16, dev), tv = th::make_tensor(v, kBFloat16, dev);
  Tensor lens = th::make_tensor(ref::Array({B}, 1.0), kInt32, dev);
  decode_attention(q, tk, tv, lens);
  s.synchronize();
  cuda::Graph graph;
  graph.capture_begin();
  Tensor y = decode_attention(q, tk, tv, lens);
  graph.capture_end();
  for (const std::vector<int64_t>& l : {std::vector<int64_t>{1, 2}, {100, 4096}, {4095, 33}}) {
    ref::Array la({B});
    for (int64_t b = 0; b < B; ++b) la.v[static_cast<size_t>(b)] = static_cast<double>(l[static_cast<size_t>(b)]);
    lens.copy_(th::make_tensor(la, kInt32, dev));
    th::Input nq = th::make_input({B, Hq, 1, E}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1);
    q.copy_(nq.t);
    graph.replay();
    s.synchronize();
    Tensor eager = decode_attention(q, tk, tv, lens);
    s.synchronize();
    EXPECT_EQ(th::to_bits(y), th::to_bits(eager)) << "lens " << l[0] << ", " << l[1];
    EXPECT_TRUE(check_attention(y, ref::attention(nq.a, k, v, nullptr, false, &l, true, true, 1.0 / std::sqrt(80.0)),
                                kBFloat16));
  }
  graph.reset();
}

// One captured decode step (cache_write of the new k / v at the device position, then
// decode_attention over the new length) replayed for consecutive positions: each replay equals
// causal attention over the prefix.
TEST(AttentionGraph, CapturedDecodeStepServesEveryPosition) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(8009);
  const int64_t B = 1, Hq = 32, Hk = 8, S = 64, E = 128, steps = 5;
  const DType t = kBFloat16;
  ref::Array q = th::random_array({B, Hq, steps, E}, t, gen, -1, 1), k = th::random_array({B, Hk, steps, E}, t, gen, -1, 1),
             v = th::random_array({B, Hk, steps, E}, t, gen, -1, 1);
  Tensor tq = th::make_tensor(q, t, dev), tk = th::make_tensor(k, t, dev), tv = th::make_tensor(v, t, dev);
  Tensor want = scaled_dot_product_attention(tq, tk, tv, {}, 0.0, true, std::nullopt, true);
  Tensor kc = zeros({B, Hk, S, E}, TensorOptions(t).device(dev)), vc = zeros({B, Hk, S, E}, TensorOptions(t).device(dev));
  Tensor q1 = empty({B, Hq, 1, E}, TensorOptions(t).device(dev)), k1 = empty({B, Hk, 1, E}, TensorOptions(t).device(dev)),
         v1 = empty({B, Hk, 1, E}, TensorOptions(t).device(dev));
  Tensor pos = zeros({B}, TensorOptions(kInt32).device(dev)), len = ones({B}, TensorOptions(kInt32).device(dev));
  auto step = [&] {
    cache_write(kc, k1, pos);
    cache_write(vc, v1, pos);
    return decode_attention(q1, kc, vc, len);
  };
  step();
  s.synchronize();
  kc.fill_(0);
  vc.fill_(0);
  cuda::Graph graph;
  graph.capture_begin();
  Tensor y = step();
  graph.capture_end();
  for (int64_t i = 0; i < steps; ++i) {
    q1.copy_(tq.narrow(2, i, 1));
    k1.copy_(tk.narrow(2, i, 1));
    v1.copy_(tv.narrow(2, i, 1));
    pos.fill_(i);
    len.fill_(i + 1);
    graph.replay();
    s.synchronize();
    const double u = th::unit_roundoff(t);
    EXPECT_TRUE(th::expect_close(y, th::to_array(want.narrow(2, i, 1)), th::Tol{th::underflow_atol(t), 4 * u})) << "step " << i;
  }
  graph.reset();
}

}  // namespace
