// VAEs against diffusers: the tiny random-weight AutoencoderKL of tests/data/sd-vae (made by
// diffusers 0.42.1 with PyTorch 2.11 on CPU in float32; golden.safetensors holds its input,
// the encoder's latent mean / log-variance and two decodes), in float32 and bfloat16 on every
// device, plus the config and input errors a user meets first.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "expect_throws.h"
#include "harness.h"
#include "runtime/safetensors.h"
#include "runtime/vae.h"

namespace {

using namespace anvil;
using runtime::LoadOptions;

std::string vae_dir(const std::string& name) { return th::source_dir() + "/tests/data/" + name; }

LoadOptions options(Device dev, DType t) {
  LoadOptions o;
  o.device = dev;
  o.dtype = t;
  return o;
}

// golden.safetensors' tensor `name` (float32, CPU).
Tensor golden(const std::string& dir, const std::string& name) {
  return runtime::Checkpoint(dir, "golden").tensor(name).to(kFloat32).contiguous();
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(kCPU).to(kFloat32).contiguous();
  return std::vector<double>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// Every |got - want| <= rel * max|want| (the output's scale), shapes equal.
::testing::AssertionResult within_scale(const Tensor& got, const Tensor& want, double rel) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.sizes()) << ", want " << shape_str(want.sizes());
  const std::vector<double> g = values(got), w = values(want);
  double scale = 0, err = 0;
  size_t at = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= err)) {
      err = std::isnan(g[i]) ? INFINITY : std::abs(g[i] - w[i]);
      at = i;
    }
  if (err <= rel * scale) return ::testing::AssertionSuccess() << "max error " << err << " of scale " << scale;
  return ::testing::AssertionFailure() << "max error " << err << " at " << at << " (got " << g[at] << ", want " << w[at]
                                       << ") > " << rel << " x scale " << scale;
}

// PSNR in dB of got against want with the peak as want's range (max - min), as image metrics
// with a data range do.
double psnr(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values(got), w = values(want);
  double se = 0;
  for (size_t i = 0; i < g.size(); ++i) se += (g[i] - w[i]) * (g[i] - w[i]);
  const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
  const double range = *hi - *lo, mse = se / static_cast<double>(g.size());
  return mse == 0 ? INFINITY : 10.0 * std::log10(range * range / mse);
}

class Vae : public th::DeviceTest {};

// float32: every output within 1e-5 of its scale, tighter than the issue's 1e-4 so that the
// norms' eps (1e-6; 1e-5 moves outputs by up to 1.6e-5 of scale) is checked too. Measured on
// CPU: at most 1.1e-6 of scale (latent logvar 2.7e-6 of 2.53). The same bits on a second call.
TEST_P(Vae, AutoencoderKLFloat32MatchesDiffusers) {
  const std::string dir = vae_dir("sd-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
  EXPECT_EQ(vae->config().class_name, "AutoencoderKL");
  EXPECT_EQ(vae->parameters(), 658375u);  // golden.json's param_count
  const runtime::LatentDistribution d = vae->encode(golden(dir, "input"));
  EXPECT_EQ(d.mean.device(), dev());
  EXPECT_EQ(d.mean.dtype(), kFloat32);
  EXPECT_TRUE(within_scale(d.mean, golden(dir, "latent_mean"), 1e-5)) << "latent mean";
  EXPECT_TRUE(within_scale(d.logvar, golden(dir, "latent_logvar"), 1e-5)) << "latent logvar";
  const Tensor y = vae->decode(golden(dir, "latent_in"));
  EXPECT_TRUE(within_scale(y, golden(dir, "decoded"), 1e-5)) << "decode(latent_in)";
  EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_mean")), golden(dir, "decoded_from_mean"), 1e-4))
      << "decode(latent_mean)";
  EXPECT_EQ(values(vae->decode(golden(dir, "latent_in"))), values(y)) << "the same bits every call";
}

// diffusers' tiling with golden.json's attributes (tile_sample_min_size 48, tile_latent_min_size
// 24, overlap 0.25: a 2 x 2 grid both ways), same bound as untiled; tiling is off by default and
// an input no larger than a tile runs untiled.
TEST_P(Vae, AutoencoderKLTiledMatchesDiffusers) {
  const std::string dir = vae_dir("sd-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
  EXPECT_FALSE(vae->tiling().enabled);
  EXPECT_EQ(vae->tiling().sample_tile, 64);  // the config's sample_size
  EXPECT_EQ(vae->tiling().latent_tile, 32);
  vae->set_tiling({true, 48, 24, 0.25});
  const runtime::LatentDistribution d = vae->encode(golden(dir, "input"));
  EXPECT_TRUE(within_scale(d.mean, golden(dir, "latent_mean_tiled"), 1e-5)) << "tiled latent mean";
  EXPECT_TRUE(within_scale(d.logvar, golden(dir, "latent_logvar_tiled"), 1e-5)) << "tiled latent logvar";
  EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded_tiled"), 1e-5)) << "tiled decode";
  vae->set_tiling({true, 64, 32, 0.25});  // one tile: the untiled result
  EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded"), 1e-5)) << "one tile";
  EXPECT_THROWS_SAYING(ValueError, "vae", "overlap in [0, 1)", vae->set_tiling({true, 48, 24, 1.0}));
}

// The causal 3D VAEs: Wan2.1 settings (a 5-frame 32 x 32 video, 2 latent frames) and
// Qwen-Image (one 64 x 64 frame), each untiled and tiled with golden.json's attributes (a 2 x 2
// grid both ways), and Qwen-Image's decode(encode(x).mode()) round trip. Measured worst: 3.5e-6
// of scale (Wan decode).
struct VideoCase {
  std::string dir;
  uint64_t params;
  int64_t tile, stride;
  bool roundtrip;
};

TEST_P(Vae, VideoVaesMatchDiffusers) {
  for (const VideoCase& vc : {VideoCase{"wan-vae", 293599, 24, 16, false}, VideoCase{"qwen-image-vae", 299043, 40, 32, true}}) {
    SCOPED_TRACE(vc.dir);
    const std::string dir = vae_dir(vc.dir);
    auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
    EXPECT_EQ(vae->parameters(), vc.params);  // golden.json's param_count
    EXPECT_TRUE(vae->config().video());
    const runtime::LatentDistribution d = vae->encode(golden(dir, "input"));
    EXPECT_TRUE(within_scale(d.mean, golden(dir, "latent_mean"), 1e-5)) << "latent mean";
    EXPECT_TRUE(within_scale(d.logvar, golden(dir, "latent_logvar"), 1e-5)) << "latent logvar";
    EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded"), 1e-5)) << "decode";
    EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_mean")), golden(dir, "decoded_from_mean"), 1e-5))
        << "decode(mean)";
    if (vc.roundtrip) {
      const Tensor back = vae->decode(d.mode());
      EXPECT_TRUE(within_scale(back, golden(dir, "roundtrip"), 1e-5)) << "round trip";
      // the issue's check: the round trip's PSNR against the input within 0.1 dB of diffusers'
      EXPECT_NEAR(psnr(back, golden(dir, "input")), psnr(golden(dir, "roundtrip"), golden(dir, "input")), 0.1);
    }
    runtime::VaeTiling t;
    t.enabled = true;
    t.tile_height = t.tile_width = vc.tile;
    t.stride_height = t.stride_width = vc.stride;
    vae->set_tiling(t);
    const runtime::LatentDistribution dt = vae->encode(golden(dir, "input"));
    EXPECT_TRUE(within_scale(dt.mean, golden(dir, "latent_mean_tiled"), 1e-5)) << "tiled latent mean";
    EXPECT_TRUE(within_scale(dt.logvar, golden(dir, "latent_logvar_tiled"), 1e-5)) << "tiled latent logvar";
    EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded_tiled"), 1e-5))
        << "tiled decode";
  }
}

// Settings the shared goldens leave out, from scripts/make_vae_extra_goldens.py (diffusers 0.42.1
// on pip's CPU torch): Wan2.2 (residual levels, patch_size 2, decoder_base_dim != base_dim,
// 9 frames), a FLUX-style AutoencoderKL with batch 2, 3 levels, overlap 0.5 and ragged tiles, and
// rectangular video tiles; golden.json holds the tiling attributes, set as diffusers' are.
TEST_P(Vae, ExtraSettingsMatchDiffusers) {
  for (const std::string name : {"wan22-vae", "kl-flux", "qwen-rect"}) {
    SCOPED_TRACE(name);
    const std::string dir = vae_dir("vae-extra/" + name);
    std::ifstream in(dir + "/golden.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
    EXPECT_EQ(vae->parameters(), j["param_count"].get<uint64_t>());
    const runtime::LatentDistribution d = vae->encode(golden(dir, "input"));
    EXPECT_TRUE(within_scale(d.mean, golden(dir, "latent_mean"), 1e-5)) << "latent mean";
    EXPECT_TRUE(within_scale(d.logvar, golden(dir, "latent_logvar"), 1e-5)) << "latent logvar";
    EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded"), 1e-5)) << "decode";
    for (const std::string kind : {"decode", "encode"}) {
      const nlohmann::json& a = j["tiling"][kind];
      runtime::VaeTiling t;
      t.enabled = true;
      if (vae->config().video()) {
        t.tile_height = a["tile_sample_min_height"].get<int64_t>();
        t.tile_width = a["tile_sample_min_width"].get<int64_t>();
        t.stride_height = a["tile_sample_stride_height"].get<int64_t>();
        t.stride_width = a["tile_sample_stride_width"].get<int64_t>();
      } else {
        t.sample_tile = a["tile_sample_min_size"].get<int64_t>();
        t.latent_tile = a["tile_latent_min_size"].get<int64_t>();
        t.overlap = a["tile_overlap_factor"].get<double>();
      }
      vae->set_tiling(t);
      if (kind == "decode") {
        EXPECT_TRUE(within_scale(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded_tiled"), 1e-5))
            << "tiled decode";
      } else {
        const runtime::LatentDistribution dt = vae->encode(golden(dir, "input"));
        EXPECT_TRUE(within_scale(dt.mean, golden(dir, "latent_mean_tiled"), 1e-5)) << "tiled latent mean";
        EXPECT_TRUE(within_scale(dt.logvar, golden(dir, "latent_logvar_tiled"), 1e-5)) << "tiled latent logvar";
      }
    }
  }
}

// The issue's memory contract on a real shape: the Wan2.1 VAE (random weights, bfloat16) tiled-
// decoding 704 x 1280 x 5 frames with diffusers' default tiles keeps the CUDA allocator's
// reserved memory within 1.25x its peak allocation and not growing from one decode to the next
// (th::memory_stable), and the same decode twice gives the same bits.
TEST_P(Vae, TiledVideoDecodeMemoryStable) {
  if (!dev().is_cuda()) GTEST_SKIP() << "the caching allocator under test is CUDA's";
  const LoadOptions lo = options(dev(), kBFloat16);
  const auto w = runtime::random_weights(lo, 5);
  auto vae = runtime::build_autoencoder_kl_wan(runtime::preset_vae_config("wan2.1"), *w, lo);
  runtime::VaeTiling t;
  t.enabled = true;
  vae->set_tiling(t);
  manual_seed(6);
  const Tensor z = randn({1, 16, 2, 88, 160}, TensorOptions(kFloat32).device(dev()));
  Tensor first, second;
  EXPECT_TRUE(th::memory_stable(dev(), [&] { (first.defined() ? second : first) = vae->decode(z); }));
  ASSERT_TRUE(first.defined() && second.defined());
  EXPECT_EQ(first.sizes(), (Shape{1, 3, 5, 704, 1280}));
  EXPECT_EQ(th::to_bits(first), th::to_bits(second)) << "the same bits every decode";
}

// Progress: per latent frame of an untiled video decode, per tile of a tiled one.
TEST_P(Vae, ProgressReports) {
  const std::string dir = vae_dir("wan-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
  std::vector<std::pair<int64_t, int64_t>> calls;
  vae->set_progress([&](int64_t done, int64_t total) { calls.emplace_back(done, total); });
  (void)vae->decode(golden(dir, "latent_in"));
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 2}}));
  calls.clear();
  runtime::VaeTiling t;
  t.enabled = true;
  t.tile_height = t.tile_width = 24;
  t.stride_height = t.stride_width = 16;
  vae->set_tiling(t);
  (void)vae->decode(golden(dir, "latent_in"));
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {2, 4}, {3, 4}, {4, 4}}));
}

TEST_P(Vae, VideoVaeBFloat16PsnrAndErrors) {
  const std::string dir = vae_dir("wan-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kBFloat16));
  const double mean_db = psnr(vae->encode(golden(dir, "input")).mean, golden(dir, "latent_mean"));
  const double decode_db = psnr(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded"));
  EXPECT_GE(mean_db, 40.0) << "latent mean";
  EXPECT_GE(decode_db, 40.0) << "decode";
  RecordProperty("bf16_psnr_db", std::to_string(mean_db) + " / " + std::to_string(decode_db));
  const TensorOptions o = TensorOptions(kFloat32).device(dev());
  EXPECT_THROWS_SAYING(ShapeError, "vae encode", "T must be 1 + 4 k frames", vae->encode(zeros({1, 3, 4, 16, 16}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "vae encode", "multiples of 8", vae->encode(zeros({1, 3, 1, 12, 16}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "vae encode", "input must be [B, 3, T, H, W]", vae->encode(zeros({1, 3, 16, 16}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "vae decode", "latents must be [B, 4, t, h, w], got [1, 4, 2, 2]",
                       vae->decode(zeros({1, 4, 2, 2}, o)));
  runtime::VaeTiling t;
  t.enabled = true;
  t.tile_height = t.tile_width = 24;
  t.stride_height = t.stride_width = 4;
  EXPECT_THROWS_SAYING(ValueError, "vae", "a stride of at least 8 pixels", vae->set_tiling(t));
  t.stride_height = t.stride_width = 32;
  EXPECT_THROWS_SAYING(ValueError, "vae", "no larger than the tile, got tile 24, stride 32", vae->set_tiling(t));
}

// bfloat16 weights and activations: PSNR >= 40 dB against the float32 golden.
TEST_P(Vae, AutoencoderKLBFloat16Psnr) {
  const std::string dir = vae_dir("sd-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kBFloat16));
  const runtime::LatentDistribution d = vae->encode(golden(dir, "input"));
  EXPECT_GE(psnr(d.mean, golden(dir, "latent_mean")), 40.0) << "latent mean";
  const double p = psnr(vae->decode(golden(dir, "latent_in")), golden(dir, "decoded"));
  EXPECT_GE(p, 40.0) << "decode";
  RecordProperty("bf16_decode_psnr_db", std::to_string(p));
}

// sample(seed) = mean + exp(logvar / 2) * N(0, 1): the same draw for a seed, another for another.
TEST_P(Vae, SampleIsSeeded) {
  const std::string dir = vae_dir("sd-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
  const runtime::LatentDistribution d = vae->encode(golden(dir, "input"));
  const Tensor a = d.sample(7), b = d.sample(7), c = d.sample(8);
  EXPECT_EQ(values(a), values(b));
  EXPECT_NE(values(a), values(c));
  manual_seed(7);
  const std::vector<double> noise = values(randn(d.mean.sizes(), TensorOptions(kFloat32).device(dev())));
  const std::vector<double> m = values(d.mean), lv = values(d.logvar), s = values(a);
  for (size_t i = 0; i < s.size(); ++i)
    ASSERT_NEAR(s[i], m[i] + std::exp(lv[i] / 2) * noise[i], 1e-5 * (1 + std::abs(s[i]))) << i;
}

TEST_P(Vae, BadInputsAreErrors) {
  const std::string dir = vae_dir("sd-vae");
  auto vae = runtime::load_vae(dir, options(dev(), kFloat32));
  const TensorOptions o = TensorOptions(kFloat32).device(dev());
  EXPECT_THROWS_SAYING(ShapeError, "vae decode", "latents must be [B, 4, h, w], got [1, 3, 8, 8]",
                       vae->decode(zeros({1, 3, 8, 8}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "vae decode", "got [4, 8, 8]", vae->decode(zeros({4, 8, 8}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "vae encode", "input must be [B, 3, H, W], got [1, 1, 8, 8]",
                       vae->encode(zeros({1, 1, 8, 8}, o)));
  EXPECT_THROWS_SAYING(ShapeError, "vae encode", "multiples of 2", vae->encode(zeros({1, 3, 9, 8}, o)));
  EXPECT_THROWS_SAYING(DTypeError, "vae", "compute dtype", runtime::load_vae(dir, options(dev(), kFloat64)));
}

// A copy of the folder with config.json replaced by `config` (the weights linked).
std::string folder_with_config(const std::string& config) {
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("anvil_vae_" + std::to_string(::getpid()));
  fs::create_directories(d);
  fs::remove(d / "diffusion_pytorch_model.safetensors");
  fs::create_symlink(fs::absolute(vae_dir("sd-vae") + "/diffusion_pytorch_model.safetensors"),
                     d / "diffusion_pytorch_model.safetensors");
  std::ofstream(d / "config.json") << config;
  return d.string();
}

// --scaled: a pipeline's latents back to decode()'s, per config kind.
TEST(VaeConfig, UnscaleLatentsAsPipelines) {
  const runtime::VaeConfig flux = runtime::preset_vae_config("flux");  // scaling 0.3611, shift 0.1159
  const Tensor x = arange(0, 16, 1, TensorOptions(kFloat32)).view({1, 16, 1, 1});
  const Tensor z = runtime::unscale_latents(x, flux);
  for (int64_t c = 0; c < 16; ++c)
    EXPECT_FLOAT_EQ(z.data_ptr<float>()[c], static_cast<float>(c) / 0.3611f + 0.1159f) << c;
  runtime::VaeConfig wan = runtime::parse_vae_config(
      R"({"_class_name": "AutoencoderKLWan", "base_dim": 8, "z_dim": 2, "dim_mult": [1, 2], "temperal_downsample": [true],
          "scale_factor_spatial": 2, "scale_factor_temporal": 2, "latents_mean": [0.5, -1.0], "latents_std": [2.0, 3.0]})",
      "wan");
  const Tensor v = ones({1, 2, 1, 1, 1});
  const Tensor u = runtime::unscale_latents(v, wan);  // x * std / 1 + mean
  EXPECT_FLOAT_EQ(u.data_ptr<float>()[0], 2.5f);
  EXPECT_FLOAT_EQ(u.data_ptr<float>()[1], 2.0f);
  EXPECT_THROWS_SAYING(ShapeError, "vae decode", "scaled latents must have 2 channels in dim 1, got [1, 3, 1, 1, 1]",
                       runtime::unscale_latents(ones({1, 3, 1, 1, 1}), wan));
  wan.latents_std = {1.0, 2.0, 3.0};
  EXPECT_THROWS_SAYING(FormatError, "vae decode", "have 2 / 3 entries for 2 latent channels",
                       runtime::unscale_latents(v, wan));
}

TEST(VaeConfig, StrictAboutWhatItDoesNotImplement) {
  const std::string where = "config.json";
  auto parse = [&](const std::string& text) { return runtime::parse_vae_config(text, where); };
  const runtime::VaeConfig c = parse(
      R"({"_class_name": "AutoencoderKL", "block_out_channels": [32, 64], "norm_num_groups": 8, "shift_factor": 0.1159,
          "scaling_factor": 0.3611, "latent_channels": 16, "use_quant_conv": false, "use_post_quant_conv": false})");
  EXPECT_EQ(c.block_out_channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(c.latent_channels, 16);
  EXPECT_DOUBLE_EQ(c.scaling_factor, 0.3611);
  ASSERT_TRUE(c.shift_factor.has_value());
  EXPECT_DOUBLE_EQ(*c.shift_factor, 0.1159);
  EXPECT_FALSE(c.use_quant_conv);
  EXPECT_EQ(c.downscale(), 2);
  EXPECT_THROWS_SAYING(FormatError, "vae", "unknown field \"time_compression_ratio\"",
                       parse(R"({"_class_name": "AutoencoderKL", "time_compression_ratio": 4})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "\"_class_name\" \"VQModel\" has no implementation",
                       parse(R"({"_class_name": "VQModel"})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "missing \"_class_name\"", parse(R"({"in_channels": 3})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "\"act_fn\" \"gelu\" is not implemented",
                       parse(R"({"_class_name": "AutoencoderKL", "act_fn": "gelu"})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "other block types are not implemented",
                       parse(R"({"_class_name": "AutoencoderKL", "block_out_channels": [32, 64],
                                 "norm_num_groups": 8, "down_block_types": ["DownEncoderBlock2D", "AttnDownEncoderBlock2D"]})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "not divisible by norm_num_groups 32",
                       parse(R"({"_class_name": "AutoencoderKL", "block_out_channels": [48]})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "\"latents_mean\" must be a list of numbers",
                       parse(R"({"_class_name": "AutoencoderKL", "latents_mean": [0.1, "x"]})"));
  EXPECT_THROWS_SAYING(FormatError, "vae", "not valid JSON", parse("{"));
}

// The weights must match the config: a wrong channel count names the tensor and both shapes;
// a model that reads fewer tensors than the file holds is an error naming them.
TEST(VaeConfig, WeightsMustMatch) {
  std::ifstream in(vae_dir("sd-vae") + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string wide = config;
  wide.replace(wide.find("\"latent_channels\": 4"), 20, "\"latent_channels\": 8");
  EXPECT_THROWS_SAYING(FormatError, "load", "encoder.conv_out.weight has shape [8, 64, 3, 3], the config gives [16, 64, 3, 3]",
                       runtime::load_vae(folder_with_config(wide), LoadOptions{}));
  std::string no_quant = config;
  no_quant.replace(no_quant.find("\"use_quant_conv\": true"), 22, "\"use_quant_conv\": false");
  EXPECT_THROWS_SAYING(FormatError, "vae", "2 checkpoint tensor(s) are not read by the AutoencoderKL model (quant_conv.bias, quant_conv.weight)",
                       runtime::load_vae(folder_with_config(no_quant), LoadOptions{}));
  LoadOptions lenient;
  lenient.allow_unread = true;
  EXPECT_NO_THROW(runtime::load_vae(folder_with_config(no_quant), lenient));
  std::filesystem::remove_all(std::filesystem::path(folder_with_config(config)));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Vae);

}  // namespace
