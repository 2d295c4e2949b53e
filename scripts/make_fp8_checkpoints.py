#!/usr/bin/env python3
"""Make the block-scaled FP8 test checkpoints (committed test data under tests/data/).

From the tiny bf16 checkpoints tests/data/qwen3-{dense,moe}-tiny/ this writes

  tests/data/qwen3-dense-tiny-fp8/   block size [32, 32], scales BF16
  tests/data/qwen3-moe-tiny-fp8/     block size [48, 64], scales F32 (partial edge blocks)

in the layout of the Hugging Face Hub's fine-grained FP8 checkpoints (Qwen/Qwen3-30B-A3B-FP8,
DeepSeek-V3 style): every attention projection, dense MLP projection and MoE expert projection
weight W [n, k] is stored as F8_E4M3 under its own name, with a scale grid
[ceil(n/bn), ceil(k/bk)] stored as '<name>_scale_inv'. Per block: scale = amax|W| / 448
(1.0 for an all-zero block), rounded to the scale dtype; Wq = e4m3fn(clip(W / scale, +-448))
with round-to-nearest-even. Dequantisation is W' = float32(Wq) * float32(scale_inv[i//bn, j//bk]).
Embeddings, lm_head, norms and MoE routers (mlp.gate) stay bf16, bit-identical to the source.
config.json gains a "quantization_config"; generation_config.json is copied.

Each output also has reference/: the same model unquantised, every quantised weight replaced by
its exact dequantisation W' as F32, other tensors as in the source, config.json unchanged. Tests
compare the runtime on the FP8 folder against reference/.

Needs only numpy and ml_dtypes (safetensors is read and written by hand). Deterministic.
  python3 scripts/make_fp8_checkpoints.py           # (re)generate
  python3 scripts/make_fp8_checkpoints.py --check   # verify the committed outputs
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys

import ml_dtypes
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
# (source folder, output folder, weight_block_size, scale dtype string)
JOBS = [("qwen3-dense-tiny", "qwen3-dense-tiny-fp8", (32, 32), "BF16"),
        ("qwen3-moe-tiny", "qwen3-moe-tiny-fp8", (48, 64), "F32")]
DTYPES = {"BF16": np.dtype(ml_dtypes.bfloat16), "F16": np.dtype("<f2"),
          "F32": np.dtype("<f4"), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn)}
E4M3_MAX = 448.0
QUANTISED = re.compile(r".*\.(self_attn\.[qkvo]_proj|mlp\.(experts\.\d+\.)?(gate|up|down)_proj)\.weight$")


def read_safetensors(path):
    """Returns (metadata or None, [(name, numpy array)] in file order)."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    meta = header.pop("__metadata__", None)
    data = blob[8 + hlen:]
    tensors, end = [], 0
    for name, info in header.items():
        b, e = info["data_offsets"]
        assert b == end, f"{path}: {name} is not contiguous"
        dt = DTYPES[info["dtype"]]
        tensors.append((name, np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"])))
        end = e
    assert end == len(data), f"{path}: data section has {len(data) - end} trailing bytes"
    return meta, tensors


def write_safetensors(path, tensors, meta):
    names = {v: k for k, v in DTYPES.items()}
    header, offset = {"__metadata__": meta}, 0
    for name, arr in tensors:
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson)
        for _, arr in tensors:
            f.write(np.ascontiguousarray(arr).tobytes())
    return 8 + len(hjson) + offset


def expand(grid, block, shape):
    """Scale grid -> one value per weight element."""
    return np.repeat(np.repeat(grid, block[0], 0), block[1], 1)[:shape[0], :shape[1]]


def quantise(w, block, sdtype):
    """bf16 weight -> (e4m3fn weight, scale grid in sdtype, float32 dequantisation)."""
    w = w.astype(np.float32)
    (n, k), (bn, bk) = w.shape, block
    gn, gk = -(-n // bn), -(-k // bk)
    padded = np.zeros((gn * bn, gk * bk), np.float32)
    padded[:n, :k] = np.abs(w)
    amax = padded.reshape(gn, bn, gk, bk).max(axis=(1, 3))
    scale = np.where(amax == 0, np.float32(1.0), amax / np.float32(E4M3_MAX)).astype(np.float32)
    scale = scale.astype(DTYPES[sdtype])
    s32 = expand(scale.astype(np.float32), block, w.shape)
    wq = np.clip(w / s32, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return wq, scale, wq.astype(np.float32) * s32


def quant_config(src_tensors, block):
    skip = ["lm_head"] + [n[:-len(".weight")] for n, _ in src_tensors if n.endswith(".mlp.gate.weight")]
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "weight_block_size": list(block), "modules_to_not_convert": skip}


def is_quantised(name, arr):
    return arr.ndim == 2 and QUANTISED.match(name) is not None


def make(src, out, block, sdtype):
    meta, tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    fp8, ref, nq = [], [], 0
    for name, arr in tensors:
        if is_quantised(name, arr):
            wq, scale, deq = quantise(arr, block, sdtype)
            fp8 += [(name, wq), (name + "_scale_inv", scale)]
            ref.append((name, deq))
            nq += 1
        else:
            fp8.append((name, arr))
            ref.append((name, arr))
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = quant_config(tensors, block)
    for folder, ts, what in ((out, fp8, "F8_E4M3 + scale"), (os.path.join(out, "reference"), ref, "F32")):
        os.makedirs(folder, exist_ok=True)
        size = write_safetensors(os.path.join(folder, "model.safetensors"), ts, meta or {"format": "pt"})
        shutil.copyfile(os.path.join(src, "generation_config.json"),
                        os.path.join(folder, "generation_config.json"))
        print(f"{os.path.relpath(folder, ROOT)}: {len(ts)} tensors ({nq} weights as {what}), "
              f"model.safetensors {size} bytes")
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(os.path.join(src, "config.json"), os.path.join(out, "reference", "config.json"))


def check(src, out, block, sdtype):
    _, src_t = read_safetensors(os.path.join(src, "model.safetensors"))
    meta, fp8 = read_safetensors(os.path.join(out, "model.safetensors"))
    rmeta, ref = read_safetensors(os.path.join(out, "reference", "model.safetensors"))
    assert meta == {"format": "pt"} and rmeta == {"format": "pt"}, "missing __metadata__"
    fp8, ref = dict(fp8), dict(ref)
    assert list(ref) == [n for n, _ in src_t], "reference tensor names/order differ from source"
    expected = [m for n, a in src_t for m in ([n, n + "_scale_inv"] if is_quantised(n, a) else [n])]
    assert list(fp8) == expected, "fp8 tensor names/order differ from expected"
    nq = 0
    for name, w in src_t:
        if not is_quantised(name, w):
            for t in (fp8[name], ref[name]):
                assert t.dtype == w.dtype and t.shape == w.shape and t.tobytes() == w.tobytes(), name
            continue
        nq += 1
        wq, scale = fp8[name], fp8[name + "_scale_inv"]
        grid = (-(-w.shape[0] // block[0]), -(-w.shape[1] // block[1]))
        assert wq.dtype == DTYPES["F8_E4M3"] and wq.shape == w.shape, name
        assert scale.dtype == DTYPES[sdtype] and scale.shape == grid, f"{name}_scale_inv"
        s32 = expand(scale.astype(np.float32), block, w.shape)
        deq = wq.astype(np.float32) * s32
        w32 = w.astype(np.float32)
        # e4m3: half an ulp is 2^-4 relative for normals, 2^-10 * scale absolute for subnormals;
        # 2^-8 relative more covers clipping at 448 after the scale was rounded to bf16.
        tol = (2.0 ** -4 + 2.0 ** -8) * np.abs(w32) + 2.0 ** -10 * s32
        err = np.abs(deq - w32)
        assert np.all(err <= tol), f"{name}: dequantisation error {np.max(err - tol)} over tolerance"
        r = ref[name]
        assert r.dtype == DTYPES["F32"] and r.tobytes() == deq.tobytes(), f"reference {name} != dequant"
    with open(os.path.join(out, "config.json")) as f:
        qc = json.load(f).pop("quantization_config")
    assert qc == quant_config(src_t, block), "quantization_config differs"
    for a, b in (("config.json", "reference/config.json"), ("generation_config.json",
                 "generation_config.json"), ("generation_config.json", "reference/generation_config.json")):
        with open(os.path.join(src, a), "rb") as f1, open(os.path.join(out, b), "rb") as f2:
            assert f1.read() == f2.read(), f"{out}/{b} differs from source {a}"
    print(f"ok {os.path.relpath(out, ROOT)}: {nq} quantised weights, {len(fp8)} + {len(ref)} tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA, help="folder holding the source and output checkpoints")
    ap.add_argument("--check", action="store_true", help="verify the outputs instead of writing them")
    args = ap.parse_args()
    for src, out, block, sdtype in JOBS:
        (check if args.check else make)(os.path.join(args.data, src), os.path.join(args.data, out),
                                        block, sdtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
