// grouped_mm's CUDA kernels against each other and the float64 reference: the decode kernel
// (few rows, b = W^T unit-stride along k) and the tiled kernel (the same values with b
// unit-stride along n) over the k splits the decode kernel picks, rows of one group past 8,
// empty groups and rows past the last end; FP8 weights with 16-bit and float8 activations;
// CUDA graph replay with new routing (a different number of active experts each replay);
// operands past 2^31 elements.
#include <cmath>

#include "harness.h"
#include "reference/ref_matmul.h"

namespace {

using namespace anvil;
using th::Layout;

ref::Array abs_of(const ref::Array& a) {
  ref::Array r = a;
  for (double& v : r.v) v = std::fabs(v);
  return r;
}

// float32 accumulation over k: |err| <= (2k + 4) u32 (|a| |b| |scales|) + 2 u_out |want|.
::testing::AssertionResult check_rows(const Tensor& got, const ref::Array& a, const ref::Array& b,
                                      const std::vector<int64_t>& offs, DType out,
                                      const std::vector<double>* sa = nullptr, const ref::Array* sb = nullptr) {
  const ref::Array want = ref::grouped_mm(a, b, offs, sa, sb);
  std::vector<double> asa;
  if (sa) {
    for (double v : *sa) asa.push_back(std::fabs(v));
  }
  const ref::Array asb = sb ? abs_of(*sb) : ref::Array();
  const ref::Array scale = ref::grouped_mm(abs_of(a), abs_of(b), offs, sa ? &asa : nullptr, sb ? &asb : nullptr);
  const double k = static_cast<double>(a.sizes.back()), u32 = th::unit_roundoff(kFloat32);
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i) extra.v[i] = std::isnan(scale.v[i]) ? 0.0 : (2.0 * k + 4.0) * u32 * scale.v[i];
  return th::expect_close(got, want, th::Tol{th::underflow_atol(out), 2 * th::unit_roundoff(out)}, &extra);
}

Tensor offs_tensor(const std::vector<int64_t>& offs, Device dev) {
  ref::Array a({static_cast<int64_t>(offs.size())});
  for (size_t i = 0; i < offs.size(); ++i) a.v[i] = static_cast<double>(offs[i]);
  return th::make_tensor(a, kInt32, dev);
}

// b [G, k, n] two ways: W^T of a row-major W [G, n, k] (unit stride along k: the decode
// kernel's layout) and row-major (unit stride along n: the tiled kernel).
Tensor b_as_weight_t(const ref::Array& b, DType t, Device dev) {
  const int64_t groups = b.sizes[0], k = b.sizes[1], n = b.sizes[2];
  ref::Array w({groups, n, k});
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < n; ++j) w.at({g, j, q}) = b.at({g, q, j});
  return th::make_tensor(w, t, dev).transpose(1, 2);
}

// A NaN-filled out [m, n] with a padded row stride: rows the op must not write stay NaN.
Tensor nan_rows(int64_t m, int64_t n, DType t, Device dev) {
  return full({m, n + 5}, std::nan(""), TensorOptions(t).device(dev)).narrow(1, 0, n);
}

std::string offs_str(const std::vector<int64_t>& offs) {
  std::string s = "[";
  for (size_t i = 0; i < offs.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(offs[i]);
  }
  return s + "]";
}

struct DecodeCase {
  int64_t m, k, n;
  std::vector<int64_t> offs;
};

// Decode-sized cases: k picks the decode kernel's split (bf16 steps of 128 k: 64 -> 1 warp per
// tile, 384 -> 2, 768 -> 4, 2048 -> 8; float8 steps of 256 k), n off multiples of 8, rows of
// one group past 8 (the m16 A rows), one-row groups, empty groups, rows past the last end.
const std::vector<DecodeCase>& decode_cases() {
  static const std::vector<DecodeCase> v = [] {
    std::vector<DecodeCase> r;
    std::vector<int64_t> top8(16);  // 8 rows in groups 1, 3, ..., 15
    for (int64_t g = 0; g < 16; ++g) top8[static_cast<size_t>(g)] = (g + 1) / 2;
    r.push_back({8, 2048, 256, top8});
    r.push_back({8, 768, 72, top8});
    r.push_back({8, 384, 40, top8});
    r.push_back({1, 64, 24, {0, 1, 1, 1}});
    r.push_back({16, 256, 17, {0, 16, 16}});           // one group of 16 rows
    r.push_back({12, 200, 9, {3, 3, 11, 11, 11}});      // row 11 past the last end; k tail
    r.push_back({9, 2056, 16, {1, 9}});                 // 1 + 8 rows
    r.push_back({5, 8, 64, {2, 2, 2, 3, 3, 4, 5, 5}});  // k of one load
    r.push_back({13, 512, 33, {4, 4, 10, 13}});
    return r;
  }();
  return v;
}

// Both kernels on the same values, against the float64 reference.
TEST(GroupedMmCuda, DecodeAndTiledKernelsMatchTheReference) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::CaseLoop loop;
  th::Gen gen(7100);
  for (const DecodeCase& c : decode_cases()) {
    const int64_t groups = static_cast<int64_t>(c.offs.size());
    for (DType t : {kBFloat16, kFloat16}) {
      if (!loop.run("m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) + " offs " +
                        offs_str(c.offs) + " " + th::dtype_str(t),
                    [&] {
        const ref::Array av = th::random_array({c.m, c.k}, t, gen, -1, 1);
        const ref::Array bv = th::random_array({groups, c.k, c.n}, t, gen, -1, 1);
        const Tensor a = th::make_tensor(av, t, dev), offs = offs_tensor(c.offs, dev);
        Tensor dec = nan_rows(c.m, c.n, t, dev), tiled = nan_rows(c.m, c.n, t, dev);
        grouped_mm_out(dec, a, b_as_weight_t(bv, t, dev), offs);
        grouped_mm_out(tiled, a, th::make_tensor(bv, t, dev), offs);
        ASSERT_TRUE(check_rows(dec, av, bv, c.offs, t)) << "decode kernel";
        ASSERT_TRUE(check_rows(tiled, av, bv, c.offs, t)) << "tiled kernel";
      }))
        return;
    }
  }
}

// FP8 experts: e4m3 / e5m2 weights with column scales; bfloat16, float16 (weight-only) or e4m3
// activations with row scales; both kernels.
TEST(GroupedMmCuda, Fp8DecodeAndTiledKernelsMatchTheReference) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::CaseLoop loop;
  th::Gen gen(7101);
  for (const DecodeCase& c : decode_cases()) {
    if (c.k % 16 != 0) continue;  // one float8 load is 16 k
    const int64_t groups = static_cast<int64_t>(c.offs.size());
    for (DType ta : {kBFloat16, kFloat16, kFloat8_e4m3fn}) {
      for (DType tb : {kFloat8_e4m3fn, kFloat8_e5m2}) {
        const DType out = ta == kFloat16 ? kFloat32 : kBFloat16;
        if (!loop.run("m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) + " offs " +
                          offs_str(c.offs) + " " + th::dtype_str(ta) + " x " + th::dtype_str(tb),
                      [&] {
          const ref::Array av = th::random_array({c.m, c.k}, ta, gen, -4, 4);
          const ref::Array bv = th::random_array({groups, c.k, c.n}, tb, gen, -6, 6);
          const th::Input sb = th::make_input({groups, c.n}, kFloat32, dev, Layout::Contiguous, gen, 1.0 / 256, 2.0);
          th::Input sa;
          if (is_float8(ta)) sa = th::make_input({c.m}, kFloat32, dev, Layout::Contiguous, gen, 1.0 / 256, 2.0);
          const Tensor a = th::make_tensor(av, ta, dev), offs = offs_tensor(c.offs, dev);
          const Tensor dec = scaled_grouped_mm(a, b_as_weight_t(bv, tb, dev), sa.t, sb.t, offs, out);
          const Tensor tiled = scaled_grouped_mm(a, th::make_tensor(bv, tb, dev), sa.t, sb.t, offs, out);
          // Rows past the last end hold whatever the allocation held: compare the written rows.
          const int64_t written = c.offs.back();
          ref::Array aw = av;
          aw.sizes[0] = written;
          aw.v.resize(static_cast<size_t>(written * c.k));
          const std::vector<double>* sav = sa.t.defined() ? &sa.a.v : nullptr;
          ASSERT_TRUE(check_rows(dec.narrow(0, 0, written), aw, bv, c.offs, out, sav, &sb.a)) << "decode kernel";
          ASSERT_TRUE(check_rows(tiled.narrow(0, 0, written), aw, bv, c.offs, out, sav, &sb.a)) << "tiled kernel";
        }))
          return;
      }
    }
  }
}

// One capture of the decode path (bf16 and FP8 weights); each replay routes the 8 rows anew:
// 8 experts, 2 experts (3 + 5 rows), 1 expert with the last 2 rows unrouted. Replay and an
// eager call agree bit for bit, and both match the reference.
TEST(GroupedMmCudaGraph, DecodeReplaysNewRouting) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(7102);
  const int64_t m = 8, groups = 32, k = 512, n = 64;
  const std::vector<std::vector<int64_t>> routes = [&] {
    std::vector<std::vector<int64_t>> r(3, std::vector<int64_t>(static_cast<size_t>(groups)));
    for (int64_t g = 0; g < groups; ++g) {
      r[0][static_cast<size_t>(g)] = std::min<int64_t>(8, (g + 3) / 4);
      r[1][static_cast<size_t>(g)] = g < 5 ? 0 : g < 20 ? 3 : 8;
      r[2][static_cast<size_t>(g)] = g < 30 ? 0 : 6;
    }
    return r;
  }();
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "e4m3 weights" : "bf16 weights");
    const DType tb = fp8 ? kFloat8_e4m3fn : kBFloat16;
    ref::Array bv = th::random_array({groups, k, n}, tb, gen, -1, 1);
    Tensor a = th::make_tensor(th::random_array({m, k}, kBFloat16, gen, -1, 1), kBFloat16, dev);
    Tensor b = b_as_weight_t(bv, tb, dev);
    th::Input sb = th::make_input({groups, n}, kFloat32, dev, Layout::Contiguous, gen, 0.5, 2.0);
    Tensor offs = offs_tensor(routes[0], dev);
    Tensor out = zeros({m, n}, TensorOptions(kBFloat16).device(dev));
    auto call = [&](Tensor& o) {
      if (fp8) o.copy_(scaled_grouped_mm(a, b, Tensor(), sb.t, offs, kBFloat16));
      else grouped_mm_out(o, a, b, offs);
    };
    call(out);  // first-call setup outside the capture
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    call(out);
    graph.capture_end();
    for (size_t round = 0; round < routes.size(); ++round) {
      const ref::Array av = th::random_array({m, k}, kBFloat16, gen, -1, 1);
      a.copy_(th::make_tensor(av, kBFloat16, dev));
      offs.copy_(offs_tensor(routes[round], dev));
      out.fill_(std::nan(""));
      graph.replay();
      s.synchronize();
      Tensor eager = full({m, n}, std::nan(""), TensorOptions(kBFloat16).device(dev));
      call(eager);
      s.synchronize();
      const int64_t written = routes[round].back();
      EXPECT_EQ(th::to_bits(out.narrow(0, 0, written)), th::to_bits(eager.narrow(0, 0, written))) << "round " << round;
      ref::Array aw = av;
      aw.sizes[0] = written;
      aw.v.resize(static_cast<size_t>(written * k));
      EXPECT_TRUE(check_rows(out.narrow(0, 0, written), aw, bv, routes[round], kBFloat16, nullptr, fp8 ? &sb.a : nullptr))
          << "round " << round;
      if (!fp8 && written < m) {
        EXPECT_TRUE(std::isnan(th::to_array(out.narrow(0, written, 1)).v[0])) << "row past the end";
      }
    }
    graph.reset();
  }
}

// Sampled rows (or weight columns) of a product whose operand passes 2^31 elements: the
// reference of the sampled outputs from host copies of their rows.
void expect_rows_match(const Tensor& out, const Tensor& a, const Tensor& b, const std::vector<int64_t>& offs,
                       const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
  const int64_t k = a.size(1);
  const double u32 = th::unit_roundoff(kFloat32), ub = th::unit_roundoff(kBFloat16);
  for (int64_t r : rows) {
    int64_t grp = 0;
    while (offs[static_cast<size_t>(grp)] <= r) ++grp;
    const ref::Array ar = th::to_array(a.narrow(0, r, 1));
    const ref::Array got = th::to_array(out.narrow(0, r, 1));
    for (int64_t j : cols) {
      const ref::Array bc = th::to_array(b.select(0, grp).narrow(1, j, 1));
      double want = 0, scale = 0;
      for (int64_t q = 0; q < k; ++q) {
        want += ar.v[static_cast<size_t>(q)] * bc.v[static_cast<size_t>(q)];
        scale += std::fabs(ar.v[static_cast<size_t>(q)] * bc.v[static_cast<size_t>(q)]);
      }
      const double g = got.v[static_cast<size_t>(j)];
      EXPECT_LE(std::fabs(g - want), (2.0 * k + 4) * u32 * scale + 2 * ub * std::fabs(want) + 1e-30)
          << "row " << r << " column " << j << ": got " << g << ", want " << want;
    }
  }
}

// Tiled kernel: a [2^21 + 64, 1024] bf16 (2^31 + 2^16 elements) over 4 groups.
TEST(GroupedMmCudaLarge, TiledRowsPast2To31Elements) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  const int64_t m = (int64_t{1} << 21) + 64, k = 1024, n = 8;
  const std::vector<int64_t> offs = {int64_t{1} << 20, int64_t{1} << 21, (int64_t{1} << 21) + 32, m};
  const Tensor a = randn({m, k}, TensorOptions(kBFloat16).device(dev));
  const Tensor b = randn({4, k, n}, TensorOptions(kBFloat16).device(dev));
  const Tensor y = grouped_mm(a, b, offs_tensor(offs, dev));
  expect_rows_match(y, a, b, offs, {0, (int64_t{1} << 20) + 7, (int64_t{1} << 21) - 1, (int64_t{1} << 21) + 40, m - 1},
                    {0, 3, 7});
}

// Decode kernel: one expert W [40000, 65536] bf16 (2.6e9 elements), b = W^T; columns past
// 2^31 / k read weights past 2^31 elements.
TEST(GroupedMmCudaLarge, DecodeWeightsPast2To31Elements) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  const int64_t m = 2, k = 65536, n = 40000;
  const Tensor w = randn({1, n, k}, TensorOptions(kBFloat16).device(dev));
  const Tensor a = randn({m, k}, TensorOptions(kBFloat16).device(dev));
  const Tensor y = grouped_mm(a, w.transpose(1, 2), offs_tensor({m}, dev));
  expect_rows_match(y, a, w.transpose(1, 2), {m}, {0, 1}, {0, 32767, 32768, 39999});
}

}  // namespace
