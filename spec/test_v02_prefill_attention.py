"""v02_kv_cache, page 2: a prefill's attention never holds a T x T score matrix.

What it introduces: causal_attention as one fused call (torch's scaled_dot_product_attention,
which takes the softmax of the scores tile by tile). It is the phase every later prefill reaches:
v02's cached pass, v05's prefill into slots (v07, the CLI's CPU default), v08's into pages,
v12's rows after a cached prefix. The cache itself is v02's first page
(test_v02_kv_cache.py).

Why v01_1 needs it: with a cache, a prompt is prefilled once, in a pass of its own, and v01_1's
causal_attention, written to be read, builds every head's T x T scores for it. A 5,480-token
prompt to SmolLM2 on one CPU thread waited 315.6 s for its first token on v07, against 54.0 s
for Hugging Face (issue 23). It lives here, in the version that makes prefill a pass, rather than
in v13 (whose idea is one kernel for all a pass's requests, reading the paged cache): on a CPU
the CLI serves v07, chosen for its decode speed, and v07 inherits it from here.

Core principle: seen from below the dispatcher, a prefill of T tokens creates no tensor of
T x T elements or more, in any version that has a cache. The fused call equals v01_1's phase,
the reading, for T queries that are the last of S positions, and the tokens stay the oracle's
(the shared golden specs of page v00, which run every version).

Files to compare: implementations/v02_kv_cache/model.py (causal_attention) against
implementations/v01_1_split_gqa/model.py (causal_attention).

Tradeoff left visible: what runs and what is read are two functions now, tied by a spec. Rows
after a cached prefix (v12) still get a [T, S] boolean mask, once a layer and not per head:
torch's own causal flag aligns the mask to the top left, which is right only when S == T.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import implementations
from spec.support.watchers.allocations import OpLog
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.tolerances import assert_close
from torchlet.contract import KV_CACHE, Checkpoint, GenerationParams

pytestmark = pytest.mark.spec(needs=KV_CACHE)

T = 512  # prompt tokens: T x T is above any other tensor of this prefill (gate|up: T x 256)


def long_context(name: str) -> Checkpoint:
    """The tiny fixture with room for T tokens (RoPE takes any position; no weight depends on
    the context length)."""
    ckpt = tiny_checkpoint(name)
    return Checkpoint(dataclasses.replace(ckpt.config, max_position=2 * T), ckpt.tensors)


def test_a_prefill_of_t_tokens_creates_no_tensor_of_t_by_t_elements(impl):
    """The engine built before watching, so its preallocated caches are not counted; every
    tensor an op of the prefill gives storage of its own is."""
    ckpt = long_context("tiny_qwen2")
    engine = impl.build(ckpt, dtype=torch.float32)
    prompt = [(7 * i + 3) % ckpt.config.vocab_size for i in range(T)]
    with OpLog() as log:
        engine.generate([prompt], GenerationParams(max_new_tokens=1))
    made = [(torch.Size(shape).numel(), shape, op.name) for op in log.ops
            for shape, _ in op.fresh]
    assert any(shape[:1] == (T,) for _, shape, _ in made), "no op saw the prompt's rows"
    biggest = max(made)
    assert biggest[0] < T * T, f"{biggest[2]} made {biggest[1]}: {biggest[0]:,} >= {T}^2"


@pytest.mark.spec(part="model")
@pytest.mark.parametrize("queries,keys", [(6, 6), (1, 9), (4, 9)],
                         ids=["prefill", "decode", "after-a-cached-prefix"])
def test_causal_attention_equals_v01_1s_phase_for_the_last_t_of_s_positions(impl, queries,
                                                                            keys):
    v01_1 = implementations.load("v01_1_split_gqa").layers
    g = torch.Generator().manual_seed(queries * 100 + keys)
    kv_heads, group, d = 2, 3, 16
    qg = torch.randn(queries, kv_heads, group, d, generator=g)
    k, v = (torch.randn(keys, kv_heads, d, generator=g) for _ in "kv")
    assert_close(impl.layers.causal_attention(qg, k, v), v01_1.causal_attention(qg, k, v),
                 "causal_attention")
