// DLPack both ways, zero copy (the Python array API's __dlpack__ / __dlpack_device__ protocol:
// DLPack 1.0's "dltensor_versioned" capsule for consumers that ask for it with max_version, the
// unversioned "dltensor" one for the others), anvil.from_numpy and anvil.tensor.
#include <nanobind/stl/optional.h>

#include <functional>
#include <memory>
#include <tuple>
#include <string>
#include <vector>

#include "anvil/stream.h"
#include "bindings.h"

namespace anvil::python {
namespace {

// The DLPack ABI (dlpack.h: the v0.8 layout and v1.0's versioned one), its type and device codes.
namespace dl {
constexpr int32_t kCPU = 1, kCUDA = 2, kCUDAHost = 3;
constexpr uint8_t kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6, kFloat8_e4m3fn = 10,
                  kFloat8_e5m2 = 12;
struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};
struct Version {
  uint32_t major;
  uint32_t minor;
};
constexpr uint64_t kFlagReadOnly = 1, kFlagIsCopied = 2;
struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};
constexpr const char* kCapsule = "dltensor";
constexpr const char* kCapsuleVersioned = "dltensor_versioned";
}  // namespace dl

dl::DataType dl_type(DType t) {
  const uint8_t bits = static_cast<uint8_t>(element_size(t) * 8);
  switch (t) {
    case kBool: return {dl::kBool, 8, 1};
    case kBFloat16: return {dl::kBfloat, 16, 1};
    case kFloat8_e4m3fn: return {dl::kFloat8_e4m3fn, 8, 1};
    case kFloat8_e5m2: return {dl::kFloat8_e5m2, 8, 1};
    case kComplex64: return {dl::kComplex, 64, 1};
    default: break;
  }
  if (is_floating_point(t)) return {dl::kFloat, bits, 1};
  return {is_unsigned(t) ? dl::kUInt : dl::kInt, bits, 1};
}

DType anvil_type(const dl::DataType& d) {
  if (d.lanes == 1) {
    for (int i = 0; i < kNumDTypes; ++i) {
      const dl::DataType c = dl_type(static_cast<DType>(i));
      if (c.code == d.code && c.bits == d.bits) return static_cast<DType>(i);
    }
  }
  throw nb::type_error(("[anvil.from_dlpack] no anvil dtype for DLPack type code " + std::to_string(d.code) + ", " +
                        std::to_string(d.bits) + " bits, " + std::to_string(d.lanes) + " lanes")
                           .c_str());
}

struct Export {
  anvil::Tensor tensor;
  std::vector<int64_t> shape, strides;
  dl::ManagedTensor managed{};
  dl::ManagedTensorVersioned versioned{};
};

// Unconsumed (not renamed "used_..." by a consumer): the capsule owns its tensor.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, dl::kCapsule)) {
    auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(capsule, dl::kCapsule));
    if (m && m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(capsule, dl::kCapsuleVersioned)) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, dl::kCapsuleVersioned));
    if (m && m->deleter) m->deleter(m);
  }
}

// The consumer's stream (DLPack: None or 1 the legacy default stream, 2 the per-thread default,
// -1 no synchronisation, else a cudaStream_t) waits for the work queued on anvil's current stream.
void sync_to_consumer(const anvil::Tensor& t, nb::handle stream) {
  int64_t s = 1;
  if (!stream.is_none()) s = nb::cast<int64_t>(stream);
  if (s == -1) return;
  if (s == 0) throw nb::value_error("[anvil.Tensor.__dlpack__] stream 0 is ambiguous in DLPack; pass 1 for the legacy default stream");
  const Device dev = t.device();
  Event ready(dev);
  ready.record(current_stream(dev));
  ready.wait(Stream(dev, reinterpret_cast<void*>(static_cast<intptr_t>(s)), -1));
}

nb::object to_dlpack(const anvil::Tensor& t, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                     nb::handle copy) {
  anvil::Tensor src = t;
  if (!copy.is_none() && nb::cast<bool>(copy)) src = t.clone();
  if (!dl_device.is_none()) {
    const auto want = nb::cast<nb::tuple>(dl_device);
    const int32_t type = nb::cast<int32_t>(want[0]), id = nb::cast<int32_t>(want[1]);
    const bool same = src.is_cpu() ? type == dl::kCPU : (type == dl::kCUDA && id == src.device().index);
    if (!same) throw nb::buffer_error("[anvil.Tensor.__dlpack__] export to another device than the tensor's is not supported");
  }
  if (src.is_cuda()) sync_to_consumer(src, stream);
  // The consumer names the newest DLPack it reads; 1.0 and later take the versioned capsule, as
  // 1.1 when it reads 1.1 (whose type codes the float8 dtypes use).
  dl::Version version{0, 0};
  if (!max_version.is_none()) {
    const auto mv = nb::cast<std::tuple<uint32_t, uint32_t>>(max_version);
    if (std::get<0>(mv) >= 1) version = {1, std::get<0>(mv) > 1 || std::get<1>(mv) >= 1 ? 1u : 0u};
  }
  const bool versioned = version.major == 1;
  auto owned = std::make_unique<Export>(Export{src, src.sizes(), src.strides()});
  Export* e = owned.get();
  dl::Tensor d;
  d.data = src.raw_data_ptr();
  d.device = {src.is_cpu() ? dl::kCPU : dl::kCUDA, src.is_cpu() ? 0 : src.device().index};
  d.ndim = static_cast<int32_t>(src.dim());
  d.dtype = dl_type(src.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  void* managed;
  if (versioned) {
    e->versioned = {version, e, [](dl::ManagedTensorVersioned* m) { delete static_cast<Export*>(m->manager_ctx); },
                    src.is_same(t) ? 0 : dl::kFlagIsCopied, d};
    managed = &e->versioned;
  } else {
    e->managed = {d, e, [](dl::ManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); }};
    managed = &e->managed;
  }
  PyObject* capsule = PyCapsule_New(managed, versioned ? dl::kCapsuleVersioned : dl::kCapsule, capsule_destructor);
  if (!capsule) throw nb::python_error();
  owned.release();  // the capsule's, then the consumer's
  return nb::steal(capsule);
}

// A capsule of either kind as a tensor sharing its memory; *read_only tells whether the producer
// marked it so (anvil has no read-only tensors).
anvil::Tensor from_capsule(nb::handle capsule, bool* read_only) {
  const dl::Tensor* dp;
  std::function<void()> release;
  *read_only = false;
  if (PyCapsule_IsValid(capsule.ptr(), dl::kCapsuleVersioned)) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), dl::kCapsuleVersioned));
    if (m->version.major > 1)
      throw nb::buffer_error(("[anvil.from_dlpack] DLPack " + std::to_string(m->version.major) + "." +
                              std::to_string(m->version.minor) + " is newer than the 1.x anvil reads")
                                 .c_str());
    dp = &m->dl_tensor;
    *read_only = m->flags & dl::kFlagReadOnly;
    release = [m] {
      if (m->deleter) m->deleter(m);
    };
  } else {
    auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), dl::kCapsule));
    if (!m) throw nb::python_error();  // neither kind, or already consumed
    dp = &m->dl_tensor;
    release = [m] {
      if (m->deleter) m->deleter(m);
    };
  }
  const dl::Tensor& d = *dp;
  const DType dtype = anvil_type(d.dtype);
  Device dev;
  if (d.device.device_type == dl::kCPU || d.device.device_type == dl::kCUDAHost) dev = Device(kCPU);
  else if (d.device.device_type == dl::kCUDA) dev = Device(kCUDA, d.device.device_id);
  else
    throw nb::type_error(("[anvil.from_dlpack] DLPack device type " + std::to_string(d.device.device_type) +
                          " is neither the CPU nor CUDA")
                             .c_str());
  const Shape sizes(d.shape, d.shape + d.ndim);
  Shape strides;
  if (d.strides) strides.assign(d.strides, d.strides + d.ndim);
  else {
    strides.assign(sizes.size(), 1);
    for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * sizes[i + 1];
  }
  int64_t extent = 1, numel = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (strides[i] < 0) throw nb::value_error("[anvil.from_dlpack] negative strides are not supported");
    extent += (sizes[i] - 1) * strides[i];
    numel *= sizes[i];
  }
  if (numel == 0) extent = 0;
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  // Consumed first: from here the storage below owns the producer's tensor, not the capsule.
  const bool v = PyCapsule_IsValid(capsule.ptr(), dl::kCapsuleVersioned);
  if (PyCapsule_SetName(capsule.ptr(), v ? "used_dltensor_versioned" : "used_dltensor") != 0) throw nb::python_error();
  auto storage = std::make_shared<StorageImpl>(data, static_cast<size_t>(extent) * element_size(dtype), dev,
                                               [release](void*) { release(); });
  return anvil::Tensor(std::move(storage), sizes, strides, 0, dtype);
}

// The producer's capsule: DLPack 1.0 asked for, the unversioned one from producers that predate
// max_version. For CUDA, anvil's current stream is the consumer's.
nb::object capsule_of(nb::handle obj) {
  if (!nb::hasattr(obj, "__dlpack__"))
    throw nb::type_error("[anvil.from_dlpack] expected an object with __dlpack__ (a NumPy array, a torch tensor, ...) or a DLPack capsule");
  nb::kwargs kw;
  const nb::tuple where = nb::cast<nb::tuple>(obj.attr("__dlpack_device__")());
  if (nb::cast<int32_t>(where[0]) == dl::kCUDA) {
    // The producer's work must be done before anvil's current stream reads the memory.
    const Stream s = current_stream(Device(kCUDA, nb::cast<int>(where[1])));
    const intptr_t handle = reinterpret_cast<intptr_t>(s.native_handle());
    kw["stream"] = handle == 0 ? 1 : handle;
  }
  kw["max_version"] = nb::make_tuple(1, 0);
  try {
    return obj.attr("__dlpack__")(**kw);
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;  // a producer without max_version
  }
  PyDict_DelItemString(kw.ptr(), "max_version");
  return obj.attr("__dlpack__")(**kw);
}

// anvil.from_dlpack / from_numpy: shares the memory. A read-only producer (a NumPy array with
// writeable=False) is shared with a warning, as torch.from_numpy does: writing through it is the
// caller's risk.
anvil::Tensor from_dlpack(nb::handle obj, const char* op) {
  if (nb::isinstance<anvil::Tensor>(obj)) return nb::cast<anvil::Tensor>(obj);
  bool read_only = false;
  anvil::Tensor t = from_capsule(PyCapsule_CheckExact(obj.ptr()) ? nb::borrow(obj) : capsule_of(obj), &read_only);
  if (read_only &&
      PyErr_WarnEx(PyExc_UserWarning, (std::string("[") + op + "] the array is read-only and anvil has no read-only "
                                       "tensors: writing through this tensor writes into it").c_str(), 1) != 0)
    throw nb::python_error();
  return t;
}

// A copy of obj's data (anvil.tensor), read-only producers included.
anvil::Tensor copy_of(nb::handle obj) {
  bool read_only = false;
  return from_capsule(capsule_of(obj), &read_only).clone();
}

// anvil.tensor(data): always a copy, as torch.tensor. Python numbers and nested lists take torch's
// default dtypes (float32 for floats, complex64 for complex, int64, bool); arrays keep theirs.
anvil::Tensor tensor_of(nb::handle data, std::optional<DType> dtype, nb::handle device) {
  anvil::Tensor t;
  if (nb::isinstance<anvil::Tensor>(data)) {
    t = nb::cast<const anvil::Tensor&>(data).clone();
  } else if (nb::hasattr(data, "__dlpack__")) {
    nb::object src = nb::borrow(data);
    // NumPy's complex128 (anvil has complex64 only): converted when a dtype is asked for.
    if (nb::hasattr(data, "__array_interface__") && nb::cast<std::string>(data.attr("dtype").attr("str")).ends_with("c16")) {
      if (!dtype)
        throw nb::type_error("[anvil.tensor] anvil has no complex128: pass dtype=anvil.complex64 to convert");
      src = data.attr("astype")("complex64");
    }
    t = copy_of(src);
  } else {
    nb::module_ np = nb::module_::import_("numpy");
    nb::object a = np.attr("asarray")(data);
    const std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
    if (kind == "f") a = a.attr("astype")(np.attr("float32"));
    else if (kind == "c") a = a.attr("astype")(np.attr("complex64"));
    else if (kind == "i" || kind == "u") a = a.attr("astype")(np.attr("int64"));
    else if (kind != "b")
      throw nb::type_error(("[anvil.tensor] can't build a tensor from " + py_type_name(data)).c_str());
    t = copy_of(a.attr("copy")("C"));  // C order; 0-d stays 0-d
  }
  if (dtype) t = t.to(*dtype);
  if (!device.is_none()) t = t.to(device_arg(device));
  return t;
}

}  // namespace

void bind_dlpack(nb::module_& m, nb::class_<anvil::Tensor>& c) {
  c.def("__dlpack__", &to_dlpack, nb::kw_only(), nb::arg("stream").none() = nb::none(),
        nb::arg("max_version").none() = nb::none(), nb::arg("dl_device").none() = nb::none(),
        nb::arg("copy").none() = nb::none());
  c.def("__dlpack_device__", [](const anvil::Tensor& t) {
    return nb::make_tuple(t.is_cpu() ? dl::kCPU : dl::kCUDA, t.is_cpu() ? 0 : t.device().index);
  });
  m.def("from_dlpack", [](nb::handle obj) { return from_dlpack(obj, "anvil.from_dlpack"); }, nb::arg("ext_tensor"));
  m.def("from_numpy", [](nb::handle a) {
    if (!nb::hasattr(a, "__array_interface__")) throw nb::type_error("[anvil.from_numpy] expected a numpy.ndarray");
    return from_dlpack(a, "anvil.from_numpy");
  }, nb::arg("ndarray"));
  m.def("tensor", &tensor_of, nb::arg("data"), nb::kw_only(), nb::arg("dtype").none() = nb::none(),
        nb::arg("device").none() = nb::none());
}

}  // namespace anvil::python
