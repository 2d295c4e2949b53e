#pragma once
// topk and sampling references in float64: a stable sort of (value, index) pairs by value with
// NaN above every number, and the distribution sample() draws from. Plain comparisons of doubles
// (no order keys), so -0 and +0 tie like any equal values.
#include <vector>

#include "reference/ref_array.h"

namespace ref {

struct TopkResult {
  Array values;
  Array indices;
};
// torch.topk along `dim`, sorted: descending (largest) or ascending with NaN last; equal values
// give the lower index first. 0-dim x: itself and index 0.
TopkResult topk(const Array& x, int64_t k, int64_t dim, bool largest);

// Per token, the probability of drawing it from one row of logits: softmax(x / temperature)
// restricted to the top_k largest (0: all; ties by lower index), then to the tokens, in
// descending order, whose mass before them (renormalised after the top-k cut) is < top_p,
// renormalised. temperature 0: 1 at the argmax (first index, NaN wins).
std::vector<double> sample_probs(const std::vector<double>& logits, double temperature, int64_t top_k, double top_p);
// How far the top-p cut is from flipping: the smallest |mass before a token - top_p| over the
// top-k candidates (infinity for top_p >= 1). Below float rounding, a kernel may keep one token
// more or less than the reference; tests avoid such rows.
double top_p_margin(const std::vector<double>& logits, double temperature, int64_t top_k, double top_p);

}  // namespace ref
