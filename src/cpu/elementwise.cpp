// CPU unary / binary / where / clamp loops over element.h's per-element semantics.
#include <atomic>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {

void unary(const ElementwiseParams& p) {
  const UnaryOp op = static_cast<UnaryOp>(p.op);
  if (p.contiguous && simd::unary(op, p.dtype, p.ptr[0], p.ptr[1], p.numel)) return;
  dispatch_all_types(p.dtype, "[unary]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    T* out = static_cast<T*>(p.ptr[0]);
    const T* in = static_cast<const T*>(p.ptr[1]);
    for_each_element(p, [&](int64_t o0, int64_t o1, int64_t, int64_t) {
      out[o0] = T(apply_unary<M>(op, static_cast<M>(in[o1])));
    });
  });
}

namespace {
// A strided binary op whose innermost dim is dense in the output and dense or broadcast in each
// input (a per-channel bias over an image, either layout) as SIMD rows: chunks of rows, each
// row's offsets decomposed once. Runs the row kernel where it has one; false otherwise.
bool binary_rows(BinaryOp op, const ElementwiseParams& p) {
  if (p.contiguous || p.ndim < 1 || p.out_dtype != p.dtype || !simd::has_binary_row(op, p.dtype)) return false;
  const int nd = p.ndim;
  const int64_t inner = p.sizes[nd - 1], s1 = p.strides[1][nd - 1], s2 = p.strides[2][nd - 1];
  if (p.strides[0][nd - 1] != 1 || (s1 != 0 && s1 != 1) || (s2 != 0 && s2 != 1) || inner == 0) return false;
  constexpr int64_t kChunk = 8192;  // elements per task: rows past it split over the team
  const int64_t per_row = (inner + kChunk - 1) / kChunk, items = p.numel / inner * per_row;
  const size_t es = element_size(p.dtype);
  parallel_for(items, p.numel >= kParallelGrain, [&](int64_t item) {
    int64_t off[4];
    row_offsets(p, item / per_row, off);
    const int64_t j = item % per_row * kChunk;
    auto at = [&](int s, int64_t step) { return static_cast<char*>(p.ptr[s]) + static_cast<size_t>(off[s] + j * step) * es; };
    simd::binary_row(op, p.dtype, at(0, 1), at(1, s1), s1 == 1, at(2, s2), s2 == 1, p.alpha.f, std::min(kChunk, inner - j));
  });
  return true;
}
}  // namespace

void binary(const ElementwiseParams& p) {
  const BinaryOp op = static_cast<BinaryOp>(p.op);
  if (p.contiguous && !is_compare(op) &&
      simd::binary(op, p.dtype, p.ptr[0], p.ptr[1], p.ptr[2], p.alpha.f, p.numel))
    return;
  if (binary_rows(op, p)) return;
  std::atomic<bool> div_by_zero{false};
  dispatch_all_types(p.dtype, "[binary]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const T* a = static_cast<const T*>(p.ptr[1]);
    const T* b = static_cast<const T*>(p.ptr[2]);
    if (is_compare(op)) {
      bool* out = static_cast<bool*>(p.ptr[0]);
      for_each_element(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t) {
        out[o0] = apply_compare<M>(op, static_cast<M>(a[o1]), static_cast<M>(b[o2]));
      });
      return;
    }
    T* out = static_cast<T*>(p.ptr[0]);
    const M alpha = scalar_op<T>(p.alpha);
    for_each_element(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t) {
      bool dz = false;
      out[o0] = T(apply_binary<M>(op, static_cast<M>(a[o1]), static_cast<M>(b[o2]), alpha, &dz));
      if (dz) div_by_zero.store(true, std::memory_order_relaxed);
    });
  });
  if (div_by_zero.load())
    throw Error("[div] ZeroDivisionError: integer division by zero");
}

void where(const ElementwiseParams& p) {
  dispatch_all_types(p.dtype, "[where]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(p.ptr[0]);
    const bool* cond = static_cast<const bool*>(p.ptr[1]);
    const T* a = static_cast<const T*>(p.ptr[2]);
    if (p.has_b) {
      const T* b = static_cast<const T*>(p.ptr[3]);
      for_each_element(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t o3) { out[o0] = cond[o1] ? a[o2] : b[o3]; });
    } else {
      const T s = scalar_as<T>(p.scalar0);
      for_each_element(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t) { out[o0] = cond[o1] ? a[o2] : s; });
    }
  });
}

void clamp(const ElementwiseParams& p) {
  dispatch_real_types(p.dtype, "[clamp]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    T* out = static_cast<T*>(p.ptr[0]);
    const T* x = static_cast<const T*>(p.ptr[1]);
    const M lo = scalar_op<T>(p.scalar0), hi = scalar_op<T>(p.scalar1);
    for_each_element(p, [&](int64_t o0, int64_t o1, int64_t, int64_t) {
      out[o0] = T(apply_clamp<M>(static_cast<M>(x[o1]), p.has_a, lo, p.has_b, hi));
    });
  });
}

void frexp(const ElementwiseParams& p) {
  dispatch_float_types(p.dtype, "[frexp]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;  // half / bfloat16 through float: their mantissas are floats exactly
    T* mantissa = static_cast<T*>(p.ptr[0]);
    int32_t* exponent = static_cast<int32_t*>(p.ptr[1]);
    const T* x = static_cast<const T*>(p.ptr[2]);
    for_each_element(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t) {
      mantissa[o0] = T(frexp_of<M>(static_cast<M>(x[o2]), &exponent[o1]));
    });
  });
}

}  // namespace anvil::cpu
