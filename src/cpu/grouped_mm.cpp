// CPU grouped_mm: the groups are read from offs (host memory here) and each group's product runs
// through the scaled-product kernel (GEMV for the few rows of a decode token, sgemm of the
// widened operands otherwise), with the group's operands as strided sub-views.
#include <algorithm>
#include <cstring>

#include "core/element.h"
#include "core/kernels/scaled_mm.h"
#include "core/kernels/grouped_mm.h"

namespace anvil::cpu {
namespace {

// The group's boundaries along the partitioned extent (see GroupedMmParams).
struct Range {
  int64_t begin, end;
};
Range group_range(const GroupedMmParams& p, int64_t g, int64_t extent) {
  auto clamped = [&](int64_t h) { return std::clamp<int64_t>(p.offs[h], 0, extent); };
  const int64_t begin = g == 0 ? 0 : clamped(g - 1);
  return {begin, std::max(begin, clamped(g))};
}

}  // namespace

void grouped_mm(const GroupedMmParams& p) {
  const size_t out_size = element_size(p.out_dtype), a_size = element_size(p.a_dtype), b_size = element_size(p.b_dtype);
  auto at = [](const void* base, int64_t offset, size_t size) {
    return static_cast<const char*>(base) + offset * static_cast<int64_t>(size);
  };
  for (int64_t g = 0; g < p.groups; ++g) {
    // Group g as a scaled product: a block [m, k] times the weight-like view w [n, k] of b.
    ScaledMmParams s;
    s.a_dtype = p.a_dtype;
    s.w_dtype = p.b_dtype;
    s.out_dtype = p.out_dtype;
    s.m = p.m;
    s.n = p.n;
    s.k = p.k;
    s.stride_a_row = p.stride_a_row;
    s.stride_a_col = p.stride_a_col;
    s.stride_w_row = p.stride_b_col;
    s.stride_w_col = p.stride_b_row;
    s.stride_out_row = p.stride_out_row;
    int64_t a_off = 0, b_off = 0, out_off = 0;
    switch (p.layout) {
      case GroupedLayout::RowsByGroup: {
        const Range r = group_range(p, g, p.m);
        s.m = r.end - r.begin;
        a_off = r.begin * p.stride_a_row;
        b_off = g * p.stride_b_batch;
        out_off = r.begin * p.stride_out_row;
        if (p.scale_a) {
          s.scale_a = p.scale_a + r.begin;
          s.scale_a_per_row = true;
        }
        if (p.scale_b) {
          s.scale_w = p.scale_b + g * p.n;
          s.scale_w_per_row = true;
        }
        break;
      }
      case GroupedLayout::ColsByGroup: {
        const Range r = group_range(p, g, p.n);
        s.n = r.end - r.begin;
        a_off = g * p.stride_a_batch;
        b_off = r.begin * p.stride_b_col;
        out_off = r.begin;
        break;
      }
      case GroupedLayout::KByGroup: {
        const Range r = group_range(p, g, p.k);
        s.k = r.end - r.begin;
        a_off = r.begin * p.stride_a_col;
        b_off = r.begin * p.stride_b_row;
        out_off = g * p.stride_out_batch;
        break;
      }
      case GroupedLayout::Batched:
        a_off = g * p.stride_a_batch;
        b_off = g * p.stride_b_batch;
        out_off = g * p.stride_out_batch;
        break;
    }
    if (s.m == 0 || s.n == 0) continue;
    char* out = static_cast<char*>(p.out) + out_off * static_cast<int64_t>(out_size);
    if (s.k == 0) {  // an empty K range: the product is zero
      for (int64_t i = 0; i < s.m; ++i) std::memset(out + i * p.stride_out_row * static_cast<int64_t>(out_size), 0, s.n * out_size);
      continue;
    }
    s.a = at(p.a, a_off, a_size);
    s.w = at(p.b, b_off, b_size);
    s.out = out;
    scaled_mm(s);
  }
}

}  // namespace anvil::cpu
