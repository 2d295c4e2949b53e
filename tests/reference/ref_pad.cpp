#include "reference/ref_pad.h"

#include <algorithm>
#include <stdexcept>

namespace ref {
namespace {

struct DimPads {
  Shape before, after;
};
DimPads dim_pads(size_t ndim, const Shape& pad) {
  DimPads p{Shape(ndim, 0), Shape(ndim, 0)};
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    p.before[ndim - 1 - i] = pad[2 * i];
    p.after[ndim - 1 - i] = pad[2 * i + 1];
  }
  return p;
}

// The input index output index j of a dim reads, -1 for the constant fill (not circular).
int64_t source(PadKind kind, int64_t j, int64_t before, int64_t size) {
  int64_t k = j - before;
  if (kind == PadKind::Constant) return k >= 0 && k < size ? k : -1;
  if (kind == PadKind::Replicate) return std::clamp<int64_t>(k, 0, size - 1);
  while (k < 0 || k >= size) {  // reflect: mirror at the edge elements until inside
    if (size == 1) return 0;
    if (k < 0) k = -k;
    if (k >= size) k = 2 * (size - 1) - k;
  }
  return k;
}

// PyTorch's _pad_circular: the cropped input copied into the middle, then each dim from the
// last one wraps by copying the output's own slices into its borders. src_of holds, for each
// output element, the flat input index it came from.
std::vector<int64_t> circular_sources(const Shape& in, const DimPads& p, const Shape& out) {
  const size_t nd = in.size();
  std::vector<int64_t> src(static_cast<size_t>(numel_of(out)), -1);
  Array in_index(in);
  for (int64_t i = 0; i < in_index.numel(); ++i) in_index.v[static_cast<size_t>(i)] = static_cast<double>(i);
  Array o(out, -1.0);
  for_each_index(out, [&](const Shape& j) {
    Shape k(nd);
    for (size_t d = 0; d < nd; ++d) {
      // The middle: output [max(b, 0), out - max(a, 0)) holds input [max(-b, 0), ...).
      const int64_t lo = std::max<int64_t>(p.before[d], 0), hi = out[d] - std::max<int64_t>(p.after[d], 0);
      if (j[d] < lo || j[d] >= hi) return;
      k[d] = j[d] - lo + std::max<int64_t>(-p.before[d], 0);
    }
    o.at(j) = in_index.at(k);
  });
  for (size_t dd = nd; dd-- > 0;) {
    const int64_t b = p.before[dd], a = p.after[dd], n = out[dd];
    const int64_t lo = std::max<int64_t>(b, 0), hi = n - std::max<int64_t>(a, 0);
    Array snapshot = o;
    for_each_index(out, [&](const Shape& j) {
      Shape from = j;
      if (b > 0 && j[dd] < b) from[dd] = hi - b + j[dd];                  // out[0:b] = out[hi-b : hi]
      else if (a > 0 && j[dd] >= n - a) from[dd] = lo + (j[dd] - (n - a));  // out[n-a:n] = out[lo : lo+a]
      else return;
      o.at(j) = snapshot.at(from);
    });
  }
  for (int64_t i = 0; i < o.numel(); ++i) src[static_cast<size_t>(i)] = static_cast<int64_t>(o.v[static_cast<size_t>(i)]);
  return src;
}

// For every output element (row-major), the flat input index it reads or -1.
std::vector<int64_t> sources(const Shape& in, const Shape& pad, PadKind kind, Shape& out) {
  const DimPads p = dim_pads(in.size(), pad);
  out = in;
  for (size_t d = 0; d < in.size(); ++d) {
    out[d] += p.before[d] + p.after[d];
    if (out[d] < 0) throw std::invalid_argument("ref::pad: negative output size");
  }
  if (kind == PadKind::Circular) return circular_sources(in, p, out);
  std::vector<int64_t> src;
  src.reserve(static_cast<size_t>(numel_of(out)));
  Array in_index(in);
  for (int64_t i = 0; i < in_index.numel(); ++i) in_index.v[static_cast<size_t>(i)] = static_cast<double>(i);
  for_each_index(out, [&](const Shape& j) {
    Shape k(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      k[d] = source(kind, j[d], p.before[d], in[d]);
      if (k[d] < 0) {
        src.push_back(-1);
        return;
      }
    }
    src.push_back(static_cast<int64_t>(in_index.at(k)));
  });
  return src;
}

}  // namespace

Array pad(const Array& x, const Shape& pad, PadKind kind, double value) {
  Shape out_sizes;
  const std::vector<int64_t> src = sources(x.sizes, pad, kind, out_sizes);
  Array out(out_sizes);
  for (size_t i = 0; i < src.size(); ++i) out.v[i] = src[i] < 0 ? value : x.v[static_cast<size_t>(src[i])];
  return out;
}

Array pad_backward(const Array& grad_output, const Shape& in_sizes, const Shape& pad, PadKind kind) {
  Shape out_sizes;
  const std::vector<int64_t> src = sources(in_sizes, pad, kind, out_sizes);
  if (out_sizes != grad_output.sizes) throw std::invalid_argument("ref::pad_backward: grad_output shape");
  Array grad(in_sizes);
  for (size_t i = 0; i < src.size(); ++i)
    if (src[i] >= 0) grad.v[static_cast<size_t>(src[i])] += grad_output.v[i];
  return grad;
}

}  // namespace ref
