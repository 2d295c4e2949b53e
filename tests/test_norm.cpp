// rms_norm and the fused residual add + rms_norm: one case table (shape x normalized dims x
// weight kind x eps x layout x dtype) against the float64 reference, the default eps, h of
// add_rms_norm bit for bit against add(), 65536+ rows, errors, and CUDA graph replay.
#include <cmath>
#include <optional>

#include "expect_throws.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

struct NormCase {
  Shape x;
  int64_t norm_dims;  // normalized_shape = the last norm_dims sizes of x
};

Shape normalized_shape(const NormCase& c) { return Shape(c.x.end() - c.norm_dims, c.x.end()); }

// cols 1, 7, 128, 2048, 4099 (odd: vector tails), one and many rows, 1-D x, two normalized dims,
// empty inputs.
const std::vector<NormCase>& norm_cases() {
  static const std::vector<NormCase> v = {
      {{1, 1}, 1},     {{3, 7}, 1},        {{1, 128}, 1},   {{7, 128}, 1},      {{5, 2048}, 1},  {{3, 4099}, 1},
      {{33, 65}, 1},   {{128}, 1},         {{2, 1, 64}, 1}, {{4, 6, 8}, 2},     {{2, 3, 5, 7}, 2}, {{300, 1}, 1},
      {{65, 17}, 1},   {{0, 128}, 1},      {{3, 0}, 1},     {{2, 3, 4099}, 1},
  };
  return v;
}

// torch.finfo(dtype).eps, rms_norm's default.
double finfo_eps(DType t) {
  switch (t) {
    case kBFloat16: return 0.0078125;
    case kFloat16: return 0.0009765625;
    case kFloat64: return 2.220446049250313e-16;
    default: return 1.1920928955078125e-07;
  }
}

enum class Weight { None, Same, Float32 };
const char* weight_name(Weight w) { return w == Weight::None ? "no weight" : w == Weight::Same ? "weight" : "float32 weight"; }

ref::Prec prec_of(DType t) {
  switch (t) {
    case kFloat64: return ref::Prec::F64;
    case kBFloat16: return ref::Prec::BF16;
    case kFloat16: return ref::Prec::F16;
    default: return ref::Prec::F32;
  }
}

// The float32 value is within e u_C of the exact one, e = 8 (rsqrt) + 2 (the two products) +
// 4 (sqrt(n) + 1) (the sum of n squares, halved by the square root, with a factor 2 to spare);
// the one rounding to the output adds u_O: rtol = u_O + 2 e u_C.
th::Tol norm_tol(DType t, int64_t cols) {
  const double uc = th::unit_roundoff(th::compute_dtype(t));
  const double e = 10.0 + 4.0 * (std::sqrt(static_cast<double>(cols)) + 1.0);
  return th::Tol{th::underflow_atol(t), th::unit_roundoff(t) + 2.0 * e * uc};
}

std::string norm_name(const NormCase& c, DType t, Layout l, Weight w, std::optional<double> eps, Device d) {
  return th::case_name(c.x, t, l, d) + " normalized " + ref::shape_to_string(normalized_shape(c)) + ", " + weight_name(w) +
         ", eps " + (eps ? std::to_string(*eps) : std::string("default"));
}

const std::vector<Layout> kFewLayouts = {Layout::Contiguous, Layout::RowPadded, Layout::Transposed};
const std::vector<Layout> kAllLayouts = {Layout::Contiguous, Layout::Transposed, Layout::Strided,
                                         Layout::Offset,     Layout::RowPadded,  Layout::Broadcast};

class Norm : public th::DeviceTest {};

TEST_P(Norm, RmsNormTable) {
  th::CaseLoop loop;
  th::Gen g(6000);
  int k = 0;
  for (const NormCase& c : norm_cases()) {
    const Shape ns = normalized_shape(c);
    const int64_t cols = ref::numel_of(ns);
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      for (Layout l : t == kFloat32 ? kAllLayouts : kFewLayouts) {
        const Weight wk = static_cast<Weight>(k % 3);
        const std::optional<double> eps = k % 4 == 0 ? std::optional<double>(1e-6) : k % 4 == 1 ? std::optional<double>(0.25) : std::nullopt;
        ++k;
        if (!loop.run(norm_name(c, t, l, wk, eps, dev()), [&] {
          th::Input x = th::make_input(c.x, t, dev(), l, g, -2, 2);
          th::Input w;
          if (wk != Weight::None) w = th::make_input(ns, wk == Weight::Same ? t : kFloat32, dev(), Layout::Contiguous, g, -2, 2);
          const auto before = th::storage_bits(x.t);
          Tensor y = rms_norm(x.t, ns, w.t, eps);
          ASSERT_TRUE(th::expect_shape(y, c.x, t));
          ASSERT_EQ(y.device(), dev());
          const ref::Array want = ref::rms_norm(x.a, c.norm_dims, w.t.defined() ? &w.a : nullptr, eps.value_or(finfo_eps(t)));
          ASSERT_TRUE(th::expect_close(y, want, norm_tol(t, cols)));
          ASSERT_TRUE(th::storage_unchanged(x.t, before));
        }))
          return;
      }
    }
  }
}

// normalize (F.normalize) against the float64 loop: p 2 (one kernel where normalize_plan says
// Fused: always on the CPU, inner extents >= 16 on CUDA; the composition otherwise), 1, inf,
// -inf, 0 and 3 (the composition); dims first / middle / last / negative; inner extents 1, 15,
// 300 (more than one CPU block of 256) and a Wan VAE-like [1, 96, 2, 6, 10]; 0-dim and empty
// inputs; non-contiguous inputs. Sums of c terms in float32 (float64), the quotient rounded once.
TEST_P(Norm, NormalizeTable) {
  th::CaseLoop loop;
  th::Gen g(6003);
  struct Case {
    Shape x;
    int64_t dim;
  };
  const std::vector<Case> cases = {{{2, 5, 7, 9}, 1}, {{3, 4, 300}, 1}, {{6, 33}, -1}, {{2, 3, 15}, 1},
                                   {{4, 1}, 0},       {{}, 0},           {{0, 3}, 1},   {{2, 0, 5}, 1},
                                   {{1, 96, 2, 6, 10}, 1}, {{7, 3, 2}, 0}};
  int k = 0;
  for (const Case& c : cases)
    for (double p : {2.0, 1.0, double{INFINITY}, -double{INFINITY}, 0.0, 3.0})
      for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
        const Layout l = c.x.size() >= 2 && k++ % 2 ? Layout::Transposed : Layout::Contiguous;
        if (!loop.run(th::case_name(c.x, t, l, dev()) + " dim " + std::to_string(c.dim) + " p " + std::to_string(p), [&] {
          th::Input x = th::make_input(c.x, t, dev(), l, g, -2, 2);
          const int64_t d = c.x.empty() ? 0 : (c.dim + static_cast<int64_t>(c.x.size())) % static_cast<int64_t>(c.x.size());
          const int64_t n = c.x.empty() ? 1 : c.x[static_cast<size_t>(d)];
          if (n == 0 && std::isinf(p)) {  // no identity for max / min: an error, as PyTorch's vector_norm
            EXPECT_THROW((void)normalize(x.t, p, c.dim), Error);
            return;
          }
          const Tensor y = normalize(x.t, p, c.dim);
          ASSERT_TRUE(th::expect_shape(y, c.x, t));
          const double u_acc = th::unit_roundoff(t == kFloat64 ? kFloat64 : kFloat32);
          const th::Tol tol{th::underflow_atol(t), 2 * th::unit_roundoff(t) + static_cast<double>(n + 8) * u_acc};
          ASSERT_TRUE(th::expect_close(y, ref::normalize(x.a, p, d, 1e-12), tol));
        }))
          return;
      }
}

// eps: rows whose norm is below it are divided by eps (not by the norm), a zero row stays zero;
// the plans; PyTorch's errors.
TEST_P(Norm, NormalizeEpsPlansErrors) {
  const TensorOptions o = TensorOptions(kFloat32).device(dev());
  const Tensor tiny = full({2, 3}, 1e-14, o);
  EXPECT_TRUE(th::expect_close(normalize(tiny, 2.0, 1), ref::Array({2, 3}, 1e-14 / 1e-12), th::Tol{0, 1e-6}));
  EXPECT_TRUE(th::expect_close(normalize(tiny, 2.0, 1, 1e-15), ref::Array({2, 3}, 1 / std::sqrt(3.0)), th::Tol{0, 1e-6}));
  EXPECT_TRUE(th::expect_equal(normalize(zeros({3, 4}, o), 2.0, 1), ref::Array({3, 4}, 0.0)));
  EXPECT_EQ(normalize_plan(zeros({2, 5, 7, 9}, o), 2.0, 1), FusedPlan::Fused);
  EXPECT_EQ(normalize_plan(zeros({2, 3, 15}, o), 2.0, 1), dev().is_cpu() ? FusedPlan::Fused : FusedPlan::Composed);
  EXPECT_EQ(normalize_plan(zeros({2, 5, 7, 9}, o), 1.0, 1), FusedPlan::Composed);
  EXPECT_THROWS_SAYING(DTypeError, "normalize", "expected a float16, bfloat16, float32 or float64 input",
                       normalize(zeros({2, 3}, TensorOptions(kInt64).device(dev()))));
  EXPECT_THROWS_SAYING(IndexError, "normalize", "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
                       normalize(zeros({2, 3}, o), 2.0, 2));
  EXPECT_THROWS_SAYING(IndexError, "normalize", "Dimension out of range", normalize(zeros({}, o)));
}

// Values with mean square equal to the default eps (torch.finfo(dtype).eps): the result must
// match the reference with that eps and not the one without it.
TEST_P(Norm, DefaultEpsIsFinfoEps) {
  th::Gen g(6001);
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    SCOPED_TRACE(th::dtype_str(t));
    const double eps = finfo_eps(t), a = std::sqrt(3.0 * eps);  // uniform in [-a, a]: mean square eps
    th::Input x = th::make_input({4, 256}, t, dev(), Layout::Contiguous, g, -a, a);
    Tensor y = rms_norm(x.t, {256});
    EXPECT_TRUE(th::expect_close(y, ref::rms_norm(x.a, 1, nullptr, eps), norm_tol(t, 256)));
    EXPECT_FALSE(th::expect_close(y, ref::rms_norm(x.a, 1, nullptr, 0.0), norm_tol(t, 256))) << "eps ignored";
    EXPECT_FALSE(th::expect_close(y, ref::rms_norm(x.a, 1, nullptr, 1e-6), norm_tol(t, 256))) << "a fixed 1e-6";
    auto [out, h] = add_rms_norm(x.t, zeros_like(x.t), {256});
    EXPECT_TRUE(th::expect_close(out, ref::rms_norm(x.a, 1, nullptr, eps), norm_tol(t, 256))) << "add_rms_norm";
  }
}

// h = x + residual rounded to the dtype, bit for bit the same as add(); out against the
// reference rms_norm of that h and, bit for bit, against rms_norm(add(x, residual)).
TEST_P(Norm, AddRmsNormTable) {
  th::CaseLoop loop;
  th::Gen g(6002);
  int k = 0;
  for (const NormCase& c : norm_cases()) {
    const Shape ns = normalized_shape(c);
    const int64_t cols = ref::numel_of(ns);
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      const std::vector<Layout>& ls = t == kFloat32 ? kAllLayouts : kFewLayouts;
      for (size_t li = 0; li < ls.size(); ++li) {
        const Layout lx = ls[li], lr = ls[(li + 1) % ls.size()];
        const Weight wk = static_cast<Weight>(k % 3);
        const std::optional<double> eps = k % 2 ? std::optional<double>(1e-5) : std::nullopt;
        ++k;
        if (!loop.run(norm_name(c, t, lx, wk, eps, dev()) + ", residual " + th::layout_name(lr), [&] {
          th::Input x = th::make_input(c.x, t, dev(), lx, g, -2, 2);
          th::Input r = th::make_input(c.x, t, dev(), lr, g, -2, 2);
          th::Input w;
          if (wk != Weight::None) w = th::make_input(ns, wk == Weight::Same ? t : kFloat32, dev(), Layout::Contiguous, g, -2, 2);
          const auto x_before = th::storage_bits(x.t), r_before = th::storage_bits(r.t);
          auto [out, h] = add_rms_norm(x.t, r.t, ns, w.t, eps);
          ASSERT_TRUE(th::expect_shape(out, c.x, t));
          ASSERT_TRUE(th::expect_shape(h, c.x, t));
          const ref::AddRmsNorm want =
              ref::add_rms_norm(x.a, r.a, c.norm_dims, w.t.defined() ? &w.a : nullptr, eps.value_or(finfo_eps(t)), prec_of(t));
          ASSERT_TRUE(th::expect_equal(h, want.h)) << "h";
          Tensor h_composed = add(x.t, r.t);
          ASSERT_EQ(th::to_bits(h), th::to_bits(h_composed)) << "h bit for bit add(x, residual)";
          const th::Tol tol = norm_tol(t, cols);
          ASSERT_TRUE(th::expect_close(out, want.out, tol)) << "out";
          // docs/SEMANTICS.md: bit-identical to add then rms_norm.
          ASSERT_EQ(th::to_bits(out), th::to_bits(rms_norm(h_composed, ns, w.t, eps))) << "out vs rms_norm(add(x, residual))";
          ASSERT_TRUE(th::storage_unchanged(x.t, x_before)) << "x";
          ASSERT_TRUE(th::storage_unchanged(r.t, r_before)) << "residual";
        }))
          return;
      }
    }
  }
}

// add_rms_norm_linear: the sum bit for bit add(x, residual); y against the float64 product of
// the float64 normalised row, within the product's summation bound plus the normalised row's
// rounding to the dtype (rtol of norm_tol per element of h, times |h| |w| summed); and against the
// composition add_rms_norm then linear within the same bound. One row of a 16-bit dtype with
// k % 8 == 0, aligned rows and a one-wave grid takes the fused CUDA kernel; the other cases take
// the composition (AddRmsNormLinearPlan asserts which). Inputs rotate over layouts
// (offset views misalign the rows; strided and transposed ones are copied or composed).
TEST_P(Norm, AddRmsNormLinearTable) {
  th::CaseLoop loop;
  th::Gen g(6010);
  struct C {
    int64_t rows, k, n;
  };
  const std::vector<C> cases = {{1, 2048, 5120}, {1, 1024, 96}, {1, 64, 1}, {1, 8, 33}, {1, 8192, 40},
                                {1, 3072, 300},  {3, 256, 17},  {1, 100, 7}, {2, 1024, 64}};
  const std::vector<Layout> kLinearLayouts = {Layout::Contiguous, Layout::Offset, Layout::Contiguous, Layout::RowPadded,
                                              Layout::Transposed};
  int variant = 0;
  for (const C& c : cases) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      const Weight wk = static_cast<Weight>(variant % 3);
      const std::optional<double> eps = variant % 2 ? std::optional<double>(1e-6) : std::nullopt;
      const Layout lx = kLinearLayouts[variant % kLinearLayouts.size()];
      const Layout lw = kLinearLayouts[(variant / 2) % kLinearLayouts.size()];
      ++variant;
      const std::string name = std::to_string(c.rows) + "x" + std::to_string(c.k) + " -> " + std::to_string(c.n) + " " +
                               dtype_name(t) + " " + weight_name(wk) + (eps ? " eps 1e-6" : "") + " x " +
                               th::layout_name(lx) + " w " + th::layout_name(lw) + " " + dev().str();
      if (!loop.run(name, [&] {
            th::Input x = th::make_input({c.rows, c.k}, t, dev(), lx, g, -2, 2);
            th::Input r = th::make_input({c.rows, c.k}, t, dev(), lw, g, -2, 2);
            th::Input w = th::make_input({c.n, c.k}, t, dev(), lw, g, -1, 1);
            th::Input nw;
            if (wk != Weight::None)
              nw = th::make_input({c.k}, wk == Weight::Same ? t : kFloat32, dev(), Layout::Contiguous, g, -2, 2);
            auto [y, sum] = add_rms_norm_linear(x.t, r.t, nw.t, eps, w.t);
            ASSERT_TRUE(th::expect_shape(y, {c.rows, c.n}, t));
            ASSERT_TRUE(th::expect_shape(sum, {c.rows, c.k}, t));
            ASSERT_EQ(th::to_bits(sum), th::to_bits(add(x.t, r.t))) << "sum bit for bit add(x, residual)";
            const ref::AddRmsNorm h = ref::add_rms_norm(x.a, r.a, 1, nw.t.defined() ? &nw.a : nullptr,
                                                        eps.value_or(finfo_eps(t)), prec_of(t));
            const double rh = norm_tol(t, c.k).rtol;
            ref::Array want({c.rows, c.n}), abs_sum({c.rows, c.n}), extra({c.rows, c.n});
            for (int64_t i = 0; i < c.rows; ++i) {
              for (int64_t j = 0; j < c.n; ++j) {
                double acc = 0, mag = 0;
                for (int64_t q = 0; q < c.k; ++q) {
                  const double term = h.out.v[i * c.k + q] * w.a.v[j * c.k + q];
                  acc += term;
                  mag += std::abs(term);
                }
                want.v[i * c.n + j] = acc;
                abs_sum.v[i * c.n + j] = mag;
              }
            }
            const ref::Array sum_extra = th::sum_tol(t, c.k, abs_sum);
            for (size_t e = 0; e < extra.v.size(); ++e) extra.v[e] = sum_extra.v[e] + 2.0 * rh * abs_sum.v[e];
            ASSERT_TRUE(th::expect_close(y, want, th::Tol{th::underflow_atol(t), 0.0}, &extra)) << "y";
            auto [hc, sc] = add_rms_norm(x.t, r.t, {c.k}, nw.t, eps);
            ASSERT_TRUE(th::expect_close(y, th::to_array(linear(hc, w.t)), th::Tol{th::underflow_atol(t), 0.0}, &extra))
                << "y vs the composition";
          }))
        return;
    }
  }
}

TEST_P(Norm, AddRmsNormLinearErrors) {
  const TensorOptions o = TensorOptions(kBFloat16).device(dev());
  const Tensor x = zeros({1, 64}, o), w = zeros({8, 64}, o), nw = zeros({64}, o);
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm_linear", add_rms_norm_linear(x, zeros({1, 32}, o), nw, 1e-6, w));
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm_linear", add_rms_norm_linear(x, x, nw, 1e-6, zeros({8, 32}, o)));
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm_linear", add_rms_norm_linear(x, x, zeros({32}, o), 1e-6, w));
  EXPECT_THROWS_OP(DTypeError, "add_rms_norm_linear",
                   add_rms_norm_linear(x, x, nw, 1e-6, zeros({8, 64}, TensorOptions(kFloat32).device(dev()))));
  EXPECT_THROWS_OP(DTypeError, "add_rms_norm_linear",
                   add_rms_norm_linear(x, zeros({1, 64}, TensorOptions(kFloat16).device(dev())), nw, 1e-6, w));
  EXPECT_THROWS_OP(Error, "add_rms_norm_linear", add_rms_norm_linear(Tensor{}, x, nw, 1e-6, w));
}

// Which path add_rms_norm_linear takes (add_rms_norm_linear_plan, the question the op asks):
// fused on CUDA for a decode row whose GEMV grid is one wave (Qwen3-0.6B-like 1024 -> 1024),
// composed on CUDA past one wave, for float32, two rows, weight scales and misaligned rows, and
// always composed on the CPU. A composed call is bit for bit its composition.
TEST_P(Norm, AddRmsNormLinearPlan) {
  const bool cuda = dev().is_cuda();
  const TensorOptions bf = TensorOptions(kBFloat16).device(dev());
  const Tensor x = randn({1, 1024}, bf), r = randn({1, 1024}, bf), nw = randn({1024}, bf), w = randn({1024, 1024}, bf);
  EXPECT_EQ(add_rms_norm_linear_plan(x, r, nw, 1e-6, w), cuda ? FusedPlan::Fused : FusedPlan::Composed);
  EXPECT_EQ(add_rms_norm_linear_plan(x, r, Tensor{}, std::nullopt, w), cuda ? FusedPlan::Fused : FusedPlan::Composed);
  EXPECT_EQ(add_rms_norm_linear_plan(x, r, nw, 1e-6, randn({32768, 1024}, bf)), FusedPlan::Composed);  // 4096 blocks
  struct Composed {
    const char* what;
    Tensor x, r, nw, w;
  };
  const Tensor x2 = randn({1, 1032}, bf).narrow(1, 8, 1024) /* 16-byte aligned */, xo = randn({1, 1025}, bf).narrow(1, 1, 1024);
  const std::vector<Composed> composed = {
      {"float32", x.to(kFloat32), r.to(kFloat32), nw.to(kFloat32), w.to(kFloat32)},
      {"two rows", randn({2, 1024}, bf), randn({2, 1024}, bf), nw, w},
      {"x misaligned by one element", xo, r, nw, w},
      {"norm weight float32", x, r, nw.to(kFloat32), w},
  };
  for (const Composed& c : composed) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(add_rms_norm_linear_plan(c.x, c.r, c.nw, 1e-6, c.w), FusedPlan::Composed);
    auto [y, sum] = add_rms_norm_linear(c.x, c.r, c.nw, 1e-6, c.w);
    auto [h, sc] = add_rms_norm(c.x, c.r, {1024}, c.nw, 1e-6);
    EXPECT_EQ(th::to_bits(y), th::to_bits(linear(h, c.w)));
    EXPECT_EQ(th::to_bits(sum), th::to_bits(sc));
  }
  EXPECT_EQ(add_rms_norm_linear_plan(x2, r, nw, 1e-6, w), cuda ? FusedPlan::Fused : FusedPlan::Composed);
  const Tensor w8 = w.to(kFloat8_e4m3fn), ws = ones({1024}, TensorOptions(kFloat32).device(dev()));
  EXPECT_EQ(add_rms_norm_linear_plan(x, r, nw, 1e-6, w8, ws), FusedPlan::Composed);
  EXPECT_STREQ(plan_name(FusedPlan::Fused), "fused");
  EXPECT_STREQ(plan_name(FusedPlan::Composed), "composed");
}

// Cancellation in the residual add: h is exactly 0 in some columns and rows, tiny in others.
TEST_P(Norm, AddRmsNormCancellingResidual) {
  th::Gen g(6003);
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(th::dtype_str(t));
    ref::Array x = th::random_array({5, 129}, t, g, -4, 4), r(x.sizes);
    for (size_t i = 0; i < x.v.size(); ++i) r.v[i] = i % 3 == 0 ? -x.v[i] : th::round_to_dtype(-x.v[i] * 0.75, t);
    for (int64_t c = 0; c < 129; ++c) r.v[static_cast<size_t>(2 * 129 + c)] = -x.v[static_cast<size_t>(2 * 129 + c)];  // row 2: h = 0
    auto [out, h] = add_rms_norm(th::make_tensor(x, t, dev()), th::make_tensor(r, t, dev()), {129});
    const ref::AddRmsNorm want = ref::add_rms_norm(x, r, 1, nullptr, finfo_eps(t), prec_of(t));
    EXPECT_TRUE(th::expect_equal(h, want.h));
    EXPECT_TRUE(th::expect_close(out, want.out, norm_tol(t, 129)));
  }
}

// 65536+ rows: a 16-bit grid dim or row index breaks here.
TEST_P(Norm, MoreThan65536Rows) {
  th::CaseLoop loop;
  th::Gen g(6004);
  for (DType t : {kFloat32, kBFloat16}) {
    if (!loop.run(th::case_name({70000, 7}, t, Layout::RowPadded, dev()), [&] {
      th::Input x = th::make_input({70000, 7}, t, dev(), Layout::RowPadded, g, -2, 2);
      th::Input r = th::make_input({70000, 7}, t, dev(), Layout::Contiguous, g, -2, 2);
      th::Input w = th::make_input({7}, t, dev(), Layout::Contiguous, g, -2, 2);
      ASSERT_TRUE(th::expect_close(rms_norm(x.t, {7}, w.t), ref::rms_norm(x.a, 1, &w.a, finfo_eps(t)), norm_tol(t, 7)));
      auto [out, h] = add_rms_norm(x.t, r.t, {7}, w.t, 1e-6);
      const ref::AddRmsNorm want = ref::add_rms_norm(x.a, r.a, 1, &w.a, 1e-6, prec_of(t));
      ASSERT_TRUE(th::expect_equal(h, want.h));
      ASSERT_TRUE(th::expect_close(out, want.out, norm_tol(t, 7)));
    }))
      return;
  }
}

TEST_P(Norm, Errors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  Tensor x = zeros({2, 3, 4}, f), w = ones({4}, f);
  // normalized_shape must be x's trailing sizes
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(x, {3}));
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(x, {4, 3}));
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(x, {1, 2, 3, 4}));
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(zeros({}, f), {1}));
  // weight of normalized_shape, x's dtype or float32
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(x, {4}, ones({3}, f)));
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(x, {4}, ones({1, 4}, f)));
  EXPECT_THROWS_OP(ShapeError, "rms_norm", rms_norm(x, {3, 4}, w));
  EXPECT_THROWS_OP(DTypeError, "rms_norm", rms_norm(x, {4}, w.to(kInt32)));
  EXPECT_THROWS_OP(DTypeError, "rms_norm", rms_norm(x, {4}, w.to(kFloat64)));
  EXPECT_THROWS_OP(DTypeError, "rms_norm", rms_norm(x.to(kBFloat16), {4}, w.to(kFloat16)));
  // x must be a float type
  EXPECT_THROWS_OP(DTypeError, "rms_norm", rms_norm(x.to(kInt32), {4}));
  EXPECT_THROWS_OP(DTypeError, "rms_norm", rms_norm(x.to(kInt64), {4}, w));
  EXPECT_THROWS_OP(DTypeError, "rms_norm", rms_norm(x.to(kFloat8_e4m3fn), {4}));
  EXPECT_THROWS_OP(Error, "rms_norm", rms_norm(Tensor(), {4}));
  // add_rms_norm: the same checks, and a residual of x's shape and dtype
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm", add_rms_norm(x, x, {3}));
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm", add_rms_norm(x, x, {4}, ones({2}, f)));
  EXPECT_THROWS_OP(DTypeError, "add_rms_norm", add_rms_norm(x, x, {4}, w.to(kInt64)));
  EXPECT_THROWS_OP(DTypeError, "add_rms_norm", add_rms_norm(x.to(kInt32), x.to(kInt32), {4}));
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm", add_rms_norm(x, zeros({2, 4, 4}, f), {4}));
  EXPECT_THROWS_OP(ShapeError, "add_rms_norm", add_rms_norm(x, zeros({3, 4}, f), {4}));  // no broadcasting
  EXPECT_THROWS_OP(DTypeError, "add_rms_norm", add_rms_norm(x, x.to(kBFloat16), {4}));
  EXPECT_THROWS_OP(DTypeError, "add_rms_norm", add_rms_norm(x.to(kFloat16), x, {4}));
  EXPECT_THROWS_OP(Error, "add_rms_norm", add_rms_norm(x, Tensor(), {4}));
  EXPECT_THROWS_OP(Error, "add_rms_norm", add_rms_norm(Tensor(), x, {4}));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "rms_norm", rms_norm(x, {4}, ones({4})));
    EXPECT_THROWS_OP(DeviceError, "add_rms_norm", add_rms_norm(x, zeros({2, 3, 4}), {4}));
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Norm);

// ---- CUDA graph ------------------------------------------------------------------------------
TEST(NormGraph, RmsNormAndAddRmsNormReplayNewInputs) {
  ANVIL_REQUIRE_CUDA();
  const Device g(kCUDA, 0);
  Stream s = Stream::create(g);
  StreamGuard guard(s);
  th::Gen gen(6005);
  for (DType t : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(th::dtype_str(t));
    const Shape sizes = {4, 2048};
    th::Input x = th::make_input(sizes, t, g, Layout::Contiguous, gen, -2, 2);
    th::Input r = th::make_input(sizes, t, g, Layout::Contiguous, gen, -2, 2);
    th::Input w = th::make_input({2048}, t, g, Layout::Contiguous, gen, -2, 2);
    Tensor warm = rms_norm(x.t, {2048}, w.t, 1e-6);
    auto warm2 = add_rms_norm(x.t, r.t, {2048}, w.t, 1e-6);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    Tensor y = rms_norm(x.t, {2048}, w.t, 1e-6);
    auto [out, h] = add_rms_norm(x.t, r.t, {2048}, w.t, 1e-6);
    graph.capture_end();
    for (int round = 0; round < 3; ++round) {
      th::Input nx = th::make_input(sizes, t, g, Layout::Contiguous, gen, -2, 2);
      th::Input nr = th::make_input(sizes, t, g, Layout::Contiguous, gen, -2, 2);
      th::Input nw = th::make_input({2048}, t, g, Layout::Contiguous, gen, -2, 2);
      x.t.copy_(nx.t);
      r.t.copy_(nr.t);
      w.t.copy_(nw.t);
      graph.replay();
      s.synchronize();
      Tensor ey = rms_norm(x.t, {2048}, w.t, 1e-6);
      auto [eout, eh] = add_rms_norm(x.t, r.t, {2048}, w.t, 1e-6);
      s.synchronize();
      EXPECT_EQ(th::to_bits(y), th::to_bits(ey)) << "rms_norm, round " << round;
      EXPECT_EQ(th::to_bits(out), th::to_bits(eout)) << "add_rms_norm out, round " << round;
      EXPECT_EQ(th::to_bits(h), th::to_bits(eh)) << "add_rms_norm h, round " << round;
      EXPECT_TRUE(th::expect_close(y, ref::rms_norm(nx.a, 1, &nw.a, 1e-6), norm_tol(t, 2048))) << "round " << round;
      const ref::AddRmsNorm want = ref::add_rms_norm(nx.a, nr.a, 1, &nw.a, 1e-6, prec_of(t));
      EXPECT_TRUE(th::expect_equal(h, want.h)) << "round " << round;
      EXPECT_TRUE(th::expect_close(out, want.out, norm_tol(t, 2048))) << "round " << round;
    }
    graph.reset();
  }
}

}  // namespace
