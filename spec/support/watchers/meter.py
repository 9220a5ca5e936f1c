"""A token meter: counts the token rows each decoder layer is fed, measured from the matmuls the
engine actually runs, not from what it claims to run.

Every token a layer processes goes through that layer's k_proj, once. So the rows of the matmuls
against a layer's k_proj weight are the tokens that layer was fed. The meter watches aten ops
with a TorchDispatchMode, below any nn.Module, so it works on engines built from plain functions.

A k_proj weight has shape [num_kv_heads * head_dim, hidden]. That shape is not unique in a
checkpoint (v_proj has it too), so the meter recognises a k_proj weight by its values: it asserts
that each layer's k_proj differs from every other tensor of that shape, then matches an operand
of that shape (or its transpose) by equality, in the operand's own dtype. A version that stacks
q, k and v into one matrix (v13) multiplies by the stack: its middle rows are the k_proj.

Which tokens a pass was fed is seen where it takes them in: its row lookup into the embedding
table (allocations.looked_up), one per pass.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchlet.contract import Checkpoint

from .allocations import looked_up

aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
           aten.linear.default, aten.matmul.default}


class TokenMeter(TorchDispatchMode):
    """`with TokenMeter(ckpt) as meter: engine.generate(...)`, then read `meter.calls`,
    `meter.passes()`, `meter.fed()` or `meter.total(layer)`."""

    def __init__(self, checkpoint: Checkpoint):
        super().__init__()
        cfg = checkpoint.config
        self.shape = (cfg.num_kv_heads * cfg.head_dim, cfg.hidden_size)
        self.q_rows = cfg.num_heads * cfg.head_dim
        self.packed = (self.q_rows + 2 * self.shape[0], cfg.hidden_size)
        self.num_layers = cfg.num_layers
        self.table_shape = (cfg.vocab_size, cfg.hidden_size)
        self.lookups: list[torch.Tensor] = []  # the ids of each embedding lookup, in order
        self.k_proj = [checkpoint.tensors[f"model.layers.{i}.self_attn.k_proj.weight"]
                       for i in range(cfg.num_layers)]
        same_shape = [t for t in checkpoint.tensors.values() if tuple(t.shape) == self.shape]
        for i, k in enumerate(self.k_proj):
            twins = [t for t in same_shape if t is not k and torch.equal(t, k)]
            assert not twins, f"layer {i}'s k_proj equals another tensor: the meter can't tell"
        self.calls: list[tuple[int, int]] = []  # (layer, token rows), in the order they ran

    def _layer_of(self, operand) -> int | None:
        if not isinstance(operand, torch.Tensor) or operand.dim() not in (2, 3):
            return None
        w = operand[0] if operand.dim() == 3 and operand.shape[0] == 1 else operand
        if w.dim() != 2:
            return None
        if w.shape[1] != self.shape[1] and w.shape[0] == self.shape[1]:
            w = w.T
        if tuple(w.shape) == self.packed:  # [q | k | v] stacked (v13): k_proj is its middle
            w = w[self.q_rows:self.q_rows + self.shape[0]]
        elif tuple(w.shape) != self.shape:
            return None
        for i, k in enumerate(self.k_proj):
            if torch.equal(w, k.to(device=w.device, dtype=w.dtype)):
                return i
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        index = looked_up(func, args, self.table_shape)
        if index is not None:
            self.lookups.append(index.detach().clone())  # read once the run is over
        elif func in MATMULS:
            operands = [a for a in args if isinstance(a, torch.Tensor)]
            if func in (aten.addmm.default, aten.baddbmm.default):
                operands = operands[1:]  # the first is the bias
            for j, operand in enumerate(operands[:2]):
                layer = self._layer_of(operand)
                if layer is not None:
                    other = operands[1 - j]
                    # The other operand holds the tokens: all its dims but the contracted one.
                    contracted = -1 if j == 1 else -2
                    rows = other.numel() // other.shape[contracted]
                    self.calls.append((layer, rows))
                    break
        return func(*args, **kwargs)

    def passes(self) -> list[list[int]]:
        """Rows per layer of each forward pass, a pass being one run through layers 0..L-1."""
        out: list[list[int]] = []
        for layer, rows in self.calls:
            if layer == 0:
                out.append([])
            assert out and len(out[-1]) == layer, f"layer {layer} ran out of order: {self.calls}"
            out[-1].append(rows)
        assert all(len(p) == self.num_layers for p in out), f"an incomplete pass: {out}"
        return out

    def fed(self) -> list[list[int]]:
        """The token ids each forward pass took in, pass by pass as in passes()."""
        fed = [ids.flatten().tolist() for ids in self.lookups]
        assert len(fed) == len(self.passes()), f"{len(fed)} lookups for {len(self.passes())} passes"
        return fed

    def total(self, layer: int = 0) -> int:
        """Token rows fed to one layer over everything metered."""
        return sum(rows for i, rows in self.calls if i == layer)
