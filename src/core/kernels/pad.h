#pragma once
// Padding (constant, reflect, replicate, circular), forward and backward: params, the kernel
// entry points of both backends (the backend boundary: core/kernels.h) and the per-dim index
// maps both backends compute with, so CPU and CUDA read and sum exactly the same elements.
#include "anvil/numeric.h"
#include "core/kernels.h"

namespace anvil {

enum class PadMode : int8_t { Constant, Reflect, Replicate, Circular };

// One dim of a pad: input extent `in`, output extent `out` = in + before + after, `before` the
// leading pad (negative crops). Output index j reads input index pad_source(j), or the fill
// value where it returns -1 (constant mode only):
//   constant   k = j - before, -1 outside [0, in)
//   reflect    k = j - before mirrored at 0 and at in - 1, the edge not repeated (|pads| < in)
//   replicate  k = j - before clamped to [0, in - 1]
//   circular   PyTorch's _pad_circular: the input cropped by the negative pads (c elements from
//              lo on), wrapped: k = lo + (j - max(before, 0)) mod c (positive pads <= c)
struct PadDim {
  int64_t in = 1, out = 1, before = 0;
};

struct PadCrop {
  int64_t lo, c;  // circular: the cropped input is [lo, lo + c)
};
ANVIL_HD PadCrop pad_circular_crop(const PadDim& d) {
  const int64_t after = d.out - d.in - d.before;
  const int64_t lo = d.before < 0 ? -d.before : 0;
  return {lo, d.in - lo - (after < 0 ? -after : 0)};
}

ANVIL_HD int64_t pad_source(PadMode mode, const PadDim& d, int64_t j) {
  int64_t k = j - d.before;
  if (mode == PadMode::Constant) return k >= 0 && k < d.in ? k : -1;
  if (mode == PadMode::Reflect) return k < 0 ? -k : k >= d.in ? 2 * (d.in - 1) - k : k;
  if (mode == PadMode::Replicate) return k < 0 ? 0 : k >= d.in ? d.in - 1 : k;
  const PadCrop cr = pad_circular_crop(d);
  int64_t m = (j - (d.before > 0 ? d.before : 0)) % cr.c;
  return cr.lo + (m < 0 ? m + cr.c : m);
}

// The run of output indices [j0, j1) that read input indices k0, k0 + 1, ... in order: the
// unpadded middle, one contiguous copy when both sides are dense.
struct PadRun {
  int64_t j0, j1, k0;
};
ANVIL_HD PadRun pad_direct_run(PadMode mode, const PadDim& d) {
  PadRun r;
  if (mode == PadMode::Circular) {
    const PadCrop cr = pad_circular_crop(d);
    r.j0 = d.before > 0 ? d.before : 0;
    r.j1 = r.j0 + cr.c < d.out ? r.j0 + cr.c : d.out;
    r.k0 = cr.lo;
  } else {
    r.j0 = d.before > 0 ? d.before : 0;
    r.j1 = d.in + d.before < d.out ? d.in + d.before : d.out;
    r.k0 = r.j0 - d.before;
  }
  if (r.j0 > d.out) r.j0 = d.out;  // a leading pad past the output: no middle
  if (r.j1 < r.j0) r.j1 = r.j0;
  return r;
}

// The output indices that read input index k: up to three ranges [lo, hi), ascending, so a
// backward that sums them in this order adds in the output's order (as PyTorch's CPU loop).
struct PadSources {
  int n = 0;
  int64_t lo[3] = {}, hi[3] = {};
  ANVIL_HD void add(int64_t a, int64_t b, int64_t out) {
    a = a < 0 ? 0 : a;
    b = b > out ? out : b;
    if (a >= b) return;
    // Constant indices only, so that a GPU keeps the ranges in registers.
    if (n == 0) lo[0] = a, hi[0] = b;
    else if (n == 1) lo[1] = a, hi[1] = b;
    else lo[2] = a, hi[2] = b;
    ++n;
  }
};

ANVIL_HD PadSources pad_sources(PadMode mode, const PadDim& d, int64_t k) {
  PadSources s;
  const int64_t j = k + d.before;  // the unpadded position
  if (mode == PadMode::Constant) {
    s.add(j, j + 1, d.out);
  } else if (mode == PadMode::Reflect) {
    if (k > 0) s.add(d.before - k, d.before - k + 1, d.out);
    s.add(j, j + 1, d.out);
    if (k < d.in - 1) s.add(2 * (d.in - 1) - k + d.before, 2 * (d.in - 1) - k + d.before + 1, d.out);
  } else if (mode == PadMode::Replicate) {
    s.add(k == 0 ? 0 : j, k == d.in - 1 ? d.out : j + 1, d.out);
  } else {
    const PadCrop cr = pad_circular_crop(d);
    if (k < cr.lo || k >= cr.lo + cr.c) return s;  // cropped away: no output reads it
    const int64_t j0 = k - cr.lo + (d.before > 0 ? d.before : 0);
    s.add(j0 - cr.c, j0 - cr.c + 1, d.out);
    s.add(j0, j0 + 1, d.out);
    s.add(j0 + cr.c, j0 + cr.c + 1, d.out);
  }
  return s;
}

// Input indices [lo, hi) whose one and only output is the unpadded position j = k + before
// (with 0 <= j < out): the interior a backward copies without summing. Conservative (edges that
// happen to have one source too may fall outside it). A side without a positive pad adds no
// sources; with one, reflect mirrors k in [1, before] (and k >= in - 1 - after), replicate
// repeats 0 (and in - 1), circular wraps (its interior is then left empty).
struct PadInterior {
  int64_t lo, hi;
};
ANVIL_HD PadInterior pad_interior(PadMode mode, const PadDim& d) {
  const int64_t after = d.out - d.in - d.before;
  int64_t lo = -d.before > 0 ? -d.before : 0, hi = d.in < d.out - d.before ? d.in : d.out - d.before;
  if (d.before > 0) {
    if (mode == PadMode::Reflect) lo = d.before + 1;
    else if (mode == PadMode::Replicate) lo = 1;
    else if (mode == PadMode::Circular) hi = lo;
  }
  if (after > 0) {
    if (mode == PadMode::Reflect) hi = hi < d.in - 1 - after ? hi : d.in - 1 - after;
    else if (mode == PadMode::Replicate) hi = hi < d.in - 1 ? hi : d.in - 1;
    else if (mode == PadMode::Circular) hi = lo;
  }
  lo = lo < d.in ? lo : d.in;
  return {lo, hi > lo ? hi : lo};
}

// pad:          dst (output geometry) = src (input geometry) padded, every dtype moved as bits
// pad_backward: dst (input geometry)  = sum over pad_sources of src (grad_output), a gather:
//               no atomics, the same bits every run
// dims[d] gives the extents of dim d; dims are ordered by the output's strides (innermost last)
// and unpadded neighbours merged by the front end; ndim >= 1 (a one-element tensor gets a dim of 1).
struct PadParams {
  const void* src = nullptr;
  void* dst = nullptr;
  DType dtype = kFloat32;
  PadMode mode = PadMode::Constant;
  int ndim = 0;
  PadDim dims[kMaxDims] = {};
  int64_t in_strides[kMaxDims] = {}, out_strides[kMaxDims] = {};
  int64_t in_numel = 0, out_numel = 0;
  uint64_t fill_bits = 0;  // pad, constant mode: the value in dtype, in the low element-size bytes
};

#define ANVIL_PAD_KERNELS(X) \
  X(pad, const PadParams&)   \
  X(pad_backward, const PadParams&)
ANVIL_DECLARE_KERNELS(ANVIL_PAD_KERNELS)

}  // namespace anvil
