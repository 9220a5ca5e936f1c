"""Tiny checkpoint directories as a user's `--model DIR` would be: config.json, model.safetensors
and (optionally) a tokenizer, written by Hugging Face's own `save_pretrained` (save_tiny), or
without building Hugging Face's model (ascii_chat_dir: its first import costs about 4 s)."""
from __future__ import annotations

from pathlib import Path

import torch

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
VOCAB = len(SPECIALS) + 256  # the byte tokenizer's ids, no more: every id decodes
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=128, rms_norm_eps=1e-6)


def hf_model(family: str, seed: int = 0, **overrides):
    """A random tiny Qwen2 (qkv bias, tied), Llama (no bias, untied) or Qwen3 (per-head q/k
    norms, heads of 32 on a hidden size of 64, no bias, tied) CausalLM. Every parameter is
    redrawn from a seeded generator: HF's init leaves biases at 0 and norms at 1."""
    import transformers

    torch.manual_seed(seed)
    if family == "qwen2":
        config = transformers.Qwen2Config(**{**SHAPE, "rope_theta": 10000.0,
                                             "tie_word_embeddings": True, **overrides})
        model = transformers.Qwen2ForCausalLM(config)
    elif family == "qwen3":
        config = transformers.Qwen3Config(**{**SHAPE, "head_dim": 32, "rope_theta": 1000000.0,
                                             "tie_word_embeddings": True, **overrides})
        model = transformers.Qwen3ForCausalLM(config)
    else:
        config = transformers.LlamaConfig(**{**SHAPE, "rope_theta": 50000.0,
                                             "tie_word_embeddings": False, **overrides})
        model = transformers.LlamaForCausalLM(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    model.config._attn_implementation = "eager"
    return model.eval()


def byte_tokenizer():
    """A byte-level tokenizer of 259 ids (256 bytes + 3 specials) with a ChatML template: small
    enough for a tiny vocabulary, real enough to encode any text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):  # a set: its order varies by run
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", unk_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def printable_only(model) -> None:
    """Zeroes the output rows of every id but the byte tokenizer's printable ASCII characters
    (an untied model): its greedy answers are then text a terminal shows as it is, and two
    answers that differ in tokens differ on screen (a random model's bytes decode mostly to
    U+FFFD). The largest of ~95 random logits is above the zeroed ones' 0."""
    with torch.no_grad():
        model.get_output_embeddings().weight[~printable_rows()] = 0.0


def printable_rows() -> torch.Tensor:
    """True at the byte tokenizer's ids that decode to one printable ASCII character."""
    tokenizer = byte_tokenizer()
    shown = [i for i in range(VOCAB)
             if len(t := tokenizer.decode([i])) == 1 and t.isascii() and t.isprintable()]
    rows = torch.zeros(VOCAB, dtype=torch.bool)
    rows[shown] = True
    return rows


def ascii_chat_dir(out: Path, seed: int = 5) -> Path:
    """A tiny Llama with the byte tokenizer and its chat template that answers in printable
    ASCII (printable_only), one character per token, written from the fixtures' own random
    tensors (fixtures/make_fixtures.py). Returns out."""
    import json

    from safetensors.torch import save_file

    from fixtures.make_fixtures import random_tensors
    from torchlet.checkpoints import hf_config_dict
    from torchlet.contract import ModelConfig

    config = ModelConfig(
        vocab_size=VOCAB, hidden_size=SHAPE["hidden_size"],
        intermediate_size=SHAPE["intermediate_size"], num_layers=SHAPE["num_hidden_layers"],
        num_heads=SHAPE["num_attention_heads"], num_kv_heads=SHAPE["num_key_value_heads"],
        head_dim=SHAPE["head_dim"], max_position=SHAPE["max_position_embeddings"],
        rope_theta=50000.0, rms_eps=SHAPE["rms_norm_eps"], family="llama",
        eos_token_ids=(SPECIALS.index("<|im_end|>"),))
    tensors = random_tensors(config, seed)
    tensors["lm_head.weight"][~printable_rows()] = 0.0
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(hf_config_dict(config), indent=2) + "\n")
    save_file(tensors, str(out / "model.safetensors"))
    byte_tokenizer().save_pretrained(str(out))
    return out


def save_tiny(out: Path, family: str, *, tokenizer: bool = False, seed: int = 0,
              printable: bool = False, **overrides):
    """Write a tiny checkpoint with save_pretrained; returns the HF model that wrote it.
    printable: answers in printable ASCII only (printable_only; a llama, whose output layer is
    its own)."""
    eos = {"eos_token_id": SPECIALS.index("<|im_end|>")}
    model = hf_model(family, seed, **{**eos, **overrides})
    if printable:
        assert not model.config.tie_word_embeddings, "the output rows are the embeddings' too"
        printable_only(model)
    model.save_pretrained(str(out))
    if tokenizer:
        byte_tokenizer().save_pretrained(str(out))
    return model
