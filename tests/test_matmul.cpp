// mm / bmm / matmul for float32, float64, bfloat16, float16 against the float64 triple loop, with
// every operand layout, 1-D operands, batch broadcasting, empty and GEMV-like shapes.
#include "expect_throws.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

struct MatCase {
  const char* op;  // "mm", "bmm", "matmul"
  Shape a, b;
};

const std::vector<MatCase>& mat_cases() {
  static const std::vector<MatCase> v = {
      {"mm", {7, 33}, {33, 5}},         {"mm", {1, 1}, {1, 1}},          {"mm", {0, 5}, {5, 3}},
      {"mm", {5, 0}, {0, 3}},           {"mm", {3, 5}, {5, 0}},          {"mm", {65, 130}, {130, 33}},
      {"mm", {1, 4096}, {4096, 7}},     {"mm", {33, 1}, {1, 65}},        {"mm", {128, 64}, {64, 128}},
      {"mm", {3, 65537}, {65537, 2}},   {"bmm", {3, 7, 33}, {3, 33, 5}}, {"bmm", {1, 1, 9}, {1, 9, 1}},
      {"bmm", {0, 2, 3}, {0, 3, 4}},    {"bmm", {5, 16, 1}, {5, 1, 16}}, {"matmul", {33}, {33}},
      {"matmul", {33}, {33, 7}},        {"matmul", {7, 33}, {33}},       {"matmul", {0}, {0}},
      {"matmul", {2, 1, 7, 33}, {3, 33, 5}}, {"matmul", {4, 7, 33}, {33, 5}}, {"matmul", {7, 33}, {4, 33, 5}},
      {"matmul", {33}, {2, 33, 5}},     {"matmul", {2, 3, 33}, {33}},    {"matmul", {1, 65}, {65, 1}},
      {"matmul", {2, 1, 1, 4096}, {1, 3, 4096, 2}},
      // float32 / float64 C of >= 256 rows: split by rows over the threads (cpu bmm), odd counts.
      {"mm", {300, 70}, {70, 100}},     {"bmm", {2, 261, 40}, {2, 40, 200}},
  };
  return v;
}

Tensor run(const char* op, const Tensor& a, const Tensor& b) {
  std::string o = op;
  if (o == "mm") return mm(a, b);
  if (o == "bmm") return bmm(a, b);
  return matmul(a, b);
}

const std::vector<Layout> kMatLayouts = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset};

class Matmul : public th::DeviceTest {};

// |got - want| <= 2 k u_acc (|A| |B|)_ij + 2 u_out |want|: the classical gamma_k bound of a dot
// product of length k accumulated in u_acc (float32 for bfloat16 / float16), then rounded once.
TEST_P(Matmul, RandomValuesTable) {
  th::CaseLoop loop;
  th::Gen g(3000);
  for (const MatCase& c : mat_cases()) {
    for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (size_t li = 0; li < kMatLayouts.size(); ++li) {
        Layout la = kMatLayouts[li], lb = kMatLayouts[(li + 1) % kMatLayouts.size()];
        if (ref::numel_of(c.a) > 100000 && (t == kFloat64 || la == Layout::Transposed)) continue;
        if (!loop.run(std::string(c.op) + " " + th::case_name(c.a, t, la, dev()) + " x " + ref::shape_to_string(c.b) + " " +
                     th::layout_name(lb), [&] {
          th::Input a = th::make_input(c.a, t, dev(), la, g, -1, 1);
          th::Input b = th::make_input(c.b, t, dev(), lb, g, -1, 1);
          Tensor y = run(c.op, a.t, b.t);
          ref::Array want = ref::matmul(a.a, b.a);
          ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
          ASSERT_EQ(y.device(), dev());
          int64_t k = c.a.back();
          ref::Array scale = ref::matmul_abs(a.a, b.a);
          ref::Array tol(scale.sizes);
          double uacc = th::unit_roundoff(th::compute_dtype(t));
          for (size_t i = 0; i < tol.v.size(); ++i) tol.v[i] = 2.0 * static_cast<double>(k) * uacc * scale.v[i];
          ASSERT_TRUE(th::expect_close(y, want, th::Tol{0, 2 * th::unit_roundoff(t)}, &tol));
        }))
          return;
      }
    }
  }
}

// Small integers: every partial sum is an integer below 2^24, exact in a float32 accumulator in
// any order, so the result is the exact product rounded once to the output dtype. Catches
// dropped k-tails, wrong strides and a reduced-precision (e.g. TF32 or bf16) accumulator.
TEST_P(Matmul, ExactOnSmallIntegers) {
  th::CaseLoop loop;
  th::Gen g(3001);
  for (const MatCase& c : mat_cases()) {
    if (c.a.back() > 4096) continue;
    for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (size_t li = 0; li < kMatLayouts.size(); ++li) {
        Layout la = kMatLayouts[(li + 2) % kMatLayouts.size()], lb = kMatLayouts[li];
        if (!loop.run(std::string(c.op) + " " + th::case_name(c.a, t, la, dev()) + " x " + ref::shape_to_string(c.b) + " " +
                     th::layout_name(lb), [&] {
          th::Input a = th::make_input(c.a, kInt32, dev(), la, g, -2, 2);
          th::Input b = th::make_input(c.b, kInt32, dev(), lb, g, -2, 2);
          Tensor at = th::make_tensor(a.a, t, dev(), la), bt = th::make_tensor(b.a, t, dev(), lb);
          ref::Array want = ref::matmul(a.a, b.a);
          for (double& v : want.v) v = th::round_to_dtype(v, t);
          ASSERT_TRUE(th::expect_equal(run(c.op, at, bt), want));
        }))
          return;
      }
    }
  }
}

TEST_P(Matmul, Float32IsNotComputedInTF32) {
  // 1 + 2^-20 has mantissa bits beyond TF32's 10: (1 + 2^-20)^2 summed over k = 15 is
  // 15 (1 + 2^-19), exact in float32 (every partial sum is below 16, where the ulp is 2^-20),
  // while a TF32 (or bf16) multiply gives 15.
  const int64_t k = 15;
  ref::Array a({1, k}, 1.0 + std::ldexp(1.0, -20)), b({k, 1}, 1.0 + std::ldexp(1.0, -20));
  Tensor y = mm(th::make_tensor(a, kFloat32, dev()), th::make_tensor(b, kFloat32, dev()));
  double got = y.item<double>();
  double want = static_cast<float>(k * (1.0 + std::ldexp(1.0, -19)));
  EXPECT_EQ(got, want);
}

TEST_P(Matmul, ResultIsNotAliasedAndInputsUnchanged) {
  th::Gen g(3002);
  th::Input a = th::make_input({7, 33}, kFloat32, dev(), Layout::Contiguous, g, -1, 1);
  th::Input b = th::make_input({33, 5}, kFloat32, dev(), Layout::Transposed, g, -1, 1);
  Tensor y = matmul(a.t, b.t);
  EXPECT_NE(y.storage(), a.t.storage());
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_TRUE(th::expect_equal(a.t, a.a));
  EXPECT_TRUE(th::expect_equal(b.t, b.a));
}

// bmm's out_dtype float32 for 16-bit inputs: the float32 sums unrounded (integer products whose
// sums need more than a 16-bit mantissa come out exact), strided operands; out_dtype equal to the
// inputs' is plain bmm; anything else is a DTypeError with PyTorch's message.
TEST_P(Matmul, BmmOutDtypeFloat32) {
  th::Gen g(3003);
  for (DType t : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(th::dtype_str(t));
    th::Input a = th::make_input({3, 9, 300}, kInt32, dev(), Layout::Contiguous, g, -16, 16);
    th::Input b = th::make_input({3, 300, 20}, kInt32, dev(), Layout::Transposed, g, -16, 16);
    const Tensor at = th::make_tensor(a.a, t, dev()), bt = th::make_tensor(b.a, t, dev(), Layout::Transposed);
    const Tensor y = bmm(at, bt, kFloat32);
    ref::Array want({3, 9, 20});
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t r = 0; r < 9; ++r)
        for (int64_t c = 0; c < 20; ++c) {
          double sum = 0;
          for (int64_t q = 0; q < 300; ++q) sum += a.a.at({i, r, q}) * b.a.at({i, q, c});
          want.at({i, r, c}) = sum;
        }
    ASSERT_TRUE(th::expect_shape(y, {3, 9, 20}, kFloat32));
    EXPECT_TRUE(th::expect_equal(y, want));
    EXPECT_EQ(th::to_bits(bmm(at, bt, t)), th::to_bits(bmm(at, bt)));
    EXPECT_THROWS_SAYING(DTypeError, "bmm", "out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs",
                         bmm(at, bt, t == kBFloat16 ? kFloat16 : kBFloat16));
  }
  const Tensor f = ones({1, 2, 2}, TensorOptions(kFloat32).device(dev()));
  EXPECT_THROWS_SAYING(DTypeError, "bmm", "out_dtype must be the same", bmm(f, f, kFloat64));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Matmul);

}  // namespace
