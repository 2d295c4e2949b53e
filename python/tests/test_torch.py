"""anvil beside PyTorch: each case is one function run twice with only the namespace changed
(anvil / torch, anvil.nn.functional / torch.nn.functional), on the same inputs on the same device;
anvil's results cross to torch through DLPack and are compared with torch's. Skipped where torch is
not installed; on the GPU machine this is the suite against its PyTorch on CUDA."""
import numpy as np
import pytest

import anvil
import anvil.nn.functional as AF
from conftest import devices

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

F32, BF16 = "float32", "bfloat16"


# name: (fn(lib, F, *inputs), input shapes (or arrays), dtypes)
CASES = {
    "add_broadcast": (lambda L, F, a, b: a + b * 2 - 1, [(4, 8), (8,)], [F32, BF16]),
    "div_pow": (lambda L, F, a, b: a / (b.abs() + 1) + a ** 2, [(5, 7), (5, 7)], [F32, BF16]),
    "unary": (lambda L, F, a: L.exp(a) + L.sqrt(a.abs()) + L.sigmoid(a) + L.tanh(a), [(3, 33)], [F32, BF16]),
    "sum_mean": (lambda L, F, a: (a.sum(dim=1), a.mean(dim=(0, 2), keepdim=True)), [(4, 5, 6)], [F32, BF16]),
    "amax_argmax": (lambda L, F, a: (a.amax(dim=-1), a.argmax(dim=0)), [(6, 9)], [F32]),
    "var_std": (lambda L, F, a: (L.var(a, dim=1, correction=0), L.std(a, dim=0)), [(7, 5)], [F32]),
    "topk": (lambda L, F, a: L.topk(a, 3, dim=-1), [(4, 10)], [F32]),
    "where_clamp": (lambda L, F, a, b: L.where(a > 0, a, b).clamp(-0.5, 0.5), [(6, 6), (6, 6)], [F32]),
    "matmul": (lambda L, F, a, b: a @ b, [(3, 64, 48), (48, 40)], [F32, BF16]),
    "linear": (lambda L, F, x, w, b: F.linear(x, w, b), [(2, 128), (96, 128), (96,)], [F32, BF16]),
    "softmax": (lambda L, F, a: (F.softmax(a, dim=-1), F.log_softmax(a, dim=0)), [(5, 257)], [F32, BF16]),
    "activations": (lambda L, F, a: (F.silu(a), F.gelu(a), F.gelu(a, approximate="tanh")), [(4, 64)], [F32, BF16]),
    "rms_layer_norm": (lambda L, F, x, w, b: (F.rms_norm(x, (64,), w, eps=1e-6), F.layer_norm(x, (64,), w, b)),
                       [(3, 64), (64,), (64,)], [F32, BF16]),
    "group_norm": (lambda L, F, x, w, b: F.group_norm(x, 4, w, b), [(2, 8, 5, 5), (8,), (8,)], [F32]),
    "sdpa_causal_gqa": (lambda L, F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                        [(1, 8, 16, 64), (1, 2, 16, 64), (1, 2, 16, 64)], [F32, BF16]),
    "pads": (lambda L, F, x: (F.pad(x, (1, 2, 2, 1), mode="reflect"), F.pad(x, (2, 0, 1, 3), mode="replicate"),
                              F.pad(x, (1, 1, 1, 1), mode="circular"), F.pad(x, (1, -1, 0, 2), value=0.5)),
             [(1, 2, 5, 6)], [F32]),
    "interpolate": (lambda L, F, x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                                     F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False),
                                     F.interpolate(x, size=(7, 9), mode="bicubic", align_corners=True)),
                    [(1, 3, 4, 5)], [F32]),
    "conv2d": (lambda L, F, x, w, b: (F.conv2d(x, w, b, padding=1), F.conv2d(x, w, None, stride=2, padding="valid")),
               [(2, 4, 9, 9), (6, 4, 3, 3), (6,)], [F32]),
    "conv_transpose2d": (lambda L, F, x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
                         [(1, 4, 5, 5), (4, 3, 3, 3)], [F32]),
    "conv3d": (lambda L, F, x, w: F.conv3d(x, w, padding=(1, 0, 1)), [(1, 2, 4, 5, 5), (3, 2, 3, 3, 3)], [F32]),
    "losses": (lambda L, F, x, y: (F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum")), [(4, 6), (4, 6)], [F32]),
    "linalg": (lambda L, F, a, b: (L.linalg.solve(a, b), L.linalg.det(a), L.linalg.inv(a), L.linalg.svdvals(a),
                                   L.linalg.qr(a).R.abs()), ["wellposed", (6, 3)], [F32]),
}


def inputs(spec, rng):
    if spec == "wellposed":
        return rng.standard_normal((6, 6)).astype(np.float32) + 6 * np.eye(6, dtype=np.float32)
    return rng.standard_normal(spec).astype(np.float32)


def flatten(r):
    return [x for v in r for x in flatten(v)] if isinstance(r, (tuple, list)) else [r]


def compare(got, want, dtype):
    g, w = flatten(got), flatten(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        a = torch.from_dlpack(a)  # anvil's result read by torch, no copy
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if not b.is_floating_point():
            assert torch.equal(a.cpu(), b.cpu())
            continue
        a, b = a.double().cpu(), b.double().cpu()
        tol = 2.0 ** -7 if dtype == BF16 else 2e-5
        scale = max(1.0, b.abs().max().item())
        assert (a - b).abs().max().item() <= tol * scale, f"max |anvil - torch| {(a - b).abs().max().item():.3g}"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(CASES))
def test_same_as_torch(name, device, rng):
    fn, specs, dtypes = CASES[name]
    xs = [inputs(s, rng) for s in specs]
    for dtype in dtypes:
        a_in = [anvil.tensor(x, device=device).to(getattr(anvil, dtype)) for x in xs]
        t_in = [torch.tensor(x, device=device).to(getattr(torch, dtype)) for x in xs]
        compare(fn(anvil, AF, *a_in), fn(torch, TF, *t_in), dtype)


@pytest.mark.parametrize("device", devices())
def test_aten_backwards_as_torch_ops_aten(device, rng):
    # Same names, same argument order: anvil.ops.aten.X(...) is torch.ops.aten.X(...).
    x, w, b, g = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4, 16), (16,), (16,), (3, 4, 16)))
    A = [anvil.tensor(v, device=device) for v in (x, w, b, g)]
    T = [torch.tensor(v, device=device) for v in (x, w, b, g)]
    fa = anvil.ops.aten.native_layer_norm(A[0], [16], A[1], A[2], 1e-5)
    ft = torch.ops.aten.native_layer_norm(T[0], [16], T[1], T[2], 1e-5)
    compare(fa, ft, F32)
    compare(anvil.ops.aten.native_layer_norm_backward(A[3], A[0], [16], fa[1], fa[2], A[1], A[2], [True] * 3),
            torch.ops.aten.native_layer_norm_backward(T[3], T[0], [16], ft[1], ft[2], T[1], T[2], [True] * 3), F32)
    xi, wi, gi = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 8, 8), (5, 3, 3, 3), (2, 5, 4, 4)))
    args = ([2, 2], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    compare(anvil.ops.aten.convolution_backward(*(anvil.tensor(v, device=device) for v in (gi, xi, wi)), [5], *args),
            torch.ops.aten.convolution_backward(*(torch.tensor(v, device=device) for v in (gi, xi, wi)), [5], *args), F32)
    # The rest of the shared names, each called with one argument list for both.
    xg, cw, cb, gg = (rng.standard_normal(s).astype(np.float32) for s in ((2, 6, 10), (6,), (6,), (2, 6, 10)))
    def shared_names(lib, mk):
        X, W, B, G = (mk(v) for v in (xg, cw, cb, gg))
        _, mean, rstd = lib.ops.aten.native_group_norm(X, W, B, 2, 6, 10, 3, 1e-5)
        gn = lib.ops.aten.native_group_norm_backward(G, X, mean, rstd, W, 2, 6, 10, 3, [True, True, True])
        _, sm, si = lib.ops.aten.native_batch_norm(X, W, B, None, None, True, 0.1, 1e-5)
        bn = lib.ops.aten.native_batch_norm_backward(G, X, W, None, None, sm, si, True, 1e-5, [True, True, True])
        mask = mk(np.arange(120).reshape(2, 6, 10) % 3 > 0)
        dr = lib.ops.aten.native_dropout_backward(G, mask, 1.5)
        pads = [lib.ops.aten.reflection_pad1d(X, [2, 3]), lib.ops.aten.replication_pad1d(X, [1, 4]),
                lib.ops.aten.constant_pad_nd(X, [1, -2], 0.25),
                lib.ops.aten.reflection_pad1d_backward(mk(np.ones((2, 6, 15), np.float32)), X, [2, 3]),
                lib.ops.aten.replication_pad1d_backward(mk(np.ones((2, 6, 15), np.float32)), X, [1, 4])]
        return gn, bn, dr, pads

    ours = shared_names(anvil, lambda v: anvil.tensor(v, device=device))
    theirs = shared_names(torch, lambda v: torch.tensor(v, device=device))
    for got, want in zip(ours, theirs):
        compare(got, want, F32)

@pytest.mark.parametrize("device", devices())
def test_fp8_scaled_mm_as_torch(device, rng):
    # FP8 row-wise scaled_mm against torch._scaled_mm where this torch has it for the device (CUDA:
    # compute capability 8.9+; some CPU builds take per-tensor scales only).
    a, b = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)
    sa, sb = (rng.random((16, 1)) + 0.5).astype(np.float32), (rng.random((1, 32)) + 0.5).astype(np.float32)
    A8 = anvil.tensor(a, device=device).to(anvil.float8_e4m3fn)
    B8 = anvil.tensor(b, device=device).to(anvil.float8_e4m3fn)
    got = AF.scaled_mm(A8, B8.t(), anvil.tensor(sa, device=device), AF.ScalingType.RowWise,
                       anvil.tensor(sb, device=device), AF.ScalingType.RowWise)
    try:
        want = torch._scaled_mm(torch.from_dlpack(A8), torch.from_dlpack(B8).t(), torch.tensor(sa, device=device),
                                torch.tensor(sb, device=device), out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm on {device}: {str(e).splitlines()[0]}")
    compare(got, want, BF16)


@pytest.mark.parametrize("device", devices())
def test_grouped_mm_offs_as_torch(device, rng):
    x = rng.standard_normal((10, 32)).astype(np.float32)
    w = rng.standard_normal((3, 32, 24)).astype(np.float32)
    offs = np.array([3, 3, 10], dtype=np.int32)  # an empty group in the middle
    got = AF.grouped_mm(anvil.tensor(x, device=device).bfloat16(), anvil.tensor(w, device=device).bfloat16(),
                        offs=anvil.tensor(offs, device=device))
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    try:
        want = torch._grouped_mm(torch.tensor(x, device=device).bfloat16(), torch.tensor(w, device=device).bfloat16(),
                                 offs=torch.tensor(offs, device=device))
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._grouped_mm on {device}: {str(e).splitlines()[0]}")
    compare(got, want, BF16)


@pytest.mark.parametrize("device", devices())
def test_complex_lu_pivots_as_torch(device, rng):
    # The release's complex64 LU: the same pivots (LAPACK's |Re| + |Im| rule) and the same factors.
    m = (rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8))).astype(np.complex64)
    LU, piv = anvil.linalg.lu_factor(anvil.tensor(m, device=device))
    tLU, tpiv = torch.linalg.lu_factor(torch.tensor(m, device=device))
    assert torch.equal(torch.from_dlpack(piv).cpu(), tpiv.cpu())
    assert (torch.from_dlpack(LU).cpu() - tLU.cpu()).abs().max().item() < 1e-5 * 8
