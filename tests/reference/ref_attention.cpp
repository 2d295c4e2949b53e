#include "reference/ref_attention.h"

#include <algorithm>
#include <cmath>

namespace ref {

AttentionRef attention(const Array& q, const Array& k, const Array& v, const Array* mask, bool mask_bool,
                       const std::vector<int64_t>* lens, bool causal, bool from_end, double scale, double u32) {
  const int64_t B = q.sizes[0], Hq = q.sizes[1], L = q.sizes[2], E = q.sizes[3];
  const int64_t Hk = k.sizes[1], S = k.sizes[2], Ev = v.sizes[3];
  AttentionRef r{Array({B, Hq, L, Ev}), Array({B, Hq, L, Ev}), Array({B, Hq, L, Ev})};
  std::vector<double> s(static_cast<size_t>(S)), o(static_cast<size_t>(Ev)), mag(static_cast<size_t>(Ev));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h * Hk / Hq;
      const int64_t len = lens ? std::clamp<int64_t>((*lens)[static_cast<size_t>(b)], 0, S) : S;
      const double* kb = k.v.data() + (b * Hk + hk) * S * E;
      const double* vb = v.v.data() + (b * Hk + hk) * S * Ev;
      for (int64_t i = 0; i < L; ++i) {
        const int64_t row = (b * Hq + h) * L + i;
        const double* qr = q.v.data() + row * E;
        const int64_t limit = causal ? std::clamp<int64_t>(i + 1 + (from_end ? len - L : 0), 0, len) : len;
        double mx = -INFINITY, amax = 0;
        for (int64_t j = 0; j < limit; ++j) {
          double d = 0, a = 0;
          for (int64_t e = 0; e < E; ++e) {
            d += qr[e] * kb[j * E + e];
            a += std::fabs(qr[e] * kb[j * E + e]);
          }
          d *= scale;
          amax = std::max(amax, a * std::fabs(scale));
          if (mask) {
            const double m = mask->v[static_cast<size_t>(row * S + j)];
            if (mask_bool) d = m != 0 ? d : -INFINITY;
            else d += m;
          }
          s[static_cast<size_t>(j)] = d;
          mx = std::max(mx, d);
        }
        if (mx == -INFINITY) continue;  // no key: zeros
        double sum = 0;
        for (int64_t j = 0; j < limit; ++j) sum += s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
        std::fill(o.begin(), o.end(), 0.0);
        std::fill(mag.begin(), mag.end(), 0.0);
        for (int64_t j = 0; j < limit; ++j) {
          const double w = s[static_cast<size_t>(j)] / sum;
          for (int64_t e = 0; e < Ev; ++e) {
            o[static_cast<size_t>(e)] += w * vb[j * Ev + e];
            mag[static_cast<size_t>(e)] += w * std::fabs(vb[j * Ev + e]);
          }
        }
        const double tol = (4.0 * static_cast<double>(E) * amax + 2.0 * static_cast<double>(limit) + 16.0) * u32;
        for (int64_t e = 0; e < Ev; ++e) {
          r.out.v[static_cast<size_t>(row * Ev + e)] = o[static_cast<size_t>(e)];
          r.err.v[static_cast<size_t>(row * Ev + e)] = tol * mag[static_cast<size_t>(e)];
          r.mag.v[static_cast<size_t>(row * Ev + e)] = mag[static_cast<size_t>(e)];
        }
      }
    }
  return r;
}

}  // namespace ref
