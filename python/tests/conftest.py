import numpy as np
import pytest

import anvil


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def devices():
    """The CPU, and CUDA when a GPU is there (its tests skip with the reason otherwise)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not anvil.cuda.is_available(), reason=f"no CUDA: {anvil.cuda.unavailable_reason()}"))]
