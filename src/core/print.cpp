// Tensor::str(): torch's repr layout (nested brackets, shared element width, int / fixed /
// scientific float modes, summarised above 1000 elements, dtype and device suffixes).
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/util.h"

namespace anvil {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  enum class Mode { Bool, Int, FloatInt, Fixed, Sci, Complex } mode = Mode::Fixed;
  size_t width = 0;

  std::string raw(double v, double im = 0) const {
    char buf[64];
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::Bool: return v != 0 ? "True" : "False";
      case Mode::Int: std::snprintf(buf, sizeof buf, "%.0f", v); return buf;
      case Mode::FloatInt: std::snprintf(buf, sizeof buf, "%.0f.", v); return buf;
      case Mode::Sci: std::snprintf(buf, sizeof buf, "%.4e", v); return buf;
      case Mode::Complex: std::snprintf(buf, sizeof buf, "%.4f%+.4fj", v, im); return buf;
      default: std::snprintf(buf, sizeof buf, "%.4f", v); return buf;
    }
  }
};

struct Printer {
  const std::vector<double>& re;
  const std::vector<double>& im;
  const std::vector<int64_t>& ints;
  bool use_ints;
  Shape sizes;
  Shape strides;
  bool summarize;
  Formatter fmt;

  std::string elem(int64_t i) const {
    std::string s = use_ints ? std::to_string(ints[i]) : fmt.raw(re[i], im.empty() ? 0 : im[i]);
    if (s.size() < fmt.width) s = std::string(fmt.width - s.size(), ' ') + s;
    return s;
  }

  void print(std::ostream& os, int64_t dim, int64_t base, int indent) const {
    int64_t n = sizes[dim];
    os << "[";
    bool last = dim + 1 == static_cast<int64_t>(sizes.size());
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << (last ? " ..., " : "...,");
        if (!last) os << "\n" << std::string(indent + 1, ' ');
        i = n - kEdgeItems - 1;
        continue;
      }
      if (last) {
        os << elem(base + i * strides[dim]);
        if (i + 1 < n) os << ", ";
      } else {
        print(os, dim + 1, base + i * strides[dim], indent + 1);
        if (i + 1 < n) os << "," << std::string(sizes.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
      }
    }
    os << "]";
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Tensor host = to(kCPU).contiguous();
  int64_t n = host.numel();
  std::vector<double> re, im;
  std::vector<int64_t> ints;
  bool use_ints = is_integral(dtype_) && dtype_ != kUInt64;
  re.resize(n);
  if (use_ints) ints.resize(n);
  if (is_complex(dtype_)) im.resize(n);
  dispatch_all_types(dtype_, "[print]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(host.raw_data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (is_complex_v<T>) {
        re[i] = p[i].re;
        im[i] = p[i].im;
      } else {
        re[i] = convert<double>(p[i]);
        if (!ints.empty()) ints[i] = convert<int64_t>(p[i]);
      }
    }
  });
  Formatter fmt;
  bool summarize = n > kSummarizeAbove;
  if (dtype_ == kBool) {
    fmt.mode = Formatter::Mode::Bool;
  } else if (is_integral(dtype_)) {
    fmt.mode = Formatter::Mode::Int;
  } else if (is_complex(dtype_)) {
    fmt.mode = Formatter::Mode::Complex;
  } else {
    bool all_int = true;
    double amax = 0, amin = INFINITY;
    for (double v : re) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) all_int = false;
      double a = std::fabs(v);
      amax = std::max(amax, a);
      if (a != 0) amin = std::min(amin, a);
    }
    if (all_int) fmt.mode = amax > 1e8 ? Formatter::Mode::Sci : Formatter::Mode::FloatInt;
    else if (amax > 1e8 || (amin < 1e-4) || (amin != INFINITY && amax / amin > 1000)) fmt.mode = Formatter::Mode::Sci;
    else fmt.mode = Formatter::Mode::Fixed;
  }
  for (int64_t i = 0; i < n; ++i) {
    std::string s = use_ints ? std::to_string(ints[i]) : fmt.raw(re[i], im.empty() ? 0 : im[i]);
    fmt.width = std::max(fmt.width, s.size());
  }
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    Printer pr{re, im, ints, use_ints, {}, {}, false, fmt};
    pr.fmt.width = 0;
    os << pr.elem(0);
  } else if (n == 0) {
    os << "[]";
  } else {
    Printer pr{re, im, ints, use_ints, host.sizes(), host.strides(), summarize, fmt};
    pr.print(os, 0, 0, 7);
  }
  if (device().is_cuda()) os << ", device='" << device().str() << "'";
  if (n == 0 && dim() > 1) os << ", size=(" << shape_str(sizes_).substr(1, shape_str(sizes_).size() - 2) << ")";
  if (dtype_ != kFloat32 && dtype_ != kInt64 && dtype_ != kBool) os << ", dtype=torch." << dtype_name(dtype_);
  os << ")";
  return os.str();
}

}  // namespace anvil
