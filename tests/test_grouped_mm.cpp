// grouped_mm in its four layouts (PyTorch's device-generic test shapes, operand layouts, odd
// sizes, empty groups, offsets short of the extent and past it, MoE decode rows over 128
// experts), the padded output stride, grouped_mm_out leaving rows past the last group alone,
// scaled_grouped_mm (FP8 experts, weight-only FP8), errors, and CUDA graph replay with new
// offsets read on the device.
#include <cmath>
#include <numeric>

#include "harness.h"
#include "reference/ref_matmul.h"

namespace {

using namespace anvil;
using th::Layout;

// float32 accumulation over the group's K range (2 k u32 |a| |b|, scales included), one
// rounding to the output. Elements the op does not write are NaN in the reference.
::testing::AssertionResult check_grouped(const Tensor& got, const ref::Array& a, const ref::Array& b,
                                         const std::vector<int64_t>& offs, DType out,
                                         const std::vector<double>* sa = nullptr, const ref::Array* sb = nullptr) {
  ref::Array want = ref::grouped_mm(a, b, offs, sa, sb);
  std::vector<double> asa;
  ref::Array asb;
  if (sa) {
    asa.resize(sa->size());
    for (size_t i = 0; i < asa.size(); ++i) asa[i] = std::fabs((*sa)[i]);
  }
  if (sb) asb = ref::abs(*sb);
  ref::Array scale = ref::grouped_mm(ref::abs(a), ref::abs(b), offs, sa ? &asa : nullptr, sb ? &asb : nullptr);
  const double k = static_cast<double>(a.sizes.back()), u32 = th::unit_roundoff(kFloat32);
  ref::Array extra(want.sizes);
  for (size_t i = 0; i < extra.v.size(); ++i) extra.v[i] = std::isnan(scale.v[i]) ? 0.0 : (2.0 * k + 4.0) * u32 * scale.v[i];
  return th::expect_close(got, want, th::Tol{th::underflow_atol(out), 2 * th::unit_roundoff(out)}, &extra);
}

// Operand layouts as PyTorch's test parametrises them: row-major, or the transposed view of a
// row-major buffer (column-major last two dims); Strided: every other column.
Tensor make_operand(const ref::Array& v, DType t, Device dev, Layout l) {
  if (l != Layout::Transposed) return th::make_tensor(v, t, dev, l);
  ref::Array tr = v;
  const int64_t d = v.dim(), r = v.sizes[static_cast<size_t>(d - 2)], c = v.sizes[static_cast<size_t>(d - 1)];
  std::swap(tr.sizes[static_cast<size_t>(d - 2)], tr.sizes[static_cast<size_t>(d - 1)]);
  const int64_t batch = v.numel() / std::max<int64_t>(r * c, 1);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        tr.v[static_cast<size_t>(bi * r * c + j * r + i)] = v.v[static_cast<size_t>(bi * r * c + i * c + j)];
  return th::make_tensor(tr, t, dev).transpose(-2, -1);
}

Tensor make_offs(const std::vector<int64_t>& offs, Device dev) {
  ref::Array a({static_cast<int64_t>(offs.size())});
  for (size_t i = 0; i < offs.size(); ++i) a.v[i] = static_cast<double>(offs[i]);
  return th::make_tensor(a, kInt32, dev);
}

std::string offs_str(const std::vector<int64_t>& offs) {
  std::string s = "offs [";
  for (size_t i = 0; i < offs.size(); ++i) s += (i ? "," : "") + std::to_string(offs[i]);
  return s + "]";
}

// NaN-filled out of the op's output shape (row stride padded by 3 to test a foreign stride).
Tensor nan_out(const Shape& shape, DType t, Device dev) {
  Shape padded = shape;
  padded.back() += 3;
  Tensor buf = full(padded, std::nan(""), TensorOptions(t).device(dev));
  return buf.narrow(-1, 0, shape.back());
}

struct GroupCase {
  Shape a, b;
  std::vector<int64_t> offs;  // empty: 3-D x 3-D
};

Shape out_shape(const GroupCase& c) {
  const bool a3 = c.a.size() == 3, b3 = c.b.size() == 3;
  const int64_t m = c.a[c.a.size() - 2], n = c.b.back();
  if (a3 == b3) return {a3 ? c.a[0] : static_cast<int64_t>(c.offs.size()), m, n};
  return {m, n};
}

std::vector<int64_t> even_offs(int64_t groups, int64_t step) {
  std::vector<int64_t> o(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) o[static_cast<size_t>(g)] = (g + 1) * step;
  return o;
}

const std::vector<GroupCase>& group_cases() {
  static const std::vector<GroupCase> v = [] {
    std::vector<GroupCase> r;
    // PyTorch's shapes: m, n, k, G = 16, 32, 64, 4, offs = arange(step, G * step + 1, step).
    r.push_back({{4 * 16, 64}, {4, 64, 32}, even_offs(4, 16)});   // 2d x 3d
    r.push_back({{4, 16, 64}, {64, 4 * 32}, even_offs(4, 32)});   // 3d x 2d
    r.push_back({{16, 4 * 64}, {4 * 64, 32}, even_offs(4, 64)});  // 2d x 2d
    r.push_back({{4, 16, 64}, {4, 64, 32}, {}});                  // 3d x 3d
    // Empty groups (PyTorch's offs[0] = offs[1], and more), offsets short of the extent.
    r.push_back({{64, 64}, {4, 64, 32}, {16, 16, 48, 60}});
    r.push_back({{64, 64}, {4, 64, 32}, {0, 0, 0, 64}});
    r.push_back({{4, 16, 64}, {64, 128}, {0, 64, 64, 100}});
    r.push_back({{16, 256}, {256, 32}, {64, 64, 200, 256}});
    // Odd sizes (padded output rows), k and n not multiples of the vector widths.
    r.push_back({{37, 17}, {5, 17, 33}, {3, 10, 10, 30, 37}});
    r.push_back({{3, 9, 17}, {17, 50}, {7, 20, 50}});
    r.push_back({{9, 65}, {65, 33}, {1, 30, 64}});
    r.push_back({{2, 7, 129}, {2, 129, 3}, {}});
    // MoE decode: 1 token x top-8 over 128 experts (rows in eight distinct groups), 4 tokens.
    {
      std::vector<int64_t> o(128, 0);
      int64_t row = 0;
      for (int64_t g = 0; g < 128; ++g) {
        if (g % 16 == 3 && row < 8) ++row;
        o[static_cast<size_t>(g)] = row;
      }
      r.push_back({{8, 256}, {128, 256, 96}, o});
      std::vector<int64_t> o4(128, 0);
      row = 0;
      for (int64_t g = 0; g < 128; ++g) {
        if (g % 4 == 1 && row < 32) row = std::min<int64_t>(32, row + (g % 3) + 1);
        o4[static_cast<size_t>(g)] = row;
      }
      r.push_back({{32, 128}, {128, 128, 64}, o4});
    }
    // Many rows per group (the tiled path), one row, one group.
    r.push_back({{300, 64}, {3, 64, 48}, {100, 250, 300}});
    r.push_back({{1, 64}, {1, 64, 48}, {1}});
    return r;
  }();
  return v;
}

class GroupedMm : public th::DeviceTest {};

// Every case with both operand majorities (a_row_major x b_row_major, as PyTorch), three dtypes,
// through grouped_mm_out into a NaN-filled out (unwritten rows must stay NaN) and, when the
// groups cover the extent, through grouped_mm.
TEST_P(GroupedMm, Table) {
  th::CaseLoop loop;
  th::Gen g(6000);
  int ci = 0;
  for (const GroupCase& c : group_cases()) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      for (int major = 0; major < 4; ++major) {
        ++ci;
        const Layout la = major & 1 ? Layout::Transposed : Layout::Contiguous;
        const Layout lb = major & 2 ? Layout::Transposed : (ci % 5 == 0 ? Layout::Strided : Layout::Contiguous);
        const std::string name = "a " + ref::shape_to_string(c.a) + " " + th::layout_name(la) + " x b " +
                                 ref::shape_to_string(c.b) + " " + th::layout_name(lb) + " " + offs_str(c.offs) + " " +
                                 th::dtype_str(t) + " on " + dev().str();
        if (!loop.run(name, [&] {
          ref::Array av = th::random_array(c.a, t, g, -1, 1), bv = th::random_array(c.b, t, g, -1, 1);
          Tensor a = make_operand(av, t, dev(), la), b = make_operand(bv, t, dev(), lb);
          Tensor offs = c.offs.empty() ? Tensor() : make_offs(c.offs, dev());
          const auto a_before = th::storage_bits(a), b_before = th::storage_bits(b);
          Tensor out = nan_out(out_shape(c), t, dev());
          grouped_mm_out(out, a, b, offs);
          ASSERT_TRUE(check_grouped(out, av, bv, c.offs, t));
          const bool covers = c.offs.empty() || c.a.size() + c.b.size() == 4 ||
                              c.offs.back() == (c.b.size() == 3 ? c.a[0] : c.b.back());
          if (covers) {
            Tensor y = grouped_mm(a, b, offs);
            ASSERT_TRUE(th::expect_shape(y, out_shape(c), t));
            ASSERT_TRUE(check_grouped(y, av, bv, c.offs, t));
          }
          ASSERT_TRUE(th::storage_unchanged(a, a_before)) << "mat_a";
          ASSERT_TRUE(th::storage_unchanged(b, b_before)) << "mat_b";
        }))
          return;
      }
    }
  }
}

// Small integers: exact float32 sums, so every written element is the exact value rounded once.
TEST_P(GroupedMm, ExactOnSmallIntegers) {
  th::CaseLoop loop;
  th::Gen g(6001);
  for (const GroupCase& c : group_cases()) {
    for (DType t : {kBFloat16, kFloat32}) {
      if (!loop.run("exact a " + ref::shape_to_string(c.a) + " x b " + ref::shape_to_string(c.b) + " " +
                        offs_str(c.offs) + " " + th::dtype_str(t),
                    [&] {
        ref::Array av = th::random_array(c.a, kInt32, g, -3, 3), bv = th::random_array(c.b, kInt32, g, -3, 3);
        Tensor out = nan_out(out_shape(c), t, dev());
        grouped_mm_out(out, th::make_tensor(av, t, dev()), make_operand(bv, t, dev(), Layout::Transposed),
                       c.offs.empty() ? Tensor() : make_offs(c.offs, dev()));
        ref::Array want = ref::grouped_mm(av, bv, c.offs);
        for (double& v : want.v) v = std::isnan(v) ? v : th::round_to_dtype(v, t);
        ASSERT_TRUE(th::expect_equal(out, want));
      }))
        return;
    }
  }
}

// PyTorch pads the output's row stride to 16 bytes (bf16 n = 33 -> 40); the values agree.
TEST_P(GroupedMm, OutputRowStrideIsPadded) {
  th::Gen g(6002);
  for (const auto& [t, n, stride] : {std::tuple{kBFloat16, 33, 40}, std::tuple{kFloat32, 33, 36},
                                     std::tuple{kFloat16, 32, 32}, std::tuple{kFloat32, 1, 4}}) {
    SCOPED_TRACE(th::dtype_str(t) + " n " + std::to_string(n));
    ref::Array av = th::random_array({8, 16}, t, g, -1, 1), bv = th::random_array({2, 16, n}, t, g, -1, 1);
    Tensor y = grouped_mm(th::make_tensor(av, t, dev()), th::make_tensor(bv, t, dev()), make_offs({3, 8}, dev()));
    EXPECT_EQ(y.stride(0), stride);
    EXPECT_EQ(y.stride(1), 1);
    EXPECT_TRUE(check_grouped(y, av, bv, {3, 8}, t));
    Tensor z = grouped_mm(th::make_tensor(av, t, dev()), th::make_tensor(bv.sizes[0] ? ref::Array({16, n}, 1.0) : bv, t, dev()),
                          make_offs({4, 16}, dev()));
    EXPECT_EQ(z.stride(1), stride);
    EXPECT_EQ(z.stride(0), 8 * stride);
  }
}

// Offsets past the extent are clamped (never read out of bounds); decreasing offsets give
// unspecified values but no crash (checked under the sanitizers and compute-sanitizer).
TEST_P(GroupedMm, OffsetsOutOfRangeAreClamped) {
  th::Gen g(6003);
  ref::Array av = th::random_array({10, 16}, kFloat32, g, -1, 1), bv = th::random_array({3, 16, 8}, kFloat32, g, -1, 1);
  Tensor a = th::make_tensor(av, kFloat32, dev()), b = th::make_tensor(bv, kFloat32, dev());
  Tensor out = nan_out({10, 8}, kFloat32, dev());
  grouped_mm_out(out, a, b, make_offs({-5, 4, 1000}, dev()));
  EXPECT_TRUE(check_grouped(out, av, bv, {0, 4, 10}, kFloat32));
  Tensor scratch = nan_out({10, 8}, kFloat32, dev());
  grouped_mm_out(scratch, a, b, make_offs({8, 2, 6}, dev()));
  (void)th::to_array(scratch);
  ref::Array a2 = th::random_array({16, 40}, kFloat32, g, -1, 1), b2 = th::random_array({40, 8}, kFloat32, g, -1, 1);
  Tensor k_out = grouped_mm(th::make_tensor(a2, kFloat32, dev()), th::make_tensor(b2, kFloat32, dev()),
                            make_offs({30, 10, 99}, dev()));
  (void)th::to_array(k_out);
}

TEST_P(GroupedMm, ZeroSizes) {
  const TensorOptions f = TensorOptions(kBFloat16).device(dev());
  EXPECT_TRUE(th::expect_shape(grouped_mm(zeros({0, 16}, f), zeros({4, 16, 8}, f), make_offs({0, 0, 0, 0}, dev())),
                               {0, 8}, kBFloat16));
  EXPECT_TRUE(th::expect_equal(grouped_mm(zeros({5, 0}, f), zeros({2, 0, 3}, f), make_offs({2, 5}, dev())),
                               ref::Array({5, 3}, 0.0)));
  EXPECT_TRUE(th::expect_shape(grouped_mm(zeros({2, 3, 4}, f), zeros({2, 4, 0}, f)), {2, 3, 0}, kBFloat16));
}

TEST_P(GroupedMm, Errors) {
  const TensorOptions f = TensorOptions(kBFloat16).device(dev());
  Tensor a2 = zeros({8, 16}, f), b3 = zeros({4, 16, 32}, f), offs = make_offs({2, 4, 6, 8}, dev());
  EXPECT_THROWS_OP(DTypeError, "grouped_mm", grouped_mm(a2.to(kInt32), b3.to(kInt32), offs));
  EXPECT_THROWS_OP(DTypeError, "grouped_mm", grouped_mm(a2.to(kFloat64), b3.to(kFloat64), offs));
  EXPECT_THROWS_OP(DTypeError, "grouped_mm", grouped_mm(a2, b3.to(kFloat32), offs));
  EXPECT_THROWS_OP(DTypeError, "grouped_mm", grouped_mm(a2, b3, offs, kFloat32));
  EXPECT_THROWS_OP(ShapeError, "grouped_mm", grouped_mm(zeros({16}, f), b3, offs));
  EXPECT_THROWS_OP(ShapeError, "grouped_mm", grouped_mm(a2, zeros({1, 4, 16, 32}, f), offs));
  EXPECT_THROWS_OP(ShapeError, "grouped_mm", grouped_mm(zeros({8, 15}, f), b3, offs));
  EXPECT_THROWS_OP(Error, "grouped_mm", grouped_mm(a2, b3));
  EXPECT_THROWS_OP(Error, "grouped_mm", grouped_mm(zeros({4, 8, 16}, f), b3, offs));
  EXPECT_THROWS_OP(ShapeError, "grouped_mm", grouped_mm(a2, b3, make_offs({2, 4, 8}, dev())));
  EXPECT_THROWS_OP(ShapeError, "grouped_mm", grouped_mm(a2, b3, offs.reshape({2, 2})));
  EXPECT_THROWS_OP(DTypeError, "grouped_mm", grouped_mm(a2, b3, offs.to(kInt64)));
  EXPECT_THROWS_OP(ShapeError, "grouped_mm", grouped_mm(zeros({4, 8, 16}, f), zeros({3, 16, 32}, f)));
  EXPECT_THROWS_OP(Error, "grouped_mm", grouped_mm(Tensor(), b3, offs));
  Tensor out = zeros({8, 32}, f);
  EXPECT_THROWS_OP(ShapeError, "grouped_mm_out", grouped_mm_out(out, a2, zeros({4, 16, 31}, f), offs));
  Tensor out_t = zeros({32, 8}, f).t();
  EXPECT_THROWS_OP(ShapeError, "grouped_mm_out", grouped_mm_out(out_t, a2, b3, offs));
  Tensor out_f = zeros({8, 32}, TensorOptions(kFloat32).device(dev()));
  EXPECT_THROWS_OP(DTypeError, "grouped_mm_out", grouped_mm_out(out_f, a2, b3, offs));
  const TensorOptions f8 = TensorOptions(kFloat8_e4m3fn).device(dev()), f32 = TensorOptions(kFloat32).device(dev());
  Tensor sa = ones({8}, f32), sb = ones({4, 32}, f32);
  EXPECT_THROWS_OP(DTypeError, "scaled_grouped_mm", scaled_grouped_mm(a2.to(kFloat8_e4m3fn), b3, sa, sb, offs));
  EXPECT_THROWS_OP(Error, "scaled_grouped_mm", scaled_grouped_mm(zeros({8, 16}, f8), zeros({4, 16, 32}, f8), Tensor(), sb, offs));
  EXPECT_THROWS_OP(Error, "scaled_grouped_mm", scaled_grouped_mm(a2, zeros({4, 16, 32}, f8), sa, sb, offs));
  EXPECT_THROWS_OP(ShapeError, "scaled_grouped_mm", scaled_grouped_mm(a2, zeros({4, 16, 32}, f8), Tensor(), ones({4, 31}, f32), offs));
  EXPECT_THROWS_OP(ShapeError, "scaled_grouped_mm", scaled_grouped_mm(zeros({8, 16}, f8), zeros({4, 16, 32}, f8), ones({7}, f32), sb, offs));
  EXPECT_THROWS_OP(ShapeError, "scaled_grouped_mm", scaled_grouped_mm(zeros({4, 8, 16}, f8), zeros({4, 16, 32}, f8), sa, sb, offs));
  EXPECT_THROWS_OP(DTypeError, "scaled_grouped_mm", scaled_grouped_mm(a2, zeros({4, 16, 32}, f8), Tensor(), sb.to(kBFloat16), offs));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "grouped_mm", grouped_mm(a2, b3, make_offs({2, 4, 6, 8}, kCPU)));
    EXPECT_THROWS_OP(DeviceError, "grouped_mm", grouped_mm(a2, zeros({4, 16, 32}, kBFloat16), offs));
  }
}

// FP8 experts: float8 activations with row scales, or bfloat16 activations (weight-only).
TEST_P(GroupedMm, ScaledGroupedTable) {
  th::CaseLoop loop;
  th::Gen g(6004);
  for (const GroupCase& c : group_cases()) {
    if (c.a.size() != 2 || c.b.size() != 3) continue;
    for (DType ta : {kFloat8_e4m3fn, kBFloat16, kFloat16}) {
      for (DType tb : {kFloat8_e4m3fn, kFloat8_e5m2}) {
        for (DType out : {kBFloat16, kFloat32}) {
          if (!loop.run("scaled a " + ref::shape_to_string(c.a) + " " + th::dtype_str(ta) + " x b " +
                            ref::shape_to_string(c.b) + " " + th::dtype_str(tb) + " " + offs_str(c.offs) + " -> " +
                            th::dtype_str(out),
                        [&] {
            const int64_t m = c.a[0], groups = c.b[0], n = c.b[2];
            ref::Array av = th::random_array(c.a, ta, g, -4, 4), bv = th::random_array(c.b, tb, g, -6, 6);
            Tensor a = th::make_tensor(av, ta, dev()), b = make_operand(bv, tb, dev(), Layout::Transposed);
            th::Input sb = th::make_input({groups, n}, kFloat32, dev(), Layout::Contiguous, g, 1.0 / 256, 2.0);
            th::Input sa;
            if (is_float8(ta)) sa = th::make_input({m}, kFloat32, dev(), Layout::Contiguous, g, 1.0 / 256, 2.0);
            Tensor y = scaled_grouped_mm(a, b, sa.t, sb.t, make_offs(c.offs, dev()), out);
            ASSERT_TRUE(th::expect_shape(y, {m, n}, out));
            if (c.offs.back() < m) y = y.narrow(0, 0, c.offs.back());
            ref::Array want_rows = av;
            want_rows.sizes[0] = c.offs.back();
            want_rows.v.resize(static_cast<size_t>(c.offs.back() * c.a[1]));
            ASSERT_TRUE(check_grouped(y, want_rows, bv, c.offs, out, sa.t.defined() ? &sa.a.v : nullptr, &sb.a));
          }))
            return;
        }
      }
    }
  }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(GroupedMm);

// ---- CUDA graph ------------------------------------------------------------------------------
// grouped_mm_out captured once; new activations, weights and offsets (read on the device)
// copied in before each replay; the replay equals an eager call bit for bit.
TEST(GroupedMmGraph, ReplaysNewOffsets) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  th::Gen gen(6005);
  for (int64_t m : {8, 256}) {
    SCOPED_TRACE("m " + std::to_string(m));
    const int64_t groups = 16, k = 128, n = 64;
    auto offs_for = [&](int round) {
      std::vector<int64_t> o(static_cast<size_t>(groups));
      for (int64_t g2 = 0; g2 < groups; ++g2) o[static_cast<size_t>(g2)] = std::min<int64_t>(m, (g2 + round) * m / groups);
      o.back() = m - round;  // the last rows unwritten from round 1
      for (size_t i = 1; i < o.size(); ++i) o[i] = std::max(o[i], o[i - 1]);
      return o;
    };
    Tensor a = th::make_input({m, k}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t;
    Tensor b = th::make_input({groups, n, k}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1).t.transpose(1, 2);
    Tensor offs = make_offs(offs_for(0), dev);
    Tensor out = zeros({m, n}, TensorOptions(kBFloat16).device(dev));
    grouped_mm_out(out, a, b, offs);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    grouped_mm_out(out, a, b, offs);
    graph.capture_end();
    for (int round = 1; round < 3; ++round) {
      const std::vector<int64_t> o = offs_for(round);
      th::Input na = th::make_input({m, k}, kBFloat16, dev, Layout::Contiguous, gen, -1, 1);
      ref::Array wv = th::random_array({groups, n, k}, kBFloat16, gen, -1, 1);
      a.copy_(na.t);
      b.copy_(th::make_tensor(wv, kBFloat16, dev).transpose(1, 2));
      offs.copy_(make_offs(o, dev));
      out.fill_(std::nan(""));
      graph.replay();
      s.synchronize();
      Tensor eager = nan_out({m, n}, kBFloat16, dev);
      grouped_mm_out(eager, a, b, offs);
      s.synchronize();
      EXPECT_EQ(th::to_bits(out), th::to_bits(eager)) << "round " << round;
      ref::Array bt({groups, k, n});
      for (int64_t g2 = 0; g2 < groups; ++g2)
        for (int64_t q = 0; q < k; ++q)
          for (int64_t j = 0; j < n; ++j) bt.at({g2, q, j}) = wv.at({g2, j, q});
      EXPECT_TRUE(check_grouped(out, na.a, bt, o, kBFloat16)) << "round " << round;
    }
    graph.reset();
  }
}

}  // namespace
