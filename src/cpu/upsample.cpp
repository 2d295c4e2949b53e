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

// r when index i of the list reads exactly [r * i, r * i + r), each with weight 1, for every i
// (a nearest backward at an integer scale), else 0.
template <typename Acc>
int64_t uniform_block(const AxisList<Acc>& l) {
  const int64_t n = static_cast<int64_t>(l.start.size()) - 1, r = n > 0 ? l.start[1] : 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < r; ++t) {
      const int64_t e = l.start[i] + t;
      if (l.start[i + 1] - l.start[i] != r || l.at[e] != r * i + t || l.w[e] != Acc(1)) return 0;
    }
  return r;
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

// y[i] += a * x[i], the product and the sum each rounded (Acc double: this loop).
template <typename Acc>
void axpy_acc(Acc a, const Acc* x, Acc* y, int64_t n) {
  if constexpr (std::is_same_v<Acc, float>) simd::axpy(a, x, y, n);
  else
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The channels-first gather by blocks of destination rows, with the gather's sums and order (W
// innermost, then H, then D, each entry's product rounded then added). A block's source rows are
// decoded to Acc once (and split into the W band's phases), then every destination row's H x W
// sums come from one simd::banded_rows call over the band (this file's loop for the other
// indices), the D pass as axpys, and the block is stored by one encode. Zen 5, 2 threads, bf16:
// bilinear 2x backward of [1, 64, 128, 128] 14.1 ms and nearest 2x backward of [1, 64, 64, 64]
// 0.72 ms as per-element list walks, 1.7 ms and 0.35 ms with one SIMD call per row and pass.
template <typename T, typename Acc>
void gather_rows(const UpsampleParams& p, const AxisList<Acc> (&l)[3], const int64_t (&src_sizes)[3],
                 const int64_t (&dst_sizes)[3]) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const int64_t sD = src_sizes[0], sH = src_sizes[1], sW = src_sizes[2];
  const int64_t dD = dst_sizes[0], dH = dst_sizes[1], dW = dst_sizes[2];
  const Band<Acc> band = find_band(l[2]);
  Band<Acc> identity;  // every index reads its own element with weight 1
  identity.lo = 0, identity.hi = dW, identity.r = 1, identity.off = {0}, identity.c = {Acc(1)};
  // An axis whose entries are each one tap of weight 1 (extent 1, nearest's forward) is skipped: its
  // sum 0 + 1 * v is v (never -0, as no sum from +0 is).
  const bool unit_d = single_taps(l[0]), unit_h = single_taps(l[1]);
  // Source rows are held as their band's phases (rp of them, ps elements each): element k of a
  // row at (k % rp) * ps + k / rp.
  const int64_t rp = band.hi > band.lo ? band.r : 1, ps = (sW + rp - 1) / rp, row_len = rp * ps;
  std::vector<int64_t> pos(l[2].at.size());  // each W entry's element in its phase
  for (size_t e = 0; e < pos.size(); ++e) pos[e] = l[2].at[e] % rp * ps + l[2].at[e] / rp;
  const int64_t block = std::clamp<int64_t>(8192 / std::max<int64_t>(dW, 1), 1, dH);  // destination rows
  const int64_t blocks_per_plane = (dH + block - 1) / block, tasks = p.n * p.c * dD * blocks_per_plane;
#pragma omp parallel if (p.n * p.c * dD * dH * dW >= kParallelGrain)
  {
    std::vector<Acc> x, wsum, tmp(static_cast<size_t>(sW)), acc(static_cast<size_t>(block * dW)), acc_d(acc);
    std::vector<const Acc*> xs;
    std::vector<Acc> ws;
    std::vector<int64_t> begin;
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t plane = task / blocks_per_plane, nc = plane / dD, d = plane % dD;
      const int64_t h0 = task % blocks_per_plane * block, h1 = std::min(h0 + block, dH), rows = h1 - h0;
      // the block's source rows [s0, s1): from the lowest to the highest one its rows read
      int64_t s0 = sH, s1 = 0;
      for (int64_t h = h0; h < h1; ++h)
        if (l[1].start[h + 1] > l[1].start[h]) {
          s0 = std::min(s0, l[1].at[l[1].start[h]]);
          s1 = std::max(s1, l[1].at[l[1].start[h + 1] - 1] + 1);
        }
      s1 = std::max(s1, s0);
      // y[j, i] for j < nrows over rows xs[begin[j] .. begin[j + 1]) (phases as above), weights
      // ws: the H x W sums (unit: the W sums of the one row); the band in SIMD, the rest here.
      auto hw_sums = [&](const Band<Acc>& bd, int64_t stride, auto&& elem, int64_t nrows, bool unit, Acc* y) {
        auto loop = [&](int64_t i0, int64_t i1) {
          for (int64_t j = 0; j < nrows; ++j)
            for (int64_t i = i0; i < i1; ++i) {
              Acc a = Acc(0);
              for (int64_t b = begin[j]; b < begin[j + 1]; ++b) {
                const Acc w = elem(xs[b], i);
                if (unit) a = w;
                else a += ws[b] * w;
              }
              y[j * dW + i] = a;
            }
        };
        bool banded = false;
        if constexpr (std::is_same_v<Acc, float>)
          banded = bd.hi > bd.lo && simd::banded_rows(xs.data(), stride, ws.data(), begin.data(), nrows, unit, bd.r,
                                                      bd.off.data(), bd.c.data(), static_cast<int>(bd.off.size()), 0.0f,
                                                      y, dW, bd.lo, bd.hi);
        if (banded) {
          loop(0, bd.lo);
          loop(bd.hi, dW);
        } else {
          loop(0, dW);
        }
      };
      auto w_sum = [&](const Acc* xr, int64_t i) {  // the W sum of output index i over one source row
        Acc w = Acc(0);
        for (int64_t e = l[2].start[i]; e < l[2].start[i + 1]; ++e) w += l[2].w[e] * xr[pos[e]];
        return w;
      };
      auto h_sums = [&](int64_t ds) {  // acc[h - h0, :] = the H x W sums over source plane ds
        const T* in = src + ((nc * sD + ds) * sH + s0) * sW;
        const int64_t ns = s1 - s0;
        x.resize(static_cast<size_t>(ns * row_len));
        for (int64_t s = 0; s < ns; ++s) {
          Acc* xr = x.data() + s * row_len;
          if constexpr (std::is_same_v<Acc, float>) {
            simd::decode_f32(p.dtype, in + s * sW, rp == 1 ? xr : tmp.data(), sW);
            if (rp > 1) simd::split_phases(tmp.data(), sW, rp, xr, ps);
          } else {
            for (int64_t k = 0; k < sW; ++k) xr[k % rp * ps + k / rp] = convert<Acc>(in[s * sW + k]);
          }
        }
        int64_t entries = 0;
        for (int64_t h = h0; h < h1; ++h) entries += l[1].start[h + 1] - l[1].start[h];
        // A source row read by several destination rows (a 2x bilinear backward reads each twice)
        // gets its W sums once, then the H sums add those rows (a band of one tap of weight 1:
        // 0 + 1 * v is v); a row read once gets both in one pass.
        const Acc* rows_base = x.data();
        int64_t len_rows = row_len;
        if (entries > ns) {
          wsum.resize(static_cast<size_t>(ns * dW));
          xs.clear();
          ws.clear();
          begin.assign(1, 0);
          for (int64_t s = 0; s < ns; ++s) {
            xs.push_back(x.data() + s * row_len);
            ws.push_back(Acc(1));
            begin.push_back(s + 1);
          }
          hw_sums(band, ps, w_sum, ns, true, wsum.data());
          rows_base = wsum.data();
          len_rows = dW;
        }
        xs.clear();
        ws.clear();
        begin.assign(1, 0);
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t b = l[1].start[h]; b < l[1].start[h + 1]; ++b) {
            xs.push_back(rows_base + (l[1].at[b] - s0) * len_rows);
            ws.push_back(l[1].w[b]);
          }
          begin.push_back(static_cast<int64_t>(xs.size()));
        }
        if (entries > ns) hw_sums(identity, dW, [](const Acc* v, int64_t i) { return v[i]; }, rows, unit_h, acc.data());
        else hw_sums(band, ps, w_sum, rows, unit_h, acc.data());
      };
      const Acc* res = acc.data();
      if (unit_d) {
        h_sums(l[0].at[l[0].start[d]]);
      } else {
        std::fill(acc_d.begin(), acc_d.begin() + rows * dW, Acc(0));
        for (int64_t a = l[0].start[d]; a < l[0].start[d + 1]; ++a) {
          h_sums(l[0].at[a]);
          axpy_acc(l[0].w[a], acc.data(), acc_d.data(), rows * dW);
        }
        res = acc_d.data();
      }
      T* out = dst + ((nc * dD + d) * dH + h0) * dW;
      if constexpr (std::is_same_v<Acc, float>) simd::encode_f32(p.dtype, res, out, rows * dW);
      else
        for (int64_t e = 0; e < rows * dW; ++e) out[e] = convert<T>(res[e]);
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
    // A nearest backward at integer H / W scales (<= 4) sums each input's block of outputs in one
    // pass per plane: the gather's sums (weights of 1) without its per-row passes (Zen 5, 2
    // threads, nearest 2x backward of [1, 64, 64, 64] bf16: 210-290 us through gather_rows).
    const int64_t rh = uniform_block(l[1]), rw = uniform_block(l[2]);
    if (!p.channels_last && rh >= 1 && rh <= 4 && rw >= 1 && rw <= 4 && single_taps(l[0])) {
      const int64_t planes = p.n * p.c * in[0];
      bool done = true;
#pragma omp parallel for schedule(static) if (planes * in[1] * in[2] >= kParallelGrain) reduction(&& : done)
      for (int64_t q = 0; q < planes; ++q) {
        const int64_t nc = q / in[0], d = q % in[0];
        const T* g = static_cast<const T*>(p.src) + (nc * out[0] + l[0].at[l[0].start[d]]) * out[1] * out[2];
        T* y = static_cast<T*>(p.dst) + q * in[1] * in[2];
        done = done && simd::block_sums(p.dtype, g, out[2], rh, rw, y, in[1], in[2]);
      }
      if (done) return;
    }
    if (p.channels_last) gather_channels_last<T, Acc>(p, l, out, in);
    else gather_rows<T, Acc>(p, l, out, in);
  });
}

}  // namespace anvil::cpu
