// CPU MoE routing (float32 softmax, top-k, renormalisation, the stable counting sort of the
// (token, slot) pairs by expert) and the weighted combine back to token order.
#include <algorithm>
#include <cmath>
#include <omp.h>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/kernels/linear.h"
#include "core/kernels/moe.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

// Below this much work one thread finishes before a team would wake up (a decode token).
constexpr int64_t kParallelWork = 1 << 16;

// The routing order: larger probability first, NaN above every number, ties by lower expert.
bool routes_before(float pa, int64_t a, float pb, int64_t b) {
  const bool na = std::isnan(pa), nb = std::isnan(pb);
  if (na != nb) return na;
  if (!na && pa != pb) return pa > pb;
  return a < b;
}

}  // namespace

void moe_route(const MoeRouteParams& p) {
  const int64_t T = p.tokens, E = p.experts, K = p.top_k;
  dispatch_float_types(p.dtype, "[moe_route]", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* logits = static_cast<const S*>(p.logits);
#pragma omp parallel if (T * E >= kParallelWork)
    {
      std::vector<float> prob(static_cast<size_t>(E));
      std::vector<int64_t> order(static_cast<size_t>(K));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        const S* row = logits + t * p.stride_row;
        for (int64_t e = 0; e < E; ++e) prob[static_cast<size_t>(e)] = static_cast<float>(row[e]);
        simd::softmax_row(prob.data(), prob.data(), E);
        // The K best in routing order by insertion: most experts lose one comparison with the
        // current K-th (a heap partial_sort cost ~1.5 us per token of 128 experts).
        int64_t have = 0;
        for (int64_t e = 0; e < E; ++e) {
          const float pe = prob[static_cast<size_t>(e)];
          if (have == K && !routes_before(pe, e, prob[static_cast<size_t>(order[static_cast<size_t>(K - 1)])],
                                          order[static_cast<size_t>(K - 1)]))
            continue;
          int64_t at = have < K ? have++ : K - 1;
          for (; at > 0; --at) {
            const int64_t prev = order[static_cast<size_t>(at - 1)];
            if (!routes_before(pe, e, prob[static_cast<size_t>(prev)], prev)) break;
            order[static_cast<size_t>(at)] = prev;
          }
          order[static_cast<size_t>(at)] = e;
        }
        float chosen = 0.f;
        for (int64_t s = 0; s < K; ++s) chosen += prob[static_cast<size_t>(order[static_cast<size_t>(s)])];
        const float scale = p.renormalize ? 1.f / chosen : 1.f;
        for (int64_t s = 0; s < K; ++s) {
          const int64_t e = order[static_cast<size_t>(s)];
          p.weights[t * K + s] = p.renormalize ? prob[static_cast<size_t>(e)] * scale : prob[static_cast<size_t>(e)];
          p.ids[t * K + s] = e;
        }
      }
    }
  });
  // Counting sort of the pairs by expert, stable in pair (token-major) order.
  std::vector<int64_t> cursor(static_cast<size_t>(E), 0);
  for (int64_t i = 0; i < T * K; ++i) ++cursor[static_cast<size_t>(p.ids[i])];
  int64_t end = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t count = cursor[static_cast<size_t>(e)];
    cursor[static_cast<size_t>(e)] = end;
    end += count;
    p.offs[e] = static_cast<int32_t>(end);
  }
  for (int64_t i = 0; i < T * K; ++i) {
    const int64_t row = cursor[static_cast<size_t>(p.ids[i])]++;
    p.sorted_pos[i] = row;
    p.token_index[row] = i / K;
  }
}

void moe_combine(const MoeCombineParams& p) {
  dispatch_float_types(p.dtype, "[moe_combine]", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* in = static_cast<const S*>(p.in);
    S* out = static_cast<S*>(p.out);
#pragma omp parallel if (p.tokens * p.top_k * p.hidden >= kParallelWork)
    {
      std::vector<float> acc(static_cast<size_t>(p.hidden));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < p.tokens; ++t) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t s = 0; s < p.top_k; ++s) {
          const float w = p.weights[t * p.top_k + s];
          const int64_t r = std::clamp<int64_t>(p.sorted_pos[t * p.top_k + s], 0, p.tokens * p.top_k - 1);
          const S* row = in + r * p.stride_in_row;  // never read outside expert_out
          for (int64_t h = 0; h < p.hidden; ++h) acc[static_cast<size_t>(h)] += w * static_cast<float>(row[h]);
        }
        for (int64_t h = 0; h < p.hidden; ++h) out[t * p.stride_out_row + h] = S(acc[static_cast<size_t>(h)]);
      }
    }
  });
}

namespace {

// f(pair, r0, r1) for the rows [r0, r1) of every pair's weight matrix of `rows` rows: the
// pairs x rows are cut into one contiguous range per thread (one parallel region for all
// experts of a decode token, not one per expert).
template <class F>
void split_rows(int64_t pairs, int64_t rows, int64_t k, const F& f) {
#pragma omp parallel if (pairs * rows * k >= kParallelWork)
  {
    const int64_t nt = omp_get_num_threads(), th = omp_get_thread_num(), total = pairs * rows;
    const int64_t q1 = total * (th + 1) / nt;
    for (int64_t q = total * th / nt; q < q1;) {
      const int64_t pair = q / rows, r0 = q % rows, r1 = std::min(rows, r0 + (q1 - q));
      f(pair, r0, r1);
      q += r1 - r0;
    }
  }
}

}  // namespace

// The CPU kernels read each (token, slot) pair's expert rows once: they take decode's few pairs
// (any dtypes, strides and block shapes the op admits); many tokens sharing experts run the
// grouped products.
FusedPlan moe_experts_plan(const MoeExpertsParams& p) {
  return p.tokens * p.top_k <= kMoeExpertsMaxPairs && p.top_k <= kMoeExpertsMaxTopK ? FusedPlan::Fused
                                                                                     : FusedPlan::Composed;
}

void moe_experts(const MoeExpertsParams& p) {
  dispatch_float_types(p.dtype, "[moe_experts]", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const int64_t T = p.tokens, K = p.top_k, P = T * K, H = p.hidden_size, I = p.inter;
    const size_t wsize = element_size(p.w_dtype);
    auto round = [](float v) { return static_cast<float>(S(v)); };
    constexpr bool bf16 = std::is_same_v<S, BFloat16>;  // x and the SwiGLU output are bfloat16 values
    auto expert = [&](int64_t pair) { return std::clamp<int64_t>(p.ids[pair], 0, p.experts - 1); };
    std::vector<float> x(static_cast<size_t>(T * H)), gu(static_cast<size_t>(P * 2 * I)),
        act(static_cast<size_t>(P * I)), y(static_cast<size_t>(P * H));
    for (int64_t t = 0; t < T; ++t)
      simd::decode_f32(p.dtype, static_cast<const S*>(p.hidden) + t * p.stride_hidden_row, x.data() + t * H, H);
    const char* gate_up = static_cast<const char*>(p.gate_up);
    const char* down = static_cast<const char*>(p.down);
    // Block scales: the expert's own grid, applied inside the dots.
    auto expert_block = [&](const BlockScale& b, int64_t e) {
      BlockScale r = b;
      if (r.scale) r.scale += e * b.stride_expert;
      return r;
    };
    split_rows(P, 2 * I, H, [&](int64_t pair, int64_t r0, int64_t r1) {
      const char* w = gate_up + expert(pair) * p.stride_gu_expert * static_cast<int64_t>(wsize);
      const BlockScale b = expert_block(p.gate_up_block, expert(pair));
      simd::gemv_dots(p.w_dtype, w, p.stride_gu_row, x.data() + pair / K * H, 1, H, gu.data() + pair * 2 * I, 0, r0,
                      r1, bf16, b.scale ? &b : nullptr);
    });
    for (int64_t pair = 0; pair < P; ++pair) {
      const int64_t e = expert(pair);
      for (int64_t i = 0; i < I; ++i) {
        float g = gu[static_cast<size_t>(pair * 2 * I + i)], u = gu[static_cast<size_t>(pair * 2 * I + I + i)];
        if (p.gate_up_scale) {
          g *= p.gate_up_scale[e * 2 * I + i];
          u *= p.gate_up_scale[e * 2 * I + I + i];
        }
        g = round(g);
        act[static_cast<size_t>(pair * I + i)] = round(g / (1.f + std::exp(-g)) * round(u));
      }
    }
    split_rows(P, H, I, [&](int64_t pair, int64_t r0, int64_t r1) {
      const char* w = down + expert(pair) * p.stride_down_expert * static_cast<int64_t>(wsize);
      const BlockScale b = expert_block(p.down_block, expert(pair));
      simd::gemv_dots(p.w_dtype, w, p.stride_down_row, act.data() + pair * I, 1, I, y.data() + pair * H, 0, r0, r1,
                      bf16, b.scale ? &b : nullptr);
    });
    S* out = static_cast<S*>(p.out);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < H; ++j) {
        float acc = 0.f;
        for (int64_t s = 0; s < K; ++s) {
          const int64_t pair = t * K + s;
          float v = y[static_cast<size_t>(pair * H + j)];
          if (p.down_scale) v *= p.down_scale[expert(pair) * H + j];
          acc += p.weights[pair] * round(v);
        }
        out[t * p.stride_out_row + j] = S(acc);
      }
    }
  });
}

// The router GEMV (one token), then its routing, with the CPU's own kernels: any params.
FusedPlan moe_router_plan(const MoeRouterParams&) { return FusedPlan::Fused; }

void moe_router(const MoeRouterParams& p) {
  GemvParams g;
  g.x = p.hidden;
  g.w = p.weight;
  g.y = p.logits;
  g.dtype = p.route.dtype;
  g.m = 1;
  g.n = p.route.experts;
  g.k = p.hidden_size;
  g.stride_x_row = p.hidden_size;
  g.stride_w_row = p.stride_w_row;
  g.stride_y_row = p.route.experts;
  gemv(g);
  moe_route(p.route);
}

}  // namespace anvil::cpu
