#!/usr/bin/env python3
"""Writes tests/data/release_op_goldens.json: PyTorch's own outputs for the release's new ops
(logspace, frexp, special.laguerre_polynomial_l), read by tests/test_release_ops.cpp on every
device. logspace and frexp compare bit for bit; laguerre within a few ulps (CUDA contracts the
recurrence into FMAs, as PyTorch's CUDA kernel does).
Needs torch (pip's CPU wheel is enough):  python3 scripts/make_release_op_goldens.py
"""
import json
import math
import pathlib

import torch

LOGSPACE = [  # (start, end, steps, base, dtype)
    (0, 2, 5, 10.0, "float32"), (-1, 2.5, 4, 2.0, "bfloat16"), (1.5, 1.5, 1, 10.0, "int32"),
    (0, 2, 5, 10.0, "int64"), (0.3, 7.7, 9, 3.0, "float16"), (-2, 3, 11, 10.0, "float64"),
    (1.1, 5.9, 6, 2.5, "int16"), (5, 0, 7, 1.7, "uint8"), (0.1, 0.9, 8, 10.0, "bfloat16"),
    (3, -3, 13, 0.5, "float32"), (0, 1, 0, 10.0, "float32"), (0.7, 2.2, 1, 10.0, "float16"),
    (-0.5, 4.5, 10, 2.0, "int8"), (0.25, 9.75, 40, 1.3, "float32"), (1e-3, 3.3, 17, 7.0, "float64"),
]

FREXP = {
    "float32": [0.0, -0.0, 1.0, -3.0, 0.1, 1e-40, -1.4e-45, 3.4e38, 2.0**-126, 2.0**-149, 6.5, -1e-20,
                math.inf, -math.inf, math.nan],
    "float64": [0.0, 5e-324, -1e-310, 1e300, -2.5, 0.75, 2.0**-1022, 1.7976931348623157e308, math.inf, math.nan],
    "float16": [0.0, 6e-8, -1e-5, 65504.0, 0.33, -7.0, 2.0**-14, math.inf],
    "bfloat16": [0.0, 1e-39, -3e38, 0.1, 17.0, -0.0078125, math.nan],
}

LAGUERRE_X = [-3.0, -1.5, -0.25, 0.0, 0.5, 1.0, 2.75, 5.0, 9.5]
LAGUERRE_N = [-1.0, 0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 2.7]


def encode(v):  # JSON has no NaN / inf: null and "inf" / "-inf"
    if math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def as_list(t):
    return [encode(v) for v in t.double().tolist()]


def main():
    out = {"torch": torch.__version__, "logspace": [], "frexp": [], "laguerre": []}
    for start, end, steps, base, dt in LOGSPACE:
        y = torch.logspace(start, end, steps, base=base, dtype=getattr(torch, dt))
        out["logspace"].append({"start": start, "end": end, "steps": steps, "base": base, "dtype": dt,
                                "y": as_list(y)})
    for dt, vals in FREXP.items():
        x = torch.tensor(vals, dtype=getattr(torch, dt))
        m, e = torch.frexp(x)
        out["frexp"].append({"dtype": dt, "x": as_list(x), "mantissa": as_list(m), "exponent": e.tolist()})
    for dt in ("float32", "float64"):
        x = torch.tensor(LAGUERRE_X, dtype=getattr(torch, dt)).reshape(-1, 1)
        n = torch.tensor(LAGUERRE_N, dtype=getattr(torch, dt)).reshape(1, -1)
        y = torch.special.laguerre_polynomial_l(x, n)
        out["laguerre"].append({"dtype": dt, "x": LAGUERRE_X, "n": LAGUERRE_N, "y": as_list(y.reshape(-1))})
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "release_op_goldens.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
