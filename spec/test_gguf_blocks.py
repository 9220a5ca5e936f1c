"""Page contract: a GGUF file's quantized blocks are read as they are, and mean what gguf says.

What it shows: Q8_0, Q4_0 and Q4_1 matrices become QuantizedTensors straight from their bytes
(d -> scales, m -> mins, qs -> q; Q4_0's zeros 8) and dequantize bit for bit as the `gguf`
package's own dequantizer does; the loader keeps those three types quantized and reads every
other tensor (F32 norms, F16, another quantization) as float32; the model cache written from
them reads back as the very same tensors; Llama's q/k rows are un-permuted on the quantized
matrix exactly as on the dequantized one.

Core principle: evidence from outside: the blocks are made by gguf's own quantizer
(gguf.quants.quantize on seeded random data) and the expected floats come from gguf's own
dequantizer (torch.equal, no tolerance). A few tensors of the real SmolLM2 file are held to the
same reference.

Files to compare: torchlet/gguf_model.py (block_tensor, read_gguf, convert),
torchlet/quantized_files.py (the cache's scheme), torchlet/contract/quantized.py (dequantize).

Tradeoff left visible: only these three block types are kept; any other (Q5_0 here, K-quants in
other files) is dequantized to float32 on reading, as every tensor was before.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from spec.support.models.gguf_files import write_gguf
from torchlet import gguf_model
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import QuantizedTensor
from torchlet.quantized_files import QUANTIZED

KINDS = ("Q8_0", "Q4_0", "Q4_1")
# every kind of tensor the loader meets: the three kept, F16, a quantization not kept, F32 norms
TYPES = {"q_proj": "Q4_1", "k_proj": "Q4_0", "embed_tokens": "Q8_0", "lm_head": "Q8_0",
         "v_proj": "Q4_1", "o_proj": "F16", "down_proj": "Q5_0", "mlp": "Q4_1"}


def gguf_dequantized(raw: np.ndarray, kind: str) -> torch.Tensor:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    return torch.from_numpy(np.array(dequantize(raw, GGMLQuantizationType[kind]),
                                     dtype=np.float32))


def blocks(kind: str, rows: int = 6, cols: int = 96, seed: int = 0) -> np.ndarray:
    """gguf's own blocks of seeded random rows, each with its own spread and offset (so that a
    block's d and m differ and neither is 0)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    g = np.random.default_rng(seed)
    data = g.standard_normal((rows, cols)) * g.uniform(0.1, 3, (rows, 1)) + g.uniform(-2, 2,
                                                                                    (rows, 1))
    return quantize(data.astype(np.float32), GGMLQuantizationType[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_each_block_type_dequantizes_bit_for_bit_as_gguf_does(kind):
    raw = blocks(kind)
    w = gguf_model.block_tensor(raw, kind, 6, 96)
    assert (w.bits, w.group, w.name) == ((8 if kind == "Q8_0" else 4), 32, kind)
    assert torch.equal(w.dequantize(), gguf_dequantized(raw, kind))


@pytest.mark.parametrize("kind", KINDS)
def test_q_k_unpermutation_of_a_quantized_matrix_is_that_of_its_floats(kind):
    heads, rows = 3, 48  # 3 heads of 16 rows: pairs (2i, 2i+1) go to (i, i + 8)
    w = gguf_model.block_tensor(blocks(kind, rows, 64, seed=1), kind, rows, 64)
    expected = gguf_model.unpermute_rows(w.dequantize(), heads)
    assert not torch.equal(expected, w.dequantize())  # the order does change
    assert torch.equal(gguf_model.unpermute_matrix(w, heads).dequantize(), expected)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama GGUF with every kind of tensor in TYPES, and its float32 reading."""
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_gguf(path, "llama", seed=5, types=TYPES)
    return path, gguf_model.read_gguf(path).tensors


def test_the_loader_keeps_the_three_block_types_and_reads_the_rest_as_floats(tiny):
    path, floats = tiny
    tensors = gguf_model.read_gguf(path, quantized=True).tensors
    assert set(tensors) == set(floats)
    for name, t in tensors.items():
        kind = next((k for part, k in TYPES.items() if part in name), "F32")
        if kind in KINDS:
            assert isinstance(t, QuantizedTensor) and t.name == kind, name
            # every value as gguf dequantizes it, q/k rows un-permuted alike
            assert torch.equal(t.dequantize(), floats[name]), name
        else:
            assert isinstance(t, torch.Tensor) and t.dtype == torch.float32, name
            assert torch.equal(t, floats[name]), name


def test_the_quantized_q_k_rows_are_unpermuted_as_the_float_ones(tiny):
    path, _ = tiny
    heads = {"q_proj": 4, "k_proj": 2}  # hf_dirs.SHAPE's heads and KV heads
    kept = gguf_model.read_gguf(path, quantized=True, unpermute=False).tensors
    done = gguf_model.read_gguf(path, quantized=True).tensors
    for name in kept:
        part = next((p for p in heads if p in name), None)
        if part:
            expected = gguf_model.unpermute_rows(kept[name].dequantize(), heads[part])
            assert not torch.equal(expected, kept[name].dequantize())
            assert torch.equal(done[name].dequantize(), expected), name


def same(a, b) -> bool:
    """Equal tensors, or QuantizedTensors with equal layouts and parts (dtypes included)."""
    if isinstance(a, QuantizedTensor) or isinstance(b, QuantizedTensor):
        return (type(a) is type(b) and (a.bits, a.group, a.name) == (b.bits, b.group, b.name)
                and all((x is None and y is None) or (x is not None and y is not None and
                        x.dtype == y.dtype and torch.equal(x, y))
                        for x, y in zip((a.q, a.scales, a.zeros, a.mins),
                                        (b.q, b.scales, b.zeros, b.mins))))
    return a.dtype == b.dtype and torch.equal(a, b)


def test_the_cache_written_and_read_back_gives_identical_tensors(tiny, tmp_path, monkeypatch):
    path, floats = tiny
    monkeypatch.setenv(gguf_model.CACHE_ENV, str(tmp_path / "cache"))
    out, _ = gguf_model.resolve_model(str(path), progress=False)
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert QUANTIZED in f.metadata()  # the blocks, not floats, are on disk
    read = gguf_model.read_gguf(path, quantized=True).tensors
    back = load_hf_dir(out, quantized=True).tensors
    assert set(back) == set(read)
    assert [n for n in read if not same(read[n], back[n])] == []
    plain = load_hf_dir(out).tensors  # what every version without quantized weights gets
    assert [n for n in floats if not same(floats[n], plain[n])] == []


def test_an_old_float32_conversion_is_missed_not_misread(tiny, monkeypatch):
    """The cache key covers the conversion's format: format 1 held float32 tensors."""
    key = gguf_model.cache_key(tiny[0])
    monkeypatch.setattr(gguf_model, "FORMAT", 1)
    assert gguf_model.cache_key(tiny[0]) != key


def test_a_plain_hugging_face_directory_reads_the_same_either_way():
    from spec.support.models.fixtures import FIXTURES_DIR

    plain = load_hf_dir(FIXTURES_DIR / "tiny_llama").tensors
    kept = load_hf_dir(FIXTURES_DIR / "tiny_llama", quantized=True).tensors
    assert set(plain) == set(kept) and all(same(plain[n], kept[n]) for n in plain)


# The real file: a few tensors of each type it has (Q4_1 layers, a Q8_0 embedding), some rows.
REAL = ("blk.0.attn_q.weight", "blk.7.ffn_down.weight", "blk.29.attn_k.weight",
        "token_embd.weight")


@pytest.fixture(scope="module")
def real_reader():
    return gguf_model.open_gguf(gguf_model.gguf_path())


@pytest.mark.real_model
@pytest.mark.parametrize("name", REAL)
def test_the_real_files_blocks_dequantize_bit_for_bit_as_gguf_does(real_reader, name):
    t = next(t for t in real_reader.tensors if t.name == name)
    raw, kind = t.data[:256], t.tensor_type.name  # rows are independent: 256 are enough
    assert kind in KINDS
    cols = int(t.shape[0])
    w = gguf_model.block_tensor(raw, kind, raw.shape[0], cols)
    assert torch.equal(w.dequantize(), gguf_dequantized(raw, kind))


@pytest.mark.real_model
def test_the_real_models_cache_holds_its_blocks_and_reads_back_identical(real_reader):
    from spec.support.models import real_model as rm

    read = gguf_model.read_gguf(gguf_model.gguf_path(), quantized=True,
                                reader=real_reader).tensors
    kinds = {getattr(t, "name", None) or str(t.dtype) for t in read.values()}
    assert kinds == {"Q4_1", "Q8_0", "torch.float32"}, kinds
    back = load_hf_dir(rm.model_dir(), quantized=True).tensors
    assert [n for n in read if not same(read[n], back[n])] == []
