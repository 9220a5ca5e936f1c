"""The decoder with fewer, larger kernels. Four places in a layer read one input and launch
several kernels where one would do:

- q, k and v are three GEMMs over the same normed rows: here one GEMM over their weights stacked
  ([q | k | v] rows, packed once at load), whose output row is [q heads | k heads | v heads];
- RoPE then ran one kernel for q and one for k: here one kernel (rope_split) turns q and k and
  lays out v, straight from the packed row;
- the K/V store then read k and v back to copy them into their cache slots: here rope_split
  writes them there too (the memory's passes ask the ops' qkv_heads_stored, kernel_split_stores);
  at one row the q/k/v gemv itself turns, splits and stores (gemv_rope_split), one launch for
  the three;
- gate and up are two GEMMs over the same rows: here one over [gate | up], and SwiGLU reads both
  halves of its output row (swiglu_packed).

At one row (a batch-1 decode step) a product is a read of its weights, which cuBLAS's tiles do
slowly for small matrices: there the projections run gemv kernels (gemv.py's, chosen by
FusedOps.project and takes_gemv), and the MLP's part of a layer, v09's two norms, the products
and SwiGLU between them, five launches, runs as two (mlp_sublayer_fused): [gate | up]'s
programs form the post-attention norm of the row they read, and down's gemv forms SwiGLU from the [gate | up] row
itself and leaves its split sums pending (gemv.Pending): the next layer's q/k/v gemv adds them
to the stream and norms the row in its own programs, and the loop's settle runs them as a
launch of their own before the final norm. The attention and o's product between them run as
one launch too (attend_project.py): the memory's decode attention leaves a one-row attention
pending, and the output projection launches it with o, the attention's programs handing the
heads' output to o's within the launch. Four launches a layer.

A prefill's attention was, for every request in every layer, two gathers of its context out of
the cache, then one fused call (v02's causal_attention), a host wait for each request's span
between them: here one Triton kernel a layer for all the pass's requests, which reads each
context from the cache by its slots (context_attention.py); where Triton does not run, v12's
gathers and fused call per request. With a cached prefix a request's rows are the last of its
context, so its causal mask is aligned to the bottom right.

The decoder is v08's as v12 runs it; both its parts change. FusedOps is v09's ops (TritonOps)
with the projections, their RoPE and SwiGLU fused, and the packed weights they read (its
Weights); FusedContextAttention is v12's memory with the prefill's attention one kernel. The
passes that call them are v12's and earlier. Layer tensors keyed by Hugging Face's names (the
Layers contract, as the specs hand them in) still take v12's functions."""
from __future__ import annotations

from typing import Mapping, NamedTuple

import torch

from torchlet.contract import Checkpoint, ModelConfig

from ..v12_prefix_cache import ContextAttention, PagedDecoder, TritonOps, paged_kernels
from . import attend_project, context_attention, fused_kernels, gemv

__all__ = ["FusedContextAttention", "FusedOps", "PackedContext", "PackedWeights", "layers"]

QKV, GATE_UP = "self_attn.qkv_proj", "mlp.gate_up_proj"
PACKED = {QKV: ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
          GATE_UP: ("mlp.gate_proj", "mlp.up_proj")}


class PackedWeights(TritonOps.Weights):
    """v00's weights with each layer's q/k/v and gate/up matrices (and biases) stacked into one."""

    PACKED = PACKED  # stacked name -> the names stacked into it, for later versions' loaders

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint, device="cpu", dtype=torch.float32):
        weights = super().from_checkpoint(ckpt, device, dtype)
        for layer in weights.layers:
            for packed, parts in PACKED.items():
                for kind in ("weight", "bias"):
                    if f"{parts[0]}.{kind}" in layer:
                        layer[f"{packed}.{kind}"] = torch.cat(
                            [layer.pop(f"{p}.{kind}") for p in parts])
        return weights


class FusedOps(TritonOps):
    """v09's ops, the projections, their RoPE and SwiGLU fused over packed weights."""

    Weights = PackedWeights

    def qkv_heads(self, x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig):
        """Phases 1-4 over the packed weights: phase 1 one GEMM, whose row is [q heads | k heads
        | v heads]. With the kernels, one kernel for RoPE and the heads (rope_split) reads that
        row whole, the angles' cos and sin once per pass as v09's rope_qk has them
        (kernel_cos_sin), and for Qwen3 norms each q and k head first (qk_norm's step);
        elsewhere the row's column blocks (views) go through v01_1's phases 2-4 (heads).
        HF-named tensors: v12's phases."""
        x = self.settle(x)
        if f"{QKV}.weight" not in w:
            return super().qkv_heads(x, positions, w, config)
        qkv = self.project(x, w[f"{QKV}.weight"], w.get(f"{QKV}.bias"))
        if not self.on_triton:
            q_width = w["self_attn.o_proj.weight"].shape[1]
            kv_width = (qkv.shape[-1] - q_width) // 2
            return self.heads(*qkv.split([q_width, kv_width, kv_width], dim=-1), positions, w,
                              config)
        return self.rope_heads(qkv, positions, w, config)

    def qkv_heads_stored(self, x: torch.Tensor, positions: torch.Tensor,
                         w: Mapping[str, torch.Tensor], config: ModelConfig, store: tuple):
        """qkv_heads on the kernels, each row's new K/V also written into the paged caches:
        store = (k_cache, v_cache, slot_mapping), as v10's store_kv takes them. Over packed
        weights rope_split writes them as it splits the heads (the memory's passes ask this
        where FusedContextAttention says so), and where the product takes the gemv, the gemv
        itself turns and stores them (gemv_rope_split); HF-named tensors, v10's store after
        v12's phases. x may be a row still pending (mlp_sublayer_fused's): the fused launch
        forms it itself, every other path settles it first."""
        weight, bias = w.get(f"{QKV}.weight"), w.get(f"{QKV}.bias")
        row = x.residual if isinstance(x, gemv.Pending) else x  # its shape, where x is pending
        if weight is not None and self.takes_gemv(row, weight) and not config.qk_norm:
            # One launch for the product, RoPE and the store (a Qwen3 head's norm needs the
            # whole head in one program: there rope_split after the gemv).
            cos, sin = self.kernel_cos_sin(positions, config.head_dim, config.rope_theta)
            q, k, v = gemv.gemv_rope_split(x, weight, bias, cos, sin, config.num_heads,
                                           config.num_kv_heads, store)
            return self.group_queries(q, config.num_kv_heads), k, v
        x = self.settle(x)
        if weight is None:
            qg, k, v = self.qkv_heads(x, positions, w, config)
            paged_kernels.store_kv(k, v, *store)
            return qg, k, v
        return self.rope_heads(self.project(x, weight, bias), positions, w, config, store)

    def rope_heads(self, qkv: torch.Tensor, positions: torch.Tensor,
                    w: Mapping[str, torch.Tensor], config: ModelConfig, store=None):
        """Phases 2-4 of a packed row in one kernel (rope_split), storing K/V where asked."""
        cos, sin = self.kernel_cos_sin(positions, config.head_dim, config.rope_theta)
        norms = ((w["self_attn.q_norm.weight"], w["self_attn.k_norm.weight"]) if config.qk_norm
                 else (None, None))
        q, k, v = fused_kernels.rope_split(qkv, cos, sin, config.num_heads, config.num_kv_heads,
                                           *norms, config.rms_eps, store=store)
        return self.group_queries(q, config.num_kv_heads), k, v

    def mlp(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """down(swiglu(gate, up)) with gate and up from one GEMM. (At one row on the kernels the
        MLP runs inside mlp_sublayer_fused, where down's gemv forms SwiGLU itself.)"""
        if f"{GATE_UP}.weight" not in w:
            return super().mlp(x, w)
        gate_up = self.project(x, w[f"{GATE_UP}.weight"], w.get(f"{GATE_UP}.bias"))
        return self.project(self.swiglu_packed(gate_up), w["mlp.down_proj.weight"],
                            w.get("mlp.down_proj.bias"))

    # Whether the MLP sublayer may fuse its norms into its products (run_kernels): ops whose
    # MLP output must meet other ranks' before it joins the stream (partial sums) say False.
    norms_fuse = True

    def run_kernels(self) -> None:
        """v09's, and mlp_sublayer bound to its fused path once (where these ops may fuse the
        norms: norms_fuse), as v09 binds rope_qk, so a pass without the kernels runs v09's."""
        super().run_kernels()
        if self.norms_fuse:
            self.mlp_sublayer = self.mlp_sublayer_fused

    def mlp_sublayer_fused(self, attended: torch.Tensor, residual: torch.Tensor,
                           w: Mapping[str, torch.Tensor], norm_after: torch.Tensor, eps: float):
        """mlp_sublayer on the kernels: where the products take the gemv (fuses_norms), two
        launches where v09's two norms and the MLP took five: the post-attention norm formed
        inside the [gate | up] product's programs (norm_gemv), and down's product, whose split
        sums, residual add and norm after it are left to the launch that takes the row
        (gemv.Pending: the next layer's q/k/v gemv forms them itself, settle in a launch of
        their own); elsewhere v09's. -> (the pending row, the stream it will be)."""
        if not self.fuses_norms(residual, w):
            return super().mlp_sublayer(attended, residual, w, norm_after, eps)
        gate_up, residual = gemv.norm_gemv(attended, residual,
                                           w["post_attention_layernorm.weight"], eps,
                                           w[f"{GATE_UP}.weight"], w.get(f"{GATE_UP}.bias"))
        return gemv.pending_add_norm(gate_up, w["mlp.down_proj.weight"],
                                     w.get("mlp.down_proj.bias"), residual, norm_after, eps,
                                     swiglu=True)

    def settle(self, h):
        """v09's, a pending row (mlp_sublayer_fused's) formed in a launch of its own (the sums,
        the stream and the norm) where no product takes it: the final norm, Qwen3's heads."""
        return gemv.settle(h) if isinstance(h, gemv.Pending) else h

    def fuses_norms(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> bool:
        """Whether the MLP sublayer runs its norms inside the products: over packed [gate | up],
        where down's product takes the gemv (one row) and the gemv reads [gate | up] too, at any
        number of its rows (cuBLAS reads that matrix about as fast, the norm's launch saved)."""
        gate_up = w.get(f"{GATE_UP}.weight")
        return (gate_up is not None and self.gemv_reads(gate_up)
                and self.takes_gemv(x, w["mlp.down_proj.weight"]))

    def takes_gemv(self, x: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether x @ weight.T runs the gemv kernel: on the kernels, for one row (a batch-1
        decode step) and a matrix of at most GEMV_MAX_N weight rows (gemv.py says why) that
        the kernel reads (gemv_reads)."""
        return (self.on_triton and x.shape[0] == 1 and weight.shape[0] <= gemv.GEMV_MAX_N
                and self.gemv_reads(weight))

    def gemv_reads(self, weight) -> bool:
        """Whether the gemv kernel can read this matrix: any here (a float tensor); a later
        format of the weights may not be one."""
        return True

    def project(self, x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        """x @ weight.T (+ bias): the gemv kernel where it is faster, a GEMM (cuBLAS) elsewhere."""
        if self.takes_gemv(x, weight):
            return gemv.gemv(x, weight, bias)
        return torch.nn.functional.linear(x, weight, bias)

    def output_projection(self, out: torch.Tensor | attend_project.Attention,
                          w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """v01_1's phase 6 (heads merged, then o_proj) through project, so a batch-1 decode step
        reads o_proj with the gemv kernel. out may be a one-row step's attention not launched
        yet (the memory's decode_attention): where o takes the gemv, the attention and o run as
        one launch (attend_project); elsewhere the attention is launched alone first."""
        weight, bias = w["self_attn.o_proj.weight"], w.get("self_attn.o_proj.bias")
        if isinstance(out, attend_project.Attention):
            if self.takes_gemv(out.q.reshape(out.q.shape[0], -1), weight):
                return attend_project.attend_project(out, weight, bias)
            out = attend_project.attend(out)
        return self.project(out.reshape(out.shape[0], -1), weight, bias)

    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """The greedy draw's argmax in one read of the logits (argmax_rows: chunks of a row
        over programs, then a pick), where torch's reduction gives a row one block."""
        if self.on_triton:
            return fused_kernels.argmax_rows(logits)
        return super().argmax(logits)

    def swiglu_packed(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up of each row [gate | up]: one kernel, or the same maths in PyTorch on
        the halves."""
        if self.on_triton:
            return fused_kernels.swiglu_packed(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

class PackedContext(NamedTuple):
    """Every request's context slots in one tensor: request r's are slots[starts[r] ..
    starts[r + 1]] (int64 on the device), max_len bounding every context (a host int: with the
    row count it sizes the kernel's grid). The pass's row indptr is then int64 too."""
    slots: torch.Tensor
    starts: torch.Tensor
    max_len: int


class FusedContextAttention(ContextAttention):
    """v12's memory, a prefill's attention over the cache one kernel a layer, and with the
    kernels each layer's new K/V stored by the kernel that splits the heads."""

    fixed_chunk = 0  # context_attention's: 0, the contexts split as the pass's shape fills the GPU

    kernel_split_stores = True  # FusedOps.qkv_heads_stored: rope_split writes the new K/V
    # v10's store, and the decode attention: at one row left to o's launch (attend_project),
    # else v10's, launched dependent where the one-row products are
    kernels = (paged_kernels.store_kv, attend_project.decode_attention)

    def attend_context(self, qg: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       indptr: torch.Tensor, context) -> torch.Tensor:
        """Every request's rows over its context in one kernel that reads the cache by slots
        (context_attention), the slots concatenated once per pass, or handed in packed
        (PackedContext, what a captured prefill pass holds); elsewhere v12's gathers and one
        causal_attention call (v02's fused one) per request."""
        ops = self.model.ops
        if not ops.on_triton:
            return super().attend_context(qg, k_cache, v_cache, indptr, context)
        if isinstance(context, PackedContext):
            rows, (slots, starts, max_context) = indptr, context
        else:
            rows, slots, starts = ops.per_pass(indptr, ("context",), lambda: (
                indptr.long(), torch.cat(context),
                torch.tensor([0] + [len(c) for c in context], device=indptr.device).cumsum(0)))
            max_context = max((len(c) for c in context), default=0)
        t, kv_heads, group, d = qg.shape
        out = context_attention.context_attention(
            qg.reshape(t, kv_heads * group, d), k_cache, v_cache, rows, slots, starts,
            max_context, d ** -0.5, self.fixed_chunk)
        return out.view(qg.shape)


layers = PagedDecoder()  # v08's decoder, composing this version's ops and memory
layers.ops, layers.Memory = FusedOps(), FusedContextAttention
