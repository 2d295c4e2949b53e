// CPU upsampling, forward and backward. Each axis's taps come from core/kernels/upsample.h once
// per call (forward: per output index; backward: per input index, the outputs that read it and
// their summed weights, from upsample_output_range), so the loops only gather. Both layouts sum
// in the same nested order (W innermost, then H, then D), so a channels-last call gives the
// contiguous call's bits: rows of the innermost spatial dim for NC(D)HW, rows of C for
// channels-last. Values accumulate in float (double for float64) and round once.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/upsample.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

// Per index of one side of an axis, a list of (index on the other side, weight): forward lists
// the taps of each output index, backward the outputs reading each input index.
template <typename Acc>
struct AxisList {
  std::vector<int64_t> start{0}, at;
  std::vector<Acc> w;
  void push(int64_t i, Acc v) {
    at.push_back(i);
    w.push_back(v);
  }
  void close() { start.push_back(static_cast<int64_t>(at.size())); }
};

template <typename Acc>
AxisList<Acc> forward_list(const UpsampleParams& p, const UpsampleAxis& a) {
  AxisList<Acc> l;
  int64_t idx[4];
  Acc w[4];
  for (int64_t o = 0; o < a.out; ++o) {
    const int n = upsample_taps<Acc>(p.mode, p.align_corners, a, o, idx, w);
    for (int j = 0; j < n; ++j) l.push(idx[j], w[j]);
    l.close();
  }
  return l;
}

// Input index i: every output o of its range that reads it, with the sum of the weights of o's
// taps at i (clamped taps can repeat an index).
template <typename Acc>
AxisList<Acc> backward_list(const UpsampleParams& p, const UpsampleAxis& a) {
  AxisList<Acc> l;
  int64_t idx[4];
  Acc w[4];
  for (int64_t i = 0; i < a.in; ++i) {
    const UpsampleRange r = upsample_output_range<Acc>(p.mode, p.align_corners, a, i);
    for (int64_t o = r.lo; o < r.hi; ++o) {
      const int n = upsample_taps<Acc>(p.mode, p.align_corners, a, o, idx, w);
      Acc sum = Acc(0);
      bool reads = false;
      for (int j = 0; j < n; ++j)
        if (idx[j] == i) sum += w[j], reads = true;
      if (reads) l.push(o, sum);
    }
    l.close();
  }
  return l;
}

// Channels-last dst[n, d, h, w, 0:C]: the nested sums over the three lists (W innermost, then H,
// then D), a row of C at a time. src_sizes / dst_sizes: {D, H, W} of each side.
template <typename T, typename Acc>
void gather_channels_last(const UpsampleParams& p, const AxisList<Acc> (&l)[3], const int64_t (&src_sizes)[3],
                          const int64_t (&dst_sizes)[3]) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const int64_t sD = src_sizes[0], sH = src_sizes[1], sW = src_sizes[2];
  const int64_t dD = dst_sizes[0], dH = dst_sizes[1], dW = dst_sizes[2];
  const int64_t total = p.n * p.c * dD * dH * dW;
  const int64_t c = p.c, rows = p.n * dD * dH * dW;
#pragma omp parallel if (total >= kParallelGrain)
  {
    std::vector<Acc> acc_d(static_cast<size_t>(c)), acc_h(acc_d), acc_w(acc_d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / (dD * dH * dW), d = r / (dH * dW) % dD, h = r / dW % dH, w = r % dW;
      const T* image = src + n * sD * sH * sW * c;
      std::fill(acc_d.begin(), acc_d.end(), Acc(0));
      for (int64_t a = l[0].start[d]; a < l[0].start[d + 1]; ++a) {
        std::fill(acc_h.begin(), acc_h.end(), Acc(0));
        for (int64_t b = l[1].start[h]; b < l[1].start[h + 1]; ++b) {
          const T* line = image + (l[0].at[a] * sH + l[1].at[b]) * sW * c;
          std::fill(acc_w.begin(), acc_w.end(), Acc(0));
          for (int64_t e = l[2].start[w]; e < l[2].start[w + 1]; ++e) {
            const T* px = line + l[2].at[e] * c;
            const Acc we = l[2].w[e];
            for (int64_t k = 0; k < c; ++k) acc_w[k] += we * convert<Acc>(px[k]);
          }
          const Acc wb = l[1].w[b];
          for (int64_t k = 0; k < c; ++k) acc_h[k] += wb * acc_w[k];
        }
        const Acc wa = l[0].w[a];
        for (int64_t k = 0; k < c; ++k) acc_d[k] += wa * acc_h[k];
      }
      T* out = dst + r * c;
      for (int64_t k = 0; k < c; ++k) out[k] = convert<T>(acc_d[k]);
    }
  }
}

// Every index reads exactly one source with weight 1 (the nearest modes' forward).
template <typename Acc>
bool single_taps(const AxisList<Acc>& l) {
  for (size_t i = 0; i + 1 < l.start.size(); ++i)
    if (l.start[i + 1] - l.start[i] != 1 || l.w[static_cast<size_t>(l.start[i])] != Acc(1)) return false;
  return true;
}

// An axis list's interior as a band: indices [lo, hi) whose entries are (r * i + off[t], c[t])
// for t < taps, the same offsets and weights for every i (an integer scale's interior, e.g. the
// four outputs of a 2x bilinear backward's input). lo == hi where no run of 16 or more exists.
template <typename Acc>
struct Band {
  int64_t lo = 0, hi = 0, r = 0;
  std::vector<int64_t> off;
  std::vector<Acc> c;
};

template <typename Acc>
Band<Acc> find_band(const AxisList<Acc>& l) {
  Band<Acc> b;
  const int64_t n = static_cast<int64_t>(l.start.size()) - 1;
  if (n < 16) return b;
  const int64_t m = n / 2 - 1, s0 = l.start[m], taps = l.start[m + 1] - s0;
  const int64_t r = taps > 0 && l.start[m + 2] - l.start[m + 1] == taps ? l.at[l.start[m + 1]] - l.at[s0] : 0;
  if (r < 1) return b;
  for (int64_t t = 0; t < taps; ++t) {
    b.off.push_back(l.at[s0 + t] - r * m);
    b.c.push_back(l.w[s0 + t]);
  }
  auto fits = [&](int64_t i) {
    if (l.start[i + 1] - l.start[i] != taps) return false;
    for (int64_t t = 0; t < taps; ++t)
      if (l.at[l.start[i] + t] != r * i + b.off[t] || l.w[l.start[i] + t] != b.c[t]) return false;
    return true;
  };
  int64_t lo = m, hi = m + 1;
  while (lo > 0 && fits(lo - 1)) --lo;
  while (hi < n && fits(hi)) ++hi;
  if (hi - lo >= 16) b.lo = lo, b.hi = hi, b.r = r;
  return b;
}

// y[i] = sum over the list's entries of i of w * x[at], entries in order from 0, for every index
// of the list: the band's interior through simd::strided_taps (float), the rest as this loop.
template <typename Acc>
void axis_pass(const AxisList<Acc>& l, const Band<Acc>& band, const Acc* x, int64_t nx, Acc* y) {
  const int64_t n = static_cast<int64_t>(l.start.size()) - 1;
  auto loop = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      Acc a = Acc(0);
      for (int64_t e = l.start[i]; e < l.start[i + 1]; ++e) a += l.w[e] * x[l.at[e]];
      y[i] = a;
    }
  };
  if constexpr (std::is_same_v<Acc, float>) {
    if (band.hi > band.lo && simd::strided_taps(x, nx, band.r, band.off.data(), band.c.data(),
                                                static_cast<int>(band.off.size()), y, band.lo, band.hi)) {
      loop(0, band.lo);
      loop(band.hi, n);
      return;
    }
  }
  loop(0, n);
}

// y[i] += a * x[i], the product and the sum each rounded (Acc double: this loop).
template <typename Acc>
void axpy_acc(Acc a, const Acc* x, Acc* y, int64_t n) {
  if constexpr (std::is_same_v<Acc, float>) simd::axpy(a, x, y, n);
  else
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The channels-first gather separated by axis, with the gather's sums and order (W innermost,
// then H, then D, each entry's product rounded then added): each source row's W pass (the
// banded interior in SIMD) is computed once into a small per-thread cache and reused by the
// destination rows that read it (a 2x bilinear backward reads each grad_output row from two
// input rows), then the H and D passes are vector axpys. Zen 5, 2 threads, bf16: bilinear 2x
// backward of [1, 64, 128, 128] 14.1 ms and nearest 2x backward of [1, 64, 64, 64] 0.72 ms as
// per-element list walks.
template <typename T, typename Acc>
void gather_rows(const UpsampleParams& p, const AxisList<Acc> (&l)[3], const int64_t (&src_sizes)[3],
                 const int64_t (&dst_sizes)[3]) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const int64_t sD = src_sizes[0], sH = src_sizes[1], sW = src_sizes[2];
  const int64_t dD = dst_sizes[0], dH = dst_sizes[1], dW = dst_sizes[2];
  const int64_t rows = p.n * p.c * dD * dH;
  const Band<Acc> band = find_band(l[2]);
  // An axis whose entries are each one tap of weight 1 (extent 1, nearest's forward) is skipped: its
  // sum 0 + 1 * v is v (never -0, as no sum from +0 is).
  const bool unit_d = single_taps(l[0]), unit_h = single_taps(l[1]);
  auto max_taps = [](const AxisList<Acc>& a) {
    int64_t m = 0;
    for (size_t i = 0; i + 1 < a.start.size(); ++i) m = std::max(m, a.start[i + 1] - a.start[i]);
    return m;
  };
  const size_t slots = static_cast<size_t>(max_taps(l[0]) * max_taps(l[1]) + 2);
#pragma omp parallel if (rows * dW >= kParallelGrain)
  {
    std::vector<Acc> x(static_cast<size_t>(sW)), acc_h(static_cast<size_t>(dW)), acc_d(acc_h);
    std::vector<std::vector<Acc>> cache(slots, std::vector<Acc>(static_cast<size_t>(dW)));
    std::vector<int64_t> key(slots, -1);
    size_t victim = 0;
    auto w_pass = [&](int64_t line) -> const Acc* {  // valid until the next call
      for (size_t s = 0; s < slots; ++s)
        if (key[s] == line) return cache[s].data();
      const T* in = src + line * sW;
      if constexpr (std::is_same_v<Acc, float>) simd::decode_f32(p.dtype, in, x.data(), sW);
      else
        for (int64_t i = 0; i < sW; ++i) x[static_cast<size_t>(i)] = convert<Acc>(in[i]);
      const size_t s = victim;
      victim = (victim + 1) % slots;
      key[s] = line;
      axis_pass(l[2], band, x.data(), sW, cache[s].data());
      return cache[s].data();
    };
    auto h_sum = [&](int64_t nc, int64_t ds, int64_t h) -> const Acc* {  // the H pass of source plane ds
      const int64_t base = (nc * sD + ds) * sH;
      if (unit_h) return w_pass(base + l[1].at[l[1].start[h]]);
      std::fill(acc_h.begin(), acc_h.end(), Acc(0));
      for (int64_t b = l[1].start[h]; b < l[1].start[h + 1]; ++b) axpy_acc(l[1].w[b], w_pass(base + l[1].at[b]), acc_h.data(), dW);
      return acc_h.data();
    };
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nc = r / (dD * dH), d = r / dH % dD, h = r % dH;
      const Acc* res;
      if (unit_d) {
        res = h_sum(nc, l[0].at[l[0].start[d]], h);
      } else {
        std::fill(acc_d.begin(), acc_d.end(), Acc(0));
        for (int64_t a = l[0].start[d]; a < l[0].start[d + 1]; ++a) axpy_acc(l[0].w[a], h_sum(nc, l[0].at[a], h), acc_d.data(), dW);
        res = acc_d.data();
      }
      T* out = dst + r * dW;
      if constexpr (std::is_same_v<Acc, float>) simd::encode_f32(p.dtype, res, out, dW);
      else
        for (int64_t w = 0; w < dW; ++w) out[w] = convert<T>(res[w]);
    }
  }
}

// The nearest forward as a copy (weights of 1 make the sum the element itself): E is the
// element's storage type. Channels-first, a row that reads the same source row as the one before
// it is a copy of that row, and a W axis repeating each element r = 2..4 times is
// simd::repeat_lanes (Zen 5, 2 threads, nearest 2x of [1, 64, 64, 64] bf16: 2.2 ms as the
// weighted gather, 0.34-0.5 ms as a scalar per-element copy).
template <typename E, typename Acc>
void gather_copy(const UpsampleParams& p, const AxisList<Acc> (&l)[3]) {
  const E* src = static_cast<const E*>(p.src);
  E* dst = static_cast<E*>(p.dst);
  const int64_t sD = p.axis[0].in, sH = p.axis[1].in, sW = p.axis[2].in;
  const int64_t dD = p.axis[0].out, dH = p.axis[1].out, dW = p.axis[2].out;
  const int64_t total = p.n * p.c * dD * dH * dW;
  const int64_t* iw = l[2].at.data();
  if (!p.channels_last) {
    int repeat = 0;  // every source element repeated this many times in order (1: the row itself)
    if (dW % sW == 0 && dW / sW <= 4) {
      repeat = static_cast<int>(dW / sW);
      for (int64_t w = 0; w < dW && repeat; ++w)
        if (iw[w] != w / repeat) repeat = 0;
    }
    const int64_t rows = p.n * p.c * dD * dH;
#pragma omp parallel if (total >= kParallelGrain)
    {
      const E* prev = nullptr;
      int64_t prev_r = -1;
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t nc = r / (dD * dH), d = r / dH % dD, h = r % dH;
        const E* line = src + (nc * sD * sH + l[0].at[static_cast<size_t>(d)] * sH + l[1].at[static_cast<size_t>(h)]) * sW;
        E* out = dst + r * dW;
        if (line == prev && prev_r == r - 1) std::memcpy(out, out - dW, static_cast<size_t>(dW) * sizeof(E));
        else if (repeat == 1) std::memcpy(out, line, static_cast<size_t>(dW) * sizeof(E));
        else if (repeat < 2 || !simd::repeat_lanes(sizeof(E), line, out, sW, repeat))
          for (int64_t w = 0; w < dW; ++w) out[w] = line[iw[w]];
        prev = line;
        prev_r = r;
      }
    }
    return;
  }
  const int64_t c = p.c, rows = p.n * dD * dH;
#pragma omp parallel for schedule(static) if (total >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / (dD * dH), d = r / dH % dD, h = r % dH;
    const E* line = src + ((n * sD + l[0].at[static_cast<size_t>(d)]) * sH + l[1].at[static_cast<size_t>(h)]) * sW * c;
    E* out = dst + r * dW * c;
    for (int64_t w = 0; w < dW; ++w) std::memcpy(out + w * c, line + iw[w] * c, static_cast<size_t>(c) * sizeof(E));
  }
}

}  // namespace

void upsample(const UpsampleParams& p) {
  dispatch_upsample(p, "[upsample]", [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    const AxisList<Acc> l[3] = {forward_list<Acc>(p, p.axis[0]), forward_list<Acc>(p, p.axis[1]),
                                forward_list<Acc>(p, p.axis[2])};
    if (single_taps(l[0]) && single_taps(l[1]) && single_taps(l[2])) {
      dispatch_element_size(sizeof(T), "[upsample]", [&](auto e) { gather_copy<typename decltype(e)::type, Acc>(p, l); });
      return;
    }
    const int64_t in[3] = {p.axis[0].in, p.axis[1].in, p.axis[2].in};
    const int64_t out[3] = {p.axis[0].out, p.axis[1].out, p.axis[2].out};
    if (p.channels_last) gather_channels_last<T, Acc>(p, l, in, out);
    else gather_rows<T, Acc>(p, l, in, out);
  });
}

void upsample_backward(const UpsampleParams& p) {
  dispatch_upsample(p, "[upsample_backward]", [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    const AxisList<Acc> l[3] = {backward_list<Acc>(p, p.axis[0]), backward_list<Acc>(p, p.axis[1]),
                                backward_list<Acc>(p, p.axis[2])};
    const int64_t in[3] = {p.axis[0].in, p.axis[1].in, p.axis[2].in};
    const int64_t out[3] = {p.axis[0].out, p.axis[1].out, p.axis[2].out};
    if (p.channels_last) gather_channels_last<T, Acc>(p, l, out, in);
    else gather_rows<T, Acc>(p, l, out, in);
  });
}

}  // namespace anvil::cpu
