"""anvil.nn.functional against NumPy references (float64 loops where NumPy has no such op)."""
import math

import numpy as np
import pytest

import anvil
import anvil.nn.functional as F
from conftest import devices

EPS32 = np.finfo(np.float32).eps


def close(got, want, tol=64 * EPS32):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(got.cpu().double().numpy(), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("device", devices())
def test_activations_norms_linear(device, rng):
    x = rng.standard_normal((4, 6, 8)).astype(np.float32)
    w = rng.standard_normal((5, 8)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    X, W, B = (anvil.tensor(v, device=device) for v in (x, w, b))
    xd = x.astype(np.float64)
    close(F.linear(X, W, B), xd @ w.T.astype(np.float64) + b)
    close(F.linear(X, W), xd @ w.T.astype(np.float64))
    close(F.softmax(X, -1), softmax_ref(xd, -1))
    close(F.log_softmax(X, 1), np.log(softmax_ref(xd, 1)))
    close(F.silu(X), xd / (1 + np.exp(-xd)))
    close(F.gelu(X), 0.5 * xd * (1 + np.vectorize(math.erf)(xd / math.sqrt(2))))
    close(F.gelu(X, approximate="tanh"), 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3))))
    g = rng.standard_normal(8).astype(np.float32)
    close(F.rms_norm(X, (8,), anvil.tensor(g, device=device), eps=1e-6),
          xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-6) * g)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    close(F.layer_norm(X, [8], eps=1e-5), (xd - mu) / np.sqrt(var + 1e-5))
    xg = xd.reshape(4, 2, 3, 8)
    gm, gv = xg.mean((2, 3), keepdims=True), xg.var((2, 3), keepdims=True)
    close(F.group_norm(X, 2), ((xg - gm) / np.sqrt(gv + 1e-5)).reshape(4, 6, 8))
    close(F.normalize(X, dim=-1), xd / np.linalg.norm(xd, axis=-1, keepdims=True))
    rm, rv = anvil.zeros(6, device=device), anvil.ones(6, device=device)
    close(F.batch_norm(X, rm, rv), xd / np.sqrt(1 + 1e-5))


@pytest.mark.parametrize("device", devices())
def test_attention(device, rng):
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    Q, K, V = (anvil.tensor(a, device=device) for a in (q, k, v))
    kr, vr = np.repeat(k, 2, axis=1).astype(np.float64), np.repeat(v, 2, axis=1).astype(np.float64)
    s = q.astype(np.float64) @ kr.transpose(0, 1, 3, 2) / math.sqrt(8)
    close(F.scaled_dot_product_attention(Q, K, V, enable_gqa=True), softmax_ref(s, -1) @ vr)
    causal = np.where(np.tril(np.ones((5, 7), dtype=bool)), s, -np.inf)
    close(F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True), softmax_ref(causal, -1) @ vr)


def test_pad_interpolate_dropout_losses(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    X = anvil.tensor(x)
    close(F.pad(X, (1, 2)), np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 2))))
    close(F.pad(X, (1, 1, 2, 0), value=3.5), np.pad(x, ((0, 0), (0, 0), (2, 0), (1, 1)), constant_values=3.5))
    close(F.pad(X, (2, 1, 1, 2), mode="reflect"), np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect"))
    close(F.pad(X[0], (2, 1), mode="replicate"), np.pad(x[0], ((0, 0), (0, 0), (2, 1)), mode="edge"))
    close(F.pad(X, (2, 1, 0, 1), mode="circular"), np.pad(x, ((0, 0), (0, 0), (0, 1), (2, 1)), mode="wrap"))
    with pytest.raises(ValueError, match="Padding size 2"):  # torch's rule: 4-d inputs take 4 pads
        F.pad(X, (2, 1), mode="replicate")
    close(F.interpolate(X, scale_factor=2), x.repeat(2, axis=2).repeat(2, axis=3))
    close(F.interpolate(X, size=(8, 10), mode="nearest"), x.repeat(2, axis=2).repeat(2, axis=3))
    up = F.interpolate(X, scale_factor=2, mode="bilinear", align_corners=True)
    assert up.shape == (2, 3, 8, 10)
    close(up[..., 0, 0], x[..., 0, 0])  # align_corners: the corners are the input's
    close(up[..., -1, -1], x[..., -1, -1])
    d = F.dropout(anvil.ones(10000), p=0.25)
    kept = d.numpy() != 0
    assert abs(kept.mean() - 0.75) < 0.03 and np.allclose(d.numpy()[kept], 1 / 0.75)
    close(F.dropout(X, p=0.5, training=False), x)
    y = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    Y = anvil.tensor(y)
    close(F.mse_loss(X, Y), ((x.astype(np.float64) - y) ** 2).mean())
    close(F.mse_loss(X, Y, reduction="sum"), ((x.astype(np.float64) - y) ** 2).sum(), tol=1e-5)
    close(F.l1_loss(X, Y, reduction="none"), np.abs(x.astype(np.float64) - y))
    logits = rng.standard_normal((6, 4)).astype(np.float32)
    target = np.array([0, 3, 1, 2, 3, 0])
    lp = np.log(softmax_ref(logits.astype(np.float64), 1))
    close(F.cross_entropy(anvil.tensor(logits), anvil.tensor(target)), -lp[np.arange(6), target].mean())
    close(F.nll_loss(anvil.tensor(lp.astype(np.float32)), anvil.tensor(target), reduction="sum"),
          -lp[np.arange(6), target].sum(), tol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(X, Y, reduction="avg")


def conv2d_ref(x, w, b, stride, pad):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w.astype(np.float64))
    return out + b[None, :, None, None]


@pytest.mark.parametrize("device", devices())
def test_convolutions(device, rng):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    X, W, B = (anvil.tensor(v, device=device) for v in (x, w, b))
    close(F.conv2d(X, W, B, stride=2, padding=1), conv2d_ref(x, w, b, 2, 1), tol=1e-5)
    close(F.conv2d(X, W, B, padding="same"), conv2d_ref(x, w, b, 1, 1), tol=1e-5)
    assert F.conv2d(X, W, padding="valid").shape == (2, 4, 7, 6)
    x1 = rng.standard_normal((1, 2, 10)).astype(np.float32)
    w1 = rng.standard_normal((3, 2, 4)).astype(np.float32)
    want1 = np.stack([sum(np.correlate(x1[0, c], w1[o, c], "valid") for c in range(2)) for o in range(3)])[None]
    close(F.conv1d(anvil.tensor(x1, device=device), anvil.tensor(w1, device=device)), want1, tol=1e-5)
    # conv_transpose is conv's adjoint: <conv(x), y> == <x, conv_transpose(y)>
    y = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
    lhs = (conv2d_ref(x, w, np.zeros(4), 2, 1) * y).sum()
    xt = F.conv_transpose2d(anvil.tensor(y, device=device), W, stride=2, padding=1, output_padding=(0, 1))
    assert xt.shape == (2, 3, 9, 8)
    np.testing.assert_allclose((x.astype(np.float64) * xt.cpu().double().numpy()).sum(), lhs, rtol=1e-4)


@pytest.mark.parametrize("device", devices())
def test_fp8_scaled_mm_and_grouped_mm(device, rng):
    # The release's FP8 sample: quantise row-wise, then F.scaled_mm with its ScalingType.
    a = anvil.tensor(rng.standard_normal((16, 64)).astype(np.float32), device=device)
    b = anvil.tensor(rng.standard_normal((32, 64)).astype(np.float32), device=device)
    qa, sa = F.quantize_fp8(a, F.ScalingType.RowWise)
    qb, sb = F.quantize_fp8(b, F.ScalingType.RowWise)
    assert qa.dtype == anvil.float8_e4m3fn and sa.shape == (16, 1)
    out = F.scaled_mm(qa, qb.t(), sa, F.ScalingType.RowWise, sb.t(), F.ScalingType.RowWise,
                      output_dtype=anvil.float32)
    da, db = (qa.float() * sa).double().cpu().numpy(), (qb.float() * sb).double().cpu().numpy()
    # Hopper's FP8 tensor cores add in a ~14-bit accumulator (cuBLASLt, as torch's scaled_mm; the C++
    # tests' bound): within 2^-10 of sum |a b| of the dequantised operands.
    assert (np.abs(out.cpu().double().numpy() - da @ db.T) <= 2.0 ** -10 * (np.abs(da) @ np.abs(db).T) + 1e-6).all()
    an, bn = a.cpu().double().numpy(), b.cpu().double().numpy()
    # each e4m3 rounding is within 2^-4 relative, so each product within (1 + 2^-4)^2 - 1
    assert (np.abs(out.cpu().numpy() - an @ bn.T) <= 0.13 * np.abs(an) @ np.abs(bn).T).all()
    # grouped_mm with offsets on the device: rows of a by group, one weight matrix per group.
    x = rng.standard_normal((10, 8)).astype(np.float32)
    wg = rng.standard_normal((3, 8, 4)).astype(np.float32)
    offs = np.array([3, 3, 10], dtype=np.int32)
    got = F.grouped_mm(anvil.tensor(x, device=device), anvil.tensor(wg, device=device),
                       offs=anvil.tensor(offs, device=device))
    want = np.concatenate([x[:3] @ wg[0], x[3:10] @ wg[2]])
    close(got, want, tol=1e-5)


def test_special_laguerre_against_the_recurrence():
    x = np.linspace(-2, 5, 11)
    want = [np.ones_like(x), 1 - x]
    for k in range(1, 5):  # (k + 1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1}
        want.append(((2 * k + 1 - x) * want[k] - k * want[k - 1]) / (k + 1))
    X = anvil.tensor(x, dtype=anvil.float64)
    for n in range(6):
        np.testing.assert_allclose(anvil.special.laguerre_polynomial_l(X, n).numpy(), want[n], rtol=1e-12, atol=1e-12)
    got = anvil.special.laguerre_polynomial_l(2.0, anvil.arange(4, dtype=anvil.float64)).numpy()
    np.testing.assert_allclose(got, [1.0, -1.0, -1.0, -1.0 / 3.0], rtol=1e-12)  # L_n(2), n = 0..3
    with pytest.raises(TypeError):
        anvil.special.laguerre_polynomial_l(2.0, 3)
