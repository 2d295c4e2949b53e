// Tensor handle, storage and views. Nothing here touches element values.
#include "anvil/tensor.h"

#include <algorithm>
#include <sstream>

#include "anvil/stream.h"
#include "core/kernels.h"
#include "core/util.h"

namespace anvil {

StorageImpl::~StorageImpl() {
  if (deleter) deleter(data);
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

namespace {

// Dims from innermost to outermost in memory (PyTorch's orders for its channels-last checks).
constexpr int kChannelsLastOrder[] = {1, 3, 2, 0};
constexpr int kChannelsLast3dOrder[] = {1, 4, 3, 2, 0};

template <size_t N>
bool dense_in_order(const Shape& sizes, const Shape& strides, const int (&order)[N]) {
  if (sizes.size() != N) return false;
  int64_t expected = 1;
  for (int d : order) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// PyTorch's is_channels_last_strides_2d / _3d: the strides grow along `order`, with its rules
// for ambiguous size-1 dims (an N111 tensor, a 1C1W permutation) falling back to contiguous.
template <size_t N>
bool strides_like_order(const Shape& sizes, const Shape& strides, const int (&order)[N]) {
  if (sizes.size() != N || strides[1] == 0) return false;
  int64_t min = 0;
  for (int d : order) {
    if (sizes[d] == 0 || strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (sizes[d] > 1) min *= sizes[d];
  }
  return true;
}

}  // namespace

const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous_format";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::ChannelsLast3d: return "channels_last_3d";
  }
  return "unknown memory format";
}

Shape memory_format_strides(const Shape& sizes, MemoryFormat format, const char* op) {
  if (format == MemoryFormat::Contiguous) return contiguous_strides(sizes);
  const bool is_2d = format == MemoryFormat::ChannelsLast;
  const size_t rank = is_2d ? 4 : 5;
  ANVIL_CHECK(sizes.size() == rank, ShapeError, op, " required rank ", rank, " tensor to use ",
              memory_format_name(format), " format, got ", shape_str(sizes));
  // Raw sizes, as PyTorch's get_channels_last_strides: a zero-size dim gives zero strides above it.
  Shape st(rank);
  int64_t s = 1;
  auto walk = [&](const auto& order) {
    for (int d : order) {
      st[d] = s;
      s *= sizes[d];
    }
  };
  if (is_2d) walk(kChannelsLastOrder);
  else walk(kChannelsLast3dOrder);
  return st;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return detail::cat_message(dtype_name(t.dtype()), shape_str(t.sizes()), " on ", t.device().str());
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  ANVIL_CHECK(a.device() == b.device(), DeviceError, op, " expected all tensors on the same device, got ", describe(a),
              " and ", describe(b));
}

Tensor::Tensor(std::shared_ptr<StorageImpl> storage, Shape sizes, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)), sizes_(std::move(sizes)), strides_(std::move(strides)), offset_(offset), dtype_(dtype) {
  ANVIL_CHECK(sizes_.size() == strides_.size(), ShapeError, "[tensor] sizes ", shape_str(sizes_), " and strides ",
              shape_str(strides_), " differ in length");
  ANVIL_CHECK(sizes_.size() <= 16, ShapeError, "[tensor] at most 16 dims are supported, got ", sizes_.size());
  for (int64_t s : sizes_) ANVIL_CHECK(s >= 0, ShapeError, "[tensor] negative size in ", shape_str(sizes_));
}

int64_t Tensor::size(int64_t d) const { return sizes_[wrap_dim(d, dim(), "[size]")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "[stride]")]; }
int64_t Tensor::numel() const { return shape_numel(sizes_); }
Device Tensor::device() const { return storage_ ? storage_->device : Device(kCPU); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (sizes_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

bool Tensor::is_non_overlapping_and_dense() const {
  if (is_contiguous()) return true;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < dim(); ++d)
    if (sizes_[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return strides_[a] < strides_[b]; });
  int64_t expected = 1;
  for (int64_t d : dims) {
    if (strides_[d] != expected) return false;
    expected *= sizes_[d];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  switch (format) {
    case MemoryFormat::Contiguous: return is_contiguous();
    case MemoryFormat::ChannelsLast: return dense_in_order(sizes_, strides_, kChannelsLastOrder);
    case MemoryFormat::ChannelsLast3d: return dense_in_order(sizes_, strides_, kChannelsLast3dOrder);
  }
  return false;
}

MemoryFormat Tensor::suggest_memory_format(bool channels_last_strides_exact_match) const {
  const bool exact = channels_last_strides_exact_match;
  if (strides_like_order(sizes_, strides_, kChannelsLastOrder) &&
      (!exact || strides_ == memory_format_strides(sizes_, MemoryFormat::ChannelsLast, "[suggest_memory_format]")))
    return MemoryFormat::ChannelsLast;
  if (strides_like_order(sizes_, strides_, kChannelsLast3dOrder) &&
      (!exact || strides_ == memory_format_strides(sizes_, MemoryFormat::ChannelsLast3d, "[suggest_memory_format]")))
    return MemoryFormat::ChannelsLast3d;
  return MemoryFormat::Contiguous;
}

void* Tensor::raw_data_ptr() const {
  ANVIL_CHECK(defined(), Error, "[data_ptr] tensor is undefined");
  return static_cast<char*>(storage_->data) + offset_ * static_cast<int64_t>(element_size());
}

void* Tensor::data_ptr() const {
  ANVIL_CHECK(defined(), Error, "[data_ptr] tensor is undefined");
  ANVIL_CHECK(device().is_cpu(), DeviceError, "[data_ptr] data_ptr() is for CPU tensors, got ", describe(*this),
              "; use .to(kCPU) or raw_data_ptr()");
  return raw_data_ptr();
}

template <typename T> T* Tensor::data_ptr() const {
  ANVIL_CHECK(dtype_of_v<T> == dtype_, DTypeError, "[data_ptr] requested ", dtype_name(dtype_of_v<T>),
              " from a ", dtype_name(dtype_), " tensor");
  return static_cast<T*>(data_ptr());
}
#define ANVIL_INSTANTIATE_DATA_PTR(T) template ANVIL_API T* Tensor::data_ptr<T>() const;
ANVIL_INSTANTIATE_DATA_PTR(bool)
ANVIL_INSTANTIATE_DATA_PTR(uint8_t)
ANVIL_INSTANTIATE_DATA_PTR(int8_t)
ANVIL_INSTANTIATE_DATA_PTR(uint16_t)
ANVIL_INSTANTIATE_DATA_PTR(int16_t)
ANVIL_INSTANTIATE_DATA_PTR(uint32_t)
ANVIL_INSTANTIATE_DATA_PTR(int32_t)
ANVIL_INSTANTIATE_DATA_PTR(uint64_t)
ANVIL_INSTANTIATE_DATA_PTR(int64_t)
ANVIL_INSTANTIATE_DATA_PTR(Half)
ANVIL_INSTANTIATE_DATA_PTR(BFloat16)
ANVIL_INSTANTIATE_DATA_PTR(float)
ANVIL_INSTANTIATE_DATA_PTR(double)
ANVIL_INSTANTIATE_DATA_PTR(Float8_e4m3fn)
ANVIL_INSTANTIATE_DATA_PTR(Float8_e5m2)
ANVIL_INSTANTIATE_DATA_PTR(Complex64)
#undef ANVIL_INSTANTIATE_DATA_PTR

// ---- views

namespace {
// Infers one -1 in `shape` from numel; ShapeError when it does not fit.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      ANVIL_CHECK(infer < 0, ShapeError, op, " only one dimension can be inferred in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      ANVIL_CHECK(out[i] >= 0, ShapeError, op, " invalid shape dimension ", out[i], " in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    ANVIL_CHECK(known != 0 && numel % known == 0, ShapeError, op, " shape '", shape_str(shape),
                "' is invalid for input of size ", numel);
    out[infer] = numel / known;
  } else {
    ANVIL_CHECK(known == numel, ShapeError, op, " shape '", shape_str(shape), "' is invalid for input of size ", numel);
  }
  return out;
}

// Strides for viewing (sizes, strides) as `shape` without copying, or false (PyTorch's
// computeStride: chunks of dims that are contiguous among themselves can be regrouped).
bool view_strides(const Shape& sizes, const Shape& strides, const Shape& shape, Shape& out) {
  out.assign(shape.size(), 0);
  if (sizes.empty()) {  // a 0-dim tensor views as any all-ones shape
    out.assign(shape.size(), 1);
    return true;
  }
  if (shape_numel(sizes) == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, std::optional<int64_t> offset) const {
  return as_op("[as_strided]", [&] {
    int64_t off = offset.value_or(offset_);
    ANVIL_CHECK(sizes.size() == strides.size(), ShapeError, "[as_strided] mismatch in length of strides and shape: sizes ",
                shape_str(sizes), ", strides ", shape_str(strides));
    // The furthest element must lie inside the storage.
    int64_t last = off;
    bool empty = false;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ANVIL_CHECK(strides[i] >= 0, ShapeError, "[as_strided] negative strides are not supported: ", shape_str(strides));
      if (sizes[i] == 0) empty = true;
      else last += (sizes[i] - 1) * strides[i];
    }
    ANVIL_CHECK(off >= 0, ShapeError, "[as_strided] negative storage offset ", off);
    size_t need = empty ? 0 : static_cast<size_t>(last + 1) * element_size();
    ANVIL_CHECK(!storage_ || need <= storage_->nbytes, ShapeError, "[as_strided] sizes ", shape_str(sizes), ", strides ",
                shape_str(strides), ", storage offset ", off, " and itemsize ", element_size(),
                " require a storage of ", need, " bytes, out of bounds for storage of ", storage_->nbytes, " bytes");
    return Tensor(storage_, sizes, strides, off, dtype_);
  });
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "[view]");
  Shape st;
  ANVIL_CHECK(view_strides(sizes_, strides_, s, st), ShapeError, "[view] view size ", shape_str(s),
              " is not compatible with input tensor's size ", shape_str(sizes_), " and stride ", shape_str(strides_),
              " (at least one dimension spans across two contiguous subspaces). Use reshape(...) instead.");
  return as_strided(s, st);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "[reshape]");
  Shape st;
  if (view_strides(sizes_, strides_, s, st)) return as_strided(s, st);
  return contiguous().view(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  ANVIL_CHECK(static_cast<int64_t>(dims.size()) == dim(), ShapeError, "[permute] number of dims don't match: input has ",
              dim(), " dims, permutation ", shape_str(dims));
  Shape s(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "[permute]");
    ANVIL_CHECK(!seen[d], ShapeError, "[permute] repeated dim in permutation ", shape_str(dims));
    seen[d] = true;
    s[i] = sizes_[d];
    st[i] = strides_[d];
  }
  return as_strided(s, st);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  d0 = wrap_dim(d0, dim(), "[transpose]");
  d1 = wrap_dim(d1, dim(), "[transpose]");
  Shape s = sizes_, st = strides_;
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return as_strided(s, st);
}

Tensor Tensor::t() const {
  ANVIL_CHECK(dim() <= 2, ShapeError, "[t] t() expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  ANVIL_CHECK(dim() > 0, IndexError, "[slice] slice() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "[slice]");
  ANVIL_CHECK(step > 0, IndexError, "[slice] slice step must be positive, got ", step);
  int64_t n = sizes_[d];
  int64_t b = start.value_or(0), e = end.value_or(n);
  if (b < 0) b += n;
  if (e < 0) e += n;
  b = std::clamp<int64_t>(b, 0, n);
  e = std::clamp<int64_t>(e, b, n);
  Shape s = sizes_, st = strides_;
  s[d] = (e - b + step - 1) / step;
  st[d] = strides_[d] * step;
  return as_strided(s, st, offset_ + b * strides_[d]);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  ANVIL_CHECK(dim() > 0, IndexError, "[narrow] narrow() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "[narrow]");
  int64_t n = sizes_[d];
  if (start < 0) start += n;
  ANVIL_CHECK(start >= 0 && start <= n, IndexError, "[narrow] start (", start, ") out of range for dimension ", d,
              " of size ", n);
  ANVIL_CHECK(length >= 0 && start + length <= n, IndexError, "[narrow] start (", start, ") + length (", length,
              ") exceeds dimension size (", n, ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  ANVIL_CHECK(dim() > 0, IndexError, "[select] select() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "[select]");
  int64_t n = sizes_[d];
  ANVIL_CHECK(index >= -n && index < n, IndexError, "[select] index ", index, " is out of bounds for dimension ", d,
              " with size ", n);
  if (index < 0) index += n;
  Shape s = sizes_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(s, st, offset_ + index * strides_[d]);
}

Tensor Tensor::expand(const Shape& shape) const {
  ANVIL_CHECK(static_cast<int64_t>(shape.size()) >= dim(), ShapeError, "[expand] the number of sizes provided (",
              shape.size(), ") must be greater or equal to the number of dimensions in the tensor (", dim(), ")");
  size_t lead = shape.size() - sizes_.size();
  Shape s(shape.size()), st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      ANVIL_CHECK(shape[i] >= 0, ShapeError, "[expand] the expanded size ", shape[i],
                  " is not allowed in a leading, non-existing dimension");
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t have = sizes_[i - lead];
    int64_t want = shape[i] == -1 ? have : shape[i];
    if (have == want) {
      s[i] = have;
      st[i] = strides_[i - lead];
    } else {
      ANVIL_CHECK(have == 1, ShapeError, "[expand] the expanded size of the tensor (", want,
                  ") must match the existing size (", have, ") at non-singleton dimension ", i, ". Target sizes: ",
                  shape_str(shape), ". Tensor sizes: ", shape_str(sizes_));
      s[i] = want;
      st[i] = 0;
    }
  }
  return as_strided(s, st);
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (sizes_[i] != 1) {
      s.push_back(sizes_[i]);
      st.push_back(strides_[i]);
    }
  return as_strided(s, st);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "[squeeze]");
  if (sizes_[d] != 1) return *this;
  Shape s = sizes_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(s, st);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "[unsqueeze]");
  Shape s = sizes_, st = strides_;
  int64_t stride = d < dim() ? strides_[d] * sizes_[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return as_strided(s, st);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "[flatten]");
  end_dim = wrap_dim(end_dim, dim(), "[flatten]");
  ANVIL_CHECK(start_dim <= end_dim, ShapeError, "[flatten] start_dim (", start_dim, ") cannot come after end_dim (",
              end_dim, ")");
  Shape s(sizes_.begin(), sizes_.begin() + start_dim);
  int64_t n = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) n *= sizes_[i];
  s.push_back(n);
  s.insert(s.end(), sizes_.begin() + end_dim + 1, sizes_.end());
  return reshape(s);
}

void Tensor::record_stream(const Stream& stream) const {
  if (!defined() || device().is_cpu()) return;
  cuda_backend::record_stream(storage_->data, stream);
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- Device
Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = kCPU;
    index = 0;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    type = kCUDA;
    index = 0;
    if (spec.size() > 4) {
      ANVIL_CHECK(spec[4] == ':' && spec.size() > 5 && spec.find_first_not_of("0123456789", 5) == std::string::npos,
                  DeviceError, "[device] invalid device string '", spec, "'");
      index = std::stoi(spec.substr(5));
    }
    return;
  }
  throw DeviceError("[device] invalid device string '" + spec + "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace anvil
