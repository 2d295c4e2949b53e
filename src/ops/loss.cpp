// Losses: mse_loss and l1_loss with their backward, composed from the elementwise and reduction
// ops (each already one kernel per backend), in PyTorch's order of operations so that the
// roundings match its kernels.
#include "anvil/loss.h"

#include <algorithm>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/util.h"

namespace anvil {
namespace {

Tensor reduced(const Tensor& loss, Reduction reduction) {
  if (reduction == Reduction::Mean) return mean(loss);
  if (reduction == Reduction::Sum) return sum(loss);
  return loss;
}

// The promoted dtype of input and target (and grad_output when given), floating only: the dtype
// every loss and backward computes in.
DType floating_dtype(const char* name, const char* kernel, const Tensor& input, const Tensor& target,
                     const Tensor* grad = nullptr) {
  ANVIL_CHECK(input.defined() && target.defined() && (!grad || grad->defined()), Error, name, " undefined tensor");
  check_same_device(name, input, target);
  DType t = as_op(name, [&] { return result_type(input, target); });
  if (grad) {
    check_same_device(name, input, *grad);
    t = promote_types(t, grad->dtype());
  }
  ANVIL_CHECK(is_floating_point(t) && !is_float8(t), DTypeError, name, " \"", kernel, "\" not implemented for '",
              dtype_name(t), "'");
  return t;
}

int64_t broadcast_numel(const char* name, const Tensor& a, const Tensor& b) {
  return shape_numel(as_op(name, [&] { return broadcast_shapes(a.sizes(), b.sizes()); }));
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* name = "[mse_loss]";
  const DType t = floating_dtype(name, "mse", input, target);
  return as_op(name, [&] {
    const Tensor d = sub(input.to(t), target.to(t));
    return reduced(mul(d, d), reduction);
  });
}

Tensor mse_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* name = "[mse_loss_backward]";
  const DType t = floating_dtype(name, "mse_backward", input, target, &grad_output);
  const double norm = reduction == Reduction::Mean ? 2.0 / static_cast<double>(broadcast_numel(name, input, target)) : 2.0;
  return as_op(name, [&] {
    // aten: alpha * (a - b) * c, alpha = norm narrowed to the dtype (mul's scalar operand is).
    return mul(mul(sub(input.to(t), target.to(t)), norm), grad_output.to(t));
  });
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* name = "[l1_loss]";
  ANVIL_CHECK(input.defined() && target.defined(), Error, name, " undefined tensor");
  check_same_device(name, input, target);
  return as_op(name, [&] { return reduced(abs(sub(input, target)), reduction); });
}

Tensor l1_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* name = "[l1_loss_backward]";
  const DType t = floating_dtype(name, "l1_backward", input, target, &grad_output);
  const int64_t n = broadcast_numel(name, input, target);
  return as_op(name, [&] {
    // Autograd's chain: mean's backward divides the gradient by numel, abs's multiplies by
    // sign(input - target) (1, -1, or 0 for 0 and NaN), sub's passes it on.
    const Tensor g = reduction == Reduction::Mean ? div(grad_output.to(t), Scalar(n)) : grad_output.to(t);
    const Tensor d = sub(input.to(t), target.to(t));
    const Tensor sign = sub(gt(d, Scalar(0)).to(t), lt(d, Scalar(0)).to(t));
    return mul(g, sign);
  });
}

// ---- classification losses

namespace {

// input as [N, C, ...] (an unbatched [C] gets N = 1) and a class-index target as [N, ...],
// PyTorch's shape rules checked.
struct Classes {
  Tensor x, t;
  int64_t c = 0;
  bool unbatched = false;
};

Classes class_layout(const char* name, const Tensor& input, const Tensor& target, bool index_target) {
  ANVIL_CHECK(input.defined() && target.defined(), Error, name, " undefined tensor");
  check_same_device(name, input, target);
  ANVIL_CHECK(input.dim() >= 1, ShapeError, name, " expected an input of at least 1 dim (the classes), got ",
              describe(input));
  ANVIL_CHECK(is_floating_point(input.dtype()) && !is_float8(input.dtype()), DTypeError, name,
              " expected a floating input, got ", describe(input));
  Classes k;
  k.unbatched = input.dim() == 1;
  k.c = input.size(k.unbatched ? 0 : 1);
  if (index_target) {
    ANVIL_CHECK(target.dtype() == kInt64, DTypeError, name, " expected scalar type Long but found ",
                dtype_name(target.dtype()));
    if (k.unbatched) {
      ANVIL_CHECK(target.dim() == 0, ShapeError, name, " 0D target tensor expected for a 1D input, got ", describe(target));
    } else {
      ANVIL_CHECK(target.dim() >= 1 && target.size(0) == input.size(0), ShapeError, name, " Expected input batch_size (",
                  input.size(0), ") to match target batch_size (", target.dim() >= 1 ? target.size(0) : 0, ").");
      Shape want = input.sizes();
      want.erase(want.begin() + 1);
      ANVIL_CHECK(target.sizes() == want, ShapeError, name, " size mismatch (got input: ", shape_str(input.sizes()),
                  ", target: ", shape_str(target.sizes()), ")");
    }
  } else {
    ANVIL_CHECK(target.sizes() == input.sizes(), ShapeError, name,
                " Expected target size to match input size for probabilities, got input ", describe(input), " and target ",
                describe(target));
  }
  k.x = k.unbatched ? input.unsqueeze(0) : input;
  k.t = k.unbatched ? target.unsqueeze(0) : target;
  return k;
}

void check_weight(const char* name, const Tensor& weight, const Tensor& input, int64_t c) {
  if (!weight.defined()) return;
  check_same_device(name, input, weight);
  ANVIL_CHECK(weight.dim() == 1 && weight.numel() == c, ShapeError, name, " weight tensor should be defined either for all ",
              c, " classes or no classes but got weight tensor of shape: ", shape_str(weight.sizes()));
}

// weight broadcast along the class dim of an [N, C, ...] tensor of `nd` dims.
Tensor class_weight_view(const Tensor& weight, int64_t nd, DType t) {
  Shape s(static_cast<size_t>(nd), 1);
  s[1] = weight.numel();
  return weight.to(t).view(s);
}

// The per-element pieces of nll_loss: counted targets, safe indices, counted weights.
struct Picks {
  Tensor keep, safe, w;
};
Picks picks(const Classes& k, const Tensor& weight, int64_t ignore_index, DType t) {
  Picks p;
  p.keep = ne(k.t, Scalar(ignore_index));
  p.safe = where(p.keep, k.t, Scalar(0));
  Tensor w = weight.defined() ? index_select(weight.to(t), 0, p.safe.reshape({-1})).reshape(p.safe.sizes())
                              : ones(p.safe.sizes(), TensorOptions(t).device(k.t.device()));
  p.w = where(p.keep, w, Scalar(0));
  return p;
}

Tensor unbatch(const Tensor& loss, const Classes& k) { return k.unbatched ? loss.reshape({}) : loss; }

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction, int64_t ignore_index) {
  const char* name = "[nll_loss]";
  const Classes k = class_layout(name, input, target, true);
  check_weight(name, weight, input, k.c);
  return as_op(name, [&] {
    const Picks p = picks(k, weight, ignore_index, input.dtype());
    // PyTorch's loop: -input[t] * weight[t]; Mean over the counted weights.
    const Tensor losses = mul(neg(gather(k.x, 1, p.safe.unsqueeze(1)).squeeze(1)), p.w);
    if (reduction == Reduction::None) return unbatch(losses, k);
    if (reduction == Reduction::Sum) return sum(losses);
    return div(sum(losses), sum(p.w));
  });
}

Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target, const Tensor& weight,
                         Reduction reduction, int64_t ignore_index) {
  const char* name = "[nll_loss_backward]";
  const Classes k = class_layout(name, input, target, true);
  check_weight(name, weight, input, k.c);
  ANVIL_CHECK(grad_output.defined(), Error, name, " undefined tensor");
  check_same_device(name, input, grad_output);
  const DType t = input.dtype();
  return as_op(name, [&] {
    const Picks p = picks(k, weight, ignore_index, t);
    // PyTorch: grad = -(Mean ? grad_output / total_weight : grad_output), then weight[t] * grad
    // at each counted target, 0 everywhere else.
    Tensor g = grad_output.to(t);
    if (reduction == Reduction::None) g = k.unbatched ? g.reshape({1}) : g;
    else if (reduction == Reduction::Mean) g = div(g, sum(p.w));
    const Tensor vals = where(p.keep, mul(p.w, neg(g)), Scalar(0));
    Tensor grad = scatter(zeros_like(k.x), 1, p.safe.unsqueeze(1), vals.unsqueeze(1));
    return k.unbatched ? grad.squeeze(0) : grad;
  });
}

namespace {

// The label-smoothing term of PyTorch's cross_entropy_loss_label_smoothing over logp, its
// reduction normalised as nll_loss's (by the counted weights, or the counted targets).
Tensor smooth_term(const Classes& k, const Tensor& logp, const Tensor& weight, const Picks& p, Reduction reduction) {
  const DType t = logp.dtype();
  Tensor smooth = weight.defined() ? neg(sum(mul(logp, class_weight_view(weight, logp.dim(), t)), {1}))
                                   : neg(sum(logp, {1}));
  smooth = where(p.keep, smooth, Scalar(0));
  if (reduction == Reduction::None) return unbatch(smooth, k);
  if (reduction == Reduction::Sum) return sum(smooth);
  return weight.defined() ? div(sum(smooth), sum(p.w)) : div(sum(smooth), sum(p.keep.to(t)));
}

// The probability-target loss: -(logp * target [* weight]) summed over classes, then reduced
// (Mean: over the rows, numel / C).
Tensor prob_term(const Classes& k, const Tensor& logp, const Tensor& target, const Tensor& weight, Reduction reduction) {
  Tensor prod = mul(logp, target);
  if (weight.defined()) prod = mul(prod, class_weight_view(weight, logp.dim(), logp.dtype()));
  if (reduction == Reduction::None) return unbatch(neg(sum(prod, {1})), k);
  const Tensor total = neg(sum(prod));
  if (reduction == Reduction::Sum) return total;
  return div(total, Scalar(logp.numel() / std::max<int64_t>(k.c, 1)));
}

Tensor smoothed_target(const Tensor& target, double eps, int64_t c) {
  return eps > 0 ? add(mul(target, 1.0 - eps), eps / static_cast<double>(c)) : target;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  const char* name = "[cross_entropy]";
  ANVIL_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, name,
              " label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  ANVIL_CHECK(target.defined(), Error, name, " undefined tensor");
  const bool index_target = !is_floating_point(target.dtype());
  const Classes k = class_layout(name, input, target, index_target);
  check_weight(name, weight, input, k.c);
  if (!index_target)
    ANVIL_CHECK(ignore_index < 0, ValueError, name, " ignore_index is not supported for floating point target");
  return as_op(name, [&] {
    const Tensor logp = log_softmax(k.x, 1);
    if (!index_target) {
      const Tensor tt = smoothed_target(k.t.to(logp.dtype()), label_smoothing, k.c);
      return prob_term(k, logp, tt, weight, reduction);
    }
    const Tensor nll = nll_loss(k.unbatched ? logp.squeeze(0) : logp, target, weight, reduction, ignore_index);
    if (label_smoothing <= 0) return nll;
    const Picks p = picks(k, weight, ignore_index, logp.dtype());
    const Tensor smooth = smooth_term(k, logp, weight, p, reduction);
    return add(mul(nll, 1.0 - label_smoothing), mul(smooth, label_smoothing / static_cast<double>(k.c)));
  });
}

Tensor cross_entropy_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target, const Tensor& weight,
                              Reduction reduction, int64_t ignore_index, double label_smoothing) {
  const char* name = "[cross_entropy_backward]";
  ANVIL_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, name,
              " label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  ANVIL_CHECK(target.defined() && grad_output.defined(), Error, name, " undefined tensor");
  const bool index_target = !is_floating_point(target.dtype());
  const Classes k = class_layout(name, input, target, index_target);
  check_weight(name, weight, input, k.c);
  check_same_device(name, input, grad_output);
  if (!index_target)
    ANVIL_CHECK(ignore_index < 0, ValueError, name, " ignore_index is not supported for floating point target");
  return as_op(name, [&] {
    const Tensor logp = log_softmax(k.x, 1);
    const DType t = logp.dtype();
    // g per row (None) or the scalar, as [N, 1, ...] to broadcast over the classes.
    Tensor g = grad_output.to(t);
    if (reduction == Reduction::None) g = (k.unbatched ? g.reshape({1}) : g).unsqueeze(1);
    Tensor grad_logp;
    if (!index_target) {
      // d/dlogp of -(logp * target * weight) reduced: -target * weight * g (/ rows for Mean).
      const Tensor tt = smoothed_target(k.t.to(t), label_smoothing, k.c);
      Tensor d = weight.defined() ? mul(tt, class_weight_view(weight, logp.dim(), t)) : tt;
      if (reduction == Reduction::Mean) g = div(g, Scalar(logp.numel() / std::max<int64_t>(k.c, 1)));
      grad_logp = neg(mul(d, g));
    } else {
      grad_logp = nll_loss_backward(grad_output.to(t), k.unbatched ? logp.squeeze(0) : logp, target, weight, reduction,
                                    ignore_index);
      if (k.unbatched) grad_logp = grad_logp.unsqueeze(0);
      if (label_smoothing > 0) {
        // The smoothing term: -weight[c] * keep * g / norm at every class, norm as smooth_term's.
        const Picks p = picks(k, weight, ignore_index, t);
        Tensor s = reduction == Reduction::Mean ? div(g, weight.defined() ? sum(p.w) : sum(p.keep.to(t))) : g;
        Tensor per = mul(p.keep.to(t).unsqueeze(1), s);
        per = weight.defined() ? mul(per, class_weight_view(weight, logp.dim(), t)) : per;
        grad_logp = add(mul(grad_logp, 1.0 - label_smoothing), mul(neg(per), label_smoothing / static_cast<double>(k.c)));
      }
    }
    // log_softmax's backward: grad - softmax * sum(grad) over the classes.
    const Tensor grad_x = sub(grad_logp, mul(exp(logp), sum(grad_logp, {1}, true)));
    return k.unbatched ? grad_x.squeeze(0) : grad_x;
  });
}

}  // namespace anvil
