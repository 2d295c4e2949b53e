// diffusers' AutoencoderKLWan (Wan2.1 and Wan2.2 settings) and AutoencoderKLQwenImage (Wan2.1's
// model), as autoencoder_kl_wan.py builds them, with channels c_i = base_dim * dim_mult[i]
// (c_{-1} = base_dim; the decoder's from decoder_base_dim):
//   causal conv (k x k x k): zero padding of k - 1 frames in front only (none behind), (k - 1) / 2
//     each side in H and W; under a feature cache the previous chunk's last 2 input frames
//     replace that front padding
//   rms(x) = normalize(x over channels, eps 1e-12) * (sqrt(C) * gamma, folded at load)
//   resnet(x; in -> out): h = conv3(silu(rms(x))) (norm1, conv1); h = conv3(silu(rms(h))) (norm2,
//     conv2); h + x, x through a 1x1x1 conv_shortcut when in != out
//   attention (per frame): x + proj(sdpa(q, k, v)) with q / k / v = to_qkv(rms(x)), one head over
//     the H W positions
//   encode: the frames in chunks (the first frame, then 4 at a time) through conv_in, per level i
//     num_res_blocks resnets to c_i then (all but the last level) a downsample: pad right and
//     bottom by 1, conv3x3 stride 2 per frame, and where temperal_downsample[i] (from the second
//     chunk on) a time conv (3 x 1 x 1, stride 2) over the previous chunk's last frame and this
//     chunk's; mid block (resnet, attention, resnet), rms, silu, conv_out to 2 z; chunks
//     concatenated; quant_conv (1x1x1) -> mean, logvar (clamped to [-30, 20])
//   decode: post_quant_conv, then one latent frame at a time: conv_in, mid block, per level of the
//     reversed channels num_res_blocks + 1 resnets then (all but the last) an upsample: where
//     temporal (from the second frame on) a causal time conv to 2 c channels interleaved into
//     twice the frames, then per frame nearest-exact 2x and conv3x3 to c / 2; rms, silu,
//     conv_out; frames concatenated and clamped to [-1, 1] (not after a tiled QwenImage decode,
//     as diffusers 0.42)
// Wan2.2 (is_residual): each down level adds average_down of its input (frames and pixels folded
// into channels, channel groups averaged) and each upsampling up level duplicate_up of its input
// (channels repeated and unfolded into frames and pixels); the upsample conv keeps c channels; and
// with patch_size p the input is patchified (p x p pixels into channels) before the encoder and
// the decoder's output unpatchified.
// Each causal conv keeps its own cache slot, visited in the same order every chunk.
#include <string>
#include <vector>

#include "runtime/io.h"
#include "runtime/vae.h"

namespace anvil::runtime {
namespace {

constexpr int64_t kCacheFrames = 2;

// The last n frames (dim 2) of x, or all of them when fewer.
Tensor last_frames(const Tensor& x, int64_t n) {
  const int64_t t = x.size(2);
  return x.narrow(2, t - std::min(t, n), std::min(t, n));
}

struct CausalConv {
  Tensor w, b;
  int64_t front = 0;             // zero frames in front (2 x the time padding)
  Shape stride = {1, 1, 1}, padding = {0, 0, 0};
  // x [B, C, T, H, W]; `cache`: earlier input frames that take the place of front padding.
  Tensor operator()(Tensor x, const Tensor& cache = {}) const {
    int64_t zeros = front;
    if (cache.defined() && front > 0) {
      x = cat({cache, x}, 2);
      zeros -= cache.size(2);
    }
    if (zeros > 0) x = pad(x, {0, 0, 0, 0, zeros, 0});
    return conv3d(x, w, b, stride, padding);
  }
};

// The per-chunk state of every cached conv, in visiting order (diffusers' feat_cache / feat_idx).
struct FeatureCache {
  std::vector<Tensor> frames;
  std::vector<bool> first_skipped;  // an upsampler that passed its first chunk without a time conv
  size_t next = 0;
  size_t slot() {
    if (next == frames.size()) {
      frames.emplace_back();
      first_skipped.push_back(false);
    }
    return next++;
  }
};

// The cache's own copy of frames that may view a live activation: one copy either way (as
// contiguous().clone() it was two for the usual strided narrow).
Tensor own_copy(const Tensor& t) { return t.is_contiguous() ? t.clone() : t.contiguous(); }

// conv over x, the slot's frames in front; the slot then holds x's last 2 frames (with the
// previous last frame in front when x has one).
Tensor cached(const CausalConv& conv, const Tensor& x, FeatureCache& fc) {
  const size_t i = fc.slot();
  Tensor keep = last_frames(x, kCacheFrames);
  if (keep.size(2) < kCacheFrames && fc.frames[i].defined()) keep = cat({last_frames(fc.frames[i], 1), keep}, 2);
  Tensor y = conv(x, fc.frames[i]);
  fc.frames[i] = own_copy(keep);
  return y;
}

struct Rms {
  Tensor gamma;  // sqrt(C) * gamma, [C, 1, 1, 1] (video) or [C, 1, 1] (per frame)
  // normalize's one kernel, then one product (the nine passes of its composition were ~16 % of
  // a Wan2.1 bf16 decode on the CPU).
  Tensor operator()(const Tensor& x) const { return mul(normalize(x, 2.0, 1, 1e-12), gamma); }
};

struct Resnet {
  Rms norm1, norm2;
  CausalConv conv1, conv2, shortcut;  // shortcut.w undefined when in == out
  Tensor operator()(const Tensor& x, FeatureCache& fc) const {
    const Tensor h = shortcut.w.defined() ? shortcut(x) : x;
    Tensor y = cached(conv1, silu(norm1(x)), fc);
    y = cached(conv2, silu(norm2(y)), fc);
    return add(y, h);
  }
};

struct Attention {
  Rms norm;
  Tensor qkv_w, qkv_b, proj_w, proj_b;
  Tensor operator()(const Tensor& x) const {
    const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
    const Tensor frames = x.permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
    const Tensor qkv =
        conv2d(norm(frames), qkv_w, qkv_b).reshape({B * T, 1, 3 * C, H * W}).permute({0, 1, 3, 2}).contiguous();
    const Tensor o = scaled_dot_product_attention(qkv.narrow(3, 0, C), qkv.narrow(3, C, C), qkv.narrow(3, 2 * C, C));
    const Tensor p = conv2d(o.squeeze(1).permute({0, 2, 1}).reshape({B * T, C, H, W}), proj_w, proj_b);
    return add(p.view({B, T, C, H, W}).permute({0, 2, 1, 3, 4}), x);
  }
};

// A level's resampling: spatial (per frame) and, for the temporal modes, a causal time conv.
struct Resample {
  bool up = false, temporal = false;
  Tensor w, b;      // the per-frame conv3x3
  CausalConv time;  // temporal only

  Tensor operator()(Tensor x, FeatureCache& fc) const {
    const int64_t B = x.size(0), C = x.size(1);
    if (up && temporal) {
      const size_t i = fc.slot();
      if (!fc.frames[i].defined() && !fc.first_skipped[i]) {
        fc.first_skipped[i] = true;  // the first chunk keeps its frame count
      } else {
        Tensor keep = last_frames(x, kCacheFrames);
        if (keep.size(2) < kCacheFrames)
          keep = cat({fc.frames[i].defined() ? last_frames(fc.frames[i], 1) : zeros_like(keep), keep}, 2);
        const bool after_skip = !fc.frames[i].defined();
        x = after_skip ? time(x) : time(x, fc.frames[i]);
        fc.frames[i] = own_copy(keep);
        // channels [s C, (s + 1) C) of frame t become frame 2 t + s
        const int64_t T = x.size(2), H = x.size(3), W = x.size(4);
        x = x.view({B, 2, C, T, H, W}).permute({0, 2, 3, 1, 4, 5}).reshape({B, C, 2 * T, H, W});
      }
    }
    const int64_t T = x.size(2), H = x.size(3), W = x.size(4);
    Tensor f = x.permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
    if (up) {
      const Tensor big = interpolate(f.to(kFloat32), std::nullopt, std::vector<double>{2.0, 2.0}, "nearest-exact");
      f = conv2d(big.to(f.dtype()), w, b, {1}, {1});
    } else {
      f = conv2d(pad(f, {0, 1, 0, 1}), w, b, {2}, {0});
    }
    x = f.view({B, T, f.size(1), f.size(2), f.size(3)}).permute({0, 2, 1, 3, 4});
    if (!up && temporal) {
      const size_t i = fc.slot();
      if (!fc.frames[i].defined()) {
        fc.frames[i] = x.contiguous().clone();  // the first chunk passes without a time conv
      } else {
        const Tensor keep = last_frames(x, 1).contiguous().clone();
        x = time(cat({last_frames(fc.frames[i], 1), x}, 2));
        fc.frames[i] = keep;
      }
    }
    return x;
  }
};

struct MidBlock {
  Resnet first, second;
  Attention attention;
  Tensor operator()(const Tensor& x, FeatureCache& fc) const { return second(attention(first(x, fc)), fc); }
};

// Wan2.2's shortcut around a down level: the level's input with ft frames (zero frames in front
// to a multiple of ft) and fs x fs pixels folded into channels, then out-channel groups averaged.
Tensor average_down(const Tensor& x_in, int64_t out, int64_t ft, int64_t fs) {
  Tensor x = x_in;
  const int64_t pad_t = (ft - x.size(2) % ft) % ft;
  if (pad_t > 0) x = pad(x, {0, 0, 0, 0, pad_t, 0});
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2) / ft, H = x.size(3) / fs, W = x.size(4) / fs;
  const int64_t group = C * ft * fs * fs / out;
  const Tensor folded =
      x.view({B, C, T, ft, H, fs, W, fs}).permute({0, 1, 3, 5, 7, 2, 4, 6}).reshape({B, out, group, T, H, W});
  return mean(folded, {2});
}

// Wan2.2's shortcut around an up level: each channel repeated to fill out x ft x fs x fs channels,
// which unfold into ft frames and fs x fs pixels; the first chunk drops its first ft - 1 frames.
Tensor duplicate_up(const Tensor& x, int64_t out, int64_t ft, int64_t fs, bool first_chunk) {
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t repeats = out * ft * fs * fs / C;
  const Tensor rep = x.unsqueeze(2).expand({B, C, repeats, T, H, W}).reshape({B, out, ft, fs, fs, T, H, W});
  Tensor y = rep.permute({0, 1, 5, 2, 6, 3, 7, 4}).reshape({B, out, T * ft, H * fs, W * fs});
  return first_chunk ? y.narrow(2, ft - 1, y.size(2) - (ft - 1)) : y;
}

struct Layer {  // an encoder level entry or a decoder level: resnets, then an optional resample
  std::vector<Resnet> resnets;
  bool resample = false;
  Resample rs;
  // Wan2.2 (is_residual): the level's shortcut (average_down / duplicate_up) to `shortcut_out`
  // channels with ft frames and fs pixels per step; shortcut_out 0: none
  int64_t shortcut_out = 0, ft = 1, fs = 1;
};

class AutoencoderKLWan final : public LoadedVae {
 public:
  AutoencoderKLWan(const VaeConfig& c, WeightSource& ws, const LoadOptions& o) : LoadedVae(c, ws, o) {
    const int64_t levels = static_cast<int64_t>(c.dim_mult.size()), z = c.latent_channels;
    // Encoder: channels base * [1, dim_mult...]; diffusers lists resnets and resamples flat.
    std::vector<int64_t> dims = {c.base_dim};
    for (int64_t m : c.dim_mult) dims.push_back(c.base_dim * m);
    enc_in_ = causal("encoder.conv_in", c.in_channels, dims[0], 3);
    int64_t n = 0;
    for (int64_t i = 0; i < levels; ++i) {
      Layer L;
      const bool down = i + 1 < levels, temporal = down && c.temperal_downsample[static_cast<size_t>(i)];
      // Wan2.1 lists resnets and resamples flat; Wan2.2's levels are blocks with resnets.N and downsampler
      const std::string level = "encoder.down_blocks." + std::to_string(i);
      for (int64_t r = 0; r < c.num_res_blocks; ++r, ++n)
        L.resnets.push_back(resnet(c.is_residual ? level + ".resnets." + std::to_string(r)
                                                 : "encoder.down_blocks." + std::to_string(n),
                                   r == 0 ? dims[i] : dims[i + 1], dims[i + 1]));
      if (down) {
        L.resample = true;
        L.rs = resample(c.is_residual ? level + ".downsampler" : "encoder.down_blocks." + std::to_string(n++),
                        dims[i + 1], dims[i + 1], false, temporal);
      }
      if (c.is_residual) {
        L.shortcut_out = dims[i + 1];
        L.ft = temporal ? 2 : 1;
        L.fs = down ? 2 : 1;
        ANVIL_CHECK(dims[i] * L.ft * L.fs * L.fs % dims[i + 1] == 0, FormatError, "[vae] down level ", i, ": ",
                    dims[i], " channels x ", L.ft * L.fs * L.fs, " do not divide into ", dims[i + 1]);
      }
      down_.push_back(std::move(L));
    }
    enc_mid_ = mid("encoder.mid_block", dims.back());
    enc_norm_ = rms("encoder.norm_out", dims.back(), true);
    enc_out_ = causal("encoder.conv_out", dims.back(), 2 * z, 3);
    quant_ = causal("quant_conv", 2 * z, 2 * z, 1);
    // Decoder: channels base * [dim_mult[-1], reversed dim_mult...]; a level after an upsample
    // starts from half its input channels (the upsample's conv halves them).
    post_quant_ = causal("post_quant_conv", z, z, 1);
    std::vector<int64_t> up = {c.decoder_base_dim * c.dim_mult.back()};
    for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it) up.push_back(c.decoder_base_dim * *it);
    dec_in_ = causal("decoder.conv_in", z, up[0], 3);
    dec_mid_ = mid("decoder.mid_block", up[0]);
    for (int64_t i = 0; i < levels; ++i) {
      const std::string p = "decoder.up_blocks." + std::to_string(i) + ".";
      const int64_t out = up[static_cast<size_t>(i + 1)];
      const int64_t level_in = i > 0 && !c.is_residual ? up[static_cast<size_t>(i)] / 2 : up[static_cast<size_t>(i)];
      const bool upsample = i + 1 < levels;
      const bool temporal = upsample && c.temperal_downsample[static_cast<size_t>(levels - 2 - i)];
      Layer L;
      int64_t in = level_in;
      for (int64_t r = 0; r <= c.num_res_blocks; ++r, in = out)
        L.resnets.push_back(resnet(p + "resnets." + std::to_string(r), in, out));
      if (upsample) {
        L.resample = true;
        // Wan2.1's upsample conv halves the channels; Wan2.2's keeps them
        L.rs = resample(p + (c.is_residual ? "upsampler" : "upsamplers.0"), out, c.is_residual ? out : out / 2, true,
                        temporal);
      }
      if (c.is_residual && upsample) {
        L.shortcut_out = out;
        L.ft = temporal ? 2 : 1;
        L.fs = 2;
        ANVIL_CHECK(out * L.ft * L.fs * L.fs % level_in == 0, FormatError, "[vae] up level ", i, ": ", out,
                    " channels x ", L.ft * L.fs * L.fs, " are not a multiple of ", level_in);
      }
      up_.push_back(std::move(L));
    }
    dec_norm_ = rms("decoder.norm_out", up.back(), true);
    dec_out_ = causal("decoder.conv_out", up.back(), c.out_channels, 3);
    done_loading();
  }

  LatentDistribution encode(const Tensor& x_in) override {
    const int64_t f = c_.downscale(), ft = c_.temporal_downscale(), p = c_.patch_size;
    ANVIL_CHECK(x_in.dim() == 5 && x_in.size(1) == c_.image_channels(), ShapeError, "[vae encode] input must be [B, ",
                c_.image_channels(), ", T, H, W], got ", shape_str(x_in.sizes()));
    ANVIL_CHECK(x_in.size(3) % f == 0 && x_in.size(4) % f == 0 && x_in.size(3) > 0 && x_in.size(4) > 0, ShapeError,
                "[vae encode] H and W must be positive multiples of ", f, ", got ", shape_str(x_in.sizes()));
    ANVIL_CHECK(x_in.size(2) >= 1 && (x_in.size(2) - 1) % ft == 0, ShapeError, "[vae encode] T must be 1 + ", ft,
                " k frames (the first frame, then chunks of ", ft, "), got ", x_in.size(2));
    const Tensor x = patchify(input(x_in));
    const VaeTiling t = tiling();
    Tensor h;
    if (t.enabled && (x_in.size(4) > t.tile_width || x_in.size(3) > t.tile_height)) {
      // diffusers walks the patchified input with the pixel tile sizes; latents are 1 / (f / p) of it
      const int64_t e = f / p;
      const TileAxis ah{t.tile_height, t.stride_height, t.tile_height / e - t.stride_height / e, t.stride_height / e};
      const TileAxis aw{t.tile_width, t.stride_width, t.tile_width / e - t.stride_width / e, t.stride_width / e};
      h = run_tiled_2d(x, ah, aw, [e](int64_t n) { return n / e; }, [&](const Tensor& tl) { return moments(tl); }, progress_);
      h = h.narrow(3, 0, std::min(h.size(3), x.size(3) / e)).narrow(4, 0, std::min(h.size(4), x.size(4) / e));
    } else {
      h = moments(x);
    }
    return distribution(h);
  }

  Tensor decode(const Tensor& z_in) override {
    ANVIL_CHECK(z_in.dim() == 5 && z_in.size(1) == c_.latent_channels && z_in.size(2) > 0 && z_in.size(3) > 0 &&
                    z_in.size(4) > 0,
                ShapeError, "[vae decode] latents must be [B, ", c_.latent_channels, ", t, h, w], got ",
                shape_str(z_in.sizes()));
    const Tensor z = input(z_in);
    const VaeTiling t = tiling();
    const int64_t f = c_.downscale(), p = c_.patch_size;
    if (t.enabled && (z.size(4) > t.tile_width / f || z.size(3) > t.tile_height / f)) {
      ANVIL_CHECK(t.stride_height >= f && t.stride_width >= f, ValueError, "[vae decode] tiled decode needs strides of ",
                  "at least ", f, " pixels (one latent), got ", t.stride_height, " x ", t.stride_width);
      // latent tiles of tile / f; blends and crops in patchified output pixels (tile / p, stride / p)
      const TileAxis ah{t.tile_height / f, t.stride_height / f, t.tile_height / p - t.stride_height / p,
                        t.stride_height / p};
      const TileAxis aw{t.tile_width / f, t.stride_width / f, t.tile_width / p - t.stride_width / p, t.stride_width / p};
      const int64_t e = f / p;
      Tensor out = run_tiled_2d(
          z, ah, aw, [e](int64_t n) { return n * e; }, [&](const Tensor& tl) { return decoded(tl, false); }, progress_);
      out = unpatchify(
          out.narrow(3, 0, std::min(out.size(3), z.size(3) * e)).narrow(4, 0, std::min(out.size(4), z.size(4) * e)));
      // diffusers 0.42's AutoencoderKLQwenImage.tiled_decode does not clamp (its _decode does):
      // followed, so tiled outputs match diffusers'.
      if (c_.class_name == "AutoencoderKLQwenImage") return out;
      return clamp(out, Scalar(-1.0), Scalar(1.0));
    }
    return clamp(unpatchify(decoded(z, true)), Scalar(-1.0), Scalar(1.0));
  }

  void set_tiling(const VaeTiling& t) override {
    const int64_t f = c_.downscale() / c_.patch_size;  // the encoder's factor over (patchified) pixels
    ANVIL_CHECK(t.tile_height >= 0 && t.tile_width >= 0 && t.stride_height >= 0 && t.stride_width >= 0, ValueError,
                "[vae] tile sizes and strides must be >= 0 (0: the default), got tile ", t.tile_height, " x ",
                t.tile_width, ", stride ", t.stride_height, " x ", t.stride_width);
    tiling_ = t;
    const VaeTiling r = tiling();
    for (auto [tile, stride] : {std::pair{r.tile_height, r.stride_height}, std::pair{r.tile_width, r.stride_width}})
      ANVIL_CHECK(stride / f > 0 && stride <= tile, ValueError, "[vae] video tiles need a stride of at least ", f,
                  " pixels and no larger than the tile, got tile ", tile, ", stride ", stride,
                  " (defaults: tile 256, stride 192)");
  }
  VaeTiling tiling() const override {
    VaeTiling t = tiling_;
    for (int64_t* v : {&t.tile_height, &t.tile_width})
      if (*v == 0) *v = 256;
    for (int64_t* v : {&t.stride_height, &t.stride_width})
      if (*v == 0) *v = 192;
    return t;
  }


 private:
  CausalConv causal(const std::string& p, int64_t in, int64_t out, int64_t k) {
    CausalConv cv;
    cv.w = take(p + ".weight", {out, in, k, k, k});
    cv.b = take(p + ".bias", {out});
    cv.front = k - 1;
    cv.padding = {0, k / 2, k / 2};
    return cv;
  }
  Rms rms(const std::string& p, int64_t ch, bool video) {
    const Tensor g = take(p + ".gamma", video ? Shape{ch, 1, 1, 1} : Shape{ch, 1, 1});
    return {mul(g.to(kFloat32), Scalar(std::sqrt(static_cast<double>(ch)))).to(g.dtype())};
  }
  Resnet resnet(const std::string& p, int64_t in, int64_t out) {
    Resnet r;
    r.norm1 = rms(p + ".norm1", in, true);
    r.conv1 = causal(p + ".conv1", in, out, 3);
    r.norm2 = rms(p + ".norm2", out, true);
    r.conv2 = causal(p + ".conv2", out, out, 3);
    if (in != out) r.shortcut = causal(p + ".conv_shortcut", in, out, 1);
    return r;
  }
  Resample resample(const std::string& p, int64_t ch, int64_t out, bool up, bool temporal) {
    Resample s;
    s.up = up;
    s.temporal = temporal;
    s.w = take(p + ".resample.1.weight", {out, ch, 3, 3});
    s.b = take(p + ".resample.1.bias", {out});
    if (temporal) {
      s.time.w = take(p + ".time_conv.weight", {up ? 2 * ch : ch, ch, 3, 1, 1});
      s.time.b = take(p + ".time_conv.bias", {up ? 2 * ch : ch});
      s.time.front = up ? 2 : 0;  // the upsampler's is causal; the downsampler's sees 1 + chunk frames
      if (!up) s.time.stride = {2, 1, 1};
    }
    return s;
  }
  MidBlock mid(const std::string& p, int64_t ch) {
    MidBlock m;
    m.first = resnet(p + ".resnets.0", ch, ch);
    const std::string a = p + ".attentions.0.";
    m.attention.norm = rms(a + "norm", ch, false);
    m.attention.qkv_w = take(a + "to_qkv.weight", {3 * ch, ch, 1, 1});
    m.attention.qkv_b = take(a + "to_qkv.bias", {3 * ch});
    m.attention.proj_w = take(a + "proj.weight", {ch, ch, 1, 1});
    m.attention.proj_b = take(a + "proj.bias", {ch});
    m.second = resnet(p + ".resnets.1", ch, ch);
    return m;
  }


  // Wan2.2's patchify: p x p pixels into channels, channel c p^2 + j p + i holding pixel (i, j) of
  // each patch (diffusers' order); unpatchify undoes it.
  Tensor patchify(const Tensor& x) const {
    const int64_t p = c_.patch_size;
    if (p == 1) return x;
    const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3) / p, W = x.size(4) / p;
    return x.view({B, C, T, H, p, W, p}).permute({0, 1, 6, 4, 2, 3, 5}).reshape({B, C * p * p, T, H, W});
  }
  Tensor unpatchify(const Tensor& x) const {
    const int64_t p = c_.patch_size;
    if (p == 1) return x;
    const int64_t B = x.size(0), C = x.size(1) / (p * p), T = x.size(2), H = x.size(3), W = x.size(4);
    return x.view({B, C, p, p, T, H, W}).permute({0, 1, 4, 5, 3, 6, 2}).reshape({B, C, T, H * p, W * p});
  }

  // The encoder over one chunk of frames, its cache carried between chunks.
  Tensor encode_chunk(const Tensor& x, FeatureCache& fc) const {
    fc.next = 0;
    Tensor h = cached(enc_in_, x, fc);
    for (const Layer& L : down_) {
      const Tensor level_in = h;
      for (const Resnet& r : L.resnets) h = r(h, fc);
      if (L.resample) h = L.rs(h, fc);
      if (L.shortcut_out) h = add(h, average_down(level_in, L.shortcut_out, L.ft, L.fs));
    }
    h = enc_mid_(h, fc);
    return cached(enc_out_, silu(enc_norm_(h)), fc);
  }
  // The encoder over every chunk (the first frame, then temporal_downscale() frames at a time)
  // and quant_conv: moments [B, 2 z, t, h, w] in the compute dtype.
  Tensor moments(const Tensor& x) const {
    FeatureCache fc;
    const int64_t ft = c_.temporal_downscale(), T = x.size(2);
    std::vector<Tensor> chunks;
    for (int64_t s = 0; s < T; s = s == 0 ? 1 : s + ft)
      chunks.push_back(encode_chunk(x.narrow(2, s, s == 0 ? 1 : std::min(ft, T - s)).contiguous(), fc));
    return quant_(cat(chunks, 2));
  }
  Tensor decode_chunk(const Tensor& z, FeatureCache& fc, bool first_chunk) const {
    fc.next = 0;
    Tensor h = dec_mid_(cached(dec_in_, z, fc), fc);
    for (const Layer& L : up_) {
      const Tensor level_in = h;
      for (const Resnet& r : L.resnets) h = r(h, fc);
      if (L.resample) h = L.rs(h, fc);
      if (L.shortcut_out) h = add(h, duplicate_up(level_in, L.shortcut_out, L.ft, L.fs, first_chunk));
    }
    return cached(dec_out_, silu(dec_norm_(h)), fc);
  }
  // post_quant_conv, then the decoder one latent frame at a time into a float32 video (patchified).
  // report: progress per latent frame (an untiled decode; a tiled one reports tiles).
  Tensor decoded(const Tensor& z, bool report) const {
    const Tensor q = post_quant_(z);
    FeatureCache fc;
    Tensor out;
    int64_t at = 0;
    for (int64_t k = 0; k < q.size(2); ++k) {
      const Tensor frames = decode_chunk(q.narrow(2, k, 1).contiguous(), fc, k == 0).to(kFloat32);
      if (!out.defined()) {
        Shape s = frames.sizes();
        s[2] = 1 + (q.size(2) - 1) * c_.temporal_downscale();
        out = empty(s, TensorOptions(kFloat32).device(frames.device()));
      }
      ANVIL_CHECK(at + frames.size(2) <= out.size(2), ShapeError, "[vae decode] latent frame ", k, " decoded to ",
                  frames.size(2), " frames past the ", out.size(2), " expected");
      out.narrow(2, at, frames.size(2)).copy_(frames);
      at += frames.size(2);
      if (report && progress_) progress_(k + 1, q.size(2));
    }
    return out;
  }

  CausalConv enc_in_, enc_out_, quant_, post_quant_, dec_in_, dec_out_;
  Rms enc_norm_, dec_norm_;
  std::vector<Layer> down_, up_;
  MidBlock enc_mid_, dec_mid_;
};

}  // namespace

std::unique_ptr<Vae> build_autoencoder_kl_wan(const VaeConfig& config, WeightSource& weights, const LoadOptions& options) {
  return std::make_unique<AutoencoderKLWan>(config, weights, options);
}

}  // namespace anvil::runtime
