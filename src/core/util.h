#pragma once
// Small helpers shared by core and op front ends.
#include <cstdint>
#include <string>

#include "anvil/error.h"
#include "anvil/tensor.h"

namespace anvil {

// Wraps a possibly negative dim into [0, ndim); IndexError names the op and the range.
inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // 0-dim tensors accept dim 0 and -1, as PyTorch
  if (dim < -n || dim >= n)
    throw IndexError(detail::cat_message(op, " Dimension out of range (expected to be in range of [", -n, ", ", n - 1,
                                         "], but got ", dim, ")"));
  return dim < 0 ? dim + n : dim;
}

inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

Shape contiguous_strides(const Shape& sizes);
// The strides of `format`'s dense layout (ShapeError naming `op` when the rank does not fit it).
Shape memory_format_strides(const Shape& sizes, MemoryFormat format, const char* op);
// Storage of `nbytes` on `device` from its allocator (CPU: 64-byte aligned; CUDA: caching).
std::shared_ptr<StorageImpl> allocate_storage(Device device, size_t nbytes);
std::string describe(const Tensor& t);  // "float32[2, 3] on cpu"
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

// t as [rows, cols] with unit-stride cols and one row stride: a view when the layout allows,
// else a contiguous copy. row_stride() gives the row stride for kernels (cols when rows <= 1).
inline Tensor as_rows(const Tensor& t, int64_t rows, int64_t cols) {
  Tensor r = t.reshape({rows, cols});
  return cols > 1 && r.stride(1) != 1 ? r.contiguous() : r;
}
inline int64_t row_stride(const Tensor& r) { return r.size(0) <= 1 ? r.size(1) : r.stride(0); }

// Calls f(); an anvil error it throws is re-thrown with `op` as its "[op]" prefix (for errors
// raised by shared helpers such as type promotion on behalf of an op).
template <typename F>
decltype(auto) as_op(const char* op, F&& f) {
  auto retag = [&](const std::string& msg) {
    size_t close = msg.find("] ");
    return std::string(op) + (close == std::string::npos ? " " + msg : msg.substr(close + 1));
  };
  try {
    return f();
  } catch (const DTypeError& e) {
    throw DTypeError(retag(e.what()));
  } catch (const ShapeError& e) {
    throw ShapeError(retag(e.what()));
  } catch (const DeviceError& e) {
    throw DeviceError(retag(e.what()));
  } catch (const IndexError& e) {
    throw IndexError(retag(e.what()));
  }
}

}  // namespace anvil
