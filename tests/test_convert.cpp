// dtype conversions: every pair through Tensor::to on contiguous and non-contiguous inputs,
// against a scalar reference of PyTorch 2.15's x86 CPU semantics (reference/ref_float.h).
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "harness.h"

namespace {

using namespace anvil;

using th::fmt_of;
int int_bits(DType t) { return static_cast<int>(element_size(t)) * 8; }
uint64_t width_mask(DType t) { return element_size(t) == 8 ? ~0ull : ((1ull << (8 * element_size(t))) - 1); }

struct Elem {
  uint64_t bits;  // raw element bits
  double re, im;  // exact value (ints exact up to the candidates used: |v| <= 2^64, exact in double)
};

// Interesting source values of each dtype, stored exactly as that dtype holds them.
std::vector<Elem> source_values(DType t) {
  std::vector<Elem> out;
  auto add_value = [&](double v) {
    uint64_t bits = 0;
    th::store_element(&bits, t, v);
    out.push_back({bits, th::load_element(&bits, t), 0.0});
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  switch (t) {
    case kBool:
      for (double v : {0.0, 1.0}) add_value(v);
      break;
    case kUInt8:
      for (double v : {0., 1., 7., 127., 128., 200., 255.}) add_value(v);
      break;
    case kInt8:
      for (double v : {-128., -1., 0., 1., 44., 127.}) add_value(v);
      break;
    case kUInt16:
      for (double v : {0., 1., 255., 256., 32767., 32768., 65535.}) add_value(v);
      break;
    case kInt16:
      for (double v : {-32768., -129., -1., 0., 1., 255., 300., 32767.}) add_value(v);
      break;
    case kUInt32:
      for (double v : {0., 1., 65536., 16777217., 2147483647., 2147483648., 4294967295.}) add_value(v);
      break;
    case kInt32:
      for (double v : {-2147483648., -70000., -1., 0., 1., 16777217., 2147483647.}) add_value(v);
      break;
    case kUInt64:
      for (double v : {0., 1., 4294967296., 9007199254740994., 9223372036854775808., 18446744073709549568.}) add_value(v);
      break;
    case kInt64:
      for (double v : {-9223372036854775808., -9007199254740994., -1., 0., 1., 2147483648., 9007199254740994.}) add_value(v);
      break;
    case kComplex64: {
      const double pairs[][2] = {{1.5, 2.0}, {-3.25, 0.0}, {0.0, 1.0}, {0.0, 0.0}, {1e10, -1.0}, {-300.5, 7.0}, {nan, 0.0}};
      for (const auto& p : pairs) {
        float c[2] = {static_cast<float>(p[0]), static_cast<float>(p[1])};
        uint64_t bits;
        std::memcpy(&bits, c, 8);
        out.push_back({bits, c[0], c[1]});
      }
      break;
    }
    default:  // floating
      for (double v : {0.0, -0.0, 0.4, -0.6, 1.0, -1.5, 2.75, 127.9, 128.0, 255.5, 256.0, -129.0, 300.5, 448.0, 65504.0, 70000.0,
                       -1e10, 3e9, 1e20, 1e-6, 1e-45, inf, -inf, nan})
        add_value(v);
      break;
  }
  return out;
}

// Value of a source element as a 64-bit two's complement integer (integer and bool sources).
uint64_t int_source_bits(const Elem& e, DType src) {
  uint64_t b = e.bits & width_mask(src);
  if (!is_unsigned(src) && element_size(src) < 8) {
    int shift = 64 - 8 * static_cast<int>(element_size(src));
    b = static_cast<uint64_t>(static_cast<int64_t>(b << shift) >> shift);  // sign-extend
  }
  return b;
}

// Bits PyTorch 2.15 (x86 CPU) gives when converting e from src to dst.
uint64_t expected_bits(const Elem& e, DType src, DType dst) {
  const bool src_float = is_floating_point(src) || is_complex(src);
  if (dst == kBool) return (e.re != 0.0 || e.im != 0.0) ? 1 : 0;  // NaN != 0: true
  if (is_integral(dst)) {
    uint64_t v;
    if (src_float) {
      v = is_unsigned(dst) ? ref::x86_float_to_unsigned(e.re, int_bits(dst))
                           : static_cast<uint64_t>(ref::x86_float_to_signed(e.re, int_bits(dst)));
    } else {
      v = int_source_bits(e, src);  // integer -> integer: two's complement wrap
    }
    return v & width_mask(dst);
  }
  // Floating or complex destination: the source's exact value, rounded once to float64 / float32,
  // and for the low-precision formats through float32 (c10's constructors take a float).
  double x = e.re;
  if (dst == kFloat64) {
    uint64_t b;
    std::memcpy(&b, &x, 8);
    return b;
  }
  float f = static_cast<float>(x);
  if (dst == kFloat32) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  if (dst == kComplex64) {
    float c[2] = {f, is_complex(src) ? static_cast<float>(e.im) : 0.0f};
    uint64_t b;
    std::memcpy(&b, c, 8);
    return b;
  }
  return ref::encode(fmt_of(dst), static_cast<double>(f));
}

bool bits_are_nan(uint64_t bits, DType t) {
  if (!is_floating_point(t) && !is_complex(t)) return false;
  return std::isnan(th::load_element(&bits, t));
}

// A 1-D tensor holding `bits` repeated to n elements, contiguous or every other element of a
// buffer twice as long (poisoned in between), on `dev`.
Tensor raw_tensor(const std::vector<uint64_t>& bits, DType t, int64_t n, bool strided, Device dev) {
  const size_t es = element_size(t);
  int64_t len = strided ? 2 * n : n;
  Tensor base = empty({len}, TensorOptions(t));
  auto* p = static_cast<uint8_t*>(base.data_ptr());
  std::memset(p, 0x5A, static_cast<size_t>(len) * es);
  for (int64_t i = 0; i < n; ++i) {
    int64_t slot = strided ? 2 * i + 1 : i;
    std::memcpy(p + slot * es, &bits[static_cast<size_t>(i) % bits.size()], es);
  }
  if (dev.is_cuda()) base = base.to(dev);
  return strided ? base.slice(0, 1, len, 2) : base;
}

class Convert : public th::DeviceTest {};

TEST_P(Convert, EveryPairContiguousAndStrided) {
  const int64_t n = 101;  // past any SIMD width, odd tail
  for (DType src : th::all_dtypes()) {
    std::vector<Elem> vals = source_values(src);
    std::vector<uint64_t> bits;
    for (const auto& e : vals) bits.push_back(e.bits);
    for (bool strided : {false, true}) {
      Tensor x = raw_tensor(bits, src, n, strided, dev());
      ASSERT_EQ(x.is_contiguous(), !strided);
      for (DType dst : th::all_dtypes()) {
        SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst) + (strided ? " strided" : " contiguous"));
        Tensor y = x.to(dst);
        ASSERT_TRUE(th::expect_shape(y, {n}, dst));
        ASSERT_EQ(y.device(), dev());
        std::vector<uint64_t> got = th::to_bits(y);
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 5; ++i) {
          const Elem& e = vals[static_cast<size_t>(i) % vals.size()];
          uint64_t want = expected_bits(e, src, dst);
          uint64_t g = got[static_cast<size_t>(i)];
          bool ok = bits_are_nan(want, dst) ? bits_are_nan(g, dst) : g == want;
          if (dst == kComplex64 && std::isnan(e.re)) {  // NaN real part: any NaN, imag kept
            ok = std::isnan(th::load_element(&g, dst)) && (g >> 32) == (want >> 32);
          }
          if (!ok) {
            ++bad;
            ADD_FAILURE() << "element " << i << ": value " << e.re << (e.im != 0 ? " + i*" + std::to_string(e.im) : "")
                          << " gives bits 0x" << std::hex << g << ", expected 0x" << want << std::dec;
          }
        }
      }
    }
  }
}

// Float -> integer on out-of-range inputs, as torch 2.15.0 prints them on x86 (hard-coded, not
// computed: an independent check of the reference too).
TEST_P(Convert, FloatToIntOutOfRangeLikeTorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> in = {300.5, -1.5, 1e10, -1e10, nan, inf, -inf, 3e9, -3e9, 70000., 1e20, 9223372036854775808., 1.8e19};
  struct Row {
    DType t;
    std::vector<double> want;  // exact in double except uint64 (checked below)
  };
  const std::vector<Row> rows = {
      {kInt8, {44, -1, 0, 0, 0, 0, 0, 0, 0, 112, 0, 0, 0}},
      {kUInt8, {44, 255, 0, 0, 0, 0, 0, 0, 0, 112, 0, 0, 0}},
      {kInt16, {300, -1, 0, 0, 0, 0, 0, 0, 0, 4464, 0, 0, 0}},
      {kUInt16, {300, 65535, 0, 0, 0, 0, 0, 0, 0, 4464, 0, 0, 0}},
      {kInt32, {300, -1, -2147483648., -2147483648., -2147483648., -2147483648., -2147483648., -2147483648., -2147483648.,
                70000, -2147483648., -2147483648., -2147483648.}},
      // torch's scalar (strided) path: low 32 bits of the int64 truncation. Its contiguous
      // vectorised path differs (-inf -> 2147483648); anvil follows the scalar path everywhere.
      {kUInt32, {300, 4294967295., 1410065408., 2884901888., 0, 0, 0, 3000000000., 1294967296., 70000, 0, 0, 0}},
      {kInt64, {300, -1, 1e10, -1e10, -9223372036854775808., -9223372036854775808., -9223372036854775808., 3e9, -3e9, 70000,
                -9223372036854775808., -9223372036854775808., -9223372036854775808.}},
      {kBool, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
  };
  const std::vector<uint64_t> want_u64 = {300ull, 18446744073709551615ull, 10000000000ull, 18446744063709551616ull,
                                          9223372036854775808ull, 0ull, 9223372036854775808ull, 3000000000ull,
                                          18446744070709551616ull, 70000ull, 0ull, 9223372036854775808ull,
                                          18000000404716257280ull};
  for (DType src : {kFloat32, kFloat64}) {
    // Repeated so that both vector bodies and scalar tails of the cast see every value.
    ref::Array a({13 * 9});
    for (int64_t i = 0; i < a.numel(); ++i) a.v[static_cast<size_t>(i)] = th::round_to_dtype(in[static_cast<size_t>(i % 13)], src);
    Tensor x = th::make_tensor(a, src, dev());
    for (const Row& r : rows) {
      ref::Array got = th::to_array(x.to(r.t));
      std::ostringstream bad;
      for (size_t i = 0; i < 13; ++i)  // every value, first repetition (the later ones below)
        if (got.v[i] != r.want[i]) bad << " " << in[i] << " -> " << got.v[i] << " (torch " << r.want[i] << ");";
      EXPECT_TRUE(bad.str().empty()) << dtype_name(src) << " -> " << dtype_name(r.t) << ":" << bad.str();
      for (int64_t i = 13; i < a.numel(); ++i)
        ASSERT_EQ(got.v[static_cast<size_t>(i)], got.v[static_cast<size_t>(i % 13)]) << "repetition " << i / 13 << " differs";
    }
    std::vector<uint64_t> got = th::to_bits(x.to(kUInt64));
    std::vector<uint64_t> want64 = want_u64;
    if (src == kFloat64) want64[12] = 18000000000000000000ull;  // 1.8e19 is exact in float64 (float32 rounds it)
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], want64[i % 13]) << dtype_name(src) << " -> uint64, input " << in[i % 13];
      if (got[i] != want64[i % 13]) break;
    }
  }
}

TEST_P(Convert, ComplexToRealDropsImaginaryAndBoolUsesBoth) {
  std::vector<float> c = {1.5f, 2.0f, 0.0f, 2.0f, -7.25f, 0.0f, 0.0f, 0.0f};
  Tensor x = from_blob(c.data(), {4}, kComplex64).clone();
  if (dev().is_cuda()) x = x.to(dev());
  ref::Array re = th::to_array(x.to(kFloat32));
  EXPECT_EQ(re.v, (std::vector<double>{1.5, 0.0, -7.25, 0.0}));
  EXPECT_EQ(th::to_array(x.to(kInt32)).v, (std::vector<double>{1, 0, -7, 0}));
  EXPECT_EQ(th::to_array(x.to(kBool)).v, (std::vector<double>{1, 1, 1, 0}));
  ref::Array im = th::to_array_imag(x.to(kFloat64).to(kComplex64));
  EXPECT_EQ(im.v, (std::vector<double>{0, 0, 0, 0}));
  ref::Array im2 = th::to_array_imag(x.clone());
  EXPECT_EQ(im2.v, (std::vector<double>{2, 2, 0, 0}));
}

TEST_P(Convert, BoolFromFloats) {
  ref::Array a({6});
  a.v = {0.0, -0.0, 0.1, -1e-30, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()};
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    ref::Array r = a;
    for (double& v : r.v) v = th::round_to_dtype(v, t);
    ref::Array got = th::to_array(th::make_tensor(r, t, dev()).to(kBool));
    std::vector<double> want = {0, 0, 1, r.v[3] != 0.0 ? 1.0 : 0.0, 1, 1};
    EXPECT_EQ(got.v, want) << dtype_name(t);
  }
}

TEST_P(Convert, NonContiguous2DAndOffsetLayouts) {
  th::CaseLoop loop;
  th::Gen g(11);
  for (th::Layout l : th::all_layouts()) {
    for (DType src : {kFloat32, kBFloat16, kInt32, kUInt8, kFloat8_e4m3fn}) {
      th::Input in = th::make_input({33, 7, 3}, src, dev(), l, g, -200.0, 200.0);
      for (DType dst : {kFloat64, kFloat16, kInt16, kBool, kFloat8_e5m2}) {
        if (!loop.run(th::case_name({33, 7, 3}, src, l, dev()) + " -> " + dtype_name(dst), [&] {
          Tensor y = in.t.to(dst);
          ASSERT_TRUE(th::expect_shape(y, {33, 7, 3}, dst));
          ref::Array want(in.a.sizes);
          for (size_t i = 0; i < want.v.size(); ++i) {
            Elem e{0, in.a.v[i], 0.0};
            th::store_element(&e.bits, src, in.a.v[i]);
            uint64_t b = expected_bits(e, src, dst);
            want.v[i] = th::load_element(&b, dst);
          }
          EXPECT_TRUE(th::expect_equal(y, want));
        }))
          return;
      }
    }
  }
}

TEST_P(Convert, DeviceRoundTripKeepsBits) {
  if (!dev().is_cuda()) GTEST_SKIP() << "host <-> device round trip: CUDA only";
  for (DType t : th::all_dtypes()) {
    std::vector<Elem> vals = source_values(t);
    std::vector<uint64_t> bits;
    for (const auto& e : vals) bits.push_back(e.bits);
    Tensor host = raw_tensor(bits, t, 77, false, Device(kCPU));
    Tensor back = host.to(dev()).to(Device(kCPU));
    EXPECT_EQ(th::to_bits(back), th::to_bits(host)) << dtype_name(t);
    EXPECT_EQ(back.dtype(), t);
    // Non-contiguous device tensor back to the host.
    Tensor dstrided = raw_tensor(bits, t, 77, true, dev());
    EXPECT_EQ(th::to_bits(dstrided.to(Device(kCPU))), th::to_bits(host)) << dtype_name(t);
  }
}

TEST_P(Convert, ToDeviceAndDTypeAtOnce) {
  th::Gen g(3);
  th::Input in = th::make_input({1023}, kFloat32, Device(kCPU), th::Layout::Strided, g, -3.0, 3.0);
  Tensor y = in.t.to(dev(), kBFloat16);
  ASSERT_TRUE(th::expect_shape(y, {1023}, kBFloat16));
  EXPECT_EQ(y.device(), dev());
  ref::Array want = in.a;
  for (double& v : want.v) v = th::round_to_dtype(v, kBFloat16);
  EXPECT_TRUE(th::expect_equal(y, want));
}

TEST(ConvertScalar, ElementConversionsOfNumericH) {
  // The storage structs convert through float32 with the same rounding as the tensor casts.
  EXPECT_EQ(BFloat16(1.00390625f).x, 0x3F80);  // tie -> even
  EXPECT_EQ(BFloat16(1.01171875f).x, 0x3F82);  // tie -> even (up)
  EXPECT_EQ(Half(65504.f).x, 0x7BFF);
  EXPECT_EQ(Half(-65520.f).x, 0xFC00);
  EXPECT_EQ(Half(0x1p-25f).x, 0x0000);  // tie at half the smallest subnormal -> 0
  EXPECT_EQ(Half(0x1.8p-25f).x, 0x0001);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x0001)), 0x1p-24f);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0xFF80)), -std::numeric_limits<float>::infinity());
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Convert);

}  // namespace
