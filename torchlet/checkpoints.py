"""Checkpoints in, `Checkpoint` out: Hugging Face directories (Qwen2/Llama/Qwen3) and the default
SmolLM2 model shipped as GGUF. Formats stop here; engines see only plain tensors."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from torchlet.contract import Checkpoint, CheckpointError, ModelConfig

FAMILIES = {"Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}


def config_from_hf(cfg: dict) -> ModelConfig:
    """ModelConfig from a Hugging Face config.json dict of the Qwen2, Llama or Qwen3 family.
    Qwen3's head_dim is declared (not hidden / heads) and it norms each head's q and k."""
    arch = (cfg.get("architectures") or [""])[0]
    family = FAMILIES.get(arch) or {f: f for f in FAMILIES.values()}.get(cfg.get("model_type"))
    if family is None:
        raise CheckpointError(
            f"unsupported model family {arch or cfg.get('model_type')!r}: expected one of "
            f"{sorted(FAMILIES)}")
    check_supported(cfg)
    try:
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        return ModelConfig(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            max_position=cfg.get("max_position_embeddings", 2048),
            rope_theta=float(cfg.get("rope_theta")
                             or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)),
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            qkv_bias=family == "qwen2" or bool(cfg.get("attention_bias", False)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            family=family,
            qk_norm=family == "qwen3",
            eos_token_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]),
        )
    except KeyError as e:
        raise CheckpointError(f"config.json lacks the field {e.args[0]!r}") from None


def check_supported(cfg: dict) -> None:
    """Refuse the variants of the families that our decoder does not implement: silently
    ignoring them would give wrong tokens, not an error."""
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rope_type = rope.get("rope_type") or rope.get("type") or "default"
    if rope_type != "default":
        raise CheckpointError(
            f"unsupported RoPE scaling {rope_type!r}: only plain RoPE is implemented")
    if cfg.get("use_sliding_window"):
        raise CheckpointError("unsupported sliding-window attention (use_sliding_window is true)")
    if cfg.get("mlp_bias"):
        raise CheckpointError("unsupported MLP biases (mlp_bias is true)")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(
            f"unsupported activation {act!r}: only SwiGLU with silu is implemented")


def hf_config_dict(config: ModelConfig) -> dict:
    """The config.json that describes `config` to Hugging Face."""
    arch = {v: k for k, v in FAMILIES.items()}[config.family]
    d = {
        "architectures": [arch], "model_type": config.family,
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim, "max_position_embeddings": config.max_position,
        "rope_theta": config.rope_theta, "rms_norm_eps": config.rms_eps,
        "tie_word_embeddings": config.tie_embeddings, "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    if config.eos_token_ids:
        d["eos_token_id"] = list(config.eos_token_ids)
    if config.family == "llama":
        d.update(attention_bias=config.qkv_bias, mlp_bias=False)
    if config.family == "qwen3":
        d.update(attention_bias=config.qkv_bias)
    return d


def hf_classes(family: str):
    """transformers' config and CausalLM classes of a family: the writer a checkpoint is
    checked against (the specs' oracle, the benchmark's baseline)."""
    import transformers

    arch = {v: k for k, v in FAMILIES.items()}[family]
    return getattr(transformers, arch.replace("ForCausalLM", "Config")), getattr(transformers, arch)


def load_hf_dir(path: str | Path, quantized: bool = False) -> Checkpoint:
    """Read config.json and every *.safetensors file of a local Hugging Face checkpoint. A file
    that holds quantized matrices (the model cache's GGUF conversions: torchlet/quantized_files.py)
    gives them as float32, dequantized (about a second for SmolLM2), unless `quantized`, which
    keeps them as QuantizedTensors for a version that computes with them."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    from torchlet.contract import dequantized
    from torchlet.quantized_files import unflatten

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    config_file = path / "config.json"
    if not config_file.exists():
        raise CheckpointError(f"{path} has no config.json: not a Hugging Face checkpoint")
    try:
        cfg = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{config_file} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{config_file} is not a JSON object")
    config = config_from_hf(cfg)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path} has no *.safetensors weights")
    tensors: dict = {}
    for f in files:
        try:
            with safe_open(str(f), "pt") as header:  # reads the header only
                metadata = header.metadata()
            tensors.update(unflatten(load_file(str(f)), metadata, str(f)))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{f} is corrupt or unreadable: {e}") from None
    if not quantized:
        tensors = dequantized(tensors)
    check_tensors(config, tensors, str(path))
    return Checkpoint(config, tensors)


def self_draft(checkpoint: Checkpoint, layers: int) -> Checkpoint:
    """A draft model made of the target itself: its config with num_layers=layers, and its
    tensors of the first `layers` layers with the embedding, final norm and LM head (the same
    tensor objects: no copy). A self-draft needs no second model and shares the vocabulary by
    construction; how often its guesses are the full model's is what a run measures. Refused
    unless 1 <= layers < the target's layers (all of them would be the target again)."""
    total = checkpoint.config.num_layers
    if not 1 <= layers < total:
        raise CheckpointError(f"a self-draft keeps at least 1 and fewer than all {total} of "
                              f"the model's layers, got {layers}")
    kept = {f"model.layers.{i}." for i in range(layers)}
    tensors = {name: t for name, t in checkpoint.tensors.items()
               if not name.startswith("model.layers.") or name.startswith(tuple(kept))}
    return Checkpoint(dataclasses.replace(checkpoint.config, num_layers=layers), tensors)


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    c, d = config, config.head_dim
    shapes = {"model.embed_tokens.weight": (c.vocab_size, c.hidden_size),
              "model.norm.weight": (c.hidden_size,)}
    if not c.tie_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, c.hidden_size)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (c.hidden_size,),
            p + "post_attention_layernorm.weight": (c.hidden_size,),
            p + "self_attn.q_proj.weight": (c.num_heads * d, c.hidden_size),
            p + "self_attn.k_proj.weight": (c.num_kv_heads * d, c.hidden_size),
            p + "self_attn.v_proj.weight": (c.num_kv_heads * d, c.hidden_size),
            p + "self_attn.o_proj.weight": (c.hidden_size, c.num_heads * d),
            p + "mlp.gate_proj.weight": (c.intermediate_size, c.hidden_size),
            p + "mlp.up_proj.weight": (c.intermediate_size, c.hidden_size),
            p + "mlp.down_proj.weight": (c.hidden_size, c.intermediate_size),
        })
        if c.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (d,),
                           p + "self_attn.k_norm.weight": (d,)})
        if c.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (c.num_heads * d,),
                           p + "self_attn.k_proj.bias": (c.num_kv_heads * d,),
                           p + "self_attn.v_proj.bias": (c.num_kv_heads * d,)})
    return shapes


def check_tensors(config: ModelConfig, tensors: dict, where: str) -> None:
    """Every tensor the config implies is there with its shape."""
    for name, shape in expected_shapes(config).items():
        if name not in tensors:
            raise CheckpointError(f"{where}: missing tensor {name}")
        if tuple(tensors[name].shape) != shape:
            raise CheckpointError(
                f"{where}: tensor {name} has shape {tuple(tensors[name].shape)}, expected {shape}")
