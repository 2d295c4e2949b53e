#pragma once
// Row functions shared by the standalone decode kernels and the persistent decoder step
// (decoder.cu), so both compute a step's rows with the same operations in the same order:
//  add_rms_norm_row: add_rms_norm_linear's input row (linear.cu), the decoder's AddNorm prologue;
//  silu_mul_one:     SwiGLU's element (activation.cu), the decoder's SiluMul prologue;
//  rotate / QkRope:  neox RoPE (rope.cu) and qk_norm_rope_cache's per-warp head row, the
//                    decoder's q / k heads.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/device/convert.cuh"
#include "cuda/device/map.cuh"

namespace anvil::cuda_device {

// h = round(rms_norm(s) * norm_w) (norm_w null: unweighted) of s = round(x + res) (x null:
// s = res), k % 8 == 0 and 16-byte aligned rows; s also goes to sum_out when that is set.
// float32 math with one rounding per element; the sum of squares is reduced per thread, then
// over warps in order. Threads tid < nthreads (whole warps) run it together: `sync` is their
// barrier and `red` holds nthreads / 32 floats. x and res may be written by other blocks of the
// same launch (plain loads, never the read-only path).
template <typename T, typename Sync>
__device__ __forceinline__ void add_rms_norm_row(const T* x, const T* res, const T* norm_w, T* sum_out, T* h, int64_t k,
                                                 float eps, int tid, int nthreads, float* red, Sync sync) {
  using P = Pack<T, 8>;
  const int packs = static_cast<int>(k / 8), warps = nthreads / 32;
  const P* xp = reinterpret_cast<const P*>(x);
  const P* rp = reinterpret_cast<const P*>(res);
  P* sp = reinterpret_cast<P*>(sum_out);
  P* hp = reinterpret_cast<P*>(h);
  float sumsq = 0.f;
  for (int q = tid; q < packs; q += nthreads) {
    const P b = rp[q];
    P v = b;
    if (xp) {
      const P a = xp[q];
#pragma unroll
      for (int e = 0; e < 8; ++e) v.v[e] = from_compute<T>(to_compute(a.v[e]) + to_compute(b.v[e]));
    }
    float sq = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float f = to_compute(v.v[e]);
      sq = fma_rn(f, f, sq);
    }
    sumsq += sq;
    hp[q] = v;
    if (sp) sp[q] = v;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sumsq += __shfl_xor_sync(0xffffffffu, sumsq, off);
  if (tid % 32 == 0) red[tid / 32] = sumsq;
  sync();
  float total = 0.f;
  for (int w = 0; w < warps; ++w) total += red[w];
  const float rstd = 1.f / sqrtf(total / static_cast<float>(k) + eps);
  const P* nw = reinterpret_cast<const P*>(norm_w);
  for (int q = tid; q < packs; q += nthreads) {  // the packs this thread wrote above
    P v = hp[q];
    const P w = nw ? nw[q] : P{};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float y = to_compute(v.v[e]) * rstd;
      v.v[e] = from_compute<T>(nw ? y * to_compute(w.v[e]) : y);
    }
    hp[q] = v;
  }
  sync();
}

// silu(g) * u = g / (1 + exp(-g)) * u in the compute type.
template <typename A>
__device__ __forceinline__ A silu_mul_one(A g, A u) {
  if constexpr (std::is_same_v<A, float>) return g / (1.f + expf(-g)) * u;
  else return g / (1.0 + exp(-g)) * u;
}

// One neox rotation (a, b) -> (a c - b s, b c + a s), products and sums not contracted.
__device__ __forceinline__ void rotate(float a, float b, float c, float s, float& ya, float& yb) {
  ya = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  yb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}
__device__ __forceinline__ void rotate(double a, double b, double c, double s, double& ya, double& yb) {
  ya = __dsub_rn(__dmul_rn(a, c), __dmul_rn(b, s));
  yb = __dadd_rn(__dmul_rn(b, c), __dmul_rn(a, s));
}

// One warp's q or k head row of qk_norm_rope_cache: rms_norm over the head (when a norm weight is
// given) rounded to T, then neox RoPE at `pos`. Lane i holds the rotated pairs (c, c + half) for
// c = i, i + 32, ... < half and the copied columns rotary_dim + i, + 32, ... (up to kPairs and
// kPass of them). load() reads the lane's constants (weights, frequencies), which do not depend
// on the row; apply() reads the row and calls store(column, value) once per column.
template <typename A, int kPairs, int kPass>
struct QkRope {
  A wa[kPairs], wb[kPairs], wp[kPass];
  float freq[kPairs];
  int64_t half = 0, pass = 0, rotary_dim = 0, head_dim = 0;

  template <typename W>
  __device__ __forceinline__ void load(const W* w, const float* inv_freq, int64_t rotary, int64_t dim, int lane) {
    rotary_dim = rotary;
    head_dim = dim;
    half = rotary / 2;
    pass = dim - rotary;
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int64_t c = std::min<int64_t>(lane + 32 * i, half - 1);
      freq[i] = half > 0 ? inv_freq[c] : 0.f;
      wa[i] = w != nullptr && half > 0 ? static_cast<A>(to_compute(w[c])) : A(1);
      wb[i] = w != nullptr && half > 0 ? static_cast<A>(to_compute(w[c + half])) : A(1);
    }
#pragma unroll
    for (int i = 0; i < kPass; ++i) {
      const int64_t c = rotary_dim + std::min<int64_t>(lane + 32 * i, pass - 1);
      wp[i] = w != nullptr && pass > 0 ? static_cast<A>(to_compute(w[c])) : A(1);
    }
  }

  // norm: whether the row is normalised (a norm weight was given to load()).
  template <typename T, typename Store>
  __device__ __forceinline__ void apply(const T* x, bool norm, double eps, int64_t pos, int lane, Store&& store) const {
    A a[kPairs], bv[kPairs], pv[kPass], cs[kPairs], sn[kPairs];
    A ss = 0;
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int64_t c = lane + 32 * i;
      a[i] = c < half ? to_compute(x[c]) : A(0);
      bv[i] = c < half ? to_compute(x[c + half]) : A(0);
    }
#pragma unroll
    for (int i = 0; i < kPass; ++i) {
      const int64_t c = lane + 32 * i;
      pv[i] = c < pass ? to_compute(x[rotary_dim + c]) : A(0);
    }
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const float angle = static_cast<float>(pos) * freq[i];
      if constexpr (std::is_same_v<A, float>) sincosf(angle, &sn[i], &cs[i]);
      else sincos(static_cast<double>(angle), &sn[i], &cs[i]);
    }
    A rstd = 1;
    if (norm) {
#pragma unroll
      for (int i = 0; i < kPairs; ++i) ss = fma_rn(bv[i], bv[i], fma_rn(a[i], a[i], ss));
#pragma unroll
      for (int i = 0; i < kPass; ++i) ss = fma_rn(pv[i], pv[i], ss);
      for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
      rstd = A(1) / sqrt(ss / static_cast<A>(head_dim) + static_cast<A>(eps));
    }
    // v normed and rounded to T, back in the compute type.
    auto normed = [&](A v, A wv) -> A { return norm ? to_compute(from_compute<T>(v * rstd * wv)) : v; };
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int64_t c = lane + 32 * i;
      if (c >= half) break;
      A ya, yb;
      rotate(normed(a[i], wa[i]), normed(bv[i], wb[i]), cs[i], sn[i], ya, yb);
      store(c, ya);
      store(c + half, yb);
    }
#pragma unroll
    for (int i = 0; i < kPass; ++i) {
      const int64_t c = lane + 32 * i;
      if (c >= pass) break;
      store(rotary_dim + c, normed(pv[i], wp[i]));
    }
  }
};

}  // namespace anvil::cuda_device
