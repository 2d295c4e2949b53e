#include "reference/ref_array.h"

#include <sstream>
#include <stdexcept>

namespace ref {

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_to_string(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Array::Array(Shape s, double fill) : sizes(std::move(s)), v(static_cast<size_t>(numel_of(sizes)), fill) {}

int64_t Array::offset(const Shape& idx) const {
  int64_t off = 0;
  for (size_t d = 0; d < sizes.size(); ++d) off = off * sizes[d] + idx[d];
  return off;
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  int64_t n = ndim == 0 ? 1 : ndim;
  if (dim < -n || dim >= n) throw std::out_of_range("ref::wrap_dim");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) throw std::invalid_argument("ref::broadcast_shapes");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

double at_broadcast(const Array& a, const Shape& out_idx) {
  size_t lead = out_idx.size() - a.sizes.size();
  int64_t off = 0;
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    int64_t i = a.sizes[d] == 1 ? 0 : out_idx[lead + d];
    off = off * a.sizes[d] + i;
  }
  return a.v[static_cast<size_t>(off)];
}

Array broadcast_to(const Array& a, const Shape& to) {
  Array out(to);
  int64_t k = 0;
  for_each_index(to, [&](const Shape& idx) { out.v[static_cast<size_t>(k++)] = at_broadcast(a, idx); });
  return out;
}

}  // namespace ref
