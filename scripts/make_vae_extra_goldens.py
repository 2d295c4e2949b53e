#!/usr/bin/env python3
"""Writes tests/data/vae-extra/: tiny random-weight diffusers VAEs in settings the shared goldens
do not cover, with diffusers' own float32 CPU outputs, for tests/test_vae.cpp:
  wan22-vae   AutoencoderKLWan in Wan2.2 settings (is_residual, patch_size 2, 12 channels,
              decoder_base_dim != base_dim), 9 frames of 32 x 48, rectangular tiles
  kl-flux     AutoencoderKL FLUX style (16 latent channels, no quant convs), 3 levels, batch 2,
              a 24 x 40 image, tiling with overlap 0.5 and ragged last tiles
  qwen-rect   AutoencoderKLQwenImage with tiles of different height and width
Each folder: config.json + diffusion_pytorch_model.safetensors (save_pretrained), golden.safetensors
(input, latent_mean, latent_logvar, latent_in, decoded, decoded_tiled, latent_mean_tiled,
latent_logvar_tiled) and golden.json (the tiling attributes set after enable_tiling()).
Weights: torch.manual_seed(seed), every conv / linear weight N(0, 1 / fan_in), bias N(0, 0.1^2),
norm scales 1 + 0.1 N(0, 1), norm shifts 0.1 N(0, 1).
    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch diffusers==0.42.1 safetensors
    /tmp/tv/bin/python scripts/make_vae_extra_goldens.py tests/data/vae-extra
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn

MODELS = {
    "wan22-vae": dict(
        cls="AutoencoderKLWan", seed=31,
        kwargs=dict(base_dim=8, decoder_base_dim=12, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                    attn_scales=[], temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                    out_channels=12, patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4),
        shape=[1, 3, 9, 32, 48],
        # decode: latent 2 x 3; tiles 1 x 2 latents every 1 x 1; encode walks patchified 16 x 24 pixels
        tiling=dict(decode=dict(tile_sample_min_height=16, tile_sample_min_width=32,
                                tile_sample_stride_height=16, tile_sample_stride_width=16),
                    encode=dict(tile_sample_min_height=8, tile_sample_min_width=16,
                                tile_sample_stride_height=8, tile_sample_stride_width=8))),
    "kl-flux": dict(
        cls="AutoencoderKL", seed=32,
        kwargs=dict(block_out_channels=[16, 32, 32], layers_per_block=1, latent_channels=16, norm_num_groups=8,
                    sample_size=16, scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                    use_post_quant_conv=False, down_block_types=["DownEncoderBlock2D"] * 3,
                    up_block_types=["UpDecoderBlock2D"] * 3),
        shape=[2, 3, 24, 40],
        tiling=dict(decode=dict(tile_sample_min_size=16, tile_latent_min_size=4, tile_overlap_factor=0.5),
                    encode=dict(tile_sample_min_size=16, tile_latent_min_size=4, tile_overlap_factor=0.5))),
    "qwen-rect": dict(
        cls="AutoencoderKLQwenImage", seed=33,
        kwargs=dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
                    temperal_downsample=[False, True, True], input_channels=3),
        shape=[1, 3, 5, 40, 32],
        tiling=dict(decode=dict(tile_sample_min_height=24, tile_sample_min_width=16,
                                tile_sample_stride_height=16, tile_sample_stride_width=8),
                    encode=dict(tile_sample_min_height=24, tile_sample_min_width=16,
                                tile_sample_stride_height=16, tile_sample_stride_width=8))),
}


def fill(model, seed):
    torch.manual_seed(seed)
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            norm = "norm" in type(mod).__name__.lower()
            if norm:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name in ("weight", "gamma") else 0.0))
            elif p.dim() >= 2:
                p.copy_(torch.randn_like(p) / math.sqrt(p[0].numel()))
            else:
                p.copy_(torch.randn_like(p) * 0.1)


def main():
    import diffusers
    from safetensors.torch import save_file

    out = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    torch.set_grad_enabled(False)
    for name, m in MODELS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        model = getattr(diffusers, m["cls"])(**m["kwargs"]).eval()
        fill(model, m["seed"])
        model.save_pretrained(d, safe_serialization=True)
        g = torch.Generator().manual_seed(m["seed"] + 1)
        x = torch.rand(m["shape"], generator=g) * 2 - 1
        gold = {"input": x}
        post = model.encode(x).latent_dist
        gold["latent_mean"], gold["latent_logvar"] = post.mean, post.logvar
        gold["latent_in"] = torch.randn(post.mean.shape, generator=g)
        gold["decoded"] = model.decode(gold["latent_in"]).sample
        for kind, attrs in m["tiling"].items():
            model.enable_tiling()
            for k, v in attrs.items():
                assert k in vars(model), k
                setattr(model, k, v)
            if kind == "decode":
                gold["decoded_tiled"] = model.decode(gold["latent_in"]).sample
            else:
                pt = model.encode(x).latent_dist
                gold["latent_mean_tiled"], gold["latent_logvar_tiled"] = pt.mean, pt.logvar
            model.disable_tiling()
        save_file({k: v.contiguous() for k, v in gold.items()}, os.path.join(d, "golden.safetensors"))
        info = {"class": m["cls"], "seed": m["seed"], "diffusers": diffusers.__version__, "torch": torch.__version__,
                "tiling": m["tiling"], "shapes": {k: list(v.shape) for k, v in gold.items()},
                "param_count": sum(p.numel() for p in model.parameters()),
                "tiled_vs_untiled_max_abs": (gold["decoded_tiled"] - gold["decoded"]).abs().max().item()}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(info, f, indent=1)
        print(name, info["shapes"], info["param_count"])


if __name__ == "__main__":
    main()
