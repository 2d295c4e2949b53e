// MoE routing (softmax over the experts, top-k, renormalisation, the stable sort of the pairs by
// expert) and combine against float64 loop references; a whole MoE block composed from public
// ops (router linear, moe_route, index_select, grouped_mm gate_up, silu_mul, grouped_mm down,
// moe_combine) against a float64 per-token reference; the fused moe_experts op (decode kernels
// and the grouped composition it falls back to) against float64 and against the composition;
// errors; CUDA graph replay.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

struct RouteRef {
  std::vector<double> weights;  // [T, k]
  std::vector<int64_t> ids;     // [T, k]
  std::vector<int64_t> offs;    // [E]
  std::vector<int64_t> token_index, sorted_pos;
};

// Float64 probabilities; order: larger first, NaN first, ties lower expert; stable counting sort.
RouteRef route_ref(const ref::Array& logits, int64_t k, bool renorm) {
  const int64_t T = logits.sizes[0], E = logits.sizes[1];
  RouteRef r;
  r.weights.resize(static_cast<size_t>(T * k));
  r.ids.resize(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> p(static_cast<size_t>(E));
    double mx = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; ++e)
      if (!std::isnan(logits.at({t, e}))) mx = std::max(mx, logits.at({t, e}));
    for (int64_t e = 0; e < E; ++e) sum += p[static_cast<size_t>(e)] = std::exp(logits.at({t, e}) - mx);
    for (double& v : p) v /= sum;
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
      if (std::isnan(pa) != std::isnan(pb)) return std::isnan(pa);
      return !std::isnan(pa) && pa > pb;
    });
    double chosen = 0;
    for (int64_t s = 0; s < k; ++s) chosen += p[static_cast<size_t>(order[static_cast<size_t>(s)])];
    for (int64_t s = 0; s < k; ++s) {
      const int64_t e = order[static_cast<size_t>(s)];
      r.ids[static_cast<size_t>(t * k + s)] = e;
      r.weights[static_cast<size_t>(t * k + s)] = renorm ? p[static_cast<size_t>(e)] / chosen : p[static_cast<size_t>(e)];
    }
  }
  std::vector<int64_t> count(static_cast<size_t>(E), 0);
  for (int64_t e : r.ids) ++count[static_cast<size_t>(e)];
  r.offs.resize(static_cast<size_t>(E));
  std::vector<int64_t> cursor(static_cast<size_t>(E));
  int64_t end = 0;
  for (int64_t e = 0; e < E; ++e) {
    cursor[static_cast<size_t>(e)] = end;
    end += count[static_cast<size_t>(e)];
    r.offs[static_cast<size_t>(e)] = end;
  }
  r.token_index.resize(static_cast<size_t>(T * k));
  r.sorted_pos.resize(static_cast<size_t>(T * k));
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t row = cursor[static_cast<size_t>(r.ids[static_cast<size_t>(i)])]++;
    r.sorted_pos[static_cast<size_t>(i)] = row;
    r.token_index[static_cast<size_t>(row)] = i / k;
  }
  return r;
}

std::vector<int64_t> ints(const Tensor& t) {
  ref::Array a = th::to_array(t);
  return std::vector<int64_t>(a.v.begin(), a.v.end());
}

class Moe : public th::DeviceTest {};

TEST_P(Moe, RouteTable) {
  th::CaseLoop loop;
  th::Gen g(7000);
  struct Case {
    int64_t tokens, experts, k;
  };
  // One token at each CUDA per-lane width (<= 128, 256, 512, 1024 experts) and its edges.
  const std::vector<Case> cases = {{1, 128, 8},   {1, 8, 2},    {3, 60, 4},   {64, 128, 8},  {65, 128, 8},
                                   {7, 1000, 8},  {2, 1024, 16}, {513, 64, 8}, {1, 5, 5},     {100, 33, 1},
                                   {4100, 16, 2}, {0, 8, 2},     {1, 129, 8},  {1, 256, 32},  {1, 500, 16},
                                   {1, 1000, 8},  {1, 1024, 1},  {1, 33, 33},  {1, 1, 1}};
  int ci = 0;
  for (const Case& c : cases) {
    for (DType t : {kFloat32, kBFloat16, kFloat16}) {
      ++ci;
      const bool renorm = ci % 2 == 0;
      const Layout l = ci % 3 == 0 ? Layout::RowPadded : Layout::Contiguous;
      const std::string name = th::case_name({c.tokens, c.experts}, t, l, dev()) + " top " + std::to_string(c.k) +
                               (renorm ? " renormalised" : "");
      if (!loop.run(name, [&] {
        th::Input x = th::make_input({c.tokens, c.experts}, t, dev(), l, g, -4, 4);
        MoeRouting r = moe_route(x.t, c.k, renorm);
        RouteRef want = route_ref(x.a, c.k, renorm);
        ASSERT_TRUE(th::expect_shape(r.topk_weights, {c.tokens, c.k}, kFloat32));
        ASSERT_TRUE(th::expect_shape(r.topk_ids, {c.tokens, c.k}, kInt64));
        ASSERT_TRUE(th::expect_shape(r.offs, {c.experts}, kInt32));
        ASSERT_TRUE(th::expect_shape(r.token_index, {c.tokens * c.k}, kInt64));
        ASSERT_TRUE(th::expect_shape(r.sorted_pos, {c.tokens, c.k}, kInt64));
        ASSERT_EQ(ints(r.topk_ids), want.ids);
        ASSERT_EQ(ints(r.offs), want.offs);
        ASSERT_EQ(ints(r.token_index), want.token_index);
        ASSERT_EQ(ints(r.sorted_pos), want.sorted_pos);
        // float32 exp (a few ulps), a sum over E, one division, the renormalising sum.
        ref::Array w({c.tokens, c.k});
        w.v = want.weights;
        const double u = th::unit_roundoff(kFloat32);
        ASSERT_TRUE(th::expect_close(r.topk_weights, w,
                                     th::Tol{0, (16.0 + 2.0 * static_cast<double>(c.experts + c.k)) * u}));
      }))
        return;
    }
  }
}

// moe_router: the logits against the float64 dot products (a sum of H products in float32, one
// rounding), and the routing equal, bit for bit, to moe_route of the returned logits. One-token
// cases run the fused kernel (on CUDA for 16-bit rows of 16-byte packs), the rest the composition.
TEST_P(Moe, RouterTable) {
  th::CaseLoop loop;
  th::Gen g(7050);
  struct Case {
    int64_t tokens, experts, hidden, k;
    Layout w_layout;
  };
  const std::vector<Case> cases = {
      {1, 128, 2048, 8, Layout::Contiguous},  // Qwen3-30B-A3B
      {1, 60, 1024, 4, Layout::Contiguous},   {1, 8, 64, 2, Layout::Contiguous},
      {1, 1000, 256, 8, Layout::Contiguous},  {1, 1024, 512, 16, Layout::Contiguous},
      {1, 256, 4096, 8, Layout::Contiguous},  // two passes of a lane's loads
      {1, 64, 2056, 4, Layout::Contiguous},   {1, 200, 24, 3, Layout::Contiguous},
      {1, 32, 100, 2, Layout::Contiguous},    // H % 8 != 0: the composition on CUDA
      {1, 16, 128, 2, Layout::RowPadded},     // misaligned rows: the composition on CUDA
      {3, 64, 512, 4, Layout::Contiguous},    // several tokens: the composition
      {1, 1025, 64, 2, Layout::Contiguous},   // more experts than the CUDA kernel routes
  };
  int ci = 0;
  for (const Case& c : cases) {
    for (DType t : {kFloat32, kBFloat16, kFloat16}) {
      const bool renorm = ++ci % 2 == 0;
      if (c.experts > 1024 && dev().is_cuda()) continue;  // moe_route's CUDA limit (Errors)
      const std::string name = th::case_name({c.tokens, c.hidden}, t, Layout::Contiguous, dev()) + " x " +
                               std::to_string(c.experts) + " experts " + th::layout_name(c.w_layout) + " top " +
                               std::to_string(c.k);
      if (!loop.run(name, [&] {
        th::Input h = th::make_input({c.tokens, c.hidden}, t, dev(), Layout::Contiguous, g, -1, 1);
        th::Input w = th::make_input({c.experts, c.hidden}, t, dev(), c.w_layout, g, -1, 1);
        auto [logits, r] = moe_router(h.t, w.t, c.k, renorm);
        ASSERT_TRUE(th::expect_shape(logits, {c.tokens, c.experts}, t));
        ref::Array abs_h = h.a, abs_w = w.a;
        for (double& v : abs_h.v) v = std::abs(v);
        for (double& v : abs_w.v) v = std::abs(v);
        const ref::Array extra = th::sum_tol(t, c.hidden, ref::linear(abs_h, abs_w));
        ASSERT_TRUE(th::expect_close(logits, ref::linear(h.a, w.a), th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &extra));
        MoeRouting want = moe_route(logits, c.k, renorm);
        ASSERT_EQ(th::to_bits(r.topk_weights), th::to_bits(want.topk_weights));
        ASSERT_EQ(ints(r.topk_ids), ints(want.topk_ids));
        ASSERT_EQ(ints(r.offs), ints(want.offs));
        ASSERT_EQ(ints(r.token_index), ints(want.token_index));
        ASSERT_EQ(ints(r.sorted_pos), ints(want.sorted_pos));
      }))
        return;
    }
  }
}

TEST_P(Moe, RouterErrors) {
  const TensorOptions b = TensorOptions(kBFloat16).device(dev());
  Tensor h = zeros({1, 64}, b), w = zeros({8, 64}, b);
  EXPECT_THROWS_OP(ShapeError, "moe_router", moe_router(h, zeros({8, 32}, b), 2, true));
  EXPECT_THROWS_OP(ShapeError, "moe_router", moe_router(zeros({64}, b), w, 2, true));
  EXPECT_THROWS_OP(DTypeError, "moe_router", moe_router(h, w.to(kFloat32), 2, true));
  EXPECT_THROWS_OP(DTypeError, "moe_router", moe_router(h.to(kInt32), w.to(kInt32), 2, true));
  EXPECT_THROWS_OP(IndexError, "moe_router", moe_router(h, w, 0, true));
  EXPECT_THROWS_OP(IndexError, "moe_router", moe_router(h, w, 9, true));
  EXPECT_THROWS_OP(Error, "moe_router", moe_router(Tensor(), w, 2, true));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "moe_router", moe_router(h, w.to(kCPU), 2, true));
  }
}

// -inf logits (masked experts) are never chosen while finite ones remain; equal logits route to
// the lower expert first; a NaN row still gives valid, distinct experts and a valid sort.
TEST_P(Moe, RouteSpecialValues) {
  const double inf = INFINITY;
  ref::Array x({3, 6}, 0.0);
  for (int64_t e = 0; e < 6; ++e) x.at({0, e}) = e % 2 ? -inf : 1.0;  // finite: 0, 2, 4
  for (int64_t e = 0; e < 6; ++e) x.at({1, e}) = 0.5;                 // all equal
  x.at({2, 3}) = std::nan("");
  MoeRouting r = moe_route(th::make_tensor(x, kFloat32, dev()), 3, true);
  const std::vector<int64_t> ids = ints(r.topk_ids);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 6), (std::vector<int64_t>{0, 2, 4, 0, 1, 2}));
  std::vector<int64_t> nan_row(ids.begin() + 6, ids.end());
  std::sort(nan_row.begin(), nan_row.end());
  EXPECT_TRUE(std::adjacent_find(nan_row.begin(), nan_row.end()) == nan_row.end());
  for (int64_t e : nan_row) EXPECT_TRUE(e >= 0 && e < 6);
  ref::Array w = th::to_array(r.topk_weights);
  for (int s = 0; s < 6; ++s) EXPECT_NEAR(w.v[static_cast<size_t>(s)], 1.0 / 3, 1e-6);
  EXPECT_EQ(ints(r.offs).back(), 9);
  // The same rows one token at a time (the single-token kernels).
  for (int64_t t = 0; t < 3; ++t) {
    ref::Array row({1, 6});
    for (int64_t e = 0; e < 6; ++e) row.at({0, e}) = x.at({t, e});
    MoeRouting one = moe_route(th::make_tensor(row, kFloat32, dev()), 3, true);
    const std::vector<int64_t> got = ints(one.topk_ids);
    if (t < 2) {
      EXPECT_EQ(got, std::vector<int64_t>(ids.begin() + 3 * t, ids.begin() + 3 * t + 3)) << "row " << t;
    }
    std::vector<int64_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "row " << t;
    for (int64_t e : got) EXPECT_TRUE(e >= 0 && e < 6) << "row " << t;
    EXPECT_EQ(ints(one.offs).back(), 3) << "row " << t;
    const std::vector<int64_t> pos = ints(one.sorted_pos);
    for (size_t s = 0; s < 3; ++s) {  // the sorted row of slot s = the chosen experts below it
      const auto below = std::count_if(got.begin(), got.end(), [&](int64_t e) { return e < got[s]; });
      EXPECT_EQ(pos[s], below) << "row " << t;
    }
  }
}

TEST_P(Moe, CombineTable) {
  th::CaseLoop loop;
  th::Gen g(7001);
  for (const auto& [tokens, k, hidden] : {std::tuple{1, 8, 2048}, std::tuple{3, 2, 17}, std::tuple{50, 8, 64},
                                          std::tuple{5, 1, 1000}, std::tuple{0, 4, 8}}) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      for (Layout l : {Layout::Contiguous, Layout::RowPadded}) {
        if (!loop.run(th::case_name({tokens * k, hidden}, t, l, dev()) + " top " + std::to_string(k), [&] {
          th::Input y = th::make_input({tokens * k, hidden}, t, dev(), l, g, -2, 2);
          th::Input w = th::make_input({tokens, k}, kFloat32, dev(), Layout::Contiguous, g, 0, 1);
          std::vector<int64_t> perm(static_cast<size_t>(tokens * k));
          std::iota(perm.begin(), perm.end(), 0);
          for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<size_t>(g.randint(0, static_cast<int64_t>(i) - 1))]);
          ref::Array pos({tokens, k});
          for (size_t i = 0; i < perm.size(); ++i) pos.v[i] = static_cast<double>(perm[i]);
          Tensor out = moe_combine(y.t, w.t, th::make_index(pos, dev()));
          ASSERT_TRUE(th::expect_shape(out, {tokens, hidden}, t));
          ref::Array want({tokens, hidden}), scale({tokens, hidden});
          for (int64_t tok = 0; tok < tokens; ++tok)
            for (int64_t h = 0; h < hidden; ++h)
              for (int64_t s = 0; s < k; ++s) {
                const double v = w.a.at({tok, s}) * y.a.at({static_cast<int64_t>(pos.at({tok, s})), h});
                want.at({tok, h}) += v;
                scale.at({tok, h}) += std::fabs(v);
              }
          for (double& v : scale.v) v *= 2.0 * static_cast<double>(k + 1) * th::unit_roundoff(kFloat32);
          ASSERT_TRUE(th::expect_close(out, want, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &scale));
        }))
          return;
      }
    }
  }
}

// The whole MoE experts block of one layer from public ops, against float64 per token with the
// routing taken from the op (so that near-ties cannot flip an expert between the two).
TEST_P(Moe, ExpertsBlockMatchesReference) {
  th::Gen g(7002);
  const int64_t E = 16, H = 64, I = 48, k = 4;
  for (DType t : {kFloat32, kBFloat16}) {
    for (int64_t tokens : {1, 5, 40}) {
      SCOPED_TRACE(th::dtype_str(t) + " tokens " + std::to_string(tokens));
      th::Input h = th::make_input({tokens, H}, t, dev(), Layout::Contiguous, g, -1, 1);
      th::Input wr = th::make_input({E, H}, t, dev(), Layout::Contiguous, g, -0.5, 0.5);
      th::Input gate_up = th::make_input({E, 2 * I, H}, t, dev(), Layout::Contiguous, g, -0.2, 0.2);
      th::Input down = th::make_input({E, H, I}, t, dev(), Layout::Contiguous, g, -0.2, 0.2);
      Tensor logits = linear(h.t, wr.t);
      MoeRouting r = moe_route(logits, k, true);
      Tensor x = index_select(h.t, 0, r.token_index);
      Tensor gu = grouped_mm(x, gate_up.t.transpose(1, 2), r.offs);
      Tensor act = silu_mul(gu.narrow(1, 0, I), gu.narrow(1, I, I));
      Tensor y = grouped_mm(act, down.t.transpose(1, 2), r.offs);
      Tensor out = moe_combine(y, r.topk_weights, r.sorted_pos);
      ASSERT_TRUE(th::expect_shape(out, {tokens, H}, t));

      const std::vector<int64_t> ids = ints(r.topk_ids);
      const ref::Array w = th::to_array(r.topk_weights);
      ref::Array want({tokens, H});
      for (int64_t tok = 0; tok < tokens; ++tok)
        for (int64_t s = 0; s < k; ++s) {
          const int64_t e = ids[static_cast<size_t>(tok * k + s)];
          std::vector<double> a(static_cast<size_t>(I));
          for (int64_t i = 0; i < I; ++i) {
            double gv = 0, uv = 0;
            for (int64_t q = 0; q < H; ++q) {
              gv += gate_up.a.at({e, i, q}) * h.a.at({tok, q});
              uv += gate_up.a.at({e, I + i, q}) * h.a.at({tok, q});
            }
            a[static_cast<size_t>(i)] = gv / (1 + std::exp(-gv)) * uv;
          }
          for (int64_t q = 0; q < H; ++q) {
            double yv = 0;
            for (int64_t i = 0; i < I; ++i) yv += down.a.at({e, q, i}) * a[static_cast<size_t>(i)];
            want.at({tok, q}) += w.at({tok, s}) * yv;
          }
        }
      // Roundings to t after gate_up, SwiGLU, down and the combine: a few units of t's roundoff
      // relative to the row's magnitude (the float32 sums are far tighter).
      const double u = th::unit_roundoff(t);
      double row_max = 0;
      for (double v : want.v) row_max = std::max(row_max, std::fabs(v));
      EXPECT_TRUE(th::expect_close(out, want, th::Tol{32 * u * row_max, 8 * u}));
    }
  }
}

// Experts of one MoE layer for the moe_experts tests: bf16 / f16 / f32 weights, or float8 with
// row-wise scales, or float8 with block scales of `block` (the reference reads the float8 values
// times their scales).
struct ExpertWeights {
  Tensor gate_up, down, gate_up_scale, down_scale;
  Shape block;
  ref::Array gu, dn;  // float64 values, scales applied: [E, 2I, H], [E, H, I]
};

// Float8 weights [E, n, k] with random block scales [E, ceil(n / bn), ceil(k / bk)] (partial
// blocks at the edges): q, its scales and the float64 values q * scale.
void block_quantized(int64_t E, int64_t n, int64_t k, const Shape& block, DType w, Device dev, th::Gen& g, Tensor& q,
                     Tensor& scale, ref::Array& values) {
  const int64_t nb = (n + block[0] - 1) / block[0], kb = (k + block[1] - 1) / block[1];
  th::Input qi = th::make_input({E, n, k}, w, dev, Layout::Contiguous, g, -8, 8);
  th::Input si = th::make_input({E, nb, kb}, kFloat32, dev, Layout::Contiguous, g, 1.0 / 256, 1.0 / 32);
  q = qi.t;
  scale = si.t;
  values = qi.a;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < k; ++c) values.at({e, j, c}) *= si.a.at({e, j / block[0], c / block[1]});
}

ExpertWeights make_expert_weights(int64_t E, int64_t H, int64_t I, DType hidden, DType w, Device dev, th::Gen& g,
                                  const Shape& block = {}) {
  const bool fp8 = is_float8(w);
  if (fp8 && !block.empty()) {
    ExpertWeights r;
    r.block = block;
    block_quantized(E, 2 * I, H, block, w, dev, g, r.gate_up, r.gate_up_scale, r.gu);
    block_quantized(E, H, I, block, w, dev, g, r.down, r.down_scale, r.dn);
    return r;
  }
  const DType src = fp8 ? kFloat32 : hidden;
  th::Input gu = th::make_input({E, 2 * I, H}, src, dev, Layout::Contiguous, g, -0.2, 0.2);
  th::Input dn = th::make_input({E, H, I}, src, dev, Layout::Contiguous, g, -0.2, 0.2);
  ExpertWeights r;
  if (!fp8) {
    r.gate_up = gu.t, r.down = dn.t, r.gu = gu.a, r.dn = dn.a;
    return r;
  }
  auto quantize = [&](const Tensor& x, Tensor& q, Tensor& scale, ref::Array& values) {
    auto [qq, ss] = quantize_fp8(x, ScalingType::RowWise, w);
    q = qq;
    scale = ss.reshape({x.size(0), x.size(1)});
    values = th::to_array(q);
    const ref::Array sa = th::to_array(scale);  // [E, rows]: one scale per row of `values`
    const int64_t cols = x.size(2);
    for (size_t i = 0; i < values.v.size(); ++i) values.v[i] *= sa.v[i / static_cast<size_t>(cols)];
  };
  quantize(gu.t, r.gate_up, r.gate_up_scale, r.gu);
  quantize(dn.t, r.down, r.down_scale, r.dn);
  return r;
}

// Float64 experts block with the given routing (flat indexing: the weights are large).
ref::Array experts_ref(const ref::Array& h, const ExpertWeights& w, const std::vector<int64_t>& ids,
                       const ref::Array& weights, int64_t k) {
  const int64_t T = h.sizes[0], H = h.sizes[1], I = w.dn.sizes[2], E = w.dn.sizes[0];
  ref::Array want({T, H});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < k; ++s) {
      const int64_t e = std::clamp<int64_t>(ids[static_cast<size_t>(t * k + s)], 0, E - 1);
      const double* x = h.v.data() + t * H;
      const double* gu = w.gu.v.data() + e * 2 * I * H;
      const double* dn = w.dn.v.data() + e * H * I;
      std::vector<double> a(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double gv = 0, uv = 0;
        for (int64_t q = 0; q < H; ++q) {
          gv += gu[i * H + q] * x[q];
          uv += gu[(I + i) * H + q] * x[q];
        }
        a[static_cast<size_t>(i)] = gv / (1 + std::exp(-gv)) * uv;
      }
      for (int64_t q = 0; q < H; ++q) {
        double yv = 0;
        for (int64_t i = 0; i < I; ++i) yv += dn[q * I + i] * a[static_cast<size_t>(i)];
        want.v[static_cast<size_t>(t * H + q)] += weights.v[static_cast<size_t>(t * k + s)] * yv;
      }
    }
  return want;
}

// Roundings to t after gate_up, SwiGLU, down and the combine (as ExpertsBlockMatchesReference).
th::Tol experts_tol(DType t, const ref::Array& want) {
  double row_max = 0;
  for (double v : want.v) row_max = std::max(row_max, std::fabs(v));
  const double u = th::unit_roundoff(t);
  return th::Tol{32 * u * row_max, 8 * u};
}

// moe_experts against float64 and against the public-op composition, over the fused decode
// path (T * top_k <= 64, top_k <= 32) and the grouped path, every activation / weight dtype,
// shapes off the CUDA kernels' alignment (hidden 72: the float8 CUDA path needs multiples of 16).
TEST_P(Moe, ExpertsMatchReferenceAndComposition) {
  th::Gen g(7004);
  struct Case {
    DType hidden, w;
    int64_t E, H, I, k;
    std::vector<int64_t> tokens;
  };
  const std::vector<Case> cases = {
      {kBFloat16, kBFloat16, 16, 64, 48, 4, {1, 3, 16, 17}},
      {kFloat16, kFloat16, 16, 64, 40, 8, {1, 8, 9}},
      {kFloat32, kFloat32, 16, 64, 48, 4, {1, 5, 20}},
      {kBFloat16, kFloat8_e4m3fn, 16, 64, 48, 4, {1, 5, 20}},
      {kFloat16, kFloat8_e5m2, 8, 64, 32, 2, {2, 40}},
      {kBFloat16, kBFloat16, 12, 72, 24, 3, {1, 30}},
      {kBFloat16, kFloat8_e4m3fn, 12, 72, 24, 3, {1, 30}},
      {kBFloat16, kBFloat16, 40, 32, 16, 30, {1, 2}},  // top_k > 24: 1024-thread down blocks
      {kBFloat16, kBFloat16, 40, 32, 16, 33, {1}},  // top_k > 32: the grouped path
      {kBFloat16, kBFloat16, 6, 16, 8, 1, {1, 64, 65}},
  };
  for (const Case& c : cases) {
    const ExpertWeights w = make_expert_weights(c.E, c.H, c.I, c.hidden, c.w, dev(), g);
    for (int64_t T : c.tokens) {
      SCOPED_TRACE(th::dtype_str(c.hidden) + " x " + th::dtype_str(c.w) + " E " + std::to_string(c.E) + " H " +
                   std::to_string(c.H) + " I " + std::to_string(c.I) + " top " + std::to_string(c.k) + " tokens " +
                   std::to_string(T));
      th::Input h = th::make_input({T, c.H}, c.hidden, dev(), Layout::Contiguous, g, -1, 1);
      Tensor logits = th::make_input({T, c.E}, kFloat32, dev(), Layout::Contiguous, g, -2, 2).t;
      MoeRouting r = moe_route(logits, c.k, true);
      Tensor out = moe_experts(h.t, r, w.gate_up, w.down, w.gate_up_scale, w.down_scale);
      ASSERT_TRUE(th::expect_shape(out, {T, c.H}, c.hidden));
      const ref::Array want = experts_ref(h.a, w, ints(r.topk_ids), th::to_array(r.topk_weights), c.k);
      EXPECT_TRUE(th::expect_close(out, want, experts_tol(c.hidden, want)));

      // The composition the op is defined by: the same roundings, so only the float32 dot
      // orders differ (a last-place flip of an intermediate at most).
      const bool fp8 = w.gate_up_scale.defined();
      Tensor x = index_select(h.t, 0, r.token_index);
      Tensor gu = fp8 ? scaled_grouped_mm(x, w.gate_up.transpose(1, 2), {}, w.gate_up_scale, r.offs, c.hidden)
                      : grouped_mm(x, w.gate_up.transpose(1, 2), r.offs);
      Tensor act = silu_mul(gu.narrow(1, 0, c.I), gu.narrow(1, c.I, c.I));
      Tensor y = fp8 ? scaled_grouped_mm(act, w.down.transpose(1, 2), {}, w.down_scale, r.offs, c.hidden)
                     : grouped_mm(act, w.down.transpose(1, 2), r.offs);
      const ref::Array comp = th::to_array(moe_combine(y, r.topk_weights, r.sorted_pos));
      double row_max = 0;
      for (double v : comp.v) row_max = std::max(row_max, std::fabs(v));
      const double u = th::unit_roundoff(c.hidden);
      EXPECT_TRUE(th::expect_close(out, comp, th::Tol{4 * u * row_max, 2 * u}));
    }
  }
}

// Block-scaled float8 experts (the Hub's FP8 checkpoints): blocks of 128 x 128 and 16 x 64 (the
// CUDA kernels' in-dot scales), 32 x 32 and 48 x 40 (other block_k: dequantised on CUDA, in-dot
// on the CPU), partial blocks at every edge, the fused (1, 5 tokens; 5 with row-padded hidden)
// and grouped (20) paths.
TEST_P(Moe, ExpertsBlockScaled) {
  th::Gen g(7009);
  struct Case {
    DType hidden, w;
    int64_t E, H, I, k;
    Shape block;
  };
  const std::vector<Case> cases = {
      {kBFloat16, kFloat8_e4m3fn, 8, 256, 192, 4, {128, 128}}, {kBFloat16, kFloat8_e4m3fn, 8, 200, 72, 2, {16, 64}},
      {kFloat16, kFloat8_e4m3fn, 6, 64, 48, 3, {32, 32}},      {kBFloat16, kFloat8_e5m2, 6, 80, 40, 2, {48, 40}},
      {kBFloat16, kFloat8_e4m3fn, 6, 64, 32, 2, {48, 64}},
  };
  for (const Case& c : cases) {
    const ExpertWeights w = make_expert_weights(c.E, c.H, c.I, c.hidden, c.w, dev(), g, c.block);
    for (int64_t T : {1, 5, 20}) {
      SCOPED_TRACE(th::dtype_str(c.hidden) + " x " + th::dtype_str(c.w) + " H " + std::to_string(c.H) + " I " +
                   std::to_string(c.I) + " block " + shape_str(c.block) + " tokens " + std::to_string(T));
      // Row-padded hidden on the 5-token case (non-contiguous rows).
      th::Input h = th::make_input({T, c.H}, c.hidden, dev(), T == 5 ? Layout::RowPadded : Layout::Contiguous, g, -1, 1);
      MoeRouting r = moe_route(th::make_input({T, c.E}, kFloat32, dev(), Layout::Contiguous, g, -2, 2).t, c.k, true);
      Tensor out = moe_experts(h.t, r, w.gate_up, w.down, w.gate_up_scale, w.down_scale, w.block);
      ASSERT_TRUE(th::expect_shape(out, {T, c.H}, c.hidden));
      const ref::Array want = experts_ref(h.a, w, ints(r.topk_ids), th::to_array(r.topk_weights), c.k);
      EXPECT_TRUE(th::expect_close(out, want, experts_tol(c.hidden, want)));
    }
  }
  // Scale grids that do not match the block: named errors.
  const ExpertWeights w = make_expert_weights(6, 64, 32, kBFloat16, kFloat8_e4m3fn, dev(), g, {32, 32});
  th::Input h = th::make_input({1, 64}, kBFloat16, dev(), Layout::Contiguous, g, -1, 1);
  MoeRouting r = moe_route(th::make_input({1, 6}, kFloat32, dev(), Layout::Contiguous, g, -2, 2).t, 2, true);
  EXPECT_THROWS_OP(ShapeError, "moe_experts",
                   moe_experts(h.t, r, w.gate_up, w.down, w.gate_up_scale, w.down_scale, {16, 32}));
  EXPECT_THROWS_OP(ShapeError, "moe_experts",
                   moe_experts(h.t, r, w.gate_up, w.down, w.gate_up_scale, w.down_scale, {32}));
}

// Which path moe_router and moe_experts take (their *_plan queries, the question the ops ask):
// the fused kernels for decode's shapes on both devices; the composition for several tokens (the
// router) or more than 64 (token, slot) pairs (the experts), and on CUDA for what its kernels do
// not take: float32, rows that are not whole 16-byte packs or not 16-byte aligned, more than 1024
// experts, float8 blocks off the kernels' grid (block_k not 64 x 2^i: those experts are
// dequantised and run fused).
TEST_P(Moe, Plans) {
  th::Gen g(7070);
  const FusedPlan cuda_composes = dev().is_cuda() ? FusedPlan::Composed : FusedPlan::Fused;
  const TensorOptions bf = TensorOptions(kBFloat16).device(dev()), f32 = TensorOptions(kFloat32).device(dev());
  const Tensor h = randn({1, 2048}, bf), w = randn({128, 2048}, bf);  // Qwen3-30B-A3B's router
  EXPECT_EQ(moe_router_plan(h, w, 8), FusedPlan::Fused);
  EXPECT_EQ(moe_router_plan(randn({3, 2048}, bf), w, 8), FusedPlan::Composed);
  EXPECT_EQ(moe_router_plan(h.to(kFloat32), w.to(kFloat32), 8), cuda_composes);
  EXPECT_EQ(moe_router_plan(randn({1, 100}, bf), randn({32, 100}, bf), 2), cuda_composes);
  EXPECT_EQ(moe_router_plan(randn({1, 2049}, bf).narrow(1, 1, 2048), w, 8), cuda_composes);
  EXPECT_EQ(moe_router_plan(randn({1, 64}, bf), randn({1100, 64}, bf), 2), cuda_composes);

  const int64_t E = 8, H = 256, I = 192;
  auto routing = [&](int64_t T, int64_t k) { return moe_route(randn({T, E}, f32), k, true); };
  const ExpertWeights b16 = make_expert_weights(E, H, I, kBFloat16, kBFloat16, dev(), g);
  const Tensor x1 = randn({1, H}, bf);
  EXPECT_EQ(moe_experts_plan(x1, routing(1, 4), b16.gate_up, b16.down), FusedPlan::Fused);
  EXPECT_EQ(moe_experts_plan(randn({16, H}, bf), routing(16, 4), b16.gate_up, b16.down), FusedPlan::Fused);  // 64 pairs
  EXPECT_EQ(moe_experts_plan(randn({17, H}, bf), routing(17, 4), b16.gate_up, b16.down), FusedPlan::Composed);
  EXPECT_EQ(moe_experts_plan(randn({1, H + 1}, bf).narrow(1, 1, H), routing(1, 4), b16.gate_up, b16.down), cuda_composes);
  const ExpertWeights f = make_expert_weights(E, H, I, kFloat32, kFloat32, dev(), g);
  EXPECT_EQ(moe_experts_plan(x1.to(kFloat32), routing(1, 4), f.gate_up, f.down), cuda_composes);
  const ExpertWeights hub = make_expert_weights(E, H, I, kBFloat16, kFloat8_e4m3fn, dev(), g, {128, 128});
  EXPECT_EQ(moe_experts_plan(x1, routing(1, 4), hub.gate_up, hub.down, hub.gate_up_scale, hub.down_scale, hub.block),
            FusedPlan::Fused);
  const ExpertWeights odd = make_expert_weights(E, H, I, kBFloat16, kFloat8_e4m3fn, dev(), g, {32, 96});
  const MoeRouting r = routing(1, 4);
  EXPECT_EQ(moe_experts_plan(x1, r, odd.gate_up, odd.down, odd.gate_up_scale, odd.down_scale, odd.block), cuda_composes);
  // A composed block shape runs the dequantised experts: bit for bit those.
  const Tensor dq_gu = dequantize_fp8(odd.gate_up, odd.gate_up_scale, odd.block, kBFloat16);
  const Tensor dq_dn = dequantize_fp8(odd.down, odd.down_scale, odd.block, kBFloat16);
  EXPECT_EQ(moe_experts_plan(x1, r, dq_gu, dq_dn), FusedPlan::Fused);
  if (dev().is_cuda()) {
    EXPECT_EQ(th::to_bits(moe_experts(x1, r, odd.gate_up, odd.down, odd.gate_up_scale, odd.down_scale, odd.block)),
              th::to_bits(moe_experts(x1, r, dq_gu, dq_dn)));
  }
}

// The Qwen3-30B-A3B layer's expert shapes (hidden 2048, top 8, inter 768; 8 experts rather than
// 128 keep the float64 weights small): the decode kernels at full size, bf16, row-scaled and
// 128 x 128 block-scaled float8 weights, one and four tokens.
TEST_P(Moe, ExpertsQwen3Shape) {
  th::Gen g(7005);
  const int64_t E = 8, H = 2048, I = 768, k = 8;
  for (int kind = 0; kind < 3; ++kind) {
    const DType w_dtype = kind == 0 ? kBFloat16 : kFloat8_e4m3fn;
    const ExpertWeights w =
        make_expert_weights(E, H, I, kBFloat16, w_dtype, dev(), g, kind == 2 ? Shape{128, 128} : Shape{});
    for (int64_t T : {1, 4}) {
      SCOPED_TRACE(th::dtype_str(w_dtype) + (kind == 2 ? " blocks" : "") + " tokens " + std::to_string(T));
      th::Input h = th::make_input({T, H}, kBFloat16, dev(), Layout::Contiguous, g, -1, 1);
      MoeRouting r = moe_route(th::make_input({T, E}, kFloat32, dev(), Layout::Contiguous, g, -2, 2).t, k, true);
      Tensor out = moe_experts(h.t, r, w.gate_up, w.down, w.gate_up_scale, w.down_scale, w.block);
      const ref::Array want = experts_ref(h.a, w, ints(r.topk_ids), th::to_array(r.topk_weights), k);
      EXPECT_TRUE(th::expect_close(out, want, experts_tol(kBFloat16, want)));
    }
  }
}

// Non-contiguous operands: hidden in every layout (misaligned or strided rows leave the CUDA
// fused kernels for the composition), expert weights as transposed views (copied to unit-stride
// rows), non-contiguous routing tensors; all against float64.
TEST_P(Moe, ExpertsNonContiguous) {
  th::Gen g(7008);
  const int64_t E = 6, H = 64, I = 32, k = 2, T = 3;
  const ExpertWeights w = make_expert_weights(E, H, I, kBFloat16, kBFloat16, dev(), g);
  const Tensor gu_t = w.gate_up.transpose(1, 2).contiguous().transpose(1, 2);  // same values, column-major rows
  const Tensor dn_t = w.down.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_NE(gu_t.stride(2), 1);
  MoeRouting r = moe_route(th::make_input({T, E}, kFloat32, dev(), Layout::Contiguous, g, -2, 2).t, k, true);
  const ref::Array want_w = th::to_array(r.topk_weights);
  MoeRouting rs = r;  // the same routing through non-contiguous views
  rs.topk_ids = r.topk_ids.t().contiguous().t();
  rs.topk_weights = r.topk_weights.t().contiguous().t();
  for (Layout l : {Layout::Transposed, Layout::Strided, Layout::Offset, Layout::RowPadded}) {
    SCOPED_TRACE(th::layout_name(l));
    th::Input h = th::make_input({T, H}, kBFloat16, dev(), l, g, -1, 1);
    const ref::Array want = experts_ref(h.a, w, ints(r.topk_ids), want_w, k);
    EXPECT_TRUE(th::expect_close(moe_experts(h.t, r, w.gate_up, w.down), want, experts_tol(kBFloat16, want)));
    EXPECT_TRUE(th::expect_close(moe_experts(h.t, rs, gu_t, dn_t), want, experts_tol(kBFloat16, want)));
  }
}

// Expert ids outside [0, E) read the nearest expert (never out of bounds), on the fused path.
TEST_P(Moe, ExpertsClampIds) {
  auto array = [](Shape sizes, std::vector<double> v) {
    ref::Array a(std::move(sizes));
    a.v = std::move(v);
    return a;
  };
  th::Gen g(7006);
  const int64_t E = 4, H = 32, I = 16;
  const ExpertWeights w = make_expert_weights(E, H, I, kBFloat16, kBFloat16, dev(), g);
  th::Input h = th::make_input({1, H}, kBFloat16, dev(), Layout::Contiguous, g, -1, 1);
  MoeRouting bad, good;
  bad.topk_ids = th::make_index(array({1, 3}, {-5, 2, 9}), dev());
  good.topk_ids = th::make_index(array({1, 3}, {0, 2, 3}), dev());
  bad.topk_weights = good.topk_weights = th::make_tensor(array({1, 3}, {0.5, 0.25, 0.25}), kFloat32, dev());
  EXPECT_EQ(th::to_bits(moe_experts(h.t, bad, w.gate_up, w.down)), th::to_bits(moe_experts(h.t, good, w.gate_up, w.down)));
  const ref::Array want = experts_ref(h.a, w, {0, 2, 3}, th::to_array(good.topk_weights), 3);
  EXPECT_TRUE(th::expect_close(moe_experts(h.t, bad, w.gate_up, w.down), want, experts_tol(kBFloat16, want)));
}

TEST_P(Moe, ExpertsErrors) {
  const TensorOptions b = TensorOptions(kBFloat16).device(dev());
  const int64_t E = 4, H = 16, I = 8;
  Tensor h = zeros({2, H}, b), gu = zeros({E, 2 * I, H}, b), dn = zeros({E, H, I}, b);
  MoeRouting r = moe_route(zeros({2, E}, TensorOptions(kFloat32).device(dev())), 2, true);
  EXPECT_THROWS_OP(Error, "moe_experts", moe_experts(Tensor(), r, gu, dn));
  EXPECT_THROWS_OP(Error, "moe_experts", moe_experts(h, MoeRouting{}, gu, dn));
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h.to(kInt32), r, gu, dn));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h.reshape({2, 1, H}), r, gu, dn));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r, zeros({E, 2 * I + 1, H}, b), dn));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r, zeros({E, 2 * I, H + 1}, b), dn));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r, gu, zeros({E, H, I + 1}, b)));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r, gu, zeros({E + 1, H, I}, b)));
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h, r, gu.to(kFloat16), dn));
  EXPECT_THROWS_OP(Error, "moe_experts", moe_experts(h, r, gu, dn, zeros({E, 2 * I}, TensorOptions(kFloat32).device(dev())), {}));
  Tensor gq = gu.to(kFloat8_e4m3fn), dq = dn.to(kFloat8_e4m3fn);
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor gs = ones({E, 2 * I}, f), ds = ones({E, H}, f);
  EXPECT_NO_THROW(moe_experts(h, r, gq, dq, gs, ds));
  EXPECT_THROWS_OP(Error, "moe_experts", moe_experts(h, r, gq, dq));
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h, r, gq, dn, gs, ds));
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h, r, gq, dn.to(kFloat8_e5m2), gs, ds));
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h.to(kFloat32), r, gq, dq, gs, ds));
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h, r, gq, dq, gs.to(kBFloat16), ds));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r, gq, dq, ones({E, I}, f), ds));
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r, gq, dq, gs, ones({E + 1, H}, f)));
  MoeRouting r1 = r;
  r1.topk_ids = r.topk_ids.to(kInt32);
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h, r1, gu, dn));
  r1 = r;
  r1.topk_weights = r.topk_weights.to(kBFloat16);
  EXPECT_THROWS_OP(DTypeError, "moe_experts", moe_experts(h, r1, gu, dn));
  r1 = r;
  r1.topk_weights = r.topk_weights.narrow(1, 0, 1);
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r1, gu, dn));
  r1 = r;
  r1.topk_ids = r.topk_ids.narrow(0, 0, 1);
  EXPECT_THROWS_OP(ShapeError, "moe_experts", moe_experts(h, r1, gu, dn));
  // Many tokens take the grouped products, which need the sorted routing.
  Tensor many = zeros({40, H}, b);
  MoeRouting rm = moe_route(zeros({40, E}, f), 2, true);
  EXPECT_NO_THROW(moe_experts(many, rm, gu, dn));
  rm.offs = Tensor();
  EXPECT_THROWS_OP(Error, "moe_experts", moe_experts(many, rm, gu, dn));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "moe_experts", moe_experts(h.to(kCPU), r, gu, dn));
  }
}

TEST_P(Moe, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor logits = zeros({4, 8}, f);
  EXPECT_THROWS_OP(DTypeError, "moe_route", moe_route(logits.to(kInt32), 2, true));
  EXPECT_THROWS_OP(ShapeError, "moe_route", moe_route(zeros({8}, f), 2, true));
  EXPECT_THROWS_OP(ShapeError, "moe_route", moe_route(zeros({4, 0}, f), 1, true));
  EXPECT_THROWS_OP(IndexError, "moe_route", moe_route(logits, 0, true));
  EXPECT_THROWS_OP(IndexError, "moe_route", moe_route(logits, 9, true));
  EXPECT_THROWS_OP(Error, "moe_route", moe_route(Tensor(), 2, true));
  MoeRouting r = moe_route(logits, 2, false);
  Tensor y = zeros({8, 16}, f);
  EXPECT_THROWS_OP(ShapeError, "moe_combine", moe_combine(zeros({7, 16}, f), r.topk_weights, r.sorted_pos));
  EXPECT_THROWS_OP(DTypeError, "moe_combine", moe_combine(y, r.topk_weights.to(kBFloat16), r.sorted_pos));
  EXPECT_THROWS_OP(DTypeError, "moe_combine", moe_combine(y, r.topk_weights, r.sorted_pos.to(kInt32)));
  EXPECT_THROWS_OP(DTypeError, "moe_combine", moe_combine(y.to(kInt32), r.topk_weights, r.sorted_pos));
  EXPECT_THROWS_OP(ShapeError, "moe_combine", moe_combine(y, r.topk_weights, r.sorted_pos.reshape({8})));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "moe_combine", moe_combine(y, r.topk_weights.to(kCPU), r.sorted_pos));
    EXPECT_THROWS_OP(ShapeError, "moe_route", moe_route(zeros({1, 1025}, f), 2, true));
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Moe);

// route + combine captured once; new logits and expert outputs copied in before each replay;
// the replay equals an eager call bit for bit.
TEST(MoeGraph, RouteAndCombineReplayNewInputs) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(7003);
  for (int64_t tokens : {1, 200}) {
    SCOPED_TRACE("tokens " + std::to_string(tokens));
    const int64_t E = 128, k = 8, H = 256;
    Tensor logits = th::make_input({tokens, E}, kBFloat16, dev, Layout::Contiguous, gen, -3, 3).t;
    Tensor y = th::make_input({tokens * k, H}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t;
    moe_route(logits, k, true);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    MoeRouting r = moe_route(logits, k, true);
    Tensor out = moe_combine(y, r.topk_weights, r.sorted_pos);
    graph.capture_end();
    for (int round = 0; round < 2; ++round) {
      logits.copy_(th::make_input({tokens, E}, kBFloat16, dev, Layout::Contiguous, gen, -3, 3).t);
      y.copy_(th::make_input({tokens * k, H}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t);
      graph.replay();
      s.synchronize();
      MoeRouting e = moe_route(logits, k, true);
      Tensor eo = moe_combine(y, e.topk_weights, e.sorted_pos);
      s.synchronize();
      EXPECT_EQ(th::to_bits(r.topk_ids), th::to_bits(e.topk_ids)) << "round " << round;
      EXPECT_EQ(th::to_bits(r.offs), th::to_bits(e.offs)) << "round " << round;
      EXPECT_EQ(th::to_bits(r.token_index), th::to_bits(e.token_index)) << "round " << round;
      EXPECT_EQ(th::to_bits(r.topk_weights), th::to_bits(e.topk_weights)) << "round " << round;
      EXPECT_EQ(th::to_bits(out), th::to_bits(eo)) << "round " << round;
    }
    graph.reset();
  }
}

// Routing + fused experts of one decode token captured once; new hidden states and logits
// copied in before each replay; the replay equals an eager call bit for bit.
TEST(MoeGraph, ExpertsReplayNewInputs) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(7007);
  const int64_t E = 32, H = 256, I = 64, k = 4;
  for (DType w_dtype : {kBFloat16, kFloat8_e4m3fn}) {
    SCOPED_TRACE(th::dtype_str(w_dtype));
    const ExpertWeights w = make_expert_weights(E, H, I, kBFloat16, w_dtype, dev, gen);
    Tensor h = th::make_input({2, H}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t;
    Tensor logits = th::make_input({2, E}, kBFloat16, dev, Layout::Contiguous, gen, -3, 3).t;
    moe_experts(h, moe_route(logits, k, true), w.gate_up, w.down, w.gate_up_scale, w.down_scale);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    MoeRouting r = moe_route(logits, k, true);
    Tensor out = moe_experts(h, r, w.gate_up, w.down, w.gate_up_scale, w.down_scale);
    graph.capture_end();
    for (int round = 0; round < 2; ++round) {
      h.copy_(th::make_input({2, H}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t);
      logits.copy_(th::make_input({2, E}, kBFloat16, dev, Layout::Contiguous, gen, -3, 3).t);
      graph.replay();
      s.synchronize();
      Tensor eager = moe_experts(h, moe_route(logits, k, true), w.gate_up, w.down, w.gate_up_scale, w.down_scale);
      s.synchronize();
      EXPECT_EQ(th::to_bits(out), th::to_bits(eager)) << "round " << round;
    }
    graph.reset();
  }
}

}  // namespace
