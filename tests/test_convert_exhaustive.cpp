// Every float32 bit pattern (2^32) through the contiguous .to() casts (the Highway kernels on
// CPU, the CUDA kernels on a GPU) into bfloat16, float16, float8_e4m3fn and float8_e5m2,
// compared with the scalar encoders of include/anvil/numeric.h, which test_fp8 checks against
// the independent oracle. Suite name starts with "Large": CTest label "large", ~20 s on 2 cores.
#include <cstring>

#include "harness.h"

namespace {

using namespace anvil;

class LargeConvertExhaustive : public th::DeviceTest {};

TEST_P(LargeConvertExhaustive, AllFloat32BitPatternsEncodeLikeTheScalarRules) {
#if defined(ANVIL_SANITIZE)
  GTEST_SKIP() << "skipped under ASan/UBSan (ANVIL_SANITIZE): 2^32 instrumented conversions take too long";
#endif
  const int64_t chunk = int64_t{1} << 24;
  Tensor host = empty({chunk}, kFloat32);
  uint32_t* in = static_cast<uint32_t*>(host.data_ptr());
  const DType targets[4] = {kBFloat16, kFloat16, kFloat8_e4m3fn, kFloat8_e5m2};
  int64_t mismatches[4] = {0, 0, 0, 0};
  for (int64_t base = 0; base < (int64_t{1} << 32); base += chunk) {
    for (int64_t i = 0; i < chunk; ++i) in[i] = static_cast<uint32_t>(base + i);
    Tensor x = host.to(dev());
    for (int t = 0; t < 4; ++t) {
      Tensor out = x.to(targets[t]).to(kCPU);
      const uint8_t* o8 = static_cast<const uint8_t*>(out.data_ptr());
      const uint16_t* o16 = static_cast<const uint16_t*>(out.data_ptr());
      int64_t bad = 0;  // the scalar rules on every core (the test runs alone: CTest's RUN_SERIAL)
#pragma omp parallel for schedule(static) reduction(+ : bad)
      for (int64_t i = 0; i < chunk; ++i) {
        float f;
        std::memcpy(&f, &in[i], 4);
        uint32_t want = t == 0 ? f32_to_bf16_bits(f) : t == 1 ? f32_to_f16_bits(f)
                      : t == 2 ? f32_to_e4m3fn_bits(f) : f32_to_e5m2_bits(f);
        uint32_t got = t < 2 ? o16[i] : o8[i];
        if (want != got && bad++ < 5) {
#pragma omp critical
          ADD_FAILURE() << dtype_name(targets[t]) << ": input bits 0x" << std::hex << in[i] << " gave 0x" << got
                        << ", scalar rule 0x" << want;
        }
      }
      mismatches[t] += bad;
    }
  }
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << dtype_name(targets[t]);
}

ANVIL_INSTANTIATE_DEVICE_TESTS(LargeConvertExhaustive);

}  // namespace
