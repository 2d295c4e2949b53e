// copy_ (any dtype pair, any strides, broadcasting, across devices), to, clone, fill_, item.
#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "core/util.h"
#include "ops/iter.h"

namespace anvil {

namespace {
void copy_same_device(Tensor& dst, const Tensor& src) {
  ElementwiseParams p = make_elementwise("[copy_]", dst, {&src});
  ANVIL_KERNEL(dst.device(), copy, p);
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  ANVIL_CHECK(defined() && src.defined(), Error, "[copy_] undefined tensor");
  Tensor srcx;
  try {
    srcx = src.expand(sizes_);
  } catch (const ShapeError&) {
    throw ShapeError(detail::cat_message("[copy_] source ", describe(src), " is not broadcastable to destination ",
                                         describe(*this)));
  }
  if (numel() == 0) return *this;
  if (src.device() == device()) {
    copy_same_device(*this, srcx);
    return *this;
  }
  // Across devices: convert on the source side's host copy, move bytes contiguously, then
  // scatter into the destination's strides on its own device.
  if (src.device().is_cpu()) {
    Tensor host = srcx.to(dtype_).contiguous();
    if (is_contiguous()) {
      cuda_backend::memcpy_to_device(raw_data_ptr(), host.raw_data_ptr(), nbytes(), device());
    } else {
      Tensor staging = empty(sizes_, TensorOptions(dtype_).device(device()));
      cuda_backend::memcpy_to_device(staging.raw_data_ptr(), host.raw_data_ptr(), nbytes(), device());
      copy_same_device(*this, staging);
    }
    return *this;
  }
  Tensor dev = srcx.contiguous();
  if (device().is_cpu() && is_contiguous() && dtype_ == src.dtype()) {
    cuda_backend::memcpy_to_host(raw_data_ptr(), dev.raw_data_ptr(), nbytes(), src.device());
    return *this;
  }
  Tensor host = empty(sizes_, TensorOptions(src.dtype()).device(kCPU));
  cuda_backend::memcpy_to_host(host.raw_data_ptr(), dev.raw_data_ptr(), host.nbytes(), src.device());
  if (device().is_cpu()) {
    copy_same_device(*this, host);
  } else {
    copy_(host);  // another CUDA device: through the host
  }
  return *this;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype_) return *this;
  Tensor out = empty_preserving(*this, TensorOptions(t).device(device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const { return to(d, dtype_); }

Tensor Tensor::to(Device d, DType t) const {
  if (d == device() && t == dtype_) return *this;
  Tensor out = empty_preserving(*this, TensorOptions(t).device(d));
  out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(sizes_, TensorOptions(dtype_).device(device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (is_contiguous(format)) return *this;
  Tensor out = empty(sizes_, TensorOptions(dtype_).device(device()), format);
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty_preserving(*this, TensorOptions(dtype_).device(device()));
  out.copy_(*this);
  return out;
}

Tensor& Tensor::fill_(const Scalar& value) {
  ANVIL_CHECK(defined(), Error, "[fill_] undefined tensor");
  if (numel() == 0) return *this;
  ElementwiseParams p = make_elementwise("[fill_]", *this, {});
  // The value is rounded to the tensor's dtype once, on the host, exactly as a copy would.
  p.scalar0 = to_scalar_arg(value);
  ANVIL_KERNEL(device(), fill, p);
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

template <typename T> T Tensor::item() const {
  ANVIL_CHECK(defined() && numel() == 1, ShapeError, "[item] a Tensor with ", numel(),
              " elements cannot be converted to Scalar");
  Tensor host = to(kCPU);
  T result{};
  dispatch_all_types(dtype_, "[item]", [&](auto tag) {
    using S = typename decltype(tag)::type;
    result = convert<T>(*static_cast<const S*>(host.raw_data_ptr()));
  });
  return result;
}
#define ANVIL_INSTANTIATE_ITEM(T) template ANVIL_API T Tensor::item<T>() const;
ANVIL_INSTANTIATE_ITEM(bool)
ANVIL_INSTANTIATE_ITEM(uint8_t)
ANVIL_INSTANTIATE_ITEM(int8_t)
ANVIL_INSTANTIATE_ITEM(uint16_t)
ANVIL_INSTANTIATE_ITEM(int16_t)
ANVIL_INSTANTIATE_ITEM(uint32_t)
ANVIL_INSTANTIATE_ITEM(int32_t)
ANVIL_INSTANTIATE_ITEM(uint64_t)
ANVIL_INSTANTIATE_ITEM(int64_t)
ANVIL_INSTANTIATE_ITEM(Half)
ANVIL_INSTANTIATE_ITEM(BFloat16)
ANVIL_INSTANTIATE_ITEM(float)
ANVIL_INSTANTIATE_ITEM(double)
ANVIL_INSTANTIATE_ITEM(Float8_e4m3fn)
ANVIL_INSTANTIATE_ITEM(Float8_e5m2)
ANVIL_INSTANTIATE_ITEM(Complex64)
#undef ANVIL_INSTANTIATE_ITEM

Scalar Tensor::item() const {
  if (dtype_ == kBool) return Scalar(item<bool>());
  if (dtype_ == kUInt64) return Scalar(item<uint64_t>());
  if (is_integral(dtype_)) return Scalar(item<int64_t>());
  if (is_complex(dtype_)) {
    Complex64 c = item<Complex64>();
    return Scalar(std::complex<double>(c.re, c.im));
  }
  return Scalar(item<double>());
}

}  // namespace anvil
