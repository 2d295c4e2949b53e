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

}  // namespace
