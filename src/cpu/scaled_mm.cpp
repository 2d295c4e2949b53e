// CPU scaled products (scaled_mm, scaled_linear, and the groups of grouped_mm):
// out[i, j] = round(dot(a[i, :], w[j, :]) * (sa(i) * sw(j)) + bias[j]) with float32 dots.
// Few rows with a unit-stride weight stream the weight once through the shared GEMV core
// (float8 decoded in registers); more rows widen both operands to float32 and run OpenBLAS
// sgemm. The scales, bias and rounding are one epilogue over the float32 dots; block scales of
// the weight act inside the dots (per block of k) or on the widened weight, those of a (scaled_mm's
// block-wise recipes) on its widened rows.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scaled_mm.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/scaled_mm.h"
#include "cpu/simd-inl.h"
#include "cpu/simd.h"
#include "cpu/gemv-inl.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {

// dots[i * stride_d + j] for weight rows [j0, j1) and m <= 8 rows of x.
template <typename T>
void DotsT(const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, float* dots, int64_t stride_d,
           int64_t j0, int64_t j1) {
  Gemv(static_cast<const T*>(w), stride_w, x, m, k, j0, j1,
       [&](int64_t i, int64_t j, float s) { dots[i * stride_d + j] = s; });
}
#define ANVIL_DOTS(Name, T)                                                                                   \
  void Name(const void* w, int64_t sw, const float* x, int64_t m, int64_t k, float* d, int64_t sd, int64_t j0, \
            int64_t j1) {                                                                                     \
    DotsT<T>(w, sw, x, m, k, d, sd, j0, j1);                                                                  \
  }
ANVIL_DOTS(DotsF32, float)
ANVIL_DOTS(DotsBF16, BFloat16)
ANVIL_DOTS(DotsF16, Half)
ANVIL_DOTS(DotsE4M3, Float8_e4m3fn)
ANVIL_DOTS(DotsE5M2, Float8_e5m2)
#undef ANVIL_DOTS

// The same with block scales applied per block inside the dots; false (nothing written) when
// block_k is not a multiple of two vectors of this target.
template <typename T>
bool DotsBlockedT(const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, float* dots, int64_t stride_d,
                  int64_t j0, int64_t j1, const BlockScale* block) {
  const hn::ScalableTag<float> df;
  if (block->block_k % (2 * static_cast<int64_t>(hn::Lanes(df))) != 0) return false;
  Gemv<T, true>(static_cast<const T*>(w), stride_w, x, m, k, j0, j1,
                [&](int64_t i, int64_t j, float s) { dots[i * stride_d + j] = s; }, block);
  return true;
}
bool DotsBlockedE4M3(const void* w, int64_t sw, const float* x, int64_t m, int64_t k, float* d, int64_t sd, int64_t j0,
                     int64_t j1, const BlockScale* b) {
  return DotsBlockedT<Float8_e4m3fn>(w, sw, x, m, k, d, sd, j0, j1, b);
}
bool DotsBlockedE5M2(const void* w, int64_t sw, const float* x, int64_t m, int64_t k, float* d, int64_t sd, int64_t j0,
                     int64_t j1, const BlockScale* b) {
  return DotsBlockedT<Float8_e5m2>(w, sw, x, m, k, d, sd, j0, j1, b);
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu {
namespace simd {
HWY_EXPORT(DotsF32);
HWY_EXPORT(DotsBF16);
HWY_EXPORT(DotsF16);
HWY_EXPORT(DotsE4M3);
HWY_EXPORT(DotsE5M2);
HWY_EXPORT(DotsBlockedE4M3);
HWY_EXPORT(DotsBlockedE5M2);

void gemv_dots(DType t, const void* w, int64_t sw, const float* x, int64_t m, int64_t k, float* d, int64_t sd,
               int64_t j0, int64_t j1, bool x_bf16, const BlockScale* block) {
  if (x_bf16 && bf16_dots(t, w, sw, x, m, k, d, sd, j0, j1, block)) return;
  if (block) {
    if (t == DType::Float8_e4m3fn && HWY_DYNAMIC_DISPATCH(DotsBlockedE4M3)(w, sw, x, m, k, d, sd, j0, j1, block)) return;
    if (t == DType::Float8_e5m2 && HWY_DYNAMIC_DISPATCH(DotsBlockedE5M2)(w, sw, x, m, k, d, sd, j0, j1, block)) return;
    // Any other block shape: each row decoded to float32 and scaled block by block, then the
    // float32 dot.
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(k));
    const size_t esize = element_size(t);
    for (int64_t j = j0; j < j1; ++j) {
      decode_f32(t, static_cast<const char*>(w) + j * sw * static_cast<int64_t>(esize), row.data(), k);
      const float* srow = block->scale + j / block->block_n * block->stride_row;
      for (int64_t q0 = 0, b = 0; q0 < k; q0 += block->block_k, ++b) {
        const int64_t q1 = std::min(k, q0 + block->block_k);
        for (int64_t q = q0; q < q1; ++q) row[static_cast<size_t>(q)] *= srow[b];
      }
      HWY_DYNAMIC_DISPATCH(DotsF32)(row.data(), k, x, m, k, d + j, sd, 0, 1);
    }
    return;
  }
  dispatch_all_types(t, "[scaled_mm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) HWY_DYNAMIC_DISPATCH(DotsF32)(w, sw, x, m, k, d, sd, j0, j1);
    else if constexpr (std::is_same_v<T, BFloat16>) HWY_DYNAMIC_DISPATCH(DotsBF16)(w, sw, x, m, k, d, sd, j0, j1);
    else if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(DotsF16)(w, sw, x, m, k, d, sd, j0, j1);
    else if constexpr (std::is_same_v<T, Float8_e4m3fn>) HWY_DYNAMIC_DISPATCH(DotsE4M3)(w, sw, x, m, k, d, sd, j0, j1);
    else if constexpr (std::is_same_v<T, Float8_e5m2>) HWY_DYNAMIC_DISPATCH(DotsE5M2)(w, sw, x, m, k, d, sd, j0, j1);
    else throw DTypeError(detail::cat_message("[scaled_mm] no GEMV dots for ", dtype_name(t), " weights"));
  });
}

}  // namespace simd

namespace {

// Below this many weight elements one thread reads the weight faster than a team wakes up.
constexpr int64_t kParallelElements = 1 << 16;

bool has_simd_dots(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16 || is_float8(t);
}

// src[r * s_row + c * s_col] widened to float32 dst[r * cols + c] (exact for every input dtype),
// times its block scale when `block` has one.
void widen(const void* src, DType t, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, float* dst,
           const BlockScale& block = {}) {
  dispatch_all_types(t, "[scaled_mm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_complex_v<T>) {
      const T* s = static_cast<const T*>(src);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(s[r * s_row + c * s_col]);
        if (block.scale) {
          const float* srow = block.scale + r / block.block_n * block.stride_row;
          for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] *= srow[c / block.block_k * block.stride_col];
        }
      }
    }
  });
}

// The grid of `b` for `rows` rows and k columns with unit stride along the blocks of k (the
// dots' layout): b itself when it has it, else a copy in `store`.
BlockScale unit_col_blocks(const BlockScale& b, int64_t rows, int64_t k, std::vector<float>& store) {
  if (!b.scale || b.stride_col == 1) return b;
  const int64_t rb = (rows + b.block_n - 1) / b.block_n, kb = (k + b.block_k - 1) / b.block_k;
  store.resize(static_cast<size_t>(rb * kb));
  for (int64_t r = 0; r < rb; ++r)
    for (int64_t c = 0; c < kb; ++c) store[static_cast<size_t>(r * kb + c)] = b.scale[r * b.stride_row + c * b.stride_col];
  BlockScale u = b;
  u.scale = store.data();
  u.stride_row = kb;
  u.stride_col = 1;
  return u;
}

}  // namespace

void scaled_mm(const ScaledMmParams& p) {
  const int64_t m = p.m, n = p.n, k = p.k;
  std::vector<float> a32(static_cast<size_t>(m * k)), dots(static_cast<size_t>(m * n)), w_grid;
  // a's block scales (scaled_mm's block-wise recipes) act on the widened rows: each element
  // times its block's scale in float32, so the dots carry both scales of a block.
  widen(p.a, p.a_dtype, m, k, p.stride_a_row, p.stride_a_col, a32.data(), p.a_block);
  const BlockScale w_block = unit_col_blocks(p.w_block, n, k, w_grid);
  if (m <= kGemvMaxRows && (p.stride_w_col == 1 || k == 1) && has_simd_dots(p.w_dtype)) {
    // Contiguous weight-row ranges, multiples of 4 rows, one per thread.
#pragma omp parallel if (n * k >= kParallelElements)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t blocks = (n + 3) / 4;
      const int64_t j0 = std::min(n, blocks * t / nt * 4), j1 = std::min(n, blocks * (t + 1) / nt * 4);
      if (j0 < j1)
        simd::gemv_dots(p.w_dtype, p.w, p.stride_w_row, a32.data(), m, k, dots.data(), n, j0, j1,
                        // float8 values are bfloat16 values (not once times a block scale)
                        (p.a_dtype == DType::BFloat16 || is_float8(p.a_dtype)) && !p.a_block.scale,
                        w_block.scale ? &w_block : nullptr);
    }
  } else {
    std::vector<float> w32(static_cast<size_t>(n * k));
    widen(p.w, p.w_dtype, n, k, p.stride_w_row, p.stride_w_col, w32.data(), w_block);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.f, a32.data(), static_cast<int>(k), w32.data(), static_cast<int>(k), 0.f,
                dots.data(), static_cast<int>(n));
  }
  // Epilogue: scale product and bias in float32, one rounding.
  dispatch_float_types(p.out_dtype, "[scaled_mm]", [&](auto out_tag) {
    using O = typename decltype(out_tag)::type;
    O* out = static_cast<O*>(p.out);
    std::vector<float> bias(static_cast<size_t>(p.bias ? n : 0));
    if (p.bias) widen(p.bias, p.bias_dtype, 1, n, n, 1, bias.data());
#pragma omp parallel for schedule(static) if (m * n >= kParallelElements)
    for (int64_t i = 0; i < m; ++i) {
      const float sa = p.scale_a ? p.scale_a[p.scale_a_per_row ? i : 0] : 1.f;
      for (int64_t j = 0; j < n; ++j) {
        const float sw = p.scale_w ? p.scale_w[p.scale_w_per_row ? j : 0] : 1.f;
        float s = dots[static_cast<size_t>(i * n + j)] * (sa * sw);
        if (p.bias) s += bias[static_cast<size_t>(j)];
        out[i * p.stride_out_row + j] = O(s);
      }
    }
  });
}

}  // namespace anvil::cpu
#endif  // HWY_ONCE
