"""The real default model (SmolLM2-135M-Instruct) for the specs: converted once (cached on disk by
torchlet.gguf_model), loaded once per worker, with its oracle and reference answers cached too."""
from __future__ import annotations

import functools

import torch

from spec.support.oracle import Reference, greedy, hf_model
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import Checkpoint

CHAT_PROMPTS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
)
NEW_TOKENS = 16
# Top-1/top-2 logit gap below which a float32 runtime may legitimately pick the other token.
# Float32 logits of a correct runtime differ from the oracle's by about 1e-4 on this model, and
# the two reference dtypes agree to that order too; 0.05 leaves a wide safety factor.
MARGIN = 0.05
MIN_HORIZON = 8


@functools.lru_cache(maxsize=None)
def model_dir():
    from torchlet.gguf_model import default_model_dir
    return default_model_dir(progress=False)


@functools.lru_cache(maxsize=None)
def checkpoint() -> Checkpoint:
    return load_hf_dir(model_dir())


@functools.lru_cache(maxsize=None)
def tokenizer():
    from torchlet.text import load_tokenizer
    return load_tokenizer(model_dir())


@functools.lru_cache(maxsize=None)
def chat_ids(text: str) -> tuple[int, ...]:
    from torchlet.text import prompt_ids
    return tuple(prompt_ids(tokenizer(), text))


@functools.lru_cache(maxsize=None)
def oracle(dtype=torch.float32):
    return hf_model(checkpoint(), dtype)


@functools.lru_cache(maxsize=None)
def reference(text: str, new_tokens: int = NEW_TOKENS) -> Reference:
    """The oracle's greedy answer to one chat prompt, with its top-1/top-2 gaps."""
    return greedy(oracle(), list(chat_ids(text)), new_tokens)


def answer(tokens) -> str:
    return tokenizer().decode(list(tokens), skip_special_tokens=True)
