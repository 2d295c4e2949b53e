// anvil._anvil: dtypes, devices, typed errors, factories; the submodules from the other files.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <complex>
#include <string>
#include <utility>

#include "bindings.h"
#include "runtime/safetensors.h"

namespace anvil::python {

Device device_arg(nb::handle h, Device fallback) {
  if (h.is_none()) return fallback;
  if (nb::isinstance<Device>(h)) return nb::cast<Device>(h);
  if (nb::isinstance<nb::str>(h)) return Device(nb::cast<std::string>(h));
  throw nb::type_error(
      ("[anvil.device] expected an anvil.device or a string such as 'cpu' or 'cuda:0', got " + py_type_name(h)).c_str());
}

std::optional<Scalar> scalar_arg(nb::handle h) {
  if (nb::isinstance<nb::bool_>(h)) return Scalar(nb::cast<bool>(h));
  if (is_int(h) && !nb::isinstance<Tensor>(h)) return Scalar(nb::cast<int64_t>(h));
  if (nb::isinstance<nb::float_>(h)) return Scalar(nb::cast<double>(h));
  if (PyComplex_Check(h.ptr())) return Scalar(std::complex<double>(PyComplex_RealAsDouble(h.ptr()), PyComplex_ImagAsDouble(h.ptr())));
  // NumPy scalars (np.float32(2), np.bool_) and 0-d arrays: their Python value.
  if (!nb::isinstance<Tensor>(h) && nb::hasattr(h, "dtype") && nb::hasattr(h, "item") && nb::hasattr(h, "ndim") &&
      nb::cast<int64_t>(h.attr("ndim")) == 0) {
    nb::object v = h.attr("item")();
    if (!nb::hasattr(v, "dtype")) return scalar_arg(v);
  }
  return std::nullopt;
}

Shape int_list(nb::handle h, const char* op, const char* name) {
  if (is_int(h)) return {nb::cast<int64_t>(h)};
  if (!nb::isinstance<nb::sequence>(h) || nb::isinstance<nb::str>(h))
    throw nb::type_error((std::string("[") + op + "] " + name + " must be an int or a sequence of ints").c_str());
  Shape s;
  for (nb::handle d : nb::iter(h)) s.push_back(nb::cast<int64_t>(d));
  return s;
}

Shape shape_args(const nb::args& args, const char* op) {
  if (args.size() == 1) return int_list(args[0], op, "size");
  Shape shape;
  for (nb::handle d : args) {
    if (!is_int(d)) throw nb::type_error((std::string("[") + op + "] size must be ints").c_str());
    shape.push_back(nb::cast<int64_t>(d));
  }
  return shape;
}

TensorOptions options_of(std::optional<DType> dtype, nb::handle device, DType fallback) {
  return TensorOptions(dtype.value_or(fallback)).device(device_arg(device));
}

namespace {

void bind_dtypes(nb::module_& m) {
  nb::enum_<DType> dt(m, "dtype");
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    dt.value(dtype_name(t), t);
  }
  dt.def("__repr__", [](DType t) { return std::string("anvil.") + dtype_name(t); })
      .def("__str__", [](DType t) { return std::string("anvil.") + dtype_name(t); })
      .def_prop_ro("is_floating_point", [](DType t) { return is_floating_point(t); })
      .def_prop_ro("is_complex", [](DType t) { return is_complex(t); })
      .def_prop_ro("is_signed", [](DType t) { return !is_unsigned(t); })
      .def_prop_ro("itemsize", [](DType t) { return element_size(t); });
  for (int i = 0; i < kNumDTypes; ++i) m.attr(dtype_name(static_cast<DType>(i))) = static_cast<DType>(i);
  // torch's aliases
  m.attr("half") = kFloat16;
  m.attr("float") = kFloat32;
  m.attr("double") = kFloat64;
  m.attr("cfloat") = kComplex64;
  m.attr("long") = kInt64;
  m.attr("int") = kInt32;
  m.attr("short") = kInt16;
  m.def("promote_types", &promote_types, nb::arg("type1"), nb::arg("type2"));
}

void bind_device(nb::module_& m) {
  nb::class_<Device>(m, "device")
      .def(nb::init<const std::string&>(), nb::arg("type"))
      .def("__init__", [](Device* d, const std::string& type, int index) {
        new (d) Device(Device(type).type, index);
      }, nb::arg("type"), nb::arg("index"))
      .def_prop_ro("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_prop_ro("index", [](const Device& d) -> std::optional<int> {
        return d.is_cpu() ? std::nullopt : std::optional<int>(d.index);
      })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) {
        return d.is_cpu() ? std::string("device(type='cpu')")
                          : "device(type='cuda', index=" + std::to_string(d.index) + ")";
      })
      .def("__eq__", [](const Device& a, nb::handle b) {
        try {
          return a == device_arg(b);
        } catch (...) {
          return false;
        }
      })
      .def("__hash__", [](const Device& d) { return static_cast<int>(d.type) * 1024 + d.index; });
}

// anvil's typed errors as Python exceptions deriving from the built-in ones PyTorch raises.
void bind_errors(nb::module_& m) {
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  nb::exception<ShapeError>(m, "ShapeError", PyExc_ValueError);
  nb::exception<ValueError>(m, "ValueError", PyExc_ValueError);
  nb::exception<FormatError>(m, "FormatError", PyExc_ValueError);
  nb::exception<DTypeError>(m, "DTypeError", PyExc_TypeError);
  nb::exception<IndexError>(m, "IndexError", PyExc_IndexError);
  nb::exception<OutOfMemoryError>(m, "OutOfMemoryError", PyExc_MemoryError);
  nb::exception<DeviceError>(m, "DeviceError", PyExc_RuntimeError);
  nb::exception<LinAlgError>(m, "LinAlgError", PyExc_RuntimeError);
}

void bind_factories(nb::module_& m) {
  const auto kw = [](const char* name) { return nb::arg(name).none() = nb::none(); };
  using Sized = Tensor (*)(const Shape&, TensorOptions);
  const std::pair<const char*, Sized> sized[] = {
      {"empty", [](const Shape& s, TensorOptions o) { return empty(s, o); }},
      {"zeros", [](const Shape& s, TensorOptions o) { return zeros(s, o); }},
      {"ones", [](const Shape& s, TensorOptions o) { return ones(s, o); }},
      {"rand", [](const Shape& s, TensorOptions o) { return rand(s, o); }},
      {"randn", [](const Shape& s, TensorOptions o) { return randn(s, o); }}};
  for (const auto& [name, fn] : sized) {
    const std::string op = std::string("anvil.") + name;
    m.def(name, [op, fn = fn](nb::args size, std::optional<DType> dtype, nb::handle device) {
      return fn(shape_args(size, op.c_str()), options_of(dtype, device));
    }, nb::arg("size"), nb::kw_only(), kw("dtype"), kw("device"));
  }
  m.def("full", [](nb::handle size, nb::handle value, std::optional<DType> dtype, nb::handle device) {
    const std::optional<Scalar> v = scalar_arg(value);
    if (!v) throw nb::type_error("[anvil.full] fill_value must be a bool, int, float or complex");
    // torch: the dtype follows the fill value (bool, int64, float32, complex64) when not given.
    const DType t = dtype ? *dtype : v->default_dtype();
    return full(int_list(size, "anvil.full", "size"), *v, options_of(t, device));
  }, nb::arg("size"), nb::arg("fill_value"), nb::kw_only(), kw("dtype"), kw("device"));
  m.def("arange", [](nb::handle start, nb::handle end, nb::handle step, std::optional<DType> dtype, nb::handle device) {
    const auto s0 = scalar_arg(start), s1 = end.is_none() ? std::optional<Scalar>() : scalar_arg(end), st = scalar_arg(step);
    if (!s0 || (!end.is_none() && !s1) || !st) throw nb::type_error("[anvil.arange] start, end and step must be numbers");
    std::optional<TensorOptions> opts;
    if (dtype || !device.is_none()) {
      TensorOptions o = TensorOptions().device(device_arg(device));
      if (dtype) o = o.dtype(*dtype);
      else o = o.dtype((s0->is_integral() && (!s1 || s1->is_integral()) && st->is_integral()) ? kInt64 : kFloat32);
      opts = o;
    }
    return s1 ? arange(*s0, *s1, *st, opts) : arange(Scalar(int64_t{0}), *s0, *st, opts);
  }, nb::arg("start"), nb::arg("end").none() = nb::none(), nb::arg("step") = 1, nb::kw_only(), kw("dtype"), kw("device"));
  m.def("eye", [](int64_t n, std::optional<int64_t> mcols, std::optional<DType> dtype, nb::handle device) {
    return eye(n, mcols, options_of(dtype, device));
  }, nb::arg("n"), nb::arg("m").none() = nb::none(), nb::kw_only(), kw("dtype"), kw("device"));
  m.def("linspace", [](double start, double end, int64_t steps, std::optional<DType> dtype, nb::handle device) {
    return linspace(start, end, steps, options_of(dtype, device));
  }, nb::arg("start"), nb::arg("end"), nb::arg("steps"), nb::kw_only(), kw("dtype"), kw("device"));
  m.def("manual_seed", &manual_seed, nb::arg("seed"));
  m.def("load_file", [](const std::string& path, nb::handle device) {
    const Device dev = device_arg(device);
    const runtime::SafetensorsFile f(path);
    nb::dict out;
    for (const runtime::SafetensorsEntry& e : f.header().tensors)  // copies: the mapping is read-only
      out[nb::str(e.name.data(), e.name.size())] = dev.is_cpu() ? f.tensor(e).clone() : f.tensor(e).to(dev);
    return out;
  }, nb::arg("filename"), nb::arg("device") = "cpu",
        "A .safetensors file's tensors by name, as safetensors.torch.load_file.");
  m.def("cat", [](const std::vector<Tensor>& ts, int64_t dim) { return cat(ts, dim); }, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("stack", [](const std::vector<Tensor>& ts, int64_t dim) { return stack(ts, dim); }, nb::arg("tensors"), nb::arg("dim") = 0);
}

}  // namespace

}  // namespace anvil::python

NB_MODULE(_anvil, m) {
  using namespace anvil::python;
  m.doc() = "anvil: tensors and dedicated kernels for x86-64 CPUs and NVIDIA GPUs";
  m.attr("__version__") = anvil::version();
  m.def("get_num_threads", &anvil::get_num_threads);
  m.def("set_num_threads", &anvil::set_num_threads, nb::arg("n"));
  bind_errors(m);
  bind_dtypes(m);
  bind_device(m);
  nb::implicitly_convertible<std::string, anvil::Device>();
  nb::class_<anvil::Tensor> tensor_class = bind_tensor(m);
  bind_factories(m);
  bind_dlpack(m, tensor_class);
  bind_cuda(m, tensor_class);
  bind_linalg(m);
  bind_functional(m);
  bind_aten(m);
  bind_kernels(m);
  bind_ops(m, tensor_class);
  bind_llm(m);
  bind_vae(m);
}
