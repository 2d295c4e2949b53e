#include "harness.h"

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace th {

using anvil::kCPU;

// ---- devices -----------------------------------------------------------------------------
void DeviceTest::SetUp() {
  if (GetParam().is_cuda() && !anvil::cuda::is_available())
    GTEST_SKIP() << "CUDA not available: " << anvil::cuda::unavailable_reason();
}

std::string source_dir() {
  const char* env = std::getenv("ANVIL_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(ANVIL_SOURCE_DIR);
}

std::string device_param_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cuda() ? "cuda" : "cpu";
}

// ---- dtypes --------------------------------------------------------------------------------
double unit_roundoff(DType t) {
  switch (t) {
    case anvil::kFloat32: return std::ldexp(1.0, -24);
    case anvil::kFloat64: return std::ldexp(1.0, -53);
    case anvil::kFloat16: return std::ldexp(1.0, -11);
    case anvil::kBFloat16: return std::ldexp(1.0, -8);
    case anvil::kFloat8_e4m3fn: return std::ldexp(1.0, -4);
    case anvil::kFloat8_e5m2: return std::ldexp(1.0, -3);
    case anvil::kComplex64: return std::ldexp(1.0, -24);
    default: return 0.0;
  }
}

DType compute_dtype(DType t) {
  if (anvil::is_reduced_float(t)) return anvil::kFloat32;
  return t;
}

std::string dtype_str(DType t) { return anvil::dtype_name(t); }

// ---- element bytes ---------------------------------------------------------------------------
namespace {
bool is_small_float(DType t) {
  return t == anvil::kFloat16 || t == anvil::kBFloat16 || t == anvil::kFloat8_e4m3fn || t == anvil::kFloat8_e5m2;
}
template <typename T>
void put(void* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T get(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

void store_element(void* p, DType t, double v) {
  switch (t) {
    case anvil::kBool: put<uint8_t>(p, v != 0.0 ? 1 : 0); break;
    case anvil::kUInt8: put<uint8_t>(p, static_cast<uint8_t>(static_cast<int64_t>(v))); break;
    case anvil::kInt8: put<int8_t>(p, static_cast<int8_t>(static_cast<int64_t>(v))); break;
    case anvil::kUInt16: put<uint16_t>(p, static_cast<uint16_t>(static_cast<int64_t>(v))); break;
    case anvil::kInt16: put<int16_t>(p, static_cast<int16_t>(static_cast<int64_t>(v))); break;
    case anvil::kUInt32: put<uint32_t>(p, static_cast<uint32_t>(static_cast<int64_t>(v))); break;
    case anvil::kInt32: put<int32_t>(p, static_cast<int32_t>(static_cast<int64_t>(v))); break;
    case anvil::kUInt64:
      put<uint64_t>(p, v >= 9223372036854775808.0 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(static_cast<int64_t>(v)));
      break;
    case anvil::kInt64: put<int64_t>(p, static_cast<int64_t>(v)); break;
    case anvil::kFloat32: put<float>(p, static_cast<float>(v)); break;
    case anvil::kFloat64: put<double>(p, v); break;
    case anvil::kComplex64: {
      float c[2] = {static_cast<float>(v), 0.f};
      std::memcpy(p, c, 8);
      break;
    }
    case anvil::kFloat16:
    case anvil::kBFloat16: put<uint16_t>(p, static_cast<uint16_t>(ref::encode(fmt_of(t), v))); break;
    case anvil::kFloat8_e4m3fn:
    case anvil::kFloat8_e5m2: put<uint8_t>(p, static_cast<uint8_t>(ref::encode(fmt_of(t), v))); break;
  }
}

double load_element(const void* p, DType t) {
  switch (t) {
    case anvil::kBool: return get<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case anvil::kUInt8: return get<uint8_t>(p);
    case anvil::kInt8: return get<int8_t>(p);
    case anvil::kUInt16: return get<uint16_t>(p);
    case anvil::kInt16: return get<int16_t>(p);
    case anvil::kUInt32: return get<uint32_t>(p);
    case anvil::kInt32: return get<int32_t>(p);
    case anvil::kUInt64: return static_cast<double>(get<uint64_t>(p));
    case anvil::kInt64: return static_cast<double>(get<int64_t>(p));
    case anvil::kFloat32: return get<float>(p);
    case anvil::kFloat64: return get<double>(p);
    case anvil::kComplex64: return get<float>(p);
    case anvil::kFloat16:
    case anvil::kBFloat16: return ref::decode(fmt_of(t), get<uint16_t>(p));
    case anvil::kFloat8_e4m3fn:
    case anvil::kFloat8_e5m2: return ref::decode(fmt_of(t), get<uint8_t>(p));
  }
  return 0.0;
}

uint64_t load_bits(const void* p, DType t) {
  uint64_t b = 0;
  std::memcpy(&b, p, anvil::element_size(t));  // little-endian: low bytes first
  return b;
}

double round_to_dtype(double v, DType t) {
  if (std::isnan(v) && !anvil::is_floating_point(t) && !anvil::is_complex(t)) return 0.0;
  switch (t) {
    case anvil::kBool: return v != 0.0 ? 1.0 : 0.0;
    case anvil::kFloat32:
    case anvil::kComplex64: return static_cast<float>(v);
    case anvil::kFloat64: return v;
    default: break;
  }
  if (is_small_float(t)) return ref::decode(fmt_of(t), ref::encode(fmt_of(t), v));
  return std::trunc(v);
}

anvil::Scalar scalar_for(DType t, double v) {
  if (t == anvil::kBool) return anvil::Scalar(v != 0.0);
  if (anvil::is_floating_point(t) || anvil::is_complex(t)) return anvil::Scalar(v);
  if (t == anvil::kUInt64 && v >= 9223372036854775808.0) return anvil::Scalar(static_cast<uint64_t>(v));
  return anvil::Scalar(static_cast<int64_t>(v));
}

// ---- seeded values ---------------------------------------------------------------------------
uint64_t Gen::next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Gen::uniform(double lo, double hi) {
  double u = static_cast<double>(next() >> 11) * std::ldexp(1.0, -53);
  return lo + (hi - lo) * u;
}

int64_t Gen::randint(int64_t lo, int64_t hi) {
  uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1u;
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + (range == 0 ? next() : next() % range));
}

namespace {
void int_range(DType t, double& lo, double& hi) {
  double tmin = 0, tmax = 0;
  switch (t) {
    case anvil::kUInt8: tmin = 0; tmax = 255; break;
    case anvil::kInt8: tmin = -128; tmax = 127; break;
    case anvil::kUInt16: tmin = 0; tmax = 65535; break;
    case anvil::kInt16: tmin = -32768; tmax = 32767; break;
    case anvil::kUInt32: tmin = 0; tmax = 4294967295.0; break;
    case anvil::kInt32: tmin = -2147483648.0; tmax = 2147483647.0; break;
    case anvil::kUInt64: tmin = 0; tmax = 9007199254740992.0; break;  // 2^53: exact in double
    default: tmin = -9007199254740992.0; tmax = 9007199254740992.0; break;
  }
  lo = std::max(lo, tmin);
  hi = std::min(hi, tmax);
}
}  // namespace

ref::Array random_array(const Shape& sizes, DType t, Gen& g, double lo, double hi) {
  ref::Array a(sizes);
  if (t == anvil::kBool) {
    for (double& v : a.v) v = static_cast<double>(g.next() & 1u);
  } else if (anvil::is_integral(t)) {
    int_range(t, lo, hi);
    for (double& v : a.v) v = static_cast<double>(g.randint(static_cast<int64_t>(std::ceil(lo)), static_cast<int64_t>(std::floor(hi))));
  } else {
    for (double& v : a.v) v = round_to_dtype(g.uniform(lo, hi), t);
  }
  return a;
}

ref::Array dyadic_array(const Shape& sizes, Gen& g, int max_abs) {
  ref::Array a(sizes);
  for (double& v : a.v) v = static_cast<double>(g.randint(-8 * max_abs, 8 * max_abs)) / 8.0;
  return a;
}

// ---- layouts ---------------------------------------------------------------------------------
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Strided: return "strided";
    case Layout::Offset: return "offset";
    case Layout::Broadcast: return "broadcast";
    case Layout::RowPadded: return "row-padded";
  }
  return "?";
}

namespace {
double poison_value(DType t) {
  if (anvil::is_floating_point(t) || anvil::is_complex(t)) return std::numeric_limits<double>::quiet_NaN();
  switch (t) {
    case anvil::kBool: return 1.0;
    case anvil::kUInt8: return 251.0;
    case anvil::kInt8: return -111.0;
    case anvil::kUInt16: return 65521.0;
    case anvil::kInt16: return -32111.0;
    case anvil::kUInt32: return 4294967291.0;
    case anvil::kInt32: return -2147483611.0;
    default: return -1234567890123.0;
  }
}

Layout effective_layout(const Shape& sizes, Layout l) {
  if (sizes.empty() && l != Layout::Offset) return Layout::Contiguous;
  if (sizes.size() == 1 && l == Layout::Transposed) return Layout::Strided;
  return l;
}
}  // namespace

Tensor make_tensor(const ref::Array& a, DType t, Device dev, Layout l) {
  const Shape& sizes = a.sizes;
  const int64_t nd = static_cast<int64_t>(sizes.size());
  l = effective_layout(sizes, l);
  Shape base_sizes = sizes;
  switch (l) {
    case Layout::Transposed: base_sizes.assign(sizes.rbegin(), sizes.rend()); break;
    case Layout::Strided: base_sizes.back() = 2 * sizes.back() + 1; break;
    case Layout::Offset: base_sizes = {a.numel() + 1}; break;
    case Layout::Broadcast: base_sizes[0] = 1; break;
    case Layout::RowPadded: base_sizes.back() = sizes.back() + 3; break;
    default: break;
  }
  Tensor base = anvil::empty(base_sizes, anvil::TensorOptions(t));
  const int64_t es = static_cast<int64_t>(anvil::element_size(t));
  char* p = static_cast<char*>(base.data_ptr());
  const int64_t base_n = ref::numel_of(base_sizes);
  const double poison = poison_value(t);
  for (int64_t i = 0; i < base_n; ++i) store_element(p + i * es, t, poison);
  ref::Array base_index(base_sizes);  // only for offset arithmetic
  int64_t k = 0;
  ref::for_each_index(sizes, [&](const Shape& idx) {
    int64_t off = 0;
    switch (l) {
      case Layout::Contiguous: off = k; break;
      case Layout::Transposed: off = base_index.offset(Shape(idx.rbegin(), idx.rend())); break;
      case Layout::Strided: {
        Shape b = idx;
        b.back() = 1 + 2 * idx.back();
        off = base_index.offset(b);
        break;
      }
      case Layout::Offset: off = 1 + k; break;
      case Layout::Broadcast: {
        Shape b = idx;
        b[0] = 0;
        off = base_index.offset(b);
        break;
      }
      case Layout::RowPadded: {
        Shape b = idx;
        b.back() = 1 + idx.back();
        off = base_index.offset(b);
        break;
      }
    }
    store_element(p + off * es, t, a.v[static_cast<size_t>(k)]);
    ++k;
  });
  if (dev.is_cuda()) base = base.to(dev);
  switch (l) {
    case Layout::Contiguous: return base;
    case Layout::Transposed: {
      Shape perm;
      for (int64_t d = nd - 1; d >= 0; --d) perm.push_back(d);
      return base.permute(perm);
    }
    case Layout::Strided: return base.slice(nd - 1, 1, base_sizes.back(), 2);
    case Layout::Offset: return base.slice(0, 1, a.numel() + 1).view(sizes);
    case Layout::Broadcast: return base.expand(sizes);
    case Layout::RowPadded: return base.slice(nd - 1, 1, 1 + sizes.back());
  }
  return base;
}

Input make_input(const Shape& sizes, DType t, Device dev, Layout l, Gen& g, double lo, double hi) {
  Input in;
  if (effective_layout(sizes, l) == Layout::Broadcast) {
    Shape b = sizes;
    b[0] = 1;
    in.a = ref::broadcast_to(random_array(b, t, g, lo, hi), sizes);
  } else {
    in.a = random_array(sizes, t, g, lo, hi);
  }
  in.t = make_tensor(in.a, t, dev, l);
  return in;
}

Input make_dyadic_input(const Shape& sizes, DType t, Device dev, Layout l, Gen& g, int max_abs) {
  Input in;
  if (effective_layout(sizes, l) == Layout::Broadcast) {
    Shape b = sizes;
    b[0] = 1;
    in.a = ref::broadcast_to(dyadic_array(b, g, max_abs), sizes);
  } else {
    in.a = dyadic_array(sizes, g, max_abs);
  }
  for (double& v : in.a.v) v = round_to_dtype(v, t);
  in.t = make_tensor(in.a, t, dev, l);
  return in;
}

Tensor make_index(const ref::Array& a, Device dev, Layout l, DType t) { return make_tensor(a, t, dev, l); }

// ---- reading back ---------------------------------------------------------------------------
Tensor to_cpu(const Tensor& t) { return t.is_cuda() ? t.to(Device(kCPU)) : t; }

namespace {
template <typename F>
void for_each_element(const Tensor& t0, F&& f) {
  Tensor t = to_cpu(t0);
  if (t.numel() == 0) return;
  const char* base = static_cast<const char*>(t.data_ptr());
  const int64_t es = static_cast<int64_t>(t.element_size());
  const Shape& st = t.strides();
  ref::for_each_index(t.sizes(), [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
    f(base + off * es);
  });
}
}  // namespace

ref::Array to_array(const Tensor& t) {
  ref::Array a(t.sizes());
  size_t k = 0;
  DType dt = t.dtype();
  for_each_element(t, [&](const char* p) { a.v[k++] = load_element(p, dt); });
  return a;
}

ref::Array to_array_imag(const Tensor& t) {
  ref::Array a(t.sizes());
  size_t k = 0;
  for_each_element(t, [&](const char* p) {
    float im;
    std::memcpy(&im, p + 4, 4);
    a.v[k++] = im;
  });
  return a;
}

std::vector<uint64_t> to_bits(const Tensor& t) {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(t.numel()));
  DType dt = t.dtype();
  for_each_element(t, [&](const char* p) { out.push_back(load_bits(p, dt)); });
  return out;
}

// ---- comparisons ----------------------------------------------------------------------------
Tol elementwise_tol(DType out, int k_ulps, double scale) {
  double uo = unit_roundoff(out), uc = unit_roundoff(compute_dtype(out));
  return Tol{2.0 * k_ulps * uc * scale, 2.0 * (uo + k_ulps * uc)};
}

ref::Array sum_tol(DType out, int64_t n, const ref::Array& abs_sum) {
  double uc = unit_roundoff(compute_dtype(out));
  ref::Array e(abs_sum.sizes);
  for (size_t i = 0; i < e.v.size(); ++i) e.v[i] = 4.0 * uc * (std::sqrt(static_cast<double>(n)) + 1.0) * abs_sum.v[i];
  return e;
}

namespace {
std::string idx_str(const Shape& sizes, int64_t flat) {
  Shape idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = flat % sizes[static_cast<size_t>(d)];
    flat /= sizes[static_cast<size_t>(d)];
  }
  return ref::shape_to_string(idx);
}
}  // namespace

::testing::AssertionResult expect_close(const Tensor& got, const ref::Array& want, Tol tol, const ref::Array* extra) {
  if (got.sizes() != want.sizes)
    return ::testing::AssertionFailure() << "shape " << ref::shape_to_string(got.sizes()) << " != expected "
                                         << ref::shape_to_string(want.sizes);
  ref::Array g = to_array(got);
  int bad = 0;
  int64_t first_bad = -1;
  std::ostringstream os;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double x = g.v[static_cast<size_t>(i)], w = want.v[static_cast<size_t>(i)];
    bool ok;
    if (std::isnan(w) || std::isnan(x)) {
      ok = std::isnan(w) && std::isnan(x);
    } else if (std::isinf(w) || std::isinf(x)) {
      ok = x == w;
    } else {
      double t = tol.atol + tol.rtol * std::fabs(w) + (extra ? extra->v[static_cast<size_t>(i)] : 0.0);
      ok = std::fabs(x - w) <= t;
    }
    if (!ok) {
      if (bad < 5) {
        double t = tol.atol + tol.rtol * std::fabs(w) + (extra ? extra->v[static_cast<size_t>(i)] : 0.0);
        os.precision(17);
        os << "\n  at " << idx_str(want.sizes, i) << ": got " << x << ", expected " << w << " (tol " << t << ")";
      }
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << g.numel() << " elements differ" << os.str();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult expect_equal(const Tensor& got, const ref::Array& want) {
  return expect_close(got, want, Tol{0.0, 0.0});
}

::testing::AssertionResult expect_shape(const Tensor& got, const Shape& sizes, DType t) {
  if (got.sizes() != sizes)
    return ::testing::AssertionFailure() << "shape " << ref::shape_to_string(got.sizes()) << " != expected "
                                         << ref::shape_to_string(sizes);
  if (got.dtype() != t)
    return ::testing::AssertionFailure() << "dtype " << anvil::dtype_name(got.dtype()) << " != expected "
                                         << anvil::dtype_name(t);
  return ::testing::AssertionSuccess();
}

// ---- guard bytes ----------------------------------------------------------------------------
Guarded make_guarded(const Shape& sizes, DType t, Device dev, Layout l, uint8_t sentinel) {
  const int64_t n = ref::numel_of(sizes);
  const int64_t guard = l == Layout::Offset ? 17 : 16;  // elements before and after
  Guarded g;
  g.elem_size = static_cast<int64_t>(anvil::element_size(t));
  int64_t body = n;
  Shape inner = sizes;
  if (l == Layout::Strided && !sizes.empty()) {
    inner.back() = 2 * sizes.back() + 1;
    body = ref::numel_of(inner);
  }
  Tensor buf = anvil::empty({guard + body + guard}, anvil::TensorOptions(t));
  std::memset(buf.data_ptr(), sentinel, static_cast<size_t>((guard + body + guard) * g.elem_size));
  if (dev.is_cuda()) buf = buf.to(dev);
  g.buffer = buf;
  Tensor region = buf.slice(0, guard, guard + body);
  if (l == Layout::Strided && !sizes.empty()) {
    g.view = region.view(inner).slice(static_cast<int64_t>(sizes.size()) - 1, 1, inner.back(), 2);
  } else {
    g.view = region.view(sizes);
  }
  return g;
}

::testing::AssertionResult guards_intact(const Guarded& g, uint8_t sentinel) {
  Tensor buf = to_cpu(g.buffer);
  const int64_t total = buf.numel() * g.elem_size;
  std::vector<bool> covered(static_cast<size_t>(total), false);
  const int64_t base = g.view.storage_offset() - g.buffer.storage_offset();
  ref::for_each_index(g.view.sizes(), [&](const Shape& idx) {
    int64_t off = base;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * g.view.strides()[d];
    for (int64_t b = 0; b < g.elem_size; ++b) covered[static_cast<size_t>(off * g.elem_size + b)] = true;
  });
  const uint8_t* bytes = static_cast<const uint8_t*>(buf.data_ptr());
  int bad = 0;
  std::ostringstream os;
  for (int64_t i = 0; i < total; ++i) {
    if (covered[static_cast<size_t>(i)]) continue;
    if (bytes[i] != sentinel) {
      if (bad < 5) os << "\n  guard byte " << i << " = 0x" << std::hex << int(bytes[i]) << std::dec;
      ++bad;
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " guard bytes overwritten" << os.str();
  return ::testing::AssertionSuccess();
}

// ---- inputs unchanged -------------------------------------------------------------------------
std::vector<uint64_t> storage_bits(const Tensor& t) {
  const int64_t es = static_cast<int64_t>(t.element_size());
  const int64_t n = static_cast<int64_t>(t.storage()->nbytes) / es;
  return to_bits(t.as_strided({n}, {1}, 0));
}

::testing::AssertionResult storage_unchanged(const Tensor& t, const std::vector<uint64_t>& before) {
  std::vector<uint64_t> now = storage_bits(t);
  if (now.size() != before.size()) return ::testing::AssertionFailure() << "storage size changed";
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] == before[i]) continue;
    if (bad < 5) os << "\n  storage slot " << i << ": 0x" << std::hex << before[i] << " -> 0x" << now[i] << std::dec;
    ++bad;
  }
  if (bad) return ::testing::AssertionFailure() << bad << " input storage slots modified" << os.str();
  return ::testing::AssertionSuccess();
}

double underflow_atol(DType out) {
  const double half_subnormal = out == anvil::kFloat16 ? std::ldexp(1.0, -25) : 0.0;
  const double min_normal = compute_dtype(out) == anvil::kFloat64 ? std::ldexp(1.0, -1022) : std::ldexp(1.0, -126);
  return std::max(half_subnormal, min_normal);
}

// ---- case tables ------------------------------------------------------------------------------
const std::vector<Shape>& table_shapes() {
  // 0-dim last: a failure there should not hide the others.
  static const std::vector<Shape> v = {{0},     {1},        {7},          {33},      {1023},  {65535},
                                       {65536}, {65537},    {70000},      {3, 0},    {0, 5},  {7, 33},
                                       {33, 7, 3}, {2, 3, 5, 7}, {2, 65537}, {}};
  return v;
}

const std::vector<Shape>& small_shapes() {
  static const std::vector<Shape> v = {{0}, {1}, {7}, {33}, {1023}, {3, 0}, {7, 33}, {33, 7, 3}, {65537}, {}};
  return v;
}

int CaseLoop::failure_count() {
  const ::testing::TestResult* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int n = 0;
  for (int i = 0; i < r->total_part_count(); ++i)
    if (r->GetTestPartResult(i).failed()) ++n;
  return n;
}

std::string case_name(const Shape& s, DType t, Layout l, Device d) {
  std::ostringstream os;
  os << anvil::dtype_name(t) << " " << ref::shape_to_string(s) << " " << layout_name(l) << " " << (d.is_cuda() ? "cuda" : "cpu");
  return os.str();
}

}  // namespace th

namespace th {

bool trace_cases() {
  static const bool on = [] {
    const char* env = std::getenv("ANVIL_TEST_TRACE");
    return env && *env;
  }();
  return on;
}

namespace {
// With ANVIL_TEST_ARTIFACTS set, the allocator's history of a memory check goes to
// $ANVIL_TEST_ARTIFACTS/<test>.memory.txt, one event per line: kind (a alloc, f free,
// s segment taken, r segment released), bytes, address, stream; returns where it went.
std::string write_memory_history(Device dev, const ::testing::TestInfo* test) {
  const char* dir = std::getenv("ANVIL_TEST_ARTIFACTS");
  if (!dir || !*dir || !test) return "";
  std::string name = std::string(test->test_suite_name()) + "." + test->name();
  for (char& c : name)
    if (c == '/') c = '_';
  const std::string path = std::string(dir) + "/" + name + ".memory.txt";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return "; could not write " + path;
  for (const anvil::MemoryEvent& e : anvil::memory_history(dev))
    std::fprintf(f, "%c %lld %llx %llx\n", "afsr"[static_cast<int>(e.kind)], static_cast<long long>(e.bytes),
                 static_cast<unsigned long long>(e.address), static_cast<unsigned long long>(e.stream));
  std::fclose(f);
  return "; allocator history in " + path;
}
}  // namespace

::testing::AssertionResult memory_stable(Device dev, const std::function<void()>& decode) {
  using namespace anvil;
  // Measured above what the process already holds (other tests' tensors and cached blocks).
  synchronize(dev);
  empty_cache(dev);
  reset_peak_memory_stats(dev);
  const MemoryStats base = memory_stats(dev);
  record_memory_history(dev, true, 4000000);
  decode();
  synchronize(dev);
  std::vector<int64_t> reserved;
  for (int rep = 1; rep <= 3; ++rep) {
    decode();
    synchronize(dev);
    reserved.push_back(memory_stats(dev).reserved_bytes);
  }
  record_memory_history(dev, false);
  const MemoryStats m = memory_stats(dev);
  const std::string history = write_memory_history(dev, ::testing::UnitTest::GetInstance()->current_test_info());
  const double grown = static_cast<double>(m.peak_reserved_bytes - base.reserved_bytes);
  const double used = static_cast<double>(m.peak_allocated_bytes - base.allocated_bytes);
  if (grown > 1.25 * used)
    return ::testing::AssertionFailure() << "reserved grew " << grown << " bytes for a peak of " << used
                                         << " allocated: " << memory_stats_str(dev) << history;
  if (reserved[1] > reserved[0] || reserved[2] > reserved[1])  // grows between decodes (giving back is fine)
    return ::testing::AssertionFailure() << "reserved after each decode " << reserved[0] << ", " << reserved[1] << ", "
                                         << reserved[2] << ": " << memory_stats_str(dev) << history;
  return ::testing::AssertionSuccess();
}

}  // namespace th
