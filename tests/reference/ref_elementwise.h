#pragma once
// Elementwise references in float64 with PyTorch's broadcasting.
#include <functional>

#include "reference/ref_array.h"

namespace ref {

Array map(const Array& x, const std::function<double(double)>& f);
// |x| elementwise: the scale of rounding-error bounds.
Array abs(const Array& x);
Array zip(const Array& a, const Array& b, const std::function<double(double, double)>& f);
Array zip3(const Array& a, const Array& b, const Array& c, const std::function<double(double, double, double)>& f);

// Scalar functions with PyTorch's definitions, evaluated in double.
double sigmoid(double x);
double silu(double x);
double gelu(double x);       // 0.5 x (1 + erf(x / sqrt 2))
double gelu_tanh(double x);  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
double rsqrt(double x);
double maximum(double a, double b);  // NaN propagates
double minimum(double a, double b);
double clamp(double x, bool has_lo, double lo, bool has_hi, double hi);  // NaN propagates
double div_trunc(double a, double b);
double div_floor(double a, double b);  // Python's floor division for floats and ints

}  // namespace ref
