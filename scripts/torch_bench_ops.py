#!/usr/bin/env python3
"""PyTorch on the same machine for the cases of an `anvil bench-ops --json` run, side by side.

Reads the JSON that anvil wrote (each case carries a "spec" recipe), builds the same case in
PyTorch on the same device, times it the same way and prints anvil's time, PyTorch's time and
the speed-up, with a geometric mean per case group (e.g. the decode-linear suite).
  CUDA: eager = one call between two CUDA events (median of 50); kernel = a CUDA graph of 20
        calls replayed (median of 12) / 20; inputs rotated over copies like anvil does.
  CPU:  median wall time of 15 calls with torch.set_num_threads(anvil's thread count).
    build/tools/anvil/anvil bench-ops --device cuda --json anvil.json
    python3 scripts/torch_bench_ops.py anvil.json [--filter TEXT] [--json torch.json]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float64": torch.float64, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
          "int64": torch.int64}


def eager_us(fn, cuda, reps):
    # Warm-up as anvil bench-ops does: three calls, and on the CPU at least 20 ms of calls.
    t0, i = time.perf_counter(), 0
    while i < 3 or (not cuda and i < 1000 and time.perf_counter() - t0 < 0.02):
        fn(i)
        i += 1
    times = []
    for i in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(i)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0)
        else:
            t0 = time.perf_counter()
            fn(i)
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def graph_us(fn, calls=20, reps=12):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i)
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


def rotations(dev, nbytes):
    cache = 2.0 * torch.cuda.get_device_properties(dev).L2_cache_size if dev.type == "cuda" else 3.0 * 32 * 2**20
    return max(1, math.ceil(cache / max(nbytes, 1.0)))


def rotate_hf_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def moe_route(logits, top_k, experts):
    """Hugging Face's Qwen3-MoE routing, sorted for grouped_mm as transformers' integration does."""
    probs = F.softmax(logits, dim=-1, dtype=torch.float)
    w, ids = torch.topk(probs, top_k, dim=-1)
    w = w / w.sum(dim=-1, keepdim=True)
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=experts), 0, dtype=torch.int32)
    return w, order, offs


def build_moe(op, spec, dev, t):
    """MoE cases of bench/cases_moe.cpp: routing, combine, the whole experts block of one token."""
    experts, top_k = spec.get("experts", 128), spec["top_k"]
    if op == "moe_route":
        tokens = spec["tokens"]
        rot = rotations(dev, 2 * tokens * experts)
        xs = [torch.randn(tokens, experts, device=dev, dtype=t) for _ in range(rot)]
        return lambda i: moe_route(xs[i % rot], top_k, experts)
    if op == "moe_combine":
        tokens, hidden = spec["tokens"], spec["hidden"]
        y = torch.randn(tokens * top_k, hidden, device=dev, dtype=t)
        w, order, _ = moe_route(torch.randn(tokens, experts, device=dev), top_k, experts)
        token_index, wsorted = order // top_k, w.flatten()[order]

        def combine(i):
            out = torch.zeros(tokens, hidden, device=dev, dtype=t)
            return out.index_add_(0, token_index, (y * wsorted[:, None]).to(t))
        return combine
    hidden, inter = spec["hidden"], spec["inter"]
    router = torch.randn(experts, hidden, device=dev, dtype=t) * 0.05
    gate_up = torch.randn(experts, 2 * inter, hidden, device=dev, dtype=t) * 0.02
    down = torch.randn(experts, hidden, inter, device=dev, dtype=t) * 0.02
    hs = [torch.randn(1, hidden, device=dev, dtype=t) for _ in range(16)]

    def block(i):
        h = hs[i % 16]
        w, order, offs = moe_route(F.linear(h, router), top_k, experts)
        x = h[order // top_k]
        gu = torch._grouped_mm(x, gate_up.transpose(-2, -1), offs=offs)
        act = F.silu(gu[:, :inter]) * gu[:, inter:]
        y = torch._grouped_mm(act, down.transpose(-2, -1), offs=offs)
        out = torch.zeros_like(h)
        return out.index_add_(0, order // top_k, (y * w.flatten()[order][:, None]).to(t))
    if spec.get("fp8"):
        block.note = "torch: the bf16 block (no weight-only FP8 grouped kernel)"
    return block


def build_pad(op, spec, dev, t):
    """F.pad, or the aten backward of its mode (constant: the gradient cropped, as autograd does)."""
    shape, pad, mode = spec["shape"], spec["pad"], spec["mode"]
    fmt = torch.contiguous_format
    if spec["channels_last"]:
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = torch.rand(*shape, device=dev).to(t).contiguous(memory_format=fmt)
    if op == "pad":
        rot = rotations(dev, x.numel() * x.element_size())
        xs = [torch.rand(*shape, device=dev).to(t).contiguous(memory_format=fmt) for _ in range(rot)]
        return lambda i: F.pad(xs[i % rot], pad, mode)
    out = F.pad(x, pad, mode)
    rot = rotations(dev, out.numel() * out.element_size())
    gs = [torch.rand(*out.shape, device=dev).to(t).contiguous(memory_format=fmt) for _ in range(rot)]
    n = len(pad) // 2
    if mode == "constant":
        neg = [-p for p in pad]
        return lambda i: torch.constant_pad_nd(gs[i % rot], neg)
    aten = getattr(torch.ops.aten, f"{'reflection' if mode == 'reflect' else 'replication'}_pad{n}d_backward")
    return lambda i: aten(gs[i % rot], x, pad)


def build_conv(op, spec, dev, t):
    """F.conv{1,2,3}d (with a bias where the spec has one), or aten.convolution_backward for grad_input and
    grad_weight (no bias)."""
    xs, ws, groups = spec["x"], spec["w"], spec["groups"]
    n = len(xs) - 2
    fmt = torch.contiguous_format
    if spec["channels_last"]:
        fmt = torch.channels_last if len(xs) == 4 else torch.channels_last_3d
    x = torch.randn(*xs, device=dev).to(t).contiguous(memory_format=fmt)
    w = torch.randn(*ws, device=dev).to(t).contiguous(memory_format=fmt)
    stride = spec["stride"] * n if len(spec["stride"]) == 1 else spec["stride"]
    padding = spec["padding"] * n if len(spec["padding"]) == 1 else spec["padding"]
    conv = getattr(F, f"conv{n}d")
    if op == "conv":
        b = torch.randn(ws[0], device=dev).to(t) if spec.get("bias") else None
        return lambda i: conv(x, w, b, stride, padding, 1, groups)
    out = conv(x, w, None, stride, padding, 1, groups)
    gy = torch.randn(*out.shape, device=dev).to(t).contiguous(memory_format=fmt)
    return lambda i: torch.ops.aten.convolution_backward(gy, x, w, None, stride, padding, [1] * n, False, [0] * n,
                                                         groups, [True, True, False])


def build_vision(op, spec, dev, t):
    """F.dropout, F.batch_norm in training, F.group_norm, F.normalize, F.interpolate 2x and its aten backward."""
    shape = spec["shape"]
    fmt = torch.channels_last if spec.get("channels_last") else torch.contiguous_format
    if op == "upsample_backward":
        out = [shape[0], shape[1], 2 * shape[2], 2 * shape[3]]
        rot = rotations(dev, 2 * math.prod(out))
        gs = [torch.rand(*out, device=dev).to(t) for _ in range(rot)]
        size, mode = out[2:], spec["mode"]
        if mode == "bilinear":
            return lambda i: torch.ops.aten.upsample_bilinear2d_backward(gs[i % rot], size, shape, False)
        aten = torch.ops.aten.upsample_nearest2d_backward if mode == "nearest" else \
            torch.ops.aten._upsample_nearest_exact2d_backward
        return lambda i: aten(gs[i % rot], size, shape)
    rot = rotations(dev, 2 * math.prod(shape))
    xs = [torch.rand(*shape, device=dev).to(t).contiguous(memory_format=fmt) for _ in range(rot)]
    if op == "dropout":
        return lambda i: F.dropout(xs[i % rot], spec["p"], True)
    if op == "normalize":
        return lambda i: F.normalize(xs[i % rot], 2.0, 1)
    if op == "group_norm":
        c = shape[1]
        w, b = torch.ones(c, device=dev, dtype=t), torch.zeros(c, device=dev, dtype=t)
        return lambda i: F.group_norm(xs[i % rot], spec["groups"], w, b)
    if op == "batch_norm":
        c = shape[1]
        w, b = torch.ones(c, device=dev, dtype=t), torch.zeros(c, device=dev, dtype=t)
        rm, rv = torch.zeros(c, device=dev, dtype=t), torch.ones(c, device=dev, dtype=t)
        return lambda i: F.batch_norm(xs[i % rot], rm, rv, w, b, training=True)
    size = [2 * shape[2], 2 * shape[3]]
    return lambda i: F.interpolate(xs[i % rot], size=size, mode=spec["mode"])


def build_linalg(spec, dev, t):
    """torch.linalg's *_ex forms on randn + n I, as bench/cases_linalg.cpp."""
    # Inputs drawn on the CPU: a case that failed graph capture before leaves the CUDA generator
    # refusing to draw ("Offset increment outside graph capture").
    shape, fn, rhs = spec["shape"], spec["fn"], spec["rhs"]
    n = shape[-1]
    small = len(shape) == 3 and n <= 4
    rot = rotations(dev, 4 * math.prod(shape)) if small else 1
    eye = torch.eye(n, dtype=t) * n
    a = [(torch.randn(*shape, dtype=t) + eye).to(dev) for _ in range(rot)]
    if fn == "inv_ex":
        return lambda i: torch.linalg.inv_ex(a[i % rot])
    if fn == "lu_factor_ex":
        return lambda i: torch.linalg.lu_factor_ex(a[i % rot])
    if fn == "solve_triangular":  # unit lower (I + L) X = B, as bench/cases_linalg.cpp
        tri = (torch.randn(*shape, dtype=t) / n).to(dev)
        b = torch.randn(shape[0], n, rhs, dtype=t).to(dev)
        return lambda i: torch.linalg.solve_triangular(tri, b, upper=False, unitriangular=True)
    if fn == "qr":
        return lambda i: torch.linalg.qr(a[i % rot])
    if fn == "svd":
        return lambda i: torch.linalg.svd(a[i % rot], full_matrices=False)
    b = [torch.randn(shape[0], n, 1, dtype=t).to(dev) for _ in range(rot)] if small else \
        [torch.randn(n, rhs, dtype=t).to(dev)]
    return lambda i: torch.linalg.solve_ex(a[i % rot], b[i % rot])


def build(spec, dev):
    """Returns fn(i) for call i, the PyTorch composition of the anvil op the spec names."""
    op = spec["op"]
    t = DTYPES[spec["dtype"]]
    if op == "copy":
        n, out_t = spec["n"], DTYPES[spec["out_dtype"]]
        rot = rotations(dev, n * torch.empty(0, dtype=t).element_size())
        src = [torch.rand(n, device=dev).to(t) for _ in range(rot)]
        dst = torch.empty(n, device=dev, dtype=out_t)
        return lambda i: dst.copy_(src[i % rot])
    if op == "add" and "a" in spec:  # a broadcast add: a [shape] + b [shape broadcast to a's]
        fmt = torch.channels_last if spec.get("channels_last") else torch.contiguous_format
        rot = rotations(dev, math.prod(spec["a"]) * torch.empty(0, dtype=t).element_size())
        a = [torch.rand(*spec["a"], device=dev).to(t).contiguous(memory_format=fmt) for _ in range(rot)]
        b = torch.rand(*spec["b"], device=dev).to(t)
        return lambda i: torch.add(a[i % rot], b)
    if op in ("add", "sum"):
        n = spec["n"]
        rot = rotations(dev, n * torch.empty(0, dtype=t).element_size())
        a = [torch.rand(n, device=dev).to(t) for _ in range(rot)]
        b = [torch.rand(n, device=dev).to(t) for _ in range(rot)]
        return (lambda i: torch.add(a[i % rot], b[i % rot])) if op == "add" else (lambda i: torch.sum(a[i % rot]))
    if op == "linear":
        m, k, n = spec["m"], spec["k"], spec["n"]
        rot = rotations(dev, n * k * torch.empty(0, dtype=t).element_size())
        w = [torch.randn(n, k, device=dev, dtype=t) * 0.05 for _ in range(rot)]
        x = torch.randn(m, k, device=dev, dtype=t)
        b = torch.randn(n, device=dev, dtype=t) if spec["bias"] else None
        return lambda i: F.linear(x, w[i % rot], b)
    if op == "scaled_mm":
        # torch._scaled_mm on b = W^T of a row-major W [n, k] (column-major, as cuBLASLt needs);
        # row-wise scales [m, 1] and [1, n], tensor-wise one element each.
        # Block-wise (1x128 x 128x128): scale_a [m, L] outer-dim-major, scale_b [L, ceil(n/128)]
        # with strides (1, L), torch._scaled_mm's layouts.
        m, k, n = spec["m"], spec["k"], spec["n"]
        row_wise, blocks = spec["recipe"] == "rowwise", spec["recipe"] == "blockwise_1x128_128x128"
        rot = rotations(dev, n * k)
        w = [(torch.randn(n, k, device=dev) * 0.1).to(t) for _ in range(rot)]
        a = (torch.randn(m, k, device=dev) * 0.1).to(t)
        L = (k + 127) // 128
        if blocks:
            sa = (torch.rand(L, m, device=dev) + 0.5).t()
            sb = (torch.rand((n + 127) // 128, L, device=dev) + 0.5).t()
        else:
            sa = torch.rand(m, 1, device=dev) + 0.5 if row_wise else torch.tensor(1.0, device=dev)
            sb = torch.rand(1, n, device=dev) + 0.5 if row_wise else torch.tensor(1.0, device=dev)
        out_t = DTYPES[spec["out_dtype"]]
        return lambda i: torch._scaled_mm(a, w[i % rot].t(), scale_a=sa, scale_b=sb, out_dtype=out_t)
    if op == "scaled_linear":
        # PyTorch has no weight-only FP8 linear kernel (dequantising first would time a cast, not
        # a GEMV); the anchor is its bf16 linear of the same shape, which reads twice the bytes.
        m, k, n = spec["m"], spec["k"], spec["n"]
        rot = rotations(dev, n * k * 2)
        w = [torch.randn(n, k, device=dev, dtype=t) * 0.05 for _ in range(rot)]
        x = torch.randn(m, k, device=dev, dtype=t)
        fn = lambda i: F.linear(x, w[i % rot])
        fn.note = "torch: bf16 F.linear of the same shape"
        return fn
    if op in ("grouped_mm", "scaled_grouped_mm"):
        # MoE experts as transformers runs them: torch._grouped_mm(a, W.transpose(-2, -1), offs),
        # with anvil's routing (decode: call i takes experts 16 j + i % rot; prefill: uniform).
        # PyTorch has no weight-only FP8 grouped kernel: the FP8 anchor is _scaled_grouped_mm
        # with e4m3 activations too (row-wise scales), which reads the same weight bytes.
        tokens, top_k, experts, k, n = spec["tokens"], spec["top_k"], spec["experts"], spec["k"], spec["n"]
        rows, fp8 = tokens * top_k, op == "scaled_grouped_mm"
        decode = tokens == 1
        rot = min(16, rotations(dev, top_k * n * k * (1 if fp8 else 2))) if decode else 1
        offs = []
        for i in range(rot):
            counts = [int(g % 16 == i) for g in range(experts)] if decode else [rows // experts] * experts
            offs.append(torch.tensor(counts).cumsum(0).to(device=dev, dtype=torch.int32))
        w = torch.randn(experts, n, k, device=dev, dtype=t) * 0.05
        a = torch.randn(rows, k, device=dev, dtype=t)
        if not fp8:
            b = w.transpose(-2, -1)
            return lambda i: torch._grouped_mm(a, b, offs=offs[i % rot])
        bq, aq = w.to(torch.float8_e4m3fn).transpose(-2, -1), a.to(torch.float8_e4m3fn)
        sa, sb = torch.rand(rows, device=dev) + 0.5, torch.rand(experts, n, device=dev) + 0.5
        fn = lambda i: torch._scaled_grouped_mm(aq, bq, sa, sb, offs=offs[i % rot], out_dtype=t)
        fn.note = "torch: _scaled_grouped_mm, e4m3 activations too"
        return fn
    if op == "attention":
        # F.scaled_dot_product_attention on [B, H, N, D]; grouped-query heads through enable_gqa
        # (the KV cache unexpanded); decode caches rotate like anvil's.
        b, hq, hk, lq, s = spec["batch"], spec["n_heads"], spec["n_kv_heads"], spec["q_len"], spec["kv_len"]
        d = spec["head_dim"]
        rot = rotations(dev, 2 * b * hk * s * d * 2) if lq == 1 else 1
        ks = [torch.randn(b, hk, s, d, device=dev, dtype=t) for _ in range(rot)]
        vs = [torch.randn(b, hk, s, d, device=dev, dtype=t) for _ in range(rot)]
        q = torch.randn(b, hq, lq, d, device=dev, dtype=t)
        gqa, causal = hq != hk, spec["causal"]
        return lambda i: F.scaled_dot_product_attention(q, ks[i % rot], vs[i % rot], is_causal=causal, enable_gqa=gqa)
    if op in ("moe_route", "moe_combine", "moe_block"):
        return build_moe(op, spec, dev, t)
    if op in ("pad", "pad_backward"):
        return build_pad(op, spec, dev, t)
    if op in ("conv", "conv_backward"):
        return build_conv(op, spec, dev, t)
    if op in ("dropout", "batch_norm", "group_norm", "normalize", "upsample", "upsample_backward"):
        return build_vision(op, spec, dev, t)
    if op == "linalg":
        return build_linalg(spec, dev, t)
    if op == "bincount":
        n, bins, hot = spec["n"], spec["bins"], spec["hot"]
        rot = rotations(dev, n * 8)
        xs = []
        for _ in range(rot):
            x = torch.where(torch.rand(n, device=dev) < hot, 0, torch.randint(0, bins, (n,), device=dev))
            x[0] = bins - 1
            xs.append(x)
        return lambda i: torch.bincount(xs[i % rot])
    if op == "mse_loss":
        shape = spec["shape"]
        rot = rotations(dev, 4 * math.prod(shape))
        xs = [torch.rand(*shape, device=dev).to(t) for _ in range(rot)]
        ys = [torch.rand(*shape, device=dev).to(t) for _ in range(rot)]
        return lambda i: F.mse_loss(xs[i % rot], ys[i % rot])
    if op == "cross_entropy":
        rows, classes = spec["shape"]
        rot = rotations(dev, 4 * rows * classes)
        xs = [torch.rand(rows, classes, device=dev).to(t) for _ in range(rot)]
        tgt = torch.tensor([(i * 7919) % classes for i in range(rows)], device=dev)
        return lambda i: F.cross_entropy(xs[i % rot], tgt)
    if op == "var_mean":
        shape, dims = spec["shape"], spec["dims"]
        rot = rotations(dev, math.prod(shape) * torch.empty(0, dtype=t).element_size())
        xs = [torch.rand(*shape, device=dev).to(t) for _ in range(rot)]
        return lambda i: torch.var_mean(xs[i % rot], dim=dims)
    shape = spec["shape"]
    numel = math.prod(shape)
    rot = rotations(dev, numel * 4)
    xs = [torch.randn(*shape, device=dev, dtype=t) * 3 for _ in range(rot)]
    if op == "softmax":
        return lambda i: torch.softmax(xs[i % rot], -1)
    if op == "log_softmax":
        return lambda i: torch.log_softmax(xs[i % rot], -1)
    if op == "topk8":
        return lambda i: torch.topk(xs[i % rot], 8, -1)
    if op.startswith("sample"):
        # What a PyTorch decode loop does (HF's sampling processors): greedy argmax, or
        # temperature, top-k, top-p (sorted cumulative mass) and one multinomial draw.
        if op == "sample_greedy":
            return lambda i: torch.argmax(xs[i % rot], -1)

        def sample(i):
            logits = xs[i % rot] / 0.7
            v, idx = torch.topk(logits, 50, -1)
            probs = torch.softmax(v, -1)
            cum = torch.cumsum(probs, -1)
            probs = probs.masked_fill(cum - probs >= 0.9, 0)
            return idx.gather(-1, torch.multinomial(probs, 1))
        return sample
    cols = shape[-1]
    w = torch.randn(cols, device=dev, dtype=t)
    if op == "rms_norm":
        return lambda i: F.rms_norm(xs[i % rot], (cols,), w, 1e-6)
    if op == "add_rms_norm":
        def add_norm(i):
            h = xs[i % rot] + xs[(i + 1) % rot]
            return F.rms_norm(h, (cols,), w, 1e-6), h
        return add_norm
    if op == "silu_mul":
        half = cols // 2
        return lambda i: F.silu(xs[i % rot][..., :half]) * xs[i % rot][..., half:]
    if op == "rope":
        # Hugging Face's apply_rotary_pos_emb with cos/sin computed once (shared by all layers).
        seq, hd = shape[1], shape[-1]
        inv_freq = 1.0 / (1e6 ** (torch.arange(0, hd, 2, dtype=torch.int64, device=dev).float() / hd))
        pos = torch.arange(seq, device=dev).float() + 1000
        emb = torch.cat((pos[:, None] * inv_freq[None, :],) * 2, dim=-1)
        cos, sin = emb.cos().to(t)[None, :, None, :], emb.sin().to(t)[None, :, None, :]
        return lambda i: xs[i % rot] * cos + rotate_hf_half(xs[i % rot]) * sin
    raise ValueError(f"unknown op {op}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("anvil_json")
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--deterministic", action="store_true",
                    help="torch.backends.cudnn.deterministic (anvil's convolutions always are)")
    args = ap.parse_args()
    with open(args.anvil_json) as f:
        run = json.load(f)
    dev = torch.device(run["device"])
    cuda = dev.type == "cuda"
    # anvil never computes float32 in TF32; PyTorch's cuDNN convolutions do by default.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = args.deterministic
    if not cuda:
        torch.set_num_threads(run.get("threads", torch.get_num_threads()))
    where = torch.cuda.get_device_name(dev) if cuda else f"cpu, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__} on {where}; anvil numbers from {args.anvil_json}")
    print(f"{'case':<52}{'anvil us':>10}{'torch us':>10}{'speed-up':>9}{'torch eager':>12}")
    rows, groups = [], {}
    for c in run["cases"]:
        if args.filter not in c["name"]:
            continue
        try:
            fn = build(c["spec"], dev)
            t_eager = eager_us(fn, cuda, 50 if cuda else 15)
            t_kernel = t_eager
            if cuda:
                try:
                    t_kernel = graph_us(fn)
                except RuntimeError:  # a host sync inside (e.g. bincount's output size)
                    torch.cuda.synchronize()
                    fn.note = (getattr(fn, "note", "") + "; " if getattr(fn, "note", "") else "") + \
                        "torch: not capturable in a CUDA graph (host sync), eager time"
        except Exception as e:  # an op this PyTorch build lacks: say so, go on
            print(f"{c['name']:<52}  torch failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}", flush=True)
            continue
        a_kernel = c["graph_us"] if cuda and c["graph_us"] > 0 else c["eager_us"]  # 0: not capturable
        speedup = t_kernel / a_kernel
        extra = ""
        if c["spec"].get("flops"):  # compute-bound cases: TFLOP/s of both
            f = c["spec"]["flops"]
            extra += f"  anvil {f / a_kernel * 1e-6:.0f} / torch {f / t_kernel * 1e-6:.0f} TFLOP/s"
        if getattr(fn, "note", ""):
            extra += f"  ({fn.note})"
        print(f"{c['name']:<52}{a_kernel:>10.2f}{t_kernel:>10.2f}{speedup:>9.2f}{t_eager:>12.2f}{extra}", flush=True)
        rows.append({"name": c["name"], "anvil_us": a_kernel, "torch_us": t_kernel, "torch_eager_us": t_eager,
                     "speedup": speedup})
        if c.get("group"):
            groups.setdefault(c["group"], []).append(speedup)
        del fn
        if cuda:
            torch.cuda.empty_cache()
    for g, v in groups.items():
        print(f"\n{g}: {len(v)} cases, geometric-mean speed-up over torch {math.exp(sum(map(math.log, v)) / len(v)):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": str(dev), "cases": rows}, f, indent=2)


if __name__ == "__main__":
    main()
