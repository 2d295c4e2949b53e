// anvil.ops.aten: torch.ops.aten's names, argument order and results for the training ops' native
// forms and their backward functions. anvil has no autograd: a training step calls the backward
// functions itself, as a hand-written torch.autograd.Function's backward would. The functions
// PyTorch names at the top level (torch.native_layer_norm, torch.convolution, ...) are there too.
// Beside them, anvil's own backward functions with no aten name (rms_norm, upsample, the losses,
// the linear algebra's), under the names of anvil's C++ API.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "anvil/conv.h"
#include "anvil/dropout.h"
#include "anvil/linalg.h"
#include "anvil/loss.h"
#include "anvil/norm.h"
#include "anvil/pad.h"
#include "anvil/upsample.h"
#include "bindings.h"

namespace anvil::python {
namespace {

using T = const Tensor&;
// A gradient that output_mask left out (an undefined Tensor) is None, as aten's Tensor? results.
nb::object or_none(const Tensor& t) { return t.defined() ? nb::cast(t) : nb::none(); }
template <typename... Ts>
nb::tuple or_none(const std::tuple<Ts...>& ts) {
  return std::apply([](const auto&... t) { return nb::make_tuple(or_none(t)...); }, ts);
}

// scales of upsample: None, or one optional float per spatial dim.
std::vector<std::optional<double>> scales_arg(const std::optional<std::vector<std::optional<double>>>& s) {
  return s ? *s : std::vector<std::optional<double>>{};
}

template <Tensor (*Fn)(T, const Shape&)>
void def_pad(nb::module_& a, const char* name) {
  a.def(name, [name](T x, nb::handle p) { return Fn(x, int_list(p, name, "padding")); }, nb::arg("input"),
        nb::arg("padding"));
}
template <Tensor (*Fn)(T, T, const Shape&)>
void def_pad_backward(nb::module_& a, const char* name) {
  a.def(name, [name](T g, T x, nb::handle p) { return Fn(g, x, int_list(p, name, "padding")); },
        nb::arg("grad_output"), nb::arg("input"), nb::arg("padding"));
}

}  // namespace

void bind_aten(nb::module_& m) {
  nb::module_ ops = m.def_submodule("ops", "anvil.ops: torch.ops' namespaces");
  nb::module_ a = ops.def_submodule("aten", "anvil.ops.aten: the native forms and backward functions of the "
                                              "training ops (anvil has no autograd)");
  using Mask3 = std::array<bool, 3>;
  const Mask3 all3{true, true, true};

  // Normalisations: (output, mean, rstd) forward; (grad_input, grad_weight, grad_bias) backward.
  a.def("native_layer_norm", [](T x, nb::handle shape, const OptTensor& w, const OptTensor& b, double eps) {
    return native_layer_norm(x, int_list(shape, "native_layer_norm", "normalized_shape"), or_undefined(w),
                             or_undefined(b), eps);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps"));
  a.def("native_layer_norm_backward", [](T g, T x, nb::handle shape, T mean, T rstd, const OptTensor& w,
                                         const OptTensor& b, Mask3 mask) {
    return or_none(native_layer_norm_backward(g, x, int_list(shape, "native_layer_norm_backward", "normalized_shape"),
                                              mean, rstd, or_undefined(w), or_undefined(b), mask));
  }, nb::arg("grad_out"), nb::arg("input"), nb::arg("normalized_shape"), nb::arg("mean"), nb::arg("rstd"),
        nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("output_mask") = all3);
  a.def("native_group_norm", [](T x, const OptTensor& w, const OptTensor& b, int64_t n, int64_t c, int64_t hxw,
                                int64_t group, double eps) {
    return native_group_norm(x, or_undefined(w), or_undefined(b), n, c, hxw, group, eps);
  }, nb::arg("input"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("N"), nb::arg("C"), nb::arg("HxW"),
        nb::arg("group"), nb::arg("eps"));
  a.def("native_group_norm_backward", [](T g, T x, T mean, T rstd, const OptTensor& w, int64_t n, int64_t c,
                                         int64_t hxw, int64_t group, Mask3 mask) {
    return or_none(native_group_norm_backward(g, x, mean, rstd, or_undefined(w), n, c, hxw, group, mask));
  }, nb::arg("grad_out"), nb::arg("input"), nb::arg("mean"), nb::arg("rstd"), nb::arg("weight").none(), nb::arg("N"),
        nb::arg("C"), nb::arg("HxW"), nb::arg("group"), nb::arg("output_mask") = all3);
  a.def("native_batch_norm", [](T x, const OptTensor& w, const OptTensor& b, const OptTensor& rm,
                                const OptTensor& rv, bool training, double momentum, double eps) {
    return native_batch_norm(x, or_undefined(w), or_undefined(b), or_undefined(rm), or_undefined(rv), training,
                             momentum, eps);
  }, nb::arg("input"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("running_mean").none(),
        nb::arg("running_var").none(), nb::arg("training"), nb::arg("momentum"), nb::arg("eps"));
  a.def("native_batch_norm_backward", [](T g, T x, const OptTensor& w, const OptTensor& rm, const OptTensor& rv,
                                         const OptTensor& save_mean, const OptTensor& save_invstd, bool train,
                                         double eps, Mask3 mask) {
    return or_none(native_batch_norm_backward(g, x, or_undefined(w), or_undefined(rm), or_undefined(rv),
                                              or_undefined(save_mean), or_undefined(save_invstd), train, eps, mask));
  }, nb::arg("grad_out"), nb::arg("input"), nb::arg("weight").none(), nb::arg("running_mean").none(),
        nb::arg("running_var").none(), nb::arg("save_mean").none(), nb::arg("save_invstd").none(), nb::arg("train"),
        nb::arg("eps"), nb::arg("output_mask") = all3);
  // anvil's (aten has _fused_rms_norm_backward, which takes the saved rstd): (grad_input, grad_weight).
  a.def("rms_norm_backward", [](T g, T x, nb::handle shape, const OptTensor& w, std::optional<double> eps,
                                std::array<bool, 2> mask) {
    return or_none(rms_norm_backward(g, x, int_list(shape, "rms_norm_backward", "normalized_shape"), or_undefined(w),
                                     eps, mask));
  }, nb::arg("grad_out"), nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none() = nb::none(),
        nb::arg("eps").none() = nb::none(), nb::arg("output_mask") = std::array<bool, 2>{true, true});

  // Dropout: (output, mask); the backward is grad_output * mask * scale.
  a.def("native_dropout", &native_dropout, nb::arg("input"), nb::arg("p"), nb::arg("train").none());
  a.def("native_dropout_backward", &native_dropout_backward, nb::arg("grad_output"), nb::arg("mask"),
        nb::arg("scale"));

  // Convolution, every dimensionality, transposed or not.
  a.def("convolution", [](T x, T w, const OptTensor& b, nb::handle stride, nb::handle padding, nb::handle dilation,
                          bool transposed, nb::handle output_padding, int64_t groups) {
    const char* op = "convolution";
    return convolution(x, w, or_undefined(b), int_list(stride, op, "stride"), int_list(padding, op, "padding"),
                       int_list(dilation, op, "dilation"), transposed, int_list(output_padding, op, "output_padding"),
                       groups);
  }, nb::arg("input"), nb::arg("weight"), nb::arg("bias").none(), nb::arg("stride"), nb::arg("padding"),
        nb::arg("dilation"), nb::arg("transposed"), nb::arg("output_padding"), nb::arg("groups"));
  a.def("convolution_backward", [](T g, T x, T w, nb::handle bias_sizes, nb::handle stride, nb::handle padding,
                                   nb::handle dilation, bool transposed, nb::handle output_padding, int64_t groups,
                                   Mask3 mask) {
    const char* op = "convolution_backward";
    const Shape bias = bias_sizes.is_none() ? Shape{} : int_list(bias_sizes, op, "bias_sizes");
    return or_none(convolution_backward(g, x, w, bias, int_list(stride, op, "stride"), int_list(padding, op, "padding"),
                                        int_list(dilation, op, "dilation"), transposed,
                                        int_list(output_padding, op, "output_padding"), groups, mask));
  }, nb::arg("grad_output"), nb::arg("input"), nb::arg("weight"), nb::arg("bias_sizes").none(), nb::arg("stride"),
        nb::arg("padding"), nb::arg("dilation"), nb::arg("transposed"), nb::arg("output_padding"), nb::arg("groups"),
        nb::arg("output_mask") = all3);

  // Upsampling, every mode by name (aten splits it into upsample_nearest2d, upsample_bilinear2d, ...).
  using OptScales = std::optional<std::vector<std::optional<double>>>;
  a.def("upsample", [](T x, nb::handle size, const std::string& mode, bool align_corners, const OptScales& s) {
    return upsample(x, int_list(size, "upsample", "output_size"), mode, align_corners, scales_arg(s));
  }, nb::arg("input"), nb::arg("output_size"), nb::arg("mode"), nb::arg("align_corners") = false,
        nb::arg("scales").none() = nb::none());
  a.def("upsample_backward", [](T g, nb::handle size, nb::handle input_size, const std::string& mode,
                                bool align_corners, const OptScales& s) {
    return upsample_backward(g, int_list(size, "upsample_backward", "output_size"),
                             int_list(input_size, "upsample_backward", "input_size"), mode, align_corners,
                             scales_arg(s));
  }, nb::arg("grad_output"), nb::arg("output_size"), nb::arg("input_size"), nb::arg("mode"),
        nb::arg("align_corners") = false, nb::arg("scales").none() = nb::none());

  // Padding: constant, reflection, replication, circular, with their backward functions.
  a.def("constant_pad_nd", [](T x, nb::handle p, nb::handle value) {
    const std::optional<Scalar> v = scalar_arg(value);
    if (!v) throw nb::type_error(("[constant_pad_nd] value must be a number, not " + py_type_name(value)).c_str());
    return constant_pad_nd(x, int_list(p, "constant_pad_nd", "pad"), *v);
  }, nb::arg("input"), nb::arg("pad"), nb::arg("value") = 0);
  a.def("constant_pad_nd_backward", [](T g, nb::handle p) {
    return constant_pad_nd_backward(g, int_list(p, "constant_pad_nd_backward", "pad"));
  }, nb::arg("grad_output"), nb::arg("pad"));
  a.def("_pad_circular", [](T x, nb::handle p) { return pad_circular(x, int_list(p, "_pad_circular", "pad")); },
        nb::arg("input"), nb::arg("pad"));
  a.def("pad_circular_backward", [](T g, nb::handle p) {
    return pad_circular_backward(g, int_list(p, "pad_circular_backward", "pad"));
  }, nb::arg("grad_output"), nb::arg("pad"));
  def_pad<&reflection_pad1d>(a, "reflection_pad1d");
  def_pad<&reflection_pad2d>(a, "reflection_pad2d");
  def_pad<&reflection_pad3d>(a, "reflection_pad3d");
  def_pad<&replication_pad1d>(a, "replication_pad1d");
  def_pad<&replication_pad2d>(a, "replication_pad2d");
  def_pad<&replication_pad3d>(a, "replication_pad3d");
  def_pad_backward<&reflection_pad1d_backward>(a, "reflection_pad1d_backward");
  def_pad_backward<&reflection_pad2d_backward>(a, "reflection_pad2d_backward");
  def_pad_backward<&reflection_pad3d_backward>(a, "reflection_pad3d_backward");
  def_pad_backward<&replication_pad1d_backward>(a, "replication_pad1d_backward");
  def_pad_backward<&replication_pad2d_backward>(a, "replication_pad2d_backward");
  def_pad_backward<&replication_pad3d_backward>(a, "replication_pad3d_backward");

  // Losses' backward functions; reduction as aten's int (0 none, 1 mean, 2 sum) or F's name.
  a.def("mse_loss_backward", [](T g, T x, T y, nb::handle r) {
    return mse_loss_backward(g, x, y, reduction_arg(r, "mse_loss_backward"));
  }, nb::arg("grad_output"), nb::arg("input"), nb::arg("target"), nb::arg("reduction"));
  a.def("l1_loss_backward", [](T g, T x, T y, nb::handle r) {
    return l1_loss_backward(g, x, y, reduction_arg(r, "l1_loss_backward"));
  }, nb::arg("grad_output"), nb::arg("input"), nb::arg("target"), nb::arg("reduction"));
  // aten's nll_loss_backward also takes the forward's total_weight; anvil's computes it from target
  // and weight, so its argument list ends at ignore_index.
  a.def("nll_loss_backward", [](T g, T x, T y, const OptTensor& w, nb::handle r, int64_t ignore) {
    return nll_loss_backward(g, x, y, or_undefined(w), reduction_arg(r, "nll_loss_backward"), ignore);
  }, nb::arg("grad_output"), nb::arg("input"), nb::arg("target"), nb::arg("weight").none() = nb::none(),
        nb::arg("reduction") = 1, nb::arg("ignore_index") = -100);
  a.def("cross_entropy_backward", [](T g, T x, T y, const OptTensor& w, nb::handle r, int64_t ignore,
                                     double smoothing) {
    return cross_entropy_backward(g, x, y, or_undefined(w), reduction_arg(r, "cross_entropy_backward"), ignore,
                                  smoothing);
  }, nb::arg("grad_output"), nb::arg("input"), nb::arg("target"), nb::arg("weight").none() = nb::none(),
        nb::arg("reduction") = 1, nb::arg("ignore_index") = -100, nb::arg("label_smoothing") = 0.0);

  // The linear algebra's backward functions (PyTorch's autograd formulas; gradients as torch's).
  a.def("det_backward", &linalg::det_backward, nb::arg("grad"), nb::arg("A"), nb::arg("det"));
  a.def("inv_backward", &linalg::inv_backward, nb::arg("grad"), nb::arg("inverse"));
  a.def("solve_backward", &linalg::solve_backward, nb::arg("grad"), nb::arg("A"), nb::arg("B"), nb::arg("X"),
        nb::kw_only(), nb::arg("left") = true);
  a.def("lu_solve_backward", &linalg::lu_solve_backward, nb::arg("grad"), nb::arg("LU"), nb::arg("pivots"),
        nb::arg("B"), nb::arg("X"), nb::kw_only(), nb::arg("left") = true, nb::arg("adjoint") = false);
  a.def("solve_triangular_backward", &linalg::solve_triangular_backward, nb::arg("grad"), nb::arg("A"), nb::arg("B"),
        nb::arg("X"), nb::kw_only(), nb::arg("upper"), nb::arg("left") = true, nb::arg("unitriangular") = false);
  a.def("cholesky_backward", &linalg::cholesky_backward, nb::arg("grad"), nb::arg("L"), nb::kw_only(),
        nb::arg("upper") = false);
  a.def("qr_backward", [](const OptTensor& gq, const OptTensor& gr, T q, T r, std::string_view mode) {
    return linalg::qr_backward(or_undefined(gq), or_undefined(gr), q, r, mode);
  }, nb::arg("grad_Q").none(), nb::arg("grad_R").none(), nb::arg("Q"), nb::arg("R"), nb::kw_only(),
        nb::arg("mode") = "reduced");
  a.def("svd_backward", [](const OptTensor& gu, const OptTensor& gs, const OptTensor& gvh, T u, T s, T vh) {
    return linalg::svd_backward(or_undefined(gu), or_undefined(gs), or_undefined(gvh), u, s, vh);
  }, nb::arg("grad_U").none(), nb::arg("grad_S").none(), nb::arg("grad_Vh").none(), nb::arg("U"), nb::arg("S"),
        nb::arg("Vh"));

  // What torch has at its top level too.
  for (const char* name : {"native_layer_norm", "native_group_norm", "native_batch_norm", "native_dropout",
                           "constant_pad_nd", "convolution"})
    m.attr(name) = a.attr(name);
}

}  // namespace anvil::python
