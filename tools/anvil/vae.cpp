// anvil vae decode | encode | roundtrip: a diffusers VAE folder on images (PNG), videos (folders
// of PNG frames) and arrays (.npy, float32 in the model's layout), printing the time and the
// peak memory of the device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>
#include <vector>
#include <string>
#include <unistd.h>

#include "anvil/anvil.h"
#include "commands.h"
#include "runtime/media.h"
#include "runtime/vae.h"

namespace anvil::cli {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_folder_path(const std::string& path) {
  return ends_with(path, "/") || std::filesystem::is_directory(path);
}

// An image, frames or array input: .png -> [1, 3, H, W] in [-1, 1] (video VAEs: [1, 3, 1, H, W]);
// a folder of .png frames (sorted by name) -> [1, 3, T, H, W]; .npy as stored.
Tensor read_input(const std::string& path, bool video, const char* op) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && ends_with(e.path().string(), ".png")) names.push_back(e.path().string());
    std::sort(names.begin(), names.end());
    ANVIL_CHECK(!names.empty(), Error, op, " -i ", path, " holds no .png frames");
    std::vector<Tensor> frames;
    for (const std::string& n : names) {
      frames.push_back(runtime::read_png(n, op).unsqueeze(2));
      ANVIL_CHECK(frames.back().sizes() == frames.front().sizes(), ShapeError, op, " frame ", n, " is ",
                  shape_str(frames.back().sizes()), ", the first frame ", shape_str(frames.front().sizes()));
    }
    return cat(frames, 2);
  }
  if (ends_with(path, ".png")) {
    const Tensor image = runtime::read_png(path, op);
    return video ? image.unsqueeze(2) : image;
  }
  if (ends_with(path, ".npy")) return runtime::read_npy(path, op).to(kFloat32);
  throw Error(std::string(op) + " -i " + path + ": images are .png, frames a folder of .png, arrays .npy");
}

// out.png (one image or one frame), frames/ (a video, frame_0000.png ...), or out.npy.
void write_output(const std::string& path, const Tensor& t, const char* op) {
  if (is_folder_path(path)) {
    ANVIL_CHECK(t.dim() == 5 && t.size(0) == 1, ShapeError, op, " -o ", path,
                ": a folder of frames holds one video [1, C, T, H, W], the output is ", shape_str(t.sizes()),
                " (write .npy)");
    std::filesystem::create_directories(path);
    for (int64_t k = 0; k < t.size(2); ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "frame_%04lld.png", static_cast<long long>(k));
      runtime::write_png((std::filesystem::path(path) / name).string(), t.select(2, k), op);
    }
  } else if (ends_with(path, ".png")) {
    const bool one_frame = t.dim() == 5 && t.size(2) == 1;
    ANVIL_CHECK(t.size(0) == 1 && (t.dim() == 4 || one_frame), ShapeError, op, " -o ", path,
                ": a PNG holds one image, the output is ", shape_str(t.sizes()), " (write frames/ or .npy)");
    runtime::write_png(path, one_frame ? t.select(2, 0) : t, op);
  } else if (ends_with(path, ".npy")) {
    runtime::write_npy(path, t, op);
  } else {
    throw Error(std::string(op) + " -o " + path + ": write .png (one image), a folder/ of frames or .npy");
  }
}

DType vae_dtype(const std::string& s, const char* op) {
  if (s == "float32" || s == "fp32" || s == "float") return kFloat32;
  if (s == "bfloat16" || s == "bf16") return kBFloat16;
  if (s == "float16" || s == "fp16" || s == "half") return kFloat16;
  throw Error(std::string(op) + " --dtype must be float32, bfloat16 or float16, got \"" + s + "\"");
}

// PSNR in dB of a against b, both in [-1, 1] (peak-to-peak 2), as the round trip reports it.
double psnr_pm1(const Tensor& a, const Tensor& b) {
  const Tensor d = sub(a.to(kCPU, kFloat64), b.to(kCPU, kFloat64));
  const double mse = mean(mul(d, d)).item<double>();
  return mse == 0 ? INFINITY : 10.0 * std::log10(4.0 / mse);
}

}  // namespace

int cmd_vae(const VaeOptions& o) {
  const std::string opname = "[vae " + o.action + "]";
  const char* op = opname.c_str();
  check_model_dir(o.model, op);
  runtime::LoadOptions lo;
  lo.device = parse_device(o.device, op);
  lo.dtype = vae_dtype(o.dtype, op);
  lo.allow_unread = o.allow_unread;
  set_progress(lo);
  if (o.action == "decode") {
    check_input_file(o.latents, op, "--latents");
    if (is_folder_path(o.out)) {
      std::string folder = o.out;
      while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
      const std::filesystem::path parent = std::filesystem::path(folder).parent_path();
      ANVIL_CHECK(std::filesystem::is_directory(o.out) || parent.empty() || std::filesystem::is_directory(parent),
                  Error, op, " -o ", o.out, ": the folder ", parent.string(), " does not exist");
    } else {
      check_output_file(o.out, op, "-o");
    }
  } else {
    ANVIL_CHECK(std::filesystem::exists(o.input), Error, op, " -i ", o.input, " does not exist");
    if (o.action == "encode") check_output_file(o.out, op, "-o");
  }
  const bool video = runtime::load_vae_config(o.model).video();
  const Tensor in = o.action == "decode" ? runtime::read_npy(o.latents, op).to(kFloat32) : read_input(o.input, video, op);
  auto t0 = std::chrono::steady_clock::now();
  auto vae = runtime::load_vae(o.model, lo);
  const double load_secs = seconds_since(t0);
  if (o.tiled) {
    runtime::VaeTiling t;
    t.enabled = true;
    t.sample_tile = o.tile_sample;
    t.latent_tile = o.tile_latent;
    t.overlap = o.tile_overlap;
    t.tile_height = t.tile_width = o.tile_sample;  // the video VAEs: square tiles from the CLI
    t.stride_height = t.stride_width = o.tile_stride;
    vae->set_tiling(t);
  }
  if (isatty(fileno(stderr))) vae->set_progress(runtime::stderr_step_progress(op));
  reset_peak_memory_stats(lo.device);
  t0 = std::chrono::steady_clock::now();
  Tensor out;
  if (o.action == "decode") {
    out = vae->decode(o.scaled ? runtime::unscale_latents(in, vae->config()) : in);
  } else {
    const runtime::LatentDistribution d = vae->encode(in);
    out = o.sample ? d.sample(o.seed) : d.mode();
    if (o.action == "roundtrip") {
      const Tensor back = vae->decode(out);
      ANVIL_CHECK(back.sizes() == in.sizes(), ShapeError, op, " decode(encode(x)) is ", shape_str(back.sizes()),
                  ", x is ", shape_str(in.sizes()));
      std::printf("psnr %.4f dB\n", psnr_pm1(back, in));
    }
  }
  synchronize(lo.device);
  const double secs = seconds_since(t0);
  const MemoryStats m = memory_stats(lo.device);
  if (o.action != "roundtrip") write_output(o.out, out, op);
  // Reported after the work, so that a bad input is the error line alone.
  std::fprintf(stderr, "%s %s: %s, %.2f M parameters, %s on %s, loaded in %.2f s\n", op, o.model.c_str(),
               vae->config().class_name.c_str(), static_cast<double>(vae->parameters()) / 1e6,
               dtype_name(lo.dtype), lo.device.str().c_str(), load_secs);
  std::fprintf(stderr, "%s %s -> %s in %.3f s%s; peak allocated %.1f MiB, peak reserved %.1f MiB\n", op,
               shape_str(in.sizes()).c_str(), shape_str(out.sizes()).c_str(), secs, o.tiled ? " (tiled)" : "",
               static_cast<double>(m.peak_allocated_bytes) / 1048576.0,
               static_cast<double>(m.peak_reserved_bytes) / 1048576.0);
  return 0;
}

// The kernel time of `reps` timed calls (anvil/profile.h) per call, most first, with its share of
// the calls' wall time (the rest: host work and gaps between kernels).
void print_profile(const char* what, int reps, double wall_s) {
  const std::vector<profile::Entry> rows = profile::report();
  double total = 0;
  for (const profile::Entry& e : rows) total += e.ms;
  std::printf("\n%s: kernel time per call (%.1f of %.1f ms wall)\n| kernel | device | calls | ms | share of wall |\n"
              "| --- | --- | --- | --- | --- |\n",
              what, total / reps, wall_s * 1e3 / reps);
  for (const profile::Entry& e : rows)
    std::printf("| %s | %s | %.0f | %.2f | %.1f %% |\n", e.kernel.c_str(), e.device.str().c_str(),
                static_cast<double>(e.calls) / reps, e.ms / reps, 100.0 * e.ms / (wall_s * 1e3));
  std::printf("\n");
}

int cmd_bench_vae(const BenchOptions& o) {
  const char* op = "[bench]";
  ANVIL_CHECK(o.model.empty() && o.shape.empty(), Error, op, " --vae NAME takes no -m or --shape");
  ANVIL_CHECK(o.reps >= 1, Error, op, " -r must be >= 1, got ", o.reps);
  runtime::LoadOptions lo;
  lo.device = parse_device(o.device, op);
  lo.dtype = o.dtype.empty() ? (lo.device.is_cuda() ? kBFloat16 : kFloat32) : vae_dtype(o.dtype, op);
  const runtime::VaeConfig c = runtime::preset_vae_config(o.vae);
  const bool cuda = lo.device.is_cuda();
  int64_t H = c.video() ? (cuda ? 704 : 128) : (cuda ? 1024 : 256), W = c.video() ? (cuda ? 1280 : 128) : H;
  if (!o.size.empty()) {
    const size_t x = o.size.find('x');
    try {
      ANVIL_CHECK(x != std::string::npos, Error, "");
      H = std::stoll(o.size.substr(0, x));
      W = std::stoll(o.size.substr(x + 1));
    } catch (const std::exception&) {
      throw Error(std::string(op) + " --size must be HxW, e.g. 512x512, got \"" + o.size + "\"");
    }
  }
  const int64_t f = c.downscale(), ft = c.temporal_downscale();
  ANVIL_CHECK(H > 0 && W > 0 && H % f == 0 && W % f == 0, Error, op, " --size ", H, "x", W,
              ": both must be positive multiples of ", f);
  const int64_t T = o.frames > 0 ? o.frames : (cuda ? 61 : 5);
  ANVIL_CHECK(!c.video() || (T - 1) % ft == 0, Error, op, " --frames must be 1 + ", ft, " k, got ", T);
  const auto w = runtime::random_weights(lo, 0);
  auto vae = runtime::build_vae(c, *w, lo);
  if (o.tiled) vae->set_tiling({true});
  Shape zs = {1, c.latent_channels, H / f, W / f};
  Shape xs = {1, c.image_channels(), H, W};
  if (c.video()) {
    zs.insert(zs.begin() + 2, 1 + (T - 1) / ft);
    xs.insert(xs.begin() + 2, T);
  }
  manual_seed(1);
  const Tensor z = randn(zs, TensorOptions(kFloat32).device(lo.device));
  const Tensor x = sub(mul(rand(xs, TensorOptions(kFloat32).device(lo.device)), 2.0), 1.0);
  const double items = c.video() ? static_cast<double>(T) : 1.0;
  std::printf("| vae | device | dtype | input | tiled | op | s per call | s per %s | peak alloc GiB | peak reserved GiB |\n",
              c.video() ? "frame" : "image");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  auto row = [&](const char* what, const std::function<void()>& call) {
    call();  // warm-up: plans, caches, allocations
    synchronize(lo.device);
    reset_peak_memory_stats(lo.device);
    std::vector<double> t;
    if (o.profile) {
      profile::reset();
      profile::set_enabled(true);
    }
    for (int r = 0; r < o.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      synchronize(lo.device);
      t.push_back(seconds_since(t0));
    }
    profile::set_enabled(false);
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    const MemoryStats m = memory_stats(lo.device);
    std::printf("| %s (random) | %s | %s | %s | %s | %s | %.3f | %.4f | %.2f | %.2f |\n", o.vae.c_str(),
                lo.device.str().c_str(), dtype_name(lo.dtype), shape_str(xs).c_str(),
                o.tiled ? "yes" : "no", what, med, med / items, static_cast<double>(m.peak_allocated_bytes) / 1073741824.0,
                static_cast<double>(m.peak_reserved_bytes) / 1073741824.0);
    if (o.profile) print_profile(what, o.reps, std::accumulate(t.begin(), t.end(), 0.0));
    std::fflush(stdout);
  };
  row("decode", [&] { (void)vae->decode(z); });
  if (o.encode) row("encode", [&] { (void)vae->encode(x); });
  return 0;
}

}  // namespace anvil::cli
