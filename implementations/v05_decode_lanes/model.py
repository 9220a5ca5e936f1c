"""The decoder over decode lanes. The K/V cache is one preallocated tensor per layer,
[lanes + 1, max_len, kv_heads, head_dim]: lane s's rows hold the request running in it, row p its
token at position p. A decode step runs every lane, active or not, so its shapes never
change (what inputs allocated once and a replayed graph need); prefill stays ragged and writes
rows 0 .. len - 1 of each request's lane.

LaneDecoder is v02's decoder (through v04) with two passes over the lane cache. Both run one
layer loop, forward_layers, and differ only in their attention, which the loop is given.

Every layer of a pass turns its q and k by the same positions, so the loop computes the angles'
cos and sin once per pass (per_pass) where v02 computed them in every layer: on a GPU that is
about eight small kernels a layer fewer in each decode step. The loop and the angles are maths
every later pass runs, whatever holds its K/V, so they are this version's ops (PassOps, v01_1's
GQAOps plus the pass), which the decoder composes."""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Callable

import torch

from torchlet.contract import ModelConfig

from ..v04_continuous_batching import CachedDecoder, GQAOps

__all__ = ["PassOps", "LaneDecoder", "layers"]

Attend = Callable[[torch.Tensor, int], torch.Tensor]  # (normed input h, layer i) -> output


class PassOps(GQAOps):
    """v01_1's ops plus the layer loop over a pass, the rotation's angles computed once in it."""

    _pass_values = None  # inside forward_layers (one_pass): {key: (positions, value)}

    @contextmanager
    def one_pass(self):
        """What per_pass computes inside this block is computed once and dropped at its end."""
        outer, self._pass_values = self._pass_values, {}
        try:
            yield
        finally:
            self._pass_values = outer

    def per_pass(self, positions: torch.Tensor, key: tuple, compute: Callable):
        """compute(), once per pass for this positions tensor and key; outside a pass, at each
        call. Keyed by the tensor itself (not its values, which would cost a host read), so a
        buffer refilled between passes is never served its old angles."""
        if self._pass_values is None:
            return compute()
        key = (id(positions),) + key
        if key not in self._pass_values:
            # positions is kept alive with its value, so no other tensor can take its id.
            self._pass_values[key] = (positions, compute())
        return self._pass_values[key][1]

    def rope_cos_sin(self, positions: torch.Tensor, head_dim: int, theta: float,
                     dtype: torch.dtype):
        """v00's cos and sin [tokens, head_dim], once per pass."""
        return self.per_pass(positions, ("cos_sin", head_dim, theta, dtype),
                             partial(super().rope_cos_sin, positions, head_dim, theta, dtype))

    def rope_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float):
        """Phase 3: q and k turned by v00's rotation, its cos and sin from rope_cos_sin. Their
        heads are turned side by side, in one rotation: with the cat that joins them, 6 kernels
        where two rotations launched 10."""
        cos, sin = self.rope_cos_sin(positions, q.shape[-1], theta, q.dtype)
        turned = self.rotate(torch.cat([q, k], dim=1), cos, sin)
        return turned.split([q.shape[1], k.shape[1]], dim=1)

    def residual_block(self, x, w, config: ModelConfig, attend) -> torch.Tensor:
        """x + attend(norm(x)), then h + mlp(norm(h)): the decoder layer with attention passed
        in."""
        h = x + attend(self.rms_norm(x, w["input_layernorm.weight"], config.rms_eps))
        return h + self.mlp(self.rms_norm(h, w["post_attention_layernorm.weight"],
                                          config.rms_eps), w)

    def forward_layers(self, weights, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        """Embedded rows x through every layer's residual block and the final norm, as one pass:
        the rotation's cos and sin are computed at the first layer and read by the others.
        attend(h, i) is layer i's attention output on its normed input h."""
        config = weights.config
        with self.one_pass():
            for i, w in enumerate(weights.layers):
                x = self.residual_block(x, w, config, lambda h, i=i: attend(h, i))
            return self.rms_norm(x, weights.norm, config.rms_eps)


class LaneDecoder(CachedDecoder):
    """v02's decoder over PassOps, plus the lane-shaped decode pass and the prefill into lanes."""

    ops = PassOps()

    def write_kv(self, cache: torch.Tensor, rows: torch.Tensor, new: torch.Tensor) -> None:
        """cache [S, L, KV, D] viewed as S*L rows: new[i] goes to row rows[i] = lane * L +
        position. index_copy_ takes the rows as a tensor, so no value leaves the device."""
        cache.view(-1, *cache.shape[2:]).index_copy_(0, rows, new)

    def lane_attention(self, qg: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       positions: torch.Tensor) -> torch.Tensor:
        """Lane s's query qg[s] [KV, G, D] attends over rows 0 .. positions[s] of lane s. Every
        lane reads all max_len rows, masked: fixed shapes, at the price of reading empty rows."""
        scores = torch.einsum("skgd,slkd->skgl", qg, k_cache) * qg.shape[-1] ** -0.5
        visible = torch.arange(k_cache.shape[1], device=qg.device)[None, :] <= positions[:, None]
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(qg.dtype)
        return torch.einsum("skgl,slkd->skgd", probs, v_cache)

    def decode_rows(self, active: torch.Tensor, positions: torch.Tensor, cache_lanes: int,
                    max_len: int) -> torch.Tensor:
        """Cache row of each lane's new K/V: lane s writes its own rows, row positions[s]; an inactive
        lane writes into the sink lane (the cache's last), so whatever it carries lands where
        nobody reads."""
        lanes = torch.arange(active.shape[0], device=active.device)
        lane = torch.where(active, lanes, cache_lanes - 1)
        return lane * max_len + positions % max_len

    def forward_decode(self, weights, token_ids: torch.Tensor, positions: torch.Tensor,
                       active: torch.Tensor,
                       kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """One decode step over the first `lanes` lanes: token_ids[s] at
        positions[s]. kv[layer] = (k_cache, v_cache), each [lanes + 1, L, KV, D], the last lane a
        sink for inactive lanes. Writes each active lane's K/V to row positions[s] of its lane,
        then attends over rows 0 .. positions[s]. Hidden [lanes, hidden]; inactive lanes' rows
        are garbage."""
        config, ops = weights.config, self.ops
        lanes = token_ids.shape[0]
        assert lanes < kv[0][0].shape[0], "the cache has one more lane than the pass: the sink"
        rows = self.decode_rows(active, positions, kv[0][0].shape[0], kv[0][0].shape[1])

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = ops.qkv_heads(h, positions, w, config)
            self.write_kv(k_cache, rows, k)
            self.write_kv(v_cache, rows, v)
            return ops.output_projection(
                self.lane_attention(qg, k_cache[:lanes], v_cache[:lanes], positions), w)
        return ops.forward_layers(weights, weights.embed[token_ids], attend)

    def forward_prefill(self, weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                        lanes: list[int],
                        kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Whole prompts, ragged: request i's rows go to rows 0 .. len - 1 of lane lanes[i], and
        it attends causally over its own rows. Hidden [T, hidden]."""
        config, ops = weights.config, self.ops
        positions = self.row_positions(indptr)
        length = kv[0][0].shape[1]
        lane_of_row = torch.tensor(lanes, device=token_ids.device).repeat_interleave(
            (indptr[1:] - indptr[:-1]).long())
        rows = lane_of_row * length + positions

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = ops.qkv_heads(h, positions, w, config)
            self.write_kv(k_cache, rows, k)
            self.write_kv(v_cache, rows, v)
            return ops.output_projection(self.attend_per_request(qg, k, v, indptr), w)
        return ops.forward_layers(weights, weights.embed[token_ids], attend)


layers = LaneDecoder()
