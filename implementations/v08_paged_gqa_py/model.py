"""The decoder over a paged K/V cache. Each layer's cache is [num_blocks, block_size, kv_heads,
head_dim]; a token's K/V lives in the slot its request's block table names, and attention reads
through the table (paged_attention.py). Decode keeps v05's fixed lanes; each lane carries its
request's padded block table and context length, so the step's shapes never change.

A new memory layout, so a decoder of two parts from here on, each swapped on its own:
- its ops, the maths every pass runs (v05's PassOps here: v01_1's phases, the layer loop, the
  rotation once per pass; v09 hands it Triton kernels, v13 fused ones);
- its memory, how K/V is stored and read and the passes over it (PagedAttention here: the store
  and the decode attention in PyTorch, the paged decode and prefill passes; v10 swaps in kernels,
  v12 adds the prefill over a cached prefix). A pass picks its store and attention once
  (functions), so a later memory swaps kernels in by that choice alone.
PagedDecoder is v02's decoder (the phases' fused causal attention, the ragged bookkeeping) that
composes the two; a name it does not hold is its memory's, else its ops'. Its cache-free pass
runs the ops' layer loop too, so every pass runs the same layers."""
from __future__ import annotations

from functools import cached_property

import torch

from ..v07_cuda_graph import CachedDecoder, PassOps
from . import paged_attention

__all__ = ["PagedAttention", "PagedDecoder", "layers"]


class PagedAttention:
    """K/V in blocks read through block tables, and the passes over them. `model` is the decoder
    it serves: the passes run its ops and its causal attention."""

    # The K/V store and the decode attention in PyTorch (paged_attention.py): what a pass runs
    # here, and where a later memory's kernels do not run.
    pytorch = (paged_attention.store_kv, paged_attention.paged_decode_attention)

    def __init__(self, model):
        self.model = model

    def functions(self, t: torch.Tensor):
        """The K/V store and the decode attention a pass over tensors like t runs, chosen once
        for the pass: v08's PyTorch ones."""
        return self.pytorch

    def forward_decode(self, weights, token_ids: torch.Tensor, positions: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor,
                       slot_mapping: torch.Tensor, kv) -> torch.Tensor:
        """One decode step over fixed lanes. Lane b's token goes to slot slot_mapping[b] (an
        idle lane's to a slot of the null block, which no table names for a real token), then
        attends over the context_lens[b] tokens its block table names (0 for an idle lane:
        zeros). Hidden [B, hidden]."""
        config, ops = weights.config, self.model.ops
        scale = config.head_dim ** -0.5
        store_kv, paged_decode_attention = self.functions(kv[0][0])

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = ops.qkv_heads(h, positions, w, config)
            store_kv(k, v, k_cache, v_cache, slot_mapping)
            q = qg.reshape(qg.shape[0], config.num_heads, config.head_dim)
            return ops.output_projection(paged_decode_attention(
                q, k_cache, v_cache, block_tables, context_lens, scale), w)
        return ops.forward_layers(weights, weights.embed[token_ids], attend)

    def forward_prefill(self, weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                        slot_mapping: torch.Tensor, kv) -> torch.Tensor:
        """Whole sequences, ragged, into empty tables: row i's K/V goes to slot slot_mapping[i],
        and each request attends causally over its own rows. Hidden [T, hidden]."""
        config, model, ops = weights.config, self.model, self.model.ops
        positions = model.row_positions(indptr)
        store_kv = self.functions(kv[0][0])[0]

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = ops.qkv_heads(h, positions, w, config)
            store_kv(k, v, k_cache, v_cache, slot_mapping)
            return ops.output_projection(model.attend_per_request(qg, k, v, indptr), w)
        return ops.forward_layers(weights, weights.embed[token_ids], attend)


class PagedDecoder(CachedDecoder):
    """v02's decoder composing its ops (v05's here) and its memory (PagedAttention here)."""

    ops = PassOps()
    Memory = PagedAttention

    def __repr__(self) -> str:
        """What the recipe shows of the model: the ops and the memory it composes."""
        return f"PagedDecoder({type(self.ops).__name__}, {self.Memory.__name__})"

    @cached_property
    def memory(self):
        """The decoder's memory, built at first use and handed the decoder."""
        return self.Memory(self)

    def __getattr__(self, name: str):
        """A pass or a function the decoder does not hold is its memory's, else its ops'."""
        memory = self.memory
        return getattr(memory if hasattr(memory, name) else self.ops, name)

    def forward_ragged(self, weights, token_ids: torch.Tensor,
                       req_indptr: torch.Tensor) -> torch.Tensor:
        """Final hidden states [T, hidden] of a ragged batch, no cache (v01_0's contract),
        through the ops' layer loop like every other pass."""
        self.check_req_indptr(req_indptr, len(token_ids))
        config = weights.config
        positions = self.row_positions(req_indptr)

        def attend(h, i):
            return self.attention(h, positions, weights.layers[i], config, req_indptr)
        return self.ops.forward_layers(weights, weights.embed[token_ids], attend)


layers = PagedDecoder()
