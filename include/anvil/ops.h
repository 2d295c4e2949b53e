#pragma once
// Core ops with libtorch's names and argument order. Broadcasting and any strides everywhere.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "anvil/tensor.h"

namespace anvil {

// ---- type promotion (torch.result_type): dimensioned tensors > 0-dim tensors > Scalars.
ANVIL_API DType result_type(const Tensor& a, const Tensor& b);
ANVIL_API DType result_type(const Tensor& a, const Scalar& b);
ANVIL_API Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---- elementwise
ANVIL_API Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
ANVIL_API Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
ANVIL_API Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
ANVIL_API Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
ANVIL_API Tensor mul(const Tensor& a, const Tensor& b);
ANVIL_API Tensor mul(const Tensor& a, const Scalar& b);
// rounding_mode: "" (true division, integers promote to float32), "trunc" or "floor".
ANVIL_API Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode = "");
ANVIL_API Tensor div(const Tensor& a, const Scalar& b, const std::string& rounding_mode = "");
ANVIL_API Tensor pow(const Tensor& a, const Tensor& b);
ANVIL_API Tensor pow(const Tensor& a, const Scalar& b);
ANVIL_API Tensor maximum(const Tensor& a, const Tensor& b);
ANVIL_API Tensor minimum(const Tensor& a, const Tensor& b);
ANVIL_API Tensor neg(const Tensor& x);
ANVIL_API Tensor abs(const Tensor& x);
// The complex conjugate as a new tensor (a copy for real dtypes), as torch.conj_physical.
ANVIL_API Tensor conj_physical(const Tensor& x);
// A complex64 tensor's float32 view with a last dim of 2 (real, imaginary), as
// torch.view_as_real; real / imag are its two slices (views). real of a real tensor is itself.
ANVIL_API Tensor view_as_real(const Tensor& x);
ANVIL_API Tensor real(const Tensor& x);
ANVIL_API Tensor imag(const Tensor& x);
ANVIL_API Tensor exp(const Tensor& x);
ANVIL_API Tensor log(const Tensor& x);
ANVIL_API Tensor sqrt(const Tensor& x);
ANVIL_API Tensor rsqrt(const Tensor& x);
ANVIL_API Tensor sigmoid(const Tensor& x);
ANVIL_API Tensor silu(const Tensor& x);
ANVIL_API Tensor gelu(const Tensor& x, const std::string& approximate = "none");  // "none" | "tanh"
ANVIL_API Tensor tanh(const Tensor& x);
ANVIL_API Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
ANVIL_API Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
// The upper / lower triangle of the last two dims (the rest zeroed), as torch.triu / tril:
// element (i, j) is kept when j - i >= diagonal (triu) or j - i <= diagonal (tril).
ANVIL_API Tensor triu(const Tensor& x, int64_t diagonal = 0);
ANVIL_API Tensor tril(const Tensor& x, int64_t diagonal = 0);
ANVIL_API Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
ANVIL_API Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);
ANVIL_API Tensor eq(const Tensor& a, const Tensor& b);
ANVIL_API Tensor ne(const Tensor& a, const Tensor& b);
ANVIL_API Tensor lt(const Tensor& a, const Tensor& b);
ANVIL_API Tensor le(const Tensor& a, const Tensor& b);
ANVIL_API Tensor gt(const Tensor& a, const Tensor& b);
ANVIL_API Tensor ge(const Tensor& a, const Tensor& b);
ANVIL_API Tensor eq(const Tensor& a, const Scalar& b);
ANVIL_API Tensor ne(const Tensor& a, const Scalar& b);
ANVIL_API Tensor lt(const Tensor& a, const Scalar& b);
ANVIL_API Tensor le(const Tensor& a, const Scalar& b);
ANVIL_API Tensor gt(const Tensor& a, const Scalar& b);
ANVIL_API Tensor ge(const Tensor& a, const Scalar& b);
ANVIL_API Tensor logical_and(const Tensor& a, const Tensor& b);
ANVIL_API Tensor logical_or(const Tensor& a, const Tensor& b);
ANVIL_API Tensor logical_not(const Tensor& x);
// 0 where x < 0, values where x == 0, 1 where x > 0 (NaN stays NaN); x and values of one dtype.
ANVIL_API Tensor heaviside(const Tensor& x, const Tensor& values);
// (mantissa, exponent) with x = mantissa * 2^exponent, |mantissa| in [0.5, 1), exponent int32;
// 0, inf and NaN give themselves and exponent 0, as C's frexp.
ANVIL_API std::tuple<Tensor, Tensor> frexp(const Tensor& x);
// Laguerre polynomial L_n(x) by its recurrence (n < 0 gives 0, n truncated to an integer).
ANVIL_API Tensor special_laguerre_polynomial_l(const Tensor& x, const Tensor& n);
ANVIL_API Tensor special_laguerre_polynomial_l(const Tensor& x, const Scalar& n);
ANVIL_API Tensor special_laguerre_polynomial_l(const Scalar& x, const Tensor& n);

ANVIL_API Tensor operator+(const Tensor& a, const Tensor& b);
ANVIL_API Tensor operator-(const Tensor& a, const Tensor& b);
ANVIL_API Tensor operator*(const Tensor& a, const Tensor& b);
ANVIL_API Tensor operator/(const Tensor& a, const Tensor& b);
ANVIL_API Tensor operator-(const Tensor& a);

// ---- reductions. Empty `dims` reduces every dim. Low-precision floats accumulate in float32.
ANVIL_API Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
ANVIL_API Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
ANVIL_API Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
ANVIL_API Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
ANVIL_API Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
ANVIL_API Tensor max(const Tensor& x);  // 0-dim, NaN propagates
ANVIL_API Tensor min(const Tensor& x);
// (values, indices); ties give the first index, a NaN wins and gives its index.
ANVIL_API std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
ANVIL_API std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
ANVIL_API Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
ANVIL_API Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
ANVIL_API Tensor var(const Tensor& x, const Shape& dims = {}, double correction = 1, bool keepdim = false);
ANVIL_API Tensor std(const Tensor& x, const Shape& dims = {}, double correction = 1, bool keepdim = false);
// (var, mean) and (std, mean) from one pass, the mean as mean(x, dims) would give it.
ANVIL_API std::tuple<Tensor, Tensor> var_mean(const Tensor& x, const Shape& dims = {}, double correction = 1,
                                              bool keepdim = false);
ANVIL_API std::tuple<Tensor, Tensor> std_mean(const Tensor& x, const Shape& dims = {}, double correction = 1,
                                              bool keepdim = false);

// ---- indexing
ANVIL_API Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
ANVIL_API Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
ANVIL_API Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
ANVIL_API Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
ANVIL_API Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
ANVIL_API Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
// The coordinates of x's non-zero elements (NaN counts, as != 0), int64 [count, x.dim()] in
// row-major order. The count sizes the result: the op reads it back to the host (its one sync,
// as PyTorch's nonzero).
ANVIL_API Tensor nonzero(const Tensor& x);
// x's elements where mask (bool, broadcast with x) is true, as a 1-d tensor in row-major order
// (one host sync, as nonzero).
ANVIL_API Tensor masked_select(const Tensor& x, const Tensor& mask);
ANVIL_API Tensor embedding(const Tensor& weight, const Tensor& indices);
// x's elements at flat row-major positions `index` (int64, any shape; negative counts from the
// end): the result has index's shape.
ANVIL_API Tensor take(const Tensor& x, const Tensor& index);
// A copy of x with put_(index, source, accumulate) applied.
ANVIL_API Tensor put(const Tensor& x, const Tensor& index, const Tensor& source, bool accumulate = false);
// Counts of each value of a 1-d tensor of non-negative integers, size max(max(x) + 1,
// minlength): int64, or with weights (x's shape) their sums, float32 for float32 weights and
// float64 for any other. Reads max(x) back to the host (the output's size depends on it).
ANVIL_API Tensor bincount(const Tensor& x, const Tensor& weights = {}, int64_t minlength = 0);

// ---- cache hints
// Asks the device's last-level cache for x's bytes (CUDA: L2, through the bulk copy engine, on
// the current stream); with index (int32 / int64, any shape, on x's device), for the slices
// x[i] along dim 0 of its elements i only, those outside [0, x.size(0)) skipped. Values are unchanged and nothing
// waits for the bytes: run on a side stream, it pulls the weights a later kernel reads into L2
// while latency-bound kernels leave DRAM idle. On CPU it does nothing (a weight is larger than
// the caches, and the hardware prefetchers follow the streams).
ANVIL_API void cache_prefetch(const Tensor& x, const Tensor& index = {});

// ---- matrix products (float32/64 via BLAS, bfloat16/float16 accumulate in float32)
ANVIL_API Tensor mm(const Tensor& a, const Tensor& b);
// out_dtype (torch.bmm's): float32 for bfloat16 / float16 inputs keeps the float32 sums unrounded
// (on both devices; PyTorch has it on CUDA); otherwise it must be the inputs' dtype.
ANVIL_API Tensor bmm(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype = std::nullopt);
ANVIL_API Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace anvil
