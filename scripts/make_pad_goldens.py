#!/usr/bin/env python3
"""Writes tests/data/pad_goldens.json: PyTorch's own outputs for a sample of pads, read by
tests/test_pad.cpp (Pad.MatchesPyTorchGoldens) on every device.

Inputs and output gradients are dyadic and rebuilt by the test from the element index, so every
value and every gradient sum is exact in float32 and compares bit for bit. The backward is
PyTorch's: its aten backward op for reflect / replicate, autograd for constant and circular.
Needs torch (pip's CPU wheel is enough):  python3 scripts/make_pad_goldens.py
"""
import json
import pathlib

import torch
import torch.nn.functional as F


def values(n, mul, mod):
    # i -> ((i * mul) % mod) / 8 - 6: exact in float32; the test computes the same.
    return torch.tensor([((i * mul) % mod) / 8.0 - 6.0 for i in range(n)], dtype=torch.float32)


CASES = [  # (shape, pad, mode, channels_last)
    ([2, 7], [3, -2], "constant", False),
    ([2, 3, 4, 5], [1, 2, -1, 3, 0, 1], "constant", False),
    ([1, 2, 3, 4, 5], [1, 1, 1, 1, 2, 0], "constant", False),
    ([2, 3, 6], [3, -2], "reflect", False),
    ([2, 3, 6], [-4, 5], "reflect", False),
    ([2, 3, 5, 6], [2, 1, -1, 3], "reflect", False),
    ([2, 3, 5, 6], [2, 1, -1, 3], "reflect", True),
    ([1, 2, 4, 5, 6], [1, 2, 3, 1, 2, 1], "reflect", False),
    ([3, 5], [7, -3], "replicate", False),
    ([2, 3, 4, 5], [3, 0, 2, 4], "replicate", True),
    ([1, 2, 3, 4, 5], [2, -1, 1, 3, 0, 2], "replicate", False),
    ([2, 3, 6], [2, -1], "circular", False),
    ([2, 3, 4, 5], [-1, 2, 3, 1], "circular", False),
    ([1, 2, 3, 4, 5], [1, 1, 2, 0, -1, 1], "circular", False),
]


def layout(t):
    if t.is_contiguous():
        return "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    return "strided"


def main():
    out = {"torch": torch.__version__, "cases": []}
    for shape, pad, mode, cl in CASES:
        n = 1
        for s in shape:
            n *= s
        x = values(n, 7919, 101).reshape(shape)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
        x.requires_grad_(True)
        y = F.pad(x, pad, mode)
        g = values(y.numel(), 104729, 97).reshape(y.shape)
        n_pad = len(pad) // 2
        if mode in ("reflect", "replicate"):
            name = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{n_pad}d_backward"
            grad = getattr(torch.ops.aten, name)(g, x.detach(), pad)
        else:
            (grad,) = torch.autograd.grad(y, x, g)
        out["cases"].append({"shape": shape, "pad": pad, "mode": mode, "channels_last": cl,
                             "out_shape": list(y.shape), "out_format": layout(y), "grad_format": layout(grad),
                             "y": y.detach().flatten().tolist(), "grad": grad.flatten().tolist()})
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "pad_goldens.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({len(out['cases'])} cases, torch {torch.__version__})")


if __name__ == "__main__":
    main()
