// CPU rms_norm (and the fused residual add) over rows x cols: one row per task, float32
// accumulation (float64 for float64), x * rsqrt(mean(x^2) + eps) * weight rounded once.
// Low-precision rows are widened to float32 and rounded back with the SIMD converters.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/norm.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

template <typename T, typename W>
void rms_norm_rows(const RmsNormParams& p) {
  using A = opmath_t<T>;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  const W* w = static_cast<const W*>(p.weight);
  T* out = static_cast<T*>(p.out);
  T* h_out = static_cast<T*>(p.residual_out);
  const int64_t cols = p.cols;
#pragma omp parallel for schedule(static) if (p.rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* xr = x + r * p.stride_x_row;
    T* yr = out + r * p.stride_out_row;
    if (res) {  // h = round(x + residual) replaces x
      const T* rr = res + r * p.stride_residual_row;
      T* hr = h_out + r * p.stride_residual_out_row;
      for (int64_t c = 0; c < cols; ++c) hr[c] = convert<T>(static_cast<A>(xr[c]) + static_cast<A>(rr[c]));
      xr = hr;
    }
    A ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) {
      const A v = static_cast<A>(xr[c]);
      ss += v * v;
    }
    const A inv = A(1) / std::sqrt(ss / static_cast<A>(cols) + static_cast<A>(p.eps));
    if (w) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = convert<T>(static_cast<A>(xr[c]) * inv * static_cast<A>(w[c]));
    } else {
      for (int64_t c = 0; c < cols; ++c) yr[c] = convert<T>(static_cast<A>(xr[c]) * inv);
    }
  }
}

// float32 / bfloat16 / float16 rows through float32 buffers.
void rms_norm_f32_rows(const RmsNormParams& p) {
  const int64_t cols = p.cols;
  const size_t es = element_size(p.dtype);
  auto row_ptr = [&](const void* base, int64_t r, int64_t stride) {
    return static_cast<const char*>(base) + static_cast<size_t>(r * stride) * es;
  };
  std::vector<float> w(static_cast<size_t>(p.weight ? cols : 0));
  if (p.weight) simd::decode_f32(p.weight_dtype, p.weight, w.data(), cols);
#pragma omp parallel if (p.rows * cols >= kParallelGrain)
  {
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(p.residual ? cols : 0));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      simd::decode_f32(p.dtype, row_ptr(p.x, r, p.stride_x_row), a.data(), cols);
      if (p.residual) {  // h = round(x + residual) is stored, then normalised as rounded
        simd::decode_f32(p.dtype, row_ptr(p.residual, r, p.stride_residual_row), b.data(), cols);
        for (int64_t c = 0; c < cols; ++c) a[static_cast<size_t>(c)] += b[static_cast<size_t>(c)];
        void* h = const_cast<char*>(row_ptr(p.residual_out, r, p.stride_residual_out_row));
        simd::encode_f32(p.dtype, a.data(), h, cols);
        simd::decode_f32(p.dtype, h, a.data(), cols);
      }
      float ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < cols; ++c) ss += a[static_cast<size_t>(c)] * a[static_cast<size_t>(c)];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + static_cast<float>(p.eps));
      if (p.weight) {
        for (int64_t c = 0; c < cols; ++c) a[static_cast<size_t>(c)] = a[static_cast<size_t>(c)] * inv * w[static_cast<size_t>(c)];
      } else {
        for (int64_t c = 0; c < cols; ++c) a[static_cast<size_t>(c)] *= inv;
      }
      simd::encode_f32(p.dtype, a.data(), const_cast<char*>(row_ptr(p.out, r, p.stride_out_row)), cols);
    }
  }
}

}  // namespace

void rms_norm(const RmsNormParams& p) {
  if (p.dtype != DType::Float64) return rms_norm_f32_rows(p);
  if (p.weight_dtype == p.dtype) rms_norm_rows<double, double>(p);
  else rms_norm_rows<double, float>(p);
}

// Row statistics in float64 over fixed lanes (simd::kStatLanes; float64 data only, the others
// take simd::lane_sums): independent chains (one chain of dependent double adds ran 4x slower),
// summed in the same order every run.
constexpr int kLanes = simd::kStatLanes;
template <typename Acc, typename T>
void add_lanes(const T* x, int64_t n, double (&lanes)[kLanes]) {
  const int64_t n8 = n / kLanes * kLanes;
  for (int64_t i = 0; i < n8; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(static_cast<Acc>(x[i + l]));
  for (int64_t i = n8; i < n; ++i) lanes[i - n8] += static_cast<double>(static_cast<Acc>(x[i]));
}
template <typename Acc, typename T>
void add_squared_deviation_lanes(const T* x, int64_t n, double mean, double (&lanes)[kLanes]) {
  const int64_t n8 = n / kLanes * kLanes;
  for (int64_t i = 0; i < n8; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(static_cast<Acc>(x[i + l])) - mean;
      lanes[l] += d * d;
    }
  for (int64_t i = n8; i < n; ++i) {
    const double d = static_cast<double>(static_cast<Acc>(x[i])) - mean;
    lanes[i - n8] += d * d;
  }
}
inline double lane_total(const double (&lanes)[kLanes]) {
  double s = 0;
  for (double v : lanes) s += v;
  return s;
}

// Low-precision data in float32 chunks: f(chunk, offset, length) over [0, n) of x, the chunk a
// SIMD-widened copy (float32 data is read in place). Chunks are whole statistics blocks, so lane
// sums over them equal those over the whole range. float64 data does not come here.
constexpr int64_t kFloatChunk = 2048;
static_assert(kFloatChunk % (simd::kStatLanes * simd::kStatBlock) == 0, "chunks must be whole statistics blocks");
template <typename T, typename F>
void for_float_chunks(const T* x, int64_t n, float* buf, F&& f) {
  for (int64_t off = 0; off < n; off += kFloatChunk) {
    const int64_t len = n - off < kFloatChunk ? n - off : kFloatChunk;
    if constexpr (std::is_same_v<T, float>) {
      f(x + off, off, len);
    } else {
      simd::decode_f32(dtype_of<T>::value, x + off, buf, len);
      f(static_cast<const float*>(buf), off, len);
    }
  }
}
// out[0, n) of T from n float32 values (in place for float32 output).
template <typename T>
void store_floats(const float* v, T* out, int64_t n) {
  if constexpr (!std::is_same_v<T, float>) simd::encode_f32(dtype_of<T>::value, v, out, n);
}

// group_norm forward, a (n, group) row per task: the statistics over the row in two passes
// (simd::lane_sums' float32 blocks summed in float64; float64 data in float64 throughout), y in
// float32 (float64 for float64) in the composition's order, one rounding (Zen 5, 2 threads,
// [1, 128, 64, 64] bf16 in 32 groups: 1.66 ms as the composition's seven passes).
FusedPlan group_norm_plan(const GroupNormParams&) { return FusedPlan::Fused; }

void group_norm(const GroupNormParams& p) {
  dispatch_float_types(p.dtype, "[group_norm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* x = static_cast<const T*>(p.x);
    T* y = static_cast<T*>(p.y);
    const int64_t cg = p.c / p.group, m = cg * p.hxw, rows = p.n * p.group;
    constexpr bool kDouble = std::is_same_v<T, double>;
    constexpr int64_t kWholeRow = int64_t{1} << 20;  // a 16-bit row up to 4 MiB of float32 is widened once
#pragma omp parallel for schedule(static) if (rows * m >= kParallelGrain && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * m;
      double ps[kLanes] = {}, pq[kLanes] = {};
      if constexpr (std::is_same_v<T, BFloat16>) {
        // bfloat16: three passes over the row's bits (in L2 after the first), each widening as it
        // loads: half the bytes of a float32 copy of the row per pass. The same bits as the
        // float32 path: the same lanes, the same order.
        const uint16_t* xb = reinterpret_cast<const uint16_t*>(xr);
        simd::lane_sums(xb, m, ps);
        const double mean = m > 0 ? lane_total(ps) / static_cast<double>(m) : 0.0;
        simd::lane_squared_deviations(xb, m, mean, pq);
        const float mean_f = static_cast<float>(mean);
        const float var_f = static_cast<float>(m > 0 ? lane_total(pq) / static_cast<double>(m) : 0.0);
        const float rstd_f = 1.0f / std::sqrt(var_f + static_cast<float>(p.eps));
        static_cast<T*>(p.mean)[r] = T(mean_f);
        static_cast<T*>(p.rstd)[r] = T(rstd_f);
        const int64_t c0 = r % p.group * cg;
        for (int64_t ch = 0; ch < cg; ++ch) {
          const float* wp = p.weight ? static_cast<const float*>(p.weight) + c0 + ch : nullptr;
          const float* bp = p.bias ? static_cast<const float*>(p.bias) + c0 + ch : nullptr;
          simd::normalise_scalar_bf16(xb + ch * p.hxw, p.hxw, mean_f, rstd_f, wp, bp,
                                      reinterpret_cast<uint16_t*>(y + r * m + ch * p.hxw));
        }
        continue;
      }
      float buf[kFloatChunk], ybuf[kFloatChunk];
      thread_local std::vector<float> widened;
      const float* fr = nullptr;  // the row in float32 as one array, when it is one
      if constexpr (std::is_same_v<T, float>) {
        fr = xr;
      } else if constexpr (!kDouble) {
        if (m <= kWholeRow) {
          widened.resize(static_cast<size_t>(m));
          simd::decode_f32(p.dtype, xr, widened.data(), m);
          fr = widened.data();
        }
      }
      // f(float32 values, offset, length) over elements [e0, e0 + n) of the row.
      auto floats = [&](int64_t e0, int64_t n, auto&& f) {
        if (fr != nullptr) {
          for (int64_t off = 0; off < n; off += kFloatChunk) f(fr + e0 + off, off, std::min(kFloatChunk, n - off));
        } else if constexpr (!kDouble) {
          for_float_chunks(xr + e0, n, buf, f);
        }
      };
      if constexpr (kDouble) add_lanes<Acc>(xr, m, ps);
      else floats(0, m, [&](const float* f, int64_t, int64_t len) { simd::lane_sums(f, len, ps); });
      const double mean = m > 0 ? lane_total(ps) / static_cast<double>(m) : 0.0;
      if constexpr (kDouble) add_squared_deviation_lanes<Acc>(xr, m, mean, pq);
      else floats(0, m, [&](const float* f, int64_t, int64_t len) { simd::lane_squared_deviations(f, len, mean, pq); });
      const double q = lane_total(pq);
      const Acc mean_f = static_cast<Acc>(mean);
      const Acc var_f = static_cast<Acc>(m > 0 ? q / static_cast<double>(m) : 0.0);
      const Acc rstd_f = Acc(1) / std::sqrt(var_f + static_cast<Acc>(p.eps));
      static_cast<T*>(p.mean)[r] = T(mean_f);
      static_cast<T*>(p.rstd)[r] = T(rstd_f);
      T* yr = y + r * m;
      const int64_t c0 = r % p.group * cg;
      for (int64_t ch = 0; ch < cg; ++ch) {
        const Acc w = p.weight ? static_cast<const Acc*>(p.weight)[c0 + ch] : Acc(1);
        const Acc b = p.bias ? static_cast<const Acc*>(p.bias)[c0 + ch] : Acc(0);
        T* yc = yr + ch * p.hxw;
        if constexpr (kDouble) {
          const T* xc = xr + ch * p.hxw;
          for (int64_t i = 0; i < p.hxw; ++i) {
            Acc v = (xc[i] - mean_f) * rstd_f;
            if (p.weight) v = v * w;
            if (p.bias) v = v + b;
            yc[i] = v;
          }
        } else {
          floats(ch * p.hxw, p.hxw, [&](const float* f, int64_t off, int64_t len) {
            const float* wp = p.weight ? &w : nullptr;
            const float* bp = p.bias ? &b : nullptr;
            if constexpr (std::is_same_v<T, BFloat16>) {
              simd::normalise_scalar_bf16(f, len, mean_f, rstd_f, wp, bp, reinterpret_cast<uint16_t*>(yc + off));
            } else {
              float* o = std::is_same_v<T, float> ? reinterpret_cast<float*>(yc + off) : ybuf;
              simd::normalise_scalar(f, len, mean_f, rstd_f, wp, bp, o);
              store_floats(o, yc + off, len);
            }
          });
        }
      }
    }
  });
}

// batch norm's training forward. Channels-first (b > 1): a channel per task, its a runs of b
// summed in fixed lanes (kLanes). Channels-last (b = 1): each thread sums its share of the rows into
// per-channel partials, combined in thread order (the same bits for the same thread count), then
// rows normalise in parallel. Zen 5, 2 threads, [4, 64, 56, 56] bf16 channels-last: 4.5 ms as the
// composition's passes.
FusedPlan batch_norm_train_plan(const BatchNormParams&) { return FusedPlan::Fused; }

void batch_norm_train(const BatchNormParams& p) {
  dispatch_float_types(p.dtype, "[batch_norm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* x = static_cast<const T*>(p.x);
    T* y = static_cast<T*>(p.y);
    Acc* mean_out = static_cast<Acc*>(p.mean);
    Acc* var_out = static_cast<Acc*>(p.var);
    const Acc* w = static_cast<const Acc*>(p.weight);
    const Acc* bias = static_cast<const Acc*>(p.bias);
    const int64_t a = p.a, c = p.c, b = p.b, count = a * b;
    auto finish = [&](int64_t ch, double s, double q) {  // q: sum of squared deviations
      mean_out[ch] = static_cast<Acc>(s / static_cast<double>(count));
      var_out[ch] = static_cast<Acc>(q / static_cast<double>(count));
    };
    auto normalise = [&](Acc v, int64_t ch, Acc invstd) {
      Acc r = (v - mean_out[ch]) * invstd;
      if (w) r = r * w[ch];
      if (bias) r = r + bias[ch];
      return r;
    };
    auto invstd_of = [&](int64_t ch) { return Acc(1) / std::sqrt(var_out[ch] + static_cast<Acc>(p.eps)); };
    if (b > 1) {
#pragma omp parallel for schedule(static) if (a * c * b >= kParallelGrain)
      for (int64_t ch = 0; ch < c; ++ch) {
        double ps[kLanes] = {}, pq[kLanes] = {};
        float buf[kFloatChunk], ybuf[kFloatChunk];
        for (int64_t i = 0; i < a; ++i) {
          const T* run = x + (i * c + ch) * b;
          if constexpr (std::is_same_v<T, double>) add_lanes<Acc>(run, b, ps);
          else for_float_chunks(run, b, buf, [&](const float* f, int64_t, int64_t len) { simd::lane_sums(f, len, ps); });
        }
        const double s = lane_total(ps);
        const double mean = s / static_cast<double>(count);
        for (int64_t i = 0; i < a; ++i) {
          const T* run = x + (i * c + ch) * b;
          if constexpr (std::is_same_v<T, double>) add_squared_deviation_lanes<Acc>(run, b, mean, pq);
          else
            for_float_chunks(run, b, buf, [&](const float* f, int64_t, int64_t len) {
              simd::lane_squared_deviations(f, len, mean, pq);
            });
        }
        const double q = lane_total(pq);
        finish(ch, s, q);
        const Acc invstd = invstd_of(ch);
        batch_norm_channel_tail<Acc>(p, ch, mean_out[ch], var_out[ch], invstd);
        for (int64_t i = 0; i < a; ++i) {
          const T* row = x + (i * c + ch) * b;
          T* out = y + (i * c + ch) * b;
          if constexpr (std::is_same_v<T, double>) {
            for (int64_t j = 0; j < b; ++j) out[j] = normalise(row[j], ch, invstd);
          } else {
            for_float_chunks(row, b, buf, [&](const float* f, int64_t off, int64_t len) {
              float* o = std::is_same_v<T, float> ? reinterpret_cast<float*>(out + off) : ybuf;
              simd::normalise_scalar(f, len, mean_out[ch], invstd, w ? w + ch : nullptr, bias ? bias + ch : nullptr, o);
              store_floats(o, out + off, len);
            });
          }
        }
      }
      return;
    }
    // Channels-last: rows of c, each thread's share in blocks of rows read from memory once for
    // the statistics: a block's column sums and its squared deviations from its own means while it
    // is in L1, merged into the thread's running (mean, M2) per channel by Chan et al.'s pairwise
    // update in float64; the threads' partials merged the same way in thread order (the same bits
    // for the same thread count). Zen 5, 2 threads, [4, 64, 56, 56] bf16: the global two-pass
    // statistics read x from memory twice (221 us with the normalising pass, torch 181).
    const int nt = omp_get_max_threads();
    std::vector<double> pm(static_cast<size_t>(nt * c), 0.0), pq(pm);  // per thread: mean, M2
    std::vector<int64_t> pn(static_cast<size_t>(nt), 0);                // per thread: rows merged
    const bool par = a * c >= kParallelGrain;
    // (mean, m2) over na rows += a block of nb rows with column sums bs and deviations bq.
    auto merge = [](double* mean, double* m2, int64_t na, const double* bs_mean, const double* bq, int64_t nb,
                    int64_t cols) {
      const double n = static_cast<double>(na + nb), fa = static_cast<double>(na), fb = static_cast<double>(nb);
      for (int64_t ch = 0; ch < cols; ++ch) {
        const double delta = bs_mean[ch] - mean[ch];
        mean[ch] = na == 0 ? bs_mean[ch] : mean[ch] + delta * (fb / n);
        m2[ch] = na == 0 ? bq[ch] : m2[ch] + bq[ch] + delta * delta * (fa * fb / n);
      }
    };
#pragma omp parallel num_threads(nt) if (par)
    {
      const int t = omp_get_thread_num(), n_t = omp_get_num_threads();
      const int64_t r0 = a * t / n_t, r1 = a * (t + 1) / n_t;
      // Blocks of whole rows (up to 32 KiB of float32, within L1) widened to float32 (double data
      // read in place; bfloat16 widened in the column sums' pass).
      constexpr bool kBF16 = std::is_same_v<T, BFloat16>;
      const int64_t block_rows = std::max<int64_t>(1, 4 * kFloatChunk / c);
      std::vector<float> fbuf(std::is_same_v<T, double> ? 0 : static_cast<size_t>(block_rows * c));
      std::vector<float> ybuf(kBF16 ? 0 : fbuf.size());
      auto for_row_blocks = [&](bool widen, auto&& f) {  // f(rows as Acc, first row, row count)
        for (int64_t rb = r0; rb < r1; rb += block_rows) {
          const int64_t nr = std::min(block_rows, r1 - rb);
          if constexpr (std::is_same_v<T, double>) {
            f(x + rb * c, rb, nr);
          } else if constexpr (std::is_same_v<T, float>) {
            f(x + rb * c, rb, nr);
          } else {
            if (widen) simd::decode_f32(dtype_of<T>::value, x + rb * c, fbuf.data(), nr * c);
            f(static_cast<const float*>(fbuf.data()), rb, nr);
          }
        }
      };
      double* m = pm.data() + static_cast<size_t>(t) * c;
      double* q = pq.data() + static_cast<size_t>(t) * c;
      std::vector<double> bs(static_cast<size_t>(c)), bq(static_cast<size_t>(c));
      int64_t merged = 0;
      for_row_blocks(!kBF16, [&](const Acc* v, int64_t rb, int64_t nr) {
        std::fill(bs.begin(), bs.end(), 0.0);
        std::fill(bq.begin(), bq.end(), 0.0);
        if constexpr (std::is_same_v<Acc, float>) {
          if constexpr (kBF16)  // widened into fbuf (v) as it is summed
            simd::decode_column_sums_bf16(reinterpret_cast<const uint16_t*>(x + rb * c), nr, c, fbuf.data(), bs.data());
          else
            simd::column_sums(v, nr, c, bs.data());
          for (double& e : bs) e /= static_cast<double>(nr);
          simd::column_squared_deviations(v, nr, c, bs.data(), bq.data());
        } else {
          for (int64_t r = 0; r < nr; ++r)
            for (int64_t ch = 0; ch < c; ++ch) bs[static_cast<size_t>(ch)] += static_cast<double>(v[r * c + ch]);
          for (double& e : bs) e /= static_cast<double>(nr);
          for (int64_t r = 0; r < nr; ++r)
            for (int64_t ch = 0; ch < c; ++ch) {
              const double d = static_cast<double>(v[r * c + ch]) - bs[static_cast<size_t>(ch)];
              bq[static_cast<size_t>(ch)] += d * d;
            }
        }
        merge(m, q, merged, bs.data(), bq.data(), nr, c);
        merged += nr;
      });
      pn[static_cast<size_t>(t)] = merged;
#pragma omp barrier
#pragma omp single
      {
        // Thread 0's slots take the others' partials in thread order.
        int64_t total = pn[0];
        for (int i = 1; i < n_t; ++i) {
          if (pn[static_cast<size_t>(i)] == 0) continue;
          merge(pm.data(), pq.data(), total, pm.data() + static_cast<size_t>(i) * c, pq.data() + static_cast<size_t>(i) * c,
                pn[static_cast<size_t>(i)], c);
          total += pn[static_cast<size_t>(i)];
        }
        for (int64_t ch = 0; ch < c; ++ch) {
          mean_out[ch] = static_cast<Acc>(pm[static_cast<size_t>(ch)]);
          var_out[ch] = static_cast<Acc>(pq[static_cast<size_t>(ch)] / static_cast<double>(count));
          batch_norm_channel_tail<Acc>(p, ch, mean_out[ch], var_out[ch], invstd_of(ch));
        }
      }
      std::vector<Acc> invstd(static_cast<size_t>(c));
      for (int64_t ch = 0; ch < c; ++ch) invstd[static_cast<size_t>(ch)] = invstd_of(ch);
      if constexpr (kBF16) {  // straight from x to y, widened and rounded in registers
        for (int64_t rb = r0; rb < r1; rb += block_rows)
          simd::normalise_columns_bf16(reinterpret_cast<const uint16_t*>(x + rb * c), std::min(block_rows, r1 - rb), c,
                                       mean_out, invstd.data(), w, bias, reinterpret_cast<uint16_t*>(y + rb * c));
      } else {
      for_row_blocks(true, [&](const Acc* v, int64_t rb, int64_t nr) {
        Acc* o = std::is_same_v<T, Acc> ? reinterpret_cast<Acc*>(y + rb * c) : reinterpret_cast<Acc*>(ybuf.data());
        if constexpr (std::is_same_v<Acc, float>) {
          simd::normalise_columns(v, nr, c, mean_out, invstd.data(), w, bias, o);
        } else {
          for (int64_t r = 0; r < nr; ++r)
            for (int64_t ch = 0; ch < c; ++ch) o[r * c + ch] = normalise(v[r * c + ch], ch, invstd[static_cast<size_t>(ch)]);
        }
        if constexpr (!std::is_same_v<T, Acc>) store_floats(ybuf.data(), y + rb * c, nr * c);
      });
      }
    }
  });
}

FusedPlan l2_normalize_plan(const L2NormalizeParams&) { return FusedPlan::Fused; }

// A block of up to 2048 positions along inner at a time: per channel its values widened to Acc,
// their squares summed per position, then each value divided by its position's norm. A block
// reads one run per channel, each in its own page when inner is large (Wan's RMS norms: 96-384
// channels, inner 7360+); 2048 positions (a 4 KiB bf16 run) instead of 256 took the bench-ops
// case [1, 96, 2, 46, 80] from 0.11 to 0.28 of the read ceiling (3x torch's CPU F.normalize). inner == 1
// (the norm over the last dim): a row of c values, as one block of c along the channel axis.
void l2_normalize(const L2NormalizeParams& p) {
  dispatch_float_types(p.dtype, "[normalize]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr int64_t kBlock = 2048;
    const T* x = static_cast<const T*>(p.x);
    T* y = static_cast<T*>(p.y);
    const int64_t blocks = (p.inner + kBlock - 1) / kBlock;
    auto widen = [&](const T* src, Acc* dst, int64_t n) {
      if constexpr (std::is_same_v<T, Acc>) std::copy(src, src + n, dst);
      else if constexpr (std::is_same_v<Acc, float>) simd::decode_f32(p.dtype, src, dst, n);
      else
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Acc>(src[i]);
    };
    auto narrow = [&](const Acc* src, T* dst, int64_t n) {
      if constexpr (std::is_same_v<T, Acc>) std::copy(src, src + n, dst);
      else simd::encode_f32(p.dtype, src, dst, n);  // the scalar rounding, vectorised
    };
    if (p.inner == 1) {
#pragma omp parallel if (p.outer * p.c >= kParallelGrain)
      {
        std::vector<Acc> v(static_cast<size_t>(p.c));
#pragma omp for schedule(static)
        for (int64_t o = 0; o < p.outer; ++o) {
          widen(x + o * p.c, v.data(), p.c);
          Acc ss = 0;
          for (int64_t c = 0; c < p.c; ++c) ss += v[static_cast<size_t>(c)] * v[static_cast<size_t>(c)];
          const Acc d = std::max(std::sqrt(ss), static_cast<Acc>(p.eps));
          for (int64_t c = 0; c < p.c; ++c) v[static_cast<size_t>(c)] /= d;
          narrow(v.data(), y + o * p.c, p.c);
        }
      }
      return;
    }
#pragma omp parallel if (p.outer * p.c * p.inner >= kParallelGrain)
    {
      Acc v[kBlock], ss[kBlock];
#pragma omp for schedule(static)
      for (int64_t task = 0; task < p.outer * blocks; ++task) {
        const int64_t o = task / blocks, i0 = task % blocks * kBlock, n = std::min(kBlock, p.inner - i0);
        const int64_t base = o * p.c * p.inner + i0;
        std::fill(ss, ss + n, Acc(0));
        for (int64_t c = 0; c < p.c; ++c) {
          widen(x + base + c * p.inner, v, n);
          for (int64_t i = 0; i < n; ++i) ss[i] += v[i] * v[i];
        }
        for (int64_t i = 0; i < n; ++i) ss[i] = std::max(std::sqrt(ss[i]), static_cast<Acc>(p.eps));
        for (int64_t c = 0; c < p.c; ++c) {
          widen(x + base + c * p.inner, v, n);
          for (int64_t i = 0; i < n; ++i) v[i] /= ss[i];
          narrow(v, y + base + c * p.inner, n);
        }
      }
    }
  });
}

}  // namespace anvil::cpu
