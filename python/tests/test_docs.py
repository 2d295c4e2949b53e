"""docs/PYTHON.md's examples run as written (the checkpoint folders swapped for the tiny test
checkpoints and the GPU for the CPU), their printed results checked where the page shows them."""
import os
import re

import pytest

from test_llm import tiny_with_tokenizer  # noqa: F401 (a fixture: the tiny checkpoint with a byte tokenizer)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks():
    with open(os.path.join(ROOT, "docs", "PYTHON.md")) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def swap(code, pairs):
    for old, new in pairs:
        assert old in code, f"docs/PYTHON.md no longer has {old!r}: update this test with the page"
        code = code.replace(old, new)
    return code


def test_tensors_numpy_linalg_example(capsys):
    exec(blocks()[0], {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "(4,) anvil.float32" and out[1] == "42.0" and out[2] in ("True", "False")


def test_torch_example(capsys):
    pytest.importorskip("torch")
    exec(blocks()[1], {})
    assert capsys.readouterr().out.splitlines()[0] == "tensor([1., 0., 0.])"


def test_llm_example(capsys, tiny_with_tokenizer):
    code = swap(blocks()[2], [('anvil.llm.load("Qwen3-0.6B", "cuda")', f'anvil.llm.load({tiny_with_tokenizer!r}, "cpu")'),
                              ("200", "8")])
    exec(code, {})
    out = capsys.readouterr().out
    assert re.search(r"\d+ tok/s", out)


def test_vae_example():
    code = swap(blocks()[3], [('anvil.vae.load("FLUX.1-dev/vae", "cuda", anvil.bfloat16)',
                               f'anvil.vae.load({os.path.join(ROOT, "tests", "data", "sd-vae")!r}, "cpu")'),
                              ('device="cuda"', 'device="cpu"'), ("1024, 1024", "64, 64")])
    ns = {}
    exec(code, ns)
    assert ns["y"].shape == ns["x"].shape
