"""v01_1_split_gqa: attention as named phases, query heads grouped by KV head.

What it introduces: attention split into six public functions of the layers module, run in this
order: project_qkv, split_heads, rope_qk, group_queries, attend_per_request,
output_projection (and qk_norm, Qwen3's RMSNorm of each q and k head, between split_heads and
rope_qk: its tokens are spec/test_v00_generation.py's tiny_qwen3 specs). Query heads are
viewed as [kv_heads, group] so that each KV head is read once
by the group of query heads that shares it.
Why v01_0 needs it: v01_0's attention is one block that copies every KV head `group` times
(repeat_interleave) before attending. Later versions replace single phases (a KV cache feeds
`attend` with history, a kernel replaces `attend`); they need the seams to be named and tested
one by one.
Core principle: each phase alone equals a plain reference written here with nothing but torch;
the phases in order equal the whole attention; the whole engine equals v01_0 token for token.
Files: implementations/v01_1_split_gqa/model.py against implementations/v01_0_ragged_batch/model.py.
Tradeoff left visible: more functions and a loop over requests in attend_per_request; nothing is
faster yet on CPU, and the per-request loop is what a ragged attention kernel later removes.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from torch.utils._python_dispatch import TorchDispatchMode

import implementations
from spec.support.inputs import strategies as sts
from spec.support.watchers.allocations import tensors_in
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import TINY, tiny_checkpoint
from spec.support.oracles.tolerances import tolerance
from torchlet.contract import SPLIT_GQA, layer_tensors

pytestmark = pytest.mark.spec(needs=SPLIT_GQA)

LENGTHS = [5, 1, 9]  # a ragged batch of three requests


@pytest.fixture(params=TINY, scope="module")
def case(request):
    ckpt = tiny_checkpoint(request.param)
    cfg = ckpt.config
    g = torch.Generator().manual_seed(1)
    t = sum(LENGTHS)
    batch = dict(
        ckpt=ckpt, cfg=cfg, w=layer_tensors(ckpt, 0),
        x=torch.randn(t, cfg.hidden_size, generator=g, dtype=torch.float64),
        q=torch.randn(t, cfg.num_heads, cfg.head_dim, generator=g, dtype=torch.float64),
        k=torch.randn(t, cfg.num_kv_heads, cfg.head_dim, generator=g, dtype=torch.float64),
        v=torch.randn(t, cfg.num_kv_heads, cfg.head_dim, generator=g, dtype=torch.float64),
        positions=torch.cat([torch.arange(n) for n in LENGTHS]),
        indptr=torch.tensor([0, 5, 6, 15], dtype=torch.int32),
    )
    batch["w"] = {k: v.double() for k, v in batch["w"].items()}
    return batch


@pytest.mark.spec(part="model")
def test_project_qkv_equals_x_times_each_weight_transposed_plus_bias(impl, case):
    w, x = case["w"], case["x"]
    q, k, v = impl.layers.project_qkv(x, w)
    for name, got in zip("qkv", (q, k, v)):
        want = x @ w[f"self_attn.{name}_proj.weight"].T
        if f"self_attn.{name}_proj.bias" in w:
            want = want + w[f"self_attn.{name}_proj.bias"]
        torch.testing.assert_close(got, want)


@pytest.mark.spec(part="model")
def test_split_heads_gives_head_h_the_columns_h_times_head_dim_onward(impl, case):
    cfg, q = case["cfg"], case["q"]
    flat = q.reshape(q.shape[0], -1)
    heads = impl.layers.split_heads(flat, cfg.num_heads)
    d = cfg.head_dim
    for h in range(cfg.num_heads):
        assert torch.equal(heads[:, h], flat[:, h * d:(h + 1) * d])


@pytest.mark.spec(part="model")
def test_rope_qk_turns_each_pair_of_q_and_k_by_position_times_its_frequency(impl, case):
    """Reference: pair i of a head is (x[i], x[i + D/2]) read as a complex number, turned by
    position * theta^(-2i/D)."""
    cfg, pos = case["cfg"], case["positions"]
    half = cfg.head_dim // 2
    freq = cfg.rope_theta ** (-torch.arange(half, dtype=torch.float64) * 2 / cfg.head_dim)
    turn = torch.polar(torch.ones(len(pos), half, dtype=torch.float64), pos[:, None] * freq)

    def reference(x):
        z = torch.complex(x[..., :half], x[..., half:]) * turn[:, None, :]
        return torch.cat([z.real, z.imag], dim=-1)

    q, k = impl.layers.rope_qk(case["q"], case["k"], pos, cfg.rope_theta)
    # The angles are computed in float32, as Hugging Face does, whatever the dtype of q and k.
    torch.testing.assert_close(q, reference(case["q"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k, reference(case["k"]), atol=1e-5, rtol=1e-5)


@pytest.mark.spec(part="model")
def test_group_queries_puts_query_head_h_with_kv_head_h_over_group(impl, case):
    cfg, q = case["cfg"], case["q"]
    grouped = impl.layers.group_queries(q, cfg.num_kv_heads)
    assert grouped.shape == (q.shape[0], cfg.num_kv_heads, cfg.group_size, cfg.head_dim)
    for h in range(cfg.num_heads):
        assert torch.equal(grouped[:, h // cfg.group_size, h % cfg.group_size], q[:, h])


def sdpa_per_request(q, k, v, lengths):
    """Reference: torch's own causal SDPA on each request alone, KV heads copied per query head."""
    group = q.shape[1] // k.shape[1]
    out, start = [], 0
    for n in lengths:
        s = slice(start, start + n)
        qs, ks, vs = (t[s].transpose(0, 1) for t in (q, k.repeat_interleave(group, 1),
                                                    v.repeat_interleave(group, 1)))
        out.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True).transpose(0, 1))
        start += n
    return torch.cat(out)


@pytest.mark.spec(part="model")
def test_attend_per_request_equals_causal_sdpa_on_each_request_alone(impl, case):
    cfg, q, k, v = case["cfg"], case["q"], case["k"], case["v"]
    got = impl.layers.attend_per_request(impl.layers.group_queries(q, cfg.num_kv_heads), k, v,
                                         case["indptr"])
    want = sdpa_per_request(q, k, v, LENGTHS)
    torch.testing.assert_close(got.reshape(want.shape), want)


@pytest.mark.spec(part="model")
def test_attend_per_request_never_lets_one_request_read_another(impl, case):
    cfg, q, k, v = case["cfg"], case["q"], case["k"], case["v"]
    qg = impl.layers.group_queries(q, cfg.num_kv_heads)
    before = impl.layers.attend_per_request(qg, k, v, case["indptr"])
    k2, v2 = k.clone(), v.clone()
    k2[:5], v2[:5] = 100.0, -100.0  # request 0's keys and values only
    after = impl.layers.attend_per_request(qg, k2, v2, case["indptr"])
    assert torch.equal(before[5:], after[5:])
    assert not torch.allclose(before[:5], after[:5])


class CopiesPerQueryHead(TorchDispatchMode):
    """Records each op that makes a tensor holding k's or v's values (all rows, or one span's)
    with every KV head repeated G times (v01_0's repeat_interleave), in [T, H, D] or [H, T, D]
    order."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, group: int, spans):
        super().__init__()
        # the whole batch's K/V, or one request's rows of it: the phase may attend per request
        copies = [t[a:b].repeat_interleave(group, 1) for t in (k, v) for a, b in spans]
        self.layouts = [c.reshape(-1) for c in copies] + \
                       [c.transpose(0, 1).contiguous().reshape(-1) for c in copies]
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tensors_in(out):
            if any(t.numel() == c.numel() and t.dtype == c.dtype
                   and torch.equal(t.detach().reshape(-1), c) for c in self.layouts):
                self.found.append(str(func))
        return out


@pytest.mark.spec(part="model")
def test_each_kv_head_is_read_in_place_by_its_group_never_copied_per_query_head(impl, case):
    """v01_0 copied K and V once per query head (repeat_interleave) before attending: G times
    the K/V bytes, made and read again at every step. The grouped layout exists so that a group's
    G query heads read their one KV head where it is. Watched from outside: no op of the attention
    phase makes a tensor holding k's or v's values repeated G times."""
    cfg, q, k, v = case["cfg"], case["q"], case["k"], case["v"]
    group = cfg.num_heads // cfg.num_kv_heads
    assert group > 1  # with one query head per KV head a copy would be k itself
    qg = impl.layers.group_queries(q, cfg.num_kv_heads)
    bounds = case["indptr"].tolist()
    # not a one-row request: its attention output is v's row for each query head, by right
    spans = [(0, bounds[-1])] + [(a, b) for a, b in zip(bounds, bounds[1:]) if b - a > 1]
    with CopiesPerQueryHead(k, v, group, spans) as watch:
        impl.layers.attend_per_request(qg, k, v, case["indptr"])
    assert watch.found == []


@pytest.mark.spec(part="model")
def test_output_projection_merges_heads_in_order_then_applies_o_proj(impl, case):
    cfg, w, q = case["cfg"], case["w"], case["q"]
    grouped = q.view(q.shape[0], cfg.num_kv_heads, cfg.group_size, cfg.head_dim)
    want = q.reshape(q.shape[0], -1) @ w["self_attn.o_proj.weight"].T
    torch.testing.assert_close(impl.layers.output_projection(grouped, w), want)


@pytest.mark.spec(part="model")
def test_the_six_phases_in_order_equal_the_whole_attention(impl, case):
    L, cfg, w = impl.layers, case["cfg"], case["w"]
    q, k, v = L.project_qkv(case["x"], w)
    q, k, v = (L.split_heads(t, n) for t, n in
               ((q, cfg.num_heads), (k, cfg.num_kv_heads), (v, cfg.num_kv_heads)))
    q, k = L.rope_qk(q, k, case["positions"], cfg.rope_theta)
    out = L.attend_per_request(L.group_queries(q, cfg.num_kv_heads), k, v, case["indptr"])
    whole = L.attention(case["x"], case["positions"], w, cfg, case["indptr"])
    torch.testing.assert_close(L.output_projection(out, w), whole)


@pytest.mark.spec(part="model")
def test_with_qwen3s_qk_norm_between_split_heads_and_rope_the_phases_equal_the_whole_attention(
        impl):
    """Qwen3 normalizes each q and k head (RMSNorm with weights self_attn.q_norm and k_norm)
    after split_heads and before rope_qk: the seventh phase, called where the model has it."""
    ckpt = tiny_checkpoint("tiny_qwen3")
    L, cfg = impl.layers, ckpt.config
    assert cfg.qk_norm
    w = {k: v.double() for k, v in layer_tensors(ckpt, 0).items()}
    g = torch.Generator().manual_seed(2)
    x = torch.randn(sum(LENGTHS), cfg.hidden_size, generator=g, dtype=torch.float64)
    positions = torch.cat([torch.arange(n) for n in LENGTHS])
    indptr = torch.tensor([0, 5, 6, 15], dtype=torch.int32)
    q, k, v = L.project_qkv(x, w)
    q, k, v = (L.split_heads(t, n) for t, n in
               ((q, cfg.num_heads), (k, cfg.num_kv_heads), (v, cfg.num_kv_heads)))
    normed_q, normed_k = L.qk_norm(q, k, w, cfg)
    rms = lambda t, weight: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + cfg.rms_eps) * weight  # noqa: E731
    # the norm may run in float32 (v00's rms_norm does): float32's error, not float64's
    close = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normed_q, rms(q, w["self_attn.q_norm.weight"]), **close)
    torch.testing.assert_close(normed_k, rms(k, w["self_attn.k_norm.weight"]), **close)
    q, k = L.rope_qk(normed_q, normed_k, positions, cfg.rope_theta)
    out = L.attend_per_request(L.group_queries(q, cfg.num_kv_heads), k, v, indptr)
    torch.testing.assert_close(L.output_projection(out, w), L.attention(x, positions, w, cfg, indptr))


@pytest.mark.spec(part="model")
def test_the_whole_attention_equals_v01_0_on_a_ragged_batch(impl, case):
    v01_0 = implementations.load("v01_0_ragged_batch").layers
    args = (case["x"], case["positions"], case["w"], case["cfg"], case["indptr"])
    # v01_0's softmax runs in float32 whatever its input; from v02 on a fused call runs in
    # float64: they agree to float32's rounding.
    torch.testing.assert_close(impl.layers.attention(*args), v01_0.attention(*args),
                               **tolerance(torch.float32))
    assert math.isfinite(float(impl.layers.attention(*args).abs().sum()))


VOCAB = tiny_checkpoint("tiny_llama").config.vocab_size


@pytest.fixture(scope="module")
def engines(impl):
    ckpt = tiny_checkpoint("tiny_llama")
    return (impl.build(ckpt, dtype=torch.float64),
            implementations.load("v01_0_ragged_batch").build(ckpt, dtype=torch.float64))


@given(batch=sts.prompt_batches(VOCAB), params=sts.params(vocab=VOCAB))
@engine_settings()
def test_generate_gives_the_tokens_of_v01_0(engines, batch, params):
    ours, previous = engines
    assert ours.generate(batch, params) == previous.generate(batch, params)
