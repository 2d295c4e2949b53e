// FP8 (e4m3fn, e5m2), bfloat16 and float16 encode / decode against the spec oracle in
// tests/reference/ref_float.cpp, through the scalar conversions of anvil/numeric.h and through
// tensor casts on every device.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "harness.h"

namespace {

using namespace anvil;
using th::Gen;

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

using th::fmt_of;

// A tensor of `t` holding raw element bits (CPU), moved to `dev`.
Tensor tensor_from_bits(const std::vector<uint32_t>& bits, DType t, Device dev) {
  Tensor x = empty({static_cast<int64_t>(bits.size())}, TensorOptions(t));
  auto* p = static_cast<uint8_t*>(x.data_ptr());
  size_t es = element_size(t);
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(p + i * es, &bits[i], es);
  return dev.is_cuda() ? x.to(dev) : x;
}

Tensor f32_tensor(const std::vector<float>& v, Device dev) {
  Tensor x = from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, kFloat32).clone();
  return dev.is_cuda() ? x.to(dev) : x;
}

// 1,000,000 float32 inputs: a third random bit patterns (every class: NaN, inf, subnormal,
// huge), a third uniform in [-600, 600] (around the e4m3fn range), a third with random exponents
// in [-30, 20] (the fp8 subnormal and rounding boundaries), plus the exact fp8 midpoints.
std::vector<float> million_inputs(uint64_t seed) {
  Gen g(seed);
  std::vector<float> v;
  v.reserve(1000000);
  for (int i = 0; i < 333334; ++i) v.push_back(bits_f32(static_cast<uint32_t>(g.next())));
  for (int i = 0; i < 333333; ++i) v.push_back(static_cast<float>(g.uniform(-600.0, 600.0)));
  while (v.size() < 1000000 - 1024) {
    double m = g.uniform(1.0, 2.0);
    int e = static_cast<int>(g.randint(-30, 20));
    double s = (g.next() & 1) ? -1.0 : 1.0;
    v.push_back(static_cast<float>(s * std::ldexp(m, e)));
  }
  // Midpoints between neighbouring e4m3fn and e5m2 values (ties), both signs.
  for (ref::Fmt f : {ref::Fmt::E4M3FN, ref::Fmt::E5M2}) {
    for (uint32_t c = 0; c < 0x7E; ++c) {
      double a = ref::decode(f, c), b = ref::decode(f, c + 1);
      if (std::isnan(b) || std::isinf(b)) break;
      v.push_back(static_cast<float>((a + b) / 2));
      v.push_back(static_cast<float>(-(a + b) / 2));
    }
  }
  while (v.size() < 1000000) v.push_back(static_cast<float>(g.uniform(-1.0, 1.0)));
  return v;
}

// ---- the oracle itself against the fixed facts of the formats ---------------------------------
TEST(Fp8Oracle, FormatFacts) {
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x7E), 448.0);
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0xFE), -448.0);
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x08), 0.015625);
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x01), 0.001953125);
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x38), 1.0);
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x20), 0.125);  // numeric_limits epsilon
  EXPECT_TRUE(std::isnan(ref::decode(ref::Fmt::E4M3FN, 0x7F)));
  EXPECT_TRUE(std::isnan(ref::decode(ref::Fmt::E4M3FN, 0xFF)));
  EXPECT_FALSE(std::isnan(ref::decode(ref::Fmt::E4M3FN, 0x78)));  // 256: e=15 is a normal binade
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x78), 256.0);
  EXPECT_EQ(ref::decode(ref::Fmt::E5M2, 0x7B), 57344.0);
  EXPECT_EQ(ref::decode(ref::Fmt::E5M2, 0x7C), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(ref::decode(ref::Fmt::E5M2, 0x7D)));
  EXPECT_EQ(ref::decode(ref::Fmt::E5M2, 0x01), std::ldexp(1.0, -16));
  EXPECT_EQ(ref::decode(ref::Fmt::F16, 0x7BFF), 65504.0);
  EXPECT_EQ(ref::decode(ref::Fmt::F16, 0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(ref::decode(ref::Fmt::BF16, 0x3F80), 1.0);
  EXPECT_EQ(ref::decode(ref::Fmt::BF16, 0x7F7F), std::ldexp(255.0, 120));
}

TEST(Fp8Oracle, EpsilonIsByte0x20) {
  // numeric_limits<Float8_e4m3fn>::epsilon is 0x20 = 2^-3 (1 + 2^-3 is the next value after 1).
  EXPECT_EQ(ref::decode(ref::Fmt::E4M3FN, 0x39) - 1.0, 0.125);
}

// ---- decode: all 256 bytes -------------------------------------------------------------------
class Fp8Decode : public th::DeviceTest {};

TEST_P(Fp8Decode, AllBytesExactlyViaTensorCast) {
  for (DType t : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint32_t> bytes(256);
    for (uint32_t b = 0; b < 256; ++b) bytes[b] = b;
    Tensor x = tensor_from_bits(bytes, t, dev());
    for (DType out : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      SCOPED_TRACE(dtype_name(out));
      Tensor y = x.to(out);
      ASSERT_EQ(y.dtype(), out);
      ASSERT_EQ(y.device(), dev());
      ref::Array got = th::to_array(y);
      for (uint32_t b = 0; b < 256; ++b) {
        double want = ref::decode(fmt_of(t), b);
        double g = got.v[b];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(g)) << "byte 0x" << std::hex << b;
        } else {
          EXPECT_EQ(g, want) << "byte 0x" << std::hex << b;
          EXPECT_EQ(std::signbit(g), std::signbit(want)) << "byte 0x" << std::hex << b;
        }
      }
    }
  }
}

TEST_P(Fp8Decode, NaNKeepsSignInFloat32) {
  std::vector<uint32_t> bytes = {0x7F, 0xFF};
  ref::Array got = th::to_array(tensor_from_bits(bytes, kFloat8_e4m3fn, dev()).to(kFloat32));
  EXPECT_TRUE(std::isnan(got.v[0]));
  EXPECT_FALSE(std::signbit(got.v[0]));
  EXPECT_TRUE(std::isnan(got.v[1]));
  EXPECT_TRUE(std::signbit(got.v[1]));
}
ANVIL_INSTANTIATE_DEVICE_TESTS(Fp8Decode);

TEST(Fp8Scalar, DecodeAllBytes) {
  for (uint32_t b = 0; b < 256; ++b) {
    double w4 = ref::decode(ref::Fmt::E4M3FN, b), w5 = ref::decode(ref::Fmt::E5M2, b);
    float g4 = e4m3fn_bits_to_f32(static_cast<uint8_t>(b)), g5 = e5m2_bits_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(w4)) EXPECT_TRUE(std::isnan(g4)) << b;
    else EXPECT_EQ(f32_bits(g4), f32_bits(static_cast<float>(w4))) << b;
    if (std::isnan(w5)) EXPECT_TRUE(std::isnan(g5)) << b;
    else EXPECT_EQ(f32_bits(g5), f32_bits(static_cast<float>(w5))) << b;
    EXPECT_EQ(static_cast<float>(Float8_e4m3fn::from_bits(static_cast<uint8_t>(b))) == g4, !std::isnan(g4));
  }
}

TEST(Fp8Scalar, DecodeAllHalfAndBFloat16Patterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    double wh = ref::decode(ref::Fmt::F16, b), wb = ref::decode(ref::Fmt::BF16, b);
    float gh = f16_bits_to_f32(static_cast<uint16_t>(b)), gb = bf16_bits_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(wh)) EXPECT_TRUE(std::isnan(gh)) << b;
    else ASSERT_EQ(f32_bits(gh), f32_bits(static_cast<float>(wh))) << std::hex << b;
    if (std::isnan(wb)) EXPECT_TRUE(std::isnan(gb)) << b;
    else ASSERT_EQ(f32_bits(gb), f32_bits(static_cast<float>(wb))) << std::hex << b;
  }
}

// ---- encode: PyTorch's vectors (pytorch-semantics.md 1.3) ----------------------------------------
struct EncodeVector {
  float in;
  uint32_t out;
};
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

const std::vector<EncodeVector>& e4m3fn_vectors() {
  static const std::vector<EncodeVector> v = {
      {0.f, 0x00},         {-0.f, 0x80},         {448.f, 0x7E},     {464.f, 0x7E},       {465.f, 0x7E},
      {1e6f, 0x7E},        {kInf, 0x7E},         {-kInf, 0xFE},     {kNaN, 0x7F},        {-kNaN, 0xFF},
      {0x1p-9f, 0x01},     {0x1p-10f, 0x00},     {1.5f * 0x1p-10f, 0x01}, {0.015625f, 0x08},
      {-448.f, 0xFE},      {-465.f, 0xFE},       {480.f, 0x7E},     {479.99f, 0x7E},     {3.4e38f, 0x7E},
      {1.0f, 0x38},        {1.0625f, 0x38},      {1.0625001f, 0x39}, {1.1875f, 0x3A},    // ties to even
      {-0x1p-11f, 0x80},   {0x1p-149f, 0x00},    {-0x1p-149f, 0x80}, {0.0146484375f, 0x08},  // 7.5*2^-9 -> 8*2^-9
      {0.013671875f, 0x07}, {256.f, 0x78},       {272.f, 0x78},     {272.0001f, 0x79},   {240.f, 0x77},
  };
  return v;
}

const std::vector<EncodeVector>& e5m2_vectors() {
  static const std::vector<EncodeVector> v = {
      {0.f, 0x00},      {-0.f, 0x80},        {57344.f, 0x7B},  {61439.f, 0x7B},       {61440.f, 0x7C},
      {65536.f, 0x7C},  {1e9f, 0x7C},        {kInf, 0x7C},     {-kInf, 0xFC},         {kNaN, 0x7F},
      {-kNaN, 0xFF},    {0x1p-16f, 0x01},    {0x1p-17f, 0x00}, {1.5f * 0x1p-17f, 0x01}, {0x1p-14f, 0x04},
      {1.0f, 0x3C},     {1.125f, 0x3C},      {1.375f, 0x3E},   {-1.875f, 0xC0},       {-57344.f, 0xFB},
  };
  return v;
}

TEST(Fp8Oracle, MatchesPyTorchVectors) {
  for (const auto& c : e4m3fn_vectors()) EXPECT_EQ(ref::encode_f32(ref::Fmt::E4M3FN, c.in), c.out) << c.in;
  for (const auto& c : e5m2_vectors()) EXPECT_EQ(ref::encode_f32(ref::Fmt::E5M2, c.in), c.out) << c.in;
  // bf16 / fp16 NaN rules (PyTorch CPU scalar path).
  EXPECT_EQ(ref::encode_f32(ref::Fmt::BF16, -kNaN), 0x7FC0u);
  EXPECT_EQ(ref::encode_f32(ref::Fmt::F16, -kNaN), 0xFE00u);
  EXPECT_EQ(ref::encode_f32(ref::Fmt::F16, 65520.f), 0x7C00u);
  EXPECT_EQ(ref::encode_f32(ref::Fmt::F16, 65519.996f), 0x7BFFu);
  EXPECT_EQ(ref::encode_f32(ref::Fmt::BF16, 3.4028235e38f), 0x7F80u);  // rounds up to inf
}

TEST(Fp8Scalar, EncodeVectors) {
  for (const auto& c : e4m3fn_vectors()) EXPECT_EQ(f32_to_e4m3fn_bits(c.in), c.out) << c.in;
  for (const auto& c : e5m2_vectors()) EXPECT_EQ(f32_to_e5m2_bits(c.in), c.out) << c.in;
  EXPECT_EQ(Float8_e4m3fn(464.f).x, 0x7E);
  EXPECT_EQ(Float8_e5m2(-kInf).x, 0xFC);
}

class Fp8Encode : public th::DeviceTest {};

TEST_P(Fp8Encode, PyTorchVectorsViaTensorCast) {
  for (DType t : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    SCOPED_TRACE(dtype_name(t));
    const auto& vecs = t == kFloat8_e4m3fn ? e4m3fn_vectors() : e5m2_vectors();
    std::vector<float> in;
    for (const auto& c : vecs) in.push_back(c.in);
    // Repeat to reach past any SIMD width, with an odd tail.
    std::vector<float> rep;
    for (int r = 0; r < 37; ++r) rep.insert(rep.end(), in.begin(), in.end());
    std::vector<uint64_t> got = th::to_bits(f32_tensor(rep, dev()).to(t));
    ASSERT_EQ(got.size(), rep.size());
    for (size_t i = 0; i < rep.size(); ++i)
      ASSERT_EQ(got[i], vecs[i % vecs.size()].out) << "input " << rep[i] << " at " << i;
  }
}

// Every encode path against the oracle on one million float32 values.
void check_million(DType t, Device dev) {
  std::vector<float> in = million_inputs(1234 + static_cast<uint64_t>(t));
  std::vector<uint64_t> got = th::to_bits(f32_tensor(in, dev).to(t));
  ASSERT_EQ(got.size(), in.size());
  int64_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t want = ref::encode_f32(fmt_of(t), in[i]);
    if (got[i] != want) {
      if (bad < 10)
        ADD_FAILURE() << dtype_name(t) << ": input " << in[i] << " (bits 0x" << std::hex << f32_bits(in[i])
                      << ") encodes to 0x" << got[i] << ", expected 0x" << want << std::dec;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "mismatches out of " << in.size();
}

TEST_P(Fp8Encode, MillionRandomE4M3FN) { check_million(kFloat8_e4m3fn, dev()); }
TEST_P(Fp8Encode, MillionRandomE5M2) { check_million(kFloat8_e5m2, dev()); }
TEST_P(Fp8Encode, MillionRandomBFloat16) { check_million(kBFloat16, dev()); }
TEST_P(Fp8Encode, MillionRandomFloat16) { check_million(kFloat16, dev()); }

TEST_P(Fp8Encode, RoundTripAllBytes) {
  for (DType t : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint32_t> bytes(256);
    for (uint32_t b = 0; b < 256; ++b) bytes[b] = b;
    Tensor back = tensor_from_bits(bytes, t, dev()).to(kFloat32).to(t);
    std::vector<uint64_t> got = th::to_bits(back);
    for (uint32_t b = 0; b < 256; ++b) {
      if (ref::is_nan_bits(fmt_of(t), b)) {
        EXPECT_TRUE(ref::is_nan_bits(fmt_of(t), static_cast<uint32_t>(got[b]))) << b;
        EXPECT_EQ(got[b] & 0x80u, b & 0x80u) << "NaN sign of byte " << b;
      } else {
        EXPECT_EQ(got[b], b) << "byte 0x" << std::hex << b;
      }
    }
    // Through float64 and float16 as well: every fp8 value is exact there.
    EXPECT_EQ(th::to_bits(tensor_from_bits(bytes, t, dev()).to(kFloat16).to(t)), got);
    EXPECT_EQ(th::to_bits(tensor_from_bits(bytes, t, dev()).to(kFloat64).to(t)), got);
  }
}

TEST_P(Fp8Encode, NonContiguousSourceAndOddTails) {
  th::CaseLoop loop;
  th::Gen g(7);
  for (int64_t n : {1, 7, 33, 1023, 65537}) {
    for (th::Layout l : {th::Layout::Strided, th::Layout::Offset, th::Layout::Transposed}) {
      Shape s = l == th::Layout::Transposed ? Shape{3, n} : Shape{n};
      th::Input in = th::make_input(s, kFloat32, dev(), l, g, -500.0, 500.0);
      if (!loop.run(th::case_name(s, kFloat32, l, dev()), [&] {
        for (DType t : {kFloat8_e4m3fn, kFloat8_e5m2, kBFloat16, kFloat16}) {
          std::vector<uint64_t> got = th::to_bits(in.t.to(t));
          ASSERT_EQ(static_cast<int64_t>(got.size()), in.a.numel());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], ref::encode(fmt_of(t), in.a.v[i])) << dtype_name(t) << " input " << in.a.v[i];
        }
      }))
        return;
    }
  }
}

TEST_P(Fp8Encode, NaNRulesOfBFloat16AndFloat16) {
  std::vector<float> in(100, kNaN);
  for (size_t i = 0; i < in.size(); i += 2) in[i] = -kNaN;
  in[5] = bits_f32(0x7F800001u);  // signalling NaN payload
  in[6] = bits_f32(0xFFC12345u);
  std::vector<uint64_t> b = th::to_bits(f32_tensor(in, dev()).to(kBFloat16));
  std::vector<uint64_t> h = th::to_bits(f32_tensor(in, dev()).to(kFloat16));
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(b[i], 0x7FC0u) << i;
    uint64_t sign = (f32_bits(in[i]) >> 31) ? 0x8000u : 0u;
    EXPECT_EQ(h[i], sign | 0x7E00u) << i;
  }
}

TEST_P(Fp8Encode, FromFloat64GoesThroughFloat32) {
  // 1.0625 is the e4m3fn tie between 1.0 (0x38) and 1.125 (0x39). 1.0625 + 2^-40 rounds to
  // 0x39 directly but to float32 1.0625 first, which ties to even 0x38: PyTorch's
  // Float8_e4m3fn(float) constructor takes a float, so float64 sources round twice.
  std::vector<double> in = {1.0625 + std::ldexp(1.0, -40), -(1.0625 + std::ldexp(1.0, -40))};
  Tensor x = from_blob(in.data(), {2}, kFloat64).clone();
  if (dev().is_cuda()) x = x.to(dev());
  std::vector<uint64_t> got = th::to_bits(x.to(kFloat8_e4m3fn));
  EXPECT_EQ(got[0], 0x38u);
  EXPECT_EQ(got[1], 0xB8u);
  // Same for bfloat16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
  std::vector<double> in2 = {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)};
  Tensor y = from_blob(in2.data(), {1}, kFloat64).clone();
  if (dev().is_cuda()) y = y.to(dev());
  EXPECT_EQ(th::to_bits(y.to(kBFloat16))[0], 0x3F80u);
}
ANVIL_INSTANTIATE_DEVICE_TESTS(Fp8Encode);

TEST(Fp8Scalar, MillionRandomAllFormats) {
  std::vector<float> in = million_inputs(99);
  int64_t bad[4] = {0, 0, 0, 0};
  for (float x : in) {
    bad[0] += f32_to_e4m3fn_bits(x) != ref::encode_f32(ref::Fmt::E4M3FN, x);
    bad[1] += f32_to_e5m2_bits(x) != ref::encode_f32(ref::Fmt::E5M2, x);
    bad[2] += f32_to_bf16_bits(x) != ref::encode_f32(ref::Fmt::BF16, x);
    bad[3] += f32_to_f16_bits(x) != ref::encode_f32(ref::Fmt::F16, x);
  }
  EXPECT_EQ(bad[0], 0) << "e4m3fn";
  EXPECT_EQ(bad[1], 0) << "e5m2";
  EXPECT_EQ(bad[2], 0) << "bfloat16";
  EXPECT_EQ(bad[3], 0) << "float16";
}

// ---- PyTorch cross-check hook (scripts/fp8_torch_crosscheck.py) ------------------------------------
// With ANVIL_FP8_XCHECK_DIR set, reads DIR/inputs_f32.bin (raw little-endian float32) and writes
// anvil's CPU tensor-cast encodings to DIR/anvil_{e4m3fn,e5m2,bf16,fp16}.bin and the oracle's to
// DIR/oracle_*.bin, for the script to compare with torch.
TEST(Fp8CrossCheck, DumpForTorch) {
  const char* dir = std::getenv("ANVIL_FP8_XCHECK_DIR");
  if (!dir) GTEST_SKIP() << "ANVIL_FP8_XCHECK_DIR not set (run scripts/fp8_torch_crosscheck.py)";
  std::ifstream f(std::string(dir) + "/inputs_f32.bin", std::ios::binary);
  ASSERT_TRUE(f.good()) << "cannot open " << dir << "/inputs_f32.bin";
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> in(raw.size() / 4);
  std::memcpy(in.data(), raw.data(), in.size() * 4);
  Tensor x = f32_tensor(in, Device(kCPU));
  struct Out {
    DType t;
    const char* name;
  };
  for (Out o : {Out{kFloat8_e4m3fn, "e4m3fn"}, Out{kFloat8_e5m2, "e5m2"}, Out{kBFloat16, "bf16"}, Out{kFloat16, "fp16"}}) {
    Tensor y = x.to(o.t);
    std::ofstream a(std::string(dir) + "/anvil_" + o.name + ".bin", std::ios::binary);
    a.write(static_cast<const char*>(y.data_ptr()), static_cast<std::streamsize>(y.nbytes()));
    std::ofstream r(std::string(dir) + "/oracle_" + o.name + ".bin", std::ios::binary);
    size_t es = element_size(o.t);
    for (float v : in) {
      uint32_t b = ref::encode_f32(fmt_of(o.t), v);
      r.write(reinterpret_cast<const char*>(&b), static_cast<std::streamsize>(es));
    }
    ASSERT_TRUE(a.good() && r.good());
  }
}

}  // namespace
