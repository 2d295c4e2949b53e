#include "reference/ref_elementwise.h"

#include <cmath>

namespace ref {

Array map(const Array& x, const std::function<double(double)>& f) {
  Array out(x.sizes);
  for (size_t i = 0; i < x.v.size(); ++i) out.v[i] = f(x.v[i]);
  return out;
}

Array zip(const Array& a, const Array& b, const std::function<double(double, double)>& f) {
  Array out(broadcast_shapes(a.sizes, b.sizes));
  int64_t k = 0;
  for_each_index(out.sizes, [&](const Shape& idx) {
    out.v[static_cast<size_t>(k++)] = f(at_broadcast(a, idx), at_broadcast(b, idx));
  });
  return out;
}

Array zip3(const Array& a, const Array& b, const Array& c, const std::function<double(double, double, double)>& f) {
  Array out(broadcast_shapes(broadcast_shapes(a.sizes, b.sizes), c.sizes));
  int64_t k = 0;
  for_each_index(out.sizes, [&](const Shape& idx) {
    out.v[static_cast<size_t>(k++)] = f(at_broadcast(a, idx), at_broadcast(b, idx), at_broadcast(c, idx));
  });
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double rsqrt(double x) { return 1.0 / std::sqrt(x); }

double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  return a > b ? a : b;
}
double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  return a < b ? a : b;
}

double clamp(double x, bool has_lo, double lo, bool has_hi, double hi) {
  if (std::isnan(x) || (has_lo && std::isnan(lo)) || (has_hi && std::isnan(hi))) return std::nan("");
  if (has_lo && x < lo) x = lo;
  if (has_hi && x > hi) x = hi;  // torch.clamp applies min then max: hi wins when lo > hi
  return x;
}

double div_trunc(double a, double b) { return std::trunc(a / b); }
double div_floor(double a, double b) { return std::floor(a / b); }

Array abs(const Array& x) { return map(x, [](double v) { return std::fabs(v); }); }

}  // namespace ref
