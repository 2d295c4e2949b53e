// Padding: constant_pad_nd, F.pad's routing, reflection / replication / circular padding and
// every backward. Validation (PyTorch 2.15's rules and messages) happens here once; both
// directions then run one gather kernel per backend over the same per-dim index maps.
#include "anvil/pad.h"

#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "core/kernels/pad.h"
#include "core/util.h"

namespace anvil {
namespace {

// (before, after) of every dim of an ndim-d tensor from a pad list that starts at the last dim.
struct Pads {
  Shape before, after;
};
Pads pads_of(int64_t ndim, const Shape& pad) {
  Pads p{Shape(static_cast<size_t>(ndim), 0), Shape(static_cast<size_t>(ndim), 0)};
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const size_t d = static_cast<size_t>(ndim) - 1 - i;
    p.before[d] = pad[2 * i];
    p.after[d] = pad[2 * i + 1];
  }
  return p;
}

Shape padded_sizes(const Shape& sizes, const Pads& p) {
  Shape out(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) out[d] = sizes[d] + p.before[d] + p.after[d];
  return out;
}

// The kernel's view of a pad between input geometry (sizes / strides of `in`) and output
// geometry: size-1 dims that stay 1 dropped, dims ordered by the output's strides (innermost
// last, so a thread's neighbours are memory neighbours), unpadded neighbours that are dense in
// both merged into one.
PadParams make_params(const Tensor& in, const Tensor& out, const Pads& p, PadMode mode) {
  struct Dim {
    PadDim d;
    int64_t in_stride, out_stride;
  };
  std::vector<Dim> dims;
  for (size_t d = 0; d < in.sizes().size(); ++d) {
    const PadDim pd{in.sizes()[d], out.sizes()[d], p.before[d]};
    if (pd.in == 1 && pd.out == 1) continue;
    dims.push_back({pd, in.strides()[d], out.strides()[d]});
  }
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.out_stride > b.out_stride; });
  std::vector<Dim> merged;
  for (const Dim& x : dims) {
    if (!merged.empty()) {
      Dim& m = merged.back();
      const bool unpadded = m.d.before == 0 && m.d.in == m.d.out && x.d.before == 0 && x.d.in == x.d.out;
      if (unpadded && m.in_stride == x.in_stride * x.d.in && m.out_stride == x.out_stride * x.d.out) {
        m.d.in *= x.d.in;
        m.d.out = m.d.in;
        m.in_stride = x.in_stride;
        m.out_stride = x.out_stride;
        continue;
      }
    }
    merged.push_back(x);
  }
  if (merged.empty()) merged.push_back({PadDim{1, 1, 0}, 1, 1});  // one element: kernels always see a dim
  PadParams k;
  k.mode = mode;
  k.dtype = in.dtype();
  k.ndim = static_cast<int>(merged.size());
  for (size_t d = 0; d < merged.size(); ++d) {
    k.dims[d] = merged[d].d;
    k.in_strides[d] = merged[d].in_stride;
    k.out_strides[d] = merged[d].out_stride;
  }
  k.in_numel = in.numel();
  k.out_numel = out.numel();
  return k;
}

// Runs the forward into a new tensor of `format`.
Tensor run_pad(const Tensor& x, const Pads& p, PadMode mode, MemoryFormat format, const Scalar& value) {
  Tensor out = empty(padded_sizes(x.sizes(), p), TensorOptions(x.dtype()).device(x.device()), format);
  if (out.numel() == 0) return out;
  PadParams k = make_params(x, out, p, mode);
  if (mode == PadMode::Constant) {
    // The value rounded to the dtype exactly as fill_ rounds it: one element filled on the host.
    Tensor v = full({}, value, TensorOptions(x.dtype()));
    std::memcpy(&k.fill_bits, v.raw_data_ptr(), x.element_size());
  }
  k.src = x.raw_data_ptr();
  k.dst = out.raw_data_ptr();
  ANVIL_KERNEL(x.device(), pad, k);
  return out;
}

// Runs the backward: grad_input of `in_sizes` in `format` from grad_output (the padded shape).
Tensor run_pad_backward(const Tensor& grad_output, const Shape& in_sizes, const Pads& p, PadMode mode,
                        MemoryFormat format) {
  Tensor grad_input = empty(in_sizes, TensorOptions(grad_output.dtype()).device(grad_output.device()), format);
  if (grad_input.numel() == 0) return grad_input;
  PadParams k = make_params(grad_input, grad_output, p, mode);
  k.src = grad_output.raw_data_ptr();
  k.dst = grad_input.raw_data_ptr();
  ANVIL_KERNEL(grad_output.device(), pad_backward, k);
  return grad_input;
}

void check_defined(const char* name, const Tensor& t, const char* what) {
  ANVIL_CHECK(t.defined(), Error, name, " undefined ", what);
}

// The gradient dtypes of every pad backward: PyTorch's floating and complex types.
void check_grad_dtype(const char* name, const Tensor& grad_output, const Tensor* input) {
  dispatch_float_complex_types(grad_output.dtype(), name, [](auto) {});
  if (input)
    ANVIL_CHECK(input->dtype() == grad_output.dtype(), DTypeError, name, " expected grad_output and input of one dtype, got ",
                describe(grad_output), " and ", describe(*input));
}

// ---- constant

void check_constant_pad(const char* name, const Shape& sizes, const Shape& pad) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  ANVIL_CHECK(pad.size() % 2 == 0, ShapeError, name, " Length of pad must be even but instead it equals ", pad.size());
  ANVIL_CHECK(static_cast<int64_t>(pad.size() / 2) <= ndim, ShapeError, name,
              " Length of pad should be no more than twice the number of dimensions of the input. Pad length is ",
              pad.size(), " while the input has ", ndim, " dimensions.");
  const Pads p = pads_of(ndim, pad);
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t s = sizes[d], b = p.before[d], a = p.after[d];
    ANVIL_CHECK(s + b + a >= 0, ShapeError, name, " The input size ", s, ", plus negative padding ", b, " and ", a,
                " resulted in a negative output size, which is invalid. Check dimension ", d, " of your input.");
    // PyTorch crops with narrow() before it pads, so one crop larger than what is left fails
    // there even when the other side's pad would make the output size non-negative.
    const int64_t left = s + std::min<int64_t>(b, 0);
    ANVIL_CHECK(left >= 0 && left + std::min<int64_t>(a, 0) >= 0, ShapeError, name,
                " narrow(): length must be non-negative: padding (", b, ", ", a, ") crops more than the size ", s,
                " of dimension ", d);
  }
}

// ---- reflection / replication (PyTorch's padding::pad_shape_check)

const char* const kPadDimNames[] = {"W", "H", "D"};
const char* const kPadDimWords[] = {"width", "height", "depth"};

void check_pad_shape(const char* name, const Tensor& x, const Shape& padding, int n, bool reflection) {
  ANVIL_CHECK(static_cast<int>(padding.size()) == 2 * n, ShapeError, name, " padding size is expected to be ", 2 * n,
              ", but got: ", padding.size());
  const int64_t ndim = x.dim();
  bool ok = ndim == n + 1 || ndim == n + 2;
  for (int64_t d = ndim == n + 2 ? 1 : 0; ok && d < ndim; ++d) ok = x.size(d) != 0;
  ANVIL_CHECK(ok, ShapeError, name, " Expected ", n + 1, "D or ", n + 2,
              "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
              shape_str(x.sizes()));
  if (reflection) {
    for (int i = 0; i < n; ++i) {
      const int64_t d = ndim - 1 - i;
      ANVIL_CHECK(padding[2 * i] < x.size(d) && padding[2 * i + 1] < x.size(d), ShapeError, name, " Argument #",
                  4 + 2 * i, ": Padding size should be less than the corresponding input dimension, but got: padding (",
                  padding[2 * i], ", ", padding[2 * i + 1], ") at dimension ", d, " of input ", shape_str(x.sizes()));
    }
  }
  int64_t in[3], out[3];
  bool positive = true;
  for (int i = 0; i < n; ++i) {
    in[i] = x.size(ndim - 1 - i);
    out[i] = in[i] + padding[2 * i] + padding[2 * i + 1];
    positive = positive && out[i] >= 1;
  }
  if (n == 1) {
    ANVIL_CHECK(positive, ShapeError, name, " input (W: ", in[0], ") is too small. Calculated output W: ", out[0]);
  } else {
    std::string got, input;
    for (int i = n - 1; i >= 0; --i) {
      got += detail::cat_message(i == n - 1 ? "" : " ", kPadDimNames[i], ": ", out[i]);
      input += detail::cat_message(i == n - 1 ? "" : ", ", kPadDimNames[i], ": ", in[i]);
    }
    ANVIL_CHECK(positive, ShapeError, name, " Calculated output ", got, " must be >= 1 in every dimension (input ",
                input, ")");
  }
}

// The forward dtypes: PyTorch's all types and complex with bfloat16 / float16 (no bool, float8,
// or the unsigned 16-64-bit types).
void check_pad_dtype(const char* name, DType t) {
  const bool ok = t == kUInt8 || t == kInt8 || t == kInt16 || t == kInt32 || t == kInt64 || t == kFloat16 ||
                  t == kBFloat16 || t == kFloat32 || t == kFloat64 || t == kComplex64;
  ANVIL_CHECK(ok, DTypeError, name, " not implemented for '", dtype_name(t), "'");
}

Tensor edge_pad(const char* name, const Tensor& x, const Shape& padding, int n, PadMode mode) {
  check_defined(name, x, "input");
  check_pad_shape(name, x, padding, n, mode == PadMode::Reflect);
  check_pad_dtype(name, x.dtype());
  return run_pad(x, pads_of(x.dim(), padding), mode, x.suggest_memory_format(), 0);
}

Tensor edge_pad_backward(const char* name, const Tensor& grad_output, const Tensor& x, const Shape& padding, int n,
                         PadMode mode) {
  check_defined(name, grad_output, "grad_output");
  check_defined(name, x, "input");
  check_same_device(name, grad_output, x);
  check_pad_shape(name, x, padding, n, mode == PadMode::Reflect);
  check_grad_dtype(name, grad_output, &x);
  const Pads p = pads_of(x.dim(), padding);
  const Shape want = padded_sizes(x.sizes(), p);
  const int64_t ndim = x.dim();
  ANVIL_CHECK(grad_output.dim() == ndim, ShapeError, name, " expected grad_output of ", ndim, " dims, got ",
              describe(grad_output));
  const int64_t c = ndim - n - 1;
  ANVIL_CHECK(grad_output.size(c) == x.size(c), ShapeError, name, " grad_output channel unexpected. Expected: ",
              x.size(c), ", Got: ", grad_output.size(c));
  for (int i = 0; i < n; ++i) {
    const int64_t d = ndim - 1 - i;
    ANVIL_CHECK(grad_output.size(d) == want[d], ShapeError, name, " grad_output ", kPadDimWords[i],
                " unexpected. Expected: ", want[d], ", Got: ", grad_output.size(d));
  }
  // PyTorch leaves the batch dim unchecked (and reads past a smaller one); it must match here.
  ANVIL_CHECK(grad_output.sizes() == want, ShapeError, name, " grad_output batch unexpected. Expected: ",
              shape_str(want), ", Got: ", shape_str(grad_output.sizes()));
  return run_pad_backward(grad_output, x.sizes(), p, mode, x.suggest_memory_format());
}

// ---- circular (PyTorch's _pad_circular)

void check_circular(const char* name, const Shape& sizes, const Shape& pad) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  ANVIL_CHECK(pad.size() % 2 == 0, ShapeError, name, " Length of pad must be even but instead it equals ", pad.size());
  const int64_t unpadded = ndim - static_cast<int64_t>(pad.size() / 2);
  ANVIL_CHECK(unpadded == 1 || unpadded == 2, ShapeError, name,
              " Invalid padding size, expected 1 or 2 non-padded dimensions, which would be equivalent to padding of "
              "length ", (ndim - 1) * 2, " or ", (ndim - 2) * 2, " respectively but got ", pad.size());
  const Pads p = pads_of(ndim, pad);
  for (int64_t d = unpadded; d < ndim; ++d) {
    const int64_t s = sizes[d], b = p.before[d], a = p.after[d];
    // PyTorch checks the pads against the input size; a positive pad past the cropped size
    // would wrap the crop more than once too (PyTorch fails there on overlapping copies).
    const int64_t cropped = s - std::max<int64_t>(-b, 0) - std::max<int64_t>(-a, 0);
    ANVIL_CHECK(b <= s && a <= s && b <= std::max<int64_t>(cropped, 0) && a <= std::max<int64_t>(cropped, 0),
                ShapeError, name, " Padding value causes wrapping around more than once: padding (", b, ", ", a,
                ") at dimension ", d, " of input ", shape_str(sizes));
    ANVIL_CHECK(s + b + a >= 0, ShapeError, name,
                " Negative padding value is resulting in an empty dimension: padding (", b, ", ", a, ") at dimension ",
                d, " of input ", shape_str(sizes));
  }
}

// Input sizes of a backward from grad_output's (padded) sizes.
Shape unpadded_sizes(const char* name, const Tensor& grad_output, const Shape& pad) {
  ANVIL_CHECK(pad.size() % 2 == 0, ShapeError, name, " Length of pad must be even but instead it equals ", pad.size());
  ANVIL_CHECK(static_cast<int64_t>(pad.size() / 2) <= grad_output.dim(), ShapeError, name,
              " Length of pad should be no more than twice the number of dimensions of grad_output. Pad length is ",
              pad.size(), " while grad_output has ", grad_output.dim(), " dimensions.");
  const Pads p = pads_of(grad_output.dim(), pad);
  Shape in(grad_output.sizes());
  for (size_t d = 0; d < in.size(); ++d) {
    in[d] -= p.before[d] + p.after[d];
    ANVIL_CHECK(in[d] >= 0, ShapeError, name, " grad_output ", describe(grad_output), " is smaller than padding (",
                p.before[d], ", ", p.after[d], ") at dimension ", d);
  }
  return in;
}

}  // namespace

Tensor constant_pad_nd(const Tensor& input, const Shape& pad, const Scalar& value) {
  const char* name = "[constant_pad_nd]";
  check_defined(name, input, "input");
  check_constant_pad(name, input.sizes(), pad);
  return run_pad(input, pads_of(input.dim(), pad), PadMode::Constant, input.suggest_memory_format(), value);
}

Tensor constant_pad_nd_backward(const Tensor& grad_output, const Shape& pad) {
  const char* name = "[constant_pad_nd_backward]";
  check_defined(name, grad_output, "grad_output");
  check_grad_dtype(name, grad_output, nullptr);
  (void)unpadded_sizes(name, grad_output, pad);
  // Every input element has one source: the gradient cropped, constant_pad_nd(grad, -pad) as
  // PyTorch's autograd formula, through the forward's vectorised kernel.
  Shape neg(pad.size());
  for (size_t i = 0; i < pad.size(); ++i) neg[i] = -pad[i];
  return run_pad(grad_output, pads_of(grad_output.dim(), neg), PadMode::Constant, grad_output.suggest_memory_format(), 0);
}

Tensor pad_circular(const Tensor& input, const Shape& pad) {
  const char* name = "[pad_circular]";
  check_defined(name, input, "input");
  check_circular(name, input.sizes(), pad);
  return run_pad(input, pads_of(input.dim(), pad), PadMode::Circular, MemoryFormat::Contiguous, 0);
}

Tensor pad_circular_backward(const Tensor& grad_output, const Shape& pad) {
  const char* name = "[pad_circular_backward]";
  check_defined(name, grad_output, "grad_output");
  check_grad_dtype(name, grad_output, nullptr);
  const Shape in = unpadded_sizes(name, grad_output, pad);
  check_circular(name, in, pad);
  return run_pad_backward(grad_output, in, pads_of(grad_output.dim(), pad), PadMode::Circular,
                          MemoryFormat::Contiguous);
}

Tensor reflection_pad1d(const Tensor& x, const Shape& p) { return edge_pad("[reflection_pad1d]", x, p, 1, PadMode::Reflect); }
Tensor reflection_pad2d(const Tensor& x, const Shape& p) { return edge_pad("[reflection_pad2d]", x, p, 2, PadMode::Reflect); }
Tensor reflection_pad3d(const Tensor& x, const Shape& p) { return edge_pad("[reflection_pad3d]", x, p, 3, PadMode::Reflect); }
Tensor replication_pad1d(const Tensor& x, const Shape& p) {
  return edge_pad("[replication_pad1d]", x, p, 1, PadMode::Replicate);
}
Tensor replication_pad2d(const Tensor& x, const Shape& p) {
  return edge_pad("[replication_pad2d]", x, p, 2, PadMode::Replicate);
}
Tensor replication_pad3d(const Tensor& x, const Shape& p) {
  return edge_pad("[replication_pad3d]", x, p, 3, PadMode::Replicate);
}
Tensor reflection_pad1d_backward(const Tensor& g, const Tensor& x, const Shape& p) {
  return edge_pad_backward("[reflection_pad1d_backward]", g, x, p, 1, PadMode::Reflect);
}
Tensor reflection_pad2d_backward(const Tensor& g, const Tensor& x, const Shape& p) {
  return edge_pad_backward("[reflection_pad2d_backward]", g, x, p, 2, PadMode::Reflect);
}
Tensor reflection_pad3d_backward(const Tensor& g, const Tensor& x, const Shape& p) {
  return edge_pad_backward("[reflection_pad3d_backward]", g, x, p, 3, PadMode::Reflect);
}
Tensor replication_pad1d_backward(const Tensor& g, const Tensor& x, const Shape& p) {
  return edge_pad_backward("[replication_pad1d_backward]", g, x, p, 1, PadMode::Replicate);
}
Tensor replication_pad2d_backward(const Tensor& g, const Tensor& x, const Shape& p) {
  return edge_pad_backward("[replication_pad2d_backward]", g, x, p, 2, PadMode::Replicate);
}
Tensor replication_pad3d_backward(const Tensor& g, const Tensor& x, const Shape& p) {
  return edge_pad_backward("[replication_pad3d_backward]", g, x, p, 3, PadMode::Replicate);
}

Tensor pad(const Tensor& input, const Shape& pad, const std::string& mode, std::optional<double> value) {
  const char* name = "[pad]";
  check_defined(name, input, "input");
  PadMode m;
  if (mode == "constant") m = PadMode::Constant;
  else if (mode == "reflect") m = PadMode::Reflect;
  else if (mode == "replicate") m = PadMode::Replicate;
  else if (mode == "circular") m = PadMode::Circular;
  else throw ValueError(detail::cat_message(name, " Unrecognised padding mode ", mode));
  const int64_t ndim = input.dim();
  ANVIL_CHECK(pad.size() % 2 == 0, ShapeError, name, " Padding length must be divisible by 2");
  ANVIL_CHECK(static_cast<int64_t>(pad.size() / 2) <= ndim, ShapeError, name,
              " Padding length should be less than or equal to two times the input dimension but got padding length ",
              pad.size(), " and input of dimension ", ndim);
  if (m == PadMode::Constant) return as_op(name, [&] { return constant_pad_nd(input, pad, value.value_or(0.0)); });
  ANVIL_CHECK(!value || *value == 0, ValueError, name, " Padding mode \"", mode, "\" doesn't take in value argument");
  const int n = static_cast<int>(pad.size() / 2);
  ANVIL_CHECK((n == 1 || n == 2 || n == 3) && (ndim == n + 1 || ndim == n + 2), ValueError, name, " Padding size ",
              pad.size(), " is not supported for ", ndim,
              "D input tensor.\nSupported combinations for non-constant padding:\n"
              "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
              "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
              "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)");
  return as_op(name, [&] {
    if (m == PadMode::Circular) return pad_circular(input, pad);
    const bool reflect = m == PadMode::Reflect;
    if (n == 1) return reflect ? reflection_pad1d(input, pad) : replication_pad1d(input, pad);
    if (n == 2) return reflect ? reflection_pad2d(input, pad) : replication_pad2d(input, pad);
    return reflect ? reflection_pad3d(input, pad) : replication_pad3d(input, pad);
  });
}

}  // namespace anvil
