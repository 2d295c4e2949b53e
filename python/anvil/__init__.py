"""anvil: tensors and dedicated kernels for x86-64 CPUs and NVIDIA GPUs, with PyTorch's names.

Everything comes from the compiled extension anvil._anvil; the namespaces follow torch's
(anvil.cuda as torch.cuda). See docs/PYTHON.md.
"""
from ._anvil import *  # noqa: F401,F403
from ._anvil import __version__, cuda, linalg, nn, ops, special  # noqa: F401

import warnings as _warnings

_cuda_is_available = cuda.is_available


def _is_available():
    """Whether a CUDA device can be used; when not, warns once with the reason (no driver, no
    GPU, a build without CUDA)."""
    ok = _cuda_is_available()
    if not ok and not getattr(_is_available, "warned", False):
        _is_available.warned = True
        _warnings.warn(f"anvil.cuda is not available: {cuda.unavailable_reason()}", stacklevel=2)
    return ok


cuda.is_available = _is_available

# `import anvil.nn.functional as F` (torch's idiom) and the other submodules by their dotted names.
import sys as _sys

for _name, _mod in (("cuda", cuda), ("linalg", linalg), ("nn", nn), ("nn.functional", nn.functional), ("ops", ops),
                    ("ops.aten", ops.aten), ("ops.anvil", ops.anvil), ("special", special)):
    _sys.modules[f"{__name__}.{_name}"] = _mod
