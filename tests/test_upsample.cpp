// Upsampling (anvil/upsample.h): interpolate / upsample / upsample_backward against the float64
// references of tests/reference/ref_upsample (every mode, align_corners, sizes and scale factors,
// four dtypes, contiguous / channels-last / strided inputs), the backward also against central
// differences, PyTorch 2.15's own values and gradients (tests/data/upsample_goldens.json, written
// by scripts/make_upsample_goldens.py), channels-last giving the contiguous bits, the same bits on
// every run, a rank-5 case whose H * W crosses 2^16, and PyTorch's messages, on every device.
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "expect_throws.h"
#include "finite_diff.h"
#include "harness.h"
#include "reference/ref_upsample.h"

namespace {

using namespace anvil;
using th::Layout;

ref::UpKind kind_of(const std::string& mode) {
  if (mode == "nearest") return ref::UpKind::Nearest;
  if (mode == "nearest-exact") return ref::UpKind::NearestExact;
  if (mode == "bicubic") return ref::UpKind::Cubic;
  return ref::UpKind::Linear;
}

const char* linear_mode(size_t spatial) { return spatial == 1 ? "linear" : spatial == 2 ? "bilinear" : "trilinear"; }

MemoryFormat channels_last_of(size_t rank) { return rank == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d; }

// |got - want| within a few ulps of the compute type times the taps' absolute weight sum (at
// most 1.25^3 for bicubic) and values up to 4, plus one rounding to the dtype; gradients sum up
// to `fan` contributions.
th::Tol upsample_tol(DType t, double fan) {
  const double u = th::unit_roundoff(th::compute_dtype(t)), uo = th::unit_roundoff(t);
  return th::Tol{16 * u * 4 * 2 * fan, 2 * uo};
}

class Upsample : public th::DeviceTest {};

struct Case {
  Shape x;
  std::optional<Shape> size;
  std::optional<std::vector<double>> scale;
  std::string mode;
  bool align;
  bool recompute;
};

std::vector<Case> table() {
  std::vector<Case> v;
  for (const char* m : {"nearest", "nearest-exact", "linear"}) {
    v.push_back({{2, 3, 5}, Shape{9}, std::nullopt, m, false, false});
    v.push_back({{2, 3, 5}, std::nullopt, std::vector<double>{1.1}, m, false, false});
    v.push_back({{2, 3, 7}, std::nullopt, std::vector<double>{0.6}, m, false, true});
    v.push_back({{1, 2, 4}, Shape{1}, std::nullopt, m, false, false});
    v.push_back({{1, 2, 600}, std::nullopt, std::vector<double>{2.5}, m, false, false});
    // integer scales over 16+ indices: the CPU's banded SIMD axis pass (r = 2, 3, 4, forward and
    // backward) and the nearest forward's repeated elements, with ragged vector ends
    v.push_back({{1, 2, 41}, std::nullopt, std::vector<double>{2.0}, m, false, false});
    v.push_back({{1, 2, 23}, std::nullopt, std::vector<double>{3.0}, m, false, false});
    v.push_back({{1, 2, 67}, std::nullopt, std::vector<double>{0.25}, m, false, false});
  }
  v.push_back({{2, 3, 5}, Shape{9}, std::nullopt, "linear", true, false});
  v.push_back({{2, 3, 5}, Shape{1}, std::nullopt, "linear", true, false});
  for (const char* m : {"nearest", "nearest-exact", "bilinear", "bicubic"}) {
    v.push_back({{2, 3, 5, 7}, Shape{8, 10}, std::nullopt, m, false, false});
    v.push_back({{1, 4, 6, 4}, std::nullopt, std::vector<double>{0.5, 2.5}, m, false, false});
    v.push_back({{1, 3, 5, 5}, std::nullopt, std::vector<double>{1.1}, m, false, true});
    v.push_back({{2, 5, 9, 3}, Shape{4, 7}, std::nullopt, m, false, false});
    v.push_back({{1, 2, 6, 37}, std::nullopt, std::vector<double>{2.0}, m, false, false});
    v.push_back({{1, 2, 5, 19}, std::nullopt, std::vector<double>{1.0, 4.0}, m, false, false});
  }
  for (const char* m : {"bilinear", "bicubic"}) {
    v.push_back({{2, 3, 5, 7}, Shape{8, 10}, std::nullopt, m, true, false});
    v.push_back({{1, 2, 4, 4}, std::nullopt, std::vector<double>{3.0}, m, true, false});
  }
  for (const char* m : {"nearest", "nearest-exact", "trilinear"}) {
    v.push_back({{1, 3, 2, 3, 4}, Shape{3, 5, 7}, std::nullopt, m, false, false});
    v.push_back({{2, 2, 3, 4, 2}, std::nullopt, std::vector<double>{2.0, 0.5, 1.5}, m, false, false});
    v.push_back({{1, 2, 3, 4, 21}, std::nullopt, std::vector<double>{2.0}, m, false, false});
  }
  v.push_back({{1, 3, 2, 3, 4}, Shape{3, 5, 7}, std::nullopt, "trilinear", true, false});
  return v;
}

std::vector<std::optional<double>> kernel_scales(const Case& c, size_t k) {
  std::vector<std::optional<double>> s;
  if (c.scale && !c.recompute)
    for (size_t i = 0; i < k; ++i) s.push_back(c.scale->size() == 1 ? (*c.scale)[0] : (*c.scale)[i]);
  return s;
}

Shape out_spatial(const Case& c) {
  const size_t k = c.x.size() - 2;
  Shape o;
  for (size_t i = 0; i < k; ++i)
    o.push_back(c.size ? (c.size->size() == 1 ? (*c.size)[0] : (*c.size)[i])
                       : static_cast<int64_t>(std::floor(static_cast<double>(c.x[i + 2]) *
                                                         (c.scale->size() == 1 ? (*c.scale)[0] : (*c.scale)[i]))));
  return o;
}

// Forward and backward of every case against the float64 references.
TEST_P(Upsample, Table) {
  th::CaseLoop loop;
  th::Gen g(7300);
  for (const Case& c : table())
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64})
      for (int layout = 0; layout < 3; ++layout) {  // contiguous, channels-last, transposed
        if (layout == 1 && c.x.size() < 4) continue;
        const std::string name = th::case_name(c.x, t, Layout::Contiguous, dev()) + " " + c.mode +
                                 (c.align ? " align" : "") + (c.recompute ? " recompute" : "") + " layout " +
                                 std::to_string(layout);
        if (!loop.run(name, [&] {
              const size_t k = c.x.size() - 2;
              th::Input x = th::make_input(c.x, t, dev(), layout == 2 ? Layout::Transposed : Layout::Contiguous, g, -4, 4);
              Tensor xin = layout == 1 ? x.t.contiguous(channels_last_of(c.x.size())) : x.t;
              const std::optional<bool> align = c.mode.find("nearest") == 0 ? std::nullopt : std::optional<bool>(c.align);
              Tensor y = interpolate(xin, c.size, c.scale, c.mode, align, c.recompute ? std::optional<bool>(true) : std::nullopt);
              const Shape os = out_spatial(c);
              const auto sc = kernel_scales(c, k);
              const ref::Array want = ref::upsample(x.a, os, kind_of(c.mode), c.align, sc, t == kFloat64);
              ASSERT_TRUE(th::expect_close(y, want, upsample_tol(t, 1)));
              if (layout == 1) {
                ASSERT_TRUE(y.is_contiguous(channels_last_of(c.x.size())));
                ASSERT_EQ(th::to_bits(y), th::to_bits(interpolate(x.t, c.size, c.scale, c.mode, align,
                                                                  c.recompute ? std::optional<bool>(true) : std::nullopt)));
              }
              // Backward: the scatter-add of the forward's weights, up to ceil(out / in) + 3 outputs per input per axis.
              th::Input go = th::make_input(want.sizes, t, dev(), Layout::Contiguous, g, -2, 2);
              Tensor gout = layout == 1 ? go.t.contiguous(channels_last_of(c.x.size())) : go.t;
              Tensor gi = upsample_backward(gout, os, c.x, c.mode, c.align, sc);
              double fan = 1;
              for (size_t i = 0; i < k; ++i) fan *= std::ceil(static_cast<double>(os[i]) / static_cast<double>(c.x[i + 2])) + 3;
              ASSERT_TRUE(th::expect_close(gi, ref::upsample_backward(go.a, c.x, kind_of(c.mode), c.align, sc, t == kFloat64),
                                           upsample_tol(t, fan)));
              if (layout == 1) ASSERT_TRUE(gi.is_contiguous(channels_last_of(c.x.size())));
              if (layout == 1 && dev().is_cpu())  // both layouts nest their sums alike
                ASSERT_EQ(th::to_bits(gi), th::to_bits(upsample_backward(go.t, os, c.x, c.mode, c.align, sc)))
                    << "channels-last gives the contiguous bits";
              ASSERT_EQ(th::to_bits(gi), th::to_bits(upsample_backward(gout, os, c.x, c.mode, c.align, sc)))
                  << "the same bits every run";
            }))
          return;
      }
}

// The backward is the forward's adjoint: central differences of sum(g * interpolate(x)) in float64.
TEST_P(Upsample, BackwardMatchesFiniteDifferences) {
  th::Gen g(7301);
  for (const Case& c : std::vector<Case>{{{1, 2, 4, 3}, Shape{7, 5}, std::nullopt, "bicubic", false, false},
                                         {{1, 2, 5}, std::nullopt, std::vector<double>{1.7}, "linear", true, false},
                                         {{1, 1, 2, 3, 2}, Shape{3, 2, 5}, std::nullopt, "trilinear", false, false},
                                         {{1, 2, 6, 5}, Shape{4, 9}, std::nullopt, "nearest-exact", false, false}}) {
    SCOPED_TRACE(c.mode);
    const Shape os = out_spatial(c);
    th::Input x = th::make_input(c.x, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
    Shape ys{c.x[0], c.x[1]};
    ys.insert(ys.end(), os.begin(), os.end());
    th::Input go = th::make_input(ys, kFloat64, dev(), Layout::Contiguous, g, -1, 1);
    const auto sc = kernel_scales(c, c.x.size() - 2);
    const std::vector<double> fd = th::central_differences(x.a.v, [&](const std::vector<double>& v) {
      const ref::Array y = ref::upsample(th::array_of(c.x, v), os, kind_of(c.mode), c.align, sc, true);
      double s = 0;
      for (size_t i = 0; i < y.v.size(); ++i) s += go.a.v[i] * y.v[i];
      return s;
    });
    EXPECT_TRUE(th::expect_close(upsample_backward(go.t, os, c.x, c.mode, c.align, sc), th::array_of(c.x, fd),
                                 th::Tol{1e-8, 1e-7}));
  }
}

// PyTorch 2.15's own outputs and gradients for F.interpolate over sizes, scale factors with and
// without recompute_scale_factor, align_corners and channels-last inputs (among them in = 5 at
// scale 1.1: nearest reads 0 0 1 2 3, nearest-exact 0 1 2 3 4, linear copies, bicubic uses 1 / 1.1).
// One set differs on purpose: where a nearest axis keeps its extent under a scale factor other
// than 1, PyTorch's CPU kernels copy that axis in its 2-d / 3-d forward and in every backward
// (nearest_idx's shortcut) but apply floor(o / scale) in its 1-d forward (and its CUDA kernels
// always do); anvil applies the scale everywhere, the backward staying the forward's adjoint.
// Those cases are checked against the formula instead (Table) and counted here.
TEST_P(Upsample, MatchesPyTorchGoldens) {
  std::ifstream in(th::source_dir() + "/tests/data/upsample_goldens.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_GE(j["cases"].size(), 400u);
  auto values = [](int64_t n, int64_t mul, int64_t mod) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = ((i * mul) % mod) / 16.0 - 3.0;
    return v;
  };
  int checked = 0, shortcut = 0;
  for (const auto& c : j["cases"]) {
    const Shape shape = c["shape"].get<Shape>(), out = c["out_shape"].get<Shape>();
    const std::string mode = c["mode"];
    const DType t = c["dtype"] == "float64" ? kFloat64 : kFloat32;
    std::optional<Shape> size;
    std::optional<std::vector<double>> scale;
    if (!c["size"].is_null()) size = c["size"].get<Shape>();
    if (!c["scale_factor"].is_null()) scale = c["scale_factor"].get<std::vector<double>>();
    const std::optional<bool> align = c["align_corners"].is_null() ? std::nullopt : std::optional<bool>(c["align_corners"].get<bool>());
    const std::optional<bool> rec = c["recompute_scale_factor"].is_null() ? std::nullopt : std::optional<bool>(true);
    SCOPED_TRACE(mode + " " + ref::shape_to_string(shape) + " -> " + ref::shape_to_string(out) + (align.value_or(false) ? " align" : "") +
                 (rec ? " recompute" : "") + (scale ? " scale " + std::to_string((*scale)[0]) : ""));
    bool copies = false;  // PyTorch's CPU nearest shortcut applies (see above)
    for (size_t i = 2; i < shape.size() && scale && !rec && mode == "nearest"; ++i)
      copies |= out[i] == shape[i] && (scale->size() == 1 ? (*scale)[0] : (*scale)[i - 2]) != 1.0;
    shortcut += copies;
    if (copies && shape.size() > 3) continue;
    Tensor x = tensor(values(ref::numel_of(shape), 7919, 97), shape).to(t).to(dev());
    if (c["channels_last"].get<bool>()) x = x.contiguous(channels_last_of(shape.size()));
    Tensor y = interpolate(x, size, scale, mode, align, rec);
    ASSERT_EQ(y.sizes(), out);
    // float32: bicubic's cancelling weights leave PyTorch's own values ~2e-6 off float64.
    const th::Tol tol = t == kFloat64 ? th::Tol{1e-14, 1e-14} : th::Tol{1.6e-5, 4e-7};
    EXPECT_TRUE(th::expect_close(y, th::array_of(out, c["out"].get<std::vector<double>>()), tol));
    Shape os(out.begin() + 2, out.end());
    std::vector<std::optional<double>> sc;
    if (scale && !rec)
      for (size_t i = 0; i < os.size(); ++i) sc.push_back(scale->size() == 1 ? (*scale)[0] : (*scale)[i]);
    if (copies) continue;  // the 1-d forward follows the formula, its backward copies
    Tensor g = tensor(values(ref::numel_of(out), 104729, 89), out).to(t).to(dev());
    Tensor gi = upsample_backward(g, os, shape, mode, align.value_or(false), sc);
    const th::Tol gtol = t == kFloat64 ? th::Tol{1e-13, 1e-13} : th::Tol{3e-5, 1e-6};
    EXPECT_TRUE(th::expect_close(gi, th::array_of(shape, c["grad"].get<std::vector<double>>()), gtol));
    ++checked;
  }
  EXPECT_GE(checked, 470);
  EXPECT_EQ(shortcut, 7);
}

// A rank-5 nearest / trilinear upsample whose output plane (H * W) crosses 2^16, checked on a
// sample of elements against the reference, and its backward's total.
TEST_P(Upsample, PlanePast2Pow16) {
  th::Gen g(7302);
  const Shape xs{1, 2, 2, 130, 260};
  th::Input x = th::make_input(xs, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  for (const char* mode : {"nearest", "trilinear"}) {
    SCOPED_TRACE(mode);
    Tensor y = interpolate(x.t, Shape{3, 260, 520}, std::nullopt, mode);
    const ref::Array want = ref::upsample(x.a, {3, 260, 520}, kind_of(mode), false, {}, false);
    const ref::Array got = th::to_array(y);
    ASSERT_EQ(got.v.size(), want.v.size());
    const double tol = 16 * th::unit_roundoff(kFloat32) * 8;
    for (size_t i = 0; i < got.v.size(); i += 997) ASSERT_NEAR(got.v[i], want.v[i], tol) << "element " << i;
    ASSERT_NEAR(got.v.back(), want.v.back(), tol);
    // Every output gradient of 1 lands somewhere: the gradients sum to the output's element count.
    Tensor gi = upsample_backward(ones(y.sizes(), TensorOptions(kFloat32).device(dev())), {3, 260, 520}, xs, mode);
    EXPECT_NEAR(th::to_array(sum(gi.to(kFloat64))).v[0], static_cast<double>(y.numel()), 1e-6 * static_cast<double>(y.numel()));
  }
}

// An infinite input keeps PyTorch's infinities and NaNs: NaN only where a tap of weight 0 reads
// it (the clamped first row and column), never from an axis the op does not have. The patterns
// are PyTorch 2.15's (CPU) for a [1, 1, 4, 4] zero image with +inf at (1, 1), upsampled to 8 x 8
// ('n' NaN, '+' / '-' infinities, '0' zero), and a 1-d linear row.
TEST_P(Upsample, InfinityAsPyTorch) {
  auto pattern = [](const Tensor& y) {
    std::string s;
    for (double v : th::to_array(y).v) s += std::isnan(v) ? 'n' : std::isinf(v) ? (v > 0 ? '+' : '-') : v == 0 ? '0' : '?';
    return s;
  };
  for (DType t : {kFloat32, kBFloat16, kFloat64}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = zeros({1, 1, 4, 4}, TensorOptions(kFloat64));
    static_cast<double*>(x.raw_data_ptr())[5] = std::numeric_limits<double>::infinity();
    x = x.to(t).to(dev());
    EXPECT_EQ(pattern(interpolate(x, Shape{8, 8}, std::nullopt, "bilinear", false)),
              "nnnnn000" "n++++000" "n++++000" "n++++000" "n++++000" "00000000" "00000000" "00000000");
    EXPECT_EQ(pattern(interpolate(x, Shape{8, 8}, std::nullopt, "bicubic", false)),
              "+----++0" "-++++--0" "-++++--0" "-++++--0" "-++++--0" "+----++0" "+----++0" "00000000");
    EXPECT_EQ(pattern(interpolate(x.reshape({1, 4, 4}), Shape{8}, std::nullopt, "linear", false)),
              "00000000" "n++++000" "00000000" "00000000");
  }
}

TEST_P(Upsample, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  const Tensor x4 = zeros({1, 2, 3, 5}, f);
  EXPECT_THROWS_SAYING(Error, "interpolate", "only one of size or scale_factor should be defined",
                       interpolate(x4, Shape{4, 4}, std::vector<double>{2.0}));
  EXPECT_THROWS_SAYING(Error, "interpolate", "either size or scale_factor should be defined", interpolate(x4, std::nullopt));
  EXPECT_THROWS_SAYING(Error, "interpolate", "align_corners option can only be set with the interpolating modes",
                       interpolate(x4, Shape{4, 4}, std::nullopt, "nearest", false));
  EXPECT_THROWS_SAYING(Error, "interpolate", "recompute_scale_factor is not meaningful with an explicit size.",
                       interpolate(x4, Shape{4, 4}, std::nullopt, "nearest", std::nullopt, true));
  EXPECT_THROWS_SAYING(ShapeError, "interpolate",
                       "Input and output must have the same number of spatial dimensions, but got input with spatial "
                       "dimensions of [3, 5] and output size of [4, 4, 4]",
                       interpolate(x4, Shape{4, 4, 4}));
  EXPECT_THROWS_SAYING(ShapeError, "interpolate", "Got 4D input, but linear mode needs 3D input",
                       interpolate(x4, Shape{4}, std::nullopt, "linear"));
  EXPECT_THROWS_SAYING(ShapeError, "interpolate", "Got 4D input, but trilinear mode needs 5D input",
                       interpolate(x4, Shape{4, 4}, std::nullopt, "trilinear"));
  EXPECT_THROWS_SAYING(ShapeError, "upsample", "Got 5D input, but bicubic mode needs 4D input",
                       upsample(zeros({1, 2, 3, 4, 5}, f), {4, 4, 4}, "bicubic"));
  EXPECT_THROWS_SAYING(ShapeError, "interpolate", "Only 3D, 4D and 5D input Tensors supported (got 2D)",
                       interpolate(zeros({2, 3}, f), Shape{4}));
  EXPECT_THROWS_SAYING(Error, "interpolate", "mode 'area' is not supported", interpolate(x4, Shape{4, 4}, std::nullopt, "area"));
  EXPECT_THROWS_SAYING(ShapeError, "interpolate",
                       "Input and output sizes should be greater than 0, but got input (H: 3, W: 5) output (H: 1, W: 0)",
                       interpolate(x4, std::nullopt, std::vector<double>{0.5, 0.1}));
  EXPECT_THROWS_SAYING(DTypeError, "interpolate", "not implemented for 'int32'",
                       interpolate(zeros({1, 2, 3, 5}, TensorOptions(kInt32).device(dev())), Shape{4, 4}));
  EXPECT_THROWS_SAYING(ShapeError, "upsample_backward", "Expected grad_output to have the shape of the output",
                       upsample_backward(zeros({1, 2, 4, 5}, f), {4, 4}, {1, 2, 3, 5}, "bilinear"));
  // A zero batch gives an empty output of the right shape; the other extents must be positive.
  EXPECT_EQ(interpolate(zeros({0, 2, 3, 5}, f), Shape{6, 10}).sizes(), (Shape{0, 2, 6, 10}));
  EXPECT_THROWS_SAYING(ShapeError, "interpolate", "Non-empty 4D data tensor expected",
                       interpolate(zeros({1, 0, 3, 5}, f), Shape{6, 10}));
}

}  // namespace

ANVIL_INSTANTIATE_DEVICE_TESTS(Upsample);
