"""DLPack both ways, zero copy: NumPy on the CPU, and PyTorch (CPU, and CUDA when there is a GPU)."""
import numpy as np
import pytest

import anvil
from conftest import devices

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64"]


@pytest.mark.parametrize("name", DTYPES)
def test_numpy_round_trip_shares_memory(name):
    a = (np.arange(12) % 3).astype(name).reshape(3, 4)
    t = anvil.from_dlpack(a)
    assert t.dtype == getattr(anvil, name) and t.shape == (3, 4)
    np.testing.assert_array_equal(t.numpy(), a)
    back = np.from_dlpack(t)
    assert back.ctypes.data == a.ctypes.data  # the same buffer, no copy


def test_strided_views_cross_without_copies():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2]
    t = anvil.from_dlpack(a)
    assert t.stride() == (12, 2)
    np.testing.assert_array_equal(t.numpy(), a)
    u = anvil.arange(24, dtype=anvil.float32).reshape(4, 6).mT
    np.testing.assert_array_equal(np.from_dlpack(u), np.arange(24, dtype=np.float32).reshape(4, 6).T)


def test_exported_tensor_outlives_its_python_object():
    back = np.from_dlpack(anvil.arange(5, dtype=anvil.float64) * 2)
    np.testing.assert_array_equal(back, [0, 2, 4, 6, 8])
    cap = anvil.ones(3).__dlpack__()
    del cap  # an unconsumed capsule frees its tensor


def test_versioned_capsules_and_writable_numpy_views():
    t = anvil.zeros(4)
    legacy, versioned = t.__dlpack__(), t.__dlpack__(max_version=(1, 0))
    assert '"dltensor"' in repr(legacy) and '"dltensor_versioned"' in repr(versioned)
    anvil.from_dlpack(legacy)[0] = 4  # either kind is read back, sharing the memory
    anvil.from_dlpack(versioned)[1] = 5
    n = t.numpy()  # NumPy asks for DLPack 1.0: writable, as torch's Tensor.numpy()
    assert n.flags.writeable
    n[2] = 7
    np.testing.assert_array_equal(t.numpy(), [4, 5, 7, 0])


def test_read_only_arrays_are_copied_or_shared_with_a_warning():
    a = np.arange(4.0)
    a.flags.writeable = False
    c = anvil.tensor(a)  # a copy: no warning needed
    c[0] = 9
    assert a[0] == 0
    with pytest.warns(UserWarning, match=r"\[anvil.from_numpy\] the array is read-only"):
        shared = anvil.from_numpy(a)
    assert np.shares_memory(shared.numpy(), a)


@pytest.mark.parametrize("device", devices())
def test_torch_shares_memory_both_ways(device):
    torch = pytest.importorskip("torch")
    tt = torch.arange(6, dtype=torch.float32, device=device).reshape(2, 3)
    at = anvil.from_dlpack(tt)
    assert at.shape == (2, 3) and str(at.device) == str(tt.device) and at.dtype == anvil.float32
    tt[0, 0] = 41  # written through torch, read through anvil
    assert at[0, 0].item() == 41
    back = torch.from_dlpack(at)
    at[1, 2] = -3  # written through anvil, read through torch
    assert back[1, 2].item() == -3 and back.data_ptr() == tt.data_ptr()
    for name in ["bfloat16", "float8_e4m3fn", "float8_e5m2"]:
        if not hasattr(torch, name):
            continue
        x = torch.ones(4, dtype=torch.float32, device=device).to(getattr(torch, name))
        ax = anvil.from_dlpack(x)
        assert ax.dtype == getattr(anvil, name) and ax.float().cpu().tolist() == [1.0] * 4
        assert torch.from_dlpack(ax).dtype == getattr(torch, name)
