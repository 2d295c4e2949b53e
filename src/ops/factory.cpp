// Factories: empty/zeros/ones/full, arange/linspace, seeded random, from_blob, cat/stack.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/random.h"
#include "core/philox.h"
#include "core/util.h"
#include "ops/iter.h"

namespace anvil {

Tensor empty(const Shape& sizes, TensorOptions opts) {
  for (int64_t s : sizes) ANVIL_CHECK(s >= 0, ShapeError, "[empty] negative dimension in size ", shape_str(sizes));
  int64_t n = shape_numel(sizes);
  auto storage = allocate_storage(opts.device_, static_cast<size_t>(n) * element_size(opts.dtype_));
  return Tensor(std::move(storage), sizes, contiguous_strides(sizes), 0, opts.dtype_);
}

Tensor empty(const Shape& sizes, TensorOptions opts, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return empty(sizes, opts);
  for (int64_t s : sizes) ANVIL_CHECK(s >= 0, ShapeError, "[empty] negative dimension in size ", shape_str(sizes));
  Shape strides = memory_format_strides(sizes, format, "[empty]");
  auto storage = allocate_storage(opts.device_, static_cast<size_t>(shape_numel(sizes)) * element_size(opts.dtype_));
  return Tensor(std::move(storage), sizes, std::move(strides), 0, opts.dtype_);
}

Tensor empty_strided(const Shape& sizes, const Shape& strides, TensorOptions opts) {
  ANVIL_CHECK(sizes.size() == strides.size(), ShapeError, "[empty_strided] sizes ", shape_str(sizes), " and strides ",
              shape_str(strides), " differ in length");
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ANVIL_CHECK(sizes[i] >= 0 && strides[i] >= 0, ShapeError, "[empty_strided] negative size or stride in ",
                shape_str(sizes), " / ", shape_str(strides));
    if (sizes[i] == 0) extent = 0;
  }
  if (extent != 0)
    for (size_t i = 0; i < sizes.size(); ++i) extent += (sizes[i] - 1) * strides[i];
  auto storage = allocate_storage(opts.device_, static_cast<size_t>(extent) * element_size(opts.dtype_));
  return Tensor(std::move(storage), sizes, strides, 0, opts.dtype_);
}

Tensor full(const Shape& sizes, const Scalar& value, TensorOptions opts) {
  Tensor t = empty(sizes, opts);
  t.fill_(value);
  return t;
}
Tensor zeros(const Shape& sizes, TensorOptions opts) { return full(sizes, 0, opts); }
Tensor ones(const Shape& sizes, TensorOptions opts) { return full(sizes, 1, opts); }
Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions opts) {
  const int64_t cols = m.value_or(n);
  ANVIL_CHECK(n >= 0, ValueError, "[eye] n must be greater or equal to 0, got ", n);
  ANVIL_CHECK(cols >= 0, ValueError, "[eye] m must be greater or equal to 0, got ", cols);
  Tensor out = zeros({n, cols}, opts);
  const int64_t diag = std::min(n, cols);
  if (diag > 0) out.as_strided({diag}, {cols + 1}, 0).fill_(1);
  return out;
}
Tensor eye(int64_t n, TensorOptions opts) { return eye(n, std::nullopt, opts); }
// The *_like factories keep t's layout (torch's default memory_format=preserve_format).
Tensor empty_like(const Tensor& t) { return empty_preserving(t, TensorOptions(t.dtype()).device(t.device())); }
Tensor empty_like(const Tensor& t, MemoryFormat format) {
  return empty(t.sizes(), TensorOptions(t.dtype()).device(t.device()), format);
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1); }
Tensor full_like(const Tensor& t, const Scalar& v) {
  Tensor out = empty_like(t);
  out.fill_(v);
  return out;
}

Tensor scalar_tensor(const Scalar& value, TensorOptions opts) { return full({}, value, opts); }

// Values are computed on the host in the dtype's compute type, then moved to the device.
Tensor arange(const Scalar& end, std::optional<TensorOptions> opts) { return arange(0, end, 1, opts); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<TensorOptions> opts) {
  bool integral = !start.is_floating_point() && !end.is_floating_point() && !step.is_floating_point() &&
                  !start.is_complex() && !end.is_complex() && !step.is_complex();
  TensorOptions o = opts.value_or(TensorOptions(integral ? kInt64 : kFloat32));
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  ANVIL_CHECK(st != 0, ShapeError, "[arange] step must be nonzero");
  ANVIL_CHECK(std::isfinite(s) && std::isfinite(e), ShapeError, "[arange] unsupported range: ", s, " -> ", e);
  ANVIL_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), ShapeError,
              "[arange] upper bound and larger bound inconsistent with step sign");
  int64_t n = static_cast<int64_t>(std::ceil((e - s) / st));
  Tensor host = empty({n}, TensorOptions(o.dtype_));
  dispatch_arith_types(o.dtype_, "[arange]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(host.raw_data_ptr());
    if constexpr (is_int_v<T>) {
      int64_t a = start.to_int64(), b = step.to_int64();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(a + i * b);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = convert<T>(s + static_cast<double>(i) * st);
    }
  });
  return host.to(o.device_);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  ANVIL_CHECK(steps >= 0, ShapeError, "[linspace] number of steps must be non-negative, got ", steps);
  Tensor host = empty({steps}, TensorOptions(opts.dtype_));
  dispatch_arith_types(opts.dtype_, "[linspace]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(host.raw_data_ptr());
    if constexpr (is_float_v<T>) {
      // PyTorch's symmetric form, in the compute type: both endpoints exact.
      using M = opmath_t<T>;
      M a = static_cast<M>(start), b = static_cast<M>(end);
      M step = steps > 1 ? (b - a) / static_cast<M>(steps - 1) : M(0);
      int64_t half = steps / 2;
      for (int64_t i = 0; i < steps; ++i)
        out[i] = steps == 1 ? T(a) : T(i < half ? a + step * static_cast<M>(i) : b - step * static_cast<M>(steps - 1 - i));
    } else {
      double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
      for (int64_t i = 0; i < steps; ++i) out[i] = convert<T>(start + step * static_cast<double>(i));
    }
  });
  return host.to(opts.device_);
}

// PyTorch's CPU logspace, operation for operation: start and end rounded to the dtype, their
// difference taken in it, the step in float64, powers in float64 (an integer output: of the base
// rounded to float, then truncated), the first half from start and the second from end.
Tensor logspace(double start, double end, int64_t steps, double base, TensorOptions opts) {
  ANVIL_CHECK(steps >= 0, ShapeError, "[logspace] number of steps must be non-negative, got ", steps);
  ANVIL_CHECK(!is_complex(opts.dtype_) && opts.dtype_ != kBool, DTypeError, "[logspace] not implemented for '",
              dtype_name(opts.dtype_), "'");
  Tensor host = empty({steps}, TensorOptions(opts.dtype_));
  dispatch_arith_types(opts.dtype_, "[logspace]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_complex_v<T>) {
      T* out = static_cast<T*>(host.raw_data_ptr());
      if (steps == 1) {
        out[0] = convert<T>(std::pow(base, start));
        return;
      }
      const int64_t half = steps / 2;
      if constexpr (is_float_v<T>) {
        const T a = convert<T>(start), b = convert<T>(end);
        T diff;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) diff = b - a;
        else diff = T(static_cast<float>(b) - static_cast<float>(a));  // c10's Half / BFloat16 operator-
        const double step = static_cast<double>(diff) / static_cast<double>(steps - 1);
        const double da = static_cast<double>(a), db = static_cast<double>(b);
        for (int64_t i = 0; i < steps; ++i)
          out[i] = T(std::pow(base, i < half ? da + step * static_cast<double>(i)
                                             : db - step * static_cast<double>(steps - i - 1)));
      } else {
        const T a = convert<T>(start), b = convert<T>(end);
        const double step = static_cast<double>(b - a) / static_cast<double>(steps - 1);
        const double fbase = static_cast<double>(static_cast<float>(base));
        for (int64_t i = 0; i < steps; ++i)
          out[i] = convert<T>(std::pow(fbase, i < half ? static_cast<double>(a) + step * static_cast<double>(i)
                                                       : static_cast<double>(b) - step * static_cast<double>(steps - i - 1)));
      }
    }
  });
  return host.to(opts.device_);
}

// ---- random: a global (seed, offset); each call takes numel counters.
namespace {
struct RngState {
  std::mutex mu;
  uint64_t seed = 0x853c49e6748fea9bULL;
  uint64_t offset = 0;
};
RngState& rng_state() {
  static RngState s;
  return s;
}
}  // namespace

PhiloxSlot philox_reserve(uint64_t counters) {
  auto& st = rng_state();
  std::lock_guard<std::mutex> lock(st.mu);
  const PhiloxSlot slot{st.seed, st.offset};
  st.offset += counters;
  return slot;
}

namespace {
Tensor random_tensor(const char* op, const Shape& sizes, TensorOptions opts, RandomKind kind, int64_t low, int64_t high) {
  Tensor out = empty(sizes, opts);
  RandomParams p;
  p.out = out.raw_data_ptr();
  p.dtype = opts.dtype_;
  p.numel = out.numel();
  p.kind = kind;
  p.low = low;
  p.high = high;
  const PhiloxSlot slot = philox_reserve(static_cast<uint64_t>(p.numel));
  p.seed = slot.seed;
  p.offset = slot.offset;
  if (p.numel > 0) ANVIL_KERNEL(opts.device_, random, p);
  return out;
}
}  // namespace

void manual_seed(uint64_t seed) {
  auto& st = rng_state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.seed = seed;
  st.offset = 0;
}

uint64_t rng_offset() {
  auto& st = rng_state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.offset;
}

void set_rng_offset(uint64_t offset) {
  auto& st = rng_state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.offset = offset;
}

Tensor rand(const Shape& sizes, TensorOptions opts) {
  ANVIL_CHECK(is_floating_point(opts.dtype_), DTypeError, "[rand] \"check_uniform_bounds\" not implemented for '",
              dtype_name(opts.dtype_), "'");
  return random_tensor("[rand]", sizes, opts, RandomKind::Uniform, 0, 1);
}

Tensor randn(const Shape& sizes, TensorOptions opts) {
  if (is_complex(opts.dtype_)) {
    // As PyTorch: real and imaginary parts each N(0, 1/2) (unit variance in all), drawn as one
    // float32 stream of (re, im) pairs.
    Shape pairs = sizes;
    pairs.push_back(2);
    const Tensor parts = mul(random_tensor("[randn]", pairs, TensorOptions(kFloat32).device(opts.device_),
                                           RandomKind::Normal, 0, 1),
                             std::sqrt(0.5));
    return Tensor(parts.storage(), sizes, contiguous_strides(sizes), 0, opts.dtype_);
  }
  ANVIL_CHECK(is_floating_point(opts.dtype_), DTypeError, "[randn] \"normal_kernel\" not implemented for '",
              dtype_name(opts.dtype_), "'");
  return random_tensor("[randn]", sizes, opts, RandomKind::Normal, 0, 1);
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions opts) {
  ANVIL_CHECK(low < high, ShapeError, "[randint] random_ expects 'from' to be less than 'to', but got from=", low,
              " >= to=", high);
  ANVIL_CHECK(!is_complex(opts.dtype_), DTypeError, "[randint] not implemented for '", dtype_name(opts.dtype_), "'");
  return random_tensor("[randint]", sizes, opts, RandomKind::Int, low, high);
}

Tensor from_blob(void* data, const Shape& sizes, DType dtype, std::function<void(void*)> deleter) {
  return from_blob(data, sizes, contiguous_strides(sizes), dtype, std::move(deleter));
}

Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype, std::function<void(void*)> deleter) {
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size() && i < strides.size(); ++i) extent += (sizes[i] - 1) * strides[i];
  if (shape_numel(sizes) == 0) extent = 0;
  auto storage = std::make_shared<StorageImpl>(data, static_cast<size_t>(extent) * element_size(dtype), Device(kCPU),
                                               std::move(deleter));
  return Tensor(std::move(storage), sizes, strides, 0, dtype);
}

// ---- cat / stack
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  ANVIL_CHECK(!tensors.empty(), ShapeError, "[cat] expected a non-empty list of Tensors");
  // Legacy rule kept by PyTorch: 1-D empty tensors are skipped.
  std::vector<const Tensor*> parts;
  for (const Tensor& t : tensors)
    if (!(t.dim() == 1 && t.numel() == 0)) parts.push_back(&t);
  if (parts.empty()) return tensors[0].clone();
  const Tensor& ref = *parts[0];
  ANVIL_CHECK(ref.dim() > 0, ShapeError, "[cat] zero-dimensional tensor (at position 0) cannot be concatenated");
  int64_t d = wrap_dim(dim, ref.dim(), "[cat]");
  DType out_dtype = ref.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    check_same_device("[cat]", ref, t);
    ANVIL_CHECK(t.dim() == ref.dim(), ShapeError, "[cat] Tensors must have same number of dimensions: got ", ref.dim(),
                " and ", t.dim());
    for (int64_t k = 0; k < t.dim(); ++k)
      ANVIL_CHECK(k == d || t.size(k) == ref.size(k), ShapeError, "[cat] Sizes of tensors must match except in dimension ",
                  d, ". Expected size ", ref.size(k), " but got size ", t.size(k), " for tensor number ", i, " in the list");
    if (t.dtype() != out_dtype) out_dtype = as_op("[cat]", [&] { return promote_types(out_dtype, t.dtype()); });
    total += t.size(d);
  }
  Shape s = ref.sizes();
  s[d] = total;
  Tensor out = empty(s, TensorOptions(out_dtype).device(ref.device()));
  int64_t at = 0;
  for (const Tensor* t : parts) {
    out.narrow(d, at, t->size(d)).copy_(*t);
    at += t->size(d);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  ANVIL_CHECK(!tensors.empty(), ShapeError, "[stack] expected a non-empty list of Tensors");
  int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "[stack]");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ANVIL_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError, "[stack] stack expects each tensor to be equal size, but got ",
                shape_str(tensors[0].sizes()), " at entry 0 and ", shape_str(tensors[i].sizes()), " at entry ", i);
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

}  // namespace anvil
