// interpolate, upsample, upsample_backward (anvil/upsample.h): PyTorch's argument and shape rules,
// the per-axis scales, the layout (the input's suggested memory format) and the kernel call.
#include <cmath>

#include "anvil/upsample.h"
#include "core/kernels/upsample.h"
#include "core/util.h"

namespace anvil {
namespace {

struct Mode {
  UpsampleMode kind;
  int spatial;  // the spatial rank the mode needs (0: nearest modes take 1-3)
};

Mode parse_mode(const char* op, const std::string& mode) {
  if (mode == "nearest") return {UpsampleMode::Nearest, 0};
  if (mode == "nearest-exact") return {UpsampleMode::NearestExact, 0};
  if (mode == "linear") return {UpsampleMode::Linear, 1};
  if (mode == "bilinear") return {UpsampleMode::Linear, 2};
  if (mode == "trilinear") return {UpsampleMode::Linear, 3};
  if (mode == "bicubic") return {UpsampleMode::Cubic, 2};
  throw Error(detail::cat_message(op, " mode '", mode,
                                  "' is not supported: nearest | nearest-exact | linear | bilinear | bicubic | trilinear"));
}

// "H: 3, W: 5"-style extents, as PyTorch's upsample shape checks print them.
std::string axes_str(const Shape& s) {
  static const char* names3[] = {"D", "H", "W"};
  std::string r;
  const size_t k = s.size();
  for (size_t i = 0; i < k; ++i) r += std::string(i ? ", " : "") + names3[3 - k + i] + ": " + std::to_string(s[i]);
  return r;
}

void check_rank(const char* op, const Tensor& x, const Mode& m, const std::string& mode) {
  const int64_t d = x.dim();
  ANVIL_CHECK(d >= 3 && d <= 5, ShapeError, op, " Input Error: Only 3D, 4D and 5D input Tensors supported (got ", d,
              "D) for the modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact (got ", mode, ")");
  ANVIL_CHECK(m.spatial == 0 || m.spatial == d - 2, ShapeError, op, " Got ", d, "D input, but ", mode, " mode needs ",
              m.spatial + 2, "D input");
}

UpsampleAxis make_axis(const Mode& m, bool align_corners, int64_t in, int64_t out, std::optional<double> scale) {
  UpsampleAxis a;
  a.in = in;
  a.out = out;
  const bool given = scale.has_value() && *scale > 0;
  if (m.kind != UpsampleMode::Nearest && m.kind != UpsampleMode::NearestExact && align_corners) {
    a.scale_f = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
    a.scale_d = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  } else {
    a.scale_f = given ? static_cast<float>(1.0 / *scale) : static_cast<float>(in) / static_cast<float>(out);
    a.scale_d = given ? 1.0 / *scale : static_cast<double>(in) / static_cast<double>(out);
  }
  a.copy = m.kind == UpsampleMode::Linear && in == out;
  return a;
}

// Checks the dtype and extents and fills the params of a call whose input side has
// `in_sizes` [N, C, *] and output side `out_spatial`; the tensors are the caller's.
UpsampleParams make_params(const char* op, DType dtype, const Mode& m, const Shape& in_sizes, const Shape& out_spatial,
                           bool align_corners, const std::vector<std::optional<double>>& scales) {
  ANVIL_CHECK(is_floating_point(dtype) && !is_float8(dtype), DTypeError, op, " \"upsample\" not implemented for '",
              dtype_name(dtype), "' (float16, bfloat16, float32, float64)");
  const size_t k = in_sizes.size() - 2;
  ANVIL_CHECK(out_spatial.size() == k, ShapeError, op, " It is expected output_size equals to ", k,
              ", but got size ", out_spatial.size());
  ANVIL_CHECK(scales.empty() || scales.size() == k, ShapeError, op, " expected ", k, " scales (one per spatial dim), got ",
              scales.size());
  const Shape in_spatial(in_sizes.begin() + 2, in_sizes.end());
  bool positive = true;
  for (size_t i = 0; i < k; ++i) positive &= in_spatial[i] > 0 && out_spatial[i] > 0;
  ANVIL_CHECK(positive, ShapeError, op, " Input and output sizes should be greater than 0, but got input (",
              axes_str(in_spatial), ") output (", axes_str(out_spatial), ")");
  ANVIL_CHECK(in_sizes[1] > 0, ShapeError, op, " Non-empty ", k + 2, "D data tensor expected but got a tensor with sizes ",
              shape_str(in_sizes));
  UpsampleParams p;
  p.dtype = dtype;
  p.mode = m.kind;
  p.align_corners = align_corners;
  p.n = in_sizes[0];
  p.c = in_sizes[1];
  for (size_t i = 0; i < 3 - k; ++i) p.axis[i].single = true;
  for (size_t i = 0; i < k; ++i)
    p.axis[3 - k + i] = make_axis(m, align_corners, in_spatial[i], out_spatial[i], scales.empty() ? std::nullopt : scales[i]);
  return p;
}

}  // namespace

Tensor upsample(const Tensor& input, const Shape& output_size, const std::string& mode, bool align_corners,
                const std::vector<std::optional<double>>& scales) {
  const char* op = "[upsample]";
  ANVIL_CHECK(input.defined(), Error, op, " undefined tensor");
  const Mode m = parse_mode(op, mode);
  check_rank(op, input, m, mode);
  UpsampleParams p = make_params(op, input.dtype(), m, input.sizes(), output_size, align_corners, scales);
  const MemoryFormat fmt = input.suggest_memory_format();
  Shape out_sizes{input.size(0), input.size(1)};
  out_sizes.insert(out_sizes.end(), output_size.begin(), output_size.end());
  Tensor out = empty(out_sizes, TensorOptions(input.dtype()).device(input.device()), fmt);
  if (out.numel() == 0) return out;
  const Tensor x = input.contiguous(fmt);
  p.src = x.raw_data_ptr();
  p.dst = out.raw_data_ptr();
  p.channels_last = fmt != MemoryFormat::Contiguous;
  ANVIL_KERNEL(input.device(), upsample, p);
  return out;
}

Tensor upsample_backward(const Tensor& grad_output, const Shape& output_size, const Shape& input_size,
                         const std::string& mode, bool align_corners, const std::vector<std::optional<double>>& scales) {
  const char* op = "[upsample_backward]";
  ANVIL_CHECK(grad_output.defined(), Error, op, " undefined tensor");
  const Mode m = parse_mode(op, mode);
  ANVIL_CHECK(input_size.size() >= 3 && input_size.size() <= 5 &&
                  (m.spatial == 0 || m.spatial + 2 == static_cast<int>(input_size.size())),
              ShapeError, op, " input_size ", shape_str(input_size), " does not fit mode ", mode);
  UpsampleParams p = make_params(op, grad_output.dtype(), m, input_size, output_size, align_corners, scales);
  Shape want{input_size[0], input_size[1]};
  want.insert(want.end(), output_size.begin(), output_size.end());
  ANVIL_CHECK(grad_output.sizes() == want, ShapeError, op, " Expected grad_output to have the shape of the output ",
              shape_str(want), " but got grad_output ", describe(grad_output));
  const MemoryFormat fmt = input_size.size() >= 4 ? grad_output.suggest_memory_format() : MemoryFormat::Contiguous;
  Tensor grad_input = empty(input_size, TensorOptions(grad_output.dtype()).device(grad_output.device()), fmt);
  if (grad_input.numel() == 0) return grad_input;
  const Tensor g = grad_output.contiguous(fmt);
  p.src = g.raw_data_ptr();
  p.dst = grad_input.raw_data_ptr();
  p.channels_last = fmt != MemoryFormat::Contiguous;
  ANVIL_KERNEL(g.device(), upsample_backward, p);
  return grad_input;
}

Tensor interpolate(const Tensor& input, const std::optional<Shape>& size,
                   const std::optional<std::vector<double>>& scale_factor, const std::string& mode,
                   std::optional<bool> align_corners, std::optional<bool> recompute_scale_factor) {
  const char* op = "[interpolate]";
  ANVIL_CHECK(input.defined(), Error, op, " undefined tensor");
  const Mode m = parse_mode(op, mode);
  const bool nearest = m.kind == UpsampleMode::Nearest || m.kind == UpsampleMode::NearestExact;
  ANVIL_CHECK(!(nearest && align_corners.has_value()), Error, op,
              " align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear");
  ANVIL_CHECK(input.dim() >= 3, ShapeError, op, " Input Error: Only 3D, 4D and 5D input Tensors supported (got ",
              input.dim(), "D) for the modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact (got ",
              mode, ")");
  const size_t k = static_cast<size_t>(input.dim() - 2);
  const Shape spatial(input.sizes().begin() + 2, input.sizes().end());
  ANVIL_CHECK(!(size && scale_factor), Error, op, " only one of size or scale_factor should be defined");
  ANVIL_CHECK(size || scale_factor, Error, op, " either size or scale_factor should be defined");
  Shape out_size;
  std::vector<std::optional<double>> scales;
  if (size) {
    ANVIL_CHECK(!recompute_scale_factor.value_or(false), Error, op,
                " recompute_scale_factor is not meaningful with an explicit size.");
    ANVIL_CHECK(size->size() == k || size->size() == 1, ShapeError, op,
                " Input and output must have the same number of spatial dimensions, but got input with spatial dimensions of ",
                shape_str(spatial), " and output size of ", shape_str(*size),
                ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format.");
    out_size = size->size() == k ? *size : Shape(k, (*size)[0]);
  } else {
    ANVIL_CHECK(scale_factor->size() == k || scale_factor->size() == 1, ShapeError, op,
                " Input and scale_factor must have the same number of spatial dimensions, but got input with spatial dimensions of ",
                shape_str(spatial), " and scale_factor of shape ", scale_factor->size(),
                ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format.");
    for (size_t i = 0; i < k; ++i) {
      const double s = scale_factor->size() == k ? (*scale_factor)[i] : (*scale_factor)[0];
      out_size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(spatial[i]) * s)));
      if (!recompute_scale_factor.value_or(false)) scales.push_back(s);
    }
  }
  check_rank(op, input, m, mode);
  return as_op(op, [&] { return upsample(input, out_size, mode, align_corners.value_or(false), scales); });
}

}  // namespace anvil
