// CPU padding, forward and backward, over rows of the innermost dim (the output's innermost in
// memory: the front end orders the dims). Each dim's index map is tabulated once per call; a
// thread walks its rows with an odometer (no division per row), copies a row's unpadded middle
// as one block and sums a backward row's interior as one vectorisable loop.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/pad.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

// The kernels' row geometry: rows of dim nd - 1, each index of which moves `block` elements.
// A dense, unpadded innermost dim (a channels-last tensor's C) becomes that block, so a
// channels-last row is W * C elements, not C.
struct Rows {
  int nd;
  int64_t block = 1;
};
Rows rows_of(const PadParams& p) {
  Rows r{p.ndim};
  const PadDim& inner = p.dims[p.ndim - 1];
  if (p.ndim >= 2 && inner.before == 0 && inner.in == inner.out && p.in_strides[p.ndim - 1] == 1 &&
      p.out_strides[p.ndim - 1] == 1) {
    r.block = inner.in;
    --r.nd;
  }
  return r;
}

// Calls f(r0, r1) for each thread's share of `rows` (one share below the parallel grain).
template <typename F>
void for_row_ranges(int64_t rows, int64_t numel, F&& f) {
#pragma omp parallel if (numel >= kParallelGrain)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    if (r0 < r1) f(r0, r1);
  }
}

// The multi-index of row r over dims [0, nd - 1) of extent ext(d), last fastest; next() steps it.
struct Odometer {
  int nd;
  int64_t idx[kMaxDims] = {};
  template <typename Ext>
  Odometer(int nd_, int64_t r, Ext ext) : nd(nd_) {
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = r % ext(d);
      r /= ext(d);
    }
  }
  template <typename Ext>
  void next(Ext ext) {
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < ext(d)) return;
      idx[d] = 0;
    }
  }
};

// src_of[d][j]: the input index output index j of dim d < nd reads (-1: the fill value).
std::vector<std::vector<int64_t>> source_tables(const PadParams& p, int nd) {
  std::vector<std::vector<int64_t>> t(static_cast<size_t>(nd));
  for (int d = 0; d < nd; ++d) {
    t[d].resize(static_cast<size_t>(p.dims[d].out));
    for (int64_t j = 0; j < p.dims[d].out; ++j) t[d][j] = pad_source(p.mode, p.dims[d], j);
  }
  return t;
}

template <typename U>
void pad_forward(const PadParams& p) {
  const U* in = static_cast<const U*>(p.src);
  U* out = static_cast<U*>(p.dst);
  U fill;
  std::memcpy(&fill, &p.fill_bits, sizeof(U));
  const Rows g = rows_of(p);
  const int nd = g.nd;
  const int64_t b = g.block;
  const auto src_of = source_tables(p, nd - 1);  // the outer dims; the row's edges: edge_j / edge_k
  const PadDim ld = p.dims[nd - 1];
  const int64_t n = ld.out, rows = p.out_numel / (n * b);
  const int64_t s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  const PadRun run = pad_direct_run(p.mode, p.dims[nd - 1]);
  const bool dense = s_in == b && s_out == b;
  // A dense row's edge outputs and their sources (pad_source once per call, not per row and
  // element); other rows map every output through pad_source.
  constexpr size_t kMaxEdges = 8;
  std::vector<int64_t> edge_j, edge_k;
  for (int64_t j = 0; j < n; ++j)
    if (dense && (j < run.j0 || j >= run.j1)) {
      edge_j.push_back(j);
      edge_k.push_back(pad_source(p.mode, ld, j));
    }
  // Fill value bytes all equal (zero, the usual constant): runs of filled rows go to memset.
  bool byte_fill = true;
  for (size_t i = 1; i < sizeof(U); ++i)
    byte_fill = byte_fill && reinterpret_cast<const unsigned char*>(&fill)[i] == reinterpret_cast<const unsigned char*>(&fill)[0];
  auto fill_run = [&](U* o, int64_t count) {
    if (byte_fill) std::memset(o, reinterpret_cast<const unsigned char*>(&fill)[0], static_cast<size_t>(count) * sizeof(U));
    else std::fill_n(o, count, fill);
  };
  // Rows are walked as runs along dim nd - 2 (the rows of one plane) under an odometer over the
  // dims before it, so a row costs one table read and one multiply-add, not a pass over every
  // outer dim (bf16 reflect [1, 16, 128, 128], rows of 256 bytes, 2 threads: 18.3 -> 16.6 us).
  const int inner = nd - 2;  // -1: a single row
  const int64_t plane = inner >= 0 ? p.dims[inner].out : 1;
  const int64_t* inner_src = inner >= 0 ? src_of[inner].data() : nullptr;
  const int64_t inner_in_stride = inner >= 0 ? p.in_strides[inner] : 0;
  const int64_t inner_out_stride = inner >= 0 ? p.out_strides[inner] : 0;
  auto ext = [&](int d) { return p.dims[d].out; };
  for_row_ranges(rows, p.out_numel, [&](int64_t r0, int64_t r1) {
    Odometer od(inner + 1, r0 / plane, ext);  // dims [0, inner)
    // Consecutive filled dense rows (a padded frame or channel: whole blocks of rows) are filled
    // as one run when the next row needs its input or does not follow on.
    U* run_start = nullptr;
    int64_t run_len = 0;
    auto flush = [&] {
      if (run_len > 0) fill_run(run_start, run_len);
      run_len = 0;
    };
    for (int64_t r = r0; r < r1; od.next(ext)) {
      int64_t in_base = 0, out_base = 0;
      bool outer_inside = true;
      for (int d = 0; d < inner; ++d) {
        const int64_t k = src_of[d][od.idx[d]];
        outer_inside = outer_inside && k >= 0;
        in_base += k * p.in_strides[d];
        out_base += od.idx[d] * p.out_strides[d];
      }
      const int64_t i0 = r % plane, i1 = std::min(plane, i0 + (r1 - r));
      r += i1 - i0;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t k = inner >= 0 ? inner_src[i] : 0;
        U* o = out + out_base + i * inner_out_stride;
        if (!outer_inside || k < 0) {
          if (s_out == b) {
            if (run_len > 0 && run_start + run_len != o) flush();
            if (run_len == 0) run_start = o;
            run_len += n * b;
          } else {
            for (int64_t j = 0; j < n; ++j) std::fill_n(o + j * s_out, b, fill);
          }
          continue;
        }
        flush();
        const U* x = in + in_base + k * inner_in_stride;
        auto put = [&](int64_t j, int64_t kk) {
          if (kk < 0) std::fill_n(o + j * s_out, b, fill);
          else if (b == 1) o[j * s_out] = x[kk * s_in];
          else std::memcpy(o + j * s_out, x + kk * s_in, static_cast<size_t>(b) * sizeof(U));
        };
        if (dense && b == 1 && edge_j.size() <= kMaxEdges) {
          // Element rows with a few edge outputs (a conv's pad): the edge sources are read first,
          // touching both ends of the input row before the copy (Zen 5, bf16 reflect
          // [1, 16, 128, 128], one thread: 31 -> 26 us; reading them after the copy stalled on
          // those loads, and software prefetch of later rows did not help). A fixed array: the
          // edge values in a per-thread vector, any count, measured 3-10 % slower here.
          U v[kMaxEdges];
          const size_t ne = edge_j.size();
          for (size_t e = 0; e < ne; ++e) v[e] = edge_k[e] < 0 ? fill : x[edge_k[e]];
          std::memcpy(o + run.j0, x + run.k0, static_cast<size_t>(run.j1 - run.j0) * sizeof(U));
          for (size_t e = 0; e < ne; ++e) o[edge_j[e]] = v[e];
        } else if (dense) {  // the middle as one copy, then the edges through the table (reading cached lines)
          std::memcpy(o + run.j0 * b, x + run.k0 * b, static_cast<size_t>((run.j1 - run.j0) * b) * sizeof(U));
          for (size_t e = 0; e < edge_j.size(); ++e) put(edge_j[e], edge_k[e]);
        } else {
          for (int64_t j = 0; j < n; ++j) put(j, pad_source(p.mode, ld, j));
        }
      }
    }
    flush();
  });
}

// Every output index of dim d that reads input index k, ascending, as a CSR table.
struct SourceTable {
  std::vector<int64_t> begin, j;
};
SourceTable sources_table(PadMode mode, const PadDim& d) {
  SourceTable t;
  t.begin.reserve(static_cast<size_t>(d.in) + 1);
  t.j.reserve(static_cast<size_t>(d.out));
  for (int64_t k = 0; k < d.in; ++k) {
    t.begin.push_back(static_cast<int64_t>(t.j.size()));
    const PadSources s = pad_sources(mode, d, k);
    for (int r = 0; r < s.n; ++r)
      for (int64_t j = s.lo[r]; j < s.hi[r]; ++j) t.j.push_back(j);
  }
  t.begin.push_back(static_cast<int64_t>(t.j.size()));
  return t;
}

// y[e] = y[e] + x[e] over n elements of T in the accumulation type (x widened first: the scalar
// loop's sums).
template <typename T, typename Acc>
void add_row(const T* x, Acc* y, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>)  // widening as a shift: a loop the compiler vectorises
    for (int64_t e = 0; e < n; ++e) y[e] = y[e] + bf16_bits_to_f32(x[e].x);
  else
    for (int64_t e = 0; e < n; ++e) y[e] = y[e] + static_cast<Acc>(x[e]);
}

// y[e] = T(x[e]); rows of bfloat16 / float16 through simd::encode_f32 (the scalar conversion's
// rounding), short ones (a row's edges) element by element.
template <typename T, typename Acc>
void store_row(const Acc* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<Acc, float> && !std::is_same_v<T, float>)
    if (n >= 64) return simd::encode_f32(dtype_of<T>::value, x, y, n);
  for (int64_t e = 0; e < n; ++e) y[e] = static_cast<T>(x[e]);
}

// The innermost dim's edge indices (outside pad_interior) and, per edge index, the output
// indices that read it, ascending (pad_sources expanded once per call, not per row).
struct EdgeSources {
  std::vector<int64_t> k, begin{0}, j;
};
EdgeSources edge_sources(PadMode mode, const PadDim& d, const PadInterior& mid) {
  EdgeSources e;
  auto add = [&](int64_t k) {
    const PadSources s = pad_sources(mode, d, k);
    for (int r = 0; r < s.n; ++r)
      for (int64_t j = s.lo[r]; j < s.hi[r]; ++j) e.j.push_back(j);
    e.k.push_back(k);
    e.begin.push_back(static_cast<int64_t>(e.j.size()));
  };
  for (int64_t k = 0; k < mid.lo; ++k) add(k);
  for (int64_t k = mid.hi; k < d.in; ++k) add(k);
  return e;
}

// grad_input[k] = sum of grad_output over the outputs that read k, in the output's order: the
// outer dims' sources expanded into output row offsets (outer loop), then the last dim's
// sources of each element (inner). Dense rows sum their interior (one source per element in each
// source row) in one simd::sum_rows pass and each edge element in a register; other layouts
// accumulate a whole row in a buffer.
template <typename T>
void pad_backward_gather(const PadParams& p) {
  using Acc = opmath_t<T>;
  const T* grad_out = static_cast<const T*>(p.src);
  T* grad_in = static_cast<T*>(p.dst);
  const Rows g = rows_of(p);
  const int nd = g.nd;
  const int64_t b = g.block;
  std::vector<SourceTable> tables;  // the outer dims; the row's edges: edge_sources
  for (int d = 0; d < nd - 1; ++d) tables.push_back(sources_table(p.mode, p.dims[d]));
  const PadDim ld = p.dims[nd - 1];
  const PadInterior mid = pad_interior(p.mode, ld);
  const EdgeSources edges = edge_sources(p.mode, ld, mid);
  const size_t n_left = static_cast<size_t>(mid.lo);
  const int64_t n = ld.in, rows = p.in_numel / (n * b);
  const int64_t s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  auto ext = [&](int d) { return p.dims[d].in; };
  for_row_ranges(rows, p.in_numel, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> offs, next;
    std::vector<const T*> rows_in;
    std::vector<Acc> acc(static_cast<size_t>(n * b));
    Odometer od(nd, r0, ext);
    for (int64_t r = r0; r < r1; ++r, od.next(ext)) {
      int64_t in_off = 0, out_off = 0;
      bool single = true;  // one source row: its offset is out_off
      for (int d = 0; d < nd - 1; ++d) {
        const int64_t k = od.idx[d];
        const SourceTable& t = tables[d];
        in_off += k * p.in_strides[d];
        single = single && t.begin[k + 1] - t.begin[k] == 1;
        if (single) out_off += t.j[t.begin[k]] * p.out_strides[d];
      }
      T* gi = grad_in + in_off;
      if (single) {
        offs.assign(1, out_off);
      } else {
        offs.assign(1, 0);
        for (int d = 0; d < nd - 1; ++d) {
          const SourceTable& t = tables[d];
          const int64_t k = od.idx[d];
          next.clear();
          for (int64_t o : offs)
            for (int64_t q = t.begin[k]; q < t.begin[k + 1]; ++q) next.push_back(o + t.j[q] * p.out_strides[d]);
          offs.swap(next);
        }
      }
      if (s_out == b && s_in == b) {
        // Dense rows: each edge element's sum in a register, the interior (one source per
        // element in each source row) as one sum of the source rows (simd::sum_rows for float32
        // and bfloat16). Zen 5, 2 threads, bf16: reflect backward of [1, 16, 128, 128] 318 us
        // with a scalar conversion per element and the row's sums in a buffer.
        for (size_t q = 0; q < edges.k.size(); ++q)
          for (int64_t c = 0; c < b; ++c) {
            Acc sum{};
            for (int64_t o : offs)
              for (int64_t i = edges.begin[q]; i < edges.begin[q + 1]; ++i)
                sum = sum + static_cast<Acc>(grad_out[o + edges.j[static_cast<size_t>(i)] * b + c]);
            gi[edges.k[q] * b + c] = static_cast<T>(sum);
          }
        const int64_t len = (mid.hi - mid.lo) * b;
        rows_in.clear();
        for (int64_t o : offs) rows_in.push_back(grad_out + o + (ld.before + mid.lo) * b);
        if (len > 0 && rows_in.size() == 1) {  // one source row: its bits (a constant pad's backward is a slice)
          std::memcpy(gi + mid.lo * b, rows_in[0], static_cast<size_t>(len) * sizeof(T));
          continue;
        }
        if (len > 0 && !simd::sum_rows(p.dtype, reinterpret_cast<const void* const*>(rows_in.data()),
                                       static_cast<int64_t>(rows_in.size()), gi + mid.lo * b, len))
          for (int64_t e = 0; e < len; ++e) {
            Acc sum{};
            for (const T* x : rows_in) sum = sum + static_cast<Acc>(x[e]);
            gi[mid.lo * b + e] = static_cast<T>(sum);
          }
        continue;
      }
      Acc* a = acc.data();
      std::fill(acc.begin(), acc.end(), Acc{});
      for (int64_t o : offs) {
        const T* go = grad_out + o;
        // Each element's sources in the output's order: the left edge's, the interior's (one
        // each), the right edge's.
        auto sum_edges = [&](size_t q0, size_t q1) {
          for (size_t q = q0; q < q1; ++q)
            for (int64_t i = edges.begin[q]; i < edges.begin[q + 1]; ++i)
              add_row<T, Acc>(go + edges.j[static_cast<size_t>(i)] * s_out, a + edges.k[q] * b, b);
        };
        sum_edges(0, n_left);
        const T* gm = go + ld.before * b;
        if (s_out == b) add_row<T, Acc>(gm + mid.lo * b, a + mid.lo * b, (mid.hi - mid.lo) * b);  // one source each
        else
          for (int64_t k = mid.lo; k < mid.hi; ++k) add_row<T, Acc>(go + (k + ld.before) * s_out, a + k * b, b);
        sum_edges(n_left, edges.k.size());
      }
      if (s_in == b) {
        store_row<T, Acc>(a, gi, n * b);
      } else {
        for (int64_t k = 0; k < n; ++k) store_row<T, Acc>(a + k * b, gi + k * s_in, b);
      }
    }
  });
}

}  // namespace

void pad(const PadParams& p) {
  dispatch_element_size(element_size(p.dtype), "[pad]", [&](auto tag) { pad_forward<typename decltype(tag)::type>(p); });
}

void pad_backward(const PadParams& p) {
  dispatch_float_complex_types(p.dtype, "[pad_backward]",
                               [&](auto tag) { pad_backward_gather<typename decltype(tag)::type>(p); });
}

}  // namespace anvil::cpu
