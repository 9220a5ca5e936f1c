"""v09_triton_basics: RMSNorm, the residual add fused into RMSNorm, RoPE and SwiGLU as Triton
kernels.

What it introduces: one kernel per per-token layer, each behind a Python wrapper that checks its
inputs and a torch op (the contract's `kernel_op`), so that a graph recorder sees one op per
kernel.

Why the previous version needs it: in v08 each of these layers is several PyTorch ops (square,
mean, rsqrt, multiply, cast...), and each op reads and writes the whole activation. A kernel
reads its inputs once and writes its output once; the fused add + norm also saves the separate
pass over the residual stream.

Core principle: a kernel equals a plain PyTorch reference (spec/support/oracles/kernel_reference.py, HF's
maths in float64) over Hypothesis-drawn shapes, sizes that are not powers of two included: a
block covers the next power of two and masks the tail. On CPU the kernels run in float32 under
TRITON_INTERPRET=1; on a GPU the same properties run compiled in float32 and bfloat16
(spec/support/inputs/kernel_targets.py), within the per-dtype tolerances of spec/support/oracles/tolerances.py.

Qwen3's per-head q and k norms (before RoPE) are the rms_norm kernel over each head: the
decoder's qk_norm runs it once for q and once for k, on [tokens, heads, head_dim].

Files to compare: implementations/v09_triton_basics/kernels.py against
implementations/v00_full_recompute/model.py (rms_norm, apply_rope, mlp).

Tradeoff left visible: one program holds a whole row in registers (hidden <= 65536), simple but
bounded; RoPE's cos/sin still come from PyTorch, because the GPU's fast sin/cos lose accuracy at
the large angles of late positions; the kernels return new tensors rather than writing in place.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spec.support.oracles import kernel_reference as ref
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.kernel_calls import KernelCalls
from spec.support.inputs.kernel_targets import TARGETS, Target
from spec.support.oracles.tolerances import assert_close
from torchlet.contract import TRITON_BASICS, ModelConfig

# The kernels are v09's objects: later versions call them unchanged (kernel_mode.py).
pytestmark = pytest.mark.spec(needs=TRITON_BASICS, kernels=True, part="model")

# Sizes that are not powers of two are the point: 896 is Qwen2.5-0.5B's hidden size, 576
# SmolLM2's; 1 and 1025 sit on either side of a block edge.
hidden_sizes = st.one_of(st.sampled_from([1, 3, 576, 896, 1025, 3584, 8192]), st.integers(1, 1100))
seeds = st.integers(0, 2**32 - 1)
# Every example is a kernel launch, and the interpreter runs each program's ops one by one in
# numpy: these properties take the few-example settings of slow properties.


@pytest.fixture(scope="module")
def kernels(impl):
    return impl.package.kernels


@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(rows=st.integers(1, 4), hidden=hidden_sizes, eps=st.sampled_from([1e-6, 1e-5]),
       seed=seeds)
def test_rms_norm_equals_the_reference_for_any_hidden_size(kernels, target, rows, hidden, eps,
                                                            seed):
    gen = torch.Generator().manual_seed(seed)
    x = target.randn(gen, rows, hidden, scale=3.0)
    weight = target.randn(gen, hidden)
    assert_close(kernels.rms_norm(x, weight, eps), ref.rms_norm(x, weight, eps), "rms_norm")


@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(rows=st.integers(1, 4), hidden=hidden_sizes, seed=seeds)
def test_add_rms_norm_returns_the_normalized_sum_and_the_sum(kernels, target, rows, hidden, seed):
    gen = torch.Generator().manual_seed(seed)
    x, residual = target.randn(gen, rows, hidden), target.randn(gen, rows, hidden)
    weight = target.randn(gen, hidden)
    normed, new_residual = kernels.add_rms_norm(x, residual, weight, 1e-6)
    total = x + residual  # the residual stream, rounded to the model dtype as PyTorch does
    assert torch.equal(new_residual, total)
    assert_close(normed, ref.rms_norm(total, weight, 1e-6), "add_rms_norm")


@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(tokens=st.integers(1, 5), heads=st.integers(1, 20),
       half=st.one_of(st.sampled_from([1, 32, 64]), st.integers(1, 80)),
       theta=st.sampled_from([10000.0, 500000.0, 1000000.0]),
       max_position=st.sampled_from([1, 4096, 32768]), seed=seeds)
def test_rope_rotates_each_head_like_the_rotate_half_reference(kernels, target, tokens, heads,
                                                                half, theta, max_position, seed):
    gen = torch.Generator().manual_seed(seed)
    x = target.randn(gen, tokens, heads, 2 * half)
    positions = torch.randint(0, max_position, (tokens,), generator=gen).to(target.device)
    assert_close(kernels.apply_rope(x, positions, theta), ref.rope(x, positions, theta), "rope")


@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(tokens=st.integers(1, 4), kv_heads=st.integers(1, 3), group=st.integers(1, 5),
       head_dim=st.sampled_from([16, 32, 64, 128]), eps=st.sampled_from([1e-6, 1e-5]), seed=seeds)
def test_qwen3s_per_head_q_and_k_norm_is_the_rms_norm_kernel_over_each_head(
        impl, kernels, target, tokens, kv_heads, group, head_dim, eps, seed):
    """The decoder's qk_norm (Qwen3's q_norm and k_norm, before RoPE) runs v09's rms_norm kernel
    once for q and once for k, over heads [tokens, heads, head_dim] with a [head_dim] weight."""
    gen = torch.Generator().manual_seed(seed)
    q = target.randn(gen, tokens, kv_heads * group, head_dim, scale=3.0)
    k = target.randn(gen, tokens, kv_heads, head_dim, scale=3.0)
    w = {"self_attn.q_norm.weight": target.randn(gen, head_dim),
         "self_attn.k_norm.weight": target.randn(gen, head_dim)}
    config = ModelConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1,
                         num_heads=kv_heads * group, num_kv_heads=kv_heads, head_dim=head_dim,
                         max_position=8, rms_eps=eps, family="qwen3", qk_norm=True)
    ops = impl.layers.ops.for_device(target.device, target.dtype)  # an engine's, on the kernels
    with KernelCalls(kernels) as calls:
        qn, kn = ops.qk_norm(q, k, w, config)
    assert calls.counts["rms_norm"] == 2
    assert_close(qn, ref.rms_norm(q, w["self_attn.q_norm.weight"], eps), "q_norm")
    assert_close(kn, ref.rms_norm(k, w["self_attn.k_norm.weight"], eps), "k_norm")


@pytest.mark.parametrize("target", TARGETS)
def test_rope_leaves_position_zero_unchanged(kernels, target):
    x = target.randn(torch.Generator().manual_seed(0), 3, 5, 24)
    positions = torch.zeros(3, dtype=torch.int64, device=target.device)
    assert torch.equal(kernels.apply_rope(x, positions, 10000.0), x)


@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(rows=st.integers(1, 3), width=st.one_of(st.sampled_from([1, 1024, 1025, 4864]),
                                               st.integers(1, 3000)), seed=seeds)
def test_swiglu_equals_silu_of_gate_times_up(kernels, target, rows, width, seed):
    gen = torch.Generator().manual_seed(seed)
    gate, up = target.randn(gen, rows, width, scale=4.0), target.randn(gen, rows, width)
    assert_close(kernels.swiglu(gate, up), ref.swiglu(gate, up), "swiglu")


def test_kernels_refuse_non_contiguous_input_with_a_message_that_says_so(kernels):
    x = torch.randn(8, 6).t()
    with pytest.raises(ValueError, match="contiguous"):
        kernels.rms_norm(x, torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="contiguous"):
        kernels.swiglu(x, x)
    with pytest.raises(ValueError, match="contiguous"):
        kernels.apply_rope(torch.randn(4, 2, 8).transpose(0, 1), torch.arange(2), 10000.0)


def test_kernels_refuse_mismatched_shapes_and_dtypes(kernels):
    x = torch.randn(2, 6)
    with pytest.raises(ValueError, match="weight"):
        kernels.rms_norm(x, torch.ones(5), 1e-6)
    with pytest.raises(ValueError, match="weight"):
        kernels.rms_norm(x, torch.ones(6, dtype=torch.float64), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        kernels.add_rms_norm(x, torch.randn(2, 5), torch.ones(6), 1e-6)
    with pytest.raises(ValueError, match="same shape"):
        kernels.swiglu(x, torch.randn(2, 5))
    with pytest.raises(ValueError, match="int64|float32|dtype"):
        kernels.swiglu(x.long(), x.long())
    with pytest.raises(ValueError, match="even"):
        kernels.apply_rope(torch.randn(2, 1, 7), torch.arange(2), 10000.0)
    with pytest.raises(ValueError, match="positions"):
        kernels.apply_rope(torch.randn(2, 1, 8), torch.arange(3), 10000.0)


def test_under_fake_tensors_each_kernel_op_promises_the_shapes_and_dtypes_it_returns(kernels):
    """A graph recorder or torch.compile plans memory from an op's fake implementation, without
    launching it: what the fake promises must be what the kernel returns."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    here = Target("cuda" if torch.cuda.is_available() else "cpu", torch.float32)
    gen = torch.Generator().manual_seed(0)
    x, res, w, q = (here.randn(gen, *shape) for shape in ((3, 40), (3, 40), (40,), (3, 2, 8)))
    pos = torch.arange(3, device=here.device)
    calls = {"rms_norm": lambda k, t: k.rms_norm(t["x"], t["w"], 1e-6),
             "add_rms_norm": lambda k, t: k.add_rms_norm(t["x"], t["res"], t["w"], 1e-6),
             "apply_rope": lambda k, t: k.apply_rope(t["q"], t["pos"], 10000.0),
             "swiglu": lambda k, t: k.swiglu(t["x"], t["res"])}
    real = dict(x=x, res=res, w=w, q=q, pos=pos)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = {n: mode.from_tensor(t) for n, t in real.items()}
        promised = {name: call(kernels, fake) for name, call in calls.items()}
    for name, call in calls.items():
        got = call(kernels, real)
        got, want = (got if isinstance(got, tuple) else (got,),
                     promised[name] if isinstance(promised[name], tuple) else (promised[name],))
        assert [(tuple(t.shape), t.dtype) for t in want] == [(tuple(t.shape), t.dtype) for t in got], name
