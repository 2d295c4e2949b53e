"""anvil.llm against transformers' goldens (tests/data/qwen3-*-tiny/golden.json: float32 logits of
every position and the greedy continuation of the prompt), streaming generation, the tokenizer
against Hugging Face's ids, and the errors a user meets first."""
import json
import os
import shutil

import numpy as np
import pytest

import anvil
from conftest import devices

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
QWEN3_TOKENIZER = os.path.join(ROOT, "data", "qwen3-tokenizer", "tokenizer.json")


def golden(name):
    with open(os.path.join(DATA, name, "golden.json")) as f:
        return json.load(f)


def byte_level_chars():
    """GPT-2's byte -> printable character table (the byte-level BPE vocabulary's spelling)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def write_byte_tokenizer(path):
    """A byte-level tokenizer.json of 258 ids: the 256 bytes, "<|im_start|>" 256, "<|im_end|>" 257
    (it fits the tiny models' vocabulary of 512)."""
    vocab = {c: b for b, c in byte_level_chars().items()}
    added = [{"id": 256 + i, "content": t, "special": True, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False} for i, t in enumerate(["<|im_start|>", "<|im_end|>"])]
    doc = {"model": {"type": "BPE", "vocab": vocab, "merges": []},
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "added_tokens": added}
    with open(path, "w") as f:
        json.dump(doc, f)


@pytest.fixture(scope="module")
def tiny_with_tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3-dense-tiny")
    for f in os.listdir(os.path.join(DATA, "qwen3-dense-tiny")):
        shutil.copy(os.path.join(DATA, "qwen3-dense-tiny", f), d)
    write_byte_tokenizer(d / "tokenizer.json")
    return str(d)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["qwen3-moe-tiny", "qwen3-dense-tiny"])
def test_logits_and_greedy_continuation_match_transformers(device, name):
    g = golden(name)
    m = anvil.llm.load(os.path.join(DATA, name), device, anvil.float32, max_context=64, progress=False)
    assert m.config["model_type"] == ("qwen3_moe" if "moe" in name else "qwen3")
    assert m.device == anvil.device(device) and m.dtype == anvil.float32 and m.max_context == 64
    assert m.tokenizer is None  # these folders hold no tokenizer.json
    want = np.array(g["logits"])
    got = m.logits(g["input_ids"])
    assert got.dtype == anvil.float32 and got.shape == want.shape and got.device == anvil.device(device)
    scale = np.abs(want).max(axis=1, keepdims=True)
    assert (np.abs(got.cpu().numpy() - want) <= 1e-3 * scale).all()
    # a [1, T] tensor keeps its batch dim; start_pos continues the cache of the run before
    ids = anvil.tensor(g["input_ids"][:5])
    assert m.logits(ids.unsqueeze(0)).shape == (1, 5, want.shape[1])
    row5 = m.logits(g["input_ids"][5:6], start_pos=5).cpu().numpy()[0]
    assert (np.abs(row5 - want[5]) <= 1e-3 * scale[5]).all()
    # greedy generation from the prompt: transformers' continuation, id by id as it streams
    P = g["prompt_len"]
    gen = m.generate(g["input_ids"][:P], max_new_tokens=len(g["input_ids"]) - P)
    assert gen.sampling["greedy"]  # the checkpoint asks for no sampling
    streamed = []
    for i, tok in enumerate(gen):
        assert isinstance(tok, int) and tok == g["input_ids"][P + i]
        streamed.append(tok)
    assert streamed == g["input_ids"][P:] == gen.tokens
    assert gen.done and gen.stats["new_tokens"] == len(streamed) and gen.stats["prompt_tokens"] == P
    assert not gen.stats["stopped"] and not gen.stats["context_full"]
    assert list(gen) == []  # exhausted


@pytest.mark.parametrize("name", ["qwen3-dense-tiny", "qwen3-moe-tiny"])
@pytest.mark.parametrize("device", devices())
def test_decode_paths_agree(device, name):
    """Every decode path of the bfloat16 dense and MoE models gives the eager step's logits (the
    persistent kernel and the graph to float32 rounding of their sums); an unknown path is an error."""
    g = golden(name)
    m = anvil.llm.load(os.path.join(DATA, name), device, anvil.bfloat16, max_context=64, progress=False)
    if device == "cpu":
        assert m.decode_paths == ["eager"] and m.decode_path == "eager"
    else:
        assert m.decode_paths == ["graph", "persistent", "eager"] and m.decode_path == "graph"
    rows = {}
    for path in m.decode_paths:
        m.decode_path = path
        m.logits(g["input_ids"][:4])
        rows[path] = np.stack([m.logits(g["input_ids"][i:i + 1], start_pos=i).cpu().numpy()[0] for i in range(4, 12)])
    eager = rows["eager"].astype(np.float64)
    for path, r in rows.items():
        r = r.astype(np.float64)
        cos = (r * eager).sum(1) / np.sqrt((r * r).sum(1) * (eager * eager).sum(1))
        assert (cos >= 0.9999).all(), (path, cos)
    with pytest.raises(RuntimeError, match=r"\[decode_path\] this model has no 'warp' path"):
        m.decode_path = "warp"


def test_sampling_seeds_stop_and_context():
    g = golden("qwen3-dense-tiny")
    m = anvil.llm.load(os.path.join(DATA, "qwen3-dense-tiny"), dtype=anvil.float32, max_context=64, progress=False)
    P = g["prompt_len"]
    prompt, want = g["input_ids"][:P], g["input_ids"][P:]

    def run(**kw):
        return list(m.generate(prompt, 20, **kw))

    a = run(temperature=0.8, top_k=50, top_p=0.9, seed=1234)
    assert a == run(temperature=0.8, top_k=50, top_p=0.9, seed=1234)
    assert a != run(temperature=0.8, top_k=50, top_p=0.9, seed=1235)
    s = m.generate(prompt, 4, top_k=5).sampling  # given fields over transformers' defaults
    assert s == {"greedy": False, "temperature": 1.0, "top_k": 5, "top_p": 1.0}
    stop = m.generate(prompt, 20, stop=[want[3]])
    assert list(stop) == want[:want.index(want[3]) + 1] and stop.stats["stopped"]
    small = anvil.llm.load(os.path.join(DATA, "qwen3-dense-tiny"), dtype=anvil.float32, max_context=16,
                           progress=False)
    full = small.generate([7] * 10, 100)
    assert len(list(full)) == 7 and full.stats["context_full"]  # positions 10..15, then one more sample
    assert m.generate(prompt, 0).tokens == []


def test_text_prompts_stream_text(tiny_with_tokenizer):
    m = anvil.llm.load(tiny_with_tokenizer, dtype=anvil.float32, max_context=64, progress=False)
    tok = m.tokenizer
    assert isinstance(tok, anvil.llm.Tokenizer) and tok.vocab_size == 258 and len(tok) == 258
    ids = tok.encode("héllo")
    assert ids == list("héllo".encode()) and tok.decode(ids) == "héllo"
    pieces = list(gen := m.generate("héllo", 12))
    assert all(isinstance(p, str) for p in pieces)
    # ids past the tokenizer's 258 (the model has 512 rows) stream no text, as Hugging Face's decode
    known = [t for t in gen.tokens if t < tok.vocab_size]
    assert "".join(pieces) == gen.text == tok.decode(known, skip_special_tokens=True)
    assert gen.tokens == list(m.generate(ids, 12))  # the same ids from the text and from its ids
    # chat: Qwen3's template around the prompt, "<|im_end|>" among the stop ids
    chat = m.generate("hi", 12, chat=True, system="be brief", thinking=False)
    list(chat)
    assert chat.stats["prompt_tokens"] == len(tok.encode(
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n"))
    assert tok.token_to_id("<|im_end|>") == 257 and tok.token_to_id("nope") is None and tok.is_special(257)
    assert m.logits("hé").shape == (3, 512)  # text runs through the tokenizer


def test_qwen3_tokenizer_matches_hugging_face():
    tok = anvil.llm.Tokenizer(QWEN3_TOKENIZER)
    with open(os.path.join(DATA, "qwen3-visible.json")) as f:
        cases = json.load(f)
    for c in cases:
        assert tok.encode(c["text"]) == c["ids"], c["text"]
        assert tok.decode(c["ids"]) == c["text"]


def test_random_preset_runs_with_the_packaged_tokenizer():
    m = anvil.llm.random("qwen3-0.6b", dtype=anvil.float32, max_context=32, progress=False)
    assert m.config["hidden_size"] == 1024 and m.tokenizer.vocab_size == 151669
    gen = m.generate("The capital of France is", 3)
    text = "".join(gen)
    assert gen.stats["new_tokens"] == 3 and isinstance(text, str)


def test_errors_name_the_problem(tiny_with_tokenizer):
    d = os.path.join(DATA, "qwen3-dense-tiny")
    m = anvil.llm.load(d, dtype=anvil.float32, max_context=16, progress=False)
    with pytest.raises(ValueError, match="no tokenizer"):
        m.generate("text", 3)
    with pytest.raises(ValueError, match=r"tokenizer's 151669 ids do not fit"):
        anvil.llm.load(d, dtype=anvil.float32, tokenizer=QWEN3_TOKENIZER, progress=False)
    with pytest.raises(TypeError, match="dtype must be"):
        anvil.llm.load(d, dtype=anvil.int32, progress=False)
    with pytest.raises(ValueError, match="fp8 must be"):
        anvil.llm.load(d, fp8="yes", progress=False)
    with pytest.raises(FileNotFoundError, match="no-such-model is not a folder"):
        anvil.llm.load(os.path.join(DATA, "no-such-model"), progress=False)
    with pytest.raises(RuntimeError, match="has no config.json"):
        anvil.llm.load(DATA, progress=False)
    with pytest.raises(IndexError, match="outside the model's vocabulary"):
        m.logits([1, 512])
    with pytest.raises(IndexError, match="outside the model's vocabulary"):
        m.generate([1, 512], 3)
    with pytest.raises(ValueError, match="context of 16"):
        m.logits([1] * 17)
    with pytest.raises(ValueError, match="temperature must be"):
        m.generate([1, 2], 3, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p must be"):
        m.generate([1, 2], 3, top_p=0.0)
    with pytest.raises(TypeError, match="token ids must be ints"):
        m.logits([1.5])
    with pytest.raises(ValueError, match="one sequence"):
        m.logits(anvil.zeros(2, 3, dtype=anvil.int64))
    # one KV cache: a generation cannot go on after another call rewrote it
    first = m.generate([1, 2, 3], 5)
    next(first)
    m.logits([4, 5])
    with pytest.raises(RuntimeError, match="rewritten its KV cache"):
        next(first)
    second = m.generate([1, 2, 3], 5)
    next(second)
    m.logits([6], start_pos=3)  # a continuation writes the cache too
    with pytest.raises(RuntimeError, match="rewritten its KV cache"):
        next(second)
    t = anvil.llm.load(tiny_with_tokenizer, dtype=anvil.float32, progress=False)
    with pytest.raises(ValueError, match="not a token"):
        t.generate("a", 3, stop=["<|nope|>"])
