#pragma once
// The op case-table harness: devices, layouts, sizes, seeded inputs, reading results back,
// tolerance formulas and guard bytes. Each test_<family>.cpp declares one table of cases and
// runs it through these helpers on CPU and, when a GPU is present, on Device(kCUDA, 0) against
// the same float64 reference (tests/reference/).
#include <gtest/gtest.h>

#include <functional>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "anvil/anvil.h"
#include "reference/reference.h"

namespace th {

using anvil::Device;
using anvil::DType;
using anvil::Tensor;
using Shape = std::vector<int64_t>;

// The reference encoder's format for a low-precision float dtype.
inline ref::Fmt fmt_of(DType t) {
  switch (t) {
    case anvil::kFloat8_e4m3fn: return ref::Fmt::E4M3FN;
    case anvil::kFloat8_e5m2: return ref::Fmt::E5M2;
    case anvil::kFloat16: return ref::Fmt::F16;
    default: return ref::Fmt::BF16;
  }
}

// ---- devices -----------------------------------------------------------------------------
// Value-parameterised over {cpu, cuda:0}; the CUDA instance skips (saying why) without a GPU.
class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override;
  Device dev() const { return GetParam(); }
};
std::string device_param_name(const ::testing::TestParamInfo<Device>& info);
// The source tree holding tests/data/ and data/: $ANVIL_SOURCE_DIR when set (a test binary
// carried to another machine), else the tree it was built from.
std::string source_dir();
#define ANVIL_INSTANTIATE_DEVICE_TESTS(Suite)                                                         \
  INSTANTIATE_TEST_SUITE_P(Dev, Suite, ::testing::Values(::anvil::Device(::anvil::kCPU),              \
                                                         ::anvil::Device(::anvil::kCUDA, 0)),          \
                           ::th::device_param_name)
// For plain TEST()s that need a GPU.
#define ANVIL_REQUIRE_CUDA()                                                                           \
  do {                                                                                                 \
    if (!::anvil::cuda::is_available())                                                                \
      GTEST_SKIP() << "CUDA not available: " << ::anvil::cuda::unavailable_reason();                   \
  } while (0)

// ---- dtypes --------------------------------------------------------------------------------
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {
      anvil::kBool,    anvil::kUInt8,   anvil::kInt8,    anvil::kUInt16,        anvil::kInt16,
      anvil::kUInt32,  anvil::kInt32,   anvil::kUInt64,  anvil::kInt64,         anvil::kFloat16,
      anvil::kBFloat16, anvil::kFloat32, anvil::kFloat64, anvil::kFloat8_e4m3fn, anvil::kFloat8_e5m2,
      anvil::kComplex64};
  return v;
}
// Unit roundoff u = 2^-p (p = significand bits incl. the implicit one): the relative error bound
// of one round-to-nearest. float32 2^-24, float64 2^-53, float16 2^-11, bfloat16 2^-8,
// e4m3fn 2^-4, e5m2 2^-3; 0 for exact (integer, bool) dtypes.
double unit_roundoff(DType t);
// The type low-precision floats compute and accumulate in (float32), else t itself.
DType compute_dtype(DType t);
std::string dtype_str(DType t);

// ---- element bytes (written with the reference encoders, never with anvil's) ----------------
void store_element(void* p, DType t, double v);
double load_element(const void* p, DType t);
uint64_t load_bits(const void* p, DType t);
// v rounded to nearest representable value of t (ints: truncated toward zero; bool: v != 0).
double round_to_dtype(double v, DType t);
anvil::Scalar scalar_for(DType t, double v);

// ---- seeded values ---------------------------------------------------------------------------
// splitmix64: tests own their randomness, independent of anvil's RNG.
class Gen {
 public:
  explicit Gen(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
  uint64_t next();
  double uniform(double lo, double hi);  // [lo, hi)
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi]
 private:
  uint64_t s_;
};
// Values for `t`: floats uniform in [lo, hi) rounded to t; integers uniform in [lo, hi]
// (clipped to t's range); bool 0/1.
ref::Array random_array(const Shape& sizes, DType t, Gen& g, double lo, double hi);
// Dyadic values k/8, |k| <= 8 * max_abs: every partial sum of fewer than 2^21 / max_abs of them
// is exact in float32, so sums in any order are exact and compare bit for bit.
ref::Array dyadic_array(const Shape& sizes, Gen& g, int max_abs);

// ---- layouts ---------------------------------------------------------------------------------
enum class Layout {
  Contiguous,
  Transposed,  // dims reversed over a permuted buffer (1-D: as Strided)
  Strided,     // last dim sliced with step 2 from start 1
  Offset,      // contiguous but starting one element into its buffer (misaligned)
  Broadcast,   // dim 0 expanded from size 1 (stride 0)
  RowPadded,   // last dim inside rows 3 elements wider, starting one in: unit last stride,
               // padded and misaligned rows (not in all_layouts(); make_guarded ignores it)
};
inline const std::vector<Layout>& all_layouts() {
  static const std::vector<Layout> v = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset,
                                        Layout::Broadcast};
  return v;
}
const char* layout_name(Layout l);

// A tensor on `dev` whose logical values are `a` (already representable in t) in layout `l`.
// Buffer slots the view skips hold a poison value, so reading them shows up in results.
// Layout::Broadcast requires `a` constant along dim 0 (make_input arranges it).
Tensor make_tensor(const ref::Array& a, DType t, Device dev, Layout l = Layout::Contiguous);
struct Input {
  Tensor t;
  ref::Array a;
};
Input make_input(const Shape& sizes, DType t, Device dev, Layout l, Gen& g, double lo, double hi);
Input make_dyadic_input(const Shape& sizes, DType t, Device dev, Layout l, Gen& g, int max_abs);
// An int64 tensor of indices (any layout); `a` holds them as doubles.
Tensor make_index(const ref::Array& a, Device dev, Layout l = Layout::Contiguous, DType t = anvil::kInt64);

// ---- reading back ---------------------------------------------------------------------------
// Logical values of any tensor (CUDA tensors are copied to the host first); complex: real part.
ref::Array to_array(const Tensor& t);
ref::Array to_array_imag(const Tensor& t);  // complex64: imaginary parts
// Raw element bits in logical (row-major) order.
std::vector<uint64_t> to_bits(const Tensor& t);
Tensor to_cpu(const Tensor& t);

// ---- comparisons ----------------------------------------------------------------------------
// Tolerance for got vs the float64 reference want:
//   |got - want| <= atol + rtol * |want| + extra[i]
// NaN must meet NaN; infinities must match exactly. Every tolerance in the suite is built
// from the dtype's unit roundoff u (above) by the formulas below, never a bare number.
struct Tol {
  double atol = 0.0;
  double rtol = 0.0;
};
// One op evaluated in compute type C and rounded once to the output type O, by a kernel
// accurate to k ulps of C (k = 1 for + - * /, ~8 for exp/log/tanh/erf and SIMD polynomials),
// on inputs of magnitude <= scale:   rtol = 2 (u_O + k u_C),  atol = 2 k u_C scale.
Tol elementwise_tol(DType out, int k_ulps, double scale = 1.0);
// A sum of n terms accumulated in C (any order: serial, SIMD lanes, tree) then rounded to O:
//   |err| <= 4 u_C (sqrt(n) + 1) sum|x_i|  +  2 u_O |want|
// (the sqrt(n) growth covers random-sign rounding errors of every summation order with a wide
// margin; exact cases use dyadic inputs instead). Returns the per-element extra term.
ref::Array sum_tol(DType out, int64_t n, const ref::Array& abs_sum);

::testing::AssertionResult expect_close(const Tensor& got, const ref::Array& want, Tol tol,
                                        const ref::Array* extra = nullptr);
// Equal values (NaN == NaN, -0 == +0), equal shape; dtype must be `t` when given.
::testing::AssertionResult expect_equal(const Tensor& got, const ref::Array& want);
::testing::AssertionResult expect_shape(const Tensor& got, const Shape& sizes, DType t);

// ---- memory stability -----------------------------------------------------------------------
// Runs decode() once, then three more times, on a CUDA device: the allocator's reserved memory
// above what the process held before stays within 1.25x the peak allocation, and does not grow
// from one of the three repetitions to the next (a segment given back is no growth).
::testing::AssertionResult memory_stable(Device dev, const std::function<void()>& decode);

// ---- guard bytes ----------------------------------------------------------------------------
// A view (contiguous, strided or offset) into a larger buffer whose every byte starts as
// `sentinel`; after an op wrote into the view, guards_intact() checks that each byte outside
// the view's elements still holds it.
struct Guarded {
  Tensor buffer;  // 1-D uint8 view of all bytes
  Tensor view;
  int64_t elem_size = 1;
};
Guarded make_guarded(const Shape& sizes, DType t, Device dev, Layout l, uint8_t sentinel = 0xA5);
::testing::AssertionResult guards_intact(const Guarded& g, uint8_t sentinel = 0xA5);

// ---- inputs unchanged -------------------------------------------------------------------------
// Every element slot of t's whole storage (the poison slots a view skips included), as bits:
// take it before an op and compare after, to check that the op wrote nothing into its inputs.
std::vector<uint64_t> storage_bits(const Tensor& t);
::testing::AssertionResult storage_unchanged(const Tensor& t, const std::vector<uint64_t>& before);

// Absolute slack for results near underflow: the larger of half the output's smallest
// subnormal step (float16 2^-25) and the compute type's smallest normal (float32 2^-126: a
// kernel may flush subnormal intermediates); relative bounds do not hold there.
double underflow_atol(DType out);

// ---- case tables ------------------------------------------------------------------------------
// Sizes of every table: empty, one, odd tails, 2^16 +- 1, above 2^16, multi-dim.
const std::vector<Shape>& table_shapes();
// A smaller set for costly tables (multi-dtype, multi-op).
const std::vector<Shape>& small_shapes();
std::string case_name(const Shape& s, DType t, Layout l, Device d);

// Whether ANVIL_TEST_TRACE is set (non-empty): CaseLoop then names each case on stderr before it
// runs, so a case that hangs or crashes is the last name printed.
bool trace_cases();

// Runs the cases of a table independently: an ASSERT or an exception inside one case fails that
// case (named in the failure) and the table goes on, until `max_failed` cases have failed.
//   th::CaseLoop loop;
//   for (...) if (!loop.run(name, [&] { ...ASSERT_...; })) return;
class CaseLoop {
 public:
  explicit CaseLoop(int max_failed = 10) : max_failed_(max_failed) {}
  template <typename F>
  bool run(const std::string& name, F&& f) {
    if (failed_ >= max_failed_) return false;
    if (trace_cases()) std::fprintf(stderr, "[case] %s\n", name.c_str());
    const int before = failure_count();
    bool repeated_exception = false;
    {
      ::testing::ScopedTrace trace(__FILE__, __LINE__, name);
      try {
        f();
      } catch (const std::exception& e) {
        // The same exception in many cases is one bug: it is reported each time but counts
        // once towards the limit, so the rest of the table still runs.
        repeated_exception = !seen_.insert(e.what()).second;
        ADD_FAILURE() << "exception: " << e.what();
      }
    }
    if (failure_count() > before && !repeated_exception) ++failed_;
    if (failed_ >= max_failed_) {
      ADD_FAILURE() << "stopping this table after " << failed_ << " failed cases";
      return false;
    }
    return true;
  }

 private:
  static int failure_count();
  int max_failed_;
  int failed_ = 0;
  std::set<std::string> seen_;
};

// ---- errors ---------------------------------------------------------------------------------
// Runs f, expects an exception of type E whose what() starts with "[" + op + "]".
template <typename E, typename F>
::testing::AssertionResult throws_with_op(F&& f, const std::string& op) {
  try {
    f();
  } catch (const E& e) {
    std::string what = e.what();
    std::string prefix = "[" + op + "]";
    if (what.rfind(prefix, 0) != 0)
      return ::testing::AssertionFailure() << "message does not start with " << prefix << ": " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << typeid(e).name() << ": " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "non-std exception";
  }
  return ::testing::AssertionFailure() << "no exception (expected " << typeid(E).name() << " with [" << op << "])";
}
#define EXPECT_THROWS_OP(ErrorType, op, stmt) \
  EXPECT_TRUE(::th::throws_with_op<::anvil::ErrorType>([&]() { (void)(stmt); }, op))

}  // namespace th
