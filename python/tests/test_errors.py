"""anvil's typed errors arrive as Python exceptions of PyTorch's built-in types, messages kept."""
import pytest

import anvil


def test_error_types_and_messages():
    assert issubclass(anvil.ShapeError, ValueError) and issubclass(anvil.DTypeError, TypeError)
    assert issubclass(anvil.IndexError, IndexError) and issubclass(anvil.OutOfMemoryError, MemoryError)
    assert issubclass(anvil.DeviceError, RuntimeError) and issubclass(anvil.LinAlgError, RuntimeError)
    with pytest.raises(anvil.ShapeError, match=r"^\[add\] .*size of tensor a \(3\) must match .*\(4\)"):
        anvil.zeros(2, 3) + anvil.zeros(4)
    with pytest.raises(anvil.ShapeError, match=r"\[matmul\]|\[mm\]"):
        anvil.zeros(2, 3) @ anvil.zeros(2, 3)
    with pytest.raises(ValueError):
        anvil.zeros(6).view(4)
    with pytest.raises(TypeError, match="size must be ints"):
        anvil.zeros(2, "3")
    with pytest.raises(TypeError):
        anvil.zeros(2) + "a"
    with pytest.raises(RuntimeError):  # an unknown device name
        anvil.zeros(2, device="tpu")


def test_bad_input_never_crashes():
    t = anvil.arange(4)
    for bad in (lambda: t.view(-2), lambda: t.permute(0, 0), lambda: t.transpose(0, 5), lambda: t.narrow(0, 3, 5),
                lambda: t.select(1, 0), lambda: anvil.eye(-1), lambda: t.reshape(3, -1), lambda: anvil.cat([])):
        with pytest.raises((ValueError, IndexError, TypeError, RuntimeError)):
            bad()
