"""Tiny GGUF files written with the `gguf` package's own writer, laid out as llama.cpp's
converter lays out a Hugging Face model: its tensor names, Llama's q/k rows permuted, the byte
tokenizer and chat template as metadata. What `--model FILE.gguf` would be given."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from spec.support.models.hf_dirs import SPECIALS, byte_tokenizer, hf_model

CONTROL, NORMAL = 3, 1  # llama.cpp's token types


def llama_cpp_permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """What llama.cpp's converter does to q/k rows (convert_hf_to_gguf.py, LlamaModel.permute)."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(name: str) -> str:
    """llama.cpp's name for a Hugging Face tensor name: gguf_model.hf_name backwards."""
    from torchlet.gguf_model import GLOBAL_NAMES, LAYER_NAMES

    layer = re.match(r"model\.layers\.(\d+)\.(.+)$", name)
    if layer is None:
        return {hf: gg for gg, hf in GLOBAL_NAMES.items()}[name]
    return f"blk.{layer[1]}." + {hf: gg for gg, hf in LAYER_NAMES.items()}[layer[2]]


def write_gguf(path: Path, family: str = "llama", seed: int = 0, arch: str | None = None,
               types: dict[str, str] | None = None):
    """Write a tiny random model of `family` as a float32 GGUF file; returns the HF model. `arch`
    overrides the architecture the file states (to write one Torchlet does not read). `types`
    stores the tensors whose Hugging Face name contains a key in that GGUF type instead
    ({"q_proj": "Q4_1", "embed_tokens": "Q8_0"}), quantized by gguf's own quantizer as
    llama.cpp's converter does; the returned model keeps the float weights."""
    import gguf

    model, tok = hf_model(family, seed, eos_token_id=SPECIALS.index("<|im_end|>")), byte_tokenizer()
    c, arch = model.config, arch or family
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([CONTROL if t in SPECIALS else NORMAL for t in tokens])
    w.add_token_scores([0.0] * len(tokens))  # no merges: a byte-level vocabulary has none
    w.add_eos_token_id(c.eos_token_id)
    w.add_chat_template(tok.chat_template)
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if family == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            p = llama_cpp_permute(p, c.num_attention_heads if "q_proj" in name
                                  else c.num_key_value_heads)
        kind = next((t for part, t in (types or {}).items() if part in name), "F32")
        if kind == "F32":
            w.add_tensor(gguf_name(name), p.float().numpy())
        else:
            qtype = gguf.GGMLQuantizationType[kind]
            data = p.float().numpy()
            w.add_tensor(gguf_name(name), gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model
