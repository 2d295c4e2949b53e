// Attention's CUDA kernels at the boundaries their plans create, against a float64 reference:
// decode split-K (key counts around tile multiples, valid lengths that leave splits empty,
// peaked scores whose max moves between splits, head groups split over blocks, masks), 32K
// contexts, the prefill kernel's head dims (padded 40 / 112, up to 256), row blocks and both
// causal alignments over a cache with NaN past the valid length, grids past 65535 blocks, and
// CUDA graph replay of prefill and masked decode with new inputs.
#include <cmath>

#include "harness.h"
#include "reference/ref_attention.h"

namespace {

using namespace anvil;

// 16-bit types: the prefill kernels round p to the input type for the p v product.
::testing::AssertionResult check(const Tensor& got, const ref::AttentionRef& want, DType t) {
  ref::Array err = want.err;
  if (t == kBFloat16 || t == kFloat16)
    for (size_t i = 0; i < err.v.size(); ++i) err.v[i] += th::unit_roundoff(t) * want.mag.v[i];
  return th::expect_close(got, want.out, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}, &err);
}

// A [B, H, S, E] cache whose slots at and past lens[b] hold NaN (a kernel reading one shows).
Tensor cache_tensor(const ref::Array& a, const std::vector<int64_t>& lens, DType t) {
  ref::Array c = a;
  const int64_t heads = c.sizes[1], slots = c.sizes[2], dim = c.sizes[3];
  for (int64_t b = 0; b < c.sizes[0]; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = std::clamp<int64_t>(lens[static_cast<size_t>(b)], 0, slots); j < slots; ++j)
        std::fill_n(c.v.begin() + ((b * heads + h) * slots + j) * dim, dim, std::nan(""));
  return th::make_tensor(c, t, Device(kCUDA, 0));
}

Tensor lens_tensor(const std::vector<int64_t>& lens) {
  ref::Array a({static_cast<int64_t>(lens.size())});
  for (size_t b = 0; b < lens.size(); ++b) a.v[b] = static_cast<double>(lens[b]);
  return th::make_tensor(a, kInt32, Device(kCUDA, 0));
}

std::string lens_str(const std::vector<int64_t>& lens) {
  std::string r;
  for (int64_t l : lens) r += (r.empty() ? "" : ",") + std::to_string(l);
  return "[" + r + "]";
}

struct DecodeCase {
  int64_t hq, hk, e, l, s;
  std::vector<int64_t> lens;
  double qk_range;  // |q|, |k| bound: 4 gives peaked softmax rows whose max moves between splits
};

// Key counts around the 128 / 64 / 32-key tiles and the split sizes of one wave of blocks;
// lengths 0 (no key), below q_len (rows without keys), mid-split, S_max and past it (clamped).
const std::vector<DecodeCase>& decode_cases() {
  static const std::vector<DecodeCase> v = {
      {32, 8, 80, 1, 4096, {4096, 4095, 1}, 1},   {8, 2, 80, 1, 4097, {4097, 129, 0}, 4},
      {8, 2, 64, 2, 127, {127, 2, 1}, 4},         {8, 2, 64, 1, 129, {128, 129, 5000}, 1},
      {4, 1, 96, 4, 1000, {999, 64, 3}, 4},       {8, 2, 128, 1, 6000, {6000, 2049, 65}, 4},
      {32, 2, 128, 3, 700, {700, 350, 2}, 1},     {4, 2, 256, 8, 300, {300, 33, 8}, 4},
      {2, 2, 256, 1, 5000, {5000, 31, 32}, 4},    {16, 2, 64, 1, 9000, {9000, 8999, 4500}, 4},
      // One sequence over one or two kv heads: many splits per (kv head, head chunk).
      {8, 2, 80, 1, 4097, {4097}, 4},             {4, 1, 128, 1, 3000, {2999}, 1},
      {6, 1, 64, 1, 700, {0}, 1},
  };
  return v;
}

TEST(AttentionCuda, DecodeSplitBoundaries) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::CaseLoop loop;
  th::Gen g(8100);
  for (const DecodeCase& c : decode_cases()) {
    for (DType t : {kBFloat16, kFloat16, kFloat32}) {
      const int64_t B = static_cast<int64_t>(c.lens.size());
      if (!loop.run("Hq " + std::to_string(c.hq) + " Hk " + std::to_string(c.hk) + " E " + std::to_string(c.e) + " L " +
                        std::to_string(c.l) + " S " + std::to_string(c.s) + " lens " + lens_str(c.lens) + " " +
                        th::dtype_str(t),
                    [&] {
        ref::Array q = th::random_array({B, c.hq, c.l, c.e}, t, g, -c.qk_range, c.qk_range);
        ref::Array k = th::random_array({B, c.hk, c.s, c.e}, t, g, -c.qk_range, c.qk_range);
        ref::Array v = th::random_array({B, c.hk, c.s, c.e}, t, g, -1, 1);
        Tensor y = decode_attention(th::make_tensor(q, t, dev), cache_tensor(k, c.lens, t), cache_tensor(v, c.lens, t),
                                    lens_tensor(c.lens));
        const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
        ASSERT_TRUE(check(y, ref::attention(q, k, v, nullptr, false, &c.lens, true, true, scale), t));
      }))
        return;
    }
  }
}

// One sequence over a 32K cache (the benchmarks' bandwidth case) and a partly filled 24K one.
TEST(AttentionCuda, DecodeLongContext) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::Gen g(8101);
  for (const auto& [E, S, lens] : {std::tuple<int64_t, int64_t, std::vector<int64_t>>{80, 32768, {32768}},
                                   {128, 24576, {20001}}}) {
    SCOPED_TRACE("E " + std::to_string(E) + " len " + std::to_string(lens[0]));
    const int64_t Hq = 32, Hk = 8;
    ref::Array q = th::random_array({1, Hq, 1, E}, kBFloat16, g, -2, 2);
    ref::Array k = th::random_array({1, Hk, S, E}, kBFloat16, g, -2, 2);
    ref::Array v = th::random_array({1, Hk, S, E}, kBFloat16, g, -1, 1);
    Tensor y = decode_attention(th::make_tensor(q, kBFloat16, dev), cache_tensor(k, lens, kBFloat16),
                                cache_tensor(v, lens, kBFloat16), lens_tensor(lens));
    const double scale = 1.0 / std::sqrt(static_cast<double>(E));
    EXPECT_TRUE(check(y, ref::attention(q, k, v, nullptr, false, &lens, true, true, scale), kBFloat16));
  }
}

// A query whose rows are not 16-byte aligned (a slice of a wider tensor at an odd element):
// the tensor-core decode kernel's element-wise q load.
TEST(AttentionCuda, DecodeUnalignedQuery) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::Gen g(8103);
  for (DType t : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(th::dtype_str(t));
    const int64_t Hq = 8, Hk = 2, E = 80, S = 1000;
    const std::vector<int64_t> lens = {777};
    ref::Array wide = th::random_array({1, Hq, 1, E + 1}, t, g, -2, 2);
    ref::Array q({1, Hq, 1, E});
    ref::for_each_index(q.sizes, [&](const ref::Shape& i) { q.at(i) = wide.at({i[0], i[1], i[2], i[3] + 1}); });
    ref::Array k = th::random_array({1, Hk, S, E}, t, g, -2, 2), v = th::random_array({1, Hk, S, E}, t, g, -1, 1);
    Tensor qt = th::make_tensor(wide, t, dev).narrow(3, 1, E);
    Tensor y = decode_attention(qt, cache_tensor(k, lens, t), cache_tensor(v, lens, t), lens_tensor(lens));
    const double scale = 1.0 / std::sqrt(static_cast<double>(E));
    EXPECT_TRUE(check(y, ref::attention(q, k, v, nullptr, false, &lens, true, true, scale), t));
  }
}

// Decode shapes through scaled_dot_product_attention: enable_gqa, bool and additive masks with
// some rows fully masked, a mask broadcast over heads.
TEST(AttentionCuda, DecodeMasks) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::CaseLoop loop;
  th::Gen g(8102);
  const int64_t B = 2, Hq = 16, Hk = 4, L = 2, S = 2100, E = 64;
  for (DType t : {kBFloat16, kFloat32}) {
    for (DType mt : {kBool, kFloat32, t}) {
      for (bool per_head : {true, false}) {
        if (!loop.run(th::dtype_str(t) + " mask " + th::dtype_str(mt) + (per_head ? " per head" : " broadcast"), [&] {
          ref::Array q = th::random_array({B, Hq, L, E}, t, g, -2, 2), k = th::random_array({B, Hk, S, E}, t, g, -2, 2),
                     v = th::random_array({B, Hk, S, E}, t, g, -1, 1);
          const ref::Shape ms = per_head ? ref::Shape{B, Hq, L, S} : ref::Shape{B, 1, L, S};
          ref::Array m = mt == kBool ? th::random_array(ms, kBool, g, 0, 1) : th::random_array(ms, mt, g, -3, 1);
          ref::Array full({B, Hq, L, S});
          ref::for_each_index(full.sizes, [&](const ref::Shape& idx) {
            const double x = m.at({idx[0], per_head ? idx[1] : 0, idx[2], idx[3]});
            full.at(idx) = mt == kBool ? (x != 0 ? 0.0 : -INFINITY) : x;
          });
          for (int64_t j = 0; j < S; ++j) {  // batch 1, row 1 of the first heads: no key left
            const double off = mt == kBool ? 0.0 : -INFINITY;
            m.at({1, 0, 1, j}) = off;
            for (int64_t h = 0; h < (per_head ? 1 : Hq); ++h) full.at({1, h, 1, j}) = -INFINITY;
          }
          Tensor y = scaled_dot_product_attention(th::make_tensor(q, t, dev), th::make_tensor(k, t, dev),
                                                  th::make_tensor(v, t, dev), th::make_tensor(m, mt, dev), 0.0, false,
                                                  0.2, true);
          ASSERT_TRUE(check(y, ref::attention(q, k, v, &full, false, nullptr, false, false, 0.2), t));
        }))
          return;
      }
    }
  }
}

struct PrefillCase {
  int64_t hq, hk, e, l, s;
};

// Head dims padded to the kernel's 48 / 128 / 256, row counts off the 128- and 64-row blocks,
// key counts off the 64- and 32-key tiles, fewer keys than queries.
const std::vector<PrefillCase>& prefill_cases() {
  static const std::vector<PrefillCase> v = {
      {4, 2, 40, 200, 200}, {2, 2, 64, 129, 300}, {4, 1, 80, 257, 190}, {2, 1, 96, 130, 33},
      {2, 2, 112, 70, 70},  {2, 2, 128, 300, 300}, {2, 1, 256, 65, 130}, {2, 2, 32, 9, 5},
  };
  return v;
}

TEST(AttentionCuda, PrefillHeadDims) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::CaseLoop loop;
  th::Gen g(8103);
  for (const PrefillCase& c : prefill_cases()) {
    for (DType t : {kBFloat16, kFloat16}) {
      for (bool causal : {false, true}) {
        if (!loop.run("Hq " + std::to_string(c.hq) + " Hk " + std::to_string(c.hk) + " E " + std::to_string(c.e) +
                          " L " + std::to_string(c.l) + " S " + std::to_string(c.s) + " " + th::dtype_str(t) +
                          (causal ? " causal" : ""),
                      [&] {
          ref::Array q = th::random_array({1, c.hq, c.l, c.e}, t, g, -2, 2);
          ref::Array k = th::random_array({1, c.hk, c.s, c.e}, t, g, -2, 2);
          ref::Array v = th::random_array({1, c.hk, c.s, c.e}, t, g, -1, 1);
          const bool gqa = c.hq != c.hk;
          Tensor y = scaled_dot_product_attention(th::make_tensor(q, t, dev), th::make_tensor(k, t, dev),
                                                  th::make_tensor(v, t, dev), {}, 0.0, causal, std::nullopt, gqa);
          const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
          ASSERT_TRUE(check(y, ref::attention(q, k, v, nullptr, false, nullptr, causal, false, scale), t));
        }))
          return;
      }
    }
  }
}

// Chunked prefill into a KV cache: 100 new rows per sequence, bottom-right causal, lengths that
// leave the first rows without keys (40 < 100) or the whole sequence empty.
TEST(AttentionCuda, PrefillOverCache) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::CaseLoop loop;
  th::Gen g(8104);
  const std::vector<int64_t> lens = {150, 100, 40, 0, 700};
  const int64_t B = static_cast<int64_t>(lens.size()), L = 100, S = 512;
  for (DType t : {kBFloat16, kFloat16, kFloat32}) {
    for (const auto& [Hq, Hk, E] : {std::tuple{8, 2, 128}, std::tuple{4, 4, 64}, std::tuple{4, 2, 40}}) {
      const std::string name =
          th::dtype_str(t) + " Hq " + std::to_string(Hq) + " Hk " + std::to_string(Hk) + " E " + std::to_string(E);
      if (!loop.run(name, [&] {
        ref::Array q = th::random_array({B, Hq, L, E}, t, g, -2, 2);
        ref::Array k = th::random_array({B, Hk, S, E}, t, g, -2, 2), v = th::random_array({B, Hk, S, E}, t, g, -1, 1);
        Tensor y = decode_attention(th::make_tensor(q, t, dev), cache_tensor(k, lens, t), cache_tensor(v, lens, t),
                                    lens_tensor(lens));
        const double scale = 1.0 / std::sqrt(static_cast<double>(E));
        ASSERT_TRUE(check(y, ref::attention(q, k, v, nullptr, false, &lens, true, true, scale), t));
      }))
        return;
    }
  }
}

// More than 65535 (batch, kv head) blocks in the decode and simple kernels' 1-D grids.
TEST(AttentionCuda, GridsPast65535) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  th::Gen g(8105);
  for (const auto& [t, E, L] :
       {std::tuple{kBFloat16, int64_t{64}, int64_t{1}}, std::tuple{kFloat32, int64_t{12}, int64_t{2}}}) {
    SCOPED_TRACE(th::dtype_str(t) + " E " + std::to_string(E));
    const int64_t H = 70000, S = 3;
    ref::Array q = th::random_array({1, H, L, E}, t, g, -1, 1), k = th::random_array({1, H, S, E}, t, g, -1, 1),
               v = th::random_array({1, H, S, E}, t, g, -1, 1);
    Tensor y = scaled_dot_product_attention(th::make_tensor(q, t, dev), th::make_tensor(k, t, dev),
                                            th::make_tensor(v, t, dev));
    const double scale = 1.0 / std::sqrt(static_cast<double>(E));
    EXPECT_TRUE(check(y, ref::attention(q, k, v, nullptr, false, nullptr, false, false, scale), t));
  }
}

// One graph holding a causal prefill and a masked split-K decode, replayed with new q, k, v and
// mask values: each replay equals an eager call bit for bit and the reference.
TEST(AttentionCuda, GraphReplaysPrefillAndMaskedDecode) {
  ANVIL_REQUIRE_CUDA();
  const Device dev(kCUDA, 0);
  Stream st = Stream::create(dev);
  StreamGuard guard(st);
  th::Gen g(8106);
  const DType t = kBFloat16;
  const int64_t H = 4, Hk = 2, L = 150, Ld = 1, S = 3000, E = 64;
  auto pq = th::make_input({1, H, L, E}, t, dev, th::Layout::Contiguous, g, -1, 1);
  auto pk = th::make_input({1, Hk, L, E}, t, dev, th::Layout::Contiguous, g, -1, 1);
  auto dq = th::make_input({1, H, Ld, E}, t, dev, th::Layout::Contiguous, g, -1, 1);
  auto dk = th::make_input({1, Hk, S, E}, t, dev, th::Layout::Contiguous, g, -1, 1);
  auto dm = th::make_input({1, 1, Ld, S}, kFloat32, dev, th::Layout::Contiguous, g, -2, 0);
  auto run = [&] {
    return std::pair{scaled_dot_product_attention(pq.t, pk.t, pk.t, {}, 0.0, true, std::nullopt, true),
                     scaled_dot_product_attention(dq.t, dk.t, dk.t, dm.t, 0.0, false, std::nullopt, true)};
  };
  run();
  st.synchronize();
  cuda::Graph graph;
  graph.capture_begin();
  auto [yp, yd] = run();
  graph.capture_end();
  for (int round = 0; round < 2; ++round) {
    for (th::Input* in : {&pq, &pk, &dq, &dk}) {
      th::Input n = th::make_input(in->a.sizes, t, dev, th::Layout::Contiguous, g, -2, 2);
      in->t.copy_(n.t);
      in->a = n.a;
    }
    th::Input nm = th::make_input(dm.a.sizes, kFloat32, dev, th::Layout::Contiguous, g, -3, 1);
    dm.t.copy_(nm.t);
    dm.a = nm.a;
    graph.replay();
    st.synchronize();
    auto [ep, ed] = run();
    st.synchronize();
    EXPECT_EQ(th::to_bits(yp), th::to_bits(ep)) << "prefill, round " << round;
    EXPECT_EQ(th::to_bits(yd), th::to_bits(ed)) << "decode, round " << round;
    ref::Array full({1, H, Ld, S});
    ref::for_each_index(full.sizes, [&](const ref::Shape& idx) { full.at(idx) = dm.a.at({0, 0, idx[2], idx[3]}); });
    EXPECT_TRUE(check(yp, ref::attention(pq.a, pk.a, pk.a, nullptr, false, nullptr, true, false, 0.125), t)) << "round " << round;
    EXPECT_TRUE(check(yd, ref::attention(dq.a, dk.a, dk.a, &full, false, nullptr, false, false, 0.125), t)) << "round " << round;
  }
  graph.reset();
}

}  // namespace
