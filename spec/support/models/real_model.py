"""The real default model (SmolLM2-135M-Instruct) for the specs: converted once (cached on disk by
torchlet.gguf_model), loaded once per worker, with its oracle and reference answers cached too."""
from __future__ import annotations

import functools

import torch

from spec.support.oracles.oracle import Reference
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import Checkpoint

# Chosen because the oracle's top-1/top-2 gap stays above MARGIN over all NEW_TOKENS (eos
# ignored); prompts such as "Write one sentence about the sea." fall under it by the 6th token.
CHAT_PROMPTS = (
    "What is the capital of France?",
    "What is 2+2?",
    "Give me a short tip for staying healthy.",
)
NEW_TOKENS = 12
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
def stored_checkpoint() -> Checkpoint:
    """The model as the cache stores it: its GGUF blocks as QuantizedTensors (what a version
    with quantized_weights is handed by the CLI); checkpoint() is the same, dequantized."""
    return load_hf_dir(model_dir(), quantized=True)


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
    """Hugging Face's own LlamaForCausalLM with the converted directory's config and weights.
    The directory's model.safetensors holds GGUF's quantized blocks, which transformers cannot
    read, so the weights are load_hf_dir's dequantized float32 tensors (the same values the
    versions get), copied: from_pretrained would keep the very tensors, and an engine that wrote
    into its weights would then change the oracle too. from_pretrained with a state_dict still
    skips the random init that building the model by hand costs, seconds at this size."""
    import transformers

    config = transformers.LlamaConfig.from_pretrained(str(model_dir()))
    weights = {name: t.clone() for name, t in checkpoint().tensors.items()}
    return transformers.LlamaForCausalLM.from_pretrained(
        None, config=config, state_dict=weights, dtype=dtype, attn_implementation="eager").eval()


@functools.lru_cache(maxsize=None)
def reference(text: str, new_tokens: int = NEW_TOKENS) -> Reference:
    """The oracle's greedy answer to one chat prompt, eos ignored, with its top-1/top-2 gaps.
    Decoded with HF's KV cache: a full-recompute oracle costs too much at 135M parameters."""
    model, prompt = oracle(), list(chat_ids(text))
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0, output_logits=True,
                             return_dict_in_generate=True)
        tokens = out.sequences[0, len(prompt):].tolist()
        top2 = torch.cat(out.logits).float().topk(2, dim=-1).values
        logits = model(torch.tensor([prompt + tokens[:-1]])).logits[0].float()
    return Reference(tokens, (top2[:, 0] - top2[:, 1]).tolist(), logits)


def answer(tokens) -> str:
    return tokenizer().decode(list(tokens), skip_special_tokens=True)
