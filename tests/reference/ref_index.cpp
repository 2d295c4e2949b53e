#include "reference/ref_index.h"

#include <stdexcept>

namespace ref {

namespace {
int64_t as_index(double v, int64_t size) {
  int64_t i = static_cast<int64_t>(v);
  if (i < 0 || i >= size) throw std::out_of_range("ref: index out of range");
  return i;
}
}  // namespace

Array index_select(const Array& x, int64_t dim, const Array& index) {
  int64_t d = wrap_dim(dim, x.dim());
  Shape out_sizes = x.sizes;
  if (x.dim() > 0) out_sizes[static_cast<size_t>(d)] = index.numel();
  Array out(out_sizes);
  int64_t k = 0;
  for_each_index(out_sizes, [&](const Shape& idx) {
    Shape src = idx;
    if (x.dim() > 0) src[static_cast<size_t>(d)] = as_index(index.v[static_cast<size_t>(idx[static_cast<size_t>(d)])], x.sizes[static_cast<size_t>(d)]);
    out.v[static_cast<size_t>(k++)] = x.at(src);
  });
  return out;
}

Array gather(const Array& x, int64_t dim, const Array& index) {
  int64_t d = wrap_dim(dim, x.dim());
  Array out(index.sizes);
  int64_t k = 0;
  for_each_index(index.sizes, [&](const Shape& idx) {
    Shape src = idx;
    if (x.dim() > 0) src[static_cast<size_t>(d)] = as_index(index.v[static_cast<size_t>(k)], x.sizes[static_cast<size_t>(d)]);
    out.v[static_cast<size_t>(k++)] = x.at(src);
  });
  return out;
}

namespace {
template <typename F>
Array scatter_impl(const Array& x, int64_t dim, const Array& index, F&& combine) {
  int64_t d = wrap_dim(dim, x.dim());
  Array out = x;
  int64_t k = 0;
  for_each_index(index.sizes, [&](const Shape& idx) {
    Shape dst = idx;
    if (x.dim() > 0) dst[static_cast<size_t>(d)] = as_index(index.v[static_cast<size_t>(k)], x.sizes[static_cast<size_t>(d)]);
    combine(out.at(dst), idx);
    ++k;
  });
  return out;
}
}  // namespace

Array scatter(const Array& x, int64_t dim, const Array& index, const Array& src) {
  return scatter_impl(x, dim, index, [&](double& o, const Shape& idx) { o = src.at(idx); });
}
Array scatter_value(const Array& x, int64_t dim, const Array& index, double value) {
  return scatter_impl(x, dim, index, [&](double& o, const Shape&) { o = value; });
}
Array scatter_add(const Array& x, int64_t dim, const Array& index, const Array& src) {
  return scatter_impl(x, dim, index, [&](double& o, const Shape& idx) { o += src.at(idx); });
}

Array masked_fill(const Array& x, const Array& mask, double value) {
  Array out(x.sizes);
  int64_t k = 0;
  for_each_index(x.sizes, [&](const Shape& idx) {
    double m = at_broadcast(mask, idx);
    out.v[static_cast<size_t>(k)] = m != 0.0 ? value : x.v[static_cast<size_t>(k)];
    ++k;
  });
  return out;
}

Array embedding(const Array& weight, const Array& indices) {
  int64_t rows = weight.sizes.at(0), cols = weight.sizes.at(1);
  Shape out_sizes = indices.sizes;
  out_sizes.push_back(cols);
  Array out(out_sizes);
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t r = as_index(indices.v[static_cast<size_t>(i)], rows);
    for (int64_t c = 0; c < cols; ++c) out.v[static_cast<size_t>(i * cols + c)] = weight.v[static_cast<size_t>(r * cols + c)];
  }
  return out;
}

}  // namespace ref
