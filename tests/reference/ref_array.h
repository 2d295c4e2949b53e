#pragma once
// Loop-only float64 reference arrays: a row-major buffer of doubles with a shape. Nothing here
// (or anywhere in tests/reference/) calls an anvil op; these are the oracles the suite trusts.
#include <cstdint>
#include <string>
#include <vector>

namespace ref {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
std::string shape_to_string(const Shape& s);

struct Array {
  Shape sizes;
  std::vector<double> v;  // row-major, numel_of(sizes) values

  Array() = default;
  explicit Array(Shape s, double fill = 0.0);
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t offset(const Shape& idx) const;  // row-major offset of a full multi-index
  double& at(const Shape& idx) { return v[static_cast<size_t>(offset(idx))]; }
  double at(const Shape& idx) const { return v[static_cast<size_t>(offset(idx))]; }
};

// Calls f(idx) for every multi-index of `sizes`, last dim fastest. Nothing for empty shapes;
// once (with an empty index) for 0-dim.
template <typename F>
void for_each_index(const Shape& sizes, F&& f) {
  for (int64_t s : sizes)
    if (s == 0) return;
  Shape idx(sizes.size(), 0);
  while (true) {
    f(static_cast<const Shape&>(idx));
    int64_t d = static_cast<int64_t>(sizes.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < sizes[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) return;
  }
}

int64_t wrap_dim(int64_t dim, int64_t ndim);
// NumPy/PyTorch broadcasting of two shapes (throws std::invalid_argument if incompatible).
Shape broadcast_shapes(const Shape& a, const Shape& b);
// The value of `a` broadcast to an output multi-index of equal or larger rank.
double at_broadcast(const Array& a, const Shape& out_idx);
// `a` materialised at the broadcast shape `to`.
Array broadcast_to(const Array& a, const Shape& to);

}  // namespace ref
