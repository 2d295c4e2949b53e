#!/usr/bin/env python3
"""Writes tests/data/upsample_goldens.json: PyTorch's own F.interpolate outputs and gradients for
a sample of every mode, read by tests/test_upsample.cpp (Upsample.MatchesPyTorchGoldens) on every
device.

Inputs and output gradients are rebuilt by the test from the element index (exact in float32).
The cases cover explicit sizes and scale factors with and without recompute_scale_factor,
align_corners, down- and upsampling, odd ratios such as in = 5 at scale 1.1, and channels-last.
Values are float32 (float64 for the float64 cases), printed with 9 (17) significant digits.
Needs torch (pip's wheel is enough):  python3 scripts/make_upsample_goldens.py
"""
import json
import pathlib

import torch
import torch.nn.functional as F


def values(n, mul, mod, dtype):
    # i -> ((i * mul) % mod) / 16 - 3: exact in float32; the test computes the same.
    return torch.tensor([((i * mul) % mod) / 16.0 - 3.0 for i in range(n)], dtype=dtype)


# (input shape, size, scale_factor, mode, align_corners, recompute_scale_factor, channels_last, dtype)
CASES = []
for n_in in (1, 3, 5, 7, 16):
    for size in (1, 4, 9, 13, 32):
        for mode in ("nearest", "nearest-exact", "linear"):
            CASES.append(([1, 2, n_in], [size], None, mode, None, None, False, "float32"))
        CASES.append(([1, 2, n_in], [size], None, "linear", True, None, False, "float32"))
    for scale in (0.7, 1.1, 2.0, 2.5, 3.3):
        for mode in ("nearest", "nearest-exact", "linear"):
            for rec in (None, True):
                CASES.append(([1, 2, n_in], None, [scale], mode, None, rec, False, "float32"))
        CASES.append(([1, 2, n_in], None, [scale], "linear", True, None, False, "float32"))
for hw in ((3, 5), (5, 7), (1, 6)):
    for size in ((7, 3), (8, 10), (1, 1), (2, 9)):
        for mode in ("nearest", "nearest-exact", "bilinear", "bicubic"):
            CASES.append(([1, 2, *hw], list(size), None, mode, None, None, False, "float32"))
        for mode in ("bilinear", "bicubic"):
            CASES.append(([1, 2, *hw], list(size), None, mode, True, None, False, "float32"))
    for scale in ((1.1, 2.0), (0.6, 1.7), (2.5, 2.5), (3.0, 0.5)):
        for mode in ("nearest", "nearest-exact", "bilinear", "bicubic"):
            CASES.append(([1, 2, *hw], None, list(scale), mode, None, None, False, "float32"))
            CASES.append(([1, 2, *hw], None, list(scale), mode, None, True, True, "float32"))
        CASES.append(([1, 2, *hw], None, list(scale), "bicubic", True, None, True, "float32"))
for dhw in ((2, 3, 4), (3, 1, 5)):
    for size in ((3, 5, 7), (1, 2, 2), (4, 6, 3)):
        for mode in ("nearest", "nearest-exact", "trilinear"):
            CASES.append(([1, 2, *dhw], list(size), None, mode, None, None, False, "float32"))
        CASES.append(([1, 2, *dhw], list(size), None, "trilinear", True, None, True, "float32"))
    for scale in ((1.5, 2.0, 0.8), (2.0, 2.0, 2.0)):
        for mode in ("nearest", "nearest-exact", "trilinear"):
            CASES.append(([1, 2, *dhw], None, list(scale), mode, None, None, mode == "trilinear", "float32"))
# float64: linear modes compute their source index in double, nearest in float.
for case in ([2, 3, 5], None, [1.1], "linear", None, None, False, "float64"), \
            ([2, 3, 7], None, [2.9], "nearest", None, None, False, "float64"), \
            ([1, 2, 5, 7], None, [0.6, 1.7], "bicubic", None, None, False, "float64"), \
            ([1, 2, 5, 7], [8, 10], None, "bilinear", True, None, False, "float64"):
    CASES.append(case)


def main():
    out = {"torch": torch.__version__, "cases": []}
    for shape, size, scale, mode, align, rec, cl, dt in CASES:
        if scale and any(int(float(i) * f) < 1 for i, f in zip(shape[2:], scale)):
            continue  # an empty output: PyTorch refuses it (the test checks that message)
        dtype = getattr(torch, dt)
        n = 1
        for s in shape:
            n *= s
        x = values(n, 7919, 97, dtype).reshape(shape)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
        x.requires_grad_(True)
        y = F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align,
                          recompute_scale_factor=rec)
        g = values(y.numel(), 104729, 89, dtype).reshape(y.shape)
        y.backward(g)
        digits = 17 if dt == "float64" else 9
        out["cases"].append({
            "shape": shape, "size": size, "scale_factor": scale, "mode": mode, "align_corners": align,
            "recompute_scale_factor": rec, "channels_last": cl, "dtype": dt, "out_shape": list(y.shape),
            "out": [float(f"{v:.{digits}g}") for v in y.detach().flatten().tolist()],
            "grad": [float(f"{v:.{digits}g}") for v in x.grad.contiguous().flatten().tolist()],
        })
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "upsample_goldens.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {len(out['cases'])} cases to {path}")


if __name__ == "__main__":
    main()
