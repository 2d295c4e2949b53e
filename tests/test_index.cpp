// Indexing ops: index_select, gather, scatter, scatter_add, masked_fill, embedding against the
// float64 reference on every device, including index tensors of every layout and sizes past 2^16.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

// Random indices in [0, n) with the given shape.
ref::Array random_indices(const Shape& s, int64_t n, th::Gen& g) {
  ref::Array a(s);
  for (double& v : a.v) v = static_cast<double>(g.randint(0, n - 1));
  return a;
}

class Index : public th::DeviceTest {};

TEST_P(Index, IndexSelectTable) {
  th::CaseLoop loop;
  th::Gen g(2000);
  struct C {
    Shape x;
    int64_t dim;
    int64_t n_index;
  };
  const std::vector<C> cases = {{{7, 33}, 0, 5},       {{7, 33}, 1, 40},     {{7, 33}, -1, 1},  {{65537}, 0, 70000},
                                {{70000}, 0, 65537},   {{3, 0}, 0, 4},       {{5, 4}, 0, 0},    {{33, 7, 3}, 2, 7},
                                {{33, 7, 3}, 1, 1023}, {{2, 65537}, 1, 33},  {{65536, 2}, 0, 65535}};
  for (const C& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kBFloat16, kInt64, kUInt8, kBool, kFloat8_e4m3fn, kComplex64}) {
        if (t != kFloat32 && ref::numel_of(c.x) > 70000) continue;
        for (DType it : {kInt64, kInt32}) {
          if (!loop.run(th::case_name(c.x, t, l, dev()) + " dim " + std::to_string(c.dim) + " index " + dtype_name(it), [&] {
            th::Input x = th::make_input(c.x, t, dev(), l, g, -50, 50);
            int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.x.size()) : c.dim;
            int64_t size = c.x[static_cast<size_t>(d)];
            ref::Array idx = size == 0 ? ref::Array({0}) : random_indices({c.n_index}, size, g);
            Tensor it_t = th::make_index(idx, dev(), l == Layout::Offset ? Layout::Strided : Layout::Offset, it);
            Tensor y = index_select(x.t, c.dim, it_t);
            ref::Array want = ref::index_select(x.a, c.dim, idx);
            ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
            ASSERT_TRUE(th::expect_equal(y, want));
          }))
            return;
        }
      }
    }
  }
  // A 0-dim index selects like a 1-element index (torch keeps the dim).
  Tensor x = th::make_tensor(ref::Array({5}, 2.0), kFloat32, dev());
  Tensor y = index_select(x, 0, full({}, int64_t{3}, TensorOptions(kInt64).device(dev())));
  EXPECT_EQ(y.sizes(), (Shape{1}));
}

TEST_P(Index, GatherTable) {
  th::CaseLoop loop;
  th::Gen g(2001);
  struct C {
    Shape x, index;
    int64_t dim;
  };
  const std::vector<C> cases = {{{7, 33}, {7, 20}, 1},   {{7, 33}, {3, 33}, 0},     {{7, 33}, {7, 50}, 1},
                                {{33, 7, 3}, {50, 5, 2}, 0}, {{33, 7, 3}, {33, 7, 3}, -1}, {{65537}, {70000}, 0},
                                {{2, 65537}, {2, 65537}, 1}, {{4, 5}, {4, 0}, 1},     {{1}, {1}, 0}};
  for (const C& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kFloat64, kBFloat16, kInt32, kInt8}) {
        if (t != kFloat32 && ref::numel_of(c.x) > 70000) continue;
        if (!loop.run(th::case_name(c.x, t, l, dev()) + " index " + ref::shape_to_string(c.index), [&] {
          th::Input x = th::make_input(c.x, t, dev(), l, g, -50, 50);
          int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.x.size()) : c.dim;
          ref::Array idx = random_indices(c.index, c.x[static_cast<size_t>(d)], g);
          Tensor it = th::make_index(idx, dev(), l == Layout::Offset ? Layout::Transposed : Layout::Offset);
          Tensor y = gather(x.t, c.dim, it);
          ref::Array want = ref::gather(x.a, c.dim, idx);
          ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
          ASSERT_TRUE(th::expect_equal(y, want));
        }))
          return;
      }
    }
  }
}

// Indices for scatter with no duplicate target along `dim` (its result is then deterministic):
// each line of the index takes a prefix of a random permutation of [0, size).
ref::Array unique_indices(const Shape& s, int64_t dim, int64_t size, th::Gen& g) {
  ref::Array a(s);
  Shape lines = s;
  lines[static_cast<size_t>(dim)] = 1;
  ref::for_each_index(lines, [&](const Shape& base) {
    std::vector<int64_t> perm(static_cast<size_t>(size));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = size - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(g.randint(0, i))]);
    Shape idx = base;
    for (int64_t k = 0; k < s[static_cast<size_t>(dim)]; ++k) {
      idx[static_cast<size_t>(dim)] = k;
      a.at(idx) = static_cast<double>(perm[static_cast<size_t>(k)]);
    }
  });
  return a;
}

TEST_P(Index, ScatterTable) {
  th::CaseLoop loop;
  th::Gen g(2002);
  struct C {
    Shape self, index, src;
    int64_t dim;
  };
  const std::vector<C> cases = {{{7, 33}, {7, 20}, {7, 25}, 1},       {{7, 33}, {5, 33}, {6, 40}, 0},
                                {{33, 7, 3}, {20, 5, 2}, {20, 7, 3}, 0}, {{65537}, {65537}, {65537}, 0},
                                {{70000}, {1023}, {1023}, 0},         {{3, 4}, {3, 0}, {3, 4}, 1},
                                {{2, 65537}, {2, 65537}, {2, 65537}, 1}};
  for (const C& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kBFloat16, kInt64, kUInt8}) {
        if (t != kFloat32 && ref::numel_of(c.self) > 70000) continue;
        if (!loop.run(th::case_name(c.self, t, l, dev()) + " index " + ref::shape_to_string(c.index), [&] {
          th::Input self = th::make_input(c.self, t, dev(), l, g, -50, 50);
          th::Input src = th::make_input(c.src, t, dev(), Layout::Strided, g, -50, 50);
          int64_t d = c.dim;
          ref::Array idx = unique_indices(c.index, d, c.self[static_cast<size_t>(d)], g);
          Tensor it = th::make_index(idx, dev(), l == Layout::Transposed ? Layout::Offset : Layout::Transposed);
          Tensor y = scatter(self.t, c.dim, it, src.t);
          ref::Array want = ref::scatter(self.a, c.dim, idx, src.a);
          ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
          ASSERT_TRUE(th::expect_equal(y, want));
          ASSERT_TRUE(th::expect_equal(self.t, self.a)) << "scatter is out of place";
          Tensor yv = scatter(self.t, c.dim, it, th::scalar_for(t, 7.0));
          ASSERT_TRUE(th::expect_equal(yv, ref::scatter_value(self.a, c.dim, idx, 7.0)));
        }))
          return;
      }
    }
  }
}

TEST_P(Index, ScatterAddWithDuplicatesIsExactOnDyadicValues) {
  th::CaseLoop loop;
  th::Gen g(2003);
  struct C {
    Shape self, index;
    int64_t dim;
  };
  const std::vector<C> cases = {{{65537}, {70000}, 0}, {{7}, {65537}, 0},  {{7, 33}, {7, 200}, 1},
                                {{33, 7, 3}, {99, 7, 3}, 0}, {{1}, {1023}, 0}, {{5, 5}, {0, 5}, 0}};
  for (const C& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kFloat64, kBFloat16, kInt32, kInt64}) {
        if (!loop.run(th::case_name(c.self, t, l, dev()) + " index " + ref::shape_to_string(c.index), [&] {
          th::Input self = th::make_dyadic_input(c.self, t, dev(), l, g, 2);
          if (is_integral(t)) self = th::make_input(c.self, t, dev(), l, g, -100, 100);
          th::Input src = is_integral(t) ? th::make_input(c.index, t, dev(), Layout::Strided, g, -100, 100)
                                         : th::make_dyadic_input(c.index, t, dev(), Layout::Strided, g, 2);
          ref::Array idx = random_indices(c.index, c.self[static_cast<size_t>(c.dim)], g);
          Tensor it = th::make_index(idx, dev(), l == Layout::Offset ? Layout::Strided : Layout::Offset);
          Tensor y = scatter_add(self.t, c.dim, it, src.t);
          ref::Array want = ref::scatter_add(self.a, c.dim, idx, src.a);
          // Low-precision self: each addition rounds to the dtype (no wider accumulator in PyTorch's
          // scatter_add), so only float32/64 and integers are exact; bfloat16 gets sum_tol's bound.
          ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
          if (t == kBFloat16) {
            ref::Array abs_w = ref::scatter_add(ref::map(self.a, [](double v) { return std::fabs(v); }), c.dim, idx,
                                                ref::map(src.a, [](double v) { return std::fabs(v); }));
            int64_t n = ref::numel_of(c.index);
            ref::Array tol(abs_w.sizes);
            for (size_t i = 0; i < tol.v.size(); ++i) tol.v[i] = 2.0 * th::unit_roundoff(kBFloat16) * static_cast<double>(n) * abs_w.v[i];
            ASSERT_TRUE(th::expect_close(y, want, th::Tol{}, &tol));
          } else {
            ASSERT_TRUE(th::expect_equal(y, want));
          }
        }))
          return;
      }
    }
  }
}

TEST_P(Index, MaskedFillTable) {
  th::CaseLoop loop;
  th::Gen g(2004);
  struct C {
    Shape x, mask;
  };
  const std::vector<C> cases = {{{7, 33}, {7, 33}}, {{7, 33}, {33}},  {{7, 33}, {7, 1}},   {{65537}, {65537}},
                                {{70000}, {1}},     {{3, 0}, {0}},   {{33, 7, 3}, {7, 1}},
                                {{2, 65537}, {1, 65537}}, {{}, {}}};
  for (const C& c : cases) {
    for (Layout l : th::all_layouts()) {
      for (DType t : {kFloat32, kFloat16, kInt32, kBool, kUInt8, kComplex64}) {
        if (t != kFloat32 && ref::numel_of(c.x) > 70000) continue;
        if (!loop.run(th::case_name(c.x, t, l, dev()) + " mask " + ref::shape_to_string(c.mask), [&] {
          th::Input x = th::make_input(c.x, t, dev(), l, g, -50, 50);
          th::Input m = th::make_input(c.mask, kBool, dev(), l == Layout::Broadcast ? Layout::Contiguous : l, g, 0, 1);
          double value = t == kBool ? 1.0 : -3.0;
          if (is_unsigned(t) && t != kBool) value = 200.0;
          Tensor y = masked_fill(x.t, m.t, th::scalar_for(t, value));
          ref::Array want = ref::masked_fill(x.a, m.a, value);
          ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
          ASSERT_TRUE(th::expect_equal(y, want));
        }))
          return;
      }
    }
  }
  // Out-of-place masked_fill broadcasts self with a larger mask (torch.masked_fill).
  Tensor xs = th::make_tensor(ref::Array({2, 3}, 4.0), kFloat32, dev());
  ref::Array mk({2, 2, 3});
  for (size_t i = 0; i < mk.v.size(); ++i) mk.v[i] = (i % 5 == 0) ? 1.0 : 0.0;
  Tensor yb = masked_fill(xs, th::make_tensor(mk, kBool, dev()), -1.0);
  ref::Array wb({2, 2, 3});
  for (size_t i = 0; i < wb.v.size(); ++i) wb.v[i] = mk.v[i] != 0 ? -1.0 : 4.0;
  EXPECT_TRUE(th::expect_shape(yb, {2, 2, 3}, kFloat32));
  EXPECT_TRUE(th::expect_equal(yb, wb));
  // The fill value converts like a cast: saturating float8 is not involved; bf16 rounds.
  Tensor x = zeros({3}, TensorOptions(kBFloat16).device(dev()));
  Tensor mask = ones({3}, TensorOptions(kBool).device(dev()));
  EXPECT_EQ(th::to_bits(masked_fill(x, mask, 1.00390625)), std::vector<uint64_t>(3, 0x3F80));
}

TEST_P(Index, EmbeddingTable) {
  th::CaseLoop loop;
  th::Gen g(2005);
  struct C {
    Shape weight, indices;
  };
  const std::vector<C> cases = {{{1000, 64}, {3, 7}},  {{100, 3}, {65537}},   {{5, 1}, {0}},
                                {{65537, 2}, {4, 33}}, {{2, 4096}, {2, 2, 2}}, {{7, 33}, {}}};
  for (const C& c : cases) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat8_e4m3fn, kInt64}) {
        for (DType it : {kInt64, kInt32}) {
          if (!loop.run(th::case_name(c.weight, t, l, dev()) + " indices " + ref::shape_to_string(c.indices) + " " + dtype_name(it), [&] {
            th::Input w = th::make_input(c.weight, t, dev(), l, g, -2, 2);
            ref::Array idx = random_indices(c.indices, c.weight[0], g);
            Tensor ix = th::make_index(idx, dev(), l, it);
            Tensor y = embedding(w.t, ix);
            ref::Array want = ref::embedding(w.a, idx);
            ASSERT_TRUE(th::expect_shape(y, want.sizes, t));
            ASSERT_TRUE(th::expect_equal(y, want));
          }))
            return;
        }
      }
    }
  }
}

// A cache hint: every layout, sizes that are not multiples of 16 bytes or of the 64 KiB chunks,
// misaligned views and out-of-range indices run without a fault (the CUDA tests run under
// compute-sanitizer too) and leave every value as it was, on the current stream and on another.
TEST_P(Index, CachePrefetchKeepsValues) {
  th::CaseLoop loop;
  th::Gen g(2006);
  const std::vector<Shape> shapes = {{1}, {7, 33}, {3, 70001}, {9, 128, 129}, {40000, 3}};
  const Stream side = dev().is_cuda() ? Stream::create(dev()) : Stream();
  for (const Shape& s : shapes) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}) {
      for (DType t : {kBFloat16, kFloat8_e4m3fn, kFloat32}) {
        for (DType it : {kInt64, kInt32}) {
          if (!loop.run(th::case_name(s, t, l, dev()) + " index " + dtype_name(it), [&] {
            th::Input x = th::make_input(s, t, dev(), l, g, -3, 3);
            ref::Array idx({5});
            idx.v = {0, static_cast<double>(s[0] - 1), -1, static_cast<double>(s[0]), 0};
            const Tensor ix = th::make_index(idx, dev(), Layout::Contiguous, it);
            cache_prefetch(x.t);
            cache_prefetch(x.t, ix);
            cache_prefetch(x.t, ix.narrow(0, 0, 0));
            if (dev().is_cuda()) {
              Event ready(dev());
              ready.record(current_stream(dev()));
              ready.wait(side);
              StreamGuard guard(side);
              cache_prefetch(x.t.narrow(0, s[0] / 2, s[0] - s[0] / 2), ix);
            }
            synchronize(dev());
            ASSERT_TRUE(th::expect_equal(x.t, x.a));
          }))
            return;
        }
      }
    }
  }
}

TEST_P(Index, CachePrefetchErrors) {
  const Tensor x = zeros({4, 8}, TensorOptions(kBFloat16).device(dev()));
  EXPECT_THROWS_OP(DTypeError, "cache_prefetch", cache_prefetch(x, zeros({2}, TensorOptions(kFloat32).device(dev()))));
  EXPECT_THROWS_OP(ShapeError, "cache_prefetch",
                   cache_prefetch(zeros({}, TensorOptions(kBFloat16).device(dev())),
                                  zeros({1}, TensorOptions(kInt64).device(dev()))));
  EXPECT_THROWS_OP(Error, "cache_prefetch", cache_prefetch(Tensor{}));
  if (dev().is_cuda()) {
    EXPECT_THROWS_OP(DeviceError, "cache_prefetch", cache_prefetch(x, zeros({2}, TensorOptions(kInt64))));
  }
  cache_prefetch(zeros({0, 8}, TensorOptions(kBFloat16).device(dev())), zeros({3}, TensorOptions(kInt64).device(dev())));
}

// nonzero against a row-major scan of the values: several chunks (8192) and tiles (256) with
// true elements at their edges, every layout, 0-d and empty inputs; masked_select with broadcast.
TEST_P(Index, NonzeroAndMaskedSelect) {
  th::CaseLoop loop;
  th::Gen g(2010);
  const std::vector<Shape> shapes = {{}, {0}, {1}, {300}, {3, 0, 2}, {7, 33}, {8192}, {3, 8193}, {65537}, {5, 4, 3, 2}};
  for (const Shape& s : shapes) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
      for (DType t : {kFloat32, kBool, kInt64, kBFloat16}) {
        if (!loop.run(th::case_name(s, t, l, dev()), [&] {
          ref::Array a(s);
          for (size_t i = 0; i < a.v.size(); ++i)  // sparse, dense and boundary runs
            a.v[i] = (i % 8192 == 0 || i % 8192 == 8191 || g.randint(0, 9) < (i < 20000 ? 3 : 8)) ? 1.0 + i % 3 : 0.0;
          Tensor x = th::make_tensor(a, t, dev(), l);
          Tensor y = nonzero(x);
          std::vector<double> want;
          int64_t count = 0;
          for (size_t i = 0; i < a.v.size(); ++i) {
            if (a.v[i] == 0) continue;
            ++count;
            int64_t r = static_cast<int64_t>(i);
            std::vector<double> row(s.size());
            for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
              row[static_cast<size_t>(d)] = static_cast<double>(r % s[static_cast<size_t>(d)]);
              r /= s[static_cast<size_t>(d)];
            }
            want.insert(want.end(), row.begin(), row.end());
          }
          ref::Array w({count, static_cast<int64_t>(s.size())});
          w.v = want;
          ASSERT_TRUE(th::expect_shape(y, w.sizes, kInt64));
          ASSERT_TRUE(th::expect_equal(y, w));
          if (t == kBool) {
            Tensor vals = th::make_tensor(ref::Array(s, 5.0), kFloat32, dev());
            Tensor m = masked_select(vals, x);
            ASSERT_TRUE(th::expect_shape(m, {count}, kFloat32));
            ASSERT_TRUE(th::expect_equal(m, ref::Array({count}, 5.0)));
          }
        }))
          return;
      }
    }
  }
  // NaN and -0: nonzero is x != 0.
  Tensor f = th::make_tensor(ref::Array({4}, 0.0), kFloat32, dev());
  f.narrow(0, 1, 1).fill_(std::nan(""));
  f.narrow(0, 2, 1).fill_(-0.0);
  ref::Array one({1, 1});
  one.v = {1};
  EXPECT_TRUE(th::expect_equal(nonzero(f), one));
  // masked_select broadcasts x [2, 3] with a mask [2, 1].
  ref::Array xa({2, 3});
  std::iota(xa.v.begin(), xa.v.end(), 0.0);
  ref::Array ma({2, 1});
  ma.v = {0, 1};
  Tensor sel = masked_select(th::make_tensor(xa, kFloat32, dev()), th::make_tensor(ma, kBool, dev()));
  ref::Array want({3});
  want.v = {3, 4, 5};
  EXPECT_TRUE(th::expect_equal(sel, want));
  EXPECT_THROWS_OP(DTypeError, "masked_select", masked_select(sel, sel));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Index);

}  // namespace
