// Tensor: metadata, views sharing storage, copies, item, factories, RNG, from_blob, cat /
// stack and printing.
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

ref::Array iota(const Shape& s, double start = 0.0) {
  ref::Array a(s);
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] = start + static_cast<double>(i);
  return a;
}

// Reference permutation of an array: out[idx] = a[idx permuted back].
ref::Array permute_ref(const ref::Array& a, const Shape& perm) {
  Shape s;
  for (int64_t p : perm) s.push_back(a.sizes[static_cast<size_t>(p)]);
  ref::Array out(s);
  int64_t k = 0;
  ref::for_each_index(s, [&](const Shape& idx) {
    Shape src(a.sizes.size());
    for (size_t d = 0; d < perm.size(); ++d) src[static_cast<size_t>(perm[d])] = idx[d];
    out.v[static_cast<size_t>(k++)] = a.at(src);
  });
  return out;
}

class TensorTest : public th::DeviceTest {};

TEST_P(TensorTest, MetadataOfContiguousTensor) {
  Tensor x = empty({2, 3, 4}, TensorOptions(kFloat16).device(dev()));
  EXPECT_TRUE(x.defined());
  EXPECT_EQ(x.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.stride(0), 12);
  EXPECT_EQ(x.element_size(), 2u);
  EXPECT_EQ(x.nbytes(), 48u);
  EXPECT_EQ(x.dtype(), kFloat16);
  EXPECT_EQ(x.device(), dev());
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.storage_offset(), 0);
  EXPECT_EQ(x.is_cuda(), dev().is_cuda());
  EXPECT_FALSE(Tensor().defined());
  Tensor s = empty({}, TensorOptions(kInt32).device(dev()));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_THROWS_OP(IndexError, "size", x.size(3));
}

TEST_P(TensorTest, ViewsShareStorage) {
  Tensor x = th::make_tensor(iota({4, 6}), kFloat32, dev());
  Tensor v = x.view({2, 12});
  EXPECT_EQ(v.storage(), x.storage());
  Tensor s = x.slice(1, 1, 5, 2);  // columns 1 and 3
  EXPECT_EQ(s.storage(), x.storage());
  EXPECT_EQ(s.sizes(), (Shape{4, 2}));
  EXPECT_EQ(s.strides(), (Shape{6, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  s.fill_(-1.0);
  ref::Array want = iota({4, 6});
  for (int64_t r = 0; r < 4; ++r) {
    want.v[static_cast<size_t>(r * 6 + 1)] = -1;
    want.v[static_cast<size_t>(r * 6 + 3)] = -1;
  }
  EXPECT_TRUE(th::expect_equal(x, want));
  // A write through a transposed view shows in the original.
  Tensor t = x.t();
  EXPECT_EQ(t.storage(), x.storage());
  t.select(0, 5).fill_(100.0);  // column 5 of x
  for (int64_t r = 0; r < 4; ++r) want.v[static_cast<size_t>(r * 6 + 5)] = 100;
  EXPECT_TRUE(th::expect_equal(x, want));
  // select / narrow / expand / unsqueeze / squeeze / permute / flatten / as_strided share too.
  for (const Tensor& w : {x.select(1, 2), x.narrow(0, 1, 2), x.unsqueeze(0), x.unsqueeze(0).squeeze(0), x.permute({1, 0}),
                          x.flatten(), x.as_strided({2, 2}, {1, 6}, 3), x[1]}) {
    EXPECT_EQ(w.storage(), x.storage());
  }
}

TEST_P(TensorTest, StridesOfViewOps) {
  Tensor x = zeros({2, 3, 4}, TensorOptions(kInt32).device(dev()));
  EXPECT_EQ(x.transpose(0, 2).strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(x.transpose(0, 2).sizes(), (Shape{4, 3, 2}));
  EXPECT_EQ(x.permute({2, 0, 1}).strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(x.permute({-1, 0, 1}).sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(x.select(1, -1).sizes(), (Shape{2, 4}));
  EXPECT_EQ(x.select(1, -1).storage_offset(), 8);
  EXPECT_EQ(x.narrow(2, 1, 2).storage_offset(), 1);
  EXPECT_EQ(x.narrow(2, 1, 2).strides(), (Shape{12, 4, 1}));
  EXPECT_FALSE(x.narrow(2, 1, 2).is_contiguous());
  EXPECT_EQ(x.slice(2, std::nullopt, std::nullopt, 3).sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(x.slice(2, std::nullopt, std::nullopt, 3).strides(), (Shape{12, 4, 3}));
  EXPECT_EQ(x.slice(0, -1).sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(x.slice(2, 1, 100).sizes(), (Shape{2, 3, 3}));  // end clamps
  EXPECT_EQ(x.slice(2, 3, 1).sizes(), (Shape{2, 3, 0}));    // empty
  Tensor u = x.unsqueeze(1);
  EXPECT_EQ(u.sizes(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(u.stride(0), 12);
  EXPECT_EQ(u.stride(2), 4);
  EXPECT_EQ(x.unsqueeze(-1).sizes(), (Shape{2, 3, 4, 1}));
  Tensor e = zeros({3, 1}, TensorOptions(kFloat32).device(dev())).expand({2, 3, 5});
  EXPECT_EQ(e.sizes(), (Shape{2, 3, 5}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(zeros({3, 1}).expand({-1, 4}).sizes(), (Shape{3, 4}));
  Tensor q = zeros({1, 3, 1, 2}, TensorOptions(kFloat32).device(dev()));
  EXPECT_EQ(q.squeeze().sizes(), (Shape{3, 2}));
  EXPECT_EQ(q.squeeze(2).sizes(), (Shape{1, 3, 2}));
  EXPECT_EQ(q.squeeze(1).sizes(), (Shape{1, 3, 1, 2}));  // not size 1: unchanged, as torch
  EXPECT_EQ(x.flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(x.flatten().sizes(), (Shape{24}));
  EXPECT_EQ(x.view({4, -1}).sizes(), (Shape{4, 6}));
  EXPECT_EQ(x.view({-1}).sizes(), (Shape{24}));
  EXPECT_EQ(zeros({0, 4}).view({-1, 2}).sizes(), (Shape{0, 2}));
  // 0-dim tensors view as [1], [1, 1] and back (torch.tensor(5.).view(1)).
  Tensor s = full({}, 2.5, TensorOptions(kFloat32).device(dev()));
  EXPECT_EQ(s.view({1}).sizes(), (Shape{1}));
  EXPECT_EQ(s.view({1, 1}).sizes(), (Shape{1, 1}));
  EXPECT_EQ(s.view({-1}).sizes(), (Shape{1}));
  EXPECT_EQ(s.reshape({1}).sizes(), (Shape{1}));
  EXPECT_EQ(s.view({1}).view({}).dim(), 0);
  EXPECT_EQ(s.unsqueeze(0).sizes(), (Shape{1}));
  EXPECT_EQ(s.view({1}).item<float>(), 2.5f);
}

TEST_P(TensorTest, ViewOpsGiveRightValues) {
  ref::Array a = iota({3, 4, 5});
  Tensor x = th::make_tensor(a, kFloat64, dev());
  EXPECT_TRUE(th::expect_equal(x.permute({2, 0, 1}), permute_ref(a, {2, 0, 1})));
  EXPECT_TRUE(th::expect_equal(x.transpose(1, 2), permute_ref(a, {0, 2, 1})));
  ref::Array sel({3, 5});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 5; ++k) sel.v[static_cast<size_t>(i * 5 + k)] = a.at({i, 2, k});
  EXPECT_TRUE(th::expect_equal(x.select(1, 2), sel));
  EXPECT_TRUE(th::expect_equal(x.select(1, -2), sel));
  ref::Array sl({3, 4, 2});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 2; ++k) sl.v[static_cast<size_t>((i * 4 + j) * 2 + k)] = a.at({i, j, 1 + 2 * k});
  EXPECT_TRUE(th::expect_equal(x.slice(2, 1, 5, 2), sl));
  ref::Array ex({2, 3, 4, 5});
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 60; ++i) ex.v[static_cast<size_t>(r * 60 + i)] = a.v[static_cast<size_t>(i)];
  EXPECT_TRUE(th::expect_equal(x.expand({2, 3, 4, 5}), ex));
  ref::Array fl = a;
  fl.sizes = {60};
  EXPECT_TRUE(th::expect_equal(x.flatten(), fl));
  ref::Array as({2, 3});
  as.v = {3, 4, 5, 23, 24, 25};  // sizes (2, 3), strides (20, 1), offset 3
  EXPECT_TRUE(th::expect_equal(x.as_strided({2, 3}, {20, 1}, 3), as));
}

TEST_P(TensorTest, ViewOfNonContiguousThrowsAndReshapeCopies) {
  ref::Array a = iota({4, 6});
  Tensor x = th::make_tensor(a, kFloat32, dev());
  Tensor t = x.t();
  EXPECT_THROWS_OP(ShapeError, "view", t.view({24}));
  EXPECT_THROWS_OP(ShapeError, "view", x.slice(1, 0, 4).view({16}));
  // A step-2 slice of rows of 6 merges into one dim of stride 2: a valid view, as torch.
  Tensor merged = x.slice(1, 0, 6, 2).view({12});
  EXPECT_EQ(merged.storage(), x.storage());
  EXPECT_EQ(merged.strides(), (Shape{2}));
  Tensor r = t.reshape({24});
  EXPECT_NE(r.storage(), x.storage());  // had to copy
  ref::Array want = permute_ref(a, {1, 0});
  want.sizes = {24};
  EXPECT_TRUE(th::expect_equal(r, want));
  // Contiguous input: reshape is a view.
  Tensor rv = x.reshape({2, 12});
  EXPECT_EQ(rv.storage(), x.storage());
  // Views that stay valid on non-contiguous inputs: splitting a dim of a transposed tensor.
  Tensor split = t.view({2, 3, 4});
  EXPECT_EQ(split.storage(), x.storage());
  EXPECT_EQ(split.strides(), (Shape{3, 1, 6}));
  EXPECT_THROWS_OP(ShapeError, "view", x.view({5, 5}));
  EXPECT_THROWS_OP(ShapeError, "view", x.view({-1, -1}));
  EXPECT_THROWS_OP(ShapeError, "reshape", x.reshape({7, -1}));
}

TEST_P(TensorTest, CloneAndContiguous) {
  th::CaseLoop loop;
  th::Gen g(5);
  for (Layout l : th::all_layouts()) {
    for (DType t : {kFloat32, kBFloat16, kInt8, kFloat8_e4m3fn, kComplex64, kBool, kUInt64}) {
      th::Input in = th::make_input({7, 33}, t, dev(), l, g, -5, 5);
      if (!loop.run(th::case_name({7, 33}, t, l, dev()), [&] {
        Tensor c = in.t.clone();
        EXPECT_NE(c.storage(), in.t.storage());
        // torch's preserve_format: a dense permutation (the transposed layout) keeps its strides,
        // anything else comes back contiguous.
        if (in.t.is_non_overlapping_and_dense()) EXPECT_EQ(c.strides(), in.t.strides());
        else EXPECT_TRUE(c.is_contiguous());
        EXPECT_TRUE(th::expect_shape(c, {7, 33}, t));
        EXPECT_TRUE(th::expect_equal(c, in.a));
        Tensor k = in.t.contiguous();
        EXPECT_TRUE(k.is_contiguous());
        EXPECT_TRUE(th::expect_equal(k, in.a));
        if (in.t.is_contiguous()) EXPECT_EQ(k.storage(), in.t.storage()) << "contiguous() of a contiguous tensor copies";
        else EXPECT_NE(k.storage(), in.t.storage());
      }))
        return;
    }
  }
}

TEST_P(TensorTest, CopyBroadcastsConvertsAndKeepsGuards) {
  th::CaseLoop loop;
  th::Gen g(6);
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 4}, {4}},       {{3, 4}, {3, 1}}, {{2, 3, 4}, {}},
                                                      {{65537}, {65537}}, {{0, 4}, {4}},   {{7, 33}, {1, 33}}};
  for (const auto& [dst_shape, src_shape] : cases) {
    for (Layout dl : {Layout::Contiguous, Layout::Strided, Layout::Offset}) {
      for (DType src_t : {kFloat32, kInt16}) {
        for (DType dst_t : {kFloat32, kBFloat16, kInt64}) {
          if (!loop.run(th::case_name(dst_shape, dst_t, dl, dev()) + " <- " + ref::shape_to_string(src_shape) + " " +
                       dtype_name(src_t), [&] {
            th::Guarded out = th::make_guarded(dst_shape, dst_t, dev(), dl);
            th::Input src = th::make_input(src_shape, src_t, dev(), Layout::Strided, g, -100, 100);
            Tensor& r = out.view.copy_(src.t);
            EXPECT_EQ(&r, &out.view);
            ref::Array want = ref::broadcast_to(src.a, dst_shape);
            for (double& v : want.v) v = th::round_to_dtype(v, dst_t);
            EXPECT_TRUE(th::expect_equal(out.view, want));
            EXPECT_TRUE(th::guards_intact(out));
          }))
            return;
        }
      }
    }
  }
  Tensor small = zeros({3}, TensorOptions(kFloat32).device(dev()));
  EXPECT_THROWS_OP(ShapeError, "copy_", small.copy_(ones({4}, TensorOptions(kFloat32).device(dev()))));
  EXPECT_THROWS_OP(ShapeError, "copy_", small.copy_(ones({2, 3}, TensorOptions(kFloat32).device(dev()))));
}

// Copies whose source and destination are dense along different dims (memory-format changes,
// full transposes, into an offset view) run as tiles of both dims on each backend: every element
// size, sizes that are no multiple of the 32-element tiles, the other dims strided.
TEST_P(TensorTest, LayoutChangingCopies) {
  th::CaseLoop loop;
  th::Gen g(7);
  for (const Shape& shape : {Shape{2, 37, 9, 41}, Shape{40, 3, 33}, Shape{64, 64}}) {
    for (DType t : {kInt8, kBFloat16, kFloat32, kFloat64}) {
      if (!loop.run(th::case_name(shape, t, Layout::Transposed, dev()), [&] {
        if (shape.size() == 4) {
          th::Input in = th::make_input(shape, t, dev(), Layout::Contiguous, g, -100, 100);
          const Tensor cl = in.t.contiguous(MemoryFormat::ChannelsLast);
          EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
          EXPECT_TRUE(th::expect_equal(cl, in.a));
          EXPECT_TRUE(th::expect_equal(cl.contiguous(), in.a));
        }
        th::Input tr = th::make_input(shape, t, dev(), Layout::Transposed, g, -100, 100);
        EXPECT_TRUE(th::expect_equal(tr.t.contiguous(), tr.a));
        th::Guarded out = th::make_guarded(shape, t, dev(), Layout::Offset);
        out.view.copy_(tr.t);
        EXPECT_TRUE(th::expect_equal(out.view, tr.a));
        EXPECT_TRUE(th::guards_intact(out));
      }))
        return;
    }
  }
}

TEST_P(TensorTest, CopyBetweenDevices) {
  if (!dev().is_cuda()) GTEST_SKIP() << "cross-device copy_: CUDA only";
  th::Gen g(8);
  th::Input host = th::make_input({33, 7}, kFloat32, Device(kCPU), Layout::Transposed, g, -1, 1);
  th::Guarded d = th::make_guarded({33, 7}, kBFloat16, dev(), Layout::Strided);
  d.view.copy_(host.t);
  ref::Array want = host.a;
  for (double& v : want.v) v = th::round_to_dtype(v, kBFloat16);
  EXPECT_TRUE(th::expect_equal(d.view, want));
  EXPECT_TRUE(th::guards_intact(d));
  th::Guarded h = th::make_guarded({33, 7}, kFloat64, Device(kCPU), Layout::Offset);
  h.view.copy_(d.view);
  EXPECT_TRUE(th::expect_equal(h.view, want));
  EXPECT_TRUE(th::guards_intact(h));
}

TEST_P(TensorTest, FillAndZeroKeepGuards) {
  th::CaseLoop loop;
  for (const Shape& s : th::table_shapes()) {
    for (Layout l : {Layout::Contiguous, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kFloat16, kUInt8, kInt64, kFloat8_e4m3fn, kComplex64, kBool}) {
        if (!loop.run(th::case_name(s, t, l, dev()), [&] {
          th::Guarded g = th::make_guarded(s, t, dev(), l);
          g.view.fill_(th::scalar_for(t, 3.0));
          EXPECT_TRUE(th::expect_equal(g.view, ref::Array(s, t == kBool ? 1.0 : 3.0)));
          EXPECT_TRUE(th::guards_intact(g));
          g.view.zero_();
          EXPECT_TRUE(th::expect_equal(g.view, ref::Array(s, 0.0)));
          EXPECT_TRUE(th::guards_intact(g));
        }))
          return;
      }
    }
  }
}

TEST_P(TensorTest, FillRoundsAndSaturatesLikeACast) {
  Tensor e = empty({5}, TensorOptions(kFloat8_e4m3fn).device(dev()));
  e.fill_(1000.0);
  EXPECT_EQ(th::to_bits(e), std::vector<uint64_t>(5, 0x7E));
  e.fill_(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(th::to_bits(e), std::vector<uint64_t>(5, 0xFE));
  Tensor b = empty({3}, TensorOptions(kBFloat16).device(dev()));
  b.fill_(1.00390625);  // tie -> even
  EXPECT_EQ(th::to_bits(b), std::vector<uint64_t>(3, 0x3F80));
  Tensor u = empty({3}, TensorOptions(kUInt64).device(dev()));
  u.fill_(Scalar(uint64_t{18446744073709551615ull}));
  EXPECT_EQ(th::to_bits(u), std::vector<uint64_t>(3, 18446744073709551615ull));
}

TEST_P(TensorTest, ItemOfEveryDType) {
  for (DType t : th::all_dtypes()) {
    SCOPED_TRACE(dtype_name(t));
    double v = t == kBool ? 1.0 : (is_unsigned(t) ? 200.0 : -3.0);
    if (is_floating_point(t) || is_complex(t)) v = -2.5;
    Tensor x = full({1, 1}, th::scalar_for(t, v), TensorOptions(t).device(dev()));
    Scalar s = x.item();
    if (t == kBool) EXPECT_TRUE(s.to_bool());
    else EXPECT_EQ(s.to_double(), v);
    EXPECT_EQ(x.item<double>(), v);
  }
  Tensor f = full({}, 1.5, TensorOptions(kFloat32).device(dev()));
  EXPECT_EQ(f.item<float>(), 1.5f);
  EXPECT_EQ(f.item<int64_t>(), 1);
  Tensor big = full({}, Scalar(uint64_t{18446744073709551615ull}), TensorOptions(kUInt64).device(dev()));
  EXPECT_EQ(big.item<uint64_t>(), 18446744073709551615ull);
  Tensor i = full({}, Scalar(int64_t{-9007199254740993}), TensorOptions(kInt64).device(dev()));
  EXPECT_EQ(i.item<int64_t>(), -9007199254740993);  // not representable in double
  EXPECT_THROWS_OP(ShapeError, "item", zeros({2}, TensorOptions(kFloat32).device(dev())).item<float>());
  EXPECT_THROWS_OP(ShapeError, "item", zeros({0}, TensorOptions(kFloat32).device(dev())).item());
}

TEST_P(TensorTest, FactoriesFillValues) {
  TensorOptions o = TensorOptions(kFloat32).device(dev());
  EXPECT_TRUE(th::expect_equal(zeros({2, 3}, o), ref::Array({2, 3}, 0.0)));
  EXPECT_TRUE(th::expect_equal(ones({70000}, o), ref::Array({70000}, 1.0)));
  EXPECT_TRUE(th::expect_equal(full({3}, 2.5, o.dtype(kFloat16)), ref::Array({3}, 2.5)));
  EXPECT_TRUE(th::expect_shape(full({3}, 2.5, o.dtype(kFloat16)), {3}, kFloat16));
  EXPECT_TRUE(th::expect_shape(zeros({}, o), {}, kFloat32));
  Tensor base = full({2, 2}, 7, o.dtype(kInt32));
  EXPECT_TRUE(th::expect_shape(zeros_like(base), {2, 2}, kInt32));
  EXPECT_TRUE(th::expect_equal(ones_like(base), ref::Array({2, 2}, 1.0)));
  EXPECT_TRUE(th::expect_equal(full_like(base, -4), ref::Array({2, 2}, -4.0)));
  EXPECT_EQ(empty_like(base).device(), dev());
  EXPECT_TRUE(th::expect_equal(scalar_tensor(3.25, o), ref::Array({}, 3.25)));
  Tensor es = empty_strided({2, 3}, {1, 2}, o);
  EXPECT_EQ(es.strides(), (Shape{1, 2}));
  EXPECT_THROWS_OP(ShapeError, "empty", empty({2, -1}, o));
}

TEST_P(TensorTest, ArangeAndLinspace) {
  Tensor a = arange(5, TensorOptions(kInt64).device(dev()));
  EXPECT_TRUE(th::expect_shape(a, {5}, kInt64));
  EXPECT_TRUE(th::expect_equal(a, iota({5})));
  EXPECT_EQ(arange(5).dtype(), kInt64);     // all-integer arguments: int64
  EXPECT_EQ(arange(0.0, 5).dtype(), kFloat32);
  ref::Array s({3});
  s.v = {1, 4, 7};
  EXPECT_TRUE(th::expect_equal(arange(1, 10, 3, TensorOptions(kInt32).device(dev())), s));
  ref::Array down({4});
  down.v = {10, 7, 4, 1};
  EXPECT_TRUE(th::expect_equal(arange(10, 0, -3), down));
  Tensor f = arange(0.0, 1.0, 0.1, TensorOptions(kFloat64).device(dev()));
  ASSERT_EQ(f.numel(), 10);
  ref::Array fw({10});
  for (int i = 0; i < 10; ++i) fw.v[static_cast<size_t>(i)] = 0.1 * i;
  EXPECT_TRUE(th::expect_close(f, fw, th::Tol{4 * th::unit_roundoff(kFloat64), 0}));
  EXPECT_EQ(arange(65537, TensorOptions(kFloat32).device(dev())).numel(), 65537);
  EXPECT_TRUE(th::expect_equal(arange(70000, TensorOptions(kFloat32).device(dev())), iota({70000})));
  EXPECT_THROWS_OP(ShapeError, "arange", arange(0, 10, 0));
  EXPECT_THROWS_OP(ShapeError, "arange", arange(10, 0, 1));

  ref::Array l({5});
  l.v = {0, 0.25, 0.5, 0.75, 1};
  EXPECT_TRUE(th::expect_equal(linspace(0, 1, 5, TensorOptions(kFloat32).device(dev())), l));
  ref::Array one({1});
  one.v = {-1};
  EXPECT_TRUE(th::expect_equal(linspace(-1, 1, 1, TensorOptions(kFloat32).device(dev())), one));
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  Tensor lin = linspace(-3, 7, 1001, TensorOptions(kFloat64).device(dev()));
  ref::Array lw({1001});
  for (int i = 0; i <= 1000; ++i) lw.v[static_cast<size_t>(i)] = -3.0 + 10.0 * i / 1000.0;
  EXPECT_TRUE(th::expect_close(lin, lw, th::Tol{32 * th::unit_roundoff(kFloat64), 0}));
  EXPECT_EQ(th::to_array(lin).v.back(), 7.0);  // the end point is exact, as torch
  EXPECT_THROWS_OP(ShapeError, "linspace", linspace(0, 1, -1));
}

TEST_P(TensorTest, RandomIsSeededAndInRange) {
  TensorOptions o = TensorOptions(kFloat32).device(dev());
  manual_seed(42);
  ref::Array r1 = th::to_array(rand({70000}, o));
  ref::Array n1 = th::to_array(randn({70001}, o));
  ref::Array i1 = th::to_array(randint(-3, 5, {1000}, TensorOptions(kInt64).device(dev())));
  manual_seed(42);
  ref::Array r2 = th::to_array(rand({70000}, o));
  ref::Array n2 = th::to_array(randn({70001}, o));
  ref::Array i2 = th::to_array(randint(-3, 5, {1000}, TensorOptions(kInt64).device(dev())));
  EXPECT_EQ(r1.v, r2.v);
  EXPECT_EQ(n1.v, n2.v);
  EXPECT_EQ(i1.v, i2.v);
  ref::Array r3 = th::to_array(rand({70000}, o));  // the offset advanced: new numbers
  EXPECT_NE(r1.v, r3.v);
  manual_seed(43);
  EXPECT_NE(th::to_array(rand({70000}, o)).v, r1.v);

  double sum = 0, sumsq = 0;
  for (double v : r1.v) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
  }
  // Moments of a seeded draw: mean 1/2 +- 5 sigma (sigma = sqrt(1/12 / n)).
  EXPECT_NEAR(sum / 70000, 0.5, 5 * std::sqrt(1.0 / 12 / 70000));
  sum = 0;
  for (double v : n1.v) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sumsq += v * v;
  }
  EXPECT_NEAR(sum / 70001, 0.0, 5 / std::sqrt(70001.0));
  EXPECT_NEAR(sumsq / 70001, 1.0, 5 * std::sqrt(2.0 / 70001));
  std::set<double> seen(i1.v.begin(), i1.v.end());
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(*seen.begin(), -3.0);
  EXPECT_EQ(*seen.rbegin(), 4.0);
  // Low-precision draws never round up to 1.
  for (DType t : {kBFloat16, kFloat16, kFloat8_e4m3fn, kFloat64}) {
    ref::Array r = th::to_array(rand({65537}, TensorOptions(t).device(dev())));
    for (double v : r.v) ASSERT_TRUE(v >= 0.0 && v < 1.0) << dtype_name(t) << " " << v;
  }
  EXPECT_THROWS_OP(DTypeError, "rand", rand({2}, TensorOptions(kInt32)));
  EXPECT_THROWS_OP(ShapeError, "randint", randint(5, 5, {2}));
}

TEST(TensorRandom, SameNumbersOnCpuAndCuda) {
  ANVIL_REQUIRE_CUDA();
  for (int kind = 0; kind < 3; ++kind) {
    manual_seed(7);
    Tensor c = kind == 0 ? rand({65537}) : kind == 1 ? randn({65537}) : randint(0, 1000, {65537});
    manual_seed(7);
    Device g(kCUDA, 0);
    Tensor d = kind == 0 ? rand({65537}, TensorOptions(kFloat32).device(g))
               : kind == 1 ? randn({65537}, TensorOptions(kFloat32).device(g))
                           : randint(0, 1000, {65537}, TensorOptions(kInt64).device(g));
    EXPECT_EQ(th::to_bits(c), th::to_bits(d)) << "kind " << kind;
  }
}

TEST(TensorFromBlob, BorrowsMemoryAndCallsDeleter) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  {
    Tensor x = from_blob(buf.data(), {2, 3}, kFloat32, [&](void* p) {
      EXPECT_EQ(p, buf.data());
      ++deleted;
    });
    EXPECT_EQ(x.data_ptr(), buf.data());
    buf[4] = 50;
    ref::Array want({2, 3});
    want.v = {1, 2, 3, 4, 50, 6};
    EXPECT_TRUE(th::expect_equal(x, want));
    Tensor v = x.t();
    x = Tensor();
    EXPECT_EQ(deleted, 0) << "a view still holds the storage";
    v.select(0, 0).fill_(-1.0);  // writes into buf
    EXPECT_EQ(buf[0], -1.0f);
    EXPECT_EQ(buf[3], -1.0f);
  }
  EXPECT_EQ(deleted, 1);
  // Strided from_blob: every other element.
  std::vector<int32_t> ib = {0, 10, 1, 11, 2, 12};
  Tensor s = from_blob(ib.data(), {3}, {2}, kInt32);
  ref::Array w({3});
  w.v = {0, 1, 2};
  EXPECT_TRUE(th::expect_equal(s, w));
  EXPECT_EQ(s.stride(0), 2);
  // tensor<T>() copies.
  std::vector<int16_t> src = {5, -6, 7};
  Tensor c = tensor(src);
  src[0] = 0;
  EXPECT_TRUE(th::expect_shape(c, {3}, kInt16));
  EXPECT_EQ(c.data_ptr<int16_t>()[0], 5);
}

TEST_P(TensorTest, CatAndStack) {
  th::Gen g(9);
  for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Offset}) {
    th::Input a = th::make_input({2, 3, 4}, kFloat32, dev(), l, g, -5, 5);
    th::Input b = th::make_input({2, 5, 4}, kFloat32, dev(), Layout::Strided, g, -5, 5);
    th::Input c = th::make_input({2, 0, 4}, kFloat32, dev(), l, g, -5, 5);
    Tensor r = cat({a.t, b.t, c.t}, 1);
    ASSERT_TRUE(th::expect_shape(r, {2, 8, 4}, kFloat32));
    ref::Array want({2, 8, 4});
    ref::for_each_index(want.sizes, [&](const Shape& idx) {
      want.at(idx) = idx[1] < 3 ? a.a.at({idx[0], idx[1], idx[2]}) : b.a.at({idx[0], idx[1] - 3, idx[2]});
    });
    EXPECT_TRUE(th::expect_equal(r, want));
    EXPECT_TRUE(th::expect_equal(cat({a.t, b.t}, -2), want));
    Tensor s = stack({a.t, a.t.clone()}, 1);
    ASSERT_TRUE(th::expect_shape(s, {2, 2, 3, 4}, kFloat32));
    ref::Array sw({2, 2, 3, 4});
    ref::for_each_index(sw.sizes, [&](const Shape& idx) { sw.at(idx) = a.a.at({idx[0], idx[2], idx[3]}); });
    EXPECT_TRUE(th::expect_equal(s, sw));
    Tensor s_last = stack({a.t, a.t}, -1);
    EXPECT_EQ(s_last.sizes(), (Shape{2, 3, 4, 2}));
  }
  // cat along dim 0 of long 1-D inputs with odd sizes, and dtype promotion as torch.cat.
  th::Input x = th::make_input({65537}, kInt32, dev(), Layout::Contiguous, g, -100, 100);
  th::Input y = th::make_input({7}, kFloat16, dev(), Layout::Strided, g, -100, 100);
  Tensor xy = cat({x.t, y.t});
  ASSERT_TRUE(th::expect_shape(xy, {65544}, kFloat16));
  ref::Array want({65544});
  for (int64_t i = 0; i < 65537; ++i) want.v[static_cast<size_t>(i)] = th::round_to_dtype(x.a.v[static_cast<size_t>(i)], kFloat16);
  for (int64_t i = 0; i < 7; ++i) want.v[static_cast<size_t>(65537 + i)] = y.a.v[static_cast<size_t>(i)];
  EXPECT_TRUE(th::expect_equal(xy, want));
  // float8 is a storage dtype: cat works on it.
  Tensor f8 = cat({full({3}, 1.5, TensorOptions(kFloat8_e4m3fn).device(dev())), full({2}, -448, TensorOptions(kFloat8_e4m3fn).device(dev()))});
  EXPECT_EQ(th::to_bits(f8), (std::vector<uint64_t>{0x3C, 0x3C, 0x3C, 0xFE, 0xFE}));
  EXPECT_THROWS_OP(ShapeError, "cat", cat({}));
  EXPECT_THROWS_OP(ShapeError, "cat", cat({zeros({}, TensorOptions(kFloat32).device(dev()))}));
  EXPECT_THROWS_OP(ShapeError, "cat", cat({zeros({2, 3}, TensorOptions(kFloat32).device(dev())), zeros({3, 3}, TensorOptions(kFloat32).device(dev()))}, 1));
  EXPECT_THROWS_OP(ShapeError, "stack", stack({zeros({2}, TensorOptions(kFloat32).device(dev())), zeros({3}, TensorOptions(kFloat32).device(dev()))}));
}

TEST(TensorPrint, LikeTorchRepr) {
  auto f = [](std::vector<float> v, Shape s) { return tensor(v, s); };
  EXPECT_EQ(f({1, 2, 3}, {3}).str(), "tensor([1., 2., 3.])");
  EXPECT_EQ(tensor(std::vector<int64_t>{1, 2, 3}).str(), "tensor([1, 2, 3])");
  EXPECT_EQ(tensor(std::vector<int32_t>{1, -2}).str(), "tensor([ 1, -2], dtype=torch.int32)");
  EXPECT_EQ(f({1.5, 2, 3, 4}, Shape{2, 2}).str(), "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])");
  Tensor b = zeros({2}, TensorOptions(kBool));
  b.select(0, 0).fill_(true);
  EXPECT_EQ(b.str(), "tensor([ True, False])");
  EXPECT_EQ(zeros({0}).str(), "tensor([])");
  EXPECT_EQ(zeros({2, 0}).str(), "tensor([], size=(2, 0))");
  EXPECT_EQ(scalar_tensor(3.5).str(), "tensor(3.5000)");
  EXPECT_EQ(f({1, 2}, {2}).to(kBFloat16).str(), "tensor([1., 2.], dtype=torch.bfloat16)");
  EXPECT_EQ(f({1e-5f, 1.0f}, {2}).str(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(arange(8).view({2, 2, 2}).str(), "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");
  EXPECT_EQ(f({NAN, 1.5f, INFINITY}, {3}).str(), "tensor([   nan, 1.5000,    inf])");
  EXPECT_EQ(f({0.25f}, {1}).to(kFloat64).str(), "tensor([0.2500], dtype=torch.float64)");
  EXPECT_EQ(f({-1.25f, 10.5f}, {2}).str(), "tensor([-1.2500, 10.5000])");
  EXPECT_EQ(arange(1001).str(), "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
  std::ostringstream os;
  os << f({1, 2, 3}, {3});
  EXPECT_EQ(os.str(), "tensor([1., 2., 3.])");
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
}

TEST(TensorPrint, CudaSuffix) {
  ANVIL_REQUIRE_CUDA();
  EXPECT_EQ(ones({2}, TensorOptions(kFloat32).device(Device(kCUDA, 0))).str(), "tensor([1., 1.], device='cuda:0')");
}

ANVIL_INSTANTIATE_DEVICE_TESTS(TensorTest);

}  // namespace
