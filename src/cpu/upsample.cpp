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

// dst[row, k] for dst rows over (D, H) of the dst side and k along W (or C when channels-last):
// the nested sums over the three lists. src_sizes / dst_sizes: {D, H, W} of each side.
template <typename T, typename Acc>
void gather(const UpsampleParams& p, const AxisList<Acc> (&l)[3], const int64_t (&src_sizes)[3],
            const int64_t (&dst_sizes)[3]) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const int64_t sD = src_sizes[0], sH = src_sizes[1], sW = src_sizes[2];
  const int64_t dD = dst_sizes[0], dH = dst_sizes[1], dW = dst_sizes[2];
  const int64_t total = p.n * p.c * dD * dH * dW;
  if (!p.channels_last) {
    const int64_t rows = p.n * p.c * dD * dH;
#pragma omp parallel for schedule(static) if (total >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nc = r / (dD * dH), d = r / dH % dD, h = r % dH;
      const T* plane = src + nc * sD * sH * sW;
      T* out = dst + r * dW;
      for (int64_t w = 0; w < dW; ++w) {
        Acc acc_d = Acc(0);
        for (int64_t a = l[0].start[d]; a < l[0].start[d + 1]; ++a) {
          Acc acc_h = Acc(0);
          for (int64_t b = l[1].start[h]; b < l[1].start[h + 1]; ++b) {
            const T* line = plane + (l[0].at[a] * sH + l[1].at[b]) * sW;
            Acc acc_w = Acc(0);
            for (int64_t e = l[2].start[w]; e < l[2].start[w + 1]; ++e) acc_w += l[2].w[e] * convert<Acc>(line[l[2].at[e]]);
            acc_h += l[1].w[b] * acc_w;
          }
          acc_d += l[0].w[a] * acc_h;
        }
        out[w] = convert<T>(acc_d);
      }
    }
    return;
  }
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

// The nearest forward as a copy (weights of 1 make the sum the element itself): E is the
// element's storage type. Zen 5, 2 threads, nearest 2x of [1, 64, 64, 64] bf16: 2.2 ms as the
// weighted gather.
template <typename E, typename Acc>
void gather_copy(const UpsampleParams& p, const AxisList<Acc> (&l)[3]) {
  const E* src = static_cast<const E*>(p.src);
  E* dst = static_cast<E*>(p.dst);
  const int64_t sD = p.axis[0].in, sH = p.axis[1].in, sW = p.axis[2].in;
  const int64_t dD = p.axis[0].out, dH = p.axis[1].out, dW = p.axis[2].out;
  const int64_t total = p.n * p.c * dD * dH * dW;
  const int64_t* iw = l[2].at.data();
  if (!p.channels_last) {
    const int64_t rows = p.n * p.c * dD * dH;
#pragma omp parallel for schedule(static) if (total >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nc = r / (dD * dH), d = r / dH % dD, h = r % dH;
      const E* line = src + (nc * sD * sH + l[0].at[static_cast<size_t>(d)] * sH + l[1].at[static_cast<size_t>(h)]) * sW;
      E* out = dst + r * dW;
      for (int64_t w = 0; w < dW; ++w) out[w] = line[iw[w]];
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

// The nearest modes' backward, channels-first: per input row (d, h), each output row of its D and
// H ranges is scattered along W into a row of sums (each output read once, no per-element list
// walk). The sums nest as the gather's do (W within H within D, outputs ascending), so the bits
// are the gather's (Zen 5, 2 threads, nearest 2x of [1, 64, 64, 64] bf16: 1.25 ms as the gather).
template <typename T, typename Acc>
void nearest_backward_rows(const UpsampleParams& p, const AxisList<Acc> (&l)[3], const AxisList<Acc>& fw) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const int64_t iD = p.axis[0].in, iH = p.axis[1].in, iW = p.axis[2].in;
  const int64_t oD = p.axis[0].out, oH = p.axis[1].out, oW = p.axis[2].out;
  const int64_t rows = p.n * p.c * iD * iH;
  const int64_t* wsrc = fw.at.data();  // the input W index of each output W index
#pragma omp parallel if (p.n * p.c * oD * oH * oW >= kParallelGrain)
  {
    std::vector<Acc> acc_d(static_cast<size_t>(iW)), acc_h(acc_d), acc_w(acc_d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nc = r / (iD * iH), d = r / iH % iD, h = r % iH;
      std::fill(acc_d.begin(), acc_d.end(), Acc(0));
      for (int64_t a = l[0].start[d]; a < l[0].start[d + 1]; ++a) {
        std::fill(acc_h.begin(), acc_h.end(), Acc(0));
        for (int64_t b = l[1].start[h]; b < l[1].start[h + 1]; ++b) {
          std::fill(acc_w.begin(), acc_w.end(), Acc(0));
          const T* g = src + ((nc * oD + l[0].at[a]) * oH + l[1].at[b]) * oW;
          for (int64_t o = 0; o < oW; ++o) acc_w[static_cast<size_t>(wsrc[o])] += convert<Acc>(g[o]);
          for (int64_t w = 0; w < iW; ++w) acc_h[static_cast<size_t>(w)] += acc_w[static_cast<size_t>(w)];
        }
        for (int64_t w = 0; w < iW; ++w) acc_d[static_cast<size_t>(w)] += acc_h[static_cast<size_t>(w)];
      }
      T* out = dst + r * iW;
      for (int64_t w = 0; w < iW; ++w) out[w] = convert<T>(acc_d[static_cast<size_t>(w)]);
    }
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
    gather<T, Acc>(p, l, in, out);
  });
}

void upsample_backward(const UpsampleParams& p) {
  dispatch_upsample(p, "[upsample_backward]", [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    const AxisList<Acc> l[3] = {backward_list<Acc>(p, p.axis[0]), backward_list<Acc>(p, p.axis[1]),
                                backward_list<Acc>(p, p.axis[2])};
    if (!p.channels_last && (p.mode == UpsampleMode::Nearest || p.mode == UpsampleMode::NearestExact)) {
      nearest_backward_rows<T, Acc>(p, l, forward_list<Acc>(p, p.axis[2]));
      return;
    }
    const int64_t in[3] = {p.axis[0].in, p.axis[1].in, p.axis[2].in};
    const int64_t out[3] = {p.axis[0].out, p.axis[1].out, p.axis[2].out};
    gather<T, Acc>(p, l, out, in);
  });
}

}  // namespace anvil::cpu
