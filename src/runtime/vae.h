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

// diffusers' AutoencoderKL config.json (SD 1.x / SDXL / FLUX style VAEs). Fields the model does
// not implement (another act_fn or block type) and fields this parser does not know are
// FormatErrors naming them, never a silently different model.
struct VaeConfig {
  std::string class_name;  // "_class_name": "AutoencoderKL"
  int64_t in_channels = 3, out_channels = 3, latent_channels = 4, layers_per_block = 1, norm_num_groups = 32;
  std::vector<int64_t> block_out_channels;
  bool use_quant_conv = true, use_post_quant_conv = true, mid_block_add_attention = true;
  double scaling_factor = 0.18215;
  std::optional<double> shift_factor;
  std::vector<double> latents_mean, latents_std;  // per latent channel; empty when null
  int64_t sample_size = 32;  // the default tile (pixels); a [h, w] list gives its first entry, as diffusers
  // The spatial factor between an image and its latent: 2^(blocks - 1).
  int64_t downscale() const { return int64_t{1} << (block_out_channels.size() - 1); }
};

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
struct VaeTiling {
  bool enabled = false;
  int64_t sample_tile = 0;  // 0: the config's sample_size
  int64_t latent_tile = 0;  // 0: sample_size / downscale()
  double overlap = 0.25;
};

// The tiled run above over x [B, C, H, W] with tiles of `tile` input elements starting every
// `stride`: f maps a tile to its output (float32 [B, C', h', w'], h' = out_extent(h)); blend and
// keep are in output elements. The output is assembled in place: only the blended edge strips of
// the previous tiles are kept, not the tiles.
Tensor run_tiled_2d(const Tensor& x, int64_t tile, int64_t stride, int64_t blend, int64_t keep,
                    const std::function<int64_t(int64_t)>& out_extent, const std::function<Tensor(const Tensor&)>& f);

class Vae {
 public:
  virtual ~Vae() = default;
  // x [B, in_channels, H, W] (images in [-1, 1]; H and W multiples of downscale()), any device
  // and float dtype: moved to the model's device and dtype first. The outputs are float32.
  virtual LatentDistribution encode(const Tensor& x) = 0;
  // z [B, latent_channels, h, w] as diffusers' decode() takes it (unscaled) -> [B, out_channels,
  // h * downscale(), w * downscale()], float32.
  virtual Tensor decode(const Tensor& z) = 0;
  // Tiling for the calls that follow; the tiling in force with its defaults filled in.
  virtual void set_tiling(const VaeTiling& tiling) = 0;
  virtual VaeTiling tiling() const = 0;
  virtual const VaeConfig& config() const = 0;
  virtual Device device() const = 0;
  virtual DType dtype() const = 0;  // the compute dtype
  virtual uint64_t parameters() const = 0;
};

// Loads the diffusers folder DIR for its "_class_name" (LoadOptions: device, dtype,
// allow_unread, progress; the rest are the LLMs'). A checkpoint tensor the model does not read is
// a FormatError naming it unless allow_unread.
std::unique_ptr<Vae> load_vae(const std::string& dir, const LoadOptions& options);

// Architectures (one file each under models/).
std::unique_ptr<Vae> build_autoencoder_kl(const VaeConfig& config, WeightSource& weights, const LoadOptions& options);

}  // namespace anvil::runtime
