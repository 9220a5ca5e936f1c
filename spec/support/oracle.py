"""The oracle: Hugging Face transformers' own Qwen2/Llama modules, loaded with the same tensors.
Golden tokens come from here, never from the code under test."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from torchlet.checkpoints import hf_config_dict
from torchlet.contract import Checkpoint


def hf_model(checkpoint: Checkpoint, dtype=torch.float64):
    """A transformers CausalLM (eager attention) holding the checkpoint's tensors."""
    import transformers

    cfg = hf_config_dict(checkpoint.config)
    config_cls = transformers.Qwen2Config if checkpoint.config.family == "qwen2" \
        else transformers.LlamaConfig
    config = config_cls(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    config._attn_implementation = "eager"
    model_cls = transformers.Qwen2ForCausalLM if checkpoint.config.family == "qwen2" \
        else transformers.LlamaForCausalLM
    model = model_cls(config)
    state = dict(checkpoint.tensors)
    if checkpoint.config.tie_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert not [m for m in missing if "rotary" not in m], missing
    return model.to(dtype).eval()


@dataclass
class Reference:
    """Greedy tokens of the oracle and the top-1/top-2 logit gap at each step."""

    tokens: list[int]
    gaps: list[float]
    logits: torch.Tensor  # [len(prompt) + len(tokens) - 1, vocab] of the whole sequence

    def horizon(self, margin: float) -> int:
        """How many leading tokens the reference chose with a gap of at least `margin`."""
        for i, gap in enumerate(self.gaps):
            if gap < margin:
                return i
        return len(self.gaps)


@torch.inference_mode()
def greedy(model, prompt: list[int], max_new_tokens: int) -> Reference:
    """Greedy decoding by full recompute, in the oracle's dtype; no cache, nothing clever."""
    seq = list(prompt)
    gaps = []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([seq])).logits[0]
        top2 = logits[-1].topk(2).values
        gaps.append(float(top2[0] - top2[1]))
        seq.append(int(logits[-1].argmax()))
    logits = model(torch.tensor([seq[:-1]])).logits[0]
    return Reference(seq[len(prompt):], gaps, logits.float())


@functools.lru_cache(maxsize=8)
def cached_model(fixture: str, dtype=torch.float64):
    from spec.support.models import tiny_checkpoint
    return hf_model(tiny_checkpoint(fixture), dtype)
