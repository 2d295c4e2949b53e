// CPU padding, forward and backward, over rows of the innermost dim (the output's innermost in
// memory: the front end orders the dims). Each dim's index map is tabulated once per call.
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/pad.h"
#include "cpu/loop.h"

namespace anvil::cpu {
namespace {

// src_of[d][j]: the input index output index j of dim d reads (-1: the fill value).
std::vector<std::vector<int64_t>> source_tables(const PadParams& p) {
  std::vector<std::vector<int64_t>> t(static_cast<size_t>(p.ndim));
  for (int d = 0; d < p.ndim; ++d) {
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
  const int nd = p.ndim;
  const auto src_of = source_tables(p);
  const std::vector<int64_t>& last = src_of[nd - 1];
  const int64_t n = p.dims[nd - 1].out, rows = p.out_numel / n;
  const int64_t s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  const PadRun run = pad_direct_run(p.mode, p.dims[nd - 1]);
  const bool dense = s_in == 1 && s_out == 1;
#pragma omp parallel for schedule(static) if (p.out_numel >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, in_off = 0, out_off = 0;
    bool inside = true;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t j = rem % p.dims[d].out;
      rem /= p.dims[d].out;
      const int64_t k = src_of[d][j];
      inside = inside && k >= 0;
      in_off += k * p.in_strides[d];
      out_off += j * p.out_strides[d];
    }
    U* o = out + out_off;
    if (!inside) {
      for (int64_t j = 0; j < n; ++j) o[j * s_out] = fill;
      continue;
    }
    const U* x = in + in_off;
    auto edge = [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) o[j * s_out] = last[j] < 0 ? fill : x[last[j] * s_in];
    };
    if (dense) {  // edges through the table, the middle as one copy
      edge(0, run.j0);
      std::memcpy(o + run.j0, x + run.k0, static_cast<size_t>(run.j1 - run.j0) * sizeof(U));
      edge(run.j1, n);
    } else {
      edge(0, n);
    }
  }
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
// outer dims' sources expanded into output row offsets, then the last dim's sources per element.
template <typename T>
void pad_backward_gather(const PadParams& p) {
  using Acc = opmath_t<T>;
  const T* grad_out = static_cast<const T*>(p.src);
  T* grad_in = static_cast<T*>(p.dst);
  const int nd = p.ndim;
  std::vector<SourceTable> tables;
  for (int d = 0; d < nd; ++d) tables.push_back(sources_table(p.mode, p.dims[d]));
  const SourceTable& last = tables[nd - 1];
  const int64_t n = p.dims[nd - 1].in, rows = p.in_numel / n;
  const int64_t s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
#pragma omp parallel if (p.in_numel >= kParallelGrain)
  {
    std::vector<int64_t> offs, next;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, in_off = 0;
      int64_t k_of[kMaxDims];
      for (int d = nd - 2; d >= 0; --d) {
        k_of[d] = rem % p.dims[d].in;
        rem /= p.dims[d].in;
        in_off += k_of[d] * p.in_strides[d];
      }
      offs.assign(1, 0);
      for (int d = 0; d < nd - 1 && !offs.empty(); ++d) {
        const SourceTable& t = tables[d];
        next.clear();
        for (int64_t o : offs)
          for (int64_t q = t.begin[k_of[d]]; q < t.begin[k_of[d] + 1]; ++q) next.push_back(o + t.j[q] * p.out_strides[d]);
        offs.swap(next);
      }
      T* gi = grad_in + in_off;
      for (int64_t k = 0; k < n; ++k) {
        Acc acc{};
        for (int64_t o : offs)
          for (int64_t q = last.begin[k]; q < last.begin[k + 1]; ++q) acc = acc + static_cast<Acc>(grad_out[o + last.j[q] * s_out]);
        gi[k * s_in] = static_cast<T>(acc);
      }
    }
  }
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
