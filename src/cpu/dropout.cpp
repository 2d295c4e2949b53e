// CPU dropout and its backward. Elements go in 4096-element chunks (1024 Philox counters): a
// Highway pass draws the chunk's words (one Philox-4x32-10 per lane, the vector's lanes on
// consecutive counters) and applies the keep rule of core/kernels/dropout.h to float32 values,
// widened from and rounded back to the storage dtype once; float64 takes a scalar loop.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/dropout.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/dropout.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The high 32 bits of a * m per uint32 lane.
template <class D, class V>
HWY_INLINE V MulHi32(D d, V a, V m) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(d, static_cast<uint32_t>((static_cast<uint64_t>(hn::GetLane(a)) * hn::GetLane(m)) >> 32));
#else
  const hn::Repartition<uint64_t, D> d64;
  const V even = hn::BitCast(d, hn::ShiftRight<32>(hn::MulEven(a, m)));
  const V odd = hn::BitCast(d, hn::MulEven(hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, a))), m));
  return hn::OddEven(odd, even);
#endif
}

// words[4 * j + w] = word w of Philox(seed, ctr0 + j) for j < n (core/philox.h's rounds).
void PhiloxWords(uint64_t seed, uint64_t ctr0, int64_t n, uint32_t* HWY_RESTRICT words) {
  const hn::ScalableTag<uint32_t> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto m0 = hn::Set(d, 0xD2511F53u), m1 = hn::Set(d, 0xCD9E8D57u), zero = hn::Zero(d);
  const auto lane = hn::Iota(d, 0);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const uint64_t c = ctr0 + static_cast<uint64_t>(j);
    // Lanes on counters c + 0..N-1; the low word's carry into the high word per lane.
    const auto lo = hn::Add(hn::Set(d, static_cast<uint32_t>(c)), lane);
    const auto carry = hn::IfThenElseZero(hn::Lt(lo, hn::Set(d, static_cast<uint32_t>(c))), hn::Set(d, 1u));
    auto c0 = lo, c1 = hn::Add(hn::Set(d, static_cast<uint32_t>(c >> 32)), carry), c2 = zero, c3 = zero;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const auto hi0 = MulHi32(d, c0, m0), lo0 = hn::Mul(c0, m0);
      const auto hi1 = MulHi32(d, c2, m1), lo1 = hn::Mul(c2, m1);
      c0 = hn::Xor(hn::Xor(hi1, c1), hn::Set(d, k0));
      c1 = lo1;
      c2 = hn::Xor(hn::Xor(hi0, c3), hn::Set(d, k1));
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    hn::StoreInterleaved4(c0, c1, c2, c3, d, words + 4 * j);
  }
  for (; j < n; ++j) {
    const Philox4 r = philox4x32(seed, ctr0 + static_cast<uint64_t>(j));
    std::memcpy(words + 4 * j, r.v, sizeof r.v);
  }
}

// y[i] = x[i] * (kept ? scale : 0) and mask[i] = kept, for x, y float32 (y may be x).
void ApplyKeepF32(const float* x, const uint32_t* HWY_RESTRICT words, uint32_t threshold, float scale, float* y,
                  bool* HWY_RESTRICT mask, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(du)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto thr = hn::Set(du, threshold);
  const auto one = hn::Set(di, 1);
  const auto s = hn::Set(df, scale), z = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto keep = hn::Lt(hn::ShiftRight<8>(hn::LoadU(du, words + i)), thr);
    hn::StoreU(hn::DemoteTo(d8, hn::IfThenElseZero(hn::RebindMask(di, keep), one)), d8, reinterpret_cast<uint8_t*>(mask + i));
    const auto f = hn::IfThenElse(hn::RebindMask(df, keep), s, z);
    hn::StoreU(hn::Mul(hn::LoadU(df, x + i), f), df, y + i);
  }
  for (; i < n; ++i) {
    const bool k = dropout_keeps(words[i], threshold);
    mask[i] = k;
    y[i] = x[i] * (k ? scale : 0.0f);
  }
}

// y[i] = g[i] * (mask[i] ? scale : 0) for float32 (y may be g).
void MaskScaleF32(const float* g, const bool* HWY_RESTRICT mask, float scale, float* y, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint8_t, decltype(du)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto s = hn::Set(df, scale), z = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto m = hn::PromoteTo(du, hn::LoadU(d8, reinterpret_cast<const uint8_t*>(mask + i)));
    const auto f = hn::IfThenElse(hn::RebindMask(df, hn::Ne(m, hn::Zero(du))), s, z);
    hn::StoreU(hn::Mul(hn::LoadU(df, g + i), f), df, y + i);
  }
  for (; i < n; ++i) y[i] = g[i] * (mask[i] ? scale : 0.0f);
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu {
namespace simd {
HWY_EXPORT(PhiloxWords);
HWY_EXPORT(ApplyKeepF32);
HWY_EXPORT(MaskScaleF32);
}  // namespace simd

namespace {
constexpr int64_t kChunk = 4096;  // elements; a multiple of 4 so chunks start on a counter
static_assert(kChunk % 4 == 0);

// f(i0, n, words, vals) over the chunks of numel elements, with per-thread buffers of kChunk
// Philox words and float32 values.
template <typename F>
void for_chunks(int64_t numel, F&& f) {
#pragma omp parallel if (numel >= kParallelGrain)
  {
    std::vector<uint32_t> words(kChunk);
    std::vector<float> vals(kChunk);
#pragma omp for schedule(static)
    for (int64_t c = 0; c < (numel + kChunk - 1) / kChunk; ++c)
      f(c * kChunk, std::min(kChunk, numel - c * kChunk), words.data(), vals.data());
  }
}
}  // namespace

void dropout(const DropoutParams& p) {
  if (p.dtype == DType::Float64) {
    const double* x = static_cast<const double*>(p.x);
    double* out = static_cast<double*>(p.out);
#pragma omp parallel for schedule(static) if (p.numel >= kParallelGrain)
    for (int64_t j = 0; j < (p.numel + 3) / 4; ++j) {
      const Philox4 r = philox4x32(p.seed, p.offset + static_cast<uint64_t>(j));
      for (int64_t w = 0, i = 4 * j; w < 4 && i < p.numel; ++w, ++i) {
        const bool k = dropout_keeps(r.v[w], p.threshold);
        p.mask[i] = k;
        out[i] = x[i] * (k ? p.scale : 0.0);
      }
    }
    return;
  }
  dispatch_float_types(p.dtype, "[dropout]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(p.x);
    T* out = static_cast<T*>(p.out);
    const float scale = static_cast<float>(p.scale);
    for_chunks(p.numel, [&](int64_t i0, int64_t n, uint32_t* words, float* f) {
      HWY_DYNAMIC_DISPATCH(simd::PhiloxWords)(p.seed, p.offset + static_cast<uint64_t>(i0 / 4), (n + 3) / 4, words);
      simd::decode_f32(p.dtype, x + i0, f, n);
      HWY_DYNAMIC_DISPATCH(simd::ApplyKeepF32)(f, words, p.threshold, scale, f, p.mask + i0, n);
      simd::encode_f32(p.dtype, f, out + i0, n);
    });
  });
}

void dropout_backward(const DropoutBackwardParams& p) {
  if (p.dtype == DType::Float64) {
    const double* g = static_cast<const double*>(p.grad);
    double* out = static_cast<double*>(p.out);
#pragma omp parallel for schedule(static) if (p.numel >= kParallelGrain)
    for (int64_t i = 0; i < p.numel; ++i) out[i] = g[i] * (p.mask[i] ? p.scale : 0.0);
    return;
  }
  dispatch_float_types(p.dtype, "[native_dropout_backward]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(p.grad);
    T* out = static_cast<T*>(p.out);
    const float scale = static_cast<float>(p.scale);
    for_chunks(p.numel, [&](int64_t i0, int64_t n, uint32_t*, float* f) {
      simd::decode_f32(p.dtype, g + i0, f, n);
      HWY_DYNAMIC_DISPATCH(simd::MaskScaleF32)(f, p.mask + i0, scale, f, n);
      simd::encode_f32(p.dtype, f, out + i0, n);
    });
  });
}

}  // namespace anvil::cpu
#endif  // HWY_ONCE
