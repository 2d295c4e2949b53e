"""anvil.Tensor against NumPy: factories, properties, conversions, views, indexing, operators."""
import math

import numpy as np
import pytest

import anvil
from conftest import devices


def test_dtypes_and_devices():
    assert repr(anvil.float32) == "anvil.float32" and anvil.float == anvil.float32
    assert anvil.bfloat16.itemsize == 2 and anvil.float8_e4m3fn.itemsize == 1
    assert anvil.float32.is_floating_point and not anvil.int64.is_floating_point
    assert anvil.complex64.is_complex
    assert anvil.promote_types(anvil.int32, anvil.float16) == anvil.float16
    assert str(anvil.device("cuda:1")) == "cuda:1" and anvil.device("cuda:1").index == 1
    assert anvil.device("cuda", 2) == "cuda:2" and repr(anvil.device("cpu")) == "device(type='cpu')"
    assert anvil.device("cpu").index is None and anvil.device("cpu").type == "cpu"


def test_factories():
    assert anvil.zeros(2, 3).shape == (2, 3) and anvil.zeros((2, 3)).dtype == anvil.float32
    assert anvil.ones([4], dtype=anvil.int32).tolist() == [1, 1, 1, 1]
    assert anvil.full((2,), 3).dtype == anvil.int64 and anvil.full((2,), 1.5).tolist() == [1.5, 1.5]
    assert anvil.full((1,), True).dtype == anvil.bool
    assert anvil.arange(5).tolist() == [0, 1, 2, 3, 4] and anvil.arange(5).dtype == anvil.int64
    np.testing.assert_allclose(anvil.arange(0, 1, 0.25).numpy(), np.arange(0, 1, 0.25, dtype=np.float32))
    assert anvil.arange(1, 7, 2, dtype=anvil.float64).tolist() == [1.0, 3.0, 5.0]
    np.testing.assert_array_equal(anvil.eye(3, 2).numpy(), np.eye(3, 2, dtype=np.float32))
    np.testing.assert_allclose(anvil.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5, dtype=np.float32))
    anvil.manual_seed(7)
    a = anvil.randn(1000).numpy()
    anvil.manual_seed(7)
    assert np.array_equal(a, anvil.randn(1000).numpy())  # seeded
    assert abs(a.mean()) < 0.15 and abs(a.std() - 1) < 0.1
    r = anvil.rand(1000).numpy()
    assert r.min() >= 0 and r.max() < 1


def test_tensor_from_python_and_numpy():
    assert anvil.tensor([1.5, 2]).dtype == anvil.float32  # torch's defaults, not NumPy's float64
    assert anvil.tensor([1, 2]).dtype == anvil.int64 and anvil.tensor([True]).dtype == anvil.bool
    assert anvil.tensor([1j]).dtype == anvil.complex64
    assert anvil.tensor(np.ones(3, dtype=np.float64)).dtype == anvil.float64  # arrays keep theirs
    assert anvil.tensor(3.5).shape == () and anvil.tensor(3.5).item() == 3.5
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = anvil.tensor(a)  # a copy
    a[0, 0] = 9
    assert t[0, 0].item() == 0
    s = anvil.from_numpy(a)  # shares memory, both ways
    a[0, 1] = 7
    assert s[0, 1].item() == 7
    s[1, 2] = -1.0
    assert a[1, 2] == -1
    assert np.asarray(s) is not None and np.array_equal(np.asarray(s), a)
    with pytest.raises(TypeError):
        anvil.tensor("abc")
    with pytest.raises(TypeError, match="complex128"):
        anvil.tensor(np.ones(2, dtype=np.complex128))
    assert anvil.tensor(np.ones(2, dtype=np.complex128), dtype=anvil.complex64).dtype == anvil.complex64


def test_properties_and_conversions():
    t = anvil.arange(24, dtype=anvil.float32).reshape(2, 3, 4)
    assert t.shape == (2, 3, 4) and t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12 and t.ndim == 3 and t.dim() == 3
    assert t.numel() == 24 and t.element_size() == 4 and t.nbytes == 96 and t.itemsize == 4
    assert t.is_contiguous() and not t.transpose(0, 2).is_contiguous()
    assert t.device == anvil.device("cpu") and t.is_cpu and not t.is_cuda
    assert t.to(anvil.float64).dtype == anvil.float64 and t.double().dtype == anvil.float64
    assert t.to("cpu", anvil.int32).dtype == anvil.int32 and t.to(dtype=anvil.int8).dtype == anvil.int8
    assert t.half().dtype == anvil.float16 and t.bfloat16().float().tolist() == t.tolist()
    assert t.to(anvil.zeros(1, dtype=anvil.int16)).dtype == anvil.int16
    assert t.long().dtype == anvil.int64 and t.int().dtype == anvil.int32 and t.bool().dtype == anvil.bool
    assert anvil.tensor(2.5).item() == 2.5 and anvil.tensor(3).item() == 3 and anvil.tensor(True).item() is True
    assert anvil.tensor(1 + 2j).item() == 1 + 2j
    assert float(anvil.tensor(2.5)) == 2.5 and int(anvil.tensor(7)) == 7 and [10, 20][anvil.tensor(1)] == 20
    assert len(t) == 2 and bool(anvil.tensor(1)) and not bool(anvil.tensor(0.0))
    with pytest.raises(ValueError):
        bool(t)
    assert repr(anvil.tensor([1.5, 2.0], dtype=anvil.float64)) == "tensor([1.5000, 2.0000], dtype=anvil.float64)"
    with pytest.raises(TypeError, match="NumPy has no bfloat16"):
        t.bfloat16().numpy()
    c = t.clone()
    c.zero_()
    assert t.sum().item() == 276 and c.sum().item() == 0


def test_views_and_indexing():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = anvil.from_numpy(a)
    cases = [(1,), (-1,), (slice(None),), (slice(1, None),), (slice(None, None, 2),), (1, 2), (1, slice(1, 3), -1),
             (Ellipsis, 2), (None, 0), (slice(None), None, 1), (0, Ellipsis, None), (slice(-2, None), slice(None, -1))]
    for key in cases:
        np.testing.assert_array_equal(t[key].numpy(), a[key], err_msg=str(key))
    np.testing.assert_array_equal(t[anvil.tensor([2, 0])].numpy(), a[[2, 0]])
    np.testing.assert_array_equal(t[:, anvil.tensor([3, 1])].numpy(), a[:, [3, 1]])
    np.testing.assert_array_equal(t.view(12, 5).numpy(), a.reshape(12, 5))
    np.testing.assert_array_equal(t.reshape((5, 12)).numpy(), a.reshape(5, 12))
    np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), a.swapaxes(0, 2))
    np.testing.assert_array_equal(t.mT.numpy(), a.swapaxes(1, 2))
    np.testing.assert_array_equal(t.T.numpy(), a.T)
    np.testing.assert_array_equal(t[0].t().numpy(), a[0].T)
    np.testing.assert_array_equal(t[:, :1].squeeze(1).numpy(), a[:, 0])
    np.testing.assert_array_equal(t.unsqueeze(1).numpy(), a[:, None])
    np.testing.assert_array_equal(t.flatten(1).numpy(), a.reshape(3, 20))
    np.testing.assert_array_equal(t[:1].expand(2, 4, 5).numpy(), np.broadcast_to(a[:1], (2, 4, 5)))
    np.testing.assert_array_equal(t.narrow(1, 1, 2).numpy(), a[:, 1:3])
    np.testing.assert_array_equal(t.select(2, 3).numpy(), a[:, :, 3])
    assert [row.shape for row in t] == [(4, 5)] * 3
    with pytest.raises(IndexError, match="out of bounds"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]
    with pytest.raises(ValueError, match="step"):
        t[::-1]
    with pytest.raises(IndexError):
        t[anvil.tensor([[0]])]


def test_setitem_writes_through_views():
    a = np.zeros((3, 4), dtype=np.float32)
    t = anvil.from_numpy(a)
    t[1] = 5
    t[:, 2] = anvil.tensor([1.0, 2.0, 3.0])
    t[0, :2] = anvil.tensor(7.0)
    want = np.zeros((3, 4), dtype=np.float32)
    want[1] = 5
    want[:, 2] = [1, 2, 3]
    want[0, :2] = 7
    np.testing.assert_array_equal(a, want)
    with pytest.raises(IndexError, match="not supported yet"):
        t[anvil.tensor([0])] = 1.0


@pytest.mark.parametrize("device", devices())
def test_operators_against_numpy(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32) + 3
    a, b = anvil.tensor(x, device=device), anvil.tensor(y, device=device)
    x, y = x.astype(np.float64), y.astype(np.float64)  # float64 references of the float32 inputs
    eps = 8 * np.finfo(np.float32).eps
    pairs = [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y), (a + 2, x + 2), (2 + a, 2 + x),
             (a - 1.5, x - 1.5), (1.5 - a, 1.5 - x), (a * 3, x * 3), (3 * a, 3 * x), (a / 4, x / 4), (4 / b, 4 / y),
             (b ** 2, y ** 2), (2 ** a, 2 ** x), (b ** b, y ** y), (-a, -x), (abs(a), np.abs(x)),
             (a @ b.mT, x @ y.T), (a.exp(), np.exp(x)), (b.log(), np.log(y)), (b.sqrt(), np.sqrt(y)),
             (a.tanh(), np.tanh(x)), (a.sigmoid(), 1 / (1 + np.exp(-x))), (anvil.add(a, b), x + y),
             (a.sum(), x.sum()), (a.sum(dim=1), x.sum(1)), (a.mean(0, keepdim=True), x.mean(0, keepdims=True)),
             (a.amax(1), x.max(1)), (anvil.amin(a, (0, 1)), x.min())]
    for got, want in pairs:
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=eps, atol=eps * max(1.0, np.abs(want).max()))
    for got, want in [(a < b, x < y), (a >= 0, x >= 0), (a == a, x == x), (a != 0.5, x != 0.5), (a > b, x > y),
                      (a <= 0, x <= 0), ((a > 0) & (b > 3), (x > 0) & (y > 3)), (~(a > 0), ~(x > 0))]:
        assert got.dtype == anvil.bool
        np.testing.assert_array_equal(got.cpu().numpy(), want)
    assert a.argmax().item() == x.argmax() and anvil.argmin(a, 1).cpu().tolist() == x.argmin(1).tolist()
    ints = anvil.arange(6, device=device)
    assert (ints / 4).dtype == anvil.float32 and (ints * 2).dtype == anvil.int64 and (ints * 0.5).dtype == anvil.float32
    assert (1 - ints).tolist() == [1, 0, -1, -2, -3, -4] and (3 / anvil.arange(1, 4)).dtype == anvil.float32


def test_cuda_reports_why_not():
    if anvil.cuda.is_available():
        assert anvil.cuda.device_count() >= 1
    else:
        assert anvil.cuda.unavailable_reason() != ""
        with pytest.raises(RuntimeError):
            anvil.zeros(2, device="cuda")


def test_in_place_arithmetic_writes_through_views():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = anvil.from_numpy(a)
    alias = t
    t += 1
    t[0] *= anvil.tensor([2.0, 3.0, 4.0])
    t.sub_(0.5)
    t[1].div_(2)
    assert t is alias  # the same object, updated in place, as torch
    want = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    want[0] *= [2, 3, 4]
    want -= 0.5
    want[1] /= 2
    np.testing.assert_allclose(a, want)
    i = anvil.arange(3)
    i += 2
    assert i.tolist() == [2, 3, 4]
    with pytest.raises(TypeError, match="can't be cast"):
        i += 0.5  # float result into an int64 tensor, refused as torch does
    with pytest.raises(TypeError, match="can't be cast"):
        i /= 2


def test_numpy_scalars_and_0d_tensors_as_numbers():
    t = anvil.arange(6, dtype=anvil.float32).reshape(2, 3)
    assert anvil.zeros(np.int64(2), np.int32(3)).shape == (2, 3)
    assert t[np.int64(1), np.int32(2)].item() == 5 and t[anvil.tensor(1)].tolist() == [3, 4, 5]
    assert (t + np.float32(0.5)).dtype == anvil.float32 and (t * np.float64(2))[1, 0].item() == 6
    assert (t > np.int64(2)).sum().item() == 3 and (t + np.array(1.0)).shape == (2, 3)
    assert t.sum(dim=np.int64(0)).tolist() == [3, 5, 7]
    assert isinstance(np.float32(1) + t, anvil.Tensor) and (np.float32(10) - t)[0, 1].item() == 9
