// MoE routing (softmax over the experts, top-k, renormalisation, the stable sort of the pairs by
// expert) and combine against float64 loop references; a whole MoE block composed from public
// ops (router linear, moe_route, index_select, grouped_mm gate_up, silu_mul, grouped_mm down,
// moe_combine) against a float64 per-token reference; errors; CUDA graph replay.
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
  const std::vector<Case> cases = {{1, 128, 8}, {1, 8, 2},   {3, 60, 4},    {64, 128, 8},  {65, 128, 8},
                                   {7, 1000, 8}, {2, 1024, 16}, {513, 64, 8}, {1, 5, 5},     {100, 33, 1},
                                   {4100, 16, 2}, {0, 8, 2}};
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

}  // namespace
