// Weight sources shared by every architecture: checkpoint folders (with the Hub's block-scaled
// FP8 and the strict rules of quantization.h: every float8 tensor has its scale of the right
// shape, and every tensor is read by the model) and random weights in real shapes; and the
// stacking of projections and experts with their scales.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "runtime/io.h"
#include "runtime/model.h"
#include "runtime/quantization.h"
#include "runtime/safetensors.h"

namespace anvil::runtime {
namespace {

constexpr const char* kOp = "[load]";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row scales (quantize_fp8's [..., n, 1] as [..., n]) of a dense weight quantised row-wise.
ProjWeight quantize_rows(const Tensor& t) {
  auto [q, scale] = quantize_fp8(t, ScalingType::RowWise);
  return {q, scale.view(Shape(t.sizes().begin(), t.sizes().end() - 1)), {}};
}

// A block-scaled weight's scales for row blocks of bn (dividing its bn): each scale repeated
// block[0] / bn times, cut to ceil(n / bn) rows (the same values, finer grid).
ProjWeight reblock(const ProjWeight& p, int64_t bn) {
  if (p.block[0] == bn) return p;
  const int64_t r = p.block[0] / bn, n = p.w.size(-2);
  Shape lead(p.scale.sizes().begin(), p.scale.sizes().end() - 2);
  const int64_t nb = p.scale.size(-2), kb = p.scale.size(-1);
  Shape grid = lead, full = lead, out = lead;
  for (int64_t v : {nb, int64_t{1}, kb}) grid.push_back(v);
  for (int64_t v : {nb, r, kb}) full.push_back(v);
  for (int64_t v : {nb * r, kb}) out.push_back(v);
  const Tensor s = p.scale.reshape(grid).expand(full).reshape(out).narrow(-2, 0, ceil_div(n, bn)).contiguous();
  return {p.w, s, {bn, p.block[1]}};
}

}  // namespace

ProjWeight stack_rows(const std::vector<ProjWeight>& parts) {
  std::vector<Tensor> ws, scales;
  const bool all_fp8 = std::all_of(parts.begin(), parts.end(), [](const ProjWeight& p) { return p.fp8(); });
  const bool any_fp8 = std::any_of(parts.begin(), parts.end(), [](const ProjWeight& p) { return p.fp8(); });
  const bool same_block = std::all_of(parts.begin(), parts.end(), [&](const ProjWeight& p) {
    return p.block == parts[0].block;
  });
  if (!any_fp8 || !all_fp8 || !same_block) {
    // Dense parts (or a mix: the float8 ones dequantised into the dense parts' dtype).
    DType dense = kBFloat16;
    for (const ProjWeight& p : parts)
      if (!p.fp8()) dense = p.w.dtype();
    for (const ProjWeight& p : parts) {
      if (!p.fp8()) ws.push_back(p.w);
      else if (p.block.empty()) ws.push_back(mul(p.w.to(kFloat32), p.scale.unsqueeze(-1)).to(dense));
      else ws.push_back(dequantize_fp8(p.w, p.scale, p.block, dense));
    }
    return {cat(ws, 0), {}, {}};
  }
  if (parts[0].block.empty()) {  // row scales
    for (const ProjWeight& p : parts) {
      ws.push_back(p.w);
      scales.push_back(p.scale);
    }
    return {cat(ws, 0), cat(scales, 0), {}};
  }
  // Block scales: a part that does not end on a block boundary (but the last) re-blocks them all.
  int64_t bn = parts[0].block[0];
  for (size_t i = 0; i + 1 < parts.size(); ++i) bn = std::gcd(bn, parts[i].w.size(0));
  for (const ProjWeight& p : parts) {
    const ProjWeight r = reblock(p, bn);
    ws.push_back(r.w);
    scales.push_back(r.scale);
  }
  return {cat(ws, 0), cat(scales, 0), {bn, parts[0].block[1]}};
}

ProjWeight stack_experts(const std::vector<ProjWeight>& experts) {
  std::vector<Tensor> ws, scales;
  for (const ProjWeight& e : experts) {
    ws.push_back(e.w.unsqueeze(0));
    if (e.fp8()) scales.push_back(e.scale.unsqueeze(0));
  }
  return {cat(ws, 0), scales.empty() ? Tensor() : cat(scales, 0), experts[0].block};
}

Tensor project(const Tensor& x, const ProjWeight& p) {
  return p.fp8() ? scaled_linear(x, p.w, p.scale, {}, p.block) : linear(x, p.w);
}

void same_blocks(ProjWeight& a, ProjWeight& b) {
  if (a.block.empty() || b.block.empty() || a.block == b.block) return;
  ANVIL_CHECK(a.block[1] == b.block[1], FormatError, kOp, " block scales of ", shape_str(a.block), " and ",
              shape_str(b.block), " cannot be used together");
  const int64_t bn = std::gcd(a.block[0], b.block[0]);
  a = reblock(a, bn);
  b = reblock(b, bn);
}

namespace {

// The checkpoint tensor, shape-checked, on the load device: in the load dtype, or (projections)
// float8 with its scales as LoadOptions::fp8_weights says. Remembers what was read.
class CheckpointWeights final : public WeightSource {
 public:
  CheckpointWeights(const std::string& dir, const LoadOptions& o, const std::string& stem)
      : ck_(dir, stem), o_(o), q_(load_quantization(dir)) {}
  bool has(const std::string& name) const override { return ck_.has(name); }
  uint64_t total_bytes() const override { return ck_.total_bytes(); }

  Tensor get(const std::string& name, const Shape& shape) override {
    const SafetensorsEntry& e = entry(name, shape);
    if (is_float8(e.dtype)) {  // a float8 tensor outside the projections: dequantised
      const ProjWeight p = fp8(name, shape);
      return dequantize_fp8(p.w, p.scale, p.block, o_.dtype);
    }
    const Tensor src = read(name);
    Tensor t = src.to(o_.device, o_.dtype).contiguous();
    if (t.storage() == src.storage()) t = t.clone();  // own aligned bytes rather than view the file map
    return t;
  }

  ProjWeight projection(const std::string& name, const Shape& shape) override {
    const SafetensorsEntry& e = entry(name, shape);
    if (is_float8(e.dtype)) {
      ProjWeight p = fp8(name, shape);
      if (o_.fp8_weights == Fp8Weights::Dequantize) return {dequantize_fp8(p.w, p.scale, p.block, o_.dtype), {}, {}};
      return p;
    }
    Tensor t = get(name, shape);
    if (o_.fp8_weights == Fp8Weights::Quantize) return quantize_rows(t);
    return {t, {}, {}};
  }

  std::vector<std::string> unread() const override {
    std::vector<std::string> r;
    for (const std::string& n : ck_.names())
      if (!read_.count(n)) r.push_back(n);
    return r;
  }

 private:
  const SafetensorsEntry& entry(const std::string& name, const Shape& shape) const {
    const SafetensorsEntry& e = ck_.entry(name);
    if (e.shape != shape)
      format_fail(kOp, ck_.dir(), name, " has shape ", shape_str(e.shape), ", the config gives ", shape_str(shape));
    return e;
  }

  Tensor read(const std::string& name) {
    const SafetensorsEntry& e = ck_.entry(name);
    read_.insert(name);
    loaded_ += e.end - e.begin;
    return ck_.tensor(name);
  }

  // A float8 weight and its weight_scale_inv, by quantization_config's rules.
  ProjWeight fp8(const std::string& name, const Shape& shape) {
    const SafetensorsEntry& e = ck_.entry(name);
    const std::string& dir = ck_.dir();
    if (!q_.fp8)
      format_fail(kOp, dir, name, " is ", dtype_name(e.dtype),
                  " but config.json has no fp8 quantization_config (its scales and block size)");
    if (e.dtype != kFloat8_e4m3fn)
      format_fail(kOp, dir, name, " is ", dtype_name(e.dtype), " but quantization_config's fmt is e4m3");
    if (!q_.converted(name))
      format_fail(kOp, dir, name, " is float8 but its module is listed in modules_to_not_convert / ignored_layers");
    if (shape.size() < 2) format_fail(kOp, dir, name, " is float8 with shape ", shape_str(shape), "; only matrices may be");
    const std::string scale_name = name + "_scale_inv";
    if (!ck_.has(scale_name)) format_fail(kOp, dir, "float8 tensor ", name, " has no scale ", scale_name);
    const SafetensorsEntry& s = ck_.entry(scale_name);
    Shape grid(shape.begin(), shape.end() - 2);
    grid.push_back(ceil_div(shape[shape.size() - 2], q_.block[0]));
    grid.push_back(ceil_div(shape.back(), q_.block[1]));
    if (s.shape != grid)
      format_fail(kOp, dir, scale_name, " has shape ", shape_str(s.shape), "; weight ", shape_str(shape), " in ",
                  q_.block[0], " x ", q_.block[1], " blocks needs ", shape_str(grid));
    if (s.dtype != kBFloat16 && s.dtype != kFloat16 && s.dtype != kFloat32)
      format_fail(kOp, dir, scale_name, " is ", dtype_name(s.dtype), "; scales must be bfloat16, float16 or float32");
    Tensor w = read(name).to(o_.device);
    if (w.device() == kCPU) w = w.clone();
    return {w, read(scale_name).to(o_.device, kFloat32).contiguous(), q_.block};
  }

  Checkpoint ck_;
  LoadOptions o_;
  QuantizationConfig q_;
  std::set<std::string> read_;
};

// Random weights without generating every number: one pool of 2^22 N(0, 1) values, each weight
// its scaled copy read cyclically from an offset of its own (a demo or a benchmark needs the
// shapes, the bytes and realistic magnitudes, not independent draws; 1.5 GB of weights took 33 s
// to draw on 2 CPU cores, copies take well under a second). The scaled pools are kept per scale
// (a model has a few fan-ins), not recomputed per weight.
class RandomWeights final : public WeightSource {
 public:
  RandomWeights(const LoadOptions& o, uint64_t seed, bool block_fp8) : o_(o), block_fp8_(block_fp8) {
    manual_seed(seed);
    pool_ = randn({kPool}, TensorOptions(kFloat32).device(o.device));
  }
  bool has(const std::string& name) const override {
    return name.find(".experts.") == std::string::npos || name.find("experts.gate_up_proj") != std::string::npos ||
           name.find("experts.down_proj") != std::string::npos;
  }
  Tensor get(const std::string& name, const Shape& shape) override {
    const bool norm = name.find("norm") != std::string::npos;
    const double scale = norm ? 0.1 : 0.5 / std::sqrt(static_cast<double>(shape.back()));
    Tensor& scaled = scaled_[{norm, scale}];
    if (!scaled.defined()) scaled = norm ? add(mul(pool_, scale), 1.0).to(o_.dtype) : mul(pool_, scale).to(o_.dtype);
    Tensor w = empty(shape, TensorOptions(o_.dtype).device(o_.device));
    loaded_ += w.nbytes();
    Tensor flat = w.view({w.numel()});
    int64_t at = static_cast<int64_t>(std::hash<std::string>{}(name) % static_cast<size_t>(kPool));
    for (int64_t done = 0; done < flat.numel();) {
      const int64_t n = std::min(flat.numel() - done, kPool - at);
      flat.narrow(0, done, n).copy_(scaled.narrow(0, at, n));
      done += n;
      at = 0;
    }
    return w;
  }
  ProjWeight projection(const std::string& name, const Shape& shape) override {
    const Tensor t = get(name, shape);
    if (block_fp8_ && name != "lm_head.weight") {  // the Hub's FP8 checkpoints keep lm_head in bfloat16
      auto [q, s] = quantize_fp8(t, ScalingType::BlockWise128x128);
      return {q, s, {128, 128}};
    }
    if (o_.fp8_weights == Fp8Weights::Quantize) return quantize_rows(t);
    return {t, {}, {}};
  }

 private:
  static constexpr int64_t kPool = int64_t{1} << 22;
  LoadOptions o_;
  bool block_fp8_;
  Tensor pool_;
  std::map<std::pair<bool, double>, Tensor> scaled_;  // (norm, scale) -> the pool scaled, in the load dtype
};

}  // namespace

std::unique_ptr<WeightSource> checkpoint_weights(const std::string& dir, const LoadOptions& options,
                                                 const std::string& stem) {
  return std::make_unique<CheckpointWeights>(dir, options, stem);
}
std::unique_ptr<WeightSource> random_weights(const LoadOptions& options, uint64_t seed, bool block_fp8) {
  return std::make_unique<RandomWeights>(options, seed, block_fp8);
}

}  // namespace anvil::runtime
