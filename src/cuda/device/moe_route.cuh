#pragma once
// One token's MoE routing by one warp, shared by moe.cu's single-token routing (moe_router,
// moe_route of one token) and the persistent decoder step's MoE layers (decoder.cu), so both
// choose the same experts with the same weights from the same logits.
#include <climits>

namespace anvil::cuda_device {

// The top_k of softmax(logits) over E <= 32 P experts (ties: lower expert first, NaN above every
// number), lane l owning experts [l P, l P + P) in registers; `logit(e)` gives expert e's logit
// as float. The softmax is two warp reductions. Each probability becomes an int key whose order
// is the routing order (a probability is >= 0, so its float bits order as ints; NaN is made the
// largest; a taken expert and the padding are negative), so each of the top_k rounds is a lane
// max, one warp max (redux) and one warp min over the lanes holding that key. On return prob[j]
// is expert l P + j's probability and slot[j] its slot (-1: not chosen); returns 1 / the sum of
// the chosen probabilities, added in slot order (the renormalisation's scale).
template <int P, typename Logit>
__device__ __forceinline__ float warp_top_k(int E, int K, Logit logit, float (&prob)[P], int (&slot)[P]) {
  constexpr int kTaken = -1, kPad = INT_MIN;
  const int lane = static_cast<int>(threadIdx.x % 32);
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int e = lane * P + j;
    prob[j] = e < E ? logit(e) : -INFINITY;
    mx = fmaxf(mx, prob[j]);
  }
  for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    prob[j] = lane * P + j < E ? expf(prob[j] - mx) : 0.f;
    sum += prob[j];
  }
  for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  const float inv = 1.f / sum;
  int key[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    prob[j] *= inv;
    key[j] = lane * P + j >= E ? kPad : isnan(prob[j]) ? 0x7fc00000 : __float_as_int(prob[j]);
    slot[j] = -1;
  }
  float total = 0.f;
  for (int s = 0; s < K; ++s) {
    int best = kPad;
#pragma unroll
    for (int j = 0; j < P; ++j) best = max(best, key[j]);
    best = __reduce_max_sync(0xffffffffu, best);
    unsigned first = 0xffffffffu;
#pragma unroll
    for (int j = P - 1; j >= 0; --j) first = key[j] == best ? static_cast<unsigned>(lane * P + j) : first;
    const unsigned winner = __reduce_min_sync(0xffffffffu, first);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (static_cast<unsigned>(lane * P + j) == winner) key[j] = kTaken, slot[j] = s;
    }
    total += __int_as_float(best);
  }
  return 1.f / total;
}

}  // namespace anvil::cuda_device
