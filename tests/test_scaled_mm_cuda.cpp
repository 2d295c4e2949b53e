// CUDA-only scaled_mm cases the device-generic table (test_scaled_mm.cpp) does not reach: GEMV
// shapes long enough for its unrolled full-step loop (several warps and steps, every activation
// dtype), misaligned and strided operands on the GEMV, the cuBLASLt FP8 path at sizes where it
// picks tiled kernels (tensor-wise, row-wise, bias, every output), the exact fallback on the
// layouts cuBLASLt refuses, back-to-back dependent calls (the GEMV is a programmatic dependent
// launch: its inputs may be written by the kernel just before it), and CUDA graph replay of
// the three paths with new inputs.
#include <cmath>

#include "harness.h"
#include "reference/ref_matmul.h"

namespace {

using namespace anvil;
using th::Layout;

ref::Array abs_of(const ref::Array& a) { return ref::map(a, [](double v) { return std::fabs(v); }); }

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

// cuBLASLt's FP8 kernels add products in the Hopper tensor cores' narrower accumulator even with
// fast accumulation off (H200: errors up to 2^-13.7 of sum |a b| sa sb at k = 256, i.e. about a
// 14-bit sum); PyTorch's CUDA scaled_mm has the same numerics. Bound used: 2^-10 of that sum.
constexpr double kTensorCoreFp8Sum = 0x1p-10;

// want = (a @ b) * sa * sb + bias: float32 dots (2 k u32 of the absolute product; `fp8_sum` for
// the cuBLASLt path), the scale and bias in float32, one rounding to out.
::testing::AssertionResult check(const Tensor& got, const ref::Array& a, const ref::Array& b,
                                 const std::vector<double>& sa, const std::vector<double>& sb, const ref::Array* bias,
                                 DType out, double fp8_sum = 0) {
  const ref::Array want = ref::scaled_mm(a, b, sa, sb, bias);
  const ref::Array scale = ref::scaled_mm(abs_of(a), abs_of(b), abs_of(sa), abs_of(sb));
  const double u32 = th::unit_roundoff(kFloat32), uo = th::unit_roundoff(out);
  const double k = static_cast<double>(a.sizes[1]);
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i) {
    extra.v[i] = ((2.0 * k + 4.0) * u32 + fp8_sum) * scale.v[i];
    if (bias) extra.v[i] += 4.0 * u32 * std::fabs(bias->v[i % static_cast<size_t>(want.sizes[1])]);
  }
  return th::expect_close(got, want, th::Tol{th::underflow_atol(out), 2 * uo}, &extra);
}

// w [n, k] as stored -> b [k, n] for the reference.
ref::Array transpose(const ref::Array& w) {
  ref::Array b({w.sizes[1], w.sizes[0]});
  for (int64_t j = 0; j < w.sizes[0]; ++j)
    for (int64_t q = 0; q < w.sizes[1]; ++q) b.at({q, j}) = w.at({j, q});
  return b;
}

struct Shape3 {
  int64_t m, k, n;
};

const Device kGpu(kCUDA, 0);

// scaled_mm with b = W^T (the GEMV's and cuBLASLt's layout) in layouts la / lw.
void run_scaled_mm(const Shape3& c, DType ta, DType tw, DType out, bool row_wise, bool with_bias, Layout la,
                   Layout lw, th::Gen& g) {
  th::Input a = th::make_input({c.m, c.k}, ta, kGpu, la, g, -6, 6);
  th::Input w = th::make_input({c.n, c.k}, tw, kGpu, lw, g, -6, 6);
  th::Input sa = th::make_input(row_wise ? Shape{c.m, 1} : Shape{}, kFloat32, kGpu, Layout::Contiguous, g, 1.0 / 512, 4);
  th::Input sb = th::make_input(row_wise ? Shape{1, c.n} : Shape{}, kFloat32, kGpu, Layout::Contiguous, g, 1.0 / 512, 4);
  th::Input bias;
  if (with_bias) bias = th::make_input({c.n}, out, kGpu, Layout::Contiguous, g, -4, 4);
  const ScalingType r = row_wise ? ScalingType::RowWise : ScalingType::TensorWise;
  Tensor y = scaled_mm(a.t, w.t.t(), sa.t, r, sb.t, r, bias.t, out);
  ASSERT_TRUE(th::expect_shape(y, {c.m, c.n}, out));
  // The cuBLASLt path's shapes (scaled_mm.cu's use_cublaslt; the harness allocates 16-byte aligned).
  const bool lt = c.m > 8 && c.k % 16 == 0 && c.n % 16 == 0 && la == Layout::Contiguous &&
                  lw == Layout::Contiguous && !(ta == kFloat8_e5m2 && tw == kFloat8_e5m2);
  ASSERT_TRUE(check(y, a.a, transpose(w.a), sa.a.v, sb.a.v, with_bias ? &bias.a : nullptr, out,
                    lt ? kTensorCoreFp8Sum : 0.0));
}

std::string name(const Shape3& c, DType ta, DType tw, DType out, bool row_wise, bool bias, Layout la, Layout lw) {
  return "m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) + " " +
         th::dtype_str(ta) + " x " + th::dtype_str(tw) + " -> " + th::dtype_str(out) +
         (row_wise ? " row-wise" : " tensor-wise") + (bias ? " bias" : "") + ", a " + th::layout_name(la) + ", w " +
         th::layout_name(lw);
}

// GEMV: k long enough for several full steps per warp (8 warps x 4 chunks x 64 columns = 2048
// per step), n from one block to a wave of them, k tails, m = 1 .. 8.
TEST(ScaledMmCuda, GemvLongRows) {
  ANVIL_REQUIRE_CUDA();
  th::CaseLoop loop;
  th::Gen g(7000);
  const std::vector<Shape3> shapes = {{1, 4096, 2112}, {1, 8192 + 48, 40}, {3, 6144 + 13, 600}, {8, 4096, 520},
                                      {8, 9000, 48},   {2, 20000, 17},    {5, 2048, 700}};
  int ci = 0;
  for (const Shape3& c : shapes) {
    for (DType tw : {kFloat8_e4m3fn, kFloat8_e5m2}) {
      for (DType out : {kBFloat16, kFloat32}) {
        ++ci;
        const DType ta = ci % 3 == 0 ? kFloat8_e5m2 : kFloat8_e4m3fn;
        const bool row_wise = ci % 2 == 0, bias = out != kFloat32 && ci % 4 != 3;
        if (!loop.run(name(c, ta, tw, out, row_wise, bias, Layout::Contiguous, Layout::Contiguous), [&] {
              run_scaled_mm(c, ta, tw, out, row_wise, bias, Layout::Contiguous, Layout::Contiguous, g);
            }))
          return;
      }
    }
  }
}

// Weight-only GEMV: bfloat16 / float16 / float32 activations (float32 split into three
// bfloat16 terms), long rows and k tails.
TEST(ScaledMmCuda, ScaledLinearLongRows) {
  ANVIL_REQUIRE_CUDA();
  th::CaseLoop loop;
  th::Gen g(7001);
  const std::vector<Shape3> shapes = {{1, 4096, 1100}, {8, 8192, 300}, {4, 4096 + 7, 500}, {1, 16384, 64}};
  for (const Shape3& c : shapes) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      for (DType tw : {kFloat8_e4m3fn, kFloat8_e5m2}) {
        const bool bias = tw == kFloat8_e4m3fn;
        if (!loop.run(name(c, t, tw, t, true, bias, Layout::Contiguous, Layout::Contiguous), [&] {
              th::Input x = th::make_input({c.m, c.k}, t, kGpu, Layout::Contiguous, g, -2, 2);
              th::Input w = th::make_input({c.n, c.k}, tw, kGpu, Layout::Contiguous, g, -6, 6);
              th::Input s = th::make_input({c.n}, kFloat32, kGpu, Layout::Contiguous, g, 1.0 / 512, 2);
              th::Input b;
              if (bias) b = th::make_input({c.n}, t, kGpu, Layout::Contiguous, g, -1, 1);
              Tensor y = scaled_linear(x.t, w.t, s.t, b.t);
              ASSERT_TRUE(check(y, x.a, transpose(w.a), {1.0}, s.a.v, bias ? &b.a : nullptr, t));
            }))
          return;
      }
    }
  }
}

// GEMV on misaligned, padded and strided operands (element loads instead of 16-byte ones).
TEST(ScaledMmCuda, GemvMisalignedAndStrided) {
  ANVIL_REQUIRE_CUDA();
  th::CaseLoop loop;
  th::Gen g(7002);
  const std::vector<std::pair<Layout, Layout>> layouts = {{Layout::Offset, Layout::Contiguous},
                                                          {Layout::Contiguous, Layout::Offset},
                                                          {Layout::RowPadded, Layout::RowPadded},
                                                          {Layout::Transposed, Layout::Contiguous},
                                                          {Layout::Strided, Layout::Offset}};
  for (const Shape3& c : {Shape3{1, 4096 + 5, 300}, Shape3{6, 3000, 129}, Shape3{2, 33, 7}}) {
    for (const auto& [la, lw] : layouts) {
      if (!loop.run(name(c, kFloat8_e4m3fn, kFloat8_e4m3fn, kFloat32, true, false, la, lw), [&] {
            run_scaled_mm(c, kFloat8_e4m3fn, kFloat8_e4m3fn, kFloat32, true, false, la, lw, g);
          }))
        return;
      const DType t = kBFloat16;
      if (!loop.run(name(c, t, kFloat8_e4m3fn, t, true, false, la, lw) + " (scaled_linear)", [&] {
            th::Input x = th::make_input({c.m, c.k}, t, kGpu, la, g, -2, 2);
            th::Input w = th::make_input({c.n, c.k}, kFloat8_e4m3fn, kGpu, lw, g, -6, 6);
            th::Input s = th::make_input({c.n}, kFloat32, kGpu, Layout::Contiguous, g, 1.0 / 512, 2);
            Tensor y = scaled_linear(x.t, w.t, s.t);
            ASSERT_TRUE(check(y, x.a, transpose(w.a), {1.0}, s.a.v, nullptr, t));
          }))
        return;
    }
  }
}

// cuBLASLt FP8 (m > 8, TN, 16-multiples) at sizes where it tiles and may split k, every output,
// both recipes, bias; e4m3 x e5m2 pairs; and the exact fallback for what it refuses.
TEST(ScaledMmCuda, GemmPaths) {
  ANVIL_REQUIRE_CUDA();
  th::CaseLoop loop;
  th::Gen g(7003);
  const std::vector<Shape3> lt_shapes = {{9, 4096, 256}, {300, 1024, 512}, {260, 256, 1040}, {64, 8192, 32}};
  int ci = 0;
  for (const Shape3& c : lt_shapes) {
    for (DType out : {kBFloat16, kFloat16, kFloat32}) {
      for (bool row_wise : {false, true}) {
        ++ci;
        const DType ta = ci % 4 == 1 ? kFloat8_e5m2 : kFloat8_e4m3fn, tw = ci % 4 == 3 ? kFloat8_e5m2 : kFloat8_e4m3fn;
        const bool bias = out != kFloat32 && ci % 3 != 0;
        if (!loop.run(name(c, ta, tw, out, row_wise, bias, Layout::Contiguous, Layout::Contiguous), [&] {
              run_scaled_mm(c, ta, tw, out, row_wise, bias, Layout::Contiguous, Layout::Contiguous, g);
            }))
          return;
      }
    }
  }
  // Fallback: e5m2 x e5m2, k or n not multiples of 16, misaligned or transposed operands.
  struct Fb {
    Shape3 c;
    DType ta, tw;
    Layout la, lw;
  };
  const std::vector<Fb> fallbacks = {{{100, 512, 256}, kFloat8_e5m2, kFloat8_e5m2, Layout::Contiguous, Layout::Contiguous},
                                     {{70, 520, 200}, kFloat8_e4m3fn, kFloat8_e4m3fn, Layout::Contiguous, Layout::Contiguous},
                                     {{70, 515, 208}, kFloat8_e4m3fn, kFloat8_e4m3fn, Layout::Contiguous, Layout::Contiguous},
                                     {{65, 512, 256}, kFloat8_e4m3fn, kFloat8_e4m3fn, Layout::Offset, Layout::Contiguous},
                                     {{65, 512, 256}, kFloat8_e4m3fn, kFloat8_e4m3fn, Layout::Contiguous, Layout::RowPadded},
                                     {{130, 300, 96}, kFloat8_e4m3fn, kFloat8_e5m2, Layout::Transposed, Layout::Transposed}};
  for (const Fb& f : fallbacks) {
    for (DType out : {kBFloat16, kFloat32}) {
      const bool bias = out != kFloat32;
      if (!loop.run(name(f.c, f.ta, f.tw, out, true, bias, f.la, f.lw), [&] {
            run_scaled_mm(f.c, f.ta, f.tw, out, true, bias, f.la, f.lw, g);
          }))
        return;
    }
  }
}

// Each call reads what the kernel just before it wrote: quantize_fp8's cast writes the operands,
// the first scaled_mm's output is the second's activation. Eagerly and inside a graph (where the
// GEMV's programmatic dependency on its predecessor becomes a graph edge).
struct Chain {
  int64_t k = 2048, n = 1024;
  th::Input x, wf, w2f;
  explicit Chain(th::Gen& g)
      : x(th::make_input({1, k}, kFloat32, kGpu, Layout::Contiguous, g, -1, 1)),
        wf(th::make_input({n, k}, kFloat32, kGpu, Layout::Contiguous, g, -1, 1)),
        w2f(th::make_input({k, n}, kFloat32, kGpu, Layout::Contiguous, g, -1, 1)) {}
  // xq, xs, wq, ws, w2q, w2s, h = scaled_mm(xq, wq^T) [1, n], y = scaled_linear(h, w2q) [1, k]
  std::vector<Tensor> run() const {
    const ScalingType rw = ScalingType::RowWise;
    auto [xq, xs] = quantize_fp8(x.t, rw);
    auto [wq, ws] = quantize_fp8(wf.t, rw);
    auto [w2q, w2s] = quantize_fp8(w2f.t, rw);
    Tensor h = scaled_mm(xq, wq.t(), xs, rw, ws.reshape({1, n}), rw, {}, kBFloat16);
    Tensor y = scaled_linear(h, w2q, w2s);
    return {xq, xs, wq, ws, w2q, w2s, h, y};
  }
  // The reference from the quantised operands the chain itself produced.
  static void expect(const std::vector<Tensor>& r) {
    EXPECT_TRUE(check(r[6], th::to_array(r[0]), transpose(th::to_array(r[2])), th::to_array(r[1]).v,
                      th::to_array(r[3]).v, nullptr, kBFloat16));
    EXPECT_TRUE(check(r[7], th::to_array(r[6]), transpose(th::to_array(r[4])), {1.0}, th::to_array(r[5]).v, nullptr,
                      kBFloat16));
  }
};

TEST(ScaledMmCuda, DependentCallsSeeTheirInputs) {
  ANVIL_REQUIRE_CUDA();
  th::Gen gen(7004);
  Chain chain(gen);
  for (int round = 0; round < 3; ++round) {
    chain.x.t.copy_(th::make_input({1, chain.k}, kFloat32, kGpu, Layout::Contiguous, gen, -1, 1).t);
    chain.wf.t.copy_(th::make_input({chain.n, chain.k}, kFloat32, kGpu, Layout::Contiguous, gen, -1, 1).t);
    Chain::expect(chain.run());
  }
}

TEST(ScaledMmCuda, DependentCallsSeeTheirInputsInAGraph) {
  ANVIL_REQUIRE_CUDA();
  Stream s = Stream::create(kGpu);
  StreamGuard guard(s);
  th::Gen gen(7005);
  Chain chain(gen);
  (void)chain.run();
  s.synchronize();
  cuda::Graph graph;
  graph.capture_begin();
  const std::vector<Tensor> captured = chain.run();
  graph.capture_end();
  for (int round = 0; round < 3; ++round) {
    chain.x.t.copy_(th::make_input({1, chain.k}, kFloat32, kGpu, Layout::Contiguous, gen, -1, 1).t);
    chain.w2f.t.copy_(th::make_input({chain.k, chain.n}, kFloat32, kGpu, Layout::Contiguous, gen, -1, 1).t);
    graph.replay();
    s.synchronize();
    Chain::expect(captured);
  }
  graph.reset();
}

// One graph with the GEMV, cuBLASLt and the fallback; new inputs copied in; replays equal
// eager calls bit for bit.
TEST(ScaledMmCuda, GraphReplaysEveryPath) {
  ANVIL_REQUIRE_CUDA();
  Stream s = Stream::create(kGpu);
  StreamGuard guard(s);
  th::Gen gen(7006);
  const ScalingType rw = ScalingType::RowWise, tw = ScalingType::TensorWise;
  const int64_t k = 1024, n = 512;
  auto input = [&](Shape sz, DType t) { return th::make_input(sz, t, kGpu, Layout::Contiguous, gen, -4, 4).t; };
  Tensor a1 = input({4, k}, kFloat8_e4m3fn), a2 = input({96, k}, kFloat8_e4m3fn), a3 = input({96, k}, kFloat8_e5m2);
  Tensor w = input({n, k}, kFloat8_e4m3fn), w3 = input({n, k}, kFloat8_e5m2);
  Tensor sa1 = th::make_input({4, 1}, kFloat32, kGpu, Layout::Contiguous, gen, 0.01, 1).t;
  Tensor sa2 = th::make_input({96, 1}, kFloat32, kGpu, Layout::Contiguous, gen, 0.01, 1).t;
  Tensor sb = th::make_input({1, n}, kFloat32, kGpu, Layout::Contiguous, gen, 0.01, 1).t;
  Tensor st = th::make_input({}, kFloat32, kGpu, Layout::Contiguous, gen, 0.01, 1).t;
  Tensor bias = input({n}, kBFloat16);
  auto calls = [&] {
    return std::vector<Tensor>{scaled_mm(a1, w.t(), sa1, rw, sb, rw, bias),
                               scaled_mm(a2, w.t(), sa2, rw, sb, rw, bias),
                               scaled_mm(a2, w.t(), st, tw, st, tw, {}, kFloat16),
                               scaled_mm(a3, w3.t(), sa2, rw, sb, rw, bias)};  // e5m2 x e5m2: fallback
  };
  (void)calls();
  s.synchronize();
  cuda::Graph graph;
  graph.capture_begin();
  std::vector<Tensor> got = calls();
  graph.capture_end();
  for (int round = 0; round < 2; ++round) {
    for (Tensor* t : {&a1, &a2, &a3, &w, &w3}) t->copy_(input(t->sizes(), t->dtype()));
    sa2.copy_(th::make_input({96, 1}, kFloat32, kGpu, Layout::Contiguous, gen, 0.01, 1).t);
    st.copy_(th::make_input({}, kFloat32, kGpu, Layout::Contiguous, gen, 0.01, 1).t);
    bias.copy_(input({n}, kBFloat16));
    graph.replay();
    s.synchronize();
    std::vector<Tensor> want = calls();
    s.synchronize();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(th::to_bits(got[i]), th::to_bits(want[i])) << "call " << i << " round " << round;
  }
  graph.reset();
}

}  // namespace
