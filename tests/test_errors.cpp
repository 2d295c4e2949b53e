// Every error path: the exception type and the "[op]" prefix of its message. Bad input must
// throw, never crash.
#include "harness.h"

namespace {

using namespace anvil;

Tensor t2(int64_t a, int64_t b, DType t = kFloat32) { return zeros({a, b}, TensorOptions(t)); }
Tensor t1(int64_t a, DType t = kFloat32) { return zeros({a}, TensorOptions(t)); }
Tensor idx(std::vector<int64_t> v) { return tensor(v); }

// ---- shapes ---------------------------------------------------------------------------------
TEST(Errors, BroadcastMismatchNamesTheOp) {
  EXPECT_THROWS_OP(ShapeError, "add", add(t2(2, 3), t2(4, 3)));
  EXPECT_THROWS_OP(ShapeError, "sub", sub(t2(2, 3), t1(2)));
  EXPECT_THROWS_OP(ShapeError, "mul", mul(t2(2, 3), t2(3, 2)));
  EXPECT_THROWS_OP(ShapeError, "div", div(t2(2, 3), t1(4)));
  EXPECT_THROWS_OP(ShapeError, "maximum", maximum(t2(2, 3), t1(4)));
  EXPECT_THROWS_OP(ShapeError, "eq", eq(t2(2, 3), t1(4)));
  EXPECT_THROWS_OP(ShapeError, "logical_and", logical_and(t2(2, 3), t1(4)));
  EXPECT_THROWS_OP(ShapeError, "where", where(zeros({2, 3}, TensorOptions(kBool)), t1(3), t1(4)));
  EXPECT_THROWS_OP(ShapeError, "clamp", clamp(t2(2, 3), t1(4), t1(3)));
  EXPECT_THROWS_OP(ShapeError, "masked_fill", masked_fill(t2(2, 3), zeros({4}, TensorOptions(kBool)), 1.0));
}

TEST(Errors, MatmulShapes) {
  EXPECT_THROWS_OP(ShapeError, "mm", mm(t2(2, 3), t2(4, 5)));
  EXPECT_THROWS_OP(ShapeError, "mm", mm(zeros({2, 2, 2}), t2(2, 2)));
  EXPECT_THROWS_OP(ShapeError, "mm", mm(t1(2), t2(2, 2)));
  EXPECT_THROWS_OP(ShapeError, "bmm", bmm(t2(2, 2), t2(2, 2)));
  EXPECT_THROWS_OP(ShapeError, "bmm", bmm(zeros({2, 3, 4}), zeros({3, 4, 5})));
  EXPECT_THROWS_OP(ShapeError, "bmm", bmm(zeros({2, 3, 4}), zeros({2, 5, 5})));
  EXPECT_THROWS_OP(ShapeError, "matmul", matmul(zeros({}), t1(2)));
  EXPECT_THROWS_OP(ShapeError, "matmul", matmul(t1(3), t1(4)));
  EXPECT_THROWS_OP(ShapeError, "matmul", matmul(zeros({2, 3, 4}), zeros({3, 4, 5})));
  EXPECT_THROWS_OP(ShapeError, "matmul", matmul(zeros({2, 3, 4}), t1(5)));
}

TEST(Errors, ViewShapes) {
  Tensor x = t2(4, 6);
  EXPECT_THROWS_OP(ShapeError, "view", x.t().view({24}));
  EXPECT_THROWS_OP(ShapeError, "view", x.view({5, 5}));
  EXPECT_THROWS_OP(ShapeError, "view", x.view({-1, -1}));
  EXPECT_THROWS_OP(ShapeError, "view", x.view({0, -1}));
  EXPECT_THROWS_OP(ShapeError, "reshape", x.reshape({7, -1}));
  EXPECT_THROWS_OP(ShapeError, "expand", x.expand({5, 6}));
  EXPECT_THROWS_OP(ShapeError, "expand", x.expand({6}));
  EXPECT_THROWS_OP(ShapeError, "expand", x.expand({-1, -1, 6}));
  EXPECT_THROWS_OP(ShapeError, "permute", x.permute({0}));
  EXPECT_THROWS_OP(ShapeError, "permute", x.permute({0, 0}));
  EXPECT_THROWS_OP(ShapeError, "t", zeros({2, 2, 2}).t());
  EXPECT_THROWS_OP(ShapeError, "flatten", zeros({2, 2, 2}).flatten(2, 1));
  EXPECT_THROWS_OP(ShapeError, "as_strided", x.as_strided({2, 2}, {1}));
  // A view reaching past its storage would read out of bounds: refused, as torch's setStorage.
  EXPECT_THROWS_OP(Error, "as_strided", x.as_strided({10, 10}, {10, 1}));
  EXPECT_THROWS_OP(Error, "as_strided", x.as_strided({2}, {1}, 23));
  EXPECT_THROWS_OP(ShapeError, "empty", empty({2, -3}));
  EXPECT_THROWS_OP(ShapeError, "empty_strided", empty_strided({2, 3}, {1}));
}

TEST(Errors, CatStackCopyShapes) {
  EXPECT_THROWS_OP(ShapeError, "cat", cat({}));
  EXPECT_THROWS_OP(ShapeError, "cat", cat({t2(2, 3), t2(3, 4)}, 0));
  EXPECT_THROWS_OP(ShapeError, "cat", cat({t2(2, 3), t1(3)}));
  EXPECT_THROWS_OP(ShapeError, "cat", cat({zeros({}), zeros({})}));
  EXPECT_THROWS_OP(IndexError, "cat", cat({t2(2, 3), t2(2, 3)}, 2));
  EXPECT_THROWS_OP(ShapeError, "stack", stack({}));
  EXPECT_THROWS_OP(ShapeError, "stack", stack({t1(2), t1(3)}));
  EXPECT_THROWS_OP(IndexError, "stack", stack({t1(2), t1(2)}, 3));
  Tensor d = t2(2, 3);
  EXPECT_THROWS_OP(ShapeError, "copy_", d.copy_(t2(3, 3)));
  EXPECT_THROWS_OP(ShapeError, "copy_", d.copy_(zeros({2, 2, 3})));
  EXPECT_THROWS_OP(ShapeError, "item", t1(2).item());
  EXPECT_THROWS_OP(ShapeError, "item", t1(0).item<float>());
}

TEST(Errors, IndexOpShapes) {
  EXPECT_THROWS_OP(ShapeError, "index_select", index_select(t2(3, 4), 0, zeros({2, 2}, TensorOptions(kInt64))));
  EXPECT_THROWS_OP(ShapeError, "gather", gather(t2(3, 4), 1, zeros({3}, TensorOptions(kInt64))));
  EXPECT_THROWS_OP(ShapeError, "gather", gather(t2(3, 4), 1, zeros({4, 2}, TensorOptions(kInt64))));
  EXPECT_THROWS_OP(ShapeError, "scatter", scatter(t2(3, 4), 1, zeros({3, 2}, TensorOptions(kInt64)), t2(3, 1)));
  EXPECT_THROWS_OP(ShapeError, "scatter", scatter(t2(3, 4), 1, zeros({4, 2}, TensorOptions(kInt64)), t2(4, 4)));
  EXPECT_THROWS_OP(ShapeError, "scatter_add", scatter_add(t2(3, 4), 1, zeros({2}, TensorOptions(kInt64)), t2(3, 4)));
  EXPECT_THROWS_OP(ShapeError, "embedding", embedding(t1(5), idx({0})));
  EXPECT_THROWS_OP(ShapeError, "embedding", embedding(zeros({2, 2, 2}), idx({0})));
}

TEST(Errors, ReductionDims) {
  EXPECT_THROWS_OP(IndexError, "sum", sum(t2(2, 3), {2}));
  EXPECT_THROWS_OP(IndexError, "mean", mean(t2(2, 3), {-3}));
  EXPECT_THROWS_OP(ShapeError, "sum", sum(t2(2, 3), {0, 0}));
  EXPECT_THROWS_OP(ShapeError, "amax", amax(t2(2, 3), {1, -1}));
  EXPECT_THROWS_OP(IndexError, "max", max(t2(2, 3), 2));
  EXPECT_THROWS_OP(IndexError, "argmax", argmax(t2(2, 3), 5));
  EXPECT_THROWS_OP(IndexError, "var", var(t2(2, 3), {3}));
  // Ordered reductions over nothing have no answer.
  EXPECT_THROWS_OP(IndexError, "amax", amax(t1(0)));
  EXPECT_THROWS_OP(IndexError, "amin", amin(t2(3, 0), {1}));
  EXPECT_THROWS_OP(IndexError, "max", max(t1(0)));
  EXPECT_THROWS_OP(IndexError, "min", min(t2(0, 3), 0));
  EXPECT_THROWS_OP(IndexError, "argmax", argmax(t1(0)));
  EXPECT_THROWS_OP(IndexError, "argmin", argmin(t2(3, 0), 1));
}

// ---- indices out of range ------------------------------------------------------------------------
TEST(Errors, IndexOutOfRange) {
  Tensor x = t2(5, 3);
  EXPECT_THROWS_OP(IndexError, "index_select", index_select(x, 0, idx({0, 5})));
  EXPECT_THROWS_OP(IndexError, "index_select", index_select(x, 0, idx({-1})));
  EXPECT_THROWS_OP(IndexError, "index_select", index_select(x, 2, idx({0})));
  EXPECT_THROWS_OP(IndexError, "index_select", index_select(zeros({0, 3}), 0, idx({0})));
  EXPECT_THROWS_OP(IndexError, "gather", gather(x, 1, zeros({5, 3}, TensorOptions(kInt64)).fill_(3)));
  EXPECT_THROWS_OP(IndexError, "gather", gather(x, 0, zeros({1, 1}, TensorOptions(kInt64)).fill_(-6)));
  EXPECT_THROWS_OP(IndexError, "scatter", scatter(x, 0, zeros({1, 3}, TensorOptions(kInt64)).fill_(5), x));
  EXPECT_THROWS_OP(IndexError, "scatter", scatter(x, 0, zeros({1, 3}, TensorOptions(kInt64)).fill_(5), 1.0));
  EXPECT_THROWS_OP(IndexError, "scatter_add", scatter_add(x, 1, zeros({5, 3}, TensorOptions(kInt64)).fill_(7), x));
  EXPECT_THROWS_OP(IndexError, "embedding", embedding(x, idx({4, 5})));
  EXPECT_THROWS_OP(IndexError, "embedding", embedding(x, idx({-1})));
  // A bad index far into a long index tensor, past 2^16.
  Tensor big = zeros({70000}, TensorOptions(kInt64));
  big.select(0, 69999).fill_(5);
  EXPECT_THROWS_OP(IndexError, "index_select", index_select(x, 0, big));
  EXPECT_THROWS_OP(IndexError, "embedding", embedding(x, big));
}

TEST(Errors, ViewIndexOutOfRange) {
  Tensor x = t2(4, 6);
  EXPECT_THROWS_OP(IndexError, "select", x.select(0, 4));
  EXPECT_THROWS_OP(IndexError, "select", x.select(1, -7));
  EXPECT_THROWS_OP(IndexError, "select", x.select(2, 0));
  EXPECT_THROWS_OP(IndexError, "select", zeros({}).select(0, 0));
  EXPECT_THROWS_OP(IndexError, "narrow", x.narrow(0, 3, 2));
  EXPECT_THROWS_OP(IndexError, "narrow", x.narrow(1, -1, 1) .narrow(0, 5, 0));
  EXPECT_THROWS_OP(IndexError, "slice", x.slice(2, 0, 1));
  EXPECT_THROWS_OP(IndexError, "slice", x.slice(0, 0, 4, 0));
  EXPECT_THROWS_OP(IndexError, "slice", x.slice(0, 0, 4, -1));
  EXPECT_THROWS_OP(IndexError, "transpose", x.transpose(0, 2));
  EXPECT_THROWS_OP(IndexError, "permute", x.permute({0, 2}));
  EXPECT_THROWS_OP(IndexError, "unsqueeze", x.unsqueeze(3));
  EXPECT_THROWS_OP(IndexError, "unsqueeze", x.unsqueeze(-4));
  EXPECT_THROWS_OP(IndexError, "squeeze", x.squeeze(2));
  EXPECT_THROWS_OP(IndexError, "size", x.size(-3));
  EXPECT_THROWS_OP(IndexError, "stride", x.stride(2));
}

// ---- dtypes --------------------------------------------------------------------------------------
TEST(Errors, Float8ArithmeticIsNotImplemented) {
  for (DType t : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    Tensor x = zeros({4}, TensorOptions(t));
    std::string name = dtype_name(t);
    auto exact = [&](const std::string& op, auto&& f) {
      try {
        f();
        ADD_FAILURE() << op << " on " << name << ": no error";
      } catch (const DTypeError& e) {
        EXPECT_EQ(std::string(e.what()), "[" + op + "] not implemented for '" + name + "'");
      } catch (const std::exception& e) {
        ADD_FAILURE() << op << ": wrong exception " << e.what();
      }
    };
    exact("add", [&] { return add(x, x); });
    exact("sub", [&] { return sub(x, x); });
    exact("mul", [&] { return mul(x, x); });
    exact("div", [&] { return div(x, x); });
    exact("neg", [&] { return neg(x); });
    exact("exp", [&] { return exp(x); });
    exact("sum", [&] { return sum(x); });
    exact("amax", [&] { return amax(x); });
    EXPECT_THROWS_OP(DTypeError, "mean", mean(x));
    EXPECT_THROWS_OP(DTypeError, "maximum", maximum(x, x));
    EXPECT_THROWS_OP(DTypeError, "mm", mm(x.view({2, 2}), x.view({2, 2})));
    EXPECT_THROWS_OP(DTypeError, "mul", mul(x, 2.0));
    EXPECT_THROWS_OP(DTypeError, "clamp", clamp(x, Scalar(0.0), Scalar(1.0)));
    EXPECT_THROWS_OP(DTypeError, "argmax", argmax(x));
    // Mixing float8 with another dtype is a promotion error (torch: "Promotion for Float8 Types
    // is not supported"), reported by the op that promotes.
    EXPECT_THROWS_OP(DTypeError, "add", add(x, zeros({4})));
    // Storage ops work: clone, copy, cat, fill, index_select, embedding.
    EXPECT_NO_THROW(x.clone());
    EXPECT_NO_THROW(cat({x, x}));
    EXPECT_NO_THROW(x.to(kFloat32));
  }
}

TEST(Errors, UnsignedPromotionIsRefused) {
  EXPECT_THROWS_OP(DTypeError, "add", add(t1(3, kUInt16), t1(3, kInt16)));
  EXPECT_THROWS_OP(DTypeError, "mul", mul(t1(3, kUInt32), t1(3, kInt32)));
  EXPECT_THROWS_OP(DTypeError, "lt", lt(t1(3, kUInt64), t1(3, kInt64)));
  EXPECT_THROWS_OP(DTypeError, "eq", eq(t1(3, kUInt16), t1(3, kUInt8)));
  EXPECT_THROWS_OP(DTypeError, "maximum", maximum(t1(3, kUInt32), t1(3, kBool)));
  EXPECT_THROWS_OP(DTypeError, "where", where(zeros({3}, TensorOptions(kBool)), t1(3, kUInt64), t1(3, kInt8)));
  EXPECT_THROWS_OP(DTypeError, "cat", cat({t1(3, kUInt16), t1(3, kInt32)}));
  EXPECT_THROWS_OP(DTypeError, "promote_types", promote_types(kUInt64, kInt64));
  EXPECT_THROWS_OP(DTypeError, "promote_types", promote_types(kFloat8_e5m2, kFloat8_e4m3fn));
  // With float dtypes and with itself it is fine.
  EXPECT_EQ(add(t1(3, kUInt16), t1(3, kFloat32)).dtype(), kFloat32);
  EXPECT_EQ(maximum(t1(3, kUInt64), t1(3, kUInt64)).dtype(), kUInt64);
}

TEST(Errors, OtherUnsupportedDTypes) {
  EXPECT_THROWS_OP(DTypeError, "mean", mean(t1(3, kInt32)));
  EXPECT_THROWS_OP(DTypeError, "var", var(t1(3, kInt64)));
  EXPECT_THROWS_OP(DTypeError, "std", anvil::std(t1(3, kUInt8)));
  EXPECT_THROWS_OP(DTypeError, "mm", mm(t2(2, 2, kInt32), t2(2, 2, kInt32)));
  EXPECT_THROWS_OP(DTypeError, "mm", mm(t2(2, 2, kFloat32), t2(2, 2, kFloat64)));
  EXPECT_THROWS_OP(DTypeError, "bmm", bmm(zeros({1, 2, 2}, TensorOptions(kBFloat16)), zeros({1, 2, 2}, TensorOptions(kFloat16))));
  EXPECT_THROWS_OP(DTypeError, "matmul", matmul(t1(2, kInt64), t1(2, kInt64)));
  EXPECT_THROWS_OP(DTypeError, "index_select", index_select(t2(3, 3), 0, t1(2, kFloat32)));
  EXPECT_THROWS_OP(DTypeError, "gather", gather(t2(3, 3), 0, t2(1, 1, kInt16)));
  EXPECT_THROWS_OP(DTypeError, "embedding", embedding(t2(3, 3), t1(2, kUInt8)));
  EXPECT_THROWS_OP(DTypeError, "scatter", scatter(t2(3, 3), 0, t2(1, 1, kInt64), t2(1, 1, kFloat64)));
  EXPECT_THROWS_OP(DTypeError, "masked_fill", masked_fill(t2(3, 3), t2(3, 3, kUInt8), 1.0));
  EXPECT_THROWS_OP(DTypeError, "where", where(t1(3, kInt32), t1(3), t1(3)));
  EXPECT_THROWS_OP(DTypeError, "lt", lt(t1(3, kComplex64), t1(3, kComplex64)));
  EXPECT_THROWS_OP(DTypeError, "maximum", maximum(t1(3, kComplex64), t1(3, kComplex64)));
  EXPECT_THROWS_OP(DTypeError, "amax", amax(t1(3, kComplex64)));
  EXPECT_THROWS_OP(DTypeError, "neg", neg(t1(3, kBool)));
  EXPECT_THROWS_OP(DTypeError, "sub", sub(t1(3, kBool), t1(3, kBool)));
  EXPECT_THROWS_OP(DTypeError, "rand", rand({2}, TensorOptions(kInt32)));
  EXPECT_THROWS_OP(DTypeError, "randn", randn({2}, TensorOptions(kBool)));
  EXPECT_THROWS_OP(DTypeError, "data_ptr", t1(3).data_ptr<double>());
  EXPECT_THROWS_OP(DTypeError, "add", add(t1(3, kFloat64), t1(3, kComplex64)));  // complex128
}

TEST(Errors, BadArguments) {
  EXPECT_THROWS_OP(Error, "div", div(t1(3), t1(3), "round"));
  EXPECT_THROWS_OP(Error, "gelu", gelu(t1(3), "exact"));
  EXPECT_THROWS_OP(Error, "clamp", clamp(t1(3), std::nullopt, std::nullopt));
  EXPECT_THROWS_OP(ShapeError, "arange", arange(0, 5, 0));
  EXPECT_THROWS_OP(ShapeError, "arange", arange(5, 0, 1));
  EXPECT_THROWS_OP(ShapeError, "linspace", linspace(0, 1, -2));
  EXPECT_THROWS_OP(ShapeError, "randint", randint(3, 2, {4}));
  EXPECT_THROWS_OP(FormatError, "dtype", dtype_from_name("float4"));
  EXPECT_THROWS_OP(DeviceError, "device", Device("gpu:0"));
  EXPECT_THROWS_OP(Error, "copy_", Tensor().copy_(t1(1)));
  // Integer pow with a negative scalar exponent (torch: "Integers to negative integer powers are not allowed").
  EXPECT_THROWS_OP(Error, "pow", pow(t1(3, kInt32), Scalar(-1)));
}

TEST(Errors, IntegerDivisionByZero) {
  Tensor a = full({7}, 5, TensorOptions(kInt64));
  EXPECT_THROWS_OP(Error, "div", div(a, zeros({7}, TensorOptions(kInt64)), "floor"));
  EXPECT_THROWS_OP(Error, "div", div(a.to(kUInt8), zeros({1}, TensorOptions(kUInt8)), "trunc"));
}

// ---- devices -------------------------------------------------------------------------------------
TEST(Errors, CudaWithoutCuda) {
  if (cuda::is_available()) GTEST_SKIP() << "CUDA is available: this checks the errors of a machine without it";
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  EXPECT_EQ(cuda::device_count(), 0);
  Device g(kCUDA, 0);
  auto no_cuda = [](auto&& f) {
    try {
      f();
    } catch (const DeviceError& e) {
      std::string w = e.what();
      if (w.empty() || w[0] != '[' || w.find(']') == std::string::npos)
        return ::testing::AssertionFailure() << "no [op] prefix: " << w;
      return ::testing::AssertionSuccess();
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << "wrong exception: " << e.what();
    }
    return ::testing::AssertionFailure() << "no error";
  };
  EXPECT_TRUE(no_cuda([&] { return empty({2}, TensorOptions(kFloat32).device(g)); }));
  EXPECT_TRUE(no_cuda([&] { return t1(2).to(g); }));
  EXPECT_TRUE(no_cuda([&] { return memory_stats(g); }));
  EXPECT_TRUE(no_cuda([&] { return Stream::create(g); }));
  EXPECT_TRUE(no_cuda([&] { synchronize(g); }));
  EXPECT_TRUE(no_cuda([&] { Event e(g); }));
  EXPECT_TRUE(no_cuda([&] { cuda::Graph gr; gr.capture_begin(); }));
  EXPECT_TRUE(no_cuda([&] { return cuda::get_device_properties(0); }));
}

TEST(Errors, DeviceMixes) {
  ANVIL_REQUIRE_CUDA();
  Device g(kCUDA, 0);
  Tensor c = t2(2, 3), d = zeros({2, 3}, TensorOptions(kFloat32).device(g));
  Tensor dc = zeros({3, 2}, TensorOptions(kFloat32).device(g));
  EXPECT_THROWS_OP(DeviceError, "add", add(c, d));
  EXPECT_THROWS_OP(DeviceError, "mul", mul(d, c));
  EXPECT_THROWS_OP(DeviceError, "eq", eq(d, c));
  EXPECT_THROWS_OP(DeviceError, "where", where(zeros({2, 3}, TensorOptions(kBool)), d, d));
  EXPECT_THROWS_OP(DeviceError, "mm", mm(c, dc));
  EXPECT_THROWS_OP(DeviceError, "matmul", matmul(d, t2(3, 2)));
  EXPECT_THROWS_OP(DeviceError, "index_select", index_select(d, 0, idx({0})));
  EXPECT_THROWS_OP(DeviceError, "gather", gather(d, 0, zeros({1, 3}, TensorOptions(kInt64))));
  EXPECT_THROWS_OP(DeviceError, "scatter", scatter(d, 0, zeros({1, 3}, TensorOptions(kInt64).device(g)), c));
  EXPECT_THROWS_OP(DeviceError, "masked_fill", masked_fill(d, zeros({2, 3}, TensorOptions(kBool)), 1.0));
  EXPECT_THROWS_OP(DeviceError, "embedding", embedding(d, idx({0})));
  EXPECT_THROWS_OP(DeviceError, "cat", cat({c, d}));
  EXPECT_THROWS_OP(DeviceError, "clamp", clamp(d, c, c));
  EXPECT_THROWS_OP(DeviceError, "data_ptr", d.data_ptr());
  // copy_ and to() across devices are allowed.
  EXPECT_NO_THROW(c.copy_(d));
  EXPECT_NO_THROW(d.copy_(c));
  EXPECT_THROWS_OP(DeviceError, "Event.record", Event(kCPU).record(current_stream(g)));
}

}  // namespace
