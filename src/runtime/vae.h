// Image and video autoencoders (diffusers' VAEs): a diffusers model folder (config.json and
// diffusion_pytorch_model.safetensors or its shards) loaded once into the compute dtype, then
// encode (the latent distribution's mean and log-variance) and decode, from public ops only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "anvil/anvil.h"
#include "runtime/model.h"

namespace anvil::runtime {

// A diffusers VAE's config.json: AutoencoderKL (SD 1.x / SDXL / FLUX style image VAEs) or the
// causal 3D video VAEs AutoencoderKLWan (Wan2.1 and Wan2.2 settings) and AutoencoderKLQwenImage
// (Wan2.1's architecture). Fields the model does not implement (another act_fn or block type,
// attention scales) and fields this parser does not know are FormatErrors naming them, never a
// silently different model.
struct VaeConfig {
  std::string class_name;  // "_class_name"
  int64_t in_channels = 3, out_channels = 3, latent_channels = 4;  // z_dim for the video VAEs
  double scaling_factor = 0.18215;  // 1 for the video VAEs (they scale by latents_std only)
  std::optional<double> shift_factor;
  std::vector<double> latents_mean, latents_std;  // per latent channel (as the file lists them); empty when null
  int64_t sample_size = 32;  // AutoencoderKL's default tile (pixels); a [h, w] list gives h, as diffusers
  // AutoencoderKL
  int64_t layers_per_block = 1, norm_num_groups = 32;
  std::vector<int64_t> block_out_channels;
  bool use_quant_conv = true, use_post_quant_conv = true, mid_block_add_attention = true;
  // AutoencoderKLWan / AutoencoderKLQwenImage: channels base_dim * dim_mult[i], num_res_blocks
  // per level, temporal halving after level i where temperal_downsample[i] (diffusers' spelling)
  int64_t base_dim = 96, decoder_base_dim = 96, num_res_blocks = 2;
  std::vector<int64_t> dim_mult;
  std::vector<bool> temperal_downsample;
  // Wan2.2: residual levels (an averaging shortcut around each down level, a duplicating one
  // around each up level) and patch_size x patch_size pixels folded into channels first
  bool is_residual = false;
  int64_t patch_size = 1;

  bool video() const { return class_name != "AutoencoderKL"; }
  // The spatial factor between an image and its latent: 2^(levels - 1) (times patch_size).
  int64_t downscale() const {
    return (int64_t{1} << ((video() ? dim_mult.size() : block_out_channels.size()) - 1)) * patch_size;
  }
  // The channels of an image: in_channels, of which a patchified model sees patch_size^2 each.
  int64_t image_channels() const { return in_channels / (patch_size * patch_size); }
  // Frames per latent frame after the first (the video VAEs: 2^(temporal halvings)).
  int64_t temporal_downscale() const {
    int64_t f = 1;
    for (bool t : temperal_downsample) f *= t ? 2 : 1;
    return f;
  }
};

// A pipeline's scaled latents [B, latent_channels, ...] back to what decode() takes, as diffusers'
// pipelines do before decoding: x * latents_std / scaling_factor + latents_mean (per channel) when
// the config has both lists, else x / scaling_factor + shift_factor (0 when absent). float32.
Tensor unscale_latents(const Tensor& x, const VaeConfig& c);

// Built-in configs of real VAEs for random-weight benchmarks: "flux" (FLUX.1's AutoencoderKL),
// "sd" (SD 1.x's), "wan2.1" (AutoencoderKLWan, Wan2.1-T2V's), "wan2.2" (Wan2.2-TI2V-5B's) and
// "qwen-image"; Error listing the names for anything else.
VaeConfig preset_vae_config(const std::string& name);

// Reads DIR/config.json; parse_vae_config is the same from JSON text (`where` names it in errors).
VaeConfig load_vae_config(const std::string& dir);
VaeConfig parse_vae_config(const std::string& text, const std::string& where);

// The encoder's diagonal Gaussian over latents: mean and log-variance [B, latent, h, w], the
// log-variance clamped to [-30, 20] as diffusers does.
struct LatentDistribution {
  Tensor mean, logvar;
  Tensor mode() const { return mean; }
  // mean + exp(logvar / 2) * N(0, 1) drawn from `seed` (Philox, the same numbers on every device).
  Tensor sample(uint64_t seed) const;
};

// diffusers' tiling (enable_tiling()): an input larger than a tile runs as tiles that overlap by
// `overlap` of a tile; each tile's top and left edges are blended linearly with the finished
// tiles above and to the left, and each keeps its first tile - blend rows and columns. Decode
// tiles are latent_tile latents (blend and keep in pixels), encode tiles sample_tile pixels
// (blend and keep in latents), as diffusers' tile_latent_min_size / tile_sample_min_size /
// tile_overlap_factor. The blends run in float32 (diffusers blends in the model's dtype).
// The video VAEs tile as diffusers' AutoencoderKLWan: tiles of tile_height x tile_width pixels
// starting every stride_height / stride_width (defaults 256 and 192), blending tile - stride and
// keeping stride (in pixels for decode, in latents for encode), every frame of a tile through the
// temporal chunks with its own cache. With patch_size p (Wan2.2) the encode walk counts
// patchified pixels and decode blends and keeps tile / p - stride / p and stride / p, as diffusers.
struct VaeTiling {
  bool enabled = false;
  // AutoencoderKL: tile_sample_min_size, tile_latent_min_size, tile_overlap_factor
  int64_t sample_tile = 0;  // 0: the config's sample_size
  int64_t latent_tile = 0;  // 0: sample_size / downscale()
  double overlap = 0.25;
  // video VAEs: tile_sample_min_height / _width, tile_sample_stride_height / _width; 0: the default
  int64_t tile_height = 0, tile_width = 0, stride_height = 0, stride_width = 0;
};

// One axis of a tiled run: tiles of `tile` input elements starting every `stride`, the first
// `blend` output elements of a tile blended with the previous tile's last ones, the first `keep`
// output elements kept.
struct TileAxis {
  int64_t tile, stride, blend, keep;
};

// The tiled run above over the last two dims of x ([B, C, H, W] or [B, C, T, H, W]), rows by `h`
// and columns by `w`: f maps a tile to its output (float32, each of the last two extents
// e' = out_extent(e)). The output is assembled in place: only the blended edge strips of the
// previous tiles are kept, not the tiles.
// progress(done, total) after each tile, when given.
Tensor run_tiled_2d(const Tensor& x, const TileAxis& h, const TileAxis& w,
                    const std::function<int64_t(int64_t)>& out_extent, const std::function<Tensor(const Tensor&)>& f,
                    const std::function<void(int64_t, int64_t)>& progress = {});

class Vae {
 public:
  virtual ~Vae() = default;
  // x [B, in_channels, H, W] (images in [-1, 1]; H and W multiples of downscale()); the video
  // VAEs take [B, in_channels, T, H, W] with T = 1 + temporal_downscale() k (an image is T = 1).
  // Any device and float dtype: moved to the model's device and dtype first. Outputs are float32.
  virtual LatentDistribution encode(const Tensor& x) = 0;
  // z [B, latent_channels, h, w] (video: [B, latent_channels, t, h, w]) as diffusers' decode()
  // takes it (unscaled) -> [B, out_channels, (1 + temporal_downscale() (t - 1),) h * downscale(),
  // w * downscale()], float32; the video VAEs clamp to [-1, 1] as diffusers does.
  virtual Tensor decode(const Tensor& z) = 0;
  // Tiling for the calls that follow; the tiling in force with its defaults filled in.
  virtual void set_tiling(const VaeTiling& tiling) = 0;
  // Called with (done, total) as a long call advances: per tile when tiled, else per latent
  // frame of a video decode (the CLI draws it on a terminal).
  virtual void set_progress(std::function<void(int64_t done, int64_t total)> progress) = 0;
  virtual VaeTiling tiling() const = 0;
  virtual const VaeConfig& config() const = 0;
  virtual Device device() const = 0;
  virtual DType dtype() const = 0;  // the compute dtype
  virtual uint64_t parameters() const = 0;
};

// What every architecture's Vae holds: the config, the load options, the parameter count and the
// tiling; take() reads a weight (counted, progress reported) while the constructor runs.
class LoadedVae : public Vae {
 public:
  LoadedVae(const VaeConfig& c, WeightSource& ws, const LoadOptions& o) : c_(c), o_(o), ws_(&ws) {}
  const VaeConfig& config() const override { return c_; }
  Device device() const override { return o_.device; }
  DType dtype() const override { return o_.dtype; }
  uint64_t parameters() const override { return parameters_; }
  void set_progress(std::function<void(int64_t, int64_t)> progress) override { progress_ = std::move(progress); }

 protected:
  Tensor take(const std::string& name, const Shape& shape);
  void done_loading() { ws_ = nullptr; }
  Tensor input(const Tensor& x) const { return x.to(o_.device, o_.dtype).contiguous(); }
  // The moments [B, 2 z, ...] split into mean and log-variance (clamped to [-30, 20]), float32.
  LatentDistribution distribution(const Tensor& moments) const;

  VaeConfig c_;
  LoadOptions o_;
  VaeTiling tiling_;
  std::function<void(int64_t, int64_t)> progress_;

 private:
  WeightSource* ws_;  // only while the constructor runs
  uint64_t parameters_ = 0;
};

// Loads the diffusers folder DIR for its "_class_name" (LoadOptions: device, dtype,
// allow_unread, progress; the rest are the LLMs'). A checkpoint tensor the model does not read is
// a FormatError naming it unless allow_unread.
std::unique_ptr<Vae> load_vae(const std::string& dir, const LoadOptions& options);

// A VAE of `config` over `weights` (load_vae's second half): the architecture its class names.
std::unique_ptr<Vae> build_vae(const VaeConfig& config, WeightSource& weights, const LoadOptions& options);

// Architectures (one file each under models/).
std::unique_ptr<Vae> build_autoencoder_kl(const VaeConfig& config, WeightSource& weights, const LoadOptions& options);
std::unique_ptr<Vae> build_autoencoder_kl_wan(const VaeConfig& config, WeightSource& weights, const LoadOptions& options);

}  // namespace anvil::runtime
