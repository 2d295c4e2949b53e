// The rest of anvil's tensor ops under torch's names, as Tensor methods and anvil.* functions:
// clamp, maximum / minimum, logical ops, max / min with indices, prod, var / std (and _mean),
// topk, gather / scatter / index_select / take / put / masked_fill, mm / bmm, frexp, heaviside,
// bincount, the *_like factories, randint, logspace; F.embedding and FP8's grouped / dequantise ops.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "bindings.h"

namespace anvil::python {
namespace {

using T = const Tensor&;

std::optional<Scalar> number_or_none(nb::handle h, const char* op, const char* name) {
  if (h.is_none()) return std::nullopt;
  std::optional<Scalar> s = scalar_arg(h);
  if (!s) throw nb::type_error((std::string("[") + op + "] " + name + " must be a number or None, got " + py_type_name(h)).c_str());
  return s;
}

Shape dims_or_all(nb::handle dim, const char* op) { return dim.is_none() ? Shape{} : int_list(dim, op, "dim"); }

// Factories of t's shape: t's dtype and device unless given.
TensorOptions like(T t, std::optional<DType> dtype, nb::handle device) {
  return TensorOptions(dtype.value_or(t.dtype())).device(device_arg(device, t.device()));
}

}  // namespace

void bind_ops(nb::module_& m, nb::class_<Tensor>& c) {
  static const Named& max_t = *new Named("max", {"values", "indices"});
  static const Named& min_t = *new Named("min", {"values", "indices"});
  static const Named& topk_t = *new Named("topk", {"values", "indices"});
  static const Named& frexp_t = *new Named("frexp", {"mantissa", "exponent"});
  const auto none = [](const char* name) { return nb::arg(name).none() = nb::none(); };
  // A method and a module function of one signature (the function takes `input` first).
  const auto both = [&](const char* name, auto fn, auto... args) {
    c.def(name, fn, args...);
    m.def(name, fn, nb::arg("input"), args...);
  };

  // clamp / clip: numbers or tensors for min and max (torch's two overloads).
  auto clamp_fn = [](T x, nb::handle lo, nb::handle hi) {
    const bool lt = nb::isinstance<Tensor>(lo), ht = nb::isinstance<Tensor>(hi);
    if (lt || ht) {
      if (!(lt || lo.is_none()) || !(ht || hi.is_none()))
        throw nb::type_error("[anvil.clamp] min and max: both tensors (or None), or both numbers (or None)");
      const Tensor l = lt ? nb::cast<Tensor>(lo) : Tensor(), h = ht ? nb::cast<Tensor>(hi) : Tensor();
      if (!l.defined()) return minimum(x, h);
      if (!h.defined()) return maximum(x, l);
      return clamp(x, l, h);
    }
    const std::optional<Scalar> a = number_or_none(lo, "anvil.clamp", "min"), b = number_or_none(hi, "anvil.clamp", "max");
    if (!a && !b) throw ValueError("[anvil.clamp] at least one of min and max must not be None");
    return clamp(x, a, b);
  };
  both("clamp", clamp_fn, none("min"), none("max"));
  both("clip", clamp_fn, none("min"), none("max"));
  both("maximum", [](T a, T b) { return maximum(a, b); }, nb::arg("other"));
  both("minimum", [](T a, T b) { return minimum(a, b); }, nb::arg("other"));
  both("logical_and", &logical_and, nb::arg("other"));
  both("logical_or", &logical_or, nb::arg("other"));
  both("logical_not", &logical_not);
  both("heaviside", &heaviside, nb::arg("values"));
  both("frexp", [](T x) { return frexp_t(frexp(x)); });

  // Reductions: max / min as torch (no dim: the 0-d extreme; a dim: (values, indices)).
  both("max", [](T x, std::optional<int64_t> dim, bool keepdim) -> nb::object {
    if (!dim) return nb::cast(max(x));
    return max_t(max(x, *dim, keepdim));
  }, none("dim"), nb::arg("keepdim") = false);
  both("min", [](T x, std::optional<int64_t> dim, bool keepdim) -> nb::object {
    if (!dim) return nb::cast(min(x));
    return min_t(min(x, *dim, keepdim));
  }, none("dim"), nb::arg("keepdim") = false);
  both("prod", [](T x, nb::handle dim, bool keepdim, std::optional<DType> dtype) {
    return prod(x, dims_or_all(dim, "anvil.prod"), keepdim, dtype);
  }, none("dim"), nb::arg("keepdim") = false, nb::kw_only(), none("dtype"));
  both("var", [](T x, nb::handle dim, double correction, bool keepdim) {
    return var(x, dims_or_all(dim, "anvil.var"), correction, keepdim);
  }, none("dim"), nb::kw_only(), nb::arg("correction") = 1.0, nb::arg("keepdim") = false);
  both("std", [](T x, nb::handle dim, double correction, bool keepdim) {
    return std(x, dims_or_all(dim, "anvil.std"), correction, keepdim);
  }, none("dim"), nb::kw_only(), nb::arg("correction") = 1.0, nb::arg("keepdim") = false);
  m.def("var_mean", [](T x, nb::handle dim, double correction, bool keepdim) {
    return var_mean(x, dims_or_all(dim, "anvil.var_mean"), correction, keepdim);
  }, nb::arg("input"), none("dim"), nb::kw_only(), nb::arg("correction") = 1.0, nb::arg("keepdim") = false);
  m.def("std_mean", [](T x, nb::handle dim, double correction, bool keepdim) {
    return std_mean(x, dims_or_all(dim, "anvil.std_mean"), correction, keepdim);
  }, nb::arg("input"), none("dim"), nb::kw_only(), nb::arg("correction") = 1.0, nb::arg("keepdim") = false);
  both("topk", [](T x, int64_t k, int64_t dim, bool largest, bool sorted) {
    return topk_t(topk(x, k, dim, largest, sorted));
  }, nb::arg("k"), nb::arg("dim") = -1, nb::arg("largest") = true, nb::arg("sorted") = true);

  // Indexing ops.
  both("index_select", &index_select, nb::arg("dim"), nb::arg("index"));
  both("gather", &gather, nb::arg("dim"), nb::arg("index"));
  both("scatter", [](T x, int64_t dim, T index, nb::handle src) {
    if (nb::isinstance<Tensor>(src)) return scatter(x, dim, index, nb::cast<const Tensor&>(src));
    const std::optional<Scalar> v = scalar_arg(src);
    if (!v) throw nb::type_error("[anvil.scatter] src must be a tensor or a number");
    return scatter(x, dim, index, *v);
  }, nb::arg("dim"), nb::arg("index"), nb::arg("src"));
  both("scatter_add", &scatter_add, nb::arg("dim"), nb::arg("index"), nb::arg("src"));
  both("take", &take, nb::arg("index"));
  both("put", &put, nb::arg("index"), nb::arg("source"), nb::arg("accumulate") = false);
  c.def("put_", [](Tensor& x, T index, T source, bool accumulate) -> Tensor& {
    return x.copy_(put(x, index, source, accumulate));
  }, nb::arg("index"), nb::arg("source"), nb::arg("accumulate") = false, nb::rv_policy::reference);
  const auto fill_value = [](nb::handle v) {
    const std::optional<Scalar> s = scalar_arg(v);
    if (!s) throw nb::type_error("[anvil.masked_fill] value must be a number");
    return *s;
  };
  both("masked_fill", [=](T x, T mask, nb::handle v) { return masked_fill(x, mask, fill_value(v)); }, nb::arg("mask"),
       nb::arg("value"));
  c.def("masked_fill_", [=](Tensor& x, T mask, nb::handle v) -> Tensor& {
    return x.copy_(masked_fill(x, mask, fill_value(v)));
  }, nb::arg("mask"), nb::arg("value"), nb::rv_policy::reference);
  both("nonzero", [](T x, bool as_tuple) -> nb::object {
    const Tensor nz = nonzero(x);
    if (!as_tuple) return nb::cast(nz);
    nb::list cols;  // one 1-d index tensor per dim; a 0-d input gives one of zeros, as torch
    if (x.dim() == 0) cols.append(zeros({nz.size(0)}, TensorOptions(kInt64).device(x.device())));
    for (int64_t d = 0; d < x.dim(); ++d) cols.append(nz.select(1, d));
    return nb::tuple(cols);
  }, nb::kw_only(), nb::arg("as_tuple") = false);
  both("argwhere", [](T x) { return nonzero(x); });
  both("masked_select", &masked_select, nb::arg("mask"));
  both("bincount", [](T x, const std::optional<Tensor>& w, int64_t minlength) {
    return bincount(x, w.value_or(Tensor()), minlength);
  }, none("weights"), nb::arg("minlength") = 0);

  // Products.
  both("mm", &mm, nb::arg("mat2"));
  both("bmm", [](T a, T b) { return bmm(a, b); }, nb::arg("mat2"));

  // Factories.
  m.def("zeros_like", [](T t, std::optional<DType> d, nb::handle dev) { return zeros(t.sizes(), like(t, d, dev)); },
        nb::arg("input"), nb::kw_only(), none("dtype"), none("device"));
  m.def("ones_like", [](T t, std::optional<DType> d, nb::handle dev) { return ones(t.sizes(), like(t, d, dev)); },
        nb::arg("input"), nb::kw_only(), none("dtype"), none("device"));
  m.def("empty_like", [](T t, std::optional<DType> d, nb::handle dev) { return empty(t.sizes(), like(t, d, dev)); },
        nb::arg("input"), nb::kw_only(), none("dtype"), none("device"));
  m.def("full_like", [](T t, nb::handle v, std::optional<DType> d, nb::handle dev) {
    const std::optional<Scalar> s = scalar_arg(v);
    if (!s) throw nb::type_error("[anvil.full_like] fill_value must be a number");
    return full(t.sizes(), *s, like(t, d, dev));
  }, nb::arg("input"), nb::arg("fill_value"), nb::kw_only(), none("dtype"), none("device"));
  m.def("rand_like", [](T t, std::optional<DType> d, nb::handle dev) { return rand(t.sizes(), like(t, d, dev)); },
        nb::arg("input"), nb::kw_only(), none("dtype"), none("device"));
  m.def("randn_like", [](T t, std::optional<DType> d, nb::handle dev) { return randn(t.sizes(), like(t, d, dev)); },
        nb::arg("input"), nb::kw_only(), none("dtype"), none("device"));
  // randint(high, size) or randint(low, high, size), as torch.
  m.def("randint", [](nb::args args, std::optional<DType> dtype, nb::handle device) {
    if (args.size() != 2 && args.size() != 3)
      throw nb::type_error("[anvil.randint] expected randint(high, size) or randint(low, high, size)");
    const bool low_given = args.size() == 3;
    if (!is_int(args[0]) || (low_given && !is_int(args[1])))
      throw nb::type_error("[anvil.randint] low and high must be ints");
    const int64_t low = low_given ? nb::cast<int64_t>(args[0]) : 0;
    const int64_t high = nb::cast<int64_t>(args[low_given ? 1 : 0]);
    return randint(low, high, int_list(args[args.size() - 1], "anvil.randint", "size"),
                   options_of(dtype, device, kInt64));
  }, nb::arg("args"), nb::kw_only(), none("dtype"), none("device"));
  m.def("logspace", [](double start, double end, int64_t steps, double base, std::optional<DType> dtype,
                       nb::handle device) { return logspace(start, end, steps, base, options_of(dtype, device)); },
        nb::arg("start"), nb::arg("end"), nb::arg("steps"), nb::arg("base") = 10.0, nb::kw_only(), none("dtype"),
        none("device"));

  // anvil.nn.functional: embedding and the FP8 ops beyond scaled_mm.
  nb::module_ f = nb::borrow<nb::module_>(m.attr("nn").attr("functional"));
  f.def("embedding", [](T input, T weight) { return embedding(weight, input); }, nb::arg("input"), nb::arg("weight"));
  f.def("scaled_grouped_mm", [](T a, T b, T scale_a, T scale_b, T offs, std::optional<DType> out_dtype) {
    return scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype.value_or(kBFloat16));
  }, nb::arg("mat_a"), nb::arg("mat_b"), nb::arg("scale_a"), nb::arg("scale_b"), nb::arg("offs"),
        nb::kw_only(), none("out_dtype"),
        "Float8 rows of mat_a by group (offs, on the device) times each group's float8 mat_b, row-wise scales.");
  f.def("dequantize_fp8", [](T w, T scale, nb::handle block, std::optional<DType> dtype) {
    return dequantize_fp8(w, scale, int_list(block, "anvil.dequantize_fp8", "block"), dtype.value_or(kBFloat16));
  }, nb::arg("weight"), nb::arg("scale"), nb::arg("block"), nb::kw_only(), none("dtype"),
        "A float8 weight [..., n, k] times its block scales [..., ceil(n / bn), ceil(k / bk)] (block = (bn, bk)), "
        "as the Hub's FP8 checkpoints store them; dtype None: bfloat16.");
}

}  // namespace anvil::python
