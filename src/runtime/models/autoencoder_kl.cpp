// diffusers' AutoencoderKL (the SD 1.x / SDXL / FLUX image VAE), as its autoencoder_kl.py and
// vae.py build it, with B blocks of channels c_0 .. c_{B-1} and G norm groups (eps 1e-6):
//   resnet(x; in -> out): h = conv3x3(silu(group_norm(x))) (norm1, conv1);
//                         h = conv3x3(silu(group_norm(h))) (norm2, conv2);
//                         x + h, x through a 1x1 conv_shortcut when in != out
//   mid block (c_{B-1}): resnet, attention (when mid_block_add_attention), resnet, where
//     attention(x) = x + to_out(sdpa(q, k, v)) over the H W positions as tokens, one head of
//     c_{B-1} channels, q / k / v = linear maps of group_norm(x)
//   encode(x): conv_in (3x3) -> per block i: layers_per_block resnets to c_i, then (all but the
//              last) a downsample: pad right and bottom by 1 with zeros, conv3x3 stride 2 ->
//              mid block -> group_norm, silu, conv_out (3x3) to 2 latent channels each ->
//              quant_conv (1x1) -> mean, logvar (clamped to [-30, 20]) halves of the channels
//   decode(z): post_quant_conv (1x1) -> conv_in (3x3) to c_{B-1} -> mid block -> per block i
//              of the reversed channels: layers_per_block + 1 resnets, then (all but the last)
//              nearest 2x upsampling and a 3x3 conv -> group_norm, silu, conv_out (3x3)
// Weights load once in the compute dtype; the outputs are float32.
#include <string>
#include <vector>

#include "runtime/io.h"
#include "runtime/vae.h"

namespace anvil::runtime {
namespace {

constexpr double kEps = 1e-6;

struct Conv {
  Tensor w, b;
  int64_t stride = 1, pad = 0;
  Tensor operator()(const Tensor& x) const { return conv2d(x, w, b, {stride}, {pad}); }
};
struct Norm {
  Tensor w, b;
};
struct Resnet {
  Norm norm1, norm2;
  Conv conv1, conv2, shortcut;  // shortcut.w undefined when in == out
};
struct Attention {
  Norm norm;
  Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
};
struct MidBlock {
  Resnet first, second;
  bool attend = false;
  Attention attention;
};
struct Stage {  // a down (encoder) or up (decoder) block
  std::vector<Resnet> resnets;
  bool resample = false;
  Conv conv;  // the downsampler's or upsampler's conv
};

class AutoencoderKL final : public LoadedVae {
 public:
  AutoencoderKL(const VaeConfig& c, WeightSource& ws, const LoadOptions& o) : LoadedVae(c, ws, o) {
    const auto& ch = c.block_out_channels;
    const int64_t blocks = static_cast<int64_t>(ch.size()), top = ch.back(), L = c.latent_channels;
    // Encoder.
    enc_in_ = conv("encoder.conv_in", c.in_channels, ch[0], 3);
    for (int64_t i = 0; i < blocks; ++i) {
      const std::string p = "encoder.down_blocks." + std::to_string(i) + ".";
      Stage s;
      int64_t in = i == 0 ? ch[0] : ch[i - 1];
      for (int64_t r = 0; r < c.layers_per_block; ++r, in = ch[i])
        s.resnets.push_back(resnet(p + "resnets." + std::to_string(r), in, ch[i]));
      s.resample = i + 1 < blocks;
      if (s.resample) {
        s.conv = conv(p + "downsamplers.0.conv", ch[i], ch[i], 3);
        s.conv.stride = 2;
        s.conv.pad = 0;  // padded right and bottom by one first (downsample)
      }
      down_.push_back(std::move(s));
    }
    enc_mid_ = mid("encoder.mid_block", top);
    enc_norm_ = norm("encoder.conv_norm_out", top);
    enc_out_ = conv("encoder.conv_out", top, 2 * L, 3);
    if (c.use_quant_conv) quant_ = conv("quant_conv", 2 * L, 2 * L, 1);
    // Decoder.
    if (c.use_post_quant_conv) post_quant_ = conv("post_quant_conv", L, L, 1);
    dec_in_ = conv("decoder.conv_in", L, top, 3);
    dec_mid_ = mid("decoder.mid_block", top);
    for (int64_t i = 0; i < blocks; ++i) {
      const std::string p = "decoder.up_blocks." + std::to_string(i) + ".";
      const int64_t out = ch[static_cast<size_t>(blocks - 1 - i)];
      int64_t in = ch[static_cast<size_t>(blocks - std::max<int64_t>(i, 1))];  // the previous block's channels
      Stage s;
      for (int64_t r = 0; r <= c.layers_per_block; ++r, in = out)
        s.resnets.push_back(resnet(p + "resnets." + std::to_string(r), in, out));
      s.resample = i + 1 < blocks;
      if (s.resample) s.conv = conv(p + "upsamplers.0.conv", out, out, 3);
      up_.push_back(std::move(s));
    }
    dec_norm_ = norm("decoder.conv_norm_out", ch[0]);
    dec_out_ = conv("decoder.conv_out", ch[0], c.out_channels, 3);
    done_loading();
  }

  LatentDistribution encode(const Tensor& x_in) override {
    const int64_t f = c_.downscale();
    ANVIL_CHECK(x_in.dim() == 4 && x_in.size(1) == c_.in_channels, ShapeError, "[vae encode] input must be [B, ",
                c_.in_channels, ", H, W], got ", shape_str(x_in.sizes()));
    ANVIL_CHECK(x_in.size(2) % f == 0 && x_in.size(3) % f == 0 && x_in.size(2) > 0 && x_in.size(3) > 0, ShapeError,
                "[vae encode] H and W must be positive multiples of ", f, " (2^(blocks - 1)), got ",
                shape_str(x_in.sizes()));
    const Tensor x = input(x_in);
    const VaeTiling t = tiling();
    Tensor h;
    if (t.enabled && (x.size(2) > t.sample_tile || x.size(3) > t.sample_tile)) {
      const int64_t blend = static_cast<int64_t>(static_cast<double>(t.latent_tile) * t.overlap);
      const TileAxis a{t.sample_tile, static_cast<int64_t>(static_cast<double>(t.sample_tile) * (1 - t.overlap)), blend,
                       t.latent_tile - blend};
      h = run_tiled_2d(x, a, a, [&](int64_t n) { return encoded_extent(n); },
                       [&](const Tensor& tile) { return moments(tile); }, progress_);
    } else {
      h = moments(x);
    }
    return distribution(h);
  }

  Tensor decode(const Tensor& z_in) override {
    ANVIL_CHECK(z_in.dim() == 4 && z_in.size(1) == c_.latent_channels && z_in.size(2) > 0 && z_in.size(3) > 0,
                ShapeError, "[vae decode] latents must be [B, ", c_.latent_channels, ", h, w], got ",
                shape_str(z_in.sizes()));
    const Tensor z = input(z_in);
    const VaeTiling t = tiling();
    if (t.enabled && (z.size(2) > t.latent_tile || z.size(3) > t.latent_tile)) {
      const int64_t blend = static_cast<int64_t>(static_cast<double>(t.sample_tile) * t.overlap), f = c_.downscale();
      const TileAxis a{t.latent_tile, static_cast<int64_t>(static_cast<double>(t.latent_tile) * (1 - t.overlap)), blend,
                       t.sample_tile - blend};
      return run_tiled_2d(z, a, a, [f](int64_t n) { return n * f; }, [&](const Tensor& tile) { return decoded(tile); }, progress_);
    }
    return decoded(z);
  }

  void set_tiling(const VaeTiling& t) override {
    ANVIL_CHECK(t.sample_tile >= 0 && t.latent_tile >= 0 && t.overlap >= 0 && t.overlap < 1, ValueError,
                "[vae] tiles must be >= 0 (0: the default) and the overlap in [0, 1), got sample_tile ", t.sample_tile,
                ", latent_tile ", t.latent_tile, ", overlap ", t.overlap);
    tiling_ = t;
  }
  VaeTiling tiling() const override {
    VaeTiling t = tiling_;
    if (t.sample_tile == 0) t.sample_tile = c_.sample_size;
    if (t.latent_tile == 0) t.latent_tile = c_.sample_size / c_.downscale();
    return t;
  }

 private:
  Conv conv(const std::string& p, int64_t in, int64_t out, int64_t k) {
    return {take(p + ".weight", {out, in, k, k}), take(p + ".bias", {out}), 1, k / 2};
  }
  Norm norm(const std::string& p, int64_t ch) { return {take(p + ".weight", {ch}), take(p + ".bias", {ch})}; }
  Resnet resnet(const std::string& p, int64_t in, int64_t out) {
    Resnet r;
    r.norm1 = norm(p + ".norm1", in);
    r.conv1 = conv(p + ".conv1", in, out, 3);
    r.norm2 = norm(p + ".norm2", out);
    r.conv2 = conv(p + ".conv2", out, out, 3);
    if (in != out) r.shortcut = conv(p + ".conv_shortcut", in, out, 1);
    return r;
  }
  MidBlock mid(const std::string& p, int64_t ch) {
    MidBlock m;
    m.first = resnet(p + ".resnets.0", ch, ch);
    m.attend = c_.mid_block_add_attention;
    if (m.attend) {
      const std::string a = p + ".attentions.0.";
      Attention& at = m.attention;
      at.norm = norm(a + "group_norm", ch);
      at.q_w = take(a + "to_q.weight", {ch, ch});
      at.q_b = take(a + "to_q.bias", {ch});
      at.k_w = take(a + "to_k.weight", {ch, ch});
      at.k_b = take(a + "to_k.bias", {ch});
      at.v_w = take(a + "to_v.weight", {ch, ch});
      at.v_b = take(a + "to_v.bias", {ch});
      at.out_w = take(a + "to_out.0.weight", {ch, ch});
      at.out_b = take(a + "to_out.0.bias", {ch});
    }
    m.second = resnet(p + ".resnets.1", ch, ch);
    return m;
  }

  // The encoder and quant_conv: the latent distribution's moments [B, 2 latent, h, w] in the
  // compute dtype.
  Tensor moments(const Tensor& x) const {
    Tensor h = enc_in_(x);
    for (const Stage& s : down_) {
      for (const Resnet& r : s.resnets) h = run(r, h);
      if (s.resample) h = s.conv(pad(h, {0, 1, 0, 1}));
    }
    h = run(enc_mid_, h);
    h = enc_out_(act(enc_norm_, h));
    return quant_.w.defined() ? quant_(h) : h;
  }
  // The latent extent of n pixels: each downsample pads by one and convolves 3 wide at stride 2.
  int64_t encoded_extent(int64_t n) const {
    for (const Stage& s : down_)
      if (s.resample) n = (n + 1 - 3) / 2 + 1;
    return n;
  }
  // post_quant_conv and the decoder, float32 out.
  Tensor decoded(const Tensor& z) const {
    Tensor h = post_quant_.w.defined() ? post_quant_(z) : z;
    h = run(dec_mid_, dec_in_(h));
    for (const Stage& s : up_) {
      for (const Resnet& r : s.resnets) h = run(r, h);
      if (s.resample) h = s.conv(interpolate(h, std::nullopt, std::vector<double>{2.0, 2.0}, "nearest"));
    }
    return dec_out_(act(dec_norm_, h)).to(kFloat32);
  }
  Tensor act(const Norm& n, const Tensor& x) const {
    return silu(group_norm(x, c_.norm_num_groups, n.w, n.b, kEps));
  }
  Tensor run(const Resnet& r, const Tensor& x) const {
    Tensor h = r.conv1(act(r.norm1, x));
    h = r.conv2(act(r.norm2, h));
    return add(r.shortcut.w.defined() ? r.shortcut(x) : x, h);
  }
  Tensor run(const MidBlock& m, const Tensor& x) const {
    Tensor h = run(m.first, x);
    if (m.attend) h = attend(m.attention, h);
    return run(m.second, h);
  }
  // One head over the H W positions: tokens [B, 1, HW, C].
  Tensor attend(const Attention& a, const Tensor& x) const {
    const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const Tensor t = group_norm(x, c_.norm_num_groups, a.norm.w, a.norm.b, kEps).view({B, C, H * W}).transpose(1, 2);
    const Tensor q = linear(t, a.q_w, a.q_b).unsqueeze(1), k = linear(t, a.k_w, a.k_b).unsqueeze(1),
                 v = linear(t, a.v_w, a.v_b).unsqueeze(1);
    const Tensor o = linear(scaled_dot_product_attention(q, k, v).squeeze(1), a.out_w, a.out_b);
    return add(x, o.transpose(1, 2).reshape({B, C, H, W}));
  }

  Conv enc_in_, enc_out_, quant_, post_quant_, dec_in_, dec_out_;
  Norm enc_norm_, dec_norm_;
  std::vector<Stage> down_, up_;
  MidBlock enc_mid_, dec_mid_;
};

}  // namespace

std::unique_ptr<Vae> build_autoencoder_kl(const VaeConfig& config, WeightSource& weights, const LoadOptions& options) {
  return std::make_unique<AutoencoderKL>(config, weights, options);
}

}  // namespace anvil::runtime
