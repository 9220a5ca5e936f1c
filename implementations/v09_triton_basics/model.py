"""v08's decoder with its per-token layers on Triton kernels (kernels.py): RMSNorm, RoPE, SwiGLU,
and the residual add fused into the norm that follows it.

TritonOps is v05's ops (PassOps) with those layers overridden; every other function that calls
them (the attention phases) is v05's and earlier, and runs the kernels because it reaches the
layers through self: Qwen3's per-head q/k norm (qk_norm) is the rms_norm kernel over
each head. The decoder is v08's, composing these ops: its passes are unchanged.

The fusion changes the shape of the layer loop. v08 writes each layer as x + attn(norm(x)), then
h + mlp(norm(h)): every residual add is a pass over the stream, and the norm right after it reads
the sum again. Here each add happens inside the next norm (add_rms_norm returns the normalized
sum and the sum): the attention output joins the stream in the post-attention norm, the MLP output
in the next layer's input norm, and the last MLP output in the final norm. forward_layers holds
that loop once, in place of v05's, a layer's part after its attention one method (mlp_sublayer:
two norms and the MLP, which ops with fused kernels can run as fewer launches); the ragged,
prefill and decode passes differ only in their attention.

The kernels take float32, float16 and bfloat16 on a GPU; on CPU only float32, and only under
Triton's interpreter (TRITON_INTERPRET=1, set before triton is imported; it has no bf16). An
engine of another dtype or device (float64, the specs' reference dtype; CPU without the
interpreter) runs the PyTorch functions this class overrides: same maths, no kernel. The choice
is made once, when an engine is built (the decoder's assemble asks for_device), so a layer asks
no tensor which way to go.
"""
from __future__ import annotations

import os
from functools import partial
from typing import Mapping

import torch

from ..v08_paged_gqa_py import PagedAttention, PagedDecoder, PassOps
from . import kernels

__all__ = ["TritonOps", "layers"]


def kernels_take(device, dtype: torch.dtype) -> bool:
    """Whether the kernels run on tensors of this device and dtype: any of their dtypes on a GPU,
    float32 on CPU under the interpreter."""
    if torch.device(device).type == "cuda":
        return dtype in kernels.DTYPES
    return dtype == torch.float32 and os.environ.get("TRITON_INTERPRET") == "1"


class TritonOps(PassOps):
    """v05's ops, the per-token layers and the layer loop on the kernels where they run."""

    # Whether these ops run the kernels: chosen once, for the device and dtype of the engine
    # they serve (for_device), not asked of every tensor. A version's shared `layers` runs
    # PyTorch.
    on_triton = False

    def for_device(self, device, dtype) -> "TritonOps":
        """Ops like these for an engine on this device and dtype: on the kernels where they
        run there (kernels_take); elsewhere every layer is the PyTorch one, rope_qk v05's own."""
        ops = type(self)()
        if kernels_take(device, dtype):
            ops.run_kernels()
        return ops

    def run_kernels(self) -> None:
        """From now on these ops run the kernels: on_triton, and rope_qk bound to its kernel
        path once (by the ops themselves, so a reader finds the binding beside the method)."""
        self.on_triton, self.rope_qk = True, self.rope_qk_kernels

    # --- the per-token layers --------------------------------------------------------------

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """weight * x / sqrt(mean(x^2) + eps), the mean taken in float32: one kernel."""
        if self.on_triton:
            return kernels.rms_norm(x, weight, eps)
        return super().rms_norm(x, weight, eps)

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual): the residual add and the norm after it, one
        pass."""
        if self.on_triton:
            return kernels.add_rms_norm(x, residual, weight, eps)
        total = x + residual
        return super().rms_norm(total, weight, eps), total

    def rope_qk_kernels(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                        theta: float):
        """Phase 3 on the kernels (rope_qk where they run): each head of q and of k turned in
        the rotate_half layout, one kernel each, their cos and sin computed once per pass."""
        cos, sin = self.kernel_cos_sin(positions, q.shape[-1], theta)
        return kernels.rotate(q, cos, sin), kernels.rotate(k, cos, sin)

    def kernel_cos_sin(self, positions: torch.Tensor, head_dim: int, theta: float):
        """The cos and sin [tokens, head_dim / 2] (float32) the RoPE kernel reads, once per
        pass."""
        return self.per_pass(positions, ("half", head_dim, theta),
                             partial(kernels.rope_cos_sin, positions, head_dim, theta))

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up: one kernel instead of silu, then a multiply."""
        if self.on_triton:
            return kernels.swiglu(gate, up)
        return torch.nn.functional.silu(gate) * up

    # Each row's index of its largest logit, the greedy draw: torch's here (v09 writes no kernel
    # for it). A sampler draws greedy tokens through it, so ops with a kernel for it swap it in.
    argmax = staticmethod(partial(torch.argmax, dim=-1))

    def mlp(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """down(swiglu(gate(x), up(x)))."""
        return self.linear(self.swiglu(self.linear(x, w, "mlp.gate_proj"),
                                       self.linear(x, w, "mlp.up_proj")), w, "mlp.down_proj")

    # --- the layer loop ---------------------------------------------------------------------

    def forward_layers(self, weights, x: torch.Tensor, attend) -> torch.Tensor:
        """Embedded rows x through every layer and the final norm as one pass (v05's: the
        rotation's angles once), each residual add fused into the norm after it. attend(h, i) is
        layer i's attention output on its normed input h."""
        eps, layers = weights.config.rms_eps, weights.layers
        # The norm each layer's MLP output meets: the next layer's input norm, the last the final.
        after = [w["input_layernorm.weight"] for w in layers[1:]] + [weights.norm]
        with self.one_pass():
            h = self.rms_norm(x, layers[0]["input_layernorm.weight"] if layers else weights.norm,
                              eps)
            residual = x
            for i, w in enumerate(layers):
                h, residual = self.mlp_sublayer(attend(h, i), residual, w, after[i], eps)
            return self.settle(h)

    def settle(self, h):
        """The last layer's output as the tensor the LM head reads: h itself here. (Ops whose
        MLP sublayer hands the next layer's attention a row it forms itself make it one.)"""
        return h

    def mlp_sublayer(self, attended: torch.Tensor, residual: torch.Tensor,
                     w: Mapping[str, torch.Tensor], norm_after: torch.Tensor, eps: float):
        """A layer after its attention: the attention's output added to the stream and normed,
        the MLP on that, and its output added to the stream and normed by norm_after (what
        follows: the next layer's input norm, or the final one). -> (normed, stream)."""
        h, residual = self.add_rms_norm(attended, residual, w["post_attention_layernorm.weight"],
                                        eps)
        return self.add_rms_norm(self.mlp(h, w), residual, norm_after, eps)

layers = PagedDecoder()  # v08's decoder, composing this version's ops and memory
layers.ops, layers.Memory = TritonOps(), PagedAttention
