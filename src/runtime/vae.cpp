// VAE configs and load_vae: a diffusers folder's config.json picks the architecture by
// "_class_name"; its builder reads the weights; a tensor no builder read is an error.
#include "runtime/vae.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/io.h"

namespace anvil::runtime {
namespace {

using nlohmann::json;
constexpr const char* kOp = "[vae]";

// The fields of each class's config: those the model reads, and diffusers' bookkeeping that
// does not change the model (sample_size is a tiling default, force_upcast a pipeline hint,
// dropout a training setting).
const std::set<std::string>& known_fields(const std::string& class_name) {
  static const std::set<std::string> kl = {
      "_class_name", "_diffusers_version", "_name_or_path", "act_fn", "block_out_channels", "down_block_types",
      "force_upcast", "in_channels", "latent_channels", "latents_mean", "latents_std", "layers_per_block",
      "mid_block_add_attention", "norm_num_groups", "out_channels", "sample_size", "scaling_factor", "shift_factor",
      "up_block_types", "use_post_quant_conv", "use_quant_conv"};
  static const std::set<std::string> wan = {
      "_class_name", "_diffusers_version", "_name_or_path", "attn_scales", "base_dim", "decoder_base_dim", "dim_mult",
      "dropout", "in_channels", "is_residual", "latents_mean", "latents_std", "num_res_blocks", "out_channels",
      "patch_size", "scale_factor_spatial", "scale_factor_temporal", "temperal_downsample", "z_dim"};
  static const std::set<std::string> qwen = {
      "_class_name", "_diffusers_version", "_name_or_path", "attn_scales", "base_dim", "dim_mult", "dropout",
      "input_channels", "latents_mean", "latents_std", "num_res_blocks", "temperal_downsample", "z_dim"};
  return class_name == "AutoencoderKL" ? kl : class_name == "AutoencoderKLWan" ? wan : qwen;
}

int64_t positive_int(const json& j, const char* name, int64_t fallback, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  const json& v = j[name];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    format_fail(kOp, where, "\"", name, "\" must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

bool flag(const json& j, const char* name, bool fallback, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  if (!j[name].is_boolean()) format_fail(kOp, where, "\"", name, "\" must be true or false, got ", j[name].dump());
  return j[name].get<bool>();
}

std::optional<double> number(const json& j, const char* name, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return std::nullopt;
  const json& v = j[name];
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    format_fail(kOp, where, "\"", name, "\" must be a finite number, got ", v.dump());
  return v.get<double>();
}

// A per-latent-channel list (latents_mean / latents_std), or empty when null. Its length is
// checked where it is used (a pipeline's unscaling): diffusers saves its 16-entry defaults into
// the configs of models with other latent widths and loads them without complaint.
std::vector<double> channel_list(const json& j, const char* name, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return {};
  const json& v = j[name];
  bool ok = v.is_array();
  std::vector<double> r;
  for (size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_number();
    if (ok) r.push_back(v[i].get<double>());
  }
  if (!ok) format_fail(kOp, where, "\"", name, "\" must be a list of numbers, got ", v.dump());
  return r;
}

// A list of 1 to 8 positive integers, or `fallback` when absent.
std::vector<int64_t> int_list(const json& j, const char* name, std::vector<int64_t> fallback, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  const json& b = j[name];
  std::vector<int64_t> r;
  bool ok = b.is_array() && !b.empty() && b.size() <= 8;
  for (size_t i = 0; ok && i < b.size(); ++i) {
    ok = b[i].is_number_integer() && b[i].get<int64_t>() > 0;
    if (ok) r.push_back(b[i].get<int64_t>());
  }
  if (!ok) format_fail(kOp, where, "\"", name, "\" must be 1 to 8 positive integers, got ", b.dump());
  return r;
}

// Every entry of the list field `name` equal to `want` (one per block).
void block_types(const json& j, const char* name, const char* want, size_t blocks, const std::string& where) {
  if (!j.contains(name)) return;  // diffusers' default is all `want`
  const json& v = j[name];
  bool ok = v.is_array() && v.size() == blocks;
  for (size_t i = 0; ok && i < v.size(); ++i) ok = v[i].is_string() && v[i].get<std::string>() == want;
  if (!ok)
    format_fail(kOp, where, "\"", name, "\" must list \"", want, "\" once per block_out_channels entry (", blocks,
                "); got ", v.dump(), ": other block types are not implemented");
}

}  // namespace

namespace {

void parse_autoencoder_kl(const json& j, VaeConfig& c, const std::string& where) {
  c.in_channels = positive_int(j, "in_channels", 3, where);
  c.out_channels = positive_int(j, "out_channels", 3, where);
  c.latent_channels = positive_int(j, "latent_channels", 4, where);
  c.layers_per_block = positive_int(j, "layers_per_block", 1, where);
  c.norm_num_groups = positive_int(j, "norm_num_groups", 32, where);
  c.block_out_channels = int_list(j, "block_out_channels", {64}, where);
  for (int64_t ch : c.block_out_channels)
    if (ch % c.norm_num_groups != 0)
      format_fail(kOp, where, "block_out_channels entry ", ch, " is not divisible by norm_num_groups ",
                  c.norm_num_groups);
  block_types(j, "down_block_types", "DownEncoderBlock2D", c.block_out_channels.size(), where);
  block_types(j, "up_block_types", "UpDecoderBlock2D", c.block_out_channels.size(), where);
  if (j.contains("act_fn") && !(j["act_fn"].is_string() && j["act_fn"].get<std::string>() == "silu"))
    format_fail(kOp, where, "\"act_fn\" ", j["act_fn"].dump(), " is not implemented (\"silu\" is)");
  c.use_quant_conv = flag(j, "use_quant_conv", true, where);
  c.use_post_quant_conv = flag(j, "use_post_quant_conv", true, where);
  c.mid_block_add_attention = flag(j, "mid_block_add_attention", true, where);
  (void)flag(j, "force_upcast", true, where);
  c.scaling_factor = number(j, "scaling_factor", where).value_or(0.18215);
  c.shift_factor = number(j, "shift_factor", where);
  if (j.contains("sample_size") && !j["sample_size"].is_null()) {
    const json& v = j["sample_size"];
    const json& first = v.is_array() && !v.empty() ? v[0] : v;
    if (!first.is_number_integer() || first.get<int64_t>() <= 0)
      format_fail(kOp, where, "\"sample_size\" must be a positive integer or a list of them, got ", v.dump());
    c.sample_size = first.get<int64_t>();
  }
}

// AutoencoderKLWan and AutoencoderKLQwenImage (input_channels for both in and out).
void parse_wan(const json& j, VaeConfig& c, const std::string& where) {
  const bool qwen = c.class_name == "AutoencoderKLQwenImage";
  c.in_channels = positive_int(j, qwen ? "input_channels" : "in_channels", 3, where);
  c.out_channels = qwen ? c.in_channels : positive_int(j, "out_channels", 3, where);
  c.latent_channels = positive_int(j, "z_dim", 16, where);
  c.base_dim = positive_int(j, "base_dim", 96, where);
  c.decoder_base_dim = qwen ? c.base_dim : positive_int(j, "decoder_base_dim", c.base_dim, where);
  c.num_res_blocks = positive_int(j, "num_res_blocks", 2, where);
  c.dim_mult = int_list(j, "dim_mult", {1, 2, 4, 4}, where);
  if (c.dim_mult.size() < 2) format_fail(kOp, where, "\"dim_mult\" needs at least 2 levels, got ", c.dim_mult.size());
  c.temperal_downsample = {false, true, true};
  if (j.contains("temperal_downsample")) {
    const json& v = j["temperal_downsample"];
    bool ok = v.is_array() && v.size() == c.dim_mult.size() - 1;
    c.temperal_downsample.clear();
    for (size_t i = 0; ok && i < v.size(); ++i) {
      ok = v[i].is_boolean();
      if (ok) c.temperal_downsample.push_back(v[i].get<bool>());
    }
    if (!ok)
      format_fail(kOp, where, "\"temperal_downsample\" must be ", c.dim_mult.size() - 1,
                  " booleans (one per level but the last), got ", v.dump());
  }
  if (j.contains("attn_scales") && !(j["attn_scales"].is_array() && j["attn_scales"].empty()))
    format_fail(kOp, where, "\"attn_scales\" ", j["attn_scales"].dump(),
                " is not implemented (attention inside the down / up levels; [] is)");
  if (!qwen) {
    c.is_residual = flag(j, "is_residual", false, where);
    c.patch_size = positive_int(j, "patch_size", 1, where);
    if (c.in_channels % (c.patch_size * c.patch_size) != 0 || c.out_channels % (c.patch_size * c.patch_size) != 0)
      format_fail(kOp, where, "in_channels ", c.in_channels, " and out_channels ", c.out_channels,
                  " must be multiples of patch_size^2 = ", c.patch_size * c.patch_size);
    const int64_t spatial = positive_int(j, "scale_factor_spatial", 8, where);
    const int64_t temporal = positive_int(j, "scale_factor_temporal", 4, where);
    if (spatial != c.downscale() || temporal != c.temporal_downscale())
      format_fail(kOp, where, "scale_factor_spatial ", spatial, " / scale_factor_temporal ", temporal,
                  " do not match dim_mult and temperal_downsample (", c.downscale(), " / ", c.temporal_downscale(), ")");
  }
  c.scaling_factor = 1.0;
  c.sample_size = 256;
}

}  // namespace

VaeConfig parse_vae_config(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    format_fail(kOp, where, "not valid JSON: ", e.what());
  }
  if (!j.is_object()) format_fail(kOp, where, "not a JSON object");
  VaeConfig c;
  if (!j.contains("_class_name") || !j["_class_name"].is_string())
    format_fail(kOp, where, "missing \"_class_name\" (a diffusers model config names its class)");
  c.class_name = j["_class_name"].get<std::string>();
  if (c.class_name != "AutoencoderKL" && c.class_name != "AutoencoderKLWan" && c.class_name != "AutoencoderKLQwenImage")
    format_fail(kOp, where, "\"_class_name\" \"", c.class_name,
                "\" has no implementation (AutoencoderKL, AutoencoderKLWan and AutoencoderKLQwenImage have)");
  for (const auto& [key, value] : j.items())
    if (!known_fields(c.class_name).count(key))
      format_fail(kOp, where, "unknown field \"", key, "\" for ", c.class_name, ": a variant anvil does not implement");
  if (c.class_name == "AutoencoderKL") parse_autoencoder_kl(j, c, where);
  else parse_wan(j, c, where);
  c.latents_mean = channel_list(j, "latents_mean", where);
  c.latents_std = channel_list(j, "latents_std", where);
  return c;
}

VaeConfig preset_vae_config(const std::string& name) {
  // The Hub's config.json values (black-forest-labs/FLUX.1-dev vae/, stable-diffusion-v1-5 vae/,
  // Wan-AI/Wan2.1-T2V-14B-Diffusers vae/, Qwen/Qwen-Image vae/).
  if (name == "flux")
    return parse_vae_config(R"({"_class_name": "AutoencoderKL", "block_out_channels": [128, 256, 512, 512],
        "layers_per_block": 2, "latent_channels": 16, "norm_num_groups": 32, "sample_size": 1024,
        "scaling_factor": 0.3611, "shift_factor": 0.1159, "use_quant_conv": false, "use_post_quant_conv": false})",
                            "preset flux");
  if (name == "sd")
    return parse_vae_config(R"({"_class_name": "AutoencoderKL", "block_out_channels": [128, 256, 512, 512],
        "layers_per_block": 2, "latent_channels": 4, "norm_num_groups": 32, "sample_size": 512})",
                            "preset sd");
  if (name == "wan2.1")
    return parse_vae_config(R"({"_class_name": "AutoencoderKLWan", "base_dim": 96, "z_dim": 16,
        "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "temperal_downsample": [false, true, true]})",
                            "preset wan2.1");
  if (name == "qwen-image")
    return parse_vae_config(R"({"_class_name": "AutoencoderKLQwenImage", "base_dim": 96, "z_dim": 16,
        "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "temperal_downsample": [false, true, true]})",
                            "preset qwen-image");
  if (name == "wan2.2")
    return parse_vae_config(R"({"_class_name": "AutoencoderKLWan", "base_dim": 160, "decoder_base_dim": 256,
        "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "temperal_downsample": [false, true, true],
        "is_residual": true, "in_channels": 12, "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16,
        "scale_factor_temporal": 4})",
                            "preset wan2.2");
  throw Error(std::string(kOp) + " unknown VAE preset \"" + name + "\" (flux, sd, wan2.1, wan2.2, qwen-image)");
}

Tensor unscale_latents(const Tensor& x_in, const VaeConfig& c) {
  const int64_t L = c.latent_channels;
  ANVIL_CHECK(x_in.dim() >= 2 && x_in.size(1) == L, ShapeError, "[vae decode] scaled latents must have ", L,
              " channels in dim 1, got ", shape_str(x_in.sizes()));
  const Tensor x = x_in.to(kFloat32);
  if (c.latents_mean.empty() || c.latents_std.empty())
    return add(div(x, Scalar(c.scaling_factor)), Scalar(c.shift_factor.value_or(0.0)));
  ANVIL_CHECK(static_cast<int64_t>(c.latents_mean.size()) == L && static_cast<int64_t>(c.latents_std.size()) == L,
              FormatError, "[vae decode] config.json's latents_mean / latents_std have ", c.latents_mean.size(), " / ",
              c.latents_std.size(), " entries for ", L, " latent channels");
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[1] = L;
  const std::vector<float> mean(c.latents_mean.begin(), c.latents_mean.end());
  const std::vector<float> std(c.latents_std.begin(), c.latents_std.end());
  return add(div(mul(x, tensor(std, s).to(x.device())), Scalar(c.scaling_factor)), tensor(mean, s).to(x.device()));
}

VaeConfig load_vae_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::exists(path)) throw Error(std::string(kOp) + " " + dir + " holds no config.json");
  return parse_vae_config(read_file(path, kOp), path);
}

namespace {

// b's first n rows (dim 2) or columns (dim 3), n = min(a's, b's, blend): a's last n times 1 - k / n
// plus b's times k / n at offset k, each product and the sum rounded to float32 as diffusers'
// blend_v / blend_h (weights computed in double, then rounded).
void blend_edge(const Tensor& a, Tensor& b, int64_t blend, int64_t dim) {
  const int64_t n = std::min({a.size(dim), b.size(dim), blend});
  if (n <= 0) return;
  // The weights made on b's device in float64, then rounded (no host copy per blend, which on
  // CUDA would wait for the tile's decode): k / n and 1 - k / n as diffusers' Python floats.
  Shape ws(static_cast<size_t>(b.dim()), 1);
  ws[static_cast<size_t>(dim)] = n;
  const Tensor frac = div(arange(0, n, 1, TensorOptions(kFloat64).device(b.device())), Scalar(static_cast<double>(n)));
  const Tensor new_w = frac.to(kFloat32).view(ws), old_w = sub(ones_like(frac), frac).to(kFloat32).view(ws);
  Tensor head = b.narrow(dim, 0, n);
  head.copy_(add(mul(a.narrow(dim, a.size(dim) - n, n), old_w), mul(head, new_w)));
}

std::vector<int64_t> tile_starts(int64_t extent, int64_t stride) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < extent; i += stride) s.push_back(i);
  return s;
}

}  // namespace

Tensor run_tiled_2d(const Tensor& x, const TileAxis& h, const TileAxis& w,
                    const std::function<int64_t(int64_t)>& out_extent, const std::function<Tensor(const Tensor&)>& f,
                    const std::function<void(int64_t, int64_t)>& progress) {
  for (const TileAxis* a : {&h, &w})
    ANVIL_CHECK(a->tile > 0 && a->stride > 0 && a->keep > 0, ValueError, "[vae] tiles of ", a->tile, " every ",
                a->stride, " keeping ", a->keep, ": each must be positive");
  const int64_t dh = x.dim() - 2, dw = x.dim() - 1, H = x.size(dh), W = x.size(dw);
  const std::vector<int64_t> rows = tile_starts(H, h.stride), cols = tile_starts(W, w.stride);
  auto crop = [&](const TileAxis& a, int64_t extent, int64_t start) {
    return std::min(a.keep, out_extent(std::min(a.tile, extent - start)));
  };
  int64_t OH = 0, OW = 0;
  for (int64_t r : rows) OH += crop(h, H, r);
  for (int64_t c : cols) OW += crop(w, W, c);
  Tensor out;
  std::vector<Tensor> above(cols.size());  // each column's last tile's blended bottom strip
  int64_t oy = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    Tensor left;  // the previous tile's blended right strip
    int64_t ox = 0;
    for (size_t j = 0; j < cols.size(); ++j) {
      Tensor t = f(x.narrow(dh, rows[i], std::min(h.tile, H - rows[i])).narrow(dw, cols[j], std::min(w.tile, W - cols[j])))
                     .to(kFloat32)
                     .contiguous();
      if (!out.defined()) {
        Shape s = t.sizes();
        s[static_cast<size_t>(dh)] = OH;
        s[static_cast<size_t>(dw)] = OW;
        out = empty(s, TensorOptions(kFloat32).device(t.device()));
      }
      if (i > 0) blend_edge(above[j], t, h.blend, dh);
      if (j > 0) blend_edge(left, t, w.blend, dw);
      const int64_t th = t.size(dh), tw = t.size(dw);
      const int64_t bh = std::clamp<int64_t>(h.blend, 0, th), bw = std::clamp<int64_t>(w.blend, 0, tw);
      above[j] = t.narrow(dh, th - bh, bh).clone();
      left = t.narrow(dw, tw - bw, bw).clone();
      const int64_t ch = crop(h, H, rows[i]), cw = crop(w, W, cols[j]);
      ANVIL_CHECK(std::min(h.keep, th) == ch && std::min(w.keep, tw) == cw, ShapeError, "[vae] a tile's output is ",
                  shape_str(t.sizes()), ", its extent rule gives ", ch, " x ", cw, " kept");
      out.narrow(dh, oy, ch).narrow(dw, ox, cw).copy_(t.narrow(dh, 0, ch).narrow(dw, 0, cw));
      ox += cw;
      if (progress) progress(static_cast<int64_t>(i * cols.size() + j + 1), static_cast<int64_t>(rows.size() * cols.size()));
    }
    oy += crop(h, H, rows[i]);
  }
  return out;
}

Tensor LoadedVae::take(const std::string& name, const Shape& shape) {
  Tensor t = ws_->get(name, shape);
  parameters_ += static_cast<uint64_t>(t.numel());
  if (o_.progress) o_.progress(ws_->loaded_bytes(), ws_->total_bytes());
  return t;
}

LatentDistribution LoadedVae::distribution(const Tensor& moments) const {
  const int64_t z = c_.latent_channels;
  LatentDistribution d;
  d.mean = moments.narrow(1, 0, z).to(kFloat32).contiguous();
  d.logvar = clamp(moments.narrow(1, z, z).to(kFloat32), Scalar(-30.0), Scalar(20.0));
  return d;
}

Tensor LatentDistribution::sample(uint64_t seed) const {
  manual_seed(seed);
  const Tensor noise = randn(mean.sizes(), TensorOptions(kFloat32).device(mean.device()));
  return add(mean, mul(exp(mul(logvar, 0.5)), noise));
}

std::unique_ptr<Vae> build_vae(const VaeConfig& c, WeightSource& weights, const LoadOptions& options) {
  return c.video() ? build_autoencoder_kl_wan(c, weights, options) : build_autoencoder_kl(c, weights, options);
}

std::unique_ptr<Vae> load_vae(const std::string& dir, const LoadOptions& options) {
  ANVIL_CHECK(options.dtype == kFloat32 || options.dtype == kBFloat16 || options.dtype == kFloat16, DTypeError,
              "[vae] compute dtype must be float32, bfloat16 or float16, got ", dtype_name(options.dtype));
  const VaeConfig c = load_vae_config(dir);
  const auto w = checkpoint_weights(dir, options, "diffusion_pytorch_model");
  auto vae = build_vae(c, *w, options);
  const std::vector<std::string> unread = w->unread();
  if (!unread.empty() && !options.allow_unread) {
    std::string names;
    for (size_t i = 0; i < unread.size() && i < 5; ++i) names += (i ? ", " : "") + unread[i];
    format_fail(kOp, dir, unread.size(), " checkpoint tensor(s) are not read by the ", c.class_name, " model (", names,
                unread.size() > 5 ? ", ..." : "", "): a layout anvil does not know");
  }
  return vae;
}

}  // namespace anvil::runtime
