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
  const auto src_of = source_tables(p, nd - 1);  // the outer dims; the row's edges use pad_source
  const PadDim ld = p.dims[nd - 1];
  const int64_t n = ld.out, rows = p.out_numel / (n * b);
  const int64_t s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  const PadRun run = pad_direct_run(p.mode, p.dims[nd - 1]);
  const bool dense = s_in == b && s_out == b;
  auto ext = [&](int d) { return p.dims[d].out; };
  for_row_ranges(rows, p.out_numel, [&](int64_t r0, int64_t r1) {
    Odometer od(nd, r0, ext);
    for (int64_t r = r0; r < r1; ++r, od.next(ext)) {
      int64_t in_off = 0, out_off = 0;
      bool inside = true;
      for (int d = 0; d < nd - 1; ++d) {
        const int64_t k = src_of[d][od.idx[d]];
        inside = inside && k >= 0;
        in_off += k * p.in_strides[d];
        out_off += od.idx[d] * p.out_strides[d];
      }
      U* o = out + out_off;
      if (!inside) {
        if (s_out == b) std::fill_n(o, n * b, fill);
        else
          for (int64_t j = 0; j < n; ++j) std::fill_n(o + j * s_out, b, fill);
        continue;
      }
      const U* x = in + in_off;
      auto edge = [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          const int64_t k = pad_source(p.mode, ld, j);
          if (k < 0) std::fill_n(o + j * s_out, b, fill);
          else if (b == 1) o[j * s_out] = x[k * s_in];
          else std::memcpy(o + j * s_out, x + k * s_in, static_cast<size_t>(b) * sizeof(U));
        }
      };
      if (dense) {  // edges through the table, the middle as one copy
        edge(0, run.j0);
        std::memcpy(o + run.j0 * b, x + run.k0 * b, static_cast<size_t>((run.j1 - run.j0) * b) * sizeof(U));
        edge(run.j1, n);
      } else {
        edge(0, n);
      }
    }
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

// grad_input[k] = sum of grad_output over the outputs that read k, in the output's order: the
// outer dims' sources expanded into output row offsets (outer loop), then the last dim's
// sources of each element (inner), accumulated for a whole row at once so that the interior
// (one source per element) is a plain add loop.
template <typename T>
void pad_backward_gather(const PadParams& p) {
  using Acc = opmath_t<T>;
  const T* grad_out = static_cast<const T*>(p.src);
  T* grad_in = static_cast<T*>(p.dst);
  const Rows g = rows_of(p);
  const int nd = g.nd;
  const int64_t b = g.block;
  std::vector<SourceTable> tables;  // the outer dims; the row's edges use pad_sources
  for (int d = 0; d < nd - 1; ++d) tables.push_back(sources_table(p.mode, p.dims[d]));
  const PadDim ld = p.dims[nd - 1];
  const PadInterior mid = pad_interior(p.mode, ld);
  const int64_t n = ld.in, rows = p.in_numel / (n * b);
  const int64_t s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  auto ext = [&](int d) { return p.dims[d].in; };
  for_row_ranges(rows, p.in_numel, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> offs, next;
    std::vector<Acc> acc(static_cast<size_t>(n * b));
    Odometer od(nd, r0, ext);
    for (int64_t r = r0; r < r1; ++r, od.next(ext)) {
      int64_t in_off = 0;
      offs.assign(1, 0);
      for (int d = 0; d < nd - 1; ++d) {
        const int64_t k = od.idx[d];
        in_off += k * p.in_strides[d];
        const SourceTable& t = tables[d];
        next.clear();
        for (int64_t o : offs)
          for (int64_t q = t.begin[k]; q < t.begin[k + 1]; ++q) next.push_back(o + t.j[q] * p.out_strides[d]);
        offs.swap(next);
      }
      Acc* a = acc.data();
      T* gi = grad_in + in_off;
      // The common row, one source row, both dense: its interior converts straight from
      // grad_output (Acc{} + x, as the CUDA kernel adds), only the edges go through the buffer.
      const bool direct = offs.size() == 1 && s_out == b && s_in == b;
      if (direct) {
        std::fill(a, a + mid.lo * b, Acc{});
        std::fill(a + mid.hi * b, a + n * b, Acc{});
      } else {
        std::fill(acc.begin(), acc.end(), Acc{});
      }
      for (int64_t o : offs) {
        const T* go = grad_out + o;
        auto sum_edge = [&](int64_t k0, int64_t k1) {
          for (int64_t k = k0; k < k1; ++k) {
            const PadSources src = pad_sources(p.mode, ld, k);
            for (int r = 0; r < src.n; ++r)
              for (int64_t j = src.lo[r]; j < src.hi[r]; ++j)
                for (int64_t c = 0; c < b; ++c) a[k * b + c] = a[k * b + c] + static_cast<Acc>(go[j * s_out + c]);
          }
        };
        sum_edge(0, mid.lo);
        if (direct) {
          const T* gm = go + ld.before * b;
          for (int64_t e = mid.lo * b; e < mid.hi * b; ++e) gi[e] = static_cast<T>(Acc{} + static_cast<Acc>(gm[e]));
        } else if (s_out == b) {  // one source each: a[k] += grad_out[k + before], contiguous
          const T* gm = go + ld.before * b;
          for (int64_t e = mid.lo * b; e < mid.hi * b; ++e) a[e] = a[e] + static_cast<Acc>(gm[e]);
        } else {
          for (int64_t k = mid.lo; k < mid.hi; ++k)
            for (int64_t c = 0; c < b; ++c) a[k * b + c] = a[k * b + c] + static_cast<Acc>(go[(k + ld.before) * s_out + c]);
        }
        sum_edge(mid.hi, n);
      }
      if (direct) {
        for (int64_t e = 0; e < mid.lo * b; ++e) gi[e] = static_cast<T>(a[e]);
        for (int64_t e = mid.hi * b; e < n * b; ++e) gi[e] = static_cast<T>(a[e]);
      } else if (s_in == b) {
        for (int64_t e = 0; e < n * b; ++e) gi[e] = static_cast<T>(a[e]);
      } else {
        for (int64_t k = 0; k < n; ++k)
          for (int64_t c = 0; c < b; ++c) gi[k * s_in + c] = static_cast<T>(a[k * b + c]);
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
