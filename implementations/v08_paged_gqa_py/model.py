"""The model over a paged K/V cache: attention that reads K/V through block tables, in plain
PyTorch, and the decoder whose passes run it.

Each layer's cache is a pair k_cache, v_cache of shape [num_blocks, block_size, num_kv_heads,
head_dim]. Token p of a request whose table is T lives at cache[T[p // block_size], p %
block_size]; in the cache viewed flat as [num_blocks * block_size, kv_heads, head_dim] that is
slot T[p // block_size] * block_size + p % block_size. Grouped-query attention: query head h
reads KV head h // (num_heads / num_kv_heads). Decode keeps v05's fixed lanes; each lane carries
its request's padded block table and context length, so the step's shapes never change.

A new memory layout, so a decoder of two parts from here on, each swapped on its own:
- its ops, the maths every pass runs (v05's PassOps here: v01_1's phases, the layer loop, the
  rotation once per pass; ops on kernels replace them);
- its memory, how K/V is stored and read and the passes over it (PagedAttention here: the store
  and the decode attention are this file's functions, and the paged decode and prefill passes;
  a later memory may add kernels, or a prefill over a cached prefix). The memory holds its store and
  attention as data, the PyTorch pair and a later memory's kernels, and picks one pair once,
  when it is made (functions): a later memory swaps kernels in by holding them, no method of its
  own. Every pass starts a layer the same way (project_kv: the ops' heads, then the store); a
  later memory whose ops' kernels can store as they split the heads says so, as data too.
PagedDecoder is v02's decoder (the phases' fused causal attention, the ragged bookkeeping) that
composes the two, held as named members (`ops`, `memory`): the passes a runner calls are its
memory's (forward_decode, forward_prefill), named on the decoder; a pass a later memory adds is
called on the memory itself (`model.memory`). Each engine gets a
decoder of its own (assemble), its ops made for the engine's device and dtype. Its cache-free pass
runs the ops' layer loop too, so every pass runs the same layers.
"""
from __future__ import annotations

from functools import cached_property

import torch

from ..v07_cuda_graph import CachedDecoder, PassOps


def _flat(cache: torch.Tensor) -> torch.Tensor:
    """The cache as [num_blocks * block_size, kv_heads, head_dim], sharing its storage."""
    return cache.view(-1, *cache.shape[2:])


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Write k, v [T, kv_heads, head_dim] into the slots slot_mapping [T] (int64) names; an entry
    of -1 writes nothing.

    Shapes never depend on the data, so a CUDA graph can capture this: a -1 entry reads slot 0,
    which lies in the null block that no request owns, and writes the same value back."""
    keep = (slot_mapping >= 0)[:, None, None]
    slots = slot_mapping.clamp(min=0)
    for new, cache in ((k, _flat(k_cache)), (v, _flat(v_cache))):
        cache[slots] = torch.where(keep, new.to(cache.dtype), cache[slots])


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """The first num_tokens tokens of one request, contiguous: [num_tokens, kv_heads, head_dim]."""
    return cache[block_table.long()].flatten(0, 1)[:num_tokens]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # Softmax in at least float32; float64 inputs stay float64 so references can be exact.
    return torch.promote_types(dtype, torch.float32)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float) -> torch.Tensor:
    """One new token per request: q [B, heads, head_dim] attends over the first context_lens[b]
    tokens named by block_tables [B, max_blocks] (padded with the null block). -> [B, heads,
    head_dim]. A row with context 0 (batch padding) gives zeros."""
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    dtype = _compute_dtype(q.dtype)
    # [B, max_blocks * block_size, kv_heads, head_dim]: every slot the padded tables name.
    k = k_cache[block_tables.long()].flatten(1, 2).to(dtype)
    v = v_cache[block_tables.long()].flatten(1, 2).to(dtype)
    valid = torch.arange(k.shape[1], device=q.device)[None, :] < context_lens[:, None]  # [B, S]
    qg = q.to(dtype).view(batch, kv_heads, heads // kv_heads, head_dim)
    scores = torch.einsum("bkgd,bskd->bkgs", qg, k) * scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all-masked rows: zeros, not NaN
    # Slots past a context hold whatever an earlier owner left (even NaN): 0 * NaN is NaN.
    v = v.masked_fill(~valid[:, :, None, None], 0.0)
    out = torch.einsum("bkgs,bskd->bkgd", probs, v)
    return out.reshape(batch, heads, head_dim).to(q.dtype)


def causal_attention_with_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 scale: float) -> torch.Tensor:
    """q [t, heads, D] are the last t of the n tokens whose k, v [n, kv_heads, D] are given;
    query i (position n - t + i) sees keys 0 .. n - t + i."""
    t, heads, head_dim = q.shape
    n, kv_heads = k.shape[0], k.shape[1]
    dtype = _compute_dtype(q.dtype)
    qg = q.to(dtype).view(t, kv_heads, heads // kv_heads, head_dim)
    scores = torch.einsum("tkgd,skd->kgts", qg, k.to(dtype)) * scale
    query_pos = torch.arange(n - t, n, device=q.device)[:, None]
    key_pos = torch.arange(n, device=q.device)[None, :]
    scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("kgts,skd->tkgd", probs, v.to(dtype))
    return out.reshape(t, heads, head_dim).to(q.dtype)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            qo_indptr: torch.Tensor, block_tables: torch.Tensor,
                            context_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """New tokens of B requests, ragged: q [T, heads, D], request b's rows qo_indptr[b] ..
    qo_indptr[b+1] - 1 are the last tokens of its context_lens[b]. Their K/V must already be
    stored. Each new token attends causally over the cached prefix and the new tokens up to
    itself. -> [T, heads, D]. One request at a time: prefill is not graph-captured."""
    out = torch.empty_like(q)
    bounds = qo_indptr.tolist()
    for b, n in enumerate(context_lens.tolist()):
        lo, hi = bounds[b], bounds[b + 1]
        if hi == lo:
            continue
        k = gather_kv(k_cache, block_tables[b], n)
        v = gather_kv(v_cache, block_tables[b], n)
        out[lo:hi] = causal_attention_with_prefix(q[lo:hi], k, v, scale)
    return out


class PagedAttention:
    """K/V in blocks read through block tables, and the passes over them. `model` is the decoder
    it serves: the passes run its ops and its causal attention."""

    # The K/V store and the decode attention, held as data: in PyTorch (the functions above),
    # and on kernels where a later memory has them, None here.
    pytorch = (store_kv, paged_decode_attention)
    kernels = None
    # Whether, with the kernels, the ops' head split stores the new K/V itself (their
    # qkv_heads_stored, one launch where the split and the store were two): a later memory
    # whose ops can says so.
    kernel_split_stores = False

    def __init__(self, model):
        self.model = model
        # The K/V store and the decode attention its passes run, chosen once: the kernels, if
        # the memory has them and the model's ops run theirs (on_triton); else PyTorch's.
        use_kernels = self.kernels is not None and model.ops.on_triton
        self.functions = self.kernels if use_kernels else self.pytorch
        self.split_stores = use_kernels and self.kernel_split_stores

    def project_kv(self, h: torch.Tensor, positions: torch.Tensor, w, config, k_cache, v_cache,
                   slot_mapping: torch.Tensor):
        """What every pass does first in a layer: the ops' phases 1-4 (qkv_heads), then the new
        K/V stored, row i's into slot slot_mapping[i] (by the split itself where it can).
        -> (qg, k, v)."""
        ops = self.model.ops
        if self.split_stores:
            return ops.qkv_heads_stored(h, positions, w, config, (k_cache, v_cache, slot_mapping))
        qg, k, v = ops.qkv_heads(h, positions, w, config)
        self.functions[0](k, v, k_cache, v_cache, slot_mapping)
        return qg, k, v

    def forward_decode(self, weights, token_ids: torch.Tensor, positions: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor,
                       slot_mapping: torch.Tensor, kv) -> torch.Tensor:
        """One decode step over fixed lanes. Lane b's token goes to slot slot_mapping[b] (an
        idle lane's to a slot of the null block, which no table names for a real token), then
        attends over the context_lens[b] tokens its block table names (0 for an idle lane:
        zeros). Hidden [B, hidden]."""
        config, ops = weights.config, self.model.ops
        scale = config.head_dim ** -0.5
        paged_decode_attention = self.functions[1]

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, _, _ = self.project_kv(h, positions, w, config, k_cache, v_cache, slot_mapping)
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

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = self.project_kv(h, positions, w, config, k_cache, v_cache, slot_mapping)
            return ops.output_projection(model.attend_per_request(qg, k, v, indptr), w)
        return ops.forward_layers(weights, weights.embed[token_ids], attend)


class PagedDecoder(CachedDecoder):
    """v02's decoder composing its ops (v05's here) and its memory (PagedAttention here)."""

    ops = PassOps()
    Memory = PagedAttention

    def __repr__(self) -> str:
        """What the recipe shows of the model: the ops and the memory it composes."""
        return f"PagedDecoder({type(self.ops).__name__}, {self.Memory.__name__})"

    def assemble(self, a) -> "PagedDecoder":
        """The model part of one engine: a decoder composing this memory and these ops, made
        for the engine's device and dtype where the ops say how (for_device: ops that can run
        kernels choose them there, once, at build, not at every call)."""
        made_for = getattr(self.ops, "for_device", None)
        decoder = type(self)()  # a subclass assembles as itself
        decoder.ops = self.ops if made_for is None else made_for(a.device, a.dtype)
        decoder.Memory = self.Memory
        return decoder

    @cached_property
    def memory(self):
        """The decoder's memory, built at first use and handed the decoder."""
        return self.Memory(self)

    # The passes a runner calls, named here: the memory's.
    def forward_decode(self, weights, token_ids: torch.Tensor, positions: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor,
                       slot_mapping: torch.Tensor, kv) -> torch.Tensor:
        """One decode step over fixed lanes (the memory's pass). Hidden [B, hidden]."""
        return self.memory.forward_decode(weights, token_ids, positions, block_tables,
                                          context_lens, slot_mapping, kv)

    def forward_prefill(self, weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                        slot_mapping: torch.Tensor, kv) -> torch.Tensor:
        """Whole sequences, ragged, into empty tables (the memory's pass). Hidden [T, hidden]."""
        return self.memory.forward_prefill(weights, token_ids, indptr, slot_mapping, kv)

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
