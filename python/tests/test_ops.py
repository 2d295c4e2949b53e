"""The tensor ops beyond arithmetic (clamp, max / min with indices, var / std, topk, gather /
scatter / take / put / masked_fill, mm / bmm, frexp, bincount, the *_like factories, randint,
logspace, F.embedding, FP8 dequantisation) against NumPy on every device."""
import numpy as np
import pytest

import anvil
import anvil.nn.functional as F
from conftest import devices


def np_of(t):
    return t.cpu().numpy()


@pytest.mark.parametrize("device", devices())
def test_elementwise_and_reductions(device, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.standard_normal((4, 6)).astype(np.float32)
    a, b = anvil.tensor(x, device=device), anvil.tensor(y, device=device)
    np.testing.assert_array_equal(np_of(a.clamp(-0.5, 0.5)), np.clip(x, -0.5, 0.5))
    np.testing.assert_array_equal(np_of(anvil.clamp(a, min=0.0)), np.maximum(x, 0))
    np.testing.assert_array_equal(np_of(anvil.clip(a, max=b)), np.minimum(x, y))
    np.testing.assert_array_equal(np_of(a.clamp(b, b + 1)), np.clip(x, y, y + 1))
    np.testing.assert_array_equal(np_of(anvil.maximum(a, b)), np.maximum(x, y))
    np.testing.assert_array_equal(np_of(a.minimum(b)), np.minimum(x, y))
    np.testing.assert_array_equal(np_of(anvil.logical_and(a > 0, b > 0)), (x > 0) & (y > 0))
    np.testing.assert_array_equal(np_of((a > 0).logical_or(b > 0)), (x > 0) | (y > 0))
    np.testing.assert_array_equal(np_of(anvil.logical_not(a > 0)), ~(x > 0))
    np.testing.assert_array_equal(np_of(anvil.eq(a, a)), np.ones_like(x, dtype=bool))
    np.testing.assert_array_equal(np_of(a.gt(0.1)), x > 0.1)
    np.testing.assert_array_equal(np_of(anvil.heaviside(a, b)), np.heaviside(x, y))
    m, e = anvil.frexp(a)
    wm, we = np.frexp(x)
    np.testing.assert_array_equal(np_of(m), wm)
    np.testing.assert_array_equal(np_of(e), we)
    assert a.max().item() == x.max() and anvil.min(a).item() == x.min()
    r = a.max(dim=1)
    assert r.values.shape == (4,) and r == (r.values, r.indices)
    np.testing.assert_array_equal(np_of(r.values), x.max(1))
    np.testing.assert_array_equal(np_of(anvil.min(a, 0, keepdim=True).indices), x.argmin(0)[None])
    np.testing.assert_allclose(np_of(a.prod(1)), x.astype(np.float64).prod(1), rtol=1e-5)
    np.testing.assert_allclose(np_of(anvil.var(a, 1)), x.astype(np.float64).var(1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(np_of(a.std(correction=0)), x.astype(np.float64).std(), rtol=1e-5)
    v, mu = anvil.var_mean(a, (0, 1))
    np.testing.assert_allclose([v.item(), mu.item()], [x.astype(np.float64).var(ddof=1), x.mean()], rtol=1e-5)
    s, mu = anvil.std_mean(a, 0, keepdim=True)
    assert s.shape == (1, 6)
    t = a.topk(3)
    order = np.argsort(-x, axis=1)[:, :3]
    np.testing.assert_array_equal(np_of(t.indices), order)
    np.testing.assert_array_equal(np_of(t.values), np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(np_of(anvil.topk(a, 2, dim=0, largest=False).indices), np.argsort(x, 0)[:2])


@pytest.mark.parametrize("device", devices())
def test_indexing_ops(device, rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    a = anvil.tensor(x, device=device)
    idx = np.array([[0, 4, 1], [2, 2, 3], [4, 0, 0]])
    ti = anvil.tensor(idx, device=device)
    np.testing.assert_array_equal(np_of(a.gather(1, ti)), np.take_along_axis(x, idx, 1))
    np.testing.assert_array_equal(np_of(anvil.index_select(a, 1, anvil.tensor([4, 0], device=device))), x[:, [4, 0]])
    np.testing.assert_array_equal(np_of(a.take(anvil.tensor([0, -1, 7], device=device))), x.ravel()[[0, -1, 7]])
    src = anvil.ones(3, 3, device=device)
    want = x.copy()
    np.put_along_axis(want, idx[:, :1], 1.0, 1)
    np.testing.assert_array_equal(np_of(a.scatter(1, ti[:, :1], 1.0)), want)
    want = x.copy()
    for i in range(3):
        for j in range(3):
            want[i, idx[i, j]] += 1
    np.testing.assert_allclose(np_of(anvil.scatter_add(a, 1, ti, src)), want, rtol=1e-6)
    np.testing.assert_array_equal(np_of(a.scatter(1, ti[:, :1], src[:, :1] * 2)[:, :1]),
                                  np.where(idx[:, :1] == 0, 2.0, x[:, :1]))
    flat = anvil.tensor([1, 3], device=device)
    p = a.put(flat, anvil.tensor([9.0, 8.0], device=device))
    want = x.ravel().copy()
    want[[1, 3]] = [9, 8]
    np.testing.assert_array_equal(np_of(p).ravel(), want)
    c = a.clone()
    c.put_(flat, anvil.tensor([1.0, 1.0], device=device), accumulate=True)
    want = x.ravel().copy()
    want[[1, 3]] += 1
    np.testing.assert_allclose(np_of(c).ravel(), want, rtol=1e-6)
    mask = a > 0
    np.testing.assert_array_equal(np_of(a.masked_fill(mask, 0.0)), np.where(x > 0, 0, x))
    c.masked_fill_(mask, -1)
    assert (np_of(c)[x > 0] == -1).all()
    b = anvil.tensor([0, 1, 1, 3], device=device)
    np.testing.assert_array_equal(np_of(b.bincount()), [1, 2, 0, 1])
    np.testing.assert_allclose(np_of(anvil.bincount(b, anvil.tensor([0.5, 1.0, 1.0, 2.0], device=device),
                                                    minlength=6)), [0.5, 2, 0, 2, 0, 0])
    w = rng.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([[1, 9], [0, 1]])
    np.testing.assert_array_equal(np_of(F.embedding(anvil.tensor(ids, device=device),
                                                      anvil.tensor(w, device=device))), w[ids])


@pytest.mark.parametrize("device", devices())
def test_products_factories_fp8(device, rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = rng.standard_normal((2, 4, 5)).astype(np.float32)
    a, b = anvil.tensor(x, device=device), anvil.tensor(y, device=device)
    np.testing.assert_allclose(np_of(a.bmm(b)), x @ y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np_of(anvil.mm(a[0], b[0])), x[0] @ y[0], rtol=1e-5, atol=1e-5)
    z = anvil.zeros_like(a)
    assert z.shape == a.shape and z.dtype == anvil.float32 and z.device == a.device and not np_of(z).any()
    assert anvil.ones_like(a, dtype=anvil.int32).dtype == anvil.int32
    assert (np_of(anvil.full_like(a, 7)) == 7).all() and anvil.empty_like(a).shape == a.shape
    assert anvil.randn_like(a).shape == a.shape and anvil.rand_like(a).dtype == anvil.float32
    r = anvil.randint(3, 9, (1000,), device=device)
    assert r.dtype == anvil.int64 and 3 <= r.min().item() and r.max().item() == 8
    assert anvil.randint(5, (4, 2)).shape == (4, 2)
    np.testing.assert_allclose(np_of(anvil.logspace(0, 3, 4, device=device)), [1, 10, 100, 1000], rtol=1e-6)
    np.testing.assert_allclose(np_of(anvil.logspace(0, 3, 4, base=2.0)), [1, 2, 4, 8])
    # FP8: block-scaled weights as the Hub's checkpoints store them, dequantised
    w = rng.standard_normal((4, 6)).astype(np.float32)
    q = anvil.tensor(w, device=device).to(anvil.float8_e4m3fn)
    scale = anvil.tensor(np.array([[2.0, 0.5], [4.0, 1.0]], dtype=np.float32), device=device)
    d = F.dequantize_fp8(q, scale, (2, 3), dtype=anvil.float32)
    want = np_of(q.float()) * np.repeat(np.repeat(np_of(scale), 2, 0), 3, 1)
    np.testing.assert_array_equal(np_of(d), want)


def test_errors():
    a = anvil.ones(3)
    with pytest.raises(ValueError, match="at least one of min and max"):
        a.clamp()
    with pytest.raises(TypeError, match="both tensors"):
        a.clamp(a, 1.0)
    with pytest.raises(TypeError, match="randint"):
        anvil.randint(1.5, (2,))
    with pytest.raises(IndexError):
        a.take(anvil.tensor([5]))


@pytest.mark.parametrize("device", devices())
def test_nonzero_and_boolean_mask_indexing(device, rng):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    x[x < 0.3] = 0
    a = anvil.tensor(x, device=device)
    np.testing.assert_array_equal(np_of(a.nonzero()), np.argwhere(x))
    np.testing.assert_array_equal(np_of(anvil.argwhere(a)), np.argwhere(x))
    for got, want in zip(anvil.nonzero(a, as_tuple=True), np.nonzero(x)):
        np.testing.assert_array_equal(np_of(got), want)
    assert [np_of(t).tolist() for t in anvil.tensor(5.0).nonzero(as_tuple=True)] == [[0]]
    m = x > 0.5
    tm = anvil.tensor(m, device=device)
    np.testing.assert_array_equal(np_of(a[tm]), x[m])                     # a full mask: 1-d
    np.testing.assert_array_equal(np_of(a.masked_select(tm)), x[m])
    np.testing.assert_array_equal(np_of(a[tm[:, :, 0]]), x[m[:, :, 0]])   # leading dims: [count, 3]
    np.testing.assert_array_equal(np_of(a[:, tm[0, :, 0]]), x[:, m[0, :, 0]])  # after a slice
    np.testing.assert_array_equal(np_of(a[1, tm[0, :, 0], 2]), x[1, m[0, :, 0], 2])
    assert a[True].shape == (1, 4, 5, 3) and a[False].shape == (0, 4, 5, 3)
    b = a.clone()
    b[tm] = -1.0
    want = x.copy()
    want[m] = -1
    np.testing.assert_array_equal(np_of(b), want)
    b[tm[:, :, 0]] = anvil.tensor([7.0, 8.0, 9.0], device=device)     # broadcast over the masked rows
    want[m[:, :, 0]] = [7, 8, 9]
    np.testing.assert_array_equal(np_of(b), want)
    n = int(m.sum())
    b[tm] = anvil.arange(n, dtype=anvil.float32, device=device)
    want[m] = np.arange(n)
    np.testing.assert_array_equal(np_of(b), want)
    with pytest.raises(IndexError, match="does not match the shape"):
        a[tm[:, :2]]
    with pytest.raises(IndexError, match="not supported yet"):
        b[tm[:, :, 0], 0] = 1.0
