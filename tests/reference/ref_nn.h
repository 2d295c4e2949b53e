#pragma once
// Neural-network op references in float64: linear, softmax / log_softmax, rms_norm (and the
// residual-add variant), silu_mul and neox rope. Plain loops over rows; the inputs are values
// already representable in the tested dtype, and nothing is rounded unless the op's definition
// rounds it (h of add_rms_norm, rope's float32 angle).
#include <vector>

#include "reference/ref_array.h"

namespace ref {

// A precision an op rounds an intermediate to (float16 / bfloat16 through ref::encode).
enum class Prec { F64, F32, BF16, F16 };
double round_to(Prec p, double v);

// torch.nn.functional.linear: x [*, k], w [n, k] -> [*, n] (w [k] -> [*]); bias (null: none)
// broadcast to the output and added after the double dot product.
Array linear(const Array& x, const Array& w, const Array* bias = nullptr);

// softmax / log_softmax along `dim` (0-dim input: dim 0 or -1, one element). A row holding a
// NaN is all NaN; a row of all -inf is NaN (PyTorch CPU); -inf entries give 0 / -inf.
Array softmax(const Array& x, int64_t dim);
Array log_softmax(const Array& x, int64_t dim);
// Tolerance scales per element: |x - max of its row| and log(sum exp(x - max)) of its row.
struct SoftmaxScale {
  Array spread;
  Array log_sum;
};
SoftmaxScale softmax_scale(const Array& x, int64_t dim);

// rms_norm over the last `norm_dims` dims: x / sqrt(mean(x^2) + eps) * weight (null: 1);
// weight has the shape of those dims.
Array rms_norm(const Array& x, int64_t norm_dims, const Array* weight, double eps);
// F.normalize: x / max(||x||_p along dim, eps) (p inf / -inf: max / min |x|; 0: the count of
// nonzeros; else (sum |x|^p)^(1/p)); a 0-dim x is its own row.
Array normalize(const Array& x, double p, int64_t dim, double eps);

// h = round_to(p, x + residual) (what the op stores), out = rms_norm(h).
struct AddRmsNorm {
  Array out;
  Array h;
};
AddRmsNorm add_rms_norm(const Array& x, const Array& residual, int64_t norm_dims, const Array* weight, double eps, Prec p);

// silu(gate) * up, silu(g) = g / (1 + exp(-g)); same shapes.
Array silu_mul(const Array& gate, const Array& up);

// Neox rope over the last dim (head_dim) of x: positions (integers, broadcast to x's leading
// dims) and float32 inv_freq [half]; for c < half, angle = float32(float32(pos) * inv_freq[c]),
// (a, b) = (x[c], x[c + half]) -> (a cos - b sin, b cos + a sin) with cos / sin in double;
// columns >= 2 * half are copied.
Array rope(const Array& x, const Array& positions, const std::vector<float>& inv_freq);
// |a| + |b| of the pair each output element comes from (0 for copied columns): the scale of
// the rounding error of a rotation.
Array rope_scale(const Array& x, int64_t rotary_dim);

}  // namespace ref
