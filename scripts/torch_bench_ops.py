#!/usr/bin/env python3
"""PyTorch's numbers for the bench-ops foundation cases, on the same GPU, for comparison.

Same cases and sizes as `anvil bench-ops --device cuda` (2^28 elements): eager = one call
between two CUDA events (median of 50), graph = a CUDA graph of 20 calls replayed (median of
12) divided by 20. Bytes as anvil counts them; the ceiling is the best of torch's copy_ and
a plain device-to-device copy measured in the same run.
    python3 scripts/torch_bench_ops.py
"""
import statistics

import torch


def eager_us(fn, reps=50):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def graph_us(fn, calls=20, reps=12):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / calls)
    return statistics.median(times)


def main():
    n = 1 << 28
    dev = "cuda"
    a32, b32 = torch.rand(n, device=dev), torch.rand(n, device=dev)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    out32 = torch.empty(n, device=dev)
    out16 = torch.empty(n, device=dev, dtype=torch.bfloat16)
    out8 = torch.empty(n, device=dev, dtype=torch.float8_e4m3fn)
    ceil = 8.0 * n / min(eager_us(lambda: out32.copy_(a32), 20), graph_us(lambda: out32.copy_(a32))) * 1e-3
    cases = [
        ("copy f32", 8.0 * n, lambda: out32.copy_(a32)),
        ("cast f32->bf16", 6.0 * n, lambda: out16.copy_(a32)),
        ("cast f32->fp8e4m3", 5.0 * n, lambda: out8.copy_(a32)),
        ("cast bf16->f32", 6.0 * n, lambda: out32.copy_(a16)),
        ("add f32", 12.0 * n, lambda: torch.add(a32, b32)),
        ("add bf16", 6.0 * n, lambda: torch.add(a16, b16)),
        ("sum f32", 4.0 * n, lambda: torch.sum(a32)),
        ("sum bf16", 2.0 * n, lambda: torch.sum(a16)),
    ]
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: copy ceiling {ceil:.1f} GB/s")
    print(f"{'case':<24}{'eager us':>10}{'graph us':>10}{'GB/s':>9}{'of ceil':>9}")
    for name, nbytes, fn in cases:
        e, g = eager_us(fn), graph_us(fn)
        gbps = nbytes / g * 1e-3
        print(f"{name:<24}{e:>10.1f}{g:>10.1f}{gbps:>9.1f}{gbps / ceil:>9.2f}")


if __name__ == "__main__":
    main()
