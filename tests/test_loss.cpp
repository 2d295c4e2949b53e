// Losses: mse_loss and l1_loss, forward and backward, against float64 loops written here, the
// backward also against central finite differences of those loops, PyTorch 2.15's own values
// for bfloat16 (its roundings), broadcasting, empty inputs and the dtype errors, on every device.
#include <algorithm>
#include <cmath>

#include "expect_throws.h"
#include "finite_diff.h"
#include "harness.h"

namespace {

using namespace anvil;
using th::Layout;

using th::array_of;

// Element i of b broadcast to a's shape (b's shape a suffix of a's, as the cases below use).
double at_b(const ref::Array& b, size_t i) { return b.v[i % b.v.size()]; }

// central_differences over an array's values, in its shape.
template <typename F>
ref::Array central_differences(const ref::Array& x, F&& f) {
  ref::Array fd(x.sizes);
  fd.v = th::central_differences(x.v, f);
  return fd;
}

enum class Kind { Mse, L1 };

double elem_loss(Kind k, double x, double y) { return k == Kind::Mse ? (x - y) * (x - y) : std::fabs(x - y); }

class Loss : public th::DeviceTest {};

TEST_P(Loss, ForwardTable) {
  th::CaseLoop loop;
  th::Gen g(5200);
  struct C {
    Shape x, y;
  };
  const std::vector<C> cases = {{{7}, {7}}, {{3, 5}, {3, 5}}, {{2, 3, 4}, {3, 4}}, {{65537}, {65537}}, {{4, 1}, {4, 1}}};
  for (const C& c : cases)
    for (Kind k : {Kind::Mse, Kind::L1})
      for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
        for (DType t : {kFloat32, kBFloat16, kFloat64, kFloat16})
          for (Layout l : {Layout::Contiguous, Layout::Transposed}) {
            const std::string name = th::case_name(c.x, t, l, dev()) + (k == Kind::Mse ? " mse" : " l1") + " r" +
                                     std::to_string(static_cast<int>(r));
            if (!loop.run(name, [&] {
                  th::Input x = th::make_input(c.x, t, dev(), l, g, -3, 3);
                  th::Input y = th::make_input(c.y, t, dev(), Layout::Contiguous, g, -3, 3);
                  Tensor out = k == Kind::Mse ? mse_loss(x.t, y.t, r) : l1_loss(x.t, y.t, r);
                  ref::Array e(c.x), abs_sum({}, 0.0);
                  for (size_t i = 0; i < e.v.size(); ++i) {
                    // The difference rounds to the dtype first, as in PyTorch's kernels.
                    const double d = th::round_to_dtype(x.a.v[i] - at_b(y.a, i), t);
                    e.v[i] = k == Kind::Mse ? d * d : std::fabs(d);
                    abs_sum.v[0] += e.v[i];
                  }
                  if (r == Reduction::None) {
                    ASSERT_TRUE(th::expect_shape(out, c.x, t));
                    ASSERT_TRUE(th::expect_close(out, e, th::Tol{th::underflow_atol(t), 2 * th::unit_roundoff(t)}));
                    return;
                  }
                  ASSERT_TRUE(th::expect_shape(out, {}, t));
                  const double n = static_cast<double>(e.numel());
                  double s = 0;
                  for (double v : e.v) s += v;
                  // Rounded to the dtype: a float16 sum past 65504 is inf, as in PyTorch.
                  ref::Array want({}, th::round_to_dtype(r == Reduction::Mean ? s / n : s, t));
                  // Each term rounded once (2 u), then a sum of n of them (sum_tol).
                  ref::Array tol = th::sum_tol(t, e.numel(), abs_sum);
                  tol.v[0] = (tol.v[0] + 2 * th::unit_roundoff(t) * abs_sum.v[0]) / (r == Reduction::Mean ? n : 1.0);
                  ASSERT_TRUE(th::expect_close(out, want, th::Tol{0, 2 * th::unit_roundoff(t)}, &tol));
                }))
              return;
          }
}

// PyTorch 2.15's values on bfloat16 (torch.ops.aten.mse_loss_backward, F.mse_loss, F.l1_loss
// and autograd through it): the 2 / N factor and 1 / N division rounded to bfloat16 first.
TEST_P(Loss, BFloat16AsPyTorch) {
  const TensorOptions o = TensorOptions(kBFloat16).device(dev());
  Tensor a = th::make_tensor(array_of({3}, {1.5, 2.25, -0.69921875}), kBFloat16, dev());
  Tensor b = th::make_tensor(array_of({3}, {0.10009765625, 3.296875, 0.30078125}), kBFloat16, dev());
  EXPECT_TRUE(th::expect_equal(mse_loss_backward(full({}, 1.0, o), a, b, Reduction::Mean),
                               array_of({3}, {0.93359375, -0.69921875, -0.66796875})));
  EXPECT_TRUE(th::expect_equal(mse_loss_backward(full({}, 0.3, o), a, b, Reduction::Sum),
                               array_of({3}, {0.83984375, -0.62890625, -0.6015625})));
  EXPECT_TRUE(th::expect_equal(mse_loss(a, b), array_of({}, {1.3515625})));
  EXPECT_TRUE(th::expect_equal(mse_loss(a, b, Reduction::Sum), array_of({}, {4.0625})));
  EXPECT_TRUE(th::expect_equal(mse_loss(a, b, Reduction::None), array_of({3}, {1.953125, 1.09375, 1.0})));
  EXPECT_TRUE(th::expect_equal(l1_loss_backward(full({}, 1.0, o), a, b, Reduction::Mean),
                               array_of({3}, {0.333984375, -0.333984375, -0.333984375})));
  EXPECT_TRUE(th::expect_equal(l1_loss(a, b), array_of({}, {1.1484375})));
}

// d sum(w * loss(x)) / dx by central differences of the float64 loss, against the backward with
// grad_output w (None) or a scalar (Mean, Sum), x and target in float64.
TEST_P(Loss, BackwardMatchesFiniteDifferences) {
  th::Gen g(5201);
  for (Kind k : {Kind::Mse, Kind::L1})
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      SCOPED_TRACE(std::string(k == Kind::Mse ? "mse" : "l1") + " r" + std::to_string(static_cast<int>(r)));
      const Shape s = {3, 4};
      th::Input x = th::make_input(s, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
      th::Input y = th::make_input({4}, kFloat64, dev(), Layout::Contiguous, g, -2, 2);
      th::Input w = th::make_input(r == Reduction::None ? s : Shape{}, kFloat64, dev(), Layout::Contiguous, g, 0.5, 1.5);
      Tensor gi = k == Kind::Mse ? mse_loss_backward(w.t, x.t, y.t, r) : l1_loss_backward(w.t, x.t, y.t, r);
      ASSERT_TRUE(th::expect_shape(gi, s, kFloat64));
      auto objective = [&](const std::vector<double>& xv) {
        double total = 0;
        for (size_t i = 0; i < xv.size(); ++i) {
          const double e = elem_loss(k, xv[i], at_b(y.a, i));
          total += r == Reduction::None ? w.a.v[i] * e : e;
        }
        if (r == Reduction::Mean) total /= static_cast<double>(xv.size());
        return r == Reduction::None ? total : total * w.a.v[0];
      };
      const ref::Array fd = central_differences(x.a, objective);
      EXPECT_TRUE(th::expect_close(gi, fd, th::Tol{1e-7, 1e-6}));
    }
}

TEST_P(Loss, EmptyBroadcastAndErrors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev());
  // Empty: mean NaN, sum 0, as PyTorch.
  EXPECT_TRUE(th::expect_equal(mse_loss(zeros({0}, f), zeros({0}, f)), array_of({}, {std::nan("")})));
  EXPECT_TRUE(th::expect_equal(l1_loss(zeros({0}, f), zeros({0}, f), Reduction::Sum), array_of({}, {0.0})));
  // A float32 / float64 pair computes in float64.
  EXPECT_EQ(mse_loss(ones({3}, f), ones({3}, TensorOptions(kFloat64).device(dev()))).dtype(), kFloat64);
  // Integers: mse refuses them; l1 sums them (int64) and refuses their mean, as PyTorch.
  const TensorOptions l = TensorOptions(kInt64).device(dev());
  EXPECT_THROWS_SAYING(DTypeError, "mse_loss", "\"mse\" not implemented for 'int64'", mse_loss(ones({3}, l), ones({3}, l)));
  Tensor s = l1_loss(ones({3}, l), zeros({3}, l), Reduction::Sum);
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.item<int64_t>(), 3);
  EXPECT_THROWS_SAYING(DTypeError, "l1_loss", "could not infer output dtype", l1_loss(ones({3}, l), ones({3}, l)));
  EXPECT_THROWS_SAYING(ShapeError, "mse_loss", "must match", mse_loss(ones({3}, f), ones({2}, f)));
  EXPECT_THROWS_SAYING(ShapeError, "l1_loss_backward", "must match",
                       l1_loss_backward(full({}, 1.0, f), ones({3}, f), ones({2}, f), Reduction::Mean));
}

// ---- nll_loss / cross_entropy against PyTorch's formulas written as float64 loops over
// [N, C, S] (S the flattened spatial dims): log_softmax over C, -w[t] logp[t] per counted
// element, Mean by the counted weights; label smoothing and probability targets as its
// composite (cross_entropy_loss_label_smoothing / _prob_target).
struct ClsCase {
  int64_t n, c, s;      // s = 0: an [N, C] input; s > 0: [N, C, s]; n = 0: unbatched [C]
  bool weighted, prob;  // class weights; probability targets
  double eps;           // label smoothing
};

Shape in_shape(const ClsCase& k) {
  if (k.n == 0) return {k.c};
  return k.s ? Shape{k.n, k.c, k.s} : Shape{k.n, k.c};
}
Shape target_shape(const ClsCase& k) {
  if (k.prob) return in_shape(k);
  if (k.n == 0) return {};
  return k.s ? Shape{k.n, k.s} : Shape{k.n};
}

// The loss in float64 for input values x (in_shape's row-major order).
double ref_loss(const ClsCase& k, const std::vector<double>& x, const std::vector<double>& t, const std::vector<double>& w,
                Reduction r, int64_t ignore, std::vector<double>* per_row) {
  const int64_t n = std::max<int64_t>(k.n, 1), c = k.c, s = std::max<int64_t>(k.s, 1);
  auto at = [&](int64_t i, int64_t cc, int64_t j) { return (i * c + cc) * s + j; };
  double total = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < s; ++j) {
      double mx = -1e300, se = 0;
      for (int64_t cc = 0; cc < c; ++cc) mx = std::max(mx, x[at(i, cc, j)]);
      for (int64_t cc = 0; cc < c; ++cc) se += std::exp(x[at(i, cc, j)] - mx);
      auto logp = [&](int64_t cc) { return x[at(i, cc, j)] - mx - std::log(se); };
      auto wc = [&](int64_t cc) { return w.empty() ? 1.0 : w[cc]; };
      double l = 0;
      if (k.prob) {
        for (int64_t cc = 0; cc < c; ++cc) {
          const double tt = t[at(i, cc, j)] * (1 - k.eps) + k.eps / static_cast<double>(c);
          l -= logp(cc) * tt * wc(cc);
        }
        norm += 1;
      } else {
        const int64_t tc = static_cast<int64_t>(t[i * s + j]);
        if (tc == ignore) {
          if (per_row) per_row->push_back(0);
          continue;
        }
        double smooth = 0;
        for (int64_t cc = 0; cc < c; ++cc) smooth -= logp(cc) * wc(cc);
        const double nll = -logp(tc) * wc(tc);
        norm += wc(tc);
        // (1 - eps) nll + eps / C smooth, each normalised by the same total weight for Mean.
        l = (1 - k.eps) * nll + k.eps / static_cast<double>(c) * smooth;
      }
      if (per_row) per_row->push_back(l);
      total += l;
    }
  if (r == Reduction::Sum) return total;
  if (r == Reduction::Mean) return total / norm;
  return 0;
}

// A case's targets (class indices with every `ignore_every`-th ignored, or probabilities) and
// class weights in dtype t, as reference values and tensors on dev.
struct ClsInputs {
  ref::Array ta;
  std::vector<double> w;
  Tensor tt, wt;
};
ClsInputs cls_inputs(const ClsCase& k, DType t, Device dev, th::Gen& g, size_t ignore_every) {
  ClsInputs in{ref::Array(target_shape(k)), {}, {}, {}};
  if (k.prob) {
    for (double& v : in.ta.v) v = g.uniform(0, 1);
  } else {
    for (size_t i = 0; i < in.ta.v.size(); ++i)
      in.ta.v[i] = i % ignore_every == 1 ? -100 : static_cast<double>(g.randint(0, k.c - 1));
    if (in.ta.v.size() == 1) in.ta.v[0] = 1;
  }
  if (k.weighted)
    for (int64_t c = 0; c < k.c; ++c) in.w.push_back(th::round_to_dtype(g.uniform(0.5, 2.0), t));
  in.tt = k.prob ? th::make_tensor(in.ta, t, dev) : th::make_index(in.ta, dev);
  in.wt = k.weighted ? th::make_tensor(array_of({k.c}, in.w), t, dev) : Tensor();
  return in;
}

TEST_P(Loss, CrossEntropyAndNllTable) {
  th::CaseLoop loop;
  th::Gen g(5202);
  const std::vector<ClsCase> cases = {{4, 5, 0, false, false, 0}, {3, 7, 0, true, false, 0},   {2, 4, 3, true, false, 0.1},
                                      {0, 6, 0, false, false, 0.2}, {5, 3, 0, false, true, 0}, {2, 4, 3, true, true, 0.15},
                                      {0, 5, 0, true, true, 0},     {64, 1000, 0, false, false, 0.1}};
  for (const ClsCase& k : cases)
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
      for (DType t : {kFloat32, kFloat64, kBFloat16}) {
        const std::string name = th::case_name(in_shape(k), t, Layout::Contiguous, dev()) + (k.prob ? " prob" : " index") +
                                 (k.weighted ? " weighted" : "") + " eps " + std::to_string(k.eps) + " r" +
                                 std::to_string(static_cast<int>(r));
        if (!loop.run(name, [&] {
              th::Input x = th::make_input(in_shape(k), t, dev(), Layout::Contiguous, g, -3, 3);
              const ClsInputs in = cls_inputs(k, t, dev(), g, 5);
              const ref::Array& ta = in.ta;
              const std::vector<double>& w = in.w;
              const Tensor &tt = in.tt, &wt = in.wt;
              const std::vector<double> tv = k.prob ? th::to_array(tt).v : ta.v;
              std::vector<double> rows;
              const double want = ref_loss(k, x.a.v, tv, w, r, -100, &rows);
              Tensor out = cross_entropy(x.t, tt, wt, r, -100, k.eps);
              // log_softmax and the sums in the compute type: a few ulps of it per class, scaled
              // by the terms' magnitude (|logp| <= 6 + log C here).
              const double u = th::unit_roundoff(t), scale = 8.0 + std::log(static_cast<double>(k.c));
              const double tol_row = 16 * u * scale * std::sqrt(static_cast<double>(k.c)) * (k.weighted ? 2 : 1);
              if (r == Reduction::None) {
                ASSERT_TRUE(th::expect_close(out, array_of(target_shape(k).size() && !k.prob ? target_shape(k)
                                                      : (k.n == 0 ? Shape{} : (k.s ? Shape{k.n, k.s} : Shape{k.n})), rows),
                                             th::Tol{tol_row, 4 * u}));
              } else {
                ASSERT_TRUE(th::expect_close(out, array_of({}, {want}), th::Tol{tol_row * std::sqrt(static_cast<double>(rows.size())), 4 * u}));
              }
              // nll_loss of the log-probabilities is the unsmoothed index case.
              if (!k.prob && k.eps == 0) {
                Tensor nll = nll_loss(log_softmax(x.t, k.n == 0 ? 0 : 1), tt, wt, r, -100);
                ASSERT_TRUE(th::expect_close(nll, th::to_array(out), th::Tol{tol_row, 4 * u}));
              }
            }))
          return;
      }
}

// The backward against central differences of the float64 loss, input and weights in float64.
TEST_P(Loss, CrossEntropyBackwardMatchesFiniteDifferences) {
  th::Gen g(5203);
  const std::vector<ClsCase> cases = {{3, 4, 0, false, false, 0}, {2, 3, 2, true, false, 0.2}, {0, 5, 0, true, false, 0.1},
                                      {3, 4, 0, true, true, 0.1}, {0, 4, 0, false, true, 0}};
  for (const ClsCase& k : cases)
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      SCOPED_TRACE(ref::shape_to_string(in_shape(k)) + (k.prob ? " prob" : " index") + " r" + std::to_string(static_cast<int>(r)));
      th::Input x = th::make_input(in_shape(k), kFloat64, dev(), Layout::Contiguous, g, -2, 2);
      const ClsInputs in = cls_inputs(k, kFloat64, dev(), g, 4);
      const ref::Array& ta = in.ta;
      const std::vector<double>& w = in.w;
      const Tensor &tt = in.tt, &wt = in.wt;
      // grad_output: per row for None (weights gw), else a scalar.
      std::vector<double> rows0;
      ref_loss(k, x.a.v, ta.v, w, Reduction::None, -100, &rows0);
      std::vector<double> gw(rows0.size());
      for (double& v : gw) v = g.uniform(0.5, 1.5);
      const double gs = 0.7;
      const Shape row_shape = k.n == 0 ? Shape{} : (k.s ? Shape{k.n, k.s} : Shape{k.n});
      Tensor go = r == Reduction::None ? th::make_tensor(array_of(row_shape, gw), kFloat64, dev())
                                       : full({}, gs, TensorOptions(kFloat64).device(dev()));
      Tensor gi = cross_entropy_backward(go, x.t, tt, wt, r, -100, k.eps);
      ASSERT_TRUE(th::expect_shape(gi, in_shape(k), kFloat64));
      auto objective = [&](const std::vector<double>& xv) {
        std::vector<double> rows;
        const double v = ref_loss(k, xv, ta.v, w, r, -100, &rows);
        if (r != Reduction::None) return gs * v;
        double total = 0;
        for (size_t i = 0; i < rows.size(); ++i) total += gw[i] * rows[i];
        return total;
      };
      const ref::Array fd = central_differences(x.a, objective);
      EXPECT_TRUE(th::expect_close(gi, fd, th::Tol{1e-7, 1e-6}));
      if (!k.prob && k.eps == 0) {  // nll_loss_backward through log_softmax gives the same
        Tensor logp = log_softmax(x.t, k.n == 0 ? 0 : 1);
        Tensor gl = nll_loss_backward(go, logp, tt, wt, r, -100);
        Tensor via = sub(gl, mul(exp(logp), sum(gl, {k.n == 0 ? 0 : 1}, true)));
        EXPECT_TRUE(th::expect_close(via, th::to_array(gi), th::Tol{1e-12, 1e-12}));
      }
    }
}

TEST_P(Loss, ClassificationEdgesAndErrors) {
  const TensorOptions f = TensorOptions(kFloat32).device(dev()), l = TensorOptions(kInt64).device(dev());
  Tensor x = zeros({3, 4}, f);
  // Every target ignored: Mean is 0 / 0.
  Tensor all_ignored = full({3}, -100, l);
  EXPECT_TRUE(th::expect_equal(cross_entropy(x, all_ignored), array_of({}, {std::nan("")})));
  EXPECT_TRUE(th::expect_equal(nll_loss(x, all_ignored, {}, Reduction::Sum), array_of({}, {0.0})));
  EXPECT_THROWS_SAYING(DTypeError, "nll_loss", "expected scalar type Long but found int32",
                       nll_loss(x, zeros({3}, TensorOptions(kInt32).device(dev()))));
  EXPECT_THROWS_SAYING(ShapeError, "cross_entropy", "Expected input batch_size (3) to match target batch_size (2).",
                       cross_entropy(x, zeros({2}, l)));
  EXPECT_THROWS_SAYING(ShapeError, "nll_loss", "weight tensor should be defined either for all 4 classes or no classes",
                       nll_loss(x, zeros({3}, l), ones({3}, f)));
  EXPECT_THROWS_SAYING(ValueError, "cross_entropy", "label_smoothing must be between 0.0 and 1.0",
                       cross_entropy(x, zeros({3}, l), {}, Reduction::Mean, -100, 1.5));
  EXPECT_THROWS_SAYING(ValueError, "cross_entropy", "ignore_index is not supported for floating point target",
                       cross_entropy(x, zeros({3, 4}, f), {}, Reduction::Mean, 0));
  EXPECT_THROWS_SAYING(ShapeError, "cross_entropy", "Expected target size to match input size",
                       cross_entropy(x, zeros({3, 5}, f)));
  // A class index past C: IndexError (CUDA: at the next synchronisation).
  EXPECT_THROW(th::to_array(nll_loss(x, full({3}, 4, l))), IndexError);
}

}  // namespace

ANVIL_INSTANTIATE_DEVICE_TESTS(Loss);
