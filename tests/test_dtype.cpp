// dtypes: element sizes, names, predicates, torch.promote_types and torch.result_type.
#include <map>
#include <sstream>

#include "harness.h"

namespace {

using namespace anvil;

// The order of every table below.
const std::vector<DType> kOrder = {kBool,  kUInt8,   kInt8,    kUInt16,  kInt16,         kUInt32,       kInt32,     kUInt64,
                                   kInt64, kFloat16, kBFloat16, kFloat32, kFloat64, kFloat8_e4m3fn, kFloat8_e5m2, kComplex64};

TEST(DType, ElementSizes) {
  const size_t want[] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1, 8};
  for (size_t i = 0; i < kOrder.size(); ++i) EXPECT_EQ(element_size(kOrder[i]), want[i]) << dtype_name(kOrder[i]);
  EXPECT_EQ(static_cast<int>(kOrder.size()), kNumDTypes);
}

TEST(DType, NamesAreTorchNamesAndRoundTrip) {
  const char* want[] = {"bool",    "uint8",    "int8",    "uint16",  "int16",         "uint32",      "int32",    "uint64",
                        "int64",   "float16",  "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "complex64"};
  for (size_t i = 0; i < kOrder.size(); ++i) {
    EXPECT_STREQ(dtype_name(kOrder[i]), want[i]);
    EXPECT_EQ(dtype_from_name(want[i]), kOrder[i]) << want[i];
    std::ostringstream os;
    os << kOrder[i];
    EXPECT_NE(os.str().find(want[i]), std::string::npos) << os.str();
  }
  EXPECT_EQ(kHalf, kFloat16);
  EXPECT_EQ(kFloat, kFloat32);
  EXPECT_EQ(kDouble, kFloat64);
  EXPECT_EQ(kComplexFloat, kComplex64);
}

TEST(DType, UnknownNameIsFormatError) {
  EXPECT_THROWS_OP(FormatError, "dtype", dtype_from_name("float128"));
  EXPECT_THROWS_OP(FormatError, "dtype", dtype_from_name(""));
}

TEST(DType, Predicates) {
  // bool uint8 int8 uint16 int16 uint32 int32 uint64 int64 f16 bf16 f32 f64 e4m3 e5m2 c64
  const int fp[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0};
  const int cx[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const int in[] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  const int us[] = {1, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  const int f8[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0};
  const int rf[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0};
  for (size_t i = 0; i < kOrder.size(); ++i) {
    DType t = kOrder[i];
    SCOPED_TRACE(dtype_name(t));
    EXPECT_EQ(is_floating_point(t), fp[i] == 1);
    EXPECT_EQ(is_complex(t), cx[i] == 1);
    EXPECT_EQ(is_integral(t), in[i] == 1);
    EXPECT_EQ(is_integral(t, true), in[i] == 1 || t == kBool);
    EXPECT_EQ(is_unsigned(t), us[i] == 1);
    EXPECT_EQ(is_float8(t), f8[i] == 1);
    EXPECT_EQ(is_reduced_float(t), rf[i] == 1);
  }
}

TEST(DType, DTypeOfCppTypes) {
  EXPECT_EQ(dtype_of_v<bool>, kBool);
  EXPECT_EQ(dtype_of_v<uint16_t>, kUInt16);
  EXPECT_EQ(dtype_of_v<Half>, kFloat16);
  EXPECT_EQ(dtype_of_v<BFloat16>, kBFloat16);
  EXPECT_EQ(dtype_of_v<Float8_e5m2>, kFloat8_e5m2);
  EXPECT_EQ(dtype_of_v<std::complex<float>>, kComplex64);
}

// torch.promote_types for every pair, as torch 2.15.0 prints it ("!!" = RuntimeError there, a
// DTypeError here). f64 x c64 is complex128 in torch, which anvil does not have: an error too.
const char* kPromote[16] = {
    "b1 u1 i1 !! i2 !! i4 !! i8 f2 bf f4 f8 !! !! c8",  // bool
    "u1 u1 i2 !! i2 !! i4 !! i8 f2 bf f4 f8 !! !! c8",  // uint8
    "i1 i2 i1 !! i2 !! i4 !! i8 f2 bf f4 f8 !! !! c8",  // int8
    "!! !! !! u2 !! !! !! !! !! f2 bf f4 f8 !! !! !!",  // uint16
    "i2 i2 i2 !! i2 !! i4 !! i8 f2 bf f4 f8 !! !! c8",  // int16
    "!! !! !! !! !! u4 !! !! !! f2 bf f4 f8 !! !! !!",  // uint32
    "i4 i4 i4 !! i4 !! i4 !! i8 f2 bf f4 f8 !! !! c8",  // int32
    "!! !! !! !! !! !! !! u8 !! f2 bf f4 f8 !! !! !!",  // uint64
    "i8 i8 i8 !! i8 !! i8 !! i8 f2 bf f4 f8 !! !! c8",  // int64
    "f2 f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f4 f8 !! !! c8",  // float16
    "bf bf bf bf bf bf bf bf bf f4 bf f4 f8 !! !! c8",  // bfloat16
    "f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8 !! !! c8",  // float32
    "f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 !! !! !!",  // float64
    "!! !! !! !! !! !! !! !! !! !! !! !! !! e4 !! !!",  // float8_e4m3fn
    "!! !! !! !! !! !! !! !! !! !! !! !! !! !! e5 !!",  // float8_e5m2
    "c8 c8 c8 !! c8 !! c8 !! c8 c8 c8 c8 !! !! !! c8",  // complex64
};

DType from_code(const std::string& c) {
  static const std::map<std::string, DType> m = {
      {"b1", kBool},    {"u1", kUInt8},    {"i1", kInt8},    {"u2", kUInt16},  {"i2", kInt16},         {"u4", kUInt32},
      {"i4", kInt32},   {"u8", kUInt64},   {"i8", kInt64},   {"f2", kFloat16}, {"bf", kBFloat16},      {"f4", kFloat32},
      {"f8", kFloat64}, {"e4", kFloat8_e4m3fn}, {"e5", kFloat8_e5m2}, {"c8", kComplex64}};
  return m.at(c);
}

TEST(DType, PromoteTypesTable) {
  for (size_t i = 0; i < 16; ++i) {
    std::istringstream row(kPromote[i]);
    for (size_t j = 0; j < 16; ++j) {
      std::string code;
      row >> code;
      DType a = kOrder[i], b = kOrder[j];
      SCOPED_TRACE(std::string(dtype_name(a)) + " x " + dtype_name(b));
      if (code == "!!") {
        EXPECT_THROWS_OP(DTypeError, "promote_types", promote_types(a, b));
      } else {
        EXPECT_EQ(promote_types(a, b), from_code(code));
      }
    }
  }
}

TEST(DType, PromoteTypesErrorMessagesNameBothTypes) {
  try {
    promote_types(kUInt16, kInt8);
    FAIL() << "no error";
  } catch (const DTypeError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("uint16"), std::string::npos) << w;
    EXPECT_NE(w.find("not supported"), std::string::npos) << w;
  }
  try {
    promote_types(kFloat8_e4m3fn, kFloat32);
    FAIL() << "no error";
  } catch (const DTypeError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("Float8"), std::string::npos) << w;
  }
}

Tensor dimmed(DType t) { return zeros({3}, TensorOptions(t)); }
Tensor zerodim(DType t) { return zeros({}, TensorOptions(t)); }

// torch.result_type: dimensioned tensors > 0-dim tensors > Scalars, and a lower-priority
// operand only counts when its category (bool < integer < floating < complex) is higher.
TEST(DType, ResultTypeTensorTensor) {
  struct C {
    Tensor a, b;
    DType want;
  };
  std::vector<C> cases = {
      {dimmed(kInt32), zerodim(kInt64), kInt32},       {dimmed(kInt32), zerodim(kFloat64), kFloat64},
      {dimmed(kFloat16), zerodim(kFloat64), kFloat16}, {dimmed(kUInt8), zerodim(kInt8), kUInt8},
      {dimmed(kBool), zerodim(kInt64), kInt64},        {zerodim(kInt8), zerodim(kFloat16), kFloat16},
      {zerodim(kInt32), zerodim(kInt64), kInt64},      {zerodim(kFloat32), dimmed(kInt64), kFloat32},
      {dimmed(kUInt16), zerodim(kInt64), kUInt16},     {dimmed(kUInt16), zerodim(kFloat64), kFloat64},
      {dimmed(kUInt8), zerodim(kUInt16), kUInt8},      {dimmed(kInt8), dimmed(kUInt8), kInt16},
      {dimmed(kBFloat16), dimmed(kFloat16), kFloat32}, {dimmed(kFloat32), zerodim(kComplex64), kComplex64},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.a.dtype())) + "/" + std::to_string(c.a.dim()) + " x " + dtype_name(c.b.dtype()) +
                 "/" + std::to_string(c.b.dim()));
    EXPECT_EQ(result_type(c.a, c.b), c.want);
    EXPECT_EQ(result_type(c.b, c.a), c.want);
  }
  EXPECT_THROWS_OP(DTypeError, "promote_types", result_type(dimmed(kUInt16), dimmed(kInt16)));
  EXPECT_THROWS_OP(DTypeError, "promote_types", result_type(dimmed(kFloat8_e4m3fn), dimmed(kFloat32)));
}

TEST(DType, ResultTypeTensorScalar) {
  struct C {
    Tensor a;
    Scalar s;
    DType want;
  };
  std::vector<C> cases = {
      {dimmed(kInt32), Scalar(5), kInt32},         {dimmed(kInt32), Scalar(2.5), kFloat32},
      {dimmed(kFloat16), Scalar(2.5), kFloat16},   {dimmed(kBool), Scalar(5), kInt64},
      {dimmed(kBool), Scalar(2.5), kFloat32},      {dimmed(kUInt8), Scalar(-5), kUInt8},
      {dimmed(kInt8), Scalar(1000), kInt8},        {dimmed(kFloat32), Scalar(std::complex<double>(0, 1)), kComplex64},
      {dimmed(kInt32), Scalar(true), kInt32},      {dimmed(kUInt16), Scalar(5), kUInt16},
      {dimmed(kUInt16), Scalar(2.5), kFloat32},    {zerodim(kInt32), Scalar(2.5), kFloat32},
      {zerodim(kFloat64), Scalar(2.5), kFloat64},  {zerodim(kInt64), Scalar(5), kInt64},
      {dimmed(kBFloat16), Scalar(7), kBFloat16},   {dimmed(kFloat64), Scalar(2.5f), kFloat64},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.a.dtype())) + "/" + std::to_string(c.a.dim()));
    EXPECT_EQ(result_type(c.a, c.s), c.want);
  }
}

TEST(DType, ScalarKindsAndDefaultDTypes) {
  EXPECT_EQ(Scalar(true).default_dtype(), kBool);
  EXPECT_EQ(Scalar(3).default_dtype(), kInt64);
  EXPECT_EQ(Scalar(3.0).default_dtype(), kFloat32);
  EXPECT_EQ(Scalar(std::complex<double>(1, 2)).default_dtype(), kComplex64);
  Scalar big(uint64_t{18446744073709551615ull});
  EXPECT_TRUE(big.is_integral());
  EXPECT_EQ(big.to_uint64(), 18446744073709551615ull);
  EXPECT_EQ(Scalar(int64_t{-7}).to_int64(), -7);
  EXPECT_EQ(Scalar(2.5).to_double(), 2.5);
  EXPECT_EQ(Scalar(std::complex<double>(1, 2)).to_complex(), std::complex<double>(1, 2));
  EXPECT_TRUE(Scalar(0.5).to_bool());
  EXPECT_FALSE(Scalar(0).to_bool());
}

TEST(DType, BroadcastShapes) {
  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {5}), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 7}), (Shape{0, 7}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4, 3}), ShapeError);
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device("cpu"), Device(kCPU));
  EXPECT_EQ(Device("cuda"), Device(kCUDA, 0));
  EXPECT_EQ(Device("cuda:1"), Device(kCUDA, 1));
  EXPECT_EQ(Device(kCUDA, 3).str(), "cuda:3");
  EXPECT_EQ(Device(kCPU).str(), "cpu");
  EXPECT_THROWS_OP(DeviceError, "device", Device("tpu"));
  EXPECT_THROWS_OP(DeviceError, "device", Device("cuda:x"));
}

}  // namespace
