"""How close v18's formats stay to the default model's float weights (its Q4_1 blocks
dequantized): top-1 agreement and mean KL at every distinct position of the chat prompts and the
oracle's answers, for int8 and int4 at groups of 32, 64 and 128, and for int8 with one scale a
matrix (the per-tensor mutant's breakage).
Run: PYTHONPATH=. python docs/probes/quantized_accuracy.py"""
from __future__ import annotations

import dataclasses

import torch

import implementations
from spec.support.models import real_model as rm
from spec.support.models.quantized import agreement
from torchlet.contract import QuantizedTensor


def per_tensor(w: torch.Tensor) -> QuantizedTensor:
    scale = (w.abs().amax() / 127).to(torch.float16)
    q = torch.round(w / scale.float()).clamp(-127, 127).to(torch.int8)
    return QuantizedTensor(8, q, scale.expand(w.shape[0], 1).contiguous(), w.shape[1])


def main() -> None:
    v18 = next(v for v in implementations.discover() if v.name.startswith("v18"))
    ckpt = rm.checkpoint()
    sequences = [list(rm.chat_ids(p)) + rm.reference(p).tokens for p in rm.CHAT_PROMPTS]
    base = v18.build(ckpt, weights="float", max_model_len=512)
    reference = [base.logits(s).double() for s in sequences]
    print("| weights | positions | top-1 agreement | mean KL |\n|---|---|---|---|")
    runs = [("int8 per channel", dict(weights="int8"))] + [
        (f"int4 groups of {g}", dict(weights="int4", group_size=g)) for g in (32, 64, 128)]
    for name, options in runs:
        engine = v18.build(ckpt, max_model_len=512, **options)
        n, agree, kl = agreement(engine, reference, sequences)
        print(f"| {name} | {n} | {agree:.4f} | {kl:.5f} |")
    flat = dataclasses.replace(ckpt, tensors={k: per_tensor(t) if t.dim() == 2 else t
                                              for k, t in ckpt.tensors.items()})
    n, agree, kl = agreement(v18.build(flat, max_model_len=512), reference, sequences)
    print(f"| int8, one scale a matrix | {n} | {agree:.4f} | {kl:.5f} |")


if __name__ == "__main__":
    main()
