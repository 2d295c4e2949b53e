"""anvil.vae against diffusers: the tiny random-weight AutoencoderKL of tests/data/sd-vae (made by
diffusers 0.42.1 in float32; golden.safetensors holds its input, the latent mean / log-variance
and the decodes, untiled and tiled with golden.json's tile sizes), read with anvil.load_file."""
import json
import os

import numpy as np
import pytest

import anvil
from conftest import devices

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SD = os.path.join(ROOT, "tests", "data", "sd-vae")


def within_scale(got, want, tol):
    got, want = got.cpu().double().numpy(), want.cpu().double().numpy()
    assert got.shape == want.shape
    return np.abs(got - want).max() <= tol * np.abs(want).max()


@pytest.mark.parametrize("device", devices())
def test_autoencoder_kl_matches_diffusers(device):
    g = anvil.load_file(os.path.join(SD, "golden.safetensors"))
    assert g["input"].shape == (1, 3, 64, 64) and g["input"].dtype == anvil.float32
    vae = anvil.vae.load(SD, device, progress=False)
    assert vae.config["_class_name"] == "AutoencoderKL" and vae.config["latent_channels"] == 4
    assert vae.num_parameters == 658375 and vae.spatial_compression_ratio == 2
    assert vae.device == anvil.device(device) and vae.dtype == anvil.float32
    d = vae.encode(g["input"])
    assert d.mean.device == anvil.device(device) and d.mean.dtype == anvil.float32
    assert within_scale(d.mean, g["latent_mean"], 1e-5)
    assert within_scale(d.logvar, g["latent_logvar"], 1e-5)
    assert within_scale(d.mode(), g["latent_mean"], 1e-5)
    assert within_scale(d.std, (g["latent_logvar"] * 0.5).exp(), 1e-5)
    s = d.sample(seed=7)
    assert within_scale(s, d.sample(seed=7), 0) and not within_scale(s, d.sample(seed=8), 1e-3)
    assert within_scale(vae.decode(g["latent_in"]), g["decoded"], 1e-5)
    assert within_scale(vae.decode(g["latent_mean"]), g["decoded_from_mean"], 1e-4)
    # diffusers' tiling with golden.json's attributes: a 2 x 2 grid both ways
    tiling = json.load(open(os.path.join(SD, "golden.json")))["tiling"]["decode"]["attributes"]
    assert not vae.tiling["enabled"] and vae.tiling["tile_sample_min_size"] == 64
    vae.enable_tiling(**tiling)
    assert vae.tiling == {"enabled": True, **tiling}
    d = vae.encode(g["input"])
    assert within_scale(d.mean, g["latent_mean_tiled"], 1e-5)
    assert within_scale(vae.decode(g["latent_in"]), g["decoded_tiled"], 1e-5)
    vae.disable_tiling()
    assert within_scale(vae.decode(g["latent_in"]), g["decoded"], 1e-5)


def test_unscale_latents_and_errors():
    vae = anvil.vae.load(SD, progress=False)
    z = anvil.randn(1, 4, 8, 8)
    sf = vae.config["scaling_factor"]
    assert within_scale(vae.unscale_latents(z), z / sf, 1e-6)
    with pytest.raises(ValueError, match="tile_sample_min_height"):
        vae.enable_tiling(tile_sample_min_height=64)
    with pytest.raises(ValueError, match="overlap in"):
        vae.enable_tiling(tile_overlap_factor=1.0)
    with pytest.raises(TypeError, match="dtype must be"):
        anvil.vae.load(SD, dtype=anvil.int8, progress=False)
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        anvil.vae.load(os.path.join(SD, "nothing"))
    with pytest.raises(ValueError):
        vae.decode(anvil.randn(1, 3, 8, 8))  # 3 latent channels, the model has 4
    with pytest.raises(RuntimeError, match="preset|flux"):
        anvil.vae.random("no-such-vae")


def test_random_video_vae_roundtrip_shapes():
    vae = anvil.vae.random("wan2.1", progress=False)
    assert vae.config["_class_name"] == "AutoencoderKLWan" and vae.temporal_compression_ratio == 4
    z = vae.encode(anvil.rand(1, 3, 5, 16, 16) * 2 - 1).mode()
    assert z.shape == (1, 16, 2, 2, 2)
    x = vae.decode(z)
    assert x.shape == (1, 3, 5, 16, 16) and x.abs().amax().item() <= 1.0  # clamped as diffusers
    vae.enable_tiling(tile_sample_min_height=256, tile_sample_min_width=256)
    assert vae.tiling["tile_sample_min_height"] == 256
