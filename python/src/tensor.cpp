// anvil.Tensor: properties, conversions, views, indexing, operators and the ops as methods.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"

namespace anvil::python {
namespace {


nb::object scalar_to_python(const Scalar& s) {
  if (s.is_bool()) return nb::bool_(s.to_bool());
  if (s.is_integral()) return nb::int_(s.to_int64());
  if (s.is_complex()) {
    const std::complex<double> c = s.to_complex();
    return nb::steal(PyComplex_FromDoubles(c.real(), c.imag()));
  }
  return nb::float_(s.to_double());
}

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t d : s) l.append(d);
  return nb::tuple(l);
}


// The promoted dtype of `t op s`, made floating for true division as torch does.
DType true_div_type(const Tensor& t, const Scalar& s) {
  const DType r = result_type(t, s);
  return is_floating_point(r) || is_complex(r) ? r : kFloat32;
}

// A binary operator with a tensor or a Python number on the right; NotImplemented otherwise, so
// Python tries the other operand's reflected method.
template <typename FT, typename FS>
nb::object binary(const Tensor& a, nb::handle b, FT with_tensor, FS with_scalar) {
  if (nb::isinstance<Tensor>(b)) return nb::cast(with_tensor(a, nb::cast<const Tensor&>(b)));
  if (const auto s = scalar_arg(b)) return nb::cast(with_scalar(a, *s));
  return nb::borrow(Py_NotImplemented);
}

// Python's index (negative from the end) bounds-checked against size, as torch raises.
int64_t wrap_index(int64_t i, int64_t size, int64_t dim) {
  if (i < -size || i >= size)
    throw nb::index_error(("[anvil.Tensor.__getitem__] index " + std::to_string(i) + " is out of bounds for dimension " +
                           std::to_string(dim) + " with size " + std::to_string(size))
                              .c_str());
  return i < 0 ? i + size : i;
}

// torch's rule for a mask index: the mask's shape is t's over dims [dim, dim + mask.dim()).
void check_mask_shape(const Tensor& t, int64_t dim, const Tensor& mask) {
  for (int64_t d = 0; d < mask.dim(); ++d)
    if (dim + d >= t.dim() || mask.size(d) != t.size(dim + d))
      throw nb::index_error(("[anvil.Tensor.__getitem__] the shape of the mask " + shape_str(mask.sizes()) +
                             " at index " + std::to_string(d) + " does not match the shape of the indexed tensor " +
                             shape_str(t.sizes()))
                                .c_str());
}

// The flat positions of a bool mask's true elements (row-major), the mask's shape checked first.
Tensor mask_positions(const Tensor& t, int64_t dim, const Tensor& mask) {
  check_mask_shape(t, dim, mask);
  return nonzero(mask.reshape({-1})).reshape({-1});
}

// t with dims [dim, dim + k) of a k-dim bool mask replaced by one dim of the masked positions.
Tensor masked_rows(const Tensor& t, int64_t dim, const Tensor& mask) {
  const Tensor rows = mask_positions(t, dim, mask);
  Shape s = t.sizes();
  const int64_t k = mask.dim();
  int64_t n = 1;
  for (int64_t d = 0; d < k; ++d) n *= s[static_cast<size_t>(dim + d)];
  s.erase(s.begin() + dim, s.begin() + dim + k);
  s.insert(s.begin() + dim, n);
  return index_select(t.reshape(s), dim, rows);
}

// t[mask] = value in place, the mask over t's leading dims: a number fills, a tensor (broadcast to
// [count, *rest]) is put at the masked elements.
void assign_masked(Tensor& t, const Tensor& mask, nb::handle value) {
  if (const auto s = scalar_arg(value)) {
    Shape ms = mask.sizes();
    ms.resize(static_cast<size_t>(t.dim()), 1);  // the mask over the leading dims, broadcast over the rest
    check_mask_shape(t, 0, mask);  // a fill needs no positions (no nonzero, no host read)
    t.copy_(masked_fill(t, mask.reshape(ms), *s));
    return;
  }
  if (!nb::isinstance<Tensor>(value))
    throw nb::type_error(("[anvil.Tensor.__setitem__] the value must be a tensor or a number, got " +
                          py_type_name(value)).c_str());
  const Tensor rows = mask_positions(t, 0, mask);
  Shape rest(t.sizes().begin() + mask.dim(), t.sizes().end()), target = rest;
  int64_t inner = 1;
  for (int64_t d : rest) inner *= d;
  target.insert(target.begin(), rows.size(0));
  const Tensor src = nb::cast<const Tensor&>(value).to(t.dtype()).expand(target).reshape({-1});
  const Tensor at = add(mul(rows.unsqueeze(1), inner), arange(Scalar(int64_t{0}), Scalar(inner), Scalar(int64_t{1}),
                                                              TensorOptions(kInt64).device(t.device())).unsqueeze(0));
  t.put_(at.reshape({-1}), src);
}

// t[key] for ints, bools, slices, None, Ellipsis, 1-d integer tensors (index_select), bool masks
// (nonzero + index_select) and tuples of them.
Tensor index(const Tensor& t, nb::handle key, bool for_write) {
  std::vector<nb::handle> items;
  if (nb::isinstance<nb::tuple>(key)) {
    for (nb::handle h : nb::borrow<nb::tuple>(key)) items.push_back(h);
  } else {
    items.push_back(key);
  }
  int64_t consumed = 0, ellipses = 0;
  for (nb::handle h : items) {
    if (h.is_none() || nb::isinstance<nb::bool_>(h)) continue;  // a bool adds a dim, as None
    if (h.ptr() == Py_Ellipsis) ++ellipses;
    else if (nb::isinstance<Tensor>(h) && nb::cast<const Tensor&>(h).dtype() == kBool)
      consumed += nb::cast<const Tensor&>(h).dim();  // a mask indexes as many dims as it has
    else ++consumed;
  }
  if (ellipses > 1) throw nb::index_error("[anvil.Tensor.__getitem__] an index can only have a single ellipsis ('...')");
  if (consumed > t.dim())
    throw nb::index_error(("[anvil.Tensor.__getitem__] too many indices for tensor of dimension " + std::to_string(t.dim()))
                              .c_str());
  Tensor r = t;
  int64_t dim = 0;
  for (nb::handle h : items) {
    if (h.is_none()) {
      r = r.unsqueeze(dim++);
    } else if (h.ptr() == Py_Ellipsis) {
      dim += t.dim() - consumed;
    } else if (nb::isinstance<nb::bool_>(h)) {  // True: a new dim of 1; False: of 0 (as torch)
      r = r.unsqueeze(dim).narrow(dim, 0, nb::cast<bool>(h) ? 1 : 0);
      ++dim;
    } else if (PySlice_Check(h.ptr())) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      if (step <= 0) throw nb::value_error("[anvil.Tensor.__getitem__] step must be greater than zero");
      PySlice_AdjustIndices(r.size(dim), &start, &stop, step);
      r = r.slice(dim, start, std::max<Py_ssize_t>(stop, start), step);
      ++dim;
    } else if (nb::isinstance<Tensor>(h)) {
      const Tensor& idx = nb::cast<const Tensor&>(h);
      if (for_write)
        throw nb::index_error("[anvil.Tensor.__setitem__] assignment through integer tensor indices, or a mask "
                              "among other indices, is not supported yet (a bool mask alone is)");
      if (idx.dtype() == kBool) {  // a mask over dims [dim, dim + k): one dim of its true positions
        r = masked_rows(r, dim, idx);
        ++dim;
        continue;
      }
      if (idx.dim() == 0 && is_integral(idx.dtype())) {  // as an int (one read of its value)
        r = r.select(dim, wrap_index(idx.item().to_int64(), r.size(dim), dim));
        continue;
      }
      if (idx.dim() != 1 || !is_integral(idx.dtype()))
        throw nb::index_error(("[anvil.Tensor.__getitem__] tensor indices must be 1-d integer tensors here, got " +
                               std::string(dtype_name(idx.dtype())) + " of shape " + shape_str(idx.sizes()))
                                  .c_str());
      r = index_select(r, dim++, idx.to(kInt64));
    } else if (is_int(h)) {
      r = r.select(dim, wrap_index(nb::cast<int64_t>(h), r.size(dim), dim));
    } else {
      throw nb::type_error(("[anvil.Tensor.__getitem__] indices must be ints, slices, None, Ellipsis or tensors, got " +
                            py_type_name(h))
                               .c_str());
    }
  }
  return r;
}

Tensor to_args(const Tensor& t, const nb::args& args, std::optional<DType> dtype, nb::handle device) {
  std::optional<DType> want_t = dtype;
  std::optional<Device> want_d;
  if (!device.is_none()) want_d = device_arg(device);
  for (nb::handle a : args) {
    if (nb::isinstance<DType>(a)) want_t = nb::cast<DType>(a);
    else if (nb::isinstance<Tensor>(a)) {
      want_t = nb::cast<const Tensor&>(a).dtype();
      want_d = nb::cast<const Tensor&>(a).device();
    } else want_d = device_arg(a);
  }
  if (want_t && want_d) return t.to(*want_d, *want_t);
  if (want_t) return t.to(*want_t);
  if (want_d) return t.to(*want_d);
  return t;
}

nb::object numpy_of(const Tensor& t) {
  if (!t.is_cpu())
    throw nb::type_error(("[anvil.Tensor.numpy] can't convert " + t.device().str() +
                          " device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
                             .c_str());
  const DType d = t.dtype();
  if (d == kBFloat16 || is_float8(d))
    throw nb::type_error((std::string("[anvil.Tensor.numpy] NumPy has no ") + dtype_name(d) +
                          " dtype; convert first, e.g. t.float().numpy()")
                             .c_str());
  return nb::module_::import_("numpy").attr("from_dlpack")(nb::cast(t));
}

// In-place forms (a += b, a.add_(b)): the op's result written into a, which must hold the promoted
// dtype's category as torch requires (no float into an integer tensor, no complex into a real one).
template <typename FT, typename FS>
Tensor& in_place(Tensor& a, nb::handle b, const char* op, FT with_tensor, FS with_scalar) {
  Tensor r;
  if (nb::isinstance<Tensor>(b)) r = with_tensor(a, nb::cast<const Tensor&>(b));
  else if (const auto s = scalar_arg(b)) r = with_scalar(a, *s);
  else throw nb::type_error((std::string("[anvil.Tensor.") + op + "] other must be a tensor or a number, got " + py_type_name(b)).c_str());
  const DType to = a.dtype(), from = r.dtype();
  const bool narrowing = (is_complex(from) && !is_complex(to)) ||
                         (is_floating_point(from) && !is_floating_point(to) && !is_complex(to)) ||
                         (from != kBool && to == kBool);
  if (narrowing)
    throw DTypeError(std::string("[") + op + "] result type " + dtype_name(from) +
                     " can't be cast to the desired output type " + dtype_name(to));
  return a.copy_(r.expand(a.sizes()));
}

}  // namespace

nb::class_<Tensor> bind_tensor(nb::module_& m) {
  using T = const Tensor&;
  nb::class_<Tensor> c(m, "Tensor");
  c.def_prop_ro("shape", [](T t) { return shape_tuple(t.sizes()); })
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("device", &Tensor::device)
      .def_prop_ro("ndim", &Tensor::dim)
      .def_prop_ro("is_cuda", &Tensor::is_cuda)
      .def_prop_ro("is_cpu", &Tensor::is_cpu)
      .def_prop_ro("itemsize", &Tensor::element_size)
      .def_prop_ro("nbytes", &Tensor::nbytes)
      .def("size", [](T t, std::optional<int64_t> dim) -> nb::object {
        return dim ? nb::cast(t.size(*dim)) : nb::object(shape_tuple(t.sizes()));
      }, nb::arg("dim").none() = nb::none())
      .def("stride", [](T t, std::optional<int64_t> dim) -> nb::object {
        return dim ? nb::cast(t.stride(*dim)) : nb::object(shape_tuple(t.strides()));
      }, nb::arg("dim").none() = nb::none())
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("storage_offset", &Tensor::storage_offset)
      .def("data_ptr", [](T t) { return reinterpret_cast<uintptr_t>(t.raw_data_ptr()); })
      .def("is_contiguous", [](T t) { return t.is_contiguous(); })
      .def("contiguous", [](T t) { return t.contiguous(); })
      .def("clone", &Tensor::clone)
      .def("to", &to_args, nb::arg("args"), nb::kw_only(), nb::arg("dtype").none() = nb::none(),
           nb::arg("device").none() = nb::none())
      .def("cpu", [](T t) { return t.to(Device(kCPU)); })
      .def("cuda", [](T t, int index) { return t.to(Device(kCUDA, index)); }, nb::arg("device") = 0)
      .def("float", [](T t) { return t.to(kFloat32); })
      .def("double", [](T t) { return t.to(kFloat64); })
      .def("half", [](T t) { return t.to(kFloat16); })
      .def("bfloat16", [](T t) { return t.to(kBFloat16); })
      .def("int", [](T t) { return t.to(kInt32); })
      .def("long", [](T t) { return t.to(kInt64); })
      .def("bool", [](T t) { return t.to(kBool); })
      .def("item", [](T t) { return scalar_to_python(t.item()); })
      .def("numpy", &numpy_of)
      .def("tolist", [](T t) {
        const Tensor h = t.to(Device(kCPU));
        return numpy_of(h.dtype() == kBFloat16 || is_float8(h.dtype()) ? h.to(kFloat32) : h).attr("tolist")();
      })
      .def("__array__", [](T t, nb::handle dtype, nb::handle copy) {
        nb::object a = numpy_of(t);
        return dtype.is_none() ? a : a.attr("astype")(dtype);
      }, nb::arg("dtype").none() = nb::none(), nb::arg("copy").none() = nb::none())
      .def("__repr__", [](T t) {  // torch's text, with anvil's dtype names
        std::string s = t.str();
        const std::string from = "dtype=torch.", to = "dtype=anvil.";
        for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at)) s.replace(at, from.size(), to);
        return s;
      })
      .def("__len__", [](T t) {
        if (t.dim() == 0) throw nb::type_error("[anvil.Tensor.__len__] len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__bool__", [](T t) {
        if (t.numel() != 1)
          throw nb::value_error("[anvil.Tensor.__bool__] Boolean value of Tensor with more than one value is ambiguous");
        return t.item().to_bool();
      })
      .def("__float__", [](T t) { return t.item().to_double(); })
      .def("__int__", [](T t) { return t.item().to_int64(); })
      .def("__index__", [](T t) {
        if (t.numel() != 1 || !is_integral(t.dtype(), true))
          throw nb::type_error("[anvil.Tensor.__index__] only integer tensors of a single element can be converted to an index");
        return t.item().to_int64();
      })
      // views
      .def("view", [](T t, nb::args s) { return t.view(shape_args(s, "anvil.Tensor.view")); })
      .def("reshape", [](T t, nb::args s) { return t.reshape(shape_args(s, "anvil.Tensor.reshape")); })
      .def("permute", [](T t, nb::args d) { return t.permute(shape_args(d, "anvil.Tensor.permute")); })
      .def("expand", [](T t, nb::args s) { return t.expand(shape_args(s, "anvil.Tensor.expand")); })
      .def("transpose", &Tensor::transpose, nb::arg("dim0"), nb::arg("dim1"))
      .def("t", &Tensor::t)
      .def_prop_ro("mT", [](T t) { return t.transpose(-2, -1); })
      .def_prop_ro("T", [](T t) {
        Shape d;
        for (int64_t i = t.dim() - 1; i >= 0; --i) d.push_back(i);
        return t.permute(d);
      })
      .def("squeeze", [](T t, std::optional<int64_t> dim) { return dim ? t.squeeze(*dim) : t.squeeze(); },
           nb::arg("dim").none() = nb::none())
      .def("unsqueeze", &Tensor::unsqueeze, nb::arg("dim"))
      .def("flatten", &Tensor::flatten, nb::arg("start_dim") = 0, nb::arg("end_dim") = -1)
      .def("narrow", &Tensor::narrow, nb::arg("dim"), nb::arg("start"), nb::arg("length"))
      .def("select", &Tensor::select, nb::arg("dim"), nb::arg("index"))
      .def("__getitem__", [](T t, nb::handle key) { return index(t, key, false); })
      .def("__setitem__", [](Tensor& t, nb::handle key, nb::handle value) {
        if (nb::isinstance<Tensor>(key) && nb::cast<const Tensor&>(key).dtype() == kBool) {
          assign_masked(t, nb::cast<const Tensor&>(key), value);
          return;
        }
        Tensor v = index(t, key, true);
        if (nb::isinstance<Tensor>(value)) v.copy_(nb::cast<const Tensor&>(value).expand(v.sizes()));
        else if (const auto s = scalar_arg(value)) v.fill_(*s);
        else throw nb::type_error(("[anvil.Tensor.__setitem__] the value must be a tensor or a number, got " + py_type_name(value)).c_str());
      })
      // in place
      .def("fill_", [](Tensor& t, nb::handle v) -> Tensor& {
        const auto s = scalar_arg(v);
        if (!s) throw nb::type_error("[anvil.Tensor.fill_] the value must be a number");
        return t.fill_(*s);
      }, nb::rv_policy::reference)
      .def("zero_", &Tensor::zero_, nb::rv_policy::reference)
      .def("copy_", [](Tensor& t, T src) -> Tensor& { return t.copy_(src); }, nb::arg("src"), nb::rv_policy::reference);

  // Operators and their methods. Reflected forms of non-commutative ops build the number as a
  // tensor of the promoted dtype (torch's wrapped-number rule decides the dtype).
// A binary op's (tensor, tensor) and (tensor, number) forms, for binary().
#define ANVIL_PY_BOTH(fn) [](T x, T y) { return fn(x, y); }, [](T x, const Scalar& s) { return fn(x, s); }
  // number - t, number / t, number ** t: the number as a tensor of the promoted dtype.
  using Op = Tensor (*)(const Tensor&, const Tensor&);
  using Rule = DType (*)(const Tensor&, const Scalar&);
  const auto reflected = [&](const char* py, Op op, Rule rule) {
    c.def(py, [op, rule](T a, nb::handle b) -> nb::object {
      if (nb::isinstance<Tensor>(b)) return nb::cast(op(nb::cast<const Tensor&>(b), a));
      if (const auto s = scalar_arg(b)) return nb::cast(op(full(a.sizes(), *s, TensorOptions(rule(a, *s)).device(a.device())), a));
      return nb::borrow(Py_NotImplemented);
    }, nb::is_operator());
  };
  const Rule promoted = [](T a, const Scalar& s) { return result_type(a, s); };
  reflected("__rsub__", [](T x, T y) { return sub(x, y); }, promoted);
  reflected("__rtruediv__", [](T x, T y) { return div(x, y); }, &true_div_type);
  reflected("__rpow__", [](T x, T y) { return pow(x, y); }, promoted);
  c      .def("__matmul__", [](T a, T b) { return matmul(a, b); }, nb::is_operator())
      .def("__neg__", [](T a) { return neg(a); })
      .def("__abs__", [](T a) { return abs(a); })
      .def("__invert__", [](T a) {
        if (a.dtype() != kBool) throw nb::type_error("[anvil.Tensor.__invert__] ~ is supported for bool tensors only here");
        return logical_not(a);
      })
      .def("__and__", [](T a, T b) { return logical_and(a, b); }, nb::is_operator())
      .def("__or__", [](T a, T b) { return logical_or(a, b); }, nb::is_operator());
#define ANVIL_PY_OPERATOR(py, fn) c.def(py, [](T a, nb::handle b) { return binary(a, b, ANVIL_PY_BOTH(fn)); }, nb::is_operator());
  ANVIL_PY_OPERATOR("__add__", add)
  ANVIL_PY_OPERATOR("__radd__", add)
  ANVIL_PY_OPERATOR("__sub__", sub)
  ANVIL_PY_OPERATOR("__mul__", mul)
  ANVIL_PY_OPERATOR("__rmul__", mul)
  ANVIL_PY_OPERATOR("__truediv__", div)
  ANVIL_PY_OPERATOR("__pow__", pow)
  ANVIL_PY_OPERATOR("__eq__", eq)
  ANVIL_PY_OPERATOR("__ne__", ne)
  ANVIL_PY_OPERATOR("__lt__", lt)
  ANVIL_PY_OPERATOR("__le__", le)
  ANVIL_PY_OPERATOR("__gt__", gt)
  ANVIL_PY_OPERATOR("__ge__", ge)
#define ANVIL_PY_IN_PLACE(py, name, fn)                                                                         \
  c.def(py, [](Tensor& a, nb::handle b) -> Tensor& { return in_place(a, b, name, ANVIL_PY_BOTH(fn)); }, \
        nb::rv_policy::reference);
  ANVIL_PY_IN_PLACE("__iadd__", "add_", add)
  ANVIL_PY_IN_PLACE("add_", "add_", add)
  ANVIL_PY_IN_PLACE("__isub__", "sub_", sub)
  ANVIL_PY_IN_PLACE("sub_", "sub_", sub)
  ANVIL_PY_IN_PLACE("__imul__", "mul_", mul)
  ANVIL_PY_IN_PLACE("mul_", "mul_", mul)
  ANVIL_PY_IN_PLACE("__itruediv__", "div_", div)
  ANVIL_PY_IN_PLACE("div_", "div_", div)
#undef ANVIL_PY_IN_PLACE
  c.attr("__hash__") = nb::none();
  c.attr("__array_priority__") = 1000;  // NumPy defers to the reflected operators (np_scalar + t), as for torch

  // Ops as methods and module functions (torch's names).
  const auto reduce = [&](const char* name, auto fn) {
    auto f = [=](T t, std::optional<nb::object> dim, bool keepdim) {
      return fn(t, !dim || dim->is_none() ? Shape{} : int_list(*dim, name, "dim"), keepdim);
    };
    c.def(name, f, nb::arg("dim").none() = nb::none(), nb::arg("keepdim") = false);
    m.def(name, f, nb::arg("input"), nb::arg("dim").none() = nb::none(), nb::arg("keepdim") = false);
  };
  reduce("sum", [](T t, const Shape& d, bool k) { return sum(t, d, k); });
  reduce("mean", [](T t, const Shape& d, bool k) { return mean(t, d, k); });
  reduce("amax", [](T t, const Shape& d, bool k) { return amax(t, d, k); });
  reduce("amin", [](T t, const Shape& d, bool k) { return amin(t, d, k); });
  const auto unary = [&](const char* name, Tensor (*fn)(const Tensor&)) {
    c.def(name, fn);
    m.def(name, fn, nb::arg("input"));
  };
  const std::pair<const char*, Tensor (*)(const Tensor&)> unaries[] = {
      {"abs", &abs}, {"neg", &neg}, {"exp", &exp}, {"log", &log}, {"sqrt", &sqrt}, {"rsqrt", &rsqrt},
      {"sigmoid", &sigmoid}, {"tanh", &tanh}, {"conj_physical", &conj_physical}, {"real", &real}, {"imag", &imag}, {"view_as_real", &view_as_real}};
  for (const auto& [name, fn] : unaries) unary(name, fn);
  const auto arg_dim = [&](const char* name, Tensor (*fn)(const Tensor&, std::optional<int64_t>, bool)) {
    c.def(name, fn, nb::arg("dim").none() = nb::none(), nb::arg("keepdim") = false);
    m.def(name, fn, nb::arg("input"), nb::arg("dim").none() = nb::none(), nb::arg("keepdim") = false);
  };
  arg_dim("argmax", &argmax);
  arg_dim("argmin", &argmin);
  // anvil.special (torch.special's names): the functions anvil has.
  nb::module_ special = m.def_submodule("special", "anvil.special");
  special.def("laguerre_polynomial_l", [](nb::handle x, nb::handle n) -> Tensor {
    const bool xt = nb::isinstance<Tensor>(x), nt = nb::isinstance<Tensor>(n);
    const auto xs = xt ? std::nullopt : scalar_arg(x), ns = nt ? std::nullopt : scalar_arg(n);
    if (xt && nt) return special_laguerre_polynomial_l(nb::cast<const Tensor&>(x), nb::cast<const Tensor&>(n));
    if (xt && ns) return special_laguerre_polynomial_l(nb::cast<const Tensor&>(x), *ns);
    if (xs && nt) return special_laguerre_polynomial_l(*xs, nb::cast<const Tensor&>(n));
    throw nb::type_error("[anvil.special.laguerre_polynomial_l] x and n: tensors or numbers, at least one a tensor");
  }, nb::arg("input"), nb::arg("n"));
  c.def("matmul", [](T a, T b) { return matmul(a, b); });
  m.def("matmul", [](T a, T b) { return matmul(a, b); }, nb::arg("input"), nb::arg("other"));
  m.def("where", [](T cond, T a, T b) { return where(cond, a, b); }, nb::arg("condition"), nb::arg("input"), nb::arg("other"));
  m.def("tril", &tril, nb::arg("input"), nb::arg("diagonal") = 0);
  m.def("triu", &triu, nb::arg("input"), nb::arg("diagonal") = 0);
  const auto bin_fn = [&](const char* name, auto tt, auto ts) {
    auto f = [=](T a, nb::handle b) {
      nb::object r = binary(a, b, tt, ts);
      if (r.is(nb::borrow(Py_NotImplemented)))
        throw nb::type_error((std::string("[anvil.") + name + "] other must be a tensor or a number, got " + py_type_name(b)).c_str());
      return r;
    };
    c.def(name, f, nb::arg("other"));
    m.def(name, f, nb::arg("input"), nb::arg("other"));
  };
  bin_fn("add", ANVIL_PY_BOTH(add));
  bin_fn("sub", ANVIL_PY_BOTH(sub));
  bin_fn("mul", ANVIL_PY_BOTH(mul));
  bin_fn("div", ANVIL_PY_BOTH(div));
  bin_fn("pow", ANVIL_PY_BOTH(pow));
  bin_fn("eq", ANVIL_PY_BOTH(eq));
  bin_fn("ne", ANVIL_PY_BOTH(ne));
  bin_fn("lt", ANVIL_PY_BOTH(lt));
  bin_fn("le", ANVIL_PY_BOTH(le));
  bin_fn("gt", ANVIL_PY_BOTH(gt));
  bin_fn("ge", ANVIL_PY_BOTH(ge));
#undef ANVIL_PY_OPERATOR
#undef ANVIL_PY_BOTH
  return c;
}

}  // namespace anvil::python
