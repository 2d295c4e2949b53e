// anvil.nn.functional: torch.nn.functional's names, argument order and keywords over anvil's ops.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "anvil/conv.h"
#include "anvil/dropout.h"
#include "anvil/loss.h"
#include "anvil/nn.h"
#include "anvil/norm.h"
#include "anvil/pad.h"
#include "anvil/upsample.h"
#include "bindings.h"

namespace anvil::python {
namespace {

// conv{1,2,3}d: padding an int / sequence or "same" / "valid".
template <Tensor (*Ints)(const Tensor&, const Tensor&, const Tensor&, const Shape&, const Shape&, const Shape&, int64_t),
          Tensor (*Named)(const Tensor&, const Tensor&, const Tensor&, const Shape&, const ConvPadding&, const Shape&,
                          int64_t)>
void def_conv(nb::module_& f, const char* name) {
  f.def(name, [name](const Tensor& input, const Tensor& weight, const OptTensor& bias, nb::handle stride,
                     nb::handle padding, nb::handle dilation, int64_t groups) {
    const Shape st = int_list(stride, name, "stride"), dil = int_list(dilation, name, "dilation");
    if (nb::isinstance<nb::str>(padding))
      return Named(input, weight, or_undefined(bias), st, ConvPadding(nb::cast<std::string>(padding)), dil, groups);
    return Ints(input, weight, or_undefined(bias), st, int_list(padding, name, "padding"), dil, groups);
  }, nb::arg("input"), nb::arg("weight"), nb::arg("bias").none() = nb::none(), nb::arg("stride") = 1,
        nb::arg("padding") = 0, nb::arg("dilation") = 1, nb::arg("groups") = 1);
}

template <Tensor (*Fn)(const Tensor&, const Tensor&, const Tensor&, const Shape&, const Shape&, const Shape&, int64_t,
                       const Shape&)>
void def_conv_transpose(nb::module_& f, const char* name) {
  f.def(name, [name](const Tensor& input, const Tensor& weight, const OptTensor& bias, nb::handle stride,
                     nb::handle padding, nb::handle output_padding, int64_t groups, nb::handle dilation) {
    return Fn(input, weight, or_undefined(bias), int_list(stride, name, "stride"), int_list(padding, name, "padding"),
              int_list(output_padding, name, "output_padding"), groups, int_list(dilation, name, "dilation"));
  }, nb::arg("input"), nb::arg("weight"), nb::arg("bias").none() = nb::none(), nb::arg("stride") = 1,
        nb::arg("padding") = 0, nb::arg("output_padding") = 0, nb::arg("groups") = 1, nb::arg("dilation") = 1);
}

}  // namespace

Reduction reduction_arg(nb::handle r, const char* op, bool aten_ints) {
  if (nb::isinstance<nb::str>(r)) {
    const std::string name = nb::cast<std::string>(r);
    if (name == "mean") return Reduction::Mean;
    if (name == "sum") return Reduction::Sum;
    if (name == "none") return Reduction::None;
    throw nb::value_error((std::string("[") + op + "] " + name + " is not a valid value for reduction").c_str());
  }
  if (aten_ints && is_int(r)) {  // at::Reduction's values
    const int64_t v = nb::cast<int64_t>(r);
    if (v == 0) return Reduction::None;
    if (v == 1) return Reduction::Mean;
    if (v == 2) return Reduction::Sum;
    throw nb::value_error((std::string("[") + op + "] reduction " + std::to_string(v) +
                           " is not 0 (none), 1 (mean) or 2 (sum)").c_str());
  }
  throw nb::type_error((std::string("[") + op + "] reduction must be " + (aten_ints ? "a str or an int" : "a str") +
                        ", not " + py_type_name(r)).c_str());
}

void bind_functional(nb::module_& m) {
  using T = const Tensor&;
  nb::module_ nn = m.def_submodule("nn", "anvil.nn");
  nb::module_ f = nn.def_submodule("functional", "anvil.nn.functional: torch.nn.functional's names over anvil's ops");

  f.def("linear", [](T x, T w, const OptTensor& b) { return linear(x, w, or_undefined(b)); }, nb::arg("input"),
        nb::arg("weight"), nb::arg("bias").none() = nb::none());
  f.def("softmax", &softmax, nb::arg("input"), nb::arg("dim"), nb::kw_only(), nb::arg("dtype").none() = nb::none());
  f.def("log_softmax", &log_softmax, nb::arg("input"), nb::arg("dim"), nb::kw_only(),
        nb::arg("dtype").none() = nb::none());
  f.def("silu", &silu, nb::arg("input"));
  f.def("sigmoid", &sigmoid, nb::arg("input"));
  f.def("tanh", &tanh, nb::arg("input"));
  f.def("gelu", &gelu, nb::arg("input"), nb::kw_only(), nb::arg("approximate") = "none");
  f.def("rms_norm", [](T x, nb::handle shape, const OptTensor& w, std::optional<double> eps) {
    return rms_norm(x, int_list(shape, "rms_norm", "normalized_shape"), or_undefined(w), eps);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none() = nb::none(),
        nb::arg("eps").none() = nb::none());
  f.def("layer_norm", [](T x, nb::handle shape, const OptTensor& w, const OptTensor& b, double eps) {
    return layer_norm(x, int_list(shape, "layer_norm", "normalized_shape"), or_undefined(w), or_undefined(b), eps);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none() = nb::none(),
        nb::arg("bias").none() = nb::none(), nb::arg("eps") = 1e-5);
  f.def("group_norm", [](T x, int64_t groups, const OptTensor& w, const OptTensor& b, double eps) {
    return group_norm(x, groups, or_undefined(w), or_undefined(b), eps);
  }, nb::arg("input"), nb::arg("num_groups"), nb::arg("weight").none() = nb::none(),
        nb::arg("bias").none() = nb::none(), nb::arg("eps") = 1e-5);
  f.def("batch_norm", [](T x, const OptTensor& mean, const OptTensor& var, const OptTensor& w, const OptTensor& b,
                         bool training, std::optional<double> momentum, double eps) {
    return batch_norm(x, or_undefined(w), or_undefined(b), or_undefined(mean), or_undefined(var), training, momentum, eps);
  }, nb::arg("input"), nb::arg("running_mean").none(), nb::arg("running_var").none(),
        nb::arg("weight").none() = nb::none(), nb::arg("bias").none() = nb::none(), nb::arg("training") = false,
        nb::arg("momentum").none() = 0.1, nb::arg("eps") = 1e-5);
  f.def("normalize", &normalize, nb::arg("input"), nb::arg("p") = 2.0, nb::arg("dim") = 1, nb::arg("eps") = 1e-12);
  f.def("scaled_dot_product_attention", [](T q, T k, T v, const OptTensor& mask, double dropout_p, bool causal,
                                           std::optional<double> scale, bool gqa) {
    return scaled_dot_product_attention(q, k, v, or_undefined(mask), dropout_p, causal, scale, gqa);
  }, nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("attn_mask").none() = nb::none(),
        nb::arg("dropout_p") = 0.0, nb::arg("is_causal") = false, nb::kw_only(), nb::arg("scale").none() = nb::none(),
        nb::arg("enable_gqa") = false);
  f.def("pad", [](T x, nb::handle p, const std::string& mode, std::optional<double> value) {
    return pad(x, int_list(p, "pad", "pad"), mode, value);
  }, nb::arg("input"), nb::arg("pad"), nb::arg("mode") = "constant", nb::arg("value").none() = nb::none());
  f.def("interpolate", [](T x, nb::handle size, nb::handle scale, const std::string& mode,
                          std::optional<bool> align_corners, std::optional<bool> recompute) {
    std::optional<Shape> s;
    if (!size.is_none()) s = int_list(size, "interpolate", "size");
    std::optional<std::vector<double>> sf;
    if (!scale.is_none()) {
      std::vector<double> v;
      if (nb::isinstance<nb::sequence>(scale)) {
        for (nb::handle d : nb::iter(scale)) v.push_back(nb::cast<double>(d));
      } else {
        v.push_back(nb::cast<double>(scale));
      }
      sf = v;
    }
    return interpolate(x, s, sf, mode, align_corners, recompute);
  }, nb::arg("input"), nb::arg("size").none() = nb::none(), nb::arg("scale_factor").none() = nb::none(),
        nb::arg("mode") = "nearest", nb::arg("align_corners").none() = nb::none(),
        nb::arg("recompute_scale_factor").none() = nb::none());
  f.def("dropout", [](T x, double p, bool training) { return dropout(x, p, training); }, nb::arg("input"),
        nb::arg("p") = 0.5, nb::arg("training") = true);
  def_conv<&conv1d, &conv1d>(f, "conv1d");
  def_conv<&conv2d, &conv2d>(f, "conv2d");
  def_conv<&conv3d, &conv3d>(f, "conv3d");
  def_conv_transpose<&conv_transpose1d>(f, "conv_transpose1d");
  def_conv_transpose<&conv_transpose2d>(f, "conv_transpose2d");
  def_conv_transpose<&conv_transpose3d>(f, "conv_transpose3d");
  f.def("mse_loss", [](T x, T y, nb::handle r) { return mse_loss(x, y, reduction_arg(r, "mse_loss", false)); },
        nb::arg("input"), nb::arg("target"), nb::kw_only(), nb::arg("reduction") = "mean");
  f.def("l1_loss", [](T x, T y, nb::handle r) { return l1_loss(x, y, reduction_arg(r, "l1_loss", false)); },
        nb::arg("input"), nb::arg("target"), nb::kw_only(), nb::arg("reduction") = "mean");
  f.def("nll_loss", [](T x, T y, const OptTensor& w, int64_t ignore, nb::handle r) {
    return nll_loss(x, y, or_undefined(w), reduction_arg(r, "nll_loss", false), ignore);
  }, nb::arg("input"), nb::arg("target"), nb::arg("weight").none() = nb::none(), nb::kw_only(),
        nb::arg("ignore_index") = -100, nb::arg("reduction") = "mean");
  f.def("cross_entropy", [](T x, T y, const OptTensor& w, int64_t ignore, nb::handle r, double smoothing) {
    return cross_entropy(x, y, or_undefined(w), reduction_arg(r, "cross_entropy", false), ignore, smoothing);
  }, nb::arg("input"), nb::arg("target"), nb::arg("weight").none() = nb::none(), nb::kw_only(),
        nb::arg("ignore_index") = -100, nb::arg("reduction") = "mean", nb::arg("label_smoothing") = 0.0);

  // FP8 (PyTorch 2.15's F.scaled_mm and its ScalingType) and grouped products for MoE.
  nb::enum_<ScalingType>(f, "ScalingType")
      .value("TensorWise", ScalingType::TensorWise)
      .value("RowWise", ScalingType::RowWise)
      .value("BlockWise1x16", ScalingType::BlockWise1x16)
      .value("BlockWise1x32", ScalingType::BlockWise1x32)
      .value("BlockWise1x128", ScalingType::BlockWise1x128)
      .value("BlockWise128x128", ScalingType::BlockWise128x128);
  f.def("scaled_mm", [](T a, T b, T scale_a, ScalingType recipe_a, T scale_b, ScalingType recipe_b,
                        const OptTensor& bias, DType output_dtype) {
    return scaled_mm(a, b, scale_a, recipe_a, scale_b, recipe_b, or_undefined(bias), output_dtype);
  }, nb::arg("mat_a"), nb::arg("mat_b"), nb::arg("scale_a"), nb::arg("scale_recipe_a"), nb::arg("scale_b"),
        nb::arg("scale_recipe_b"), nb::kw_only(), nb::arg("bias").none() = nb::none(),
        nb::arg("output_dtype") = kBFloat16);
  f.def("grouped_mm", [](T a, T b, const OptTensor& offs, std::optional<DType> out_dtype) {
    return grouped_mm(a, b, or_undefined(offs), out_dtype);
  }, nb::arg("mat_a"), nb::arg("mat_b"), nb::kw_only(), nb::arg("offs").none() = nb::none(),
        nb::arg("out_dtype").none() = nb::none());
  // anvil's FP8 quantiser (the scales scaled_mm takes): (q, scale).
  f.def("quantize_fp8", [](T x, ScalingType recipe, DType dtype) {
    auto [q, scale] = quantize_fp8(x, recipe, dtype);
    return nb::make_tuple(q, scale);
  },
        nb::arg("input"), nb::arg("recipe") = ScalingType::RowWise, nb::arg("dtype") = kFloat8_e4m3fn);
}

}  // namespace anvil::python
