#include "reference/ref_conv.h"


namespace ref {
namespace {

// Every product of a convolution as (small, big, weight) flat offsets. The small side S has the
// output's extents of a plain convolution (y; x when transposed), the big side B the extents
// it reads (x; y when transposed); S is [N, G * sg, so...], B [N, G * bg, bo...], W [G * sg, bg,
// k...]: small index o and tap t meet big index i = o * stride - pad + t * dilation (inside B).
template <typename F>
void for_each_product(const Shape& small, const Shape& big, const Shape& w, const ConvSpec& s, F&& f) {
  const size_t k = small.size() - 2;
  const int64_t n = small[0], g = s.groups, sg = small[1] / g, bg = big[1] / g;
  // Spatial extents padded to three dims (leading extents 1), row-major plane sizes.
  int64_t so[3] = {1, 1, 1}, bo[3] = {1, 1, 1}, kk[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pd[3] = {0, 0, 0}, dl[3] = {1, 1, 1};
  for (size_t d = 0; d < k; ++d) {
    const size_t e = 3 - k + d;
    so[e] = small[d + 2], bo[e] = big[d + 2], kk[e] = w[d + 2];
    st[e] = s.stride[d], pd[e] = s.padding[d], dl[e] = s.dilation[d];
  }
  const int64_t splane = so[0] * so[1] * so[2], bplane = bo[0] * bo[1] * bo[2], kplane = kk[0] * kk[1] * kk[2];
  for (int64_t b = 0; b < n; ++b)
    for (int64_t grp = 0; grp < g; ++grp)
      for (int64_t sc = 0; sc < sg; ++sc)
        for (int64_t bc = 0; bc < bg; ++bc) {
          const int64_t s_base = (b * g * sg + grp * sg + sc) * splane, b_base = (b * g * bg + grp * bg + bc) * bplane;
          const int64_t w_base = ((grp * sg + sc) * bg + bc) * kplane;
          for (int64_t o0 = 0; o0 < so[0]; ++o0)
            for (int64_t o1 = 0; o1 < so[1]; ++o1)
              for (int64_t o2 = 0; o2 < so[2]; ++o2)
                for (int64_t t0 = 0; t0 < kk[0]; ++t0)
                  for (int64_t t1 = 0; t1 < kk[1]; ++t1)
                    for (int64_t t2 = 0; t2 < kk[2]; ++t2) {
                      const int64_t i0 = o0 * st[0] - pd[0] + t0 * dl[0], i1 = o1 * st[1] - pd[1] + t1 * dl[1],
                                    i2 = o2 * st[2] - pd[2] + t2 * dl[2];
                      if (i0 < 0 || i0 >= bo[0] || i1 < 0 || i1 >= bo[1] || i2 < 0 || i2 >= bo[2]) continue;
                      f(s_base + (o0 * so[1] + o1) * so[2] + o2, b_base + (i0 * bo[1] + i1) * bo[2] + i2,
                        w_base + (t0 * kk[1] + t1) * kk[2] + t2);
                    }
        }
}

}  // namespace

Shape conv_output_sizes(const Shape& x, const Shape& w, const ConvSpec& s) {
  Shape out{x[0], s.transposed ? w[1] * s.groups : w[0]};
  for (size_t d = 0; d + 2 < x.size(); ++d) {
    const int64_t span = s.dilation[d] * (w[d + 2] - 1);
    out.push_back(s.transposed ? (x[d + 2] - 1) * s.stride[d] - 2 * s.padding[d] + span + s.output_padding[d] + 1
                               : (x[d + 2] + 2 * s.padding[d] - span - 1) / s.stride[d] + 1);
  }
  return out;
}

Array conv(const Array& x, const Array& w, const Array* b, const ConvSpec& s) {
  Array y(conv_output_sizes(x.sizes, w.sizes, s));
  if (!s.transposed)
    for_each_product(y.sizes, x.sizes, w.sizes, s, [&](int64_t so, int64_t bo, int64_t wo) { y.v[so] += x.v[bo] * w.v[wo]; });
  else
    for_each_product(x.sizes, y.sizes, w.sizes, s, [&](int64_t so, int64_t bo, int64_t wo) { y.v[bo] += x.v[so] * w.v[wo]; });
  if (b) {
    const int64_t c = y.sizes[1], plane = y.numel() / (y.sizes[0] * c);
    for (int64_t i = 0; i < y.numel(); ++i) y.v[i] += b->v[i / plane % c];
  }
  return y;
}

Array conv_grad_input(const Array& gy, const Array& w, const Shape& x_sizes, const ConvSpec& s) {
  Array gx(x_sizes);
  if (!s.transposed)
    for_each_product(gy.sizes, x_sizes, w.sizes, s, [&](int64_t so, int64_t bo, int64_t wo) { gx.v[bo] += gy.v[so] * w.v[wo]; });
  else
    for_each_product(x_sizes, gy.sizes, w.sizes, s, [&](int64_t so, int64_t bo, int64_t wo) { gx.v[so] += gy.v[bo] * w.v[wo]; });
  return gx;
}

Array conv_grad_weight(const Array& x, const Array& gy, const Shape& w_sizes, const ConvSpec& s) {
  Array gw(w_sizes);
  if (!s.transposed)
    for_each_product(gy.sizes, x.sizes, w_sizes, s, [&](int64_t so, int64_t bo, int64_t wo) { gw.v[wo] += gy.v[so] * x.v[bo]; });
  else
    for_each_product(x.sizes, gy.sizes, w_sizes, s, [&](int64_t so, int64_t bo, int64_t wo) { gw.v[wo] += x.v[so] * gy.v[bo]; });
  return gw;
}

}  // namespace ref
