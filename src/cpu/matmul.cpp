// CPU GEMM: float32/float64 through OpenBLAS; bfloat16/float16 through our own packed-panel
// kernel (Highway micro-kernel, float32 accumulation like PyTorch CPU, one rounding on store).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/matmul.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

// Row-major (lda = row stride) or column-major (transposed) view of one operand.
struct BlasOperand {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};
BlasOperand blas_layout(int64_t stride_row, int64_t stride_col, int64_t cols) {
  if (stride_col == 1) return {CblasNoTrans, std::max<int64_t>(stride_row, cols)};
  return {CblasTrans, stride_col};
}

// bfloat16 with B = W^T of a row-major W (linear's weight: unit stride along k), where the CPU has
// AVX512-BF16: blocks of W rows against 8 rows of A at a time through simd::bf16_dots. A block
// (~128 KB) stays in L2 while all of A passes over it, so W leaves memory once and every product
// runs on vdpbf16ps (the panel path widens every weight to float32 one element at a time:
// qwen3-0.6b prefill of 64 tokens on 2 Zen 5 threads 55 -> see docs/PERFORMANCE.md). float32
// accumulation, one rounding. A's bfloat16 rows are copied into the kernel's layout as they are
// (no float32 round trip: a conv's 14400 x 864 columns were widened to 50 MB first), the k % 64
// tail widened on its own. false: no such path (nothing written).
constexpr int64_t kTiledRows = 32;  // bfloat16 GEMMs with at least this many rows take AMX tiles (one block)

bool bf16_dots_applies(const BmmParams& p) {
  return p.stride_b_row == 1 && p.k >= 64 && simd::bf16_dots_supported();
}

template <typename Store>
void gemm_bf16_dots(const BmmParams& p, const BFloat16* A, const BFloat16* B, const Store& store) {
  const int64_t m = p.m, n = p.n, k = p.k;
  const int64_t k64 = k / 64 * 64, tail = k - k64;
  std::vector<uint16_t> xp(static_cast<size_t>(m * k64));
  std::vector<float> xt(static_cast<size_t>(std::max<int64_t>(1, m * tail)));
#pragma omp parallel for schedule(static) if (m * k >= kParallelGrain)
  for (int64_t i = 0; i < m; ++i) {
    const BFloat16* a = A + i * p.stride_a_row;
    uint16_t* dst = xp.data() + i * k64;
    if (p.stride_a_col == 1) std::memcpy(dst, a, static_cast<size_t>(k64) * sizeof(uint16_t));
    else
      for (int64_t q = 0; q < k64; ++q) std::memcpy(dst + q, a + q * p.stride_a_col, sizeof(uint16_t));
    for (int64_t q = k64; q < k; ++q) xt[static_cast<size_t>(i * tail + q - k64)] = static_cast<float>(a[q * p.stride_a_col]);
  }
  const float* x_tail = xt.data() - k64;  // row i's column q (>= k64) at x_tail[i * tail + q]
  const int64_t rows = std::max<int64_t>(8, std::min<int64_t>(256, (int64_t{128} << 10) / (2 * k)) / 8 * 8);
  const int64_t blocks = (n + rows - 1) / rows;
#pragma omp parallel if (m * n * k >= kParallelGrain)
  {
    std::vector<float> dots(static_cast<size_t>(8 * rows));
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * rows, w = std::min(rows, n - j0);
      for (int64_t i0 = 0; i0 < m; i0 += 8) {
        const int64_t mi = std::min<int64_t>(8, m - i0);
        simd::bf16_dots_packed(B + j0 * p.stride_b_col, p.stride_b_col, xp.data() + i0 * k64, x_tail + i0 * tail, tail,
                               mi, k, dots.data(), w, 0, w);
        for (int64_t i = 0; i < mi; ++i) store.row(i0 + i, j0, dots.data() + i * w, w);
      }
    }
  }
}

// bfloat16 / float16 GEMM of one batch: A widened to float32 a block of rows at a time (the
// float32 copies of a block's A and C rows within 32 MiB: an m of 2^31, a one-channel conv
// reading its input as columns, would otherwise widen 33 GB at once), B packed panel by panel
// (widened, zero-padded to the panel width) by the thread that owns the panel, a Highway
// micro-kernel over each panel, one rounding per output element. With fewer panels than
// threads a panel's rows are split too (each element's sum runs over k alone, so the split
// changes no bits). store.row(i, j0, v, n) writes C.
template <typename T, typename Store>
void gemm_lowp(const BmmParams& p, const T* A, const T* B, const Store& store) {
  const int64_t m = p.m, n = p.n, k = p.k;
  if constexpr (std::is_same_v<T, BFloat16>) {
    // Many rows: AMX tiles where the CPU has them (docs/PERFORMANCE.md); few: the GEMV dots.
    if (m >= kTiledRows && n >= 16 && k >= 32 &&  // smaller ones would mostly multiply the tiles' zero padding
        simd::bf16_gemm(reinterpret_cast<const uint16_t*>(A), p.stride_a_row, p.stride_a_col,
                        reinterpret_cast<const uint16_t*>(B), p.stride_b_row, p.stride_b_col, m, n, k,
                        [&](int64_t i0, int64_t rows, const float* c) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain)
                          for (int64_t i = 0; i < rows; ++i) store.row(i0 + i, 0, c + i * n, n);
                        }))
      return;
    if (bf16_dots_applies(p)) return gemm_bf16_dots(p, A, B, store);
    // Row-major A and B (a convolution's weights times its columns): AVX512-BF16 pair products
    // over packed column panels. bf16 [1, 128, 64, 64] k3 conv on 2 Zen 5 threads: see
    // docs/PERFORMANCE.md (session 23).
    if (p.stride_a_col == 1 && p.stride_b_col == 1 && k >= 2) {
      // Each panel's float32 results stored from the thread's tile (no [m, n] float32 buffer).
      std::vector<const uint16_t*> a_rows(static_cast<size_t>(m)), b_rows(static_cast<size_t>(k));
      for (int64_t i = 0; i < m; ++i) a_rows[static_cast<size_t>(i)] = reinterpret_cast<const uint16_t*>(A + i * p.stride_a_row);
      for (int64_t q = 0; q < k; ++q) b_rows[static_cast<size_t>(q)] = reinterpret_cast<const uint16_t*>(B + q * p.stride_b_row);
      auto emit = [&](int64_t j0, int64_t w, float* tile) {
        for (int64_t i = 0; i < m; ++i) store.row(i, j0, tile + i * simd::kPairPanel, w);
      };
      if (simd::bf16_pair_gemm({.a_rows = a_rows.data(), .b_rows = b_rows.data(), .m = m, .n = n, .k = k, .emit = emit}))
        return;
    }
  }
  const int64_t width = simd::gemm_panel_width();
  const int64_t npanels = (n + width - 1) / width;
  const int64_t mb = std::min(m, std::max<int64_t>(64, (int64_t{8} << 20) / std::max<int64_t>(1, k + n) / 4 * 4));
  const int64_t threads = omp_get_max_threads();
  std::vector<float> a32(static_cast<size_t>(mb * k)), c32(static_cast<size_t>(mb * n));
  for (int64_t i0 = 0; i0 < m; i0 += mb) {
    const int64_t rows = std::min(mb, m - i0);
#pragma omp parallel for schedule(static) if (rows * k >= kParallelGrain)
    for (int64_t i = 0; i < rows; ++i) {
      if (p.stride_a_col == 1) {  // a row of A widened by SIMD (exact, as the scalar cast)
        simd::decode_f32(dtype_of<T>::value, A + (i0 + i) * p.stride_a_row, a32.data() + i * k, k);
        continue;
      }
      for (int64_t q = 0; q < k; ++q)
        a32[static_cast<size_t>(i * k + q)] = static_cast<float>(A[(i0 + i) * p.stride_a_row + q * p.stride_a_col]);
    }
    const int64_t parts =
        npanels >= threads ? 1 : std::max<int64_t>(1, std::min((threads + npanels - 1) / npanels, rows / 256));
#pragma omp parallel if (rows * n * k >= kParallelGrain)
    {
      std::vector<float> panel(static_cast<size_t>(k * width));
#pragma omp for schedule(static)
      for (int64_t task = 0; task < npanels * parts; ++task) {
        const int64_t blk = task / parts, part = task % parts;
        const int64_t j0 = blk * width, w = std::min(width, n - j0);
        const int64_t r0 = rows * part / parts, r1 = rows * (part + 1) / parts;
        for (int64_t q = 0; q < k; ++q) {
          float* row = panel.data() + q * width;
          if (p.stride_b_col == 1) {  // the panel's slice of a row of B widened by SIMD
            simd::decode_f32(dtype_of<T>::value, B + q * p.stride_b_row + j0, row, w);
            std::fill(row + w, row + width, 0.f);
            continue;
          }
          for (int64_t j = 0; j < width; ++j)
            row[j] = j < w ? static_cast<float>(B[q * p.stride_b_row + (j0 + j) * p.stride_b_col]) : 0.f;
        }
        simd::gemm_panel(a32.data() + r0 * k, r1 - r0, k, panel.data(), c32.data() + r0 * n + j0, n, w);
      }
    }
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain)
    for (int64_t i = 0; i < rows; ++i) store.row(i0 + i, 0, c32.data() + i * n, n);
  }
}

// C[i, j] (=|+=) v for one batch's C of type C_t, the sum formed in float32, one rounding;
// row(i, j0, v, n) stores n consecutive values of row i (SIMD-rounded when C is overwritten).
template <typename C_t>
struct LowpStore {
  C_t* C;
  int64_t ldc;
  bool accumulate;
  void operator()(int64_t i, int64_t j, float v) const {
    C_t& c = C[i * ldc + j];
    c = C_t(accumulate ? static_cast<float>(c) + v : v);
  }
  void row(int64_t i, int64_t j0, const float* v, int64_t n) const {
    if (accumulate) {
      for (int64_t j = 0; j < n; ++j) (*this)(i, j0 + j, v[j]);
    } else if constexpr (std::is_same_v<C_t, float>) {
      std::memcpy(C + i * ldc + j0, v, static_cast<size_t>(n) * sizeof(float));
    } else {
      simd::encode_f32(dtype_of<C_t>::value, v, C + i * ldc + j0, n);
    }
  }
};
template <typename C_t>
LowpStore<C_t> lowp_store(C_t* C, int64_t ldc, bool accumulate) {
  return {C, ldc, accumulate};
}

}  // namespace

void bmm(const BmmParams& p) {
  const int64_t m = p.m, n = p.n, k = p.k;
  const bool lowp = p.dtype == DType::Float16 || p.dtype == DType::BFloat16;
  ANVIL_CHECK(p.c_dtype == p.dtype || (lowp && p.c_dtype == DType::Float32), DTypeError, "[bmm] output dtype ",
              dtype_name(p.c_dtype), " does not fit ", dtype_name(p.dtype), " operands");
  if (p.dtype == DType::Float32 || p.dtype == DType::Float64 || p.dtype == DType::Complex64) {
    BlasOperand la = blas_layout(p.stride_a_row, p.stride_a_col, k);
    BlasOperand lb = blas_layout(p.stride_b_row, p.stride_b_col, n);
    // OpenBLAS's sizes and leading dimensions are 32-bit ints: past them it would compute garbage.
    const int64_t kIntMax = 2147483647;
    ANVIL_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax && la.ld <= kIntMax && lb.ld <= kIntMax &&
                    p.stride_c_row <= kIntMax,
                ShapeError, "[bmm] OpenBLAS takes 32-bit sizes: m ", m, ", n ", n, ", k ", k, " and leading dimensions ",
                la.ld, ", ", lb.ld, ", ", p.stride_c_row, " must be < 2^31");
    // C's rows [r0, r1) of batch b, one OpenBLAS call (A's row i: row i of a NoTrans operand,
    // column i of a transposed one).
    auto gemm_rows = [&](int64_t b, int64_t r0, int64_t r1) {
      const int64_t a_off = b * p.stride_a_batch + r0 * (la.trans == CblasNoTrans ? la.ld : 1);
      const int64_t c_off = b * p.stride_c_batch + r0 * p.stride_c_row;
      const int rows = static_cast<int>(r1 - r0);
      if (p.dtype == DType::Float32)
        cblas_sgemm(CblasRowMajor, la.trans, lb.trans, rows, n, k, 1.f, static_cast<const float*>(p.a) + a_off, la.ld,
                    static_cast<const float*>(p.b) + b * p.stride_b_batch, lb.ld, p.accumulate ? 1.f : 0.f,
                    static_cast<float*>(p.c) + c_off, p.stride_c_row);
      else if (p.dtype == DType::Float64)
        cblas_dgemm(CblasRowMajor, la.trans, lb.trans, rows, n, k, 1.0, static_cast<const double*>(p.a) + a_off, la.ld,
                    static_cast<const double*>(p.b) + b * p.stride_b_batch, lb.ld, p.accumulate ? 1.0 : 0.0,
                    static_cast<double*>(p.c) + c_off, p.stride_c_row);
      else {
        const Complex64 one(1.f, 0.f), beta(p.accumulate ? 1.f : 0.f, 0.f);
        cblas_cgemm(CblasRowMajor, la.trans, lb.trans, rows, n, k, &one, static_cast<const Complex64*>(p.a) + a_off,
                    la.ld, static_cast<const Complex64*>(p.b) + b * p.stride_b_batch, lb.ld, &beta,
                    static_cast<Complex64*>(p.c) + c_off, p.stride_c_row);
      }
    };
    // OpenBLAS's own threads split C with few columns badly (2 Zen 5 threads, float32: C [512, 64]
    // with k 3584, an EnCodec conv1d, 2.9 ms; [256, 32] k 2048 0.65 ms), and even [1024, 1024]^2
    // 12.9 ms: as one single-threaded call per thread on its share of C's rows 1.22, 0.20, 10.8
    // ms. Inside a parallel region OpenBLAS's OpenMP build runs single-threaded. C with fewer
    // rows than columns (a conv's [64, 3136] per tap) stays with OpenBLAS's split (1.25 vs 1.57
    // ms by rows). The bits follow the split (OpenBLAS picks kernels by block shape: C [300, 70]
    // k 1000 differs in 71 % of elements from OpenBLAS's own split), fixed for a thread count.
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    const bool by_rows = nt > 1 && (m >= 256 || m >= n) && m >= 16 * nt && 2.0 * m * n * k >= 4e6;
    for (int64_t b = 0; b < p.batch; ++b) {
      if (!by_rows) {
        gemm_rows(b, 0, m);
        continue;
      }
#pragma omp parallel num_threads(nt)
      {
        const int t = omp_get_thread_num(), n_t = omp_get_num_threads();
        const int64_t r0 = m * t / n_t / 8 * 8, r1 = t + 1 == n_t ? m : m * (t + 1) / n_t / 8 * 8;
        if (r1 > r0) gemm_rows(b, r0, r1);
      }
    }
    return;
  }
  dispatch_float_types(p.dtype, "[bmm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      for (int64_t b = 0; b < p.batch; ++b) {
        const T* A = static_cast<const T*>(p.a) + b * p.stride_a_batch;
        const T* B = static_cast<const T*>(p.b) + b * p.stride_b_batch;
        if (p.c_dtype == DType::Float32)
          gemm_lowp(p, A, B, lowp_store(static_cast<float*>(p.c) + b * p.stride_c_batch, p.stride_c_row, p.accumulate));
        else
          gemm_lowp(p, A, B, lowp_store(static_cast<T*>(p.c) + b * p.stride_c_batch, p.stride_c_row, p.accumulate));
      }
    }
  });
}

}  // namespace anvil::cpu
