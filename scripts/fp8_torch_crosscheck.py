#!/usr/bin/env python3
"""Cross-check anvil's float32 -> float8_e4m3fn / float8_e5m2 / bfloat16 / float16 encoders
against PyTorch (a one-off check, not part of CI: torch is never a dependency of anvil).

  pip install numpy torch==2.15.0          # plain PyPI; the CPU wheel index works too
  python3 scripts/fp8_torch_crosscheck.py --build build      # a build with anvil_tests

Inputs (regenerated from a fixed numpy seed): PyTorch's FP8 test vectors from
shared/docs/pytorch-semantics.md 1.3, every midpoint between neighbouring e4m3fn / e5m2 values,
and 1,000,000 random float32 values (a third random bit patterns: NaN, inf, subnormals, huge;
a third uniform in [-600, 600]; a third with random exponents in [-30, 20]).

anvil's encodings come from `anvil_tests --gtest_filter=Fp8CrossCheck.DumpForTorch` with
ANVIL_FP8_XCHECK_DIR set: it reads inputs_f32.bin and writes anvil_<fmt>.bin (CPU tensor casts)
and oracle_<fmt>.bin (the test suite's spec oracle, tests/reference/ref_float.cpp).
Exit status 0 when every non-NaN input encodes identically in anvil and torch; NaN inputs are
reported separately (anvil pins bf16 NaN -> 0x7FC0 and fp16 NaN -> sign|0x7E00).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

SEED = 20260417
N_RANDOM = 1_000_000

# pytorch-semantics.md 1.3: (input, e4m3fn byte)
E4M3FN_VECTORS = [
    (0.0, 0x00), (-0.0, 0x80), (448.0, 0x7E), (464.0, 0x7E), (465.0, 0x7E), (1e6, 0x7E),
    (float("inf"), 0x7E), (float("-inf"), 0xFE), (float("nan"), 0x7F), (2.0**-9, 0x01),
    (2.0**-10, 0x00), (1.5 * 2.0**-10, 0x01), (0.015625, 0x08),
]


def fp8_values(e_bits, m_bits, bias, ieee):
    """Non-negative finite values of an 8-bit float format, by code."""
    vals = []
    for c in range(128):
        e, m = c >> m_bits, c & ((1 << m_bits) - 1)
        if ieee and e == (1 << e_bits) - 1:
            break
        if not ieee and e == (1 << e_bits) - 1 and m == (1 << m_bits) - 1:
            break
        if e == 0:
            vals.append(m * 2.0 ** (1 - bias - m_bits))
        else:
            vals.append((1 + m / (1 << m_bits)) * 2.0 ** (e - bias))
    return vals


def make_inputs():
    rng = np.random.default_rng(SEED)
    third = N_RANDOM // 3
    bits = rng.integers(0, 2**32, size=third, dtype=np.uint64).astype(np.uint32).view(np.float32)
    uniform = rng.uniform(-600.0, 600.0, size=third).astype(np.float32)
    rest = N_RANDOM - 2 * third
    mant = rng.uniform(1.0, 2.0, size=rest)
    expo = rng.integers(-30, 21, size=rest)
    sign = np.where(rng.integers(0, 2, size=rest) == 1, -1.0, 1.0)
    scaled = (sign * np.ldexp(mant, expo)).astype(np.float32)
    mids = []
    for vals in (fp8_values(4, 3, 7, False), fp8_values(5, 2, 15, True)):
        for a, b in zip(vals, vals[1:]):
            mids += [(a + b) / 2, -(a + b) / 2]
    vectors = np.array([v for v, _ in E4M3FN_VECTORS], dtype=np.float32)
    return np.concatenate([vectors, np.array(mids, dtype=np.float32), bits, uniform, scaled])


def torch_encode(torch, x):
    t = torch.from_numpy(x.copy())
    return {
        "e4m3fn": t.to(torch.float8_e4m3fn).view(torch.uint8).numpy().astype(np.uint32),
        "e5m2": t.to(torch.float8_e5m2).view(torch.uint8).numpy().astype(np.uint32),
        "bf16": t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).astype(np.uint32),
        "fp16": t.to(torch.float16).view(torch.int16).numpy().view(np.uint16).astype(np.uint32),
    }


def read(path, fmt):
    dt = np.uint8 if fmt in ("e4m3fn", "e5m2") else np.uint16
    return np.fromfile(path, dtype=dt).astype(np.uint32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build folder holding tests/anvil_tests")
    ap.add_argument("--out", default=None, help="folder for the input / output files (default: a temp dir)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch is not installed: pip install torch==2.15.0 (or the newest available version)")

    out = args.out or tempfile.mkdtemp(prefix="anvil_fp8_xcheck_")
    os.makedirs(out, exist_ok=True)
    x = make_inputs()
    x.tofile(os.path.join(out, "inputs_f32.bin"))

    exe = os.path.join(args.build, "tests", "anvil_tests")
    env = dict(os.environ, ANVIL_FP8_XCHECK_DIR=out)
    r = subprocess.run([exe, "--gtest_filter=Fp8CrossCheck.DumpForTorch"], env=env, capture_output=True, text=True)
    if r.returncode != 0 or "[  PASSED  ] 1 test" not in r.stdout:
        sys.exit(f"anvil_tests dump failed:\n{r.stdout}\n{r.stderr}")

    ref = torch_encode(torch, x)
    nan = np.isnan(x)
    print(f"torch {torch.__version__}, numpy {np.__version__}, {x.size} float32 inputs "
          f"({int(nan.sum())} NaN), seed {SEED}")
    ok = True
    for i, (v, want) in enumerate(E4M3FN_VECTORS):
        if ref["e4m3fn"][i] != want:
            print(f"  torch gives 0x{ref['e4m3fn'][i]:02x} for spec vector {v} (spec says 0x{want:02x})")
    for fmt in ("e4m3fn", "e5m2", "bf16", "fp16"):
        anvil = read(os.path.join(out, f"anvil_{fmt}.bin"), fmt)
        oracle = read(os.path.join(out, f"oracle_{fmt}.bin"), fmt)
        for name, got in (("anvil", anvil), ("oracle", oracle)):
            diff = got != ref[fmt]
            n_num, n_nan = int((diff & ~nan).sum()), int((diff & nan).sum())
            print(f"  {fmt:7s} {name:6s}: {x.size - int(diff.sum())}/{x.size} identical; "
                  f"differ on {n_num} non-NaN and {n_nan} NaN inputs")
            for j in np.flatnonzero(diff & ~nan)[:5]:
                print(f"      input {x[j]!r} (0x{x.view(np.uint32)[j]:08x}): {name} 0x{got[j]:x}, torch 0x{ref[fmt][j]:x}")
            if n_nan:
                j = np.flatnonzero(diff & nan)[0]
                print(f"      e.g. NaN 0x{x.view(np.uint32)[j]:08x}: {name} 0x{got[j]:x}, torch 0x{ref[fmt][j]:x}")
            ok &= n_num == 0
    print("files in", out)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
