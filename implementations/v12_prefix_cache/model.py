"""v11's decoder (v10's, on the Triton layers and paged kernels) with one more pass: a prefill
that computes only a request's uncached rows. Its rows start at the first position the cache
lacks; their K/V is stored through the request's table like any prefill's, then each request's
rows attend over its whole context, the shared prefix read back from the cache through its slots.

The pass is the memory's (ContextAttention, v10's TritonPagedAttention plus the pass and the
attention over a context); the decoder and its ops are v10's."""
from __future__ import annotations

import torch

from ..v11_sampling import PagedDecoder, TritonOps, TritonPagedAttention

__all__ = ["ContextAttention", "layers"]


class ContextAttention(TritonPagedAttention):
    """v10's paged memory plus the prefill of uncached rows over their whole context."""

    def forward_prefill_cached(self, weights, token_ids: torch.Tensor, positions: torch.Tensor,
                               indptr: torch.Tensor, slot_mapping: torch.Tensor,
                               context: list[torch.Tensor], kv) -> torch.Tensor:
        """Ragged rows of several requests: row i at positions[i], its K/V to slot_mapping[i].
        context[r] holds the slots of request r's every token up to its last row (the cached
        prefix, then its rows), in position order. Hidden [T, hidden]."""
        config, ops = weights.config, self.model.ops

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, _, _ = self.project_kv(h, positions, w, config, k_cache, v_cache, slot_mapping)
            return ops.output_projection(
                self.attend_context(qg, k_cache, v_cache, indptr, context), w)
        return ops.forward_layers(weights, weights.embed[token_ids], attend)

    def attend_context(self, qg: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       indptr: torch.Tensor, context: list[torch.Tensor]) -> torch.Tensor:
        """Each request's rows qg[a:b] [rows, KV, G, D], the last of its context, attend over
        that context's K/V, gathered from the caches by its slots context[r], with the decoder's
        causal attention (v02's fused call)."""
        keys, values, model = k_cache.flatten(0, 1), v_cache.flatten(0, 1), self.model
        return torch.cat([model.causal_attention(qg[a:b], keys[slots], values[slots])
                          for (a, b), slots in zip(model.spans(indptr), context)])


layers = PagedDecoder()  # v08's decoder, composing this version's ops and memory
layers.ops, layers.Memory = TritonOps(), ContextAttention
