#!/usr/bin/env python3
"""diffusers + PyTorch beside `anvil bench --vae NAME` on the same machine: the same preset (the
Hub's config values, random weights), input sizes, dtype and timing rule (one warm-up call, then
the median of -r calls, synchronised), printing rows of the same table.
    build/tools/anvil/anvil bench --vae flux --size 256x256 -r 3
    python3 scripts/torch_vae_bench.py --vae flux --size 256x256 -r 3
The defaults follow anvil's: 1024x1024 images / 704x1280 x 61 frames on CUDA (bfloat16),
256x256 / 128x128 x 5 on the CPU (float32). diffusers is a comparison tool here, never a
dependency of anvil.
"""
import argparse
import statistics
import time

import torch

PRESETS = {
    "flux": ("AutoencoderKL", dict(block_out_channels=[128, 256, 512, 512], layers_per_block=2, latent_channels=16,
                                   norm_num_groups=32, sample_size=1024, scaling_factor=0.3611, shift_factor=0.1159,
                                   use_quant_conv=False, use_post_quant_conv=False,
                                   down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4)),
    "sd": ("AutoencoderKL", dict(block_out_channels=[128, 256, 512, 512], layers_per_block=2, latent_channels=4,
                                 norm_num_groups=32, sample_size=512,
                                 down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4)),
    "wan2.1": ("AutoencoderKLWan", dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                                        temperal_downsample=[False, True, True])),
    "wan2.2": ("AutoencoderKLWan", dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4],
                                        num_res_blocks=2, temperal_downsample=[False, True, True], is_residual=True,
                                        in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
                                        scale_factor_temporal=4)),
    "qwen-image": ("AutoencoderKLQwenImage", dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                                                  temperal_downsample=[False, True, True])),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vae", required=True, choices=sorted(PRESETS))
    ap.add_argument("--size", default="")
    ap.add_argument("--frames", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="")
    ap.add_argument("--tiled", action="store_true")
    ap.add_argument("--encode", action="store_true")
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()
    import diffusers

    cls_name, cfg = PRESETS[a.vae]
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    dtype = {"": torch.bfloat16 if cuda else torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16}[a.dtype]
    video = cls_name != "AutoencoderKL"
    if a.size:
        h, w = (int(v) for v in a.size.split("x"))
    else:
        h, w = ((704, 1280) if cuda else (128, 128)) if video else ((1024, 1024) if cuda else (256, 256))
    frames = a.frames or (61 if cuda else 5)
    torch.manual_seed(0)
    vae = getattr(diffusers, cls_name)(**cfg).to(dev, dtype).eval()
    if a.tiled:
        vae.enable_tiling()
    f = 16 if cfg.get("patch_size") else 8
    zs = [1, cfg.get("latent_channels", cfg.get("z_dim")), h // f, w // f]
    xs = [1, 3, h, w]
    if video:
        zs.insert(2, 1 + (frames - 1) // 4)
        xs.insert(2, frames)
    z = torch.randn(zs, device=dev, dtype=dtype)
    x = (torch.rand(xs, device=dev) * 2 - 1).to(dtype)
    items = frames if video else 1
    threads = f", {torch.get_num_threads()} threads" if not cuda else ""
    print(f"| vae | device | dtype | input | tiled | op | s per call | s per {'frame' if video else 'image'} "
          f"| peak alloc GiB | peak reserved GiB |   (diffusers {diffusers.__version__}, torch {torch.__version__}{threads})")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def row(what, call):
        with torch.inference_mode():
            call()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t = []
            for _ in range(a.r):
                t0 = time.perf_counter()
                call()
                if cuda:
                    torch.cuda.synchronize()
                t.append(time.perf_counter() - t0)
        med = statistics.median(t)
        alloc = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
        res = torch.cuda.max_memory_reserved() / 2**30 if cuda else float("nan")
        print(f"| {a.vae} diffusers | {dev} | {str(dtype).replace('torch.', '')} | {xs} | {'yes' if a.tiled else 'no'} "
              f"| {what} | {med:.3f} | {med / items:.4f} | {alloc:.2f} | {res:.2f} |", flush=True)

    row("decode", lambda: vae.decode(z).sample)
    if a.encode:
        row("encode", lambda: vae.encode(x).latent_dist.mean)


if __name__ == "__main__":
    main()
