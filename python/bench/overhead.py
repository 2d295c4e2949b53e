"""Per-call cost of small ops from Python, anvil beside PyTorch eager in the same process (issue 21's
overhead benchmark): add on 1-element tensors (operator and function, tensor and number) and
linear at decode size (one token). Prints ns per call, best of several repeats, and torch / anvil.

    PYTHONPATH=build/python python3 python/bench/overhead.py [--device cpu|cuda] [--number N]
"""
import argparse
import timeit

import numpy as np

import anvil


def best_ns(fns, number, repeat=9):
    """Best ns per call of each (fn, sync) in fns, the repeats interleaved so that both libraries
    see the same phases of a noisy machine."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, (fn, sync) in enumerate(fns):
            def run():
                for _ in range(number):
                    fn()
                if sync:
                    sync()
            best[i] = min(best[i], timeit.timeit(run, number=1) / number * 1e9)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--number", type=int, default=100000)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    dev, n = args.device, args.number
    a1, b1 = anvil.ones(1, device=dev), anvil.ones(1, device=dev)
    x = anvil.tensor(np.random.default_rng(0).standard_normal((1, 1024)).astype(np.float32), device=dev)
    w = anvil.tensor(np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32) / 32, device=dev)
    F = anvil.nn.functional
    cases = [("a + b (1 element)", lambda: a1 + b1), ("add(a, b)", lambda: anvil.add(a1, b1)),
             ("a + 1.0", lambda: a1 + 1.0), ("linear [1, 1024] x [1024, 1024]^T f32", lambda: F.linear(x, w))]
    tcases = [None] * len(cases)
    if torch is not None:
        ta, tb = torch.ones(1, device=dev), torch.ones(1, device=dev)
        tx, tw = torch.from_dlpack(x.clone()), torch.from_dlpack(w.clone())
        tf = torch.nn.functional
        tcases = [lambda: ta + tb, lambda: torch.add(ta, tb), lambda: ta + 1.0, lambda: tf.linear(tx, tw)]
    a_sync = (lambda: anvil.cuda.synchronize()) if dev.startswith("cuda") else None
    t_sync = (lambda: torch.cuda.synchronize()) if torch is not None and dev.startswith("cuda") else None
    print(f"{'case':44s} {'anvil ns':>10s} {'torch ns':>10s} {'torch/anvil':>12s}")
    for (name, fa), ft in zip(cases, tcases):
        reps = n if "linear" not in name else max(n // 100, 100)
        if ft:
            na, nt = best_ns([(fa, a_sync), (ft, t_sync)], reps)
        else:
            (na,), nt = best_ns([(fa, a_sync)], reps), float("nan")
        print(f"{name:44s} {na:10.0f} {nt:10.0f} {nt / na:12.2f}")


if __name__ == "__main__":
    main()
