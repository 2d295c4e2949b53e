// anvil/profile.h: kernel time per backend entry point while profiling is on, nothing while it
// is off, reset, and a CUDA graph capture refused while it is on; on every device.
#include "expect_throws.h"
#include "harness.h"

namespace {

using namespace anvil;

class Profile : public th::DeviceTest {};

const profile::Entry* find(const std::vector<profile::Entry>& rows, const std::string& kernel) {
  for (const profile::Entry& e : rows)
    if (e.kernel == kernel) return &e;
  return nullptr;
}

TEST_P(Profile, CountsKernelsWhileOn) {
  const TensorOptions o = TensorOptions(kFloat32).device(dev());
  const Tensor a = ones({64, 32}, o), b = ones({32, 16}, o);
  profile::reset();
  (void)add(a, a);
  EXPECT_TRUE(profile::report().empty()) << "off: nothing recorded";
  profile::set_enabled(true);
  const Tensor s = add(a, a);
  const Tensor m = mm(a, b);
  (void)mm(a, b);
  profile::set_enabled(false);
  EXPECT_FALSE(profile::enabled());
  EXPECT_EQ(sum(s).item<double>(), 2.0 * 64 * 32) << "the timed kernels still compute";
  EXPECT_EQ(sum(m).item<double>(), 32.0 * 64 * 16);
  const std::vector<profile::Entry> rows = profile::report();
  const profile::Entry* bin = find(rows, "binary");
  const profile::Entry* gemm = find(rows, "bmm");
  ASSERT_TRUE(bin && gemm);
  EXPECT_EQ(bin->calls, 1);
  EXPECT_EQ(gemm->calls, 2);
  EXPECT_EQ(gemm->device, dev());
  EXPECT_GE(gemm->ms, 0.0);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].ms, rows[i].ms) << "most time first";
  EXPECT_EQ(find(rows, "reduce"), nullptr) << "the sums after profiling are not counted";
  profile::reset();
  EXPECT_TRUE(profile::report().empty());
}

TEST_P(Profile, GraphCaptureRefusedWhileOn) {
  if (!dev().is_cuda()) GTEST_SKIP() << "CUDA graphs";
  const Stream side = Stream::create(dev());
  StreamGuard guard(side);
  cuda::Graph g;
  profile::set_enabled(true);
  EXPECT_THROWS_SAYING(Error, "cuda::Graph", "kernel profiling is on", g.capture_begin());
  profile::set_enabled(false);
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Profile);

}  // namespace
