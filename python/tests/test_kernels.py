"""anvil.ops.anvil: the LLM kernels with no torch name, against float64 NumPy compositions of what
each is documented to compute (include/anvil/nn.h), on the CPU and on CUDA when there is a GPU."""
import numpy as np
import pytest

import anvil
from anvil.ops import anvil as K
from conftest import devices

EPS32 = np.finfo(np.float32).eps
EPS_BF16 = 2.0 ** -8


def close(got, want, tol):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(got.cpu().double().numpy(), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def silu(x):
    return x / (1 + np.exp(-x))


def rms(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def rope_ref(x, pos, inv_freq):
    half = inv_freq.size
    ang = pos[..., None].astype(np.float64) * inv_freq
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half], x[..., half:2 * half]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[..., 2 * half:]], -1)


def bf16(a):
    """a rounded to bfloat16, as float64 (the inputs the kernels see)."""
    return anvil.tensor(a).bfloat16().double().numpy()


@pytest.mark.parametrize("device", devices())
def test_silu_mul_rope_and_norms(device, rng):
    g, u = rng.standard_normal((3, 16)).astype(np.float32), rng.standard_normal((3, 16)).astype(np.float32)
    close(K.silu_mul(anvil.tensor(g, device=device), anvil.tensor(u, device=device)), silu(g.astype(np.float64)) * u,
          8 * EPS32)
    inv = K.rope_inv_freq(6, 10000.0, device=device)
    assert inv.dtype == anvil.float32 and inv.device.type == device
    close(inv, 1 / 10000.0 ** (np.arange(0, 6, 2) / 6), 2 * EPS32)
    x = rng.standard_normal((1, 3, 2, 8)).astype(np.float32)  # [b, s, h, d]: rotary 6 of 8 columns
    pos = np.array([[[4], [9], [200]]])  # [b, s, 1]
    got = K.rope(anvil.tensor(x, device=device), anvil.tensor(pos, device=device), inv)
    close(got, rope_ref(x.astype(np.float64), pos, inv.cpu().double().numpy()), 64 * EPS32)
    a, r, w = (rng.standard_normal(s).astype(np.float32) for s in ((2, 32), (2, 32), 32))
    A, R, W = (anvil.tensor(v, device=device) for v in (a, r, w))
    normed, h = K.add_rms_norm(A, R, [32], W, 1e-6)
    close(h, a.astype(np.float64) + r, EPS32)
    close(normed, rms(a.astype(np.float64) + r, w, 1e-6), 16 * EPS32)
    wp = rng.standard_normal((8, 32)).astype(np.float32)
    proj, h2 = K.add_rms_norm_linear(A, R, W, 1e-6, anvil.tensor(wp, device=device))
    close(proj, rms(a.astype(np.float64) + r, w, 1e-6) @ wp.T, 64 * EPS32)
    close(h2, a.astype(np.float64) + r, EPS32)
    assert K.add_rms_norm_linear_plan(A, R, W, 1e-6, anvil.tensor(wp, device=device)) == "composed"  # float32


@pytest.mark.parametrize("device", devices())
def test_scaled_linear_fp8(device, rng):
    x = rng.standard_normal((2, 64)).astype(np.float32)
    w8 = anvil.tensor(rng.standard_normal((16, 64)).astype(np.float32), device=device).to(anvil.float8_e4m3fn)
    scale = (rng.random(16) + 0.5).astype(np.float32)
    got = K.scaled_linear(anvil.tensor(x, device=device), w8, anvil.tensor(scale, device=device))
    w = w8.float().cpu().double().numpy() * scale[:, None]
    close(got, x.astype(np.float64) @ w.T, 64 * EPS32)


def routing_ref(logits, top_k, norm):
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
    wts = np.take_along_axis(p, ids, -1)
    if norm:
        wts = wts / wts.sum(-1, keepdims=True)
    return wts, ids


@pytest.mark.parametrize("device", devices())
def test_moe_route_experts_combine(device, rng):
    T, E, H, I, k = 5, 6, 16, 8, 2
    logits = rng.standard_normal((T, E)).astype(np.float32)
    r = K.moe_route(anvil.tensor(logits, device=device), k, True)
    wts, ids = routing_ref(logits.astype(np.float64), k, True)
    close(r.topk_weights, wts, 8 * EPS32)
    np.testing.assert_array_equal(r.topk_ids.cpu().numpy(), ids)
    pairs = sorted(((ids[t, s], t, s) for t in range(T) for s in range(k)))  # by expert, then token
    np.testing.assert_array_equal(r.offs.cpu().numpy(), np.cumsum(np.bincount(ids.ravel(), minlength=E)))
    np.testing.assert_array_equal(r.token_index.cpu().numpy(), [t for _, t, _ in pairs])
    pos = np.empty((T, k), dtype=np.int64)
    for row, (_, t, s) in enumerate(pairs):
        pos[t, s] = row
    np.testing.assert_array_equal(r.sorted_pos.cpu().numpy(), pos)

    hidden = rng.standard_normal((T, H)).astype(np.float32)
    rw = rng.standard_normal((E, H)).astype(np.float32)
    lg, r2 = K.moe_router(anvil.tensor(hidden, device=device), anvil.tensor(rw, device=device), k, False)
    close(lg, hidden.astype(np.float64) @ rw.T, 64 * EPS32)
    np.testing.assert_array_equal(r2.topk_ids.cpu().numpy(), routing_ref(lg.cpu().double().numpy(), k, False)[1])

    gate_up = (rng.standard_normal((E, 2 * I, H)) / 4).astype(np.float32)
    down = (rng.standard_normal((E, H, I)) / 4).astype(np.float32)
    out = K.moe_experts(anvil.tensor(hidden, device=device), r, anvil.tensor(gate_up, device=device),
                        anvil.tensor(down, device=device))
    want = np.zeros((T, H))
    for t in range(T):
        for s in range(k):
            e = ids[t, s]
            gu = gate_up[e].astype(np.float64) @ hidden[t]
            want[t] += wts[t, s] * (down[e] @ (silu(gu[:I]) * gu[I:]))
    close(out, want, 256 * EPS32)
    rows = rng.standard_normal((T * k, H)).astype(np.float32)
    comb = K.moe_combine(anvil.tensor(rows, device=device), r.topk_weights, r.sorted_pos)
    close(comb, np.einsum("ts,tsh->th", wts, rows[pos].astype(np.float64)), 16 * EPS32)


@pytest.mark.parametrize("device", devices())
def test_moe_bfloat16_decode_plans(device, rng):
    # One token in bfloat16: the fused kernels (one router kernel on both devices), equal to the
    # float64 composition of the rounded inputs.
    E, H, I, k = 8, 64, 32, 2
    hidden, rw = bf16(rng.standard_normal((1, H))), bf16(rng.standard_normal((E, H)) / 8)
    gate_up, down = bf16(rng.standard_normal((E, 2 * I, H)) / 8), bf16(rng.standard_normal((E, H, I)) / 8)
    Hd, RW, GU, D = (anvil.tensor(v, device=device).bfloat16() for v in (hidden, rw, gate_up, down))
    assert K.moe_router_plan(Hd, RW, k) == "fused"
    assert K.moe_router_plan(Hd.expand(2, H), RW, k) == "composed"  # two tokens
    logits, r = K.moe_router(Hd, RW, k, True)
    assert K.moe_experts_plan(Hd, r, GU, D) == "fused"
    out = K.moe_experts(Hd, r, GU, D)
    wts = r.topk_weights.cpu().double().numpy()
    want = np.zeros(H)
    for s, e in enumerate(r.topk_ids.cpu().numpy()[0]):
        gu = gate_up[e] @ hidden[0]
        want += wts[0, s] * (down[e] @ (silu(gu[:I]) * gu[I:]))
    close(out[0], want, 16 * EPS_BF16)


@pytest.mark.parametrize("device", devices())
def test_kv_cache_and_decode_attention(device, rng):
    B, Hq, Hk, S, D, L = 2, 4, 2, 16, 8, 1
    kc = anvil.zeros(B, Hk, S, D, device=device)
    vc = anvil.zeros(B, Hk, S, D, device=device)
    keys = rng.standard_normal((B, Hk, 5, D)).astype(np.float32)
    vals = rng.standard_normal((B, Hk, 5, D)).astype(np.float32)
    start = anvil.tensor(np.array([0, 3], dtype=np.int32), device=device)
    assert K.cache_write(kc, anvil.tensor(keys, device=device), start) is kc  # in place, as torch's _ ops
    K.cache_write(vc, anvil.tensor(vals, device=device), start)
    kn, vn = kc.cpu().numpy(), vc.cpu().numpy()
    np.testing.assert_array_equal(kn[0, :, :5], keys[0])
    np.testing.assert_array_equal(kn[1, :, 3:8], keys[1])
    assert not kn[1, :, :3].any() and not kn[0, :, 5:].any()
    lens = np.array([5, 8], dtype=np.int32)
    q = rng.standard_normal((B, Hq, L, D)).astype(np.float32)
    got = K.decode_attention(anvil.tensor(q, device=device), kc, vc, anvil.tensor(lens, device=device))
    want = np.zeros((B, Hq, L, D))
    for b in range(B):
        for h in range(Hq):
            kk, vv = kn[b, h // (Hq // Hk), :lens[b]].astype(np.float64), vn[b, h // (Hq // Hk), :lens[b]]
            sc = kk @ q[b, h, 0] / np.sqrt(D)
            p = np.exp(sc - sc.max())
            want[b, h, 0] = p @ vv / p.sum()
    close(got, want, 32 * EPS32)


@pytest.mark.parametrize("device", devices())
def test_qk_norm_rope_cache(device, rng):
    B, L, nh, nkv, D, S = 1, 3, 4, 2, 16, 8
    qkv = rng.standard_normal((B, L, (nh + 2 * nkv) * D)).astype(np.float32)
    qn, kn = (rng.standard_normal(D).astype(np.float32) for _ in range(2))
    inv = K.rope_inv_freq(D, 1e6, device=device)
    kc, vc = anvil.zeros(B, nkv, S, D, device=device), anvil.zeros(B, nkv, S, D, device=device)
    start = anvil.tensor(np.array([2], dtype=np.int32), device=device)
    q = K.qk_norm_rope_cache(anvil.tensor(qkv, device=device), nh, nkv, anvil.tensor(qn, device=device),
                             anvil.tensor(kn, device=device), 1e-6, inv, kc, vc, start)
    x = qkv.astype(np.float64).reshape(B, L, nh + 2 * nkv, D)
    pos = np.arange(2, 2 + L)[None, :, None]
    invf = inv.cpu().double().numpy()
    close(q, rope_ref(rms(x[:, :, :nh], qn, 1e-6), pos, invf).transpose(0, 2, 1, 3), 64 * EPS32)
    close(kc[:, :, 2:2 + L], rope_ref(rms(x[:, :, nh:nh + nkv], kn, 1e-6), pos, invf).transpose(0, 2, 1, 3),
          64 * EPS32)
    close(vc[:, :, 2:2 + L], x[:, :, nh + nkv:].transpose(0, 2, 1, 3), 0)
    assert not kc[:, :, :2].cpu().numpy().any()


def test_kernel_errors_name_the_op():
    with pytest.raises(ValueError, match=r"^\[silu_mul\]"):
        K.silu_mul(anvil.ones(3), anvil.ones(4))
    with pytest.raises(IndexError, match=r"^\[moe_route\] top_k must be in \[1, 4\], got 5"):
        K.moe_route(anvil.ones(2, 4), 5, True)
    with pytest.raises(TypeError, match=r"^\[moe_experts\] routing must be the MoeRouting .* tuple has no topk_weights"):
        K.moe_experts(anvil.ones(1, 8), (1, 2, 3, 4, 5), anvil.ones(2, 8, 8), anvil.ones(2, 8, 4))
