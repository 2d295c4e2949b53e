// Padding: constant_pad_nd, F.pad's four modes and every backward against the float64
// references (tests/reference/ref_pad.h) on every device and layout, channels-last inputs,
// index boundaries at 2^16, finite differences, determinism, PyTorch's errors; and the memory
// formats the pads keep.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "expect_throws.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

ref::PadKind kind_of(const std::string& mode) {
  if (mode == "reflect") return ref::PadKind::Reflect;
  if (mode == "replicate") return ref::PadKind::Replicate;
  if (mode == "circular") return ref::PadKind::Circular;
  return ref::PadKind::Constant;
}

// Whether F.pad takes `pad` in `kind` for an input of `x` (PyTorch's rules, written out here).
bool takes(ref::PadKind kind, const Shape& x, const Shape& pad) {
  const int64_t nd = static_cast<int64_t>(x.size()), n = static_cast<int64_t>(pad.size() / 2);
  if (kind == ref::PadKind::Circular && nd - n != 1 && nd - n != 2) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = x[nd - 1 - i], b = pad[2 * i], a = pad[2 * i + 1];
    const int64_t crop = s - std::max<int64_t>(-b, 0) - std::max<int64_t>(-a, 0);
    if (kind == ref::PadKind::Reflect && (b >= s || a >= s)) return false;
    if (kind == ref::PadKind::Circular && (b > crop || a > crop || s + b + a < 0)) return false;
    if ((kind == ref::PadKind::Reflect || kind == ref::PadKind::Replicate) && s + b + a < 1) return false;
  }
  return true;
}

// The reference rounded once to t: what a kernel that sums exactly in its accumulator returns.
ref::Array rounded(ref::Array a, DType t) {
  for (double& v : a.v) v = th::round_to_dtype(v, t);
  return a;
}

// The backward of F.pad's `mode` over pad.size() / 2 dims, through the public function of it.
Tensor backward_of(const std::string& mode, const Tensor& grad, const Tensor& x, const Shape& pad) {
  const size_t n = pad.size() / 2;
  if (mode == "constant") return constant_pad_nd_backward(grad, pad);
  if (mode == "circular") return pad_circular_backward(grad, pad);
  if (mode == "reflect")
    return n == 1 ? reflection_pad1d_backward(grad, x, pad)
           : n == 2 ? reflection_pad2d_backward(grad, x, pad)
                    : reflection_pad3d_backward(grad, x, pad);
  return n == 1 ? replication_pad1d_backward(grad, x, pad)
         : n == 2 ? replication_pad2d_backward(grad, x, pad)
                  : replication_pad3d_backward(grad, x, pad);
}


// A channels-last view of `a`'s values (4-d or 5-d) on dev.
Tensor channels_last(const ref::Array& a, DType t, Device dev) {
  Tensor x = th::make_tensor(a, t, dev);
  return x.contiguous(a.dim() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d);
}

class Pad : public th::DeviceTest {};

TEST_P(Pad, ConstantTable) {
  th::CaseLoop loop;
  th::Gen g(4100);
  struct C {
    Shape x, pad;
  };
  const std::vector<C> cases = {
      {{5}, {2, 3}},          {{5}, {-2, 1}},         {{5}, {0, 0}},           {{3, 7}, {1, 1, 2, 0}},
      {{3, 7}, {-3, -4}},     {{3, 7}, {0, 0, -3, 0}}, {{2, 3, 4, 5}, {1, 2, 3, 4, 0, 1, 1, 0}},
      {{0, 3}, {1, 1}},       {{0, 3}, {0, 0, 1, 1}},  {{2, 3, 5, 6}, {1, 1, 1, 1, 2, 0}},
      {{1, 2, 3, 4, 5}, {1, 1, 1, 1, 2, 0, 0, 0, 1, 1}}, {{}, {}},           {{4}, {-2, -2}},
      {{70000}, {3, 65536}},  {{2, 65537}, {1, -1, 1, 0}},
      // tall planes of odd-length rows (every alignment of a row against the 16-byte grid)
      {{1, 2, 45, 199}, {1, 0, 2, 3, 1, 0}}, {{3, 300, 7}, {1, 2, 3, 4}}};
  for (const C& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kBFloat16, kInt64, kUInt8, kBool, kFloat8_e4m3fn, kComplex64}) {
        if (t != kFloat32 && ref::numel_of(c.x) > 1000) continue;
        if (!loop.run(th::case_name(c.x, t, l, dev()) + " pad " + ref::shape_to_string(c.pad), [&] {
              th::Input x = th::make_input(c.x, t, dev(), l, g, -50, 50);
              const double value = t == kBool ? 1.0 : t == kUInt8 ? 7.0 : 2.5;
              Tensor y = constant_pad_nd(x.t, c.pad, th::scalar_for(t, value));
              const ref::Array want = ref::pad(x.a, c.pad, ref::PadKind::Constant, th::round_to_dtype(value, t));
              ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
              ASSERT_TRUE(th::expect_equal(y, want));
              Tensor y2 = pad(x.t, c.pad, "constant", value);
              ASSERT_TRUE(th::expect_equal(y2, want));
            }))
          return;
      }
    }
  }
}

// The Qwen-Image VAE's failure class: a temporal pad of a 5-d tensor whose two innermost dims
// hold 2^16 elements or more (MPSGraph wrote the fill there); and a channels-last input.
TEST_P(Pad, ConstantBoundariesAndChannelsLast) {
  th::CaseLoop loop;
  th::Gen g(4101);
  for (int64_t hw : {65472, 65536, 131072}) {
    const Shape s = {1, 2, 3, hw / 256, 256};
    if (!loop.run("5-d T pad, H*W " + std::to_string(hw), [&] {
          th::Input x = th::make_input(s, kBFloat16, dev(), Layout::Contiguous, g, -4, 4);
          Tensor y = constant_pad_nd(x.t, {0, 0, 0, 0, 2, 0});
          ASSERT_TRUE(th::expect_equal(y, ref::pad(x.a, {0, 0, 0, 0, 2, 0}, ref::PadKind::Constant)));
        }))
      return;
  }
  for (const Shape& s : {Shape{2, 3, 5, 4}, Shape{1, 4, 3, 5, 6}}) {
    const ref::Array a = th::random_array(s, kFloat32, g, -3, 3);
    Tensor x = channels_last(a, kFloat32, dev());
    const Shape p = s.size() == 4 ? Shape{1, 2, -1, 3} : Shape{1, 1, 2, 0, 1, 1};
    Tensor y = constant_pad_nd(x, p, -1.0);
    EXPECT_TRUE(y.is_contiguous(s.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d));
    EXPECT_TRUE(th::expect_equal(y, ref::pad(a, p, ref::PadKind::Constant, -1.0)));
  }
}

TEST_P(Pad, ModesTable) {
  th::CaseLoop loop;
  th::Gen g(4102);
  struct C {
    Shape x, pad;
  };
  const std::vector<C> cases = {
      {{3, 5}, {2, 3}},           {{2, 3, 5}, {-1, 2}},          {{2, 3, 5}, {4, -3}},
      {{2, 3, 5}, {0, 0}},        {{3, 4, 5}, {1, 2, 3, 0}},     {{2, 3, 4, 5}, {-1, 3, 2, -2}},
      {{2, 3, 4, 5, 6}, {1, 2, 3, 1, 2, 1}}, {{3, 4, 5, 6}, {2, 0, -1, 1, 1, 2}}, {{0, 3, 5}, {1, 2}},
      {{1, 2, 70000}, {3, 4}},    {{2, 1, 1}, {0, 0}},
      {{1, 2, 45, 199}, {2, 1, 3, 2}}, {{2, 300, 7}, {3, 2, 1, 4}}};
  for (const C& c : cases) {
    for (const char* mode : {"reflect", "replicate", "circular"}) {
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Offset}) {
        for (DType t : {kFloat32, kBFloat16, kInt32, kComplex64}) {
          if (t != kFloat32 && ref::numel_of(c.x) > 1000) continue;
          if (!takes(kind_of(mode), c.x, c.pad)) continue;
          const std::string name = th::case_name(c.x, t, l, dev()) + " " + mode + " " + ref::shape_to_string(c.pad);
          if (!loop.run(name, [&] {
                th::Input x = th::make_input(c.x, t, dev(), l, g, -50, 50);
                Tensor y = pad(x.t, c.pad, mode);
                const ref::Array want = ref::pad(x.a, c.pad, kind_of(mode));
                ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
                ASSERT_TRUE(th::expect_equal(y, want));
              }))
            return;
        }
      }
    }
  }
}

// PyTorch's values for negative reflect / replicate / circular pads of 0..4 (checked there).
TEST_P(Pad, NegativePadsAsPyTorch) {
  Tensor x = arange(5, TensorOptions(kFloat32).device(dev())).reshape({1, 5});
  auto row = [](const Tensor& t) { return th::to_array(t).v; };
  using V = std::vector<double>;
  EXPECT_EQ(row(reflection_pad1d(x, {-1, 2})), (V{1, 2, 3, 4, 3, 2}));
  EXPECT_EQ(row(reflection_pad1d(x, {2, -1})), (V{2, 1, 0, 1, 2, 3}));
  EXPECT_EQ(row(reflection_pad1d(x, {-3, 4})), (V{3, 4, 3, 2, 1, 0}));
  EXPECT_EQ(row(reflection_pad1d(x, {-6, 2})), (V{2}));
  EXPECT_EQ(row(replication_pad1d(x, {-1, 2})), (V{1, 2, 3, 4, 4, 4}));
  EXPECT_EQ(row(replication_pad1d(x, {-4, 3})), (V{4, 4, 4, 4}));
  EXPECT_EQ(row(replication_pad1d(x, {-9, 5})), (V{4}));
  EXPECT_EQ(row(replication_pad1d(x, {3, -7})), (V{0}));
  EXPECT_EQ(row(pad(x, {2, -1}, "circular")), (V{2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(row(pad(x, {-1, 2}, "circular")), (V{1, 2, 3, 4, 1, 2}));
  EXPECT_EQ(row(pad(x, {-3, -2}, "circular")).size(), 0u);
  // PyTorch's autograd through _pad_circular: [2, 1] on 5 with grad arange(8) gives [9, 3, 4, 5, 7].
  Tensor g = arange(8, TensorOptions(kFloat32).device(dev())).reshape({1, 8});
  EXPECT_EQ(row(pad_circular_backward(g, {2, 1})), (V{9, 3, 4, 5, 7}));
}

TEST_P(Pad, ChannelsLastModes) {
  th::Gen g(4103);
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    for (const Shape& s : {Shape{2, 3, 5, 4}, Shape{2, 4, 3, 5, 6}}) {
      const ref::Array a = th::random_array(s, kBFloat16, g, -3, 3);
      Tensor x = channels_last(a, kBFloat16, dev());
      const Shape p = s.size() == 4 ? Shape{1, 2, -1, 3} : Shape{1, 1, 2, 0, 1, 1};
      Tensor y = pad(x, p, mode);
      EXPECT_TRUE(th::expect_equal(y, ref::pad(a, p, kind_of(mode)))) << mode;
      const bool circular = std::string(mode) == "circular";  // PyTorch's circular output is contiguous
      EXPECT_EQ(y.suggest_memory_format(),
                circular ? MemoryFormat::Contiguous
                         : s.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d)
          << mode;
      if (circular) continue;
      // The backward's grad_input follows the input's layout too.
      th::Input go = th::make_dyadic_input(y.sizes(), kBFloat16, dev(), Layout::Contiguous, g, 4);
      Tensor gi = backward_of(mode, go.t, x, p);
      EXPECT_EQ(gi.suggest_memory_format(), x.suggest_memory_format()) << mode;
      EXPECT_TRUE(th::expect_equal(gi, rounded(ref::pad_backward(go.a, s, p, kind_of(mode)), kBFloat16))) << mode;
    }
  }
}

// Every backward against the scatter-add reference, on every float dtype; dyadic gradients
// make every partial sum exact, so each result is compared bit for bit.
TEST_P(Pad, BackwardTable) {
  th::CaseLoop loop;
  th::Gen g(4104);
  struct C {
    Shape x, pad;
  };
  const std::vector<C> cases = {{{3, 5}, {2, 3}},       {{2, 3, 5}, {-1, 4}},        {{2, 3, 1}, {0, 0}},
                                {{3, 4, 5}, {3, 2, 3, 0}}, {{2, 3, 4, 5}, {-1, 3, 2, -2}},
                                {{2, 2, 3, 4, 5}, {1, 2, 2, 1, 2, 1}}, {{1, 2, 3, 4}, {3, 3, 2, 2, 1, 1}},
                                {{2, 1, 5}, {4, 4}},    {{0, 2, 5}, {1, 1}},
                                // rows long enough for the kernels' vector interior, at every offset
                                {{3, 45}, {5, 7}},      {{2, 19, 37}, {2, 3, 4, 1}}};
  for (const C& c : cases) {
    for (const char* mode : {"constant", "reflect", "replicate", "circular"}) {
      const ref::PadKind kind = kind_of(mode);
      const int n = static_cast<int>(c.pad.size() / 2);
      if (!takes(kind, c.x, c.pad)) continue;
      for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64, kComplex64}) {
        for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Offset}) {
          const std::string name = th::case_name(c.x, t, l, dev()) + " " + mode + " " + ref::shape_to_string(c.pad);
          if (!loop.run(name, [&] {
                th::Input x = th::make_input(c.x, t, dev(), Layout::Contiguous, g, -1, 1);
                Shape out = c.x;
                for (int i = 0; i < n; ++i) out[out.size() - 1 - i] += c.pad[2 * i] + c.pad[2 * i + 1];
                th::Input go = th::make_dyadic_input(out, t, dev(), l, g, 8);
                Tensor gi = backward_of(mode, go.t, x.t, c.pad);
                const ref::Array want = rounded(ref::pad_backward(go.a, c.x, c.pad, kind), t);
                ASSERT_TRUE(th::expect_shape(gi, c.x, t));
                ASSERT_TRUE(th::expect_equal(gi, want));
              }))
            return;
        }
      }
    }
  }
}

// The backward of a linear map equals its finite differences: d sum(w * pad(x)) / dx_i by
// central differences of the float64 reference forward, against reflection / replication /
// circular / constant backward in float64 (random, non-dyadic weights).
TEST_P(Pad, BackwardMatchesFiniteDifferences) {
  th::Gen g(4105);
  struct C {
    const char* mode;
    Shape x, pad;
  };
  for (const C& c : {C{"reflect", {2, 3, 6}, {3, -2}}, C{"replicate", {1, 2, 4, 5}, {2, 1, -1, 3}},
                     C{"circular", {2, 3, 4, 5}, {2, -1, 1, 3}}, C{"constant", {3, 4, 5}, {1, -2, 2, 0, 1, 1}},
                     C{"reflect", {1, 2, 3, 4, 5}, {1, 2, 2, 1, 2, 0}}}) {
    const ref::PadKind kind = kind_of(c.mode);
    const ref::Array x = th::random_array(c.x, kFloat64, g, -1, 1);
    const ref::Array y = ref::pad(x, c.pad, kind);
    const ref::Array w = th::random_array(y.sizes, kFloat64, g, -1, 1);
    auto loss = [&](const ref::Array& xx) {
      const ref::Array yy = ref::pad(xx, c.pad, kind);
      double s = 0;
      for (int64_t i = 0; i < yy.numel(); ++i) s += w.v[i] * yy.v[i];
      return s;
    };
    ref::Array fd(c.x);
    const double h = 1e-3;
    for (int64_t i = 0; i < x.numel(); ++i) {
      ref::Array xp = x, xm = x;
      xp.v[i] += h;
      xm.v[i] -= h;
      fd.v[i] = (loss(xp) - loss(xm)) / (2 * h);
    }
    Tensor wt = th::make_tensor(w, kFloat64, dev());
    Tensor xt = th::make_tensor(x, kFloat64, dev());
    Tensor gi = backward_of(c.mode, wt, xt, c.pad);
    // The loss is linear in x: central differences are exact up to the rounding of the sums.
    th::Tol tol{1e-9, 1e-9};
    EXPECT_TRUE(th::expect_close(gi, fd, tol)) << c.mode;
  }
}

// The release's reflection_pad1d backward bug sat at lengths past 2^16 that are not multiples
// of it; every length here, with pads up to 2048, against the reference.
TEST_P(Pad, Reflection1dBackwardPast65536) {
  th::CaseLoop loop;
  th::Gen g(4106);
  for (int64_t len : {48000, 65535, 65536, 65537, 70000, 131072, 200000}) {
    for (int64_t p : {1, 2048}) {
      if (!loop.run("length " + std::to_string(len) + " pad " + std::to_string(p), [&] {
            th::Input x = th::make_input({2, len}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
            th::Input go = th::make_dyadic_input({2, len + 2 * p}, kFloat32, dev(), Layout::Contiguous, g, 8);
            Tensor gi = reflection_pad1d_backward(go.t, x.t, {p, p});
            ASSERT_TRUE(th::expect_equal(gi, ref::pad_backward(go.a, {2, len}, {p, p}, ref::PadKind::Reflect)));
            Tensor y = reflection_pad1d(x.t, {p, p});
            ASSERT_TRUE(th::expect_equal(y, ref::pad(x.a, {p, p}, ref::PadKind::Reflect)));
          }))
        return;
    }
  }
}

// A gather has one summation order: the same bits on every run, and the same on CPU and CUDA.
TEST_P(Pad, BackwardIsDeterministic) {
  th::Gen g(4107);
  th::Input x = th::make_input({2, 8, 9, 10}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  th::Input go = th::make_input({2, 8, 9 + 8, 10 + 7}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  const Shape p = {3, 4, 4, 4};
  Tensor a = replication_pad2d_backward(go.t, x.t, p);
  Tensor b = replication_pad2d_backward(go.t, x.t, p);
  EXPECT_EQ(th::to_bits(a), th::to_bits(b));
  Tensor cpu = replication_pad2d_backward(th::to_cpu(go.t), th::to_cpu(x.t), p);
  EXPECT_EQ(th::to_bits(a), th::to_bits(cpu));
  ref::Array abs_go = go.a;
  for (double& v : abs_go.v) v = std::fabs(v);
  const ref::Array extra = th::sum_tol(kFloat32, 25, ref::pad_backward(abs_go, x.a.sizes, p, ref::PadKind::Replicate));
  EXPECT_TRUE(th::expect_close(a, ref::pad_backward(go.a, x.a.sizes, p, ref::PadKind::Replicate), th::Tol{}, &extra));
}

// The release's headline failure: a Wan-style tiled video decode pads before every causal 3-d
// conv (8,764 pads per decode, each tile's shapes a little different) and driver memory grew to
// 270 GiB. The same pattern here (28 tiles x 32 layers of constant / replicate pads of 5-d bf16
// activations of a Wan decoder's 384 channels with varying H and W, each followed by the conv's stand-in, a crop and copy) must
// keep the CUDA allocator's reserved memory within 1.25x its peak allocation and flat from one
// decode to the next.
TEST_P(Pad, MemoryStableUnderTiledDecodePads) {
  if (!dev().is_cuda()) GTEST_SKIP() << "the caching allocator under test is CUDA's";
  auto decode = [&] {
    for (int tile = 0; tile < 28; ++tile) {
      const int64_t h = 60 + (tile * 7) % 13, w = 90 + (tile * 5) % 17;
      Tensor x = rand({1, 384, 3, h, w}, TensorOptions(kBFloat16).device(dev()));
      for (int layer = 0; layer < 32; ++layer) {
        Tensor p = layer % 4 == 3 ? pad(x, {1, 1, 1, 1, 2, 0}, "replicate") : constant_pad_nd(x, {1, 1, 1, 1, 2, 0});
        x = p.narrow(2, 2, 3).narrow(3, 1, h).narrow(4, 1, w).contiguous();  // the conv's stand-in
      }
    }
  };
  EXPECT_TRUE(th::memory_stable(dev(), decode));
}

// PyTorch 2.15's own outputs and gradients (tests/data/pad_goldens.json, written by
// scripts/make_pad_goldens.py) for a sample of every mode, negative pads and channels-last
// inputs: the same values bit for bit (dyadic inputs make every sum exact) and the same layouts.
TEST_P(Pad, MatchesPyTorchGoldens) {
  std::ifstream in(th::source_dir() + "/tests/data/pad_goldens.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_GE(j["cases"].size(), 14u);
  auto values = [](int64_t n, int64_t mul, int64_t mod) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i * mul) % mod) / 8.0 - 6.0);
    return v;
  };
  auto format_of = [](const std::string& s) {
    return s == "channels_last" ? MemoryFormat::ChannelsLast
           : s == "channels_last_3d" ? MemoryFormat::ChannelsLast3d
                                     : MemoryFormat::Contiguous;
  };
  for (const auto& c : j["cases"]) {
    const Shape shape = c["shape"].get<Shape>(), p = c["pad"].get<Shape>(), out = c["out_shape"].get<Shape>();
    const std::string mode = c["mode"];
    SCOPED_TRACE(mode + " " + ref::shape_to_string(shape) + " pad " + ref::shape_to_string(p));
    Tensor x = tensor(values(ref::numel_of(shape), 7919, 101), shape).to(dev());
    if (c["channels_last"].get<bool>()) x = x.contiguous(shape.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d);
    Tensor y = pad(x, p, mode);
    ASSERT_EQ(y.sizes(), out);
    EXPECT_TRUE(y.is_contiguous(format_of(c["out_format"])));
    EXPECT_EQ(th::to_array(y).v, c["y"].get<std::vector<double>>());
    Tensor g = tensor(values(ref::numel_of(out), 104729, 97), out).to(dev());
    Tensor gi = backward_of(mode, g, x, p);
    EXPECT_TRUE(gi.is_contiguous(format_of(c["grad_format"])));
    EXPECT_EQ(th::to_array(gi).v, c["grad"].get<std::vector<double>>());
  }
}

TEST_P(Pad, Errors) {
  auto opts = TensorOptions(kFloat32).device(dev());
  Tensor x3 = zeros({2, 3, 4}, opts);
  // constant_pad_nd
  EXPECT_THROWS_SAYING(ShapeError, "constant_pad_nd", "Length of pad must be even but instead it equals 3",
                       constant_pad_nd(x3, {1, 1, 1}));
  EXPECT_THROWS_SAYING(ShapeError, "constant_pad_nd", "Pad length is 8 while the input has 3 dimensions",
                       constant_pad_nd(x3, {1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_THROWS_SAYING(ShapeError, "constant_pad_nd",
                       "The input size 4, plus negative padding -3 and -2 resulted in a negative output size",
                       constant_pad_nd(x3, {-3, -2}));
  EXPECT_THROWS_SAYING(ShapeError, "constant_pad_nd", "narrow(): length must be non-negative",
                       constant_pad_nd(x3, {2, -5}));
  EXPECT_THROWS_OP(Error, "constant_pad_nd", constant_pad_nd(Tensor{}, {1, 1}));
  // pad's routing
  EXPECT_THROWS_SAYING(ValueError, "pad", "Unrecognised padding mode bogus", pad(x3, {1, 1}, "bogus"));
  EXPECT_THROWS_SAYING(ShapeError, "pad", "Padding length must be divisible by 2", pad(x3, {1}, "reflect"));
  EXPECT_THROWS_SAYING(ShapeError, "pad", "but got padding length 8 and input of dimension 3",
                       pad(x3, {1, 1, 1, 1, 1, 1, 1, 1}, "reflect"));
  EXPECT_THROWS_SAYING(ValueError, "pad", "Padding mode \"reflect\" doesn't take in value argument",
                       pad(x3, {1, 1}, "reflect", 1.0));
  EXPECT_NO_THROW(pad(x3, {1, 1}, "reflect", 0.0));
  EXPECT_THROWS_SAYING(ValueError, "pad", "Padding size 6 is not supported for 3D input tensor",
                       pad(x3, {1, 1, 1, 1, 1, 1}, "replicate"));
  EXPECT_THROWS_SAYING(ValueError, "pad", "Padding size 2 is not supported for 1D input tensor",
                       pad(zeros({5}, opts), {1, 1}, "reflect"));
  // reflection / replication
  EXPECT_THROWS_SAYING(ShapeError, "reflection_pad1d", "padding size is expected to be 2, but got: 4",
                       reflection_pad1d(x3, {1, 1, 1, 1}));
  EXPECT_THROWS_SAYING(ShapeError, "reflection_pad2d",
                       "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions "
                       "for input, but got: [2, 0, 3, 3]",
                       reflection_pad2d(zeros({2, 0, 3, 3}, opts), {1, 1, 1, 1}));
  EXPECT_THROWS_SAYING(ShapeError, "reflection_pad2d",
                       "Argument #6: Padding size should be less than the corresponding input dimension, but got: "
                       "padding (0, 5) at dimension 2 of input [2, 3, 3, 3]",
                       reflection_pad2d(zeros({2, 3, 3, 3}, opts), {1, 1, 0, 5}));
  EXPECT_THROWS_SAYING(ShapeError, "reflection_pad1d", "input (W: 3) is too small. Calculated output W: 0",
                       reflection_pad1d(zeros({2, 3}, opts), {-1, -2}));
  EXPECT_THROWS_SAYING(ShapeError, "replication_pad2d",
                       "Calculated output H: 0 W: 4 must be >= 1 in every dimension (input H: 3, W: 4)",
                       replication_pad2d(zeros({1, 3, 4}, opts), {0, 0, -1, -2}));
  EXPECT_THROWS_SAYING(ShapeError, "replication_pad3d", "Calculated output D: 1 H: 3 W: 0 must be >= 1",
                       replication_pad3d(zeros({1, 1, 3, 4}, opts), {-2, -2, 0, 0, 0, 0}));
  EXPECT_NO_THROW(replication_pad1d(zeros({2, 3}, opts), {5, 5}));  // replication takes pads past the size
  EXPECT_THROWS_SAYING(DTypeError, "reflection_pad1d", "not implemented for 'bool'",
                       reflection_pad1d(zeros({2, 3}, TensorOptions(kBool).device(dev())), {1, 1}));
  // backward shapes and dtypes
  Tensor x = zeros({2, 3, 5}, opts);
  EXPECT_THROWS_SAYING(ShapeError, "reflection_pad1d_backward", "grad_output width unexpected. Expected: 8, Got: 7",
                       reflection_pad1d_backward(zeros({2, 3, 7}, opts), x, {1, 2}));
  EXPECT_THROWS_SAYING(ShapeError, "replication_pad1d_backward", "grad_output channel unexpected. Expected: 3, Got: 4",
                       replication_pad1d_backward(zeros({2, 4, 8}, opts), x, {1, 2}));
  EXPECT_THROWS_SAYING(ShapeError, "replication_pad1d_backward", "grad_output batch unexpected",
                       replication_pad1d_backward(zeros({3, 3, 8}, opts), x, {1, 2}));
  EXPECT_THROWS_SAYING(DTypeError, "reflection_pad1d_backward", "not implemented for 'int64'",
                       reflection_pad1d_backward(zeros({2, 3, 8}, TensorOptions(kInt64).device(dev())),
                                                 zeros({2, 3, 5}, TensorOptions(kInt64).device(dev())), {1, 2}));
  EXPECT_THROWS_SAYING(DTypeError, "reflection_pad1d_backward", "of one dtype",
                       reflection_pad1d_backward(zeros({2, 3, 8}, TensorOptions(kBFloat16).device(dev())), x, {1, 2}));
  // circular
  EXPECT_THROWS_SAYING(ShapeError, "pad_circular", "Invalid padding size, expected 1 or 2 non-padded dimensions",
                       pad_circular(zeros({5}, opts), {1, 1}));
  EXPECT_THROWS_SAYING(ShapeError, "pad", "Padding value causes wrapping around more than once",
                       pad(zeros({1, 3}, opts), {4, 0}, "circular"));
  EXPECT_THROWS_SAYING(ShapeError, "pad_circular", "Padding value causes wrapping around more than once",
                       pad_circular(zeros({1, 5}, opts), {-4, 4}));
  EXPECT_THROWS_SAYING(ShapeError, "pad_circular_backward", "is smaller than padding",
                       pad_circular_backward(zeros({1, 3}, opts), {2, 2}));
  EXPECT_THROWS_SAYING(ShapeError, "constant_pad_nd_backward", "Length of pad must be even",
                       constant_pad_nd_backward(zeros({1, 3}, opts), {2}));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "reflection_pad1d_backward", reflection_pad1d_backward(zeros({2, 3, 8}), x, {1, 2}));
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Pad);

// ---- memory formats (device-independent: strides only, values through copy_)

TEST(MemoryFormatTest, ContiguityAndSuggestion) {
  Tensor x = zeros({2, 3, 4, 5});
  EXPECT_TRUE(x.is_contiguous(MemoryFormat::Contiguous));
  EXPECT_FALSE(x.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(x.suggest_memory_format(), MemoryFormat::Contiguous);
  Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(cl.contiguous(MemoryFormat::ChannelsLast).is_same(cl));  // already in that layout: no copy
  Tensor cl3 = empty({2, 3, 4, 5, 6}, TensorOptions(kFloat32), MemoryFormat::ChannelsLast3d);
  EXPECT_EQ(cl3.strides(), (Shape{360, 1, 90, 18, 3}));
  EXPECT_EQ(cl3.suggest_memory_format(), MemoryFormat::ChannelsLast3d);
  // PyTorch's ambiguous case counts as contiguous: an N111 tensor.
  EXPECT_EQ(zeros({4, 1, 1, 1}).suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_TRUE(empty({2, 1, 3, 4}, TensorOptions(kFloat32), MemoryFormat::ChannelsLast).is_contiguous(MemoryFormat::ChannelsLast));
  // A permuted NHWC buffer is channels-last; its exact-match query agrees.
  Tensor nhwc = zeros({2, 4, 5, 3}).permute({0, 3, 1, 2});
  EXPECT_EQ(nhwc.suggest_memory_format(true), MemoryFormat::ChannelsLast);
  // Values survive the layout change.
  Tensor a = arange(120, TensorOptions(kFloat32)).reshape({2, 3, 4, 5});
  Tensor b = a.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(th::to_array(a).v, th::to_array(b).v);
  EXPECT_THROWS_OP(ShapeError, "empty", empty({2, 3, 4}, TensorOptions(kFloat32), MemoryFormat::ChannelsLast));
  EXPECT_THROWS_OP(ShapeError, "empty", zeros({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast3d));
  EXPECT_FALSE(zeros({2, 3, 4}).is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_STREQ(memory_format_name(MemoryFormat::ChannelsLast), "channels_last");
}

// torch's preserve_format and TensorIterator's output order: copies and elementwise results keep
// a dense input's layout (values checked against the contiguous computation), reductions over a
// channels-last input give the contiguous input's values.
TEST(MemoryFormatTest, CopiesAndElementwiseKeepTheLayout) {
  Tensor a = mul(sub(arange(120, TensorOptions(kFloat32)).reshape({2, 3, 4, 5}), 60.0), 0.125);
  Tensor b = a.contiguous(MemoryFormat::ChannelsLast);
  const Shape cl = b.strides();
  EXPECT_TRUE(a.is_non_overlapping_and_dense());
  EXPECT_TRUE(b.is_non_overlapping_and_dense());
  EXPECT_TRUE(a.transpose(0, 3).is_non_overlapping_and_dense());
  EXPECT_FALSE(a.narrow(3, 1, 3).is_non_overlapping_and_dense());
  EXPECT_FALSE(zeros({3, 1}).expand({3, 4}).is_non_overlapping_and_dense());
  EXPECT_EQ(b.clone().strides(), cl);
  EXPECT_EQ(b.to(kBFloat16).strides(), cl);
  EXPECT_EQ(b.to(kBFloat16).to(kFloat32).strides(), cl);
  EXPECT_TRUE(b.contiguous().is_contiguous());
  EXPECT_TRUE(a.narrow(3, 1, 3).clone().is_contiguous());  // not dense: contiguous, as torch
  EXPECT_EQ(empty_like(b).strides(), cl);
  EXPECT_EQ(zeros_like(b).strides(), cl);
  EXPECT_EQ(th::to_array(full_like(b, 2.5)).v, th::to_array(full({2, 3, 4, 5}, 2.5)).v);
  EXPECT_TRUE(empty_like(b, MemoryFormat::Contiguous).is_contiguous());
  EXPECT_TRUE(ones_like(a.narrow(3, 1, 3)).is_contiguous());
  // The first full-shape operand decides, as TensorIterator's stride comparison does.
  EXPECT_EQ(exp(b).strides(), cl);
  EXPECT_EQ(add(b, a).strides(), cl);
  EXPECT_TRUE(add(a, b).is_contiguous());
  EXPECT_EQ(add(b, 1.0).strides(), cl);
  EXPECT_EQ(mul(b, zeros({3, 1, 1})).strides(), cl);
  EXPECT_EQ(clamp(b, -1.0, 1.0).strides(), cl);
  EXPECT_EQ(where(gt(b, 0.0), b, 0.0).strides(), cl);
  EXPECT_EQ(std::get<0>(frexp(b)).strides(), cl);
  EXPECT_EQ(th::to_array(exp(b)).v, th::to_array(exp(a)).v);
  EXPECT_EQ(th::to_array(add(b, a)).v, th::to_array(add(a, a)).v);
  EXPECT_EQ(th::to_array(b.clone()).v, th::to_array(a).v);
  // Reductions: the same values from either layout (these sums are exact in float32).
  EXPECT_EQ(sum(b).item<float>(), sum(a).item<float>());
  EXPECT_EQ(th::to_array(sum(b, {0, 2, 3})).v, th::to_array(sum(a, {0, 2, 3})).v);
  EXPECT_EQ(th::to_array(amax(b, {1, 3})).v, th::to_array(amax(a, {1, 3})).v);
  // Index reductions keep the logical order: ties go to the first element in it.
  Tensor ties = zeros({1, 3, 2, 2}).contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(argmax(ties).item<int64_t>(), 0);
  EXPECT_EQ(th::to_array(argmax(ties, 1)).v, th::to_array(zeros({1, 2, 2})).v);
}

}  // namespace
