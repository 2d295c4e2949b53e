// Tensors past 2^31 and 2^32 elements, where int32 index arithmetic silently wraps. Labelled
// "large" in CTest (ctest -LE large skips them); they check free memory first and skip under
// the sanitizers.
#include <fstream>
#include <sstream>

#include "harness.h"

namespace {

using namespace anvil;

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream is(line.substr(13));
      int64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

#define SKIP_UNLESS_MEMORY(bytes)                                                                        \
  do {                                                                                                   \
    int64_t avail = mem_available_bytes();                                                               \
    if (avail < (bytes))                                                                                 \
      GTEST_SKIP() << "needs " << ((bytes) >> 20) << " MiB free, MemAvailable is " << (avail >> 20) << " MiB"; \
  } while (0)

#if defined(ANVIL_SANITIZE)
#define SKIP_UNDER_SANITIZERS() GTEST_SKIP() << "skipped under ASan/UBSan (ANVIL_SANITIZE): shadow memory and instrumented loops make 2^31+ element tensors too slow and too big"
#else
#define SKIP_UNDER_SANITIZERS() (void)0
#endif

int64_t at_u8(const Tensor& x, int64_t i) { return x.select(0, i).item<int64_t>(); }

// uint8, 2^31 + 17 elements: index 3 holds 0, index 2^31 holds 200, the last 5 hold 7, the
// rest 1.
TEST(LargeTensor, UInt8Above2Pow31) {
  SKIP_UNDER_SANITIZERS();
  const int64_t n = (int64_t{1} << 31) + 17;
  const int64_t p31 = int64_t{1} << 31;
  SKIP_UNLESS_MEMORY(2 * n + (int64_t{1} << 30));
  Tensor x = empty({n}, TensorOptions(kUInt8));
  x.fill_(1);
  x.narrow(0, n - 5, 5).fill_(7);
  x.select(0, p31).fill_(200);
  x.select(0, 3).fill_(0);
  EXPECT_EQ(at_u8(x, n - 1), 7);
  EXPECT_EQ(at_u8(x, n - 6), 1);
  EXPECT_EQ(at_u8(x, p31), 200);
  EXPECT_EQ(at_u8(x, p31 - 1), 1);
  EXPECT_EQ(at_u8(x, 3), 0);
  const int64_t want_sum = (n - 7) + 0 + 200 + 5 * 7;
  EXPECT_EQ(sum(x).item<int64_t>(), want_sum);
  EXPECT_EQ(amax(x).item<int64_t>(), 200);
  EXPECT_EQ(max(x).item<int64_t>(), 200);
  EXPECT_EQ(amin(x).item<int64_t>(), 0);
  EXPECT_EQ(argmax(x).item<int64_t>(), p31);
  EXPECT_EQ(argmin(x).item<int64_t>(), 3);
  // Slice at the end: a view whose offset is past 2^31, copied out.
  Tensor tail = x.slice(0, n - 17);
  EXPECT_EQ(tail.storage_offset(), p31);
  ref::Array want({17}, 1.0);
  want.v[0] = 200;
  for (int i = 12; i < 17; ++i) want.v[static_cast<size_t>(i)] = 7;
  EXPECT_TRUE(th::expect_equal(tail.clone(), want));
  EXPECT_EQ(sum(tail).item<int64_t>(), 200 + 11 + 35);
  // A full copy, then the same checks on the copy.
  Tensor y = x.clone();
  EXPECT_EQ(at_u8(y, n - 1), 7);
  EXPECT_EQ(at_u8(y, p31), 200);
  EXPECT_EQ(sum(y).item<int64_t>(), want_sum);
  // copy_ into the end of the big buffer through a view, then re-check the total.
  Tensor src = full({17}, 9, TensorOptions(kUInt8));
  y.slice(0, n - 17).copy_(src);
  EXPECT_EQ(sum(y).item<int64_t>(), want_sum - (200 + 11 + 35) + 9 * 17);
  EXPECT_EQ(at_u8(y, n - 18), 1);
  EXPECT_EQ(amax(y).item<int64_t>(), 9);
}

// int8 above 2^32 elements: -1 everywhere, 100 at 2^32 - 1, 2 in the last 33 except -100 at
// 2^32 + 7.
TEST(LargeTensor, Int8Above2Pow32) {
  SKIP_UNDER_SANITIZERS();
  const int64_t p32 = int64_t{1} << 32;
  const int64_t n = p32 + 33;
  SKIP_UNLESS_MEMORY(n + (int64_t{2} << 30));
  Tensor x = empty({n}, TensorOptions(kInt8));
  x.fill_(-1);
  x.narrow(0, n - 33, 33).fill_(2);
  x.select(0, p32 - 1).fill_(100);
  x.select(0, p32 + 7).fill_(-100);
  EXPECT_EQ(x.select(0, p32 + 7).item<int64_t>(), -100);
  EXPECT_EQ(x.select(0, n - 1).item<int64_t>(), 2);
  EXPECT_EQ(x.select(0, p32 - 2).item<int64_t>(), -1);
  EXPECT_EQ(sum(x).item<int64_t>(), -(n - 34) + 32 * 2 - 100 + 100);
  EXPECT_EQ(amax(x).item<int64_t>(), 100);
  EXPECT_EQ(amin(x).item<int64_t>(), -100);
  EXPECT_EQ(argmax(x).item<int64_t>(), p32 - 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), p32 + 7);
  Tensor tail = x.slice(0, p32 - 1);
  ref::Array want({34}, 2.0);
  want.v[0] = 100;
  want.v[8] = -100;
  EXPECT_TRUE(th::expect_equal(tail.clone(), want));
  EXPECT_TRUE(th::expect_equal(tail.to(kInt32), want));
  // A 2-D view whose rows sit past 2^32: reduce each row (row 0 holds the -100 at 2^32 + 7).
  Tensor rows = x.narrow(0, n - 32, 32).view({4, 8});
  ref::Array rsum({4}, 16.0);
  rsum.v[0] = 7 * 2 - 100;
  EXPECT_TRUE(th::expect_equal(sum(rows, {1}), rsum));
}

// ---- the same checks on every device

// Skips unless `bytes` fit: host MemAvailable on the CPU, one trial allocation on CUDA (the
// caching allocator keeps it for the test's tensors).
class LargeTensorOnDevice : public th::DeviceTest {
 protected:
  bool fits(int64_t bytes, std::string* why) const {
    if (dev().is_cpu()) {
      const int64_t avail = mem_available_bytes();
      *why = "needs " + std::to_string(bytes >> 20) + " MiB free, MemAvailable is " + std::to_string(avail >> 20) + " MiB";
      return avail >= bytes;
    }
    try {
      Tensor probe = empty({bytes}, TensorOptions(kUInt8).device(dev()));
      return true;
    } catch (const OutOfMemoryError& e) {
      *why = std::string("needs ") + std::to_string(bytes >> 20) + " MiB of device memory: " + e.what();
      return false;
    }
  }
  TensorOptions opts(DType t) const { return TensorOptions(t).device(dev()); }
};

#define SKIP_UNLESS_FITS(bytes)              \
  do {                                       \
    std::string why_;                        \
    if (!fits((bytes), &why_)) GTEST_SKIP() << why_; \
  } while (0)

double at(const Tensor& y, std::initializer_list<int64_t> idx) {
  Tensor v = y;
  for (int64_t i : idx) v = v.select(0, i);
  return v.item<double>();
}

// Pads whose output passes 2^32 elements (the failure class of MPSGraph's pad: most elements of
// such outputs wrong). A constant pad of a [4, 2^30 + 3] uint8 tensor by (2, 5) on the last dim
// and (1, 0) on the first: every row's fill, copied middle and markers checked, then the sum.
TEST_P(LargeTensorOnDevice, ConstantPadPast2Pow32) {
  SKIP_UNDER_SANITIZERS();
  const int64_t w = (int64_t{1} << 30) + 3, ow = w + 7;
  SKIP_UNLESS_FITS(4 * w + 5 * ow + (int64_t{1} << 30));
  Tensor x = empty({4, w}, opts(kUInt8));
  x.fill_(1);
  x.select(0, 2).select(0, 0).fill_(55);
  x.select(0, 3).select(0, w - 1).fill_(77);
  Tensor y = constant_pad_nd(x, {2, 5, 1, 0}, 9);
  ASSERT_EQ(y.sizes(), (Shape{5, ow}));
  ASSERT_GT(y.numel(), int64_t{1} << 32);
  for (int64_t c : {int64_t{0}, int64_t{2}, ow / 2, ow - 1}) EXPECT_EQ(at(y, {0, c}), 9) << c;  // the padded row
  for (int64_t r = 1; r < 5; ++r) {
    EXPECT_EQ(at(y, {r, 0}), 9);
    EXPECT_EQ(at(y, {r, 1}), 9);
    EXPECT_EQ(at(y, {r, ow - 5}), 9);
    EXPECT_EQ(at(y, {r, ow - 1}), 9);
    EXPECT_EQ(at(y, {r, ow / 2}), 1);
  }
  EXPECT_EQ(at(y, {3, 2}), 55);
  EXPECT_EQ(at(y, {4, w + 1}), 77);  // input [3, w - 1]: the last copied element, past 2^32
  EXPECT_EQ(at(y, {4, w}), 1);
  // Every element: 9 * (fill count) + 1 * (copied ones) + the two markers' excess.
  const int64_t fills = ow + 4 * 7, ones = 4 * w - 2;
  EXPECT_EQ(sum(y).item<int64_t>(), 9 * fills + ones + 55 + 77);
}

// A reflect pad of a [1, 2^32 + 16] uint8 tensor by (3, 4): both mirrored ends and a middle
// element past 2^32.
TEST_P(LargeTensorOnDevice, ReflectPadPast2Pow32) {
  SKIP_UNDER_SANITIZERS();
  const int64_t n = (int64_t{1} << 32) + 16, on = n + 7;
  SKIP_UNLESS_FITS(n + on + (int64_t{1} << 30));
  Tensor x = empty({1, n}, opts(kUInt8));
  x.fill_(0);
  for (int64_t i = 0; i < 5; ++i) {
    x.select(1, i).fill_(10 + i);          // 10, 11, 12, 13, 14 at the start
    x.select(1, n - 1 - i).fill_(20 + i);  // 20, 21, 22, 23, 24 from the end backwards
  }
  x.select(1, (int64_t{1} << 32) + 3).fill_(99);
  Tensor y = reflection_pad1d(x, {3, 4});
  ASSERT_EQ(y.sizes(), (Shape{1, on}));
  const std::vector<int64_t> head = {13, 12, 11, 10, 11, 12, 13, 14};
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(at(y, {0, c}), head[static_cast<size_t>(c)]) << c;
  // The end: x[n-5 .. n-1] = 24 .. 20, then the mirror 21, 22, 23, 24.
  const std::vector<int64_t> tail = {24, 23, 22, 21, 20, 21, 22, 23, 24};
  for (int64_t c = 0; c < 9; ++c) EXPECT_EQ(at(y, {0, on - 9 + c}), tail[static_cast<size_t>(c)]) << c;
  EXPECT_EQ(at(y, {0, (int64_t{1} << 32) + 6}), 99);
  EXPECT_EQ(at(y, {0, (int64_t{1} << 32) + 5}), 0);
}

// The reflect pad's backward (floating types only) past 2^31: ones into a [1, 2^31 + 16]
// bfloat16 gradient, so each input element counts how often the pad (3, 4) read it.
TEST_P(LargeTensorOnDevice, ReflectPadBackwardPast2Pow31) {
  SKIP_UNDER_SANITIZERS();
  const int64_t n = (int64_t{1} << 31) + 16, on = n + 7;
  SKIP_UNLESS_FITS(2 * (2 * n + on) + (int64_t{1} << 30));
  Tensor x = empty({1, n}, opts(kBFloat16));
  Tensor g = reflection_pad1d_backward(ones({1, on}, opts(kBFloat16)), x, {3, 4});
  ASSERT_EQ(g.sizes(), (Shape{1, n}));
  for (int64_t c : {int64_t{0}, int64_t{4}, int64_t{5}, n / 2, n - 6, n - 1}) EXPECT_EQ(at(g, {0, c}), 1) << c;
  for (int64_t c : {int64_t{1}, int64_t{2}, int64_t{3}, n - 5, n - 4, n - 3, n - 2}) EXPECT_EQ(at(g, {0, c}), 2) << c;
  EXPECT_EQ(sum(eq(g, 2.0)).item<int64_t>(), 7);
}

// 2x nearest and bilinear upsampling along the last axis of [1, 2, 2^14, 2^15 + 3] bfloat16
// (scales (1, 2)) into 2^31 + 6 * 2^15 outputs: channel 1's last row, where the markers sit
// (column 2^15 - 1 holds 5, the last column 3), lands past 2^31; the nearest backward folds it
// back. (Extents are small here: the backward's per-axis tables take 16 to 64 bytes per index of
// an axis on either backend, so a single 2^30 axis would need tens of GiB of them.)
TEST_P(LargeTensorOnDevice, UpsamplePast2Pow31) {
  SKIP_UNDER_SANITIZERS();
  const int64_t hh = int64_t{1} << 14, n = (int64_t{1} << 15) + 3, on = 2 * n, m = (int64_t{1} << 15) - 1;
  const int64_t in_numel = 2 * hh * n, out_numel = 2 * hh * on;
  SKIP_UNLESS_FITS(2 * (2 * in_numel + 2 * out_numel) + (int64_t{1} << 30));
  Tensor x = full({1, 2, hh, n}, 1.0, opts(kBFloat16));
  Tensor row = x.select(1, 1).select(1, hh - 1);  // [1, n]
  row.select(1, m).fill_(5);
  row.select(1, n - 1).fill_(3);
  auto last = [&](const Tensor& y, int64_t j) { return at(y, {0, 1, hh - 1, j}); };
  {
    Tensor y = interpolate(x, std::nullopt, std::vector<double>{1.0, 2.0}, "nearest");
    ASSERT_EQ(y.sizes(), (Shape{1, 2, hh, on}));
    ASSERT_GT(y.numel(), int64_t{1} << 31);
    EXPECT_EQ(last(y, 2 * m - 1), 1);
    EXPECT_EQ(last(y, 2 * m), 5);
    EXPECT_EQ(last(y, 2 * m + 1), 5);
    EXPECT_EQ(last(y, 2 * m + 2), 1);
    EXPECT_EQ(last(y, on - 1), 3);
    EXPECT_EQ(last(y, on - 2), 3);
    EXPECT_EQ(last(y, on - 3), 1);
    EXPECT_EQ(sum(eq(y, 1.0)).item<int64_t>(), out_numel - 4);
    // grad_output = y: each input element gets twice its value back.
    Tensor g = upsample_backward(y, {hh, on}, {1, 2, hh, n}, "nearest");
    EXPECT_EQ(last(g, m), 10);
    EXPECT_EQ(last(g, n - 1), 6);
    EXPECT_EQ(last(g, n - 2), 2);
    EXPECT_EQ(sum(eq(g, 2.0)).item<int64_t>(), in_numel - 2);
  }
  // bilinear, align_corners false, rows kept: out[2i] = x[i - 1] / 4 + 3 x[i] / 4,
  // out[2i + 1] = 3 x[i] / 4 + x[i + 1] / 4 (edges clamped), exact in bfloat16 here.
  Tensor y = interpolate(x, std::nullopt, std::vector<double>{1.0, 2.0}, "bilinear");
  ASSERT_EQ(y.sizes(), (Shape{1, 2, hh, on}));
  EXPECT_EQ(last(y, 2 * m - 2), 1);
  EXPECT_EQ(last(y, 2 * m - 1), 2);
  EXPECT_EQ(last(y, 2 * m), 4);
  EXPECT_EQ(last(y, 2 * m + 1), 4);
  EXPECT_EQ(last(y, 2 * m + 2), 2);
  EXPECT_EQ(last(y, on - 3), 1.5);  // 3 / 4 + 3 / 4: out[2 (n - 2) + 1]
  EXPECT_EQ(last(y, on - 2), 2.5);
  EXPECT_EQ(last(y, on - 1), 3);
  EXPECT_EQ(sum(eq(y, 1.0)).item<int64_t>(), out_numel - 7);
}

// Convolutions past 2^31 elements: a k3 conv1d of one channel of 2^31 + 40 bfloat16 (the extent
// itself past 2^31), and a depthwise one over two channels of 2^30 + 40 (channel offsets past
// 2^30 elements, the total past 2^31). Ones with markers, a [1, 2, 3] kernel: outputs are sums
// of small integers, exact. On CUDA the first runs the 64-bit composition (cuDNN faulted on it;
// its plan query refuses tensors of 2^31 elements), the second our depthwise kernel with 64-bit
// indices; on the CPU the second runs its depthwise kernel.
TEST_P(LargeTensorOnDevice, Conv1dPast2Pow31) {
  SKIP_UNDER_SANITIZERS();
  const int64_t n = (int64_t{1} << 31) + 40, p31 = int64_t{1} << 31;
  SKIP_UNLESS_FITS(5 * n + (int64_t{1} << 31));  // x, y, a bool mask and the columns
  const Tensor w = arange(1, 4, 1, opts(kFloat32)).to(kBFloat16).reshape({1, 1, 3});
  Tensor x = full({1, 1, n}, 1.0, opts(kBFloat16));
  x.select(2, p31 + 7).fill_(2);
  // The CPU's implicit-GEMM bf16 kernel where the CPU has AVX512-BF16, im2col + GEMM elsewhere.
  EXPECT_EQ(convolution_plan(x, w, {1}, {1}, {1}, false, {0}, 1),
            dev().is_cpu() && cpu_has_bf16_dots() ? FusedPlan::Fused : FusedPlan::Composed);
  Tensor y = conv1d(x, w, Tensor(), {1}, {1});
  ASSERT_EQ(y.sizes(), (Shape{1, 1, n}));
  // y[j] = x[j - 1] + 2 x[j] + 3 x[j + 1], zeros past the ends.
  EXPECT_EQ(at(y, {0, 0, 0}), 5);
  EXPECT_EQ(at(y, {0, 0, n / 2}), 6);
  EXPECT_EQ(at(y, {0, 0, p31 + 5}), 6);
  EXPECT_EQ(at(y, {0, 0, p31 + 6}), 9);
  EXPECT_EQ(at(y, {0, 0, p31 + 7}), 8);
  EXPECT_EQ(at(y, {0, 0, p31 + 8}), 7);
  EXPECT_EQ(at(y, {0, 0, n - 1}), 3);
  EXPECT_EQ(sum(eq(y, 6.0)).item<int64_t>(), n - 5);
}

TEST_P(LargeTensorOnDevice, DepthwiseConvPast2Pow31) {
  SKIP_UNDER_SANITIZERS();
  const int64_t h = (int64_t{1} << 30) + 40;
  SKIP_UNLESS_FITS(10 * h + (int64_t{1} << 31));
  const Tensor w = arange(1, 4, 1, opts(kFloat32)).to(kBFloat16);
  const Tensor wd = cat({w, mul(w, 2.0)}).reshape({2, 1, 3});
  Tensor x = full({1, 2, h}, 1.0, opts(kBFloat16));
  x.select(1, 1).select(1, h - 3).fill_(2);
  // Our own depthwise kernel on both devices (64-bit indices on CUDA past 2^31 elements).
  EXPECT_EQ(convolution_plan(x, wd, {1}, {1}, {1}, false, {0}, 2), FusedPlan::Fused);
  Tensor y = conv1d(x, wd, Tensor(), {1}, {1}, {1}, 2);
  ASSERT_EQ(y.sizes(), (Shape{1, 2, h}));
  EXPECT_EQ(at(y, {0, 0, h - 1}), 3);
  EXPECT_EQ(at(y, {0, 1, 0}), 10);
  EXPECT_EQ(at(y, {0, 1, h - 5}), 12);
  EXPECT_EQ(at(y, {0, 1, h - 4}), 18);
  EXPECT_EQ(at(y, {0, 1, h - 3}), 16);
  EXPECT_EQ(at(y, {0, 1, h - 2}), 14);
  EXPECT_EQ(at(y, {0, 1, h - 1}), 6);
  EXPECT_EQ(sum(eq(y.select(1, 1), 12.0)).item<int64_t>(), h - 5);
}

ANVIL_INSTANTIATE_DEVICE_TESTS(LargeTensorOnDevice);

}  // namespace
