#pragma once
// Tensor: a cheap handle on refcounted storage + sizes + strides (elements) + offset + dtype.
// Views share storage; all index arithmetic is int64.
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "anvil/device.h"
#include "anvil/dtype.h"
#include "anvil/error.h"
#include "anvil/export.h"
#include "anvil/scalar.h"

namespace anvil {

using Shape = std::vector<int64_t>;
class Stream;

// torch.memory_format: the dense layouts a tensor can be asked for. ChannelsLast orders a 4-d
// [N, C, H, W] tensor as NHWC in memory (strides [H*W*C, 1, W*C, C]), ChannelsLast3d a 5-d
// [N, C, D, H, W] one as NDHWC.
enum class MemoryFormat : int8_t { Contiguous, ChannelsLast, ChannelsLast3d };
ANVIL_API const char* memory_format_name(MemoryFormat format);  // "contiguous_format", "channels_last", ...

// Bytes on one device, freed through its deleter when the last Tensor using them goes.
struct ANVIL_API StorageImpl {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*)> deleter;  // empty for borrowed memory (from_blob without deleter)
  StorageImpl(void* d, size_t n, Device dev, std::function<void(void*)> del)
      : data(d), nbytes(n), device(dev), deleter(std::move(del)) {}
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  ~StorageImpl();
};

struct ANVIL_API TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}           // NOLINT: implicit like libtorch
  TensorOptions(Device d) : device_(d) {}         // NOLINT
  TensorOptions(DeviceType d) : device_(d) {}     // NOLINT
  TensorOptions dtype(DType t) const { TensorOptions o = *this; o.dtype_ = t; return o; }
  TensorOptions device(Device d) const { TensorOptions o = *this; o.device_ = d; return o; }
};

class ANVIL_API Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<StorageImpl> storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  DType scalar_type() const { return dtype_; }
  Device device() const;
  int64_t storage_offset() const { return offset_; }
  size_t element_size() const { return anvil::element_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  // Dense in `format`'s order (size-1 dims are not checked), as torch's is_contiguous(memory_format).
  bool is_contiguous(MemoryFormat format) const;
  // The layout an op should give its output, as torch's suggest_memory_format: ChannelsLast
  // (ChannelsLast3d) when a 4-d (5-d) tensor's strides order it NHWC (NDHWC), else Contiguous;
  // ambiguous strides (size-1 channels) count as Contiguous. With exact_match only the exact
  // channels-last strides count.
  MemoryFormat suggest_memory_format(bool channels_last_strides_exact_match = false) const;
  // Every element at its own offset and the offsets one dense block (some order of the dims is
  // contiguous), as torch's is_non_overlapping_and_dense: a contiguous, channels-last or
  // permuted tensor, not a slice, an expansion or a strided view.
  bool is_non_overlapping_and_dense() const;
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  const std::shared_ptr<StorageImpl>& storage() const { return storage_; }
  bool is_same(const Tensor& o) const { return storage_ == o.storage_ && offset_ == o.offset_ && sizes_ == o.sizes_ && strides_ == o.strides_ && dtype_ == o.dtype_; }

  // Address of element 0. data_ptr() is for CPU tensors (DeviceError otherwise); raw_data_ptr()
  // returns the device address of any tensor.
  void* data_ptr() const;
  template <typename T> T* data_ptr() const;
  void* raw_data_ptr() const;

  // to() and clone() keep the layout as torch's memory_format=preserve_format does: a
  // non-overlapping dense tensor's copy has its strides, any other tensor's copy is dense in
  // suggest_memory_format()'s order.
  Tensor to(DType t) const;
  Tensor to(Device d) const;
  Tensor to(Device d, DType t) const;
  Tensor contiguous() const;
  // This tensor when is_contiguous(format), else a copy in that layout (ShapeError when the
  // rank does not fit it: 4 for ChannelsLast, 5 for ChannelsLast3d).
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  // Writes source's elements (any shape, numel of index) to this tensor's elements at the flat
  // row-major positions `index` (int64, negative counts from the end), summing with
  // accumulate; without it, duplicate positions take one of their values (as PyTorch).
  Tensor& put_(const Tensor& index, const Tensor& source, bool accumulate = false);
  template <typename T> T item() const;
  Scalar item() const;

  // Views (share storage).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides, std::optional<int64_t> offset = std::nullopt) const;

  // Tells the CUDA caching allocator that `stream` uses this memory: its block is not reused
  // until the work queued on `stream` when the tensor dies has finished. No-op on CPU.
  void record_stream(const Stream& stream) const;

  std::string str() const;  // like torch's repr

 private:
  std::shared_ptr<StorageImpl> storage_;
  Shape sizes_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = kFloat32;
};

ANVIL_API std::ostream& operator<<(std::ostream& os, const Tensor& t);
ANVIL_API std::ostream& operator<<(std::ostream& os, DType t);
ANVIL_API std::ostream& operator<<(std::ostream& os, const Device& d);
ANVIL_API std::string shape_str(const Shape& s);  // "[2, 3]"

// ---- factories
ANVIL_API Tensor empty(const Shape& sizes, TensorOptions opts = {});
// empty in `format`'s layout (ShapeError when the rank does not fit it).
ANVIL_API Tensor empty(const Shape& sizes, TensorOptions opts, MemoryFormat format);
ANVIL_API Tensor empty_strided(const Shape& sizes, const Shape& strides, TensorOptions opts = {});
ANVIL_API Tensor zeros(const Shape& sizes, TensorOptions opts = {});
// The n x m matrix (m = n when unset) with ones on the diagonal, as torch.eye.
ANVIL_API Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions opts = {});
ANVIL_API Tensor eye(int64_t n, TensorOptions opts);
ANVIL_API Tensor ones(const Shape& sizes, TensorOptions opts = {});
ANVIL_API Tensor full(const Shape& sizes, const Scalar& value, TensorOptions opts = {});
// The *_like factories lay their result out as t (torch's memory_format=preserve_format): t's
// strides when t is non-overlapping and dense, else dense in t.suggest_memory_format()'s order.
ANVIL_API Tensor empty_like(const Tensor& t);
ANVIL_API Tensor empty_like(const Tensor& t, MemoryFormat format);
ANVIL_API Tensor zeros_like(const Tensor& t);
ANVIL_API Tensor ones_like(const Tensor& t);
ANVIL_API Tensor full_like(const Tensor& t, const Scalar& value);
// arange: dtype defaults to int64 when all of start/end/step are integers, else float32.
ANVIL_API Tensor arange(const Scalar& end, std::optional<TensorOptions> opts = std::nullopt);
ANVIL_API Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, std::optional<TensorOptions> opts = std::nullopt);
ANVIL_API Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
// base ** linspace(start, end, steps) with PyTorch's rounding: start and end converted to the
// output dtype first, then each power computed in float64 (float for integer outputs).
ANVIL_API Tensor logspace(double start, double end, int64_t steps, double base = 10.0, TensorOptions opts = {});
// Seeded counter-based RNG (Philox-4x32-10): element i of a call depends only on (seed, offset + i),
// so CPU and CUDA give the same numbers. manual_seed resets the global seed and offset.
ANVIL_API void manual_seed(uint64_t seed);
// The global generator's next counter, as torch.Generator.get_offset / set_offset: saving it
// with the seed and setting it back replays the draws that followed.
ANVIL_API uint64_t rng_offset();
ANVIL_API void set_rng_offset(uint64_t offset);
ANVIL_API Tensor rand(const Shape& sizes, TensorOptions opts = {});
// Standard normal values; complex dtypes draw real and imaginary parts each N(0, 1/2), as torch.
ANVIL_API Tensor randn(const Shape& sizes, TensorOptions opts = {});
ANVIL_API Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions opts = kInt64);
// Borrows `data` (no copy); `deleter`, when given, is called when the last view goes.
ANVIL_API Tensor from_blob(void* data, const Shape& sizes, DType dtype, std::function<void(void*)> deleter = {});
ANVIL_API Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype, std::function<void(void*)> deleter = {});
// Copies host values into a new tensor.
template <typename T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> sizes = std::nullopt, TensorOptions opts = dtype_of_v<T>) {
  Shape s = sizes ? *sizes : Shape{static_cast<int64_t>(values.size())};
  Tensor out = empty(s, opts);
  out.copy_(from_blob(const_cast<T*>(values.data()), s, dtype_of_v<T>));
  return out;
}
ANVIL_API Tensor scalar_tensor(const Scalar& value, TensorOptions opts = {});
ANVIL_API Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
ANVIL_API Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

}  // namespace anvil
