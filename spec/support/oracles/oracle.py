"""The oracle: Hugging Face transformers' own Qwen2/Llama/Qwen3 modules, loaded with the same
tensors.
Golden tokens come from here, never from the code under test."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from torchlet.checkpoints import hf_classes, hf_config_dict
from torchlet.contract import Checkpoint


def hf_model(checkpoint: Checkpoint, dtype=torch.float64):
    """A transformers CausalLM (eager attention) holding the checkpoint's tensors."""
    cfg = hf_config_dict(checkpoint.config)
    config_cls, model_cls = hf_classes(checkpoint.config.family)
    config = config_cls(**{k: v for k, v in cfg.items()
                           if k not in ("architectures", "model_type")})
    config._attn_implementation = "eager"
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
def greedy(model, prompt: list[int], max_new_tokens: int, stop_below: float = 0.0) -> Reference:
    """Greedy decoding with the oracle's own KV cache, in the oracle's dtype. Stops early once
    the top-1/top-2 gap falls below `stop_below` (used when screening prompts)."""
    seq = list(prompt)
    gaps = []
    past, feed = None, seq
    for _ in range(max_new_tokens):
        out = model(torch.tensor([feed]), past_key_values=past, use_cache=True)
        past, last = out.past_key_values, out.logits[0, -1]
        top2 = last.topk(2).values
        gaps.append(float(top2[0] - top2[1]))
        seq.append(int(last.argmax()))
        feed = seq[-1:]
        if gaps[-1] < stop_below:
            break
    logits = model(torch.tensor([seq[:-1]])).logits[0]
    return Reference(seq[len(prompt):], gaps, logits.float())


@functools.lru_cache(maxsize=8)
def cached_model(fixture: str, dtype=torch.float64):
    from spec.support.models.fixtures import tiny_checkpoint
    return hf_model(tiny_checkpoint(fixture), dtype)


class HFLayers:
    """The oracle's building blocks on one sequence, with the shapes of the `Layers` protocol."""

    def __init__(self, model):
        self.model = model
        self.inner = model.model
        self.family = model.config.model_type

    def _rope_module(self):
        import importlib
        return importlib.import_module(f"transformers.models.{self.family}.modeling_{self.family}")

    def cos_sin(self, x: torch.Tensor, positions: torch.Tensor):
        return self.inner.rotary_emb(x[None], positions[None])

    def apply_rope(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        """q, k [T, heads, D] -> rotated, via transformers' apply_rotary_pos_emb."""
        cos, sin = self.cos_sin(q, positions)
        q2, k2 = self._rope_module().apply_rotary_pos_emb(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
        return q2[0].transpose(0, 1), k2[0].transpose(0, 1)

    @staticmethod
    def causal_mask(t: int, dtype) -> torch.Tensor:
        mask = torch.full((t, t), torch.finfo(dtype).min, dtype=dtype).triu(1)
        return mask[None, None]

    def attention(self, i: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        attn = self.inner.layers[i].self_attn
        out, _ = attn(x[None], self.cos_sin(x, positions), self.causal_mask(len(x), x.dtype))
        return out[0]

    def mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return self.inner.layers[i].mlp(x[None])[0]

    def decoder_layer(self, i: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        layer = self.inner.layers[i]
        return layer(x[None], attention_mask=self.causal_mask(len(x), x.dtype),
                     position_ids=positions[None],
                     position_embeddings=self.cos_sin(x, positions))[0]

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.norm(x)

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        return self.model(torch.tensor([token_ids])).logits[0]
