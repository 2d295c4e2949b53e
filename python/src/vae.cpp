// anvil.vae: diffusers' image and video autoencoders from Python (load a diffusers folder, encode to
// the latent distribution, decode, diffusers' tiling), over runtime/vae.h.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "bindings.h"
#include "runtime/model.h"
#include "runtime/vae.h"

namespace anvil::python {
namespace {

using runtime::LatentDistribution;
using runtime::Vae;

// A VAE and whether long calls draw their progress on stderr.
struct PyVae {
  std::unique_ptr<Vae> vae;
  bool progress = false;
};

runtime::LoadOptions vae_options(const char* op, nb::handle device, std::optional<DType> dtype) {
  runtime::LoadOptions o;
  o.device = device_arg(device);
  o.dtype = dtype.value_or(kFloat32);
  ANVIL_CHECK(o.dtype == kFloat32 || o.dtype == kBFloat16 || o.dtype == kFloat16, DTypeError, op,
              " dtype must be anvil.float32, bfloat16 or float16, got ", dtype_name(o.dtype));
  return o;
}

std::unique_ptr<PyVae> load(const std::string& path, nb::handle device, std::optional<DType> dtype, bool allow_unread,
                            std::optional<bool> progress) {
  require_folder(path, "[anvil.vae.load]");
  runtime::LoadOptions o = vae_options("[anvil.vae.load]", device, dtype);
  o.allow_unread = allow_unread;
  auto v = std::make_unique<PyVae>();
  v->progress = show_progress(progress);
  if (v->progress) o.progress = runtime::stderr_load_progress();
  nb::gil_scoped_release release;
  v->vae = runtime::load_vae(path, o);
  return v;
}

std::unique_ptr<PyVae> random_vae(const std::string& preset, nb::handle device, std::optional<DType> dtype,
                                  uint64_t seed, std::optional<bool> progress) {
  const runtime::VaeConfig c = runtime::preset_vae_config(preset);
  const runtime::LoadOptions o = vae_options("[anvil.vae.random]", device, dtype);
  auto v = std::make_unique<PyVae>();
  v->progress = show_progress(progress);
  nb::gil_scoped_release release;
  const auto w = runtime::random_weights(o, seed);
  v->vae = runtime::build_vae(c, *w, o);
  return v;
}

nb::dict config_dict(const runtime::VaeConfig& c) {
  nb::dict d;
  d["_class_name"] = c.class_name;
  d["in_channels"] = c.in_channels;
  d["out_channels"] = c.out_channels;
  d["latent_channels"] = c.latent_channels;
  d["scaling_factor"] = c.scaling_factor;
  d["shift_factor"] = c.shift_factor;
  d["latents_mean"] = c.latents_mean.empty() ? nb::none() : nb::cast(c.latents_mean);
  d["latents_std"] = c.latents_std.empty() ? nb::none() : nb::cast(c.latents_std);
  if (c.video()) {
    d["base_dim"] = c.base_dim;
    d["decoder_base_dim"] = c.decoder_base_dim;
    d["dim_mult"] = c.dim_mult;
    d["num_res_blocks"] = c.num_res_blocks;
    d["temperal_downsample"] = c.temperal_downsample;
    d["is_residual"] = c.is_residual;
    d["patch_size"] = c.patch_size;
  } else {
    d["sample_size"] = c.sample_size;
    d["block_out_channels"] = c.block_out_channels;
    d["layers_per_block"] = c.layers_per_block;
    d["norm_num_groups"] = c.norm_num_groups;
    d["use_quant_conv"] = c.use_quant_conv;
    d["use_post_quant_conv"] = c.use_post_quant_conv;
    d["mid_block_add_attention"] = c.mid_block_add_attention;
  }
  return d;
}

nb::dict tiling_dict(const Vae& v) {
  const runtime::VaeTiling t = v.tiling();
  nb::dict d;
  d["enabled"] = t.enabled;
  if (v.config().video()) {
    d["tile_sample_min_height"] = t.tile_height;
    d["tile_sample_min_width"] = t.tile_width;
    d["tile_sample_stride_height"] = t.stride_height;
    d["tile_sample_stride_width"] = t.stride_width;
  } else {
    d["tile_sample_min_size"] = t.sample_tile;
    d["tile_latent_min_size"] = t.latent_tile;
    d["tile_overlap_factor"] = t.overlap;
  }
  return d;
}

// encode / decode with the GIL released, the progress counter labelled by the call.
template <typename F>
auto run(PyVae& v, const char* label, F&& f) {
  v.vae->set_progress(v.progress ? runtime::stderr_step_progress(label) : nullptr);
  nb::gil_scoped_release release;
  return f(*v.vae);
}

}  // namespace

void bind_vae(nb::module_& m) {
  nb::module_ s = m.def_submodule("vae", "anvil.vae: diffusers' AutoencoderKL, AutoencoderKLWan and "
                                         "AutoencoderKLQwenImage (load, encode, decode, tiling)");
  nb::class_<LatentDistribution>(s, "LatentDistribution",
                                 "The encoder's diagonal Gaussian (diffusers' DiagonalGaussianDistribution)")
      .def_ro("mean", &LatentDistribution::mean)
      .def_ro("logvar", &LatentDistribution::logvar, "Clamped to [-30, 20] as diffusers.")
      .def_prop_ro("std", [](const LatentDistribution& d) { return exp(mul(d.logvar, 0.5)); })
      .def_prop_ro("var", [](const LatentDistribution& d) { return exp(d.logvar); })
      .def("mode", &LatentDistribution::mode)
      .def("sample", [](const LatentDistribution& d, uint64_t seed) {
        nb::gil_scoped_release release;
        return d.sample(seed);
      }, nb::arg("seed") = 0, "mean + std * N(0, 1), the noise drawn from seed (the same on every device).");

  nb::class_<PyVae>(s, "Vae", "A loaded VAE: AutoencoderKL, AutoencoderKLWan or AutoencoderKLQwenImage (config['_class_name'])")
      .def("encode", [](PyVae& v, const Tensor& x) {
        return run(v, "[vae encode]", [&](Vae& m) { return m.encode(x); });
      }, nb::arg("x"),
           "x [B, C, H, W] in [-1, 1] (video: [B, C, T, H, W]), any device and float dtype -> the latent "
           "distribution (float32).")
      .def("decode", [](PyVae& v, const Tensor& z) {
        return run(v, "[vae decode]", [&](Vae& m) { return m.decode(z); });
      }, nb::arg("z"), "Unscaled latents (see unscale_latents) -> images / video, float32.")
      .def("unscale_latents", [](const PyVae& v, const Tensor& z) { return runtime::unscale_latents(z, v.vae->config()); },
           nb::arg("z"), "A pipeline's scaled latents back to what decode() takes, as diffusers' pipelines do.")
      .def("enable_tiling", [](PyVae& v, std::optional<int64_t> sample, std::optional<int64_t> latent,
                               std::optional<double> overlap, std::optional<int64_t> height,
                               std::optional<int64_t> width, std::optional<int64_t> stride_h,
                               std::optional<int64_t> stride_w) {
        const bool video = v.vae->config().video();
        const char* other = video ? "tile_sample_min_size / tile_latent_min_size / tile_overlap_factor"
                                  : "tile_sample_min_height / _width / tile_sample_stride_height / _width";
        ANVIL_CHECK(video ? !(sample || latent || overlap) : !(height || width || stride_h || stride_w), ValueError,
                    "[anvil.vae.enable_tiling] ", other, " are not ", v.vae->config().class_name, "'s tiling keywords");
        runtime::VaeTiling t;
        t.enabled = true;
        t.sample_tile = sample.value_or(0);
        t.latent_tile = latent.value_or(0);
        t.overlap = overlap.value_or(0.25);
        t.tile_height = height.value_or(0);
        t.tile_width = width.value_or(0);
        t.stride_height = stride_h.value_or(0);
        t.stride_width = stride_w.value_or(0);
        v.vae->set_tiling(t);
      }, nb::kw_only(), nb::arg("tile_sample_min_size").none() = nb::none(),
           nb::arg("tile_latent_min_size").none() = nb::none(), nb::arg("tile_overlap_factor").none() = nb::none(),
           nb::arg("tile_sample_min_height").none() = nb::none(), nb::arg("tile_sample_min_width").none() = nb::none(),
           nb::arg("tile_sample_stride_height").none() = nb::none(),
           nb::arg("tile_sample_stride_width").none() = nb::none(),
           "diffusers' enable_tiling (its attributes as keywords; None: diffusers' default).")
      .def("disable_tiling", [](PyVae& v) {
        runtime::VaeTiling t = v.vae->tiling();
        t.enabled = false;
        v.vae->set_tiling(t);
      })
      .def_prop_ro("tiling", [](const PyVae& v) { return tiling_dict(*v.vae); })
      .def_prop_ro("config", [](const PyVae& v) { return config_dict(v.vae->config()); })
      .def_prop_ro("device", [](const PyVae& v) { return v.vae->device(); })
      .def_prop_ro("dtype", [](const PyVae& v) { return v.vae->dtype(); })
      .def_prop_ro("num_parameters", [](const PyVae& v) { return v.vae->parameters(); })
      .def_prop_ro("spatial_compression_ratio", [](const PyVae& v) { return v.vae->config().downscale(); })
      .def_prop_ro("temporal_compression_ratio", [](const PyVae& v) { return v.vae->config().temporal_downscale(); });

  s.def("load", &load, nb::arg("path"), nb::arg("device") = "cpu", nb::arg("dtype").none() = nb::none(), nb::kw_only(),
        nb::arg("allow_unread_tensors") = false, nb::arg("progress").none() = nb::none(),
        "A diffusers VAE folder (config.json, diffusion_pytorch_model.safetensors); dtype None: float32.");
  s.def("random", &random_vae, nb::arg("preset"), nb::arg("device") = "cpu", nb::arg("dtype").none() = nb::none(),
        nb::kw_only(), nb::arg("seed") = 0, nb::arg("progress").none() = nb::none(),
        "A real VAE's config ('flux', 'sd', 'wan2.1', 'wan2.2', 'qwen-image') with random weights (speed "
        "without a download).");
}

}  // namespace anvil::python
