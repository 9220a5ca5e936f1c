"""QuantizedTensors in a safetensors file: how the model cache keeps GGUF blocks as they are.

safetensors holds plain tensors only, so a QuantizedTensor under the name N is stored as its
parts, each a plain tensor:

    N.q       int8 [rows, cols] (8-bit) or uint8 [rows, cols // 2] (4-bit, GGUF's nibble order)
    N.scales  float16 [rows, cols // group]
    N.zeros   uint8 [rows, cols // group]      only where the format has zeros (Q4_0: 8)
    N.mins    float16 [rows, cols // group]    only where the format has mins (Q4_1)

and the file's metadata key QUANTIZED holds JSON {N: {"bits": 4, "group": 32, "name": "Q4_1"},
...}: which names are quantized, and what their parts cannot say. Every other tensor is stored
under its own name as usual. A file without the key (any Hugging Face checkpoint) is read as
plain tensors, exactly as before; a file with it is not a Hugging Face checkpoint any more
(transformers' from_pretrained does not know the parts), which is why the readers that want a
transformers model build it from load_hf_dir's float tensors instead.
"""
from __future__ import annotations

import json

import torch

from torchlet.contract import CheckpointError, QuantizedTensor

QUANTIZED = "torchlet.quantized"  # the metadata key; its absence means a plain checkpoint
PARTS = ("q", "scales", "zeros", "mins")


def flatten(tensors: dict) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(plain tensors, metadata) to write with safetensors' save_file."""
    flat, layouts = {}, {}
    for name, t in tensors.items():
        if isinstance(t, QuantizedTensor):
            layouts[name] = {"bits": t.bits, "group": t.group, "name": t.name}
            for part in PARTS:
                if getattr(t, part) is not None:  # save_file wants each part its own storage
                    flat[f"{name}.{part}"] = getattr(t, part).contiguous()
        else:
            flat[name] = t
    metadata = {"format": "pt"}
    if layouts:
        metadata[QUANTIZED] = json.dumps(layouts, sort_keys=True)
    return flat, metadata


def unflatten(flat: dict[str, torch.Tensor], metadata: dict | None, where: str) -> dict:
    """flatten backwards: QuantizedTensors rebuilt from their parts, other tensors as they are.
    A damaged layout is a CheckpointError naming `where`."""
    raw = (metadata or {}).get(QUANTIZED)
    if raw is None:
        return dict(flat)
    try:
        layouts = json.loads(raw)
        owned = {f"{n}.{p}" for n in layouts for p in PARTS}
        tensors = {k: v for k, v in flat.items() if k not in owned}
        for name, layout in layouts.items():
            parts = {p: flat.get(f"{name}.{p}") for p in PARTS}
            for needed in ("q", "scales"):  # the others are optional by format
                if parts[needed] is None:
                    raise KeyError(f"{name}.{needed}")
            tensors[name] = QuantizedTensor(bits=int(layout["bits"]), group=int(layout["group"]),
                                            name=str(layout.get("name", "")), **parts)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        # bad JSON, a part missing, a part of the wrong shape or dtype (QuantizedTensor's check)
        raise CheckpointError(f"{where}: a quantized tensor's parts are damaged: {e}") from None
    return tensors
