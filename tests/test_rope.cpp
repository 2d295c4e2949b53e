// rope (neox-style rotary embedding) and rope_inv_freq: one case table (x shape x positions
// shape x rotary_dim x x layout x positions dtype x dtype) against the float64 reference with
// positions up to 40000, partial rotary dims copied bit for bit, the inverse frequencies against
// a float32 computation, errors, and CUDA graph replay with positions on the device.
#include <cmath>
#include <cstring>
#include <limits>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

struct RopeCase {
  Shape x;            // [*, head_dim]
  Shape pos;          // broadcastable to x's leading dims
  int64_t rotary_dim; // 2 * inv_freq.size(0)
  double theta;       // 0: random inv_freq in (0, 1] instead of rope_inv_freq
};

// [b, s, h, d] with positions [b, s, 1] and [b, h, s, d] with [b, 1, s]; head_dim 64, 80, 128,
// 40; partial rotary dims; 2-D, 1-D and empty x; 65536+ rows.
const std::vector<RopeCase>& rope_cases() {
  static const std::vector<RopeCase> v = {
      {{2, 5, 3, 64}, {2, 5, 1}, 64, 10000},   {{2, 3, 5, 128}, {2, 1, 5}, 128, 1e6},  {{1, 7, 2, 80}, {1, 7, 1}, 80, 10000},
      {{3, 4, 2, 40}, {3, 4, 1}, 40, 10000},   {{1, 1, 8, 128}, {1, 1, 1}, 128, 1e6},  {{4, 1, 2, 64}, {4, 1, 1}, 64, 1e6},
      {{2, 4, 3, 128}, {2, 4, 1}, 64, 10000},  {{1, 5, 2, 80}, {1, 5, 1}, 32, 1e6},    {{2, 3, 2, 64}, {2, 3, 1}, 2, 10000},
      {{2, 6, 2, 64}, {6, 1}, 64, 10000},      {{17, 64}, {17}, 64, 10000},           {{64}, {}, 64, 1e6},
      {{3, 9, 128}, {3, 9}, 128, 0},           {{2, 5, 4, 40}, {2, 5, 1}, 24, 0},     {{2, 0, 3, 64}, {2, 0, 1}, 64, 10000},
      {{5, 4, 1}, {5, 4}, 0, 10000},           {{3, 2, 6}, {3, 1}, 6, 10000},
  };
  return v;
}

std::vector<float> floats_of(const Tensor& t) {
  Tensor c = th::to_cpu(t).contiguous();
  std::vector<float> v(static_cast<size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.data_ptr(), v.size() * sizeof(float));
  return v;
}

// out = (a cos - b sin, b cos + a sin): cos / sin of the float32 angle to k = 8 ulps, two
// products and a sum in float32 (2 more), all on the scale |a| + |b|; then one rounding.
::testing::AssertionResult check_rope(const Tensor& y, const ref::Array& x, const ref::Array& pos, const std::vector<float>& freq,
                                      DType t) {
  const ref::Array want = ref::rope(x, pos, freq);
  ref::Array extra = ref::rope_scale(x, 2 * static_cast<int64_t>(freq.size()));
  const double uc = th::unit_roundoff(th::compute_dtype(t));
  for (double& e : extra.v) e *= 2.0 * (8 + 2) * uc;
  return th::expect_close(y, want, th::Tol{th::underflow_atol(t), th::unit_roundoff(t)}, &extra);
}

// Positions in [0, 40000], with 0 and 40000 themselves at the first and last places.
ref::Array make_positions(const Shape& sizes, th::Gen& g) {
  ref::Array p = th::random_array(sizes, kInt64, g, 0, 40000);
  if (!p.v.empty()) {
    p.v.front() = 0;
    p.v.back() = 40000;
  }
  return p;
}

// x [b, s, h, d] as the transposed view [b, h, s, d] of a contiguous [b, s, h, d] tensor (last
// stride 1, what a q projection viewed per head gives); `a` is in the view's logical order.
struct XInput {
  Tensor t;
  ref::Array a;
};
XInput make_x(const Shape& sizes, DType t, Device dev, const std::string& layout, th::Gen& g) {
  if (layout != "head-transposed" || sizes.size() != 4) {
    Layout l = layout == "transposed" ? Layout::Transposed
               : layout == "strided"    ? Layout::Strided
               : layout == "row-padded" ? Layout::RowPadded
               : layout == "offset"     ? Layout::Offset
                                        : Layout::Contiguous;
    th::Input in = th::make_input(sizes, t, dev, l, g, -2, 2);
    return {in.t, in.a};
  }
  const Shape stored = {sizes[0], sizes[2], sizes[1], sizes[3]};
  th::Input in = th::make_input(stored, t, dev, Layout::Contiguous, g, -2, 2);
  XInput r{in.t.transpose(1, 2), ref::Array(sizes)};
  int64_t k = 0;
  ref::for_each_index(sizes, [&](const Shape& i) { r.a.v[static_cast<size_t>(k++)] = in.a.at({i[0], i[2], i[1], i[3]}); });
  return r;
}

const std::vector<std::string> kXLayouts = {"contiguous", "head-transposed", "row-padded", "offset", "strided", "transposed"};

class Rope : public th::DeviceTest {};

TEST_P(Rope, Table) {
  th::CaseLoop loop;
  th::Gen g(7000);
  int k = 0;
  for (const RopeCase& c : rope_cases()) {
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      for (size_t li = 0; li < (t == kFloat32 ? kXLayouts.size() : 3); ++li) {
        const std::string& lx = kXLayouts[li];
        const Layout lp = k % 3 == 2 ? Layout::Strided : Layout::Contiguous;
        ++k;
        if (!loop.run(th::case_name(c.x, t, Layout::Contiguous, dev()) + " as " + lx + ", positions " +
                          ref::shape_to_string(c.pos) + " " + th::layout_name(lp) + ", rotary_dim " + std::to_string(c.rotary_dim),
                      [&] {
          XInput x = make_x(c.x, t, dev(), lx, g);
          const ref::Array pa = make_positions(c.pos, g);
          Tensor freq;
          if (c.rotary_dim == 0) {
            freq = empty({0}, TensorOptions(kFloat32).device(dev()));  // nothing rotated: a copy
          } else if (c.theta > 0) {
            freq = rope_inv_freq(c.rotary_dim, c.theta, dev());
          } else {
            ref::Array f = th::random_array({c.rotary_dim / 2}, kFloat32, g, 1e-4, 1.0);
            freq = th::make_tensor(f, kFloat32, dev());
          }
          const std::vector<float> fv = floats_of(freq);
          const auto x_before = th::storage_bits(x.t);
          Tensor y64 = rope(x.t, th::make_index(pa, dev(), lp, kInt64), freq);
          ASSERT_TRUE(th::expect_shape(y64, c.x, t));
          ASSERT_EQ(y64.device(), dev());
          ASSERT_TRUE(check_rope(y64, x.a, pa, fv, t));
          Tensor y32 = rope(x.t, th::make_index(pa, dev(), lp, kInt32), freq);
          ASSERT_EQ(th::to_bits(y32), th::to_bits(y64)) << "int32 and int64 positions differ";
          // Columns past rotary_dim are copied bit for bit.
          const int64_t hd = c.x.back();
          if (c.rotary_dim < hd) {
            ASSERT_EQ(th::to_bits(y64.slice(-1, c.rotary_dim, hd)), th::to_bits(x.t.slice(-1, c.rotary_dim, hd))) << "pass-through";
          }
          ASSERT_TRUE(th::storage_unchanged(x.t, x_before));
        }))
          return;
      }
    }
  }
}

// 65536+ rows, and positions read through a stride-0 broadcast over 70000 heads.
TEST_P(Rope, MoreThan65536Rows) {
  th::CaseLoop loop;
  th::Gen g(7001);
  for (DType t : {kFloat32, kBFloat16}) {
    for (const Shape& ps : {Shape{70000, 1}, Shape{1, 1}}) {
      if (!loop.run(th::case_name({70000, 1, 8}, t, Layout::Contiguous, dev()) + " positions " + ref::shape_to_string(ps), [&] {
        th::Input x = th::make_input({70000, 1, 8}, t, dev(), Layout::Contiguous, g, -2, 2);
        const ref::Array pa = make_positions(ps, g);
        Tensor freq = rope_inv_freq(8, 10000, dev());
        Tensor y = rope(x.t, th::make_index(pa, dev()), freq);
        ASSERT_TRUE(check_rope(y, x.a, pa, floats_of(freq), t));
      }))
        return;
    }
  }
}

// Every position 0 .. 40000 at once against the largest frequency (1: angle = position) and
// the smallest, where an inaccurate sin / cos of a large argument shows.
TEST_P(Rope, AllPositionsUpTo40000) {
  for (DType t : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(th::dtype_str(t));
    const int64_t n = 40001;
    ref::Array pa({n});
    for (int64_t i = 0; i < n; ++i) pa.v[static_cast<size_t>(i)] = static_cast<double>(i);
    th::Gen g(7002);
    th::Input x = th::make_input({n, 8}, t, dev(), Layout::Contiguous, g, -2, 2);
    Tensor freq = rope_inv_freq(8, 1e6, dev());
    Tensor y = rope(x.t, th::make_index(pa, dev(), Layout::Contiguous, kInt32), freq);
    EXPECT_TRUE(check_rope(y, x.a, pa, floats_of(freq), t));
  }
}

// qk_norm_rope_cache against the float64 composition: q and k heads normed (when a weight is
// given), rounded to the dtype, rotated at position start[b] + l; k and v written to the cache
// rows start[b] + l inside the cache, every other cache element unchanged, v bit for bit.
struct QkCase {
  int64_t B, L, Hq, Hk, D, rotary_dim, S;
  std::vector<int32_t> start;  // [B]
  bool q_norm, k_norm, f32_weights, padded;
};

TEST_P(Rope, QkNormRopeCache) {
  const std::vector<QkCase> cases = {
      {1, 1, 4, 2, 128, 128, 16, {5}, true, true, false, false},           // decode
      {2, 5, 4, 1, 64, 64, 48, {3, 45}, true, true, false, true},          // prefill; rows 48, 49 dropped
      {1, 3, 2, 2, 80, 32, 8, {40000}, true, true, true, false},           // partial rotary; all k / v dropped
      {2, 2, 3, 3, 40, 40, 4, {-1, 2}, false, false, false, false},        // no norm (Llama); row -1 dropped
      {1, 4, 6, 2, 128, 128, 32, {0}, true, false, false, true},           // q norm only
      {3, 1, 40, 4, 128, 128, 9, {0, 4, 8}, true, true, false, false},     // Qwen3-30B-A3B's heads
      {1, 2, 2, 1, 384, 384, 8, {1}, true, true, true, false},             // CUDA's wide-head kernel
  };
  th::CaseLoop loop;
  th::Gen g(7010);
  for (const QkCase& c : cases) {
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      const int64_t C = (c.Hq + 2 * c.Hk) * c.D;
      if (!loop.run(th::case_name({c.B, c.L, C}, t, c.padded ? Layout::RowPadded : Layout::Contiguous, dev()) + " heads " +
                        std::to_string(c.Hq) + "/" + std::to_string(c.Hk) + " rotary " + std::to_string(c.rotary_dim),
                    [&] {
        const DType wt = c.f32_weights ? kFloat32 : t;
        const double eps = 1e-6;
        th::Input qkv = th::make_input({c.B, c.L, C}, t, dev(), c.padded ? Layout::RowPadded : Layout::Contiguous, g, -2, 2);
        th::Input qw = th::make_input({c.D}, wt, dev(), Layout::Contiguous, g, 0.5, 1.5);
        th::Input kw = th::make_input({c.D}, wt, dev(), Layout::Contiguous, g, 0.5, 1.5);
        th::Input kc = th::make_input({c.B, c.Hk, c.S, c.D}, t, dev(), Layout::Contiguous, g, -3, 3);
        th::Input vc = th::make_input({c.B, c.Hk, c.S, c.D}, t, dev(), Layout::Contiguous, g, -3, 3);
        Tensor freq = rope_inv_freq(c.rotary_dim, 1e6, dev());
        const std::vector<float> fv = floats_of(freq);
        Tensor start = tensor<int32_t>(c.start).to(dev());
        Tensor k_cache = kc.t, v_cache = vc.t;
        const auto qkv_before = th::storage_bits(qkv.t);
        Tensor q = qk_norm_rope_cache(qkv.t, c.Hq, c.Hk, c.q_norm ? qw.t : Tensor(), c.k_norm ? kw.t : Tensor(), eps, freq,
                                      k_cache, v_cache, start);
        ASSERT_TRUE(th::expect_shape(q, {c.B, c.Hq, c.L, c.D}, t));
        ASSERT_TRUE(th::storage_unchanged(qkv.t, qkv_before));

        // The reference: heads [B, L, H, D] of qkv, normed and rounded, rotated.
        auto heads = [&](int64_t first, int64_t n) {
          ref::Array a({c.B, c.L, n, c.D});
          ref::for_each_index(a.sizes, [&](const Shape& i) {
            a.at(i) = qkv.a.at({i[0], i[1], (first + i[2]) * c.D + i[3]});
          });
          return a;
        };
        auto normed = [&](const ref::Array& x, bool norm, const ref::Array& w) {
          if (!norm) return x;
          ref::Array y = ref::rms_norm(x, 1, &w, eps);
          for (double& v : y.v) v = th::round_to_dtype(v, t);
          return y;
        };
        ref::Array pos({c.B, c.L, 1});
        ref::for_each_index(pos.sizes, [&](const Shape& i) { pos.at(i) = c.start[static_cast<size_t>(i[0])] + i[1]; });
        const ref::Array qn = normed(heads(0, c.Hq), c.q_norm, qw.a), kn = normed(heads(c.Hq, c.Hk), c.k_norm, kw.a);
        const ref::Array vh = heads(c.Hq + c.Hk, c.Hk);
        const ref::Array want_q = ref::rope(qn, pos, fv), want_k = ref::rope(kn, pos, fv);
        // Tolerance: rope's (cos / sin to 8 ulps, 2 more for the products and sum) plus the normed
        // inputs' relative error `rel`: the norm in the compute type (sum of D squares, sqrt,
        // two products) and one rounding to the dtype that may fall either way. A rotated output
        // takes it on |a| + |b| of its pair, a copied one on itself.
        const double uc = th::unit_roundoff(th::compute_dtype(t)), ut = th::unit_roundoff(t);
        const double rel = 2.0 * ut + 4.0 * uc * (std::sqrt(static_cast<double>(c.D)) + 4.0);
        auto extra_of = [&](const ref::Array& x) {
          ref::Array e = ref::rope_scale(x, c.rotary_dim);
          for (size_t i = 0; i < e.v.size(); ++i)
            e.v[i] = e.v[i] > 0 ? e.v[i] * (2.0 * (8 + 2) * uc + rel) : std::abs(x.v[i]) * rel;
          return e;
        };
        const th::Tol tol{th::underflow_atol(t), th::unit_roundoff(t)};
        const ref::Array eq = extra_of(qn);
        ASSERT_TRUE(th::expect_close(q.transpose(1, 2), want_q, tol, &eq)) << "q";

        // The caches: written rows from the reference, the rest as they were.
        ref::Array want_kc = kc.a, want_vc = vc.a, extra_kc(kc.a.sizes);
        const ref::Array ek = extra_of(kn);
        ref::for_each_index(kn.sizes, [&](const Shape& i) {
          const int64_t row = c.start[static_cast<size_t>(i[0])] + i[1];
          if (row < 0 || row >= c.S) return;
          const Shape at = {i[0], i[2], row, i[3]};
          want_kc.at(at) = want_k.at(i);
          extra_kc.at(at) = ek.at(i);
          want_vc.at(at) = vh.at(i);
        });
        ASSERT_TRUE(th::expect_close(k_cache, want_kc, tol, &extra_kc)) << "k_cache";
        ASSERT_TRUE(th::expect_equal(v_cache, want_vc)) << "v_cache";
        ASSERT_EQ(th::to_bits(v_cache), th::to_bits(th::make_tensor(want_vc, t, kCPU))) << "v_cache bits";

        // The composition it replaces (rms_norm, rope, cache_write) agrees within the same bound.
        if (c.q_norm && c.k_norm) {
          Tensor x = qkv.t;
          Tensor qh = x.narrow(2, 0, c.Hq * c.D).reshape({c.B, c.L, c.Hq, c.D});
          Tensor pos_t = th::make_index(pos, dev());
          Tensor q2 = rope(rms_norm(qh, {c.D}, qw.t, eps), pos_t, freq).transpose(1, 2);
          ASSERT_TRUE(th::expect_close(q2.transpose(1, 2), want_q, tol, &eq)) << "composition q";
        }
      }))
        return;
    }
  }
}

TEST_P(Rope, QkNormRopeCacheErrors) {
  const TensorOptions b = TensorOptions(kBFloat16).device(dev());
  Tensor qkv = zeros({1, 1, 8 * 64}, b), w = ones({64}, b), freq = rope_inv_freq(64, 1e6, dev());
  Tensor kc = zeros({1, 2, 16, 64}, b), vc = zeros({1, 2, 16, 64}, b);
  Tensor start = zeros({1}, TensorOptions(kInt32).device(dev()));
  EXPECT_TRUE(th::expect_shape(qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq, kc, vc, start), {1, 4, 1, 64}, kBFloat16));
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 5, 2, w, w, 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 4, 1, w, w, 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 0, 2, w, w, 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv.view({1, 8 * 64}), 4, 2, w, w, 1e-6, freq, kc, vc, start));
  Tensor vc_short = zeros({1, 2, 8, 64}, b);
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq, kc, vc_short, start));
  Tensor kc_f32 = zeros({1, 2, 16, 64}, TensorOptions(kFloat32).device(dev()));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq, kc_f32, vc, start));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq, kc, vc, start.to(kInt64)));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq, kc, vc, zeros({2}, TensorOptions(kInt32).device(dev()))));
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 4, 2, ones({32}, b), w, 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv, 4, 2, w, w.to(kFloat16), 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv, 4, 2, w.to(kFloat32), w, 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(ShapeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, rope_inv_freq(128, 1e6, dev()), kc, vc, start));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq.to(kFloat64), kc, vc, start));
  EXPECT_THROWS_OP(DTypeError, "qk_norm_rope_cache",
                   qk_norm_rope_cache(qkv.to(kInt32), 4, 2, w, w, 1e-6, freq, kc, vc, start));
  EXPECT_THROWS_OP(Error, "qk_norm_rope_cache", qk_norm_rope_cache(qkv, 4, 2, w, w, -1.0, freq, kc, vc, start));
  EXPECT_THROWS_OP(Error, "qk_norm_rope_cache", qk_norm_rope_cache(Tensor(), 4, 2, w, w, 1e-6, freq, kc, vc, start));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "qk_norm_rope_cache",
                     qk_norm_rope_cache(qkv, 4, 2, w, w, 1e-6, freq, kc, vc, zeros({1}, TensorOptions(kInt32))));
  }
}

// Hugging Face: inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), float32
// throughout. Here: the exponent as a float32 division, the power correctly rounded to float32
// (from long double), then a float32 reciprocal; anvil may differ by 1 ulp where a float32 pow
// is not correctly rounded. theta^(1/2) exactly: 1e6 -> 1/1000, 1e4 -> 1/100, bit for bit.
TEST_P(Rope, InvFreqValues) {
  struct FCase {
    int64_t dim;
    double theta;
  };
  for (const FCase& c : {FCase{128, 1e6}, FCase{64, 10000}, FCase{80, 10000}, FCase{40, 10000}, FCase{128, 500000},
                         FCase{2, 10000}, FCase{6, 1e6}}) {
    SCOPED_TRACE("rotary_dim " + std::to_string(c.dim) + " theta " + std::to_string(c.theta));
    Tensor f = rope_inv_freq(c.dim, c.theta, dev());
    ASSERT_TRUE(th::expect_shape(f, {c.dim / 2}, kFloat32));
    ASSERT_EQ(f.device(), dev());
    const std::vector<float> got = floats_of(f);
    for (int64_t i = 0; i < c.dim / 2; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(c.dim);
      const float p = static_cast<float>(std::pow(static_cast<long double>(static_cast<float>(c.theta)), static_cast<long double>(e)));
      const float want = 1.0f / p;
      const float g = got[static_cast<size_t>(i)];
      int32_t gb, wb;
      std::memcpy(&gb, &g, 4);
      std::memcpy(&wb, &want, 4);
      EXPECT_LE(std::abs(gb - wb), 1) << "i " << i << ": got " << g << ", want " << want;
      if (i == 0) {
        EXPECT_EQ(g, 1.0f);
      }
      if (4 * i == c.dim && (c.theta == 1e6 || c.theta == 1e4)) {
        const float exact = 1.0f / static_cast<float>(std::sqrt(c.theta));
        EXPECT_EQ(g, exact) << "theta^(-1/2)";
      }
    }
  }
  EXPECT_EQ(floats_of(rope_inv_freq(128, 1e6, dev()))[32], 0.001f);
  EXPECT_EQ(floats_of(rope_inv_freq(64, 10000, dev()))[16], 0.01f);
}

TEST_P(Rope, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  const TensorOptions i64 = TensorOptions(kInt64).device(dev());
  Tensor x = zeros({2, 5, 3, 64}, f), pos = zeros({2, 5, 1}, i64), freq = rope_inv_freq(64, 10000, dev());
  EXPECT_TRUE(th::expect_shape(rope(x, pos, freq), {2, 5, 3, 64}, kFloat32));
  // positions: int32 / int64 only, broadcastable to x's leading dims [2, 5, 3]
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x, pos.to(kFloat32), freq));
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x, pos.to(kInt16), freq));
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x, pos.to(kBFloat16), freq));
  EXPECT_THROWS_OP(ShapeError, "rope", rope(x, zeros({2, 4, 1}, i64), freq));
  EXPECT_THROWS_OP(ShapeError, "rope", rope(x, zeros({2, 1, 5}, i64), freq));
  EXPECT_THROWS_OP(ShapeError, "rope", rope(x, zeros({2, 5, 3, 1}, i64), freq));  // more dims than the leading ones
  EXPECT_THROWS_OP(ShapeError, "rope", rope(x, zeros({2, 5, 3, 64}, i64), freq));
  // inv_freq: 1-D float32, rotating at most head_dim columns
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x, pos, freq.to(kFloat64)));
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x, pos, freq.to(kBFloat16)));
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x, pos, freq.view({2, 16})));
  EXPECT_THROWS_OP(ShapeError, "rope", rope(x, pos, rope_inv_freq(128, 10000, dev())));
  EXPECT_THROWS_OP(ShapeError, "rope", rope(zeros({2, 5, 3, 63}, f), pos, freq));
  // x: a float type with a head_dim
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x.to(kInt32), pos, freq));
  EXPECT_THROWS_OP(DTypeError, "rope", rope(x.to(kFloat8_e4m3fn), pos, freq));
  EXPECT_THROWS_OP(ShapeError, "rope", rope(zeros({}, f), zeros({}, i64), freq));
  EXPECT_THROWS_OP(Error, "rope", rope(Tensor(), pos, freq));
  EXPECT_THROWS_OP(Error, "rope", rope(x, Tensor(), freq));
  EXPECT_THROWS_OP(Error, "rope", rope(x, pos, Tensor()));
  // rope_inv_freq: even positive rotary_dim, positive finite theta
  EXPECT_THROWS_OP(ShapeError, "rope_inv_freq", rope_inv_freq(63, 10000));
  EXPECT_THROWS_OP(ShapeError, "rope_inv_freq", rope_inv_freq(1, 10000));
  EXPECT_THROWS_OP(ShapeError, "rope_inv_freq", rope_inv_freq(0, 10000));
  EXPECT_THROWS_OP(ShapeError, "rope_inv_freq", rope_inv_freq(-2, 10000));
  EXPECT_THROWS_OP(Error, "rope_inv_freq", rope_inv_freq(64, 0));
  EXPECT_THROWS_OP(Error, "rope_inv_freq", rope_inv_freq(64, -10000));
  EXPECT_THROWS_OP(Error, "rope_inv_freq", rope_inv_freq(64, std::numeric_limits<double>::infinity()));
  EXPECT_THROWS_OP(Error, "rope_inv_freq", rope_inv_freq(64, std::numeric_limits<double>::quiet_NaN()));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "rope", rope(x, zeros({2, 5, 1}, TensorOptions(kInt64)), freq));
    EXPECT_THROWS_OP(DeviceError, "rope", rope(x, pos, rope_inv_freq(64, 10000)));
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Rope);

// ---- CUDA graph ------------------------------------------------------------------------------
// Positions live on the device and are read there: new positions copied into the same tensor
// must change a replayed graph's rotation.
TEST(RopeGraph, ReplaysNewInputsAndPositions) {
  ANVIL_REQUIRE_CUDA();
  const Device g(kCUDA, 0);
  Stream s = Stream::create(g);
  StreamGuard guard(s);
  th::Gen gen(7003);
  for (DType t : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(th::dtype_str(t));
    const Shape xs = {2, 1, 8, 128}, ps = {2, 1, 1};
    th::Input x = th::make_input(xs, t, g, Layout::Contiguous, gen, -2, 2);
    Tensor pos = th::make_index(make_positions(ps, gen), g);
    Tensor freq = rope_inv_freq(128, 1e6, g);
    const std::vector<float> fv = floats_of(freq);
    Tensor warm = rope(x.t, pos, freq);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    Tensor y = rope(x.t, pos, freq);
    graph.capture_end();
    for (int round = 0; round < 3; ++round) {
      th::Input nx = th::make_input(xs, t, g, Layout::Contiguous, gen, -2, 2);
      ref::Array np = make_positions(ps, gen);
      np.v[0] = 100 + round * 17;
      x.t.copy_(nx.t);
      pos.copy_(th::make_index(np, g));
      graph.replay();
      s.synchronize();
      Tensor eager = rope(x.t, pos, freq);
      s.synchronize();
      EXPECT_EQ(th::to_bits(y), th::to_bits(eager)) << "round " << round;
      EXPECT_TRUE(check_rope(y, nx.a, np, fv, t)) << "round " << round;
    }
    graph.reset();
  }
}

}  // namespace
