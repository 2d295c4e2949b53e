#pragma once
// anvil's Python bindings (nanobind): the helpers the files share and each file's bind_ function.
#include <nanobind/nanobind.h>

#include <nanobind/stl/tuple.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "anvil/anvil.h"

namespace anvil::python {

namespace nb = nanobind;

// A collections.namedtuple type (torch.return_types' field names), made once at import: keep it in
// a never-freed static (a Python object must not be released after the interpreter finalised).
struct Named {
  nb::object type;
  Named(const char* name, std::vector<const char*> fields) {
    nb::list f;
    for (const char* s : fields) f.append(s);
    type = nb::module_::import_("collections").attr("namedtuple")(name, f);
  }
  template <typename... Ts>
  nb::object operator()(const std::tuple<Ts...>& values) const {
    return std::apply([&](const auto&... v) { return type(nb::cast(v)...); }, values);
  }
};

// An int argument: a Python int or anything whose __index__ gives one (NumPy's integers), not a bool.
inline bool is_int(nb::handle h) {
  if (PyBool_Check(h.ptr())) return false;
  if (PyLong_Check(h.ptr())) return true;
  if (!PyIndex_Check(h.ptr())) return false;
  PyObject* v = PyNumber_Index(h.ptr());  // a float array's __index__ raises: not an int
  if (!v) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(v);
  return true;
}
// A device argument: an anvil.device, "cpu" / "cuda" / "cuda:1", or None (the fallback).
Device device_arg(nb::handle h, Device fallback = kCPU);
// A Python bool / int / float / complex as a Scalar; nullopt for anything else.
std::optional<Scalar> scalar_arg(nb::handle h);
// A Python object's type name, for error messages.
inline std::string py_type_name(nb::handle h) { return nb::cast<std::string>(nb::str(h.type().attr("__name__"))); }
// A progress argument: True / False as given; None draws progress when sys.stderr is a terminal
// (tqdm's rule, as the CLI).
inline bool show_progress(std::optional<bool> progress) {
  if (progress) return *progress;
  nb::object err = nb::module_::import_("sys").attr("stderr");
  return !err.is_none() && nb::hasattr(err, "isatty") && nb::cast<bool>(err.attr("isatty")());
}
// FileNotFoundError (as transformers' and diffusers' from_pretrained) unless `path` is a folder.
inline void require_folder(const std::string& path, const char* op) {
  if (nb::cast<bool>(nb::module_::import_("os.path").attr("isdir")(path))) return;
  PyErr_SetString(PyExc_FileNotFoundError, (std::string(op) + " " + path + " is not a folder").c_str());
  throw nb::python_error();
}
// One int, or a sequence of ints (torch's int-or-tuple arguments: sizes, dims, strides).
Shape int_list(nb::handle h, const char* op, const char* name);
// A shape from ints given one by one (f(2, 3)) or as one sequence (f((2, 3)), f([2, 3])).
Shape shape_args(const nb::args& args, const char* op);
// TensorOptions from the dtype / device keywords (the defaults: float32 on the CPU).
TensorOptions options_of(std::optional<DType> dtype, nb::handle device, DType fallback = kFloat32);

// An optional tensor argument (None) as the C++ API's undefined Tensor.
using OptTensor = std::optional<Tensor>;
inline Tensor or_undefined(const OptTensor& t) { return t ? *t : Tensor(); }
// A reduction argument: F's name ("mean", "sum", "none"), or with aten_ints aten's int (1, 2, 0).
Reduction reduction_arg(nb::handle r, const char* op, bool aten_ints = true);

nb::class_<Tensor> bind_tensor(nb::module_& m);
void bind_dlpack(nb::module_& m, nb::class_<Tensor>& tensor_class);
void bind_linalg(nb::module_& m);
void bind_functional(nb::module_& m);
void bind_cuda(nb::module_& m, nb::class_<Tensor>& tensor_class);
void bind_ops(nb::module_& m, nb::class_<Tensor>& tensor_class);
void bind_llm(nb::module_& m);
void bind_vae(nb::module_& m);
void bind_aten(nb::module_& m);
void bind_kernels(nb::module_& m);  // after bind_aten: anvil.ops exists

}  // namespace anvil::python
