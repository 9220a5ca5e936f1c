"""The baseline a user would reach for instead: Hugging Face transformers' `generate`.

Requests are sorted by prompt length and run in left-padded batches of 64, each to the longest
output its batch asks for, eos ignored. Only the tokens the requests asked for count as useful,
so the padding rows a batch drags along cost time and earn nothing.
"""
from __future__ import annotations

import time

import torch

from torchlet.checkpoints import hf_classes, hf_config_dict
from torchlet.contract import Checkpoint

from .drive import progress_bar, sync
from .workloads import Workload


def hf_model(checkpoint: Checkpoint, device: str, dtype):
    cfg = {k: v for k, v in hf_config_dict(checkpoint.config).items()
           if k not in ("architectures", "model_type", "eos_token_id")}
    config_cls, model_cls = hf_classes(checkpoint.config.family)
    with torch.device(device):
        model = model_cls(config_cls(**cfg))
    state = dict(checkpoint.tensors)
    if checkpoint.config.tie_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise RuntimeError(f"HF model doesn't take these tensors: {unexpected} / {missing}")
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None  # eos ignored, as in the workload
    model.generation_config.pad_token_id = 0
    return model


@torch.inference_mode()
def hf_generate_baseline(checkpoint: Checkpoint, workload: Workload, device: str, dtype,
                         batch_size: int = 64, progress: bool = True) -> dict:
    model = hf_model(checkpoint, device, dtype)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    order = sorted(range(workload.num_requests), key=lambda i: len(workload.prompts[i]))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    model.generate(torch.tensor([list(workload.prompts[0][:16])], device=device),
                   max_new_tokens=4, do_sample=False)  # warm-up, as for the engines
    bar = progress_bar(len(batches), progress, "HF generate")
    generated = 0
    sync(device)
    start = time.perf_counter()
    for batch in batches:
        width = max(len(workload.prompts[i]) for i in batch)
        ids = [[0] * (width - len(workload.prompts[i])) + list(workload.prompts[i]) for i in batch]
        mask = [[0] * (width - len(workload.prompts[i])) + [1] * len(workload.prompts[i])
                for i in batch]
        new = max(workload.output_lens[i] for i in batch)
        out = model.generate(torch.tensor(ids, device=device),
                             attention_mask=torch.tensor(mask, device=device),
                             max_new_tokens=new, min_new_tokens=new, do_sample=False)
        generated += (out.shape[1] - width) * len(batch)
        bar.update(1)
    sync(device)
    wall = time.perf_counter() - start
    bar.close()
    useful = workload.output_tokens
    return {"version": "HF transformers generate", "mode": f"batches of {batch_size}",
            "wall_s": wall, "output_tokens": useful, "generated_tokens": generated,
            "output_tok_s": useful / wall,
            "total_tok_s": (workload.prompt_tokens + useful) / wall,
            "peak_memory_mb": torch.cuda.max_memory_allocated() / 1e6
            if device.startswith("cuda") else None,
            "steps": None, "prefill_tokens": None, "decode_tokens": None,
            "ttft_mean_ms": None, "tpot_mean_ms": None}
