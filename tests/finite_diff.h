#pragma once
// Small helpers of the loss and norm tests: a reference array from values, and central
// finite differences of a float64 function.
#include <utility>
#include <vector>

#include "reference/ref_array.h"

namespace th {

inline ref::Array array_of(ref::Shape s, std::vector<double> v) {
  ref::Array a(std::move(s));
  a.v = std::move(v);
  return a;
}

// d f / d v_i by central differences with step 1e-6.
template <typename F>
std::vector<double> central_differences(const std::vector<double>& v, F&& f) {
  std::vector<double> d(v.size());
  const double h = 1e-6;
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<double> p = v, m = v;
    p[i] += h;
    m[i] -= h;
    d[i] = (f(p) - f(m)) / (2 * h);
  }
  return d;
}

}  // namespace th
