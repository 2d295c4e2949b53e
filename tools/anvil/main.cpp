// anvil: the command-line front end (info, bench-ops, run, bench, logits, tokenize, detokenize, vae).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <omp.h>

#include "anvil/anvil.h"
#include "bench_ops.h"
#include "commands.h"

namespace {

int cmd_info() {
  std::printf("%s\n", anvil::build_info().c_str());
  std::printf("cpu: SIMD target %s%s, %d OpenMP threads\n", anvil::cpu_simd_target().c_str(),
              anvil::cpu_has_bf16_dots() ? " + AVX512-BF16" : "", omp_get_max_threads());
  auto cpu = anvil::memory_stats(anvil::kCPU);
  std::printf("cpu memory: %s\n", anvil::memory_stats_str(anvil::kCPU).c_str());
  (void)cpu;
  if (!anvil::cuda::is_available()) {
    std::printf("cuda: not available: %s\n", anvil::cuda::unavailable_reason().c_str());
    return 0;
  }
  int n = anvil::cuda::device_count();
  std::printf("cuda: %d device(s)\n", n);
  for (int i = 0; i < n; ++i) {
    auto p = anvil::cuda::get_device_properties(i);
    std::printf("  cuda:%d %s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %.1f MiB, driver %d, runtime %d\n", i,
                p.name.c_str(), p.major, p.minor, p.multiprocessor_count, p.total_memory / 1073741824.0,
                p.l2_cache_size / 1048576.0, p.driver_version, p.runtime_version);
    std::printf("  cuda:%d memory: %s\n", i, anvil::memory_stats_str(anvil::Device(anvil::kCUDA, i)).c_str());
  }
  return 0;
}

// --device and --dtype of the commands that load a model.
void add_load_options(CLI::App* cmd, std::string& device, std::string& dtype, bool& allow_unread) {
  cmd->add_flag("--allow-unread-tensors", allow_unread,
                "load even when the checkpoint holds tensors the model does not read (they are ignored)");
  cmd->add_option("--device", device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--dtype", dtype,
                  "bfloat16 | float16 | float32 (FP8 checkpoints dequantised) | fp8 (bfloat16 with float8 weights) | "
                  "fp8-block (bench --shape: random weights in 128x128 blocks); default: the checkpoint's (bfloat16, "
                  "an FP8 checkpoint's float8 weights kept)")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"anvil: tensor kernels and an MoE LLM runtime for x86-64 CPUs and NVIDIA GPUs"};
  app.require_subcommand(1);
  app.add_subcommand("info", "print devices, memory, SIMD target, build options");

  anvil::bench::BenchOpsOptions bo;
  auto* bench_ops = app.add_subcommand("bench-ops", "time op cases against a bandwidth ceiling measured in the same run");
  bench_ops->add_option("--device", bo.device, "cpu | cuda | cuda:N")->capture_default_str();
  bench_ops->add_option("--filter", bo.filter, "run only cases whose name contains this text (A|B: either)");
  bench_ops->add_option("--json", bo.json_path, "write results to this JSON file");
  bench_ops->add_option("--reps", bo.reps, "timed repetitions per case (default: 15 cpu, 50 cuda)");

  anvil::cli::TokenizeOptions to;
  auto* tokenize = app.add_subcommand("tokenize", "print the ids of a text as a JSON array");
  tokenize->add_option("--tokenizer", to.tokenizer, "tokenizer.json")->required();
  tokenize->add_option("text", to.text, "the text (or --text-file)");
  tokenize->add_option("--text-file", to.text_file, "read the text from this file");
  anvil::cli::DetokenizeOptions de;
  auto* detokenize = app.add_subcommand("detokenize", "print the text of ids");
  detokenize->add_option("--tokenizer", de.tokenizer, "tokenizer.json")->required();
  detokenize->add_option("--ids", de.ids, "ids: 1,2,3 or [1, 2, 3]")->required();
  detokenize->add_flag("--skip-special", de.skip_special, "leave special tokens out");

  anvil::cli::LogitsOptions lg;
  auto* logits = app.add_subcommand("logits", "write a checkpoint's float32 logits for ids to a .npy file");
  logits->add_option("-m,--model", lg.model, "checkpoint folder (config.json, safetensors)")->required();
  logits->add_option("--ids", lg.ids, "token ids: 1,2,3")->required();
  logits->add_option("--mode", lg.mode, "prefill (one pass) | decode (one token at a time through the KV cache)")
      ->capture_default_str();
  add_load_options(logits, lg.device, lg.dtype, lg.allow_unread);
  logits->add_option("-o,--out", lg.out, "output .npy, [len(ids), vocab] float32")->required();

  anvil::cli::RunOptions ro;
  auto* run = app.add_subcommand("run", "stream a checkpoint's continuation of a prompt, then tok/s and GB/s");
  run->add_option("-m,--model", ro.model, "checkpoint folder (config.json, safetensors, tokenizer.json); none: the built-in demo model (random weights)");
  run->add_option("-p,--prompt", ro.prompt, "the prompt")->capture_default_str();
  run->add_option("-n", ro.n, "new tokens at most (0: run the prompt only)")->capture_default_str();
  add_load_options(run, ro.device, ro.dtype, ro.allow_unread);
  // Sampling (runtime::choose_sampling): a flag not given takes generation_config.json's value;
  // --temp > 0, --top-k or --top-p samples even where the checkpoint is greedy.
  run->add_option_function<double>("--temp", [&](double v) { ro.sampling.temperature = v; },
                                   "temperature >= 0 (0: greedy); default: generation_config.json's (its do_sample, "
                                   "temperature, top_k, top_p), else greedy");
  run->add_option_function<int64_t>("--top-k", [&](int64_t v) { ro.sampling.top_k = v; },
                                    "keep the k most probable (0: all); default: generation_config.json's, else 50 "
                                    "when sampling");
  run->add_option_function<double>("--top-p", [&](double v) { ro.sampling.top_p = v; },
                                   "nucleus mass in (0, 1] (1: all); default: generation_config.json's, else 1");
  run->add_option("-s,--seed", ro.seed, "sampling seed")->capture_default_str();
  run->add_option("--context", ro.context, "KV cache tokens (0: min(max_position_embeddings, 4096))");
  run->add_option("--tokenizer", ro.tokenizer, "tokenizer.json (default: the model folder's)");
  run->add_flag("--chat", ro.chat, "wrap the prompt in Qwen3's chat template (one user turn) and stop at <|im_end|>");
  run->add_option("--system", ro.system, "a system turn before the prompt (implies --chat)");
  run->add_flag("--no-think", ro.no_think, "the template's enable_thinking=False: an empty think block (implies --chat)");

  anvil::cli::BenchOptions bm;
  auto* bench = app.add_subcommand("bench", "llama-bench's table: prompt (ppP) and generation (tgN) tokens per second");
  bench->add_option("-m,--model", bm.model, "checkpoint folder");
  bench->add_option("--shape", bm.shape, "a built-in shape with random weights: qwen3-30b-a3b | qwen3-0.6b | demo-moe");
  add_load_options(bench, bm.device, bm.dtype, bm.allow_unread);
  bench->add_option("-p", bm.p, "prompt tokens (0: none)")->capture_default_str();
  bench->add_option("-n", bm.n, "generated tokens (0: none)")->capture_default_str();
  bench->add_option("-r", bm.reps, "timed repetitions")->capture_default_str();
  bench->add_option("--json", bm.json, "also write the rows to this JSON file");
  bench->add_option("--vae", bm.vae, "a VAE preset with random weights instead: flux | sd | wan2.1 | wan2.2 | qwen-image");
  bench->add_option("--size", bm.size, "--vae: the image / frame size HxW (default: 1024x1024 / 704x1280 on CUDA, "
                                      "256x256 / 128x128 on the CPU)");
  bench->add_option("--frames", bm.frames, "--vae video: frames, 1 + 4 k (default 61 on CUDA, 5 on the CPU)");
  bench->add_flag("--tiled", bm.tiled, "--vae: with the model's default tiling");
  bench->add_flag("--encode", bm.encode, "--vae: time encode too");
  bench->add_flag("--profile", bm.profile, "--vae: also print the timed calls' kernel time per kernel (anvil/profile.h)");
  bench->add_flag("--trace", bm.trace, "LLMs: also print the persistent decode step's time per op (profiled steps)");

  anvil::cli::VaeOptions vo;
  auto* vae = app.add_subcommand("vae", "a diffusers VAE folder (AutoencoderKL, AutoencoderKLWan, AutoencoderKLQwenImage): decode, encode, round trips");
  vae->require_subcommand(1);
  auto vae_common = [&](CLI::App* c) {
    c->add_option("-m,--model", vo.model, "diffusers VAE folder (config.json, diffusion_pytorch_model.safetensors)")
        ->required();
    c->add_option("--device", vo.device, "cpu | cuda | cuda:N")->capture_default_str();
    c->add_option("--dtype", vo.dtype, "float32 | bfloat16 | float16")->capture_default_str();
    c->add_flag("--allow-unread-tensors", vo.allow_unread, "load even when the folder holds tensors the model does not read");
    c->add_flag("--tiled", vo.tiled, "diffusers' tiling (enable_tiling): overlapping tiles, blended");
    c->add_option("--tile-sample", vo.tile_sample, "tile size in pixels (default: the config's sample_size; video 256)");
    c->add_option("--tile-latent", vo.tile_latent, "tile size in latents (default: sample_size / 2^(blocks - 1))");
    c->add_option("--tile-overlap", vo.tile_overlap, "image VAEs: overlap of neighbouring tiles, a fraction of a tile")
        ->capture_default_str();
    c->add_option("--tile-stride", vo.tile_stride, "video VAEs: pixels between tile starts (default 192; tiles 256)");
  };
  auto* vae_decode = vae->add_subcommand("decode", "latents (.npy) -> image (.png), video (a folder/ of PNG frames) or array (.npy)");
  vae_common(vae_decode);
  vae_decode->add_option("--latents", vo.latents, "latents .npy as diffusers' decode() takes them")->required();
  vae_decode->add_flag("--scaled", vo.scaled,
                       "the latents are a pipeline's (scaled): undo scaling_factor / shift_factor / latents_mean first");
  vae_decode->add_option("-o,--out", vo.out, "out.png (one image, [-1, 1] -> 8-bit RGB), frames/ or out.npy (float32)")
      ->required();
  auto* vae_encode = vae->add_subcommand("encode", "image (.png), video (a folder of PNG frames) or .npy in [-1, 1] -> latents .npy");
  vae_common(vae_encode);
  vae_encode->add_option("-i,--input", vo.input, "image.png, frames/ or x.npy")->required();
  vae_encode->add_flag("--sample", vo.sample, "draw from the latent distribution (default: its mean)");
  vae_encode->add_option("-s,--seed", vo.seed, "the draw's seed (--sample)")->capture_default_str();
  vae_encode->add_option("-o,--out", vo.out, "latents .npy (float32, unscaled, as diffusers' latent_dist.mean)")
      ->required();
  auto* vae_roundtrip = vae->add_subcommand("roundtrip", "print the PSNR of decode(encode(x)) against x (peak-to-peak 2)");
  vae_common(vae_roundtrip);
  vae_roundtrip->add_option("-i,--input", vo.input, "image.png, frames/ or x.npy")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("info")) return cmd_info();
    if (app.got_subcommand("bench-ops")) return anvil::bench::run_bench_ops(bo);
    if (app.got_subcommand("tokenize")) return anvil::cli::cmd_tokenize(to);
    if (app.got_subcommand("detokenize")) return anvil::cli::cmd_detokenize(de);
    if (app.got_subcommand("logits")) return anvil::cli::cmd_logits(lg);
    if (app.got_subcommand("run")) return anvil::cli::cmd_run(ro);
    if (app.got_subcommand("bench")) return bm.vae.empty() ? anvil::cli::cmd_bench(bm) : anvil::cli::cmd_bench_vae(bm);
    if (app.got_subcommand("vae")) {
      vo.action = vae->got_subcommand("decode") ? "decode" : vae->got_subcommand("encode") ? "encode" : "roundtrip";
      return anvil::cli::cmd_vae(vo);
    }
  } catch (const anvil::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
