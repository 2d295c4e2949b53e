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

// Pads whose output passes 2^32 elements (the failure class of MPSGraph's pad: most elements of
// such outputs wrong). A constant pad of a [4, 2^30 + 3] uint8 tensor by (2, 5) on the last dim
// and (1, 0) on the first: every row's fill, copied middle and markers checked, then the sum.
TEST(LargeTensor, ConstantPadPast2Pow32) {
  SKIP_UNDER_SANITIZERS();
  const int64_t w = (int64_t{1} << 30) + 3, ow = w + 7;
  SKIP_UNLESS_MEMORY(4 * w + 5 * ow + (int64_t{1} << 30));
  Tensor x = empty({4, w}, TensorOptions(kUInt8));
  x.fill_(1);
  x.select(0, 2).select(0, 0).fill_(55);
  x.select(0, 3).select(0, w - 1).fill_(77);
  Tensor y = constant_pad_nd(x, {2, 5, 1, 0}, 9);
  ASSERT_EQ(y.sizes(), (Shape{5, ow}));
  ASSERT_GT(y.numel(), int64_t{1} << 32);
  auto at = [&](int64_t r, int64_t c) { return y.select(0, r).select(0, c).item<int64_t>(); };
  for (int64_t c : {int64_t{0}, int64_t{2}, ow / 2, ow - 1}) EXPECT_EQ(at(0, c), 9) << c;  // the padded row
  for (int64_t r = 1; r < 5; ++r) {
    EXPECT_EQ(at(r, 0), 9);
    EXPECT_EQ(at(r, 1), 9);
    EXPECT_EQ(at(r, ow - 5), 9);
    EXPECT_EQ(at(r, ow - 1), 9);
    EXPECT_EQ(at(r, ow / 2), 1);
  }
  EXPECT_EQ(at(3, 2), 55);
  EXPECT_EQ(at(4, w + 1), 77);  // input [3, w - 1]: the last copied element, past 2^32
  EXPECT_EQ(at(4, w), 1);
  // Every element: 9 * (fill count) + 1 * (copied ones) + the two markers' excess.
  const int64_t fills = ow + 4 * 7, ones = 4 * w - 2;
  EXPECT_EQ(sum(y).item<int64_t>(), 9 * fills + ones + 55 + 77);
}

// A reflect pad of a [1, 2^32 + 16] uint8 tensor by (3, 4): both mirrored ends and a middle
// element past 2^32.
TEST(LargeTensor, ReflectPadPast2Pow32) {
  SKIP_UNDER_SANITIZERS();
  const int64_t n = (int64_t{1} << 32) + 16, on = n + 7;
  SKIP_UNLESS_MEMORY(n + on + (int64_t{1} << 30));
  Tensor x = empty({1, n}, TensorOptions(kUInt8));
  x.fill_(0);
  for (int64_t i = 0; i < 5; ++i) {
    x.select(1, i).fill_(10 + i);          // 10, 11, 12, 13, 14 at the start
    x.select(1, n - 1 - i).fill_(20 + i);  // 20, 21, 22, 23, 24 from the end backwards
  }
  x.select(1, (int64_t{1} << 32) + 3).fill_(99);
  Tensor y = reflection_pad1d(x, {3, 4});
  ASSERT_EQ(y.sizes(), (Shape{1, on}));
  auto at = [&](int64_t c) { return y.select(1, c).item<int64_t>(); };
  const std::vector<int64_t> head = {13, 12, 11, 10, 11, 12, 13, 14};
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(at(c), head[c]) << c;
  // The end: x[n-5 .. n-1] = 24 .. 20, then the mirror 21, 22, 23, 24.
  const std::vector<int64_t> tail = {24, 23, 22, 21, 20, 21, 22, 23, 24};
  for (int64_t c = 0; c < 9; ++c) EXPECT_EQ(at(on - 9 + c), tail[c]) << c;
  EXPECT_EQ(at((int64_t{1} << 32) + 6), 99);
  EXPECT_EQ(at((int64_t{1} << 32) + 5), 0);
}

}  // namespace
