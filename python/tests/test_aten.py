"""anvil.ops.aten: the native forms of the training ops against NumPy, and every backward function
against central finite differences of anvil's own float64 forward (the loss sum(f(x) * g))."""
import numpy as np
import pytest

import anvil
import anvil.nn.functional as F
from anvil.ops import aten
from conftest import devices


def t(a):
    return anvil.tensor(np.asarray(a))


def fd(loss, x, h=1e-6):
    """d loss(x) / dx by central differences; x is a float64 array loss reads (and this perturbs)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        v = x[i]
        x[i] = v + h
        up = loss(x)
        x[i] = v - h
        down = loss(x)
        x[i] = v
        g[i] = (up - down) / (2 * h)
    return g


def check_grad(f, g, args, grads, tol=1e-6):
    """For each i, grads[i] (an anvil tensor or None to skip) is d sum(f(*args) * g) / d args[i]."""
    for i, want in enumerate(grads):
        if want is None:
            continue

        def loss(x, i=i):
            a = list(args)
            a[i] = x
            return float((f(*a) * g).sum())

        num = fd(loss, args[i].copy())
        np.testing.assert_allclose(want.numpy(), num, rtol=tol, atol=tol * max(1.0, np.abs(num).max()))


def test_native_layer_norm_and_backward(rng):
    x, w, b = rng.standard_normal((2, 3, 4)), rng.standard_normal(4), rng.standard_normal(4)
    out, mean, rstd = aten.native_layer_norm(t(x), [4], t(w), t(b), 1e-5)
    m, r = x.mean(-1, keepdims=True), 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), (x - m) * r * w + b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mean.numpy(), m, rtol=1e-12)
    np.testing.assert_allclose(rstd.numpy(), r, rtol=1e-12)
    assert anvil.native_layer_norm is aten.native_layer_norm
    g = rng.standard_normal(x.shape)
    gx, gw, gb = aten.native_layer_norm_backward(t(g), t(x), [4], mean, rstd, t(w), t(b), [True, True, True])
    check_grad(lambda x, w, b: aten.native_layer_norm(t(x), [4], t(w), t(b), 1e-5)[0].numpy(), g, [x, w, b],
               [gx, gw, gb])
    only_x = aten.native_layer_norm_backward(t(g), t(x), [4], mean, rstd, t(w), t(b), [True, False, False])
    assert only_x[1] is None and only_x[2] is None
    np.testing.assert_array_equal(only_x[0].numpy(), gx.numpy())


def test_native_group_norm_and_backward(rng):
    n, c, hw, groups = 2, 4, 3, 2
    x, w, b = rng.standard_normal((n, c, hw)), rng.standard_normal(c), rng.standard_normal(c)
    out, mean, rstd = aten.native_group_norm(t(x), t(w), t(b), n, c, hw, groups, 1e-5)
    xg = x.reshape(n, groups, -1)
    ref = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(out.numpy(), ref * w[:, None] + b[:, None], rtol=1e-12, atol=1e-12)
    assert mean.shape == (n, groups) and rstd.shape == (n, groups)
    g = rng.standard_normal(x.shape)
    grads = aten.native_group_norm_backward(t(g), t(x), mean, rstd, t(w), n, c, hw, groups, [True, True, True])
    check_grad(lambda x, w, b: aten.native_group_norm(t(x), t(w), t(b), n, c, hw, groups, 1e-5)[0].numpy(), g,
               [x, w, b], grads)


def test_native_batch_norm_training_and_backward(rng):
    x, w, b = rng.standard_normal((3, 2, 4)), rng.standard_normal(2), rng.standard_normal(2)
    rm, rv = anvil.zeros(2, dtype=anvil.float64), anvil.ones(2, dtype=anvil.float64)
    out, save_mean, save_invstd = aten.native_batch_norm(t(x), t(w), t(b), rm, rv, True, 0.1, 1e-5)
    mu, var = x.mean((0, 2)), x.var((0, 2))
    ref = (x - mu[:, None]) / np.sqrt(var[:, None] + 1e-5) * w[:, None] + b[:, None]
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rm.numpy(), 0.1 * mu, rtol=1e-12)  # the running statistics, updated in place
    np.testing.assert_allclose(rv.numpy(), 0.9 + 0.1 * x.var((0, 2), ddof=1), rtol=1e-12)
    g = rng.standard_normal(x.shape)
    grads = aten.native_batch_norm_backward(t(g), t(x), t(w), None, None, save_mean, save_invstd, True, 1e-5,
                                            [True, True, True])
    check_grad(lambda x, w, b: aten.native_batch_norm(t(x), t(w), t(b), None, None, True, 0.1, 1e-5)[0].numpy(), g,
               [x, w, b], grads)


def test_rms_norm_backward(rng):
    x, w = rng.standard_normal((3, 5)), rng.standard_normal(5)
    g = rng.standard_normal(x.shape)
    gx, gw = aten.rms_norm_backward(t(g), t(x), [5], t(w), 1e-6)
    check_grad(lambda x, w: F.rms_norm(t(x), [5], t(w), 1e-6).numpy(), g, [x, w], [gx, gw])
    gx_only = aten.rms_norm_backward(t(g), t(x), [5], t(w), 1e-6, output_mask=[True, False])
    assert gx_only[1] is None


def test_native_dropout_and_backward(rng):
    x = rng.standard_normal((64, 64)) + 5  # no zeros: the mask shows in the output
    out, mask = aten.native_dropout(t(x), 0.5, True)
    assert mask.dtype == anvil.bool
    m = mask.numpy()
    assert 0.4 < m.mean() < 0.6
    np.testing.assert_array_equal(out.numpy(), np.where(m, x * 2, 0))
    g = rng.standard_normal(x.shape)
    np.testing.assert_array_equal(aten.native_dropout_backward(t(g), mask, 2.0).numpy(), np.where(m, g * 2, 0))
    same, keep = aten.native_dropout(t(x), 0.5, False)  # not training: the input, all kept
    np.testing.assert_array_equal(same.numpy(), x)
    assert keep.numpy().all()


@pytest.mark.parametrize("transposed", [False, True])
def test_convolution_and_backward(rng, transposed):
    if transposed:  # weight (in, out / groups, k, k); stride 2 with an output padding
        x, w, b = rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((2, 3, 2, 2)), rng.standard_normal(3)
        stride, pad, out_pad = [2, 2], [0, 0], [1, 1]
        want = F.conv_transpose2d(t(x), t(w), t(b), stride=2, output_padding=1)
    else:
        x, w, b = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
        stride, pad, out_pad = [1, 1], [1, 1], [0, 0]
        want = F.conv2d(t(x), t(w), t(b), padding=1)

    def conv(x, w, b):
        return aten.convolution(t(x), t(w), t(b), stride, pad, [1, 1], transposed, out_pad, 1)

    y = conv(x, w, b)
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    assert anvil.convolution is aten.convolution
    g = rng.standard_normal(y.shape)
    grads = aten.convolution_backward(t(g), t(x), t(w), [3], stride, pad, [1, 1], transposed, out_pad, 1,
                                      [True, True, True])
    check_grad(lambda x, w, b: conv(x, w, b).numpy(), g, [x, w, b], grads)
    assert aten.convolution_backward(t(g), t(x), t(w), None, stride, pad, [1, 1], transposed, out_pad, 1,
                                     [False, True, False])[0] is None


def test_upsample_and_backward(rng):
    x = rng.standard_normal((1, 2, 3, 4))
    y = aten.upsample(t(x), [5, 7], "bilinear", align_corners=True)
    np.testing.assert_allclose(y.numpy(), F.interpolate(t(x), size=(5, 7), mode="bilinear", align_corners=True).numpy(),
                               rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape)
    gx = aten.upsample_backward(t(g), [5, 7], [1, 2, 3, 4], "bilinear", align_corners=True)
    check_grad(lambda x: aten.upsample(t(x), [5, 7], "bilinear", align_corners=True).numpy(), g, [x], [gx])
    gn = aten.upsample_backward(t(g), [5, 7], [1, 2, 3, 4], "nearest")
    check_grad(lambda x: aten.upsample(t(x), [5, 7], "nearest").numpy(), g, [x], [gn])


@pytest.mark.parametrize("name,np_mode,pad", [
    ("reflection_pad1d", "reflect", [2, 1]), ("reflection_pad2d", "reflect", [1, 2, 2, 1]),
    ("reflection_pad3d", "reflect", [1, 0, 0, 1, 1, 1]), ("replication_pad1d", "edge", [3, 1]),
    ("replication_pad2d", "edge", [0, 2, 3, 1]), ("replication_pad3d", "edge", [2, 1, 0, 1, 1, 0])])
def test_pads_and_backward(rng, name, np_mode, pad):
    spatial = len(pad) // 2
    x = rng.standard_normal((1, 2) + (3,) * spatial)
    y = getattr(aten, name)(t(x), pad)
    widths = [(0, 0), (0, 0)] + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(spatial))]
    np.testing.assert_array_equal(y.numpy(), np.pad(x, widths, mode=np_mode))
    g = rng.standard_normal(y.shape)
    gx = getattr(aten, name + "_backward")(t(g), t(x), pad)
    check_grad(lambda x: getattr(aten, name)(t(x), pad).numpy(), g, [x], [gx])


def test_constant_and_circular_pads_and_backward(rng):
    x = rng.standard_normal((2, 3, 4))
    y = aten.constant_pad_nd(t(x), [1, -1, 2, 0], 1.5)  # a negative pad crops
    np.testing.assert_array_equal(y.numpy(), np.pad(x[:, :, :-1], [(0, 0), (2, 0), (1, 0)], constant_values=1.5))
    g = rng.standard_normal(y.shape)
    check_grad(lambda x: aten.constant_pad_nd(t(x), [1, -1, 2, 0], 1.5).numpy(), g, [x],
               [aten.constant_pad_nd_backward(t(g), [1, -1, 2, 0])])
    c = aten._pad_circular(t(x), [2, 1])
    np.testing.assert_array_equal(c.numpy(), np.pad(x, [(0, 0), (0, 0), (2, 1)], mode="wrap"))
    gc = rng.standard_normal(c.shape)
    check_grad(lambda x: aten._pad_circular(t(x), [2, 1]).numpy(), gc, [x], [aten.pad_circular_backward(t(gc), [2, 1])])
    with pytest.raises(TypeError, match=r"\[constant_pad_nd\] value must be a number"):
        aten.constant_pad_nd(t(x), [1, 1], "a")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none", 0, 1, 2])
def test_loss_backwards(rng, reduction):
    name = {0: "none", 1: "mean", 2: "sum"}.get(reduction, reduction)
    x, y = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    g = rng.standard_normal((4, 5)) if name == "none" else np.array(rng.standard_normal())
    for fwd, bwd in ((F.mse_loss, aten.mse_loss_backward), (F.l1_loss, aten.l1_loss_backward)):
        got = bwd(t(g), t(x), t(y), reduction)
        check_grad(lambda x: fwd(t(x), t(y), reduction=name).numpy(), g, [x], [got])
    logits, target, weight = rng.standard_normal((4, 5)), np.array([0, 3, 1, 4]), rng.random(5) + 0.5
    g = rng.standard_normal(4) if name == "none" else np.array(rng.standard_normal())
    ce = aten.cross_entropy_backward(t(g), t(logits), t(target), t(weight), reduction, -100, 0.1)
    check_grad(lambda z: F.cross_entropy(t(z), t(target), t(weight), reduction=name, label_smoothing=0.1).numpy(), g,
               [logits], [ce])
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = aten.nll_loss_backward(t(g), t(logp), t(target), t(weight), reduction, 3)  # target 3 ignored
    check_grad(lambda z: F.nll_loss(t(z), t(target), t(weight), ignore_index=3, reduction=name).numpy(), g, [logp],
               [nll])


def test_loss_backward_reduction_errors(rng):
    x = t(rng.standard_normal(3))
    with pytest.raises(ValueError, match=r"\[mse_loss_backward\] reduction 3 is not"):
        aten.mse_loss_backward(t(1.0), x, x, 3)
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        F.l1_loss(x, x, reduction="avg")
    with pytest.raises(TypeError, match="reduction must be a str or an int"):
        aten.l1_loss_backward(t(1.0), x, x, 1.0)
    with pytest.raises(TypeError, match=r"\[mse_loss\] reduction must be a str, not int"):  # F's take names only
        F.mse_loss(x, x, reduction=1)


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def test_linalg_backwards(rng):
    n = 4
    a, b = rng.standard_normal((n, n)) + n * np.eye(n), rng.standard_normal((n, 2))
    ga, gb = rng.standard_normal((n, n)), rng.standard_normal((n, 2))
    det = anvil.linalg.det(t(a))
    check_grad(lambda a: anvil.linalg.det(t(a)).numpy(), np.array(0.7), [a],
               [anvil.ops.aten.det_backward(t(0.7), t(a), det)])
    check_grad(lambda a: anvil.linalg.inv(t(a)).numpy(), ga, [a],
               [aten.inv_backward(t(ga), anvil.linalg.inv(t(a)))])
    X = anvil.linalg.solve(t(a), t(b))
    check_grad(lambda a, b: anvil.linalg.solve(t(a), t(b)).numpy(), gb, [a, b], aten.solve_backward(t(gb), t(a), t(b), X))
    LU, piv = anvil.linalg.lu_factor(t(a))
    lu = LU.numpy()
    Xl = anvil.linalg.lu_solve(LU, piv, t(b))
    check_grad(lambda lu, b: anvil.linalg.lu_solve(t(lu), piv, t(b)).numpy(), gb, [lu, b],
               aten.lu_solve_backward(t(gb), LU, piv, t(b), Xl))
    u = np.triu(a)
    Xt = anvil.linalg.solve_triangular(t(u), t(b), upper=True)
    check_grad(lambda u, b: anvil.linalg.solve_triangular(t(np.triu(u)), t(b), upper=True).numpy(), gb, [u, b],
               aten.solve_triangular_backward(t(gb), t(u), t(b), Xt, upper=True))
    s = spd(rng, n)
    L = anvil.linalg.cholesky(t(s))
    gl = rng.standard_normal((n, n))
    # The gradient is symmetric, so it is the one of the symmetrised input's.
    check_grad(lambda s: anvil.linalg.cholesky(t((s + s.T) / 2)).numpy(), gl, [s], [aten.cholesky_backward(t(gl), L)])
    m = rng.standard_normal((5, 3))
    Q, R = anvil.linalg.qr(t(m))
    gq, gr = rng.standard_normal((5, 3)), rng.standard_normal((3, 3))
    got = aten.qr_backward(t(gq), t(gr), Q, R)
    check_grad(lambda m: sum((v.numpy() * g).sum() for v, g in zip(anvil.linalg.qr(t(m)), (gq, gr))), np.array(1.0),
               [m], [got])
    U, S, Vh = anvil.linalg.svd(t(m), full_matrices=False)
    gs = rng.standard_normal(3)
    check_grad(lambda m: anvil.linalg.svdvals(t(m)).numpy(), gs, [m], [aten.svd_backward(None, t(gs), None, U, S, Vh)])


@pytest.mark.parametrize("device", devices())
def test_backwards_on_the_device_match_the_cpu(device, rng):
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    want = aten.convolution_backward(t(g), t(x), t(w), [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    got = aten.convolution_backward(*(anvil.tensor(v, device=device) for v in (g, x, w)), [4], [1, 1], [1, 1],
                                    [1, 1], False, [0, 0], 1)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.cpu().numpy(), b.numpy(), rtol=1e-4, atol=1e-4 * np.abs(b.numpy()).max())
    gn = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    _, mean, rstd = aten.native_group_norm(t(x), None, None, 2, 8, 36, 4, 1e-5)
    want = aten.native_group_norm_backward(t(gn), t(x), mean, rstd, None, 2, 8, 36, 4, [True, False, False])[0]
    X = anvil.tensor(x, device=device)
    _, mean_d, rstd_d = aten.native_group_norm(X, None, None, 2, 8, 36, 4, 1e-5)
    got = aten.native_group_norm_backward(anvil.tensor(gn, device=device), X, mean_d, rstd_d, None, 2, 8, 36, 4,
                                          [True, False, False])[0]
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
