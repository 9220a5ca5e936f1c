"""v10_triton_paged_gqa, the engine: v09 with the paged K/V cache on Triton. The decode step
stores each lane's new K/V with the store kernel and attends with the paged decode-attention
kernel, and that step is still captured once per bucket and replayed as a graph.

What it introduces: implementations/v10_triton_paged_gqa/model.py, v09's decoder with its
memory TritonPagedAttention: v08's PagedAttention with the two functions its decode and prefill
passes store and attend through, store_kv and paged_decode_attention, taken from the kernels of
paged_kernels.py (prefill uses the store kernel; its attention stays PyTorch). The other parts
are v08's: v10's recipe (PARTS) swaps only the model.

Why the previous version needs it: v09's decode step still gathers every slot of every padded
block table into a contiguous copy before its softmax (v08's readable attention). With the
kernel, the step a graph replays is kernels and matmuls end to end, and reads each live page once.

Core principle: the kernels change where K/V is read and written, never what the model computes.
The step really runs them (spec/support/watchers/kernel_calls.py counts them below the engine, replays
included); replaying the Triton step is bit-for-bit the eager step on CPU; and tokens equal
v08's, here with pages of 4 tokens so each table spans many pages in scattered order. Token
parity on default pages and logit parity in every pass are inherited from
spec/test_v09_triton_engine.py, which runs on every version with triton_basics.

Files to compare: implementations/v10_triton_paged_gqa/model.py against
implementations/v08_paged_gqa_py/model.py (the passes that call store_kv and
paged_decode_attention, and those functions).

Tradeoff left visible: the CPU graph stand-in replays each kernel as one custom op, so the
interpreter runs it at every replay: slow on CPU, hence tiny shapes and few tokens. In float64 no
kernel runs (v09's fallback), so the inherited float64 specs exercise v08's attention here.
"""
from __future__ import annotations

import pytest
import torch

import implementations
from spec.support.watchers.kernel_calls import KernelCalls
from spec.support.inputs.kernel_targets import interpreted
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.prompts import screened
from spec.support.watchers.replay_watch import ModelWatch
from spec.support.oracles.tolerances import tolerance
from torchlet.contract import FUSED, TRITON_PAGED, GenerationParams

# On CPU the kernels run only under the interpreter; without it the engine runs PyTorch layers.
pytestmark = pytest.mark.spec(needs=TRITON_PAGED)

FIXTURE = "tiny_llama"  # GQA 6:2, so a program serves a group of 3 query heads
PAGED = {"store_kv", "paged_decode_attention"}


def prompts(count: int = 3) -> list[list[int]]:
    return [list(p) for p, _ in screened(FIXTURE)[:count]]


def decode_logits(engine, steps: int) -> list[torch.Tensor]:
    """Prefill three requests, then decode `steps` steps of all three. The fed tokens are fixed
    (not the argmax), so two engines that differ by rounding still see the same inputs."""
    sequences = prompts()
    ids = list(range(len(sequences)))
    logits = [engine.prefill(ids, sequences)]
    for step in range(steps):
        sequences = [s + [10 + 7 * step + i] for i, s in enumerate(sequences)]
        logits.append(engine.decode(ids, sequences))
    return logits


def store_op(impl) -> tuple[list, str]:
    """Where a pass stores its new K/V: v10's store_kv, or from v13 (which fuses) the kernel that
    splits the heads, storing them as it goes."""
    if FUSED in impl.capabilities:
        return [impl.package.fused_kernels], "rope_split_store"
    return [], "store_kv"


@interpreted
def test_the_decode_step_stores_and_attends_with_the_paged_kernels_under_replay(impl):
    engine = impl.build(tiny_checkpoint(FIXTURE))
    layers = engine.config.num_layers
    paged = impl.package.paged_kernels
    fused, store = store_op(impl)
    prompt = prompts()[0]
    with KernelCalls(paged) as prefill:
        engine.prefill(["r"], [prompt])
    # a prefill's attention is still PyTorch (until v13's, a kernel of its own module)
    assert prefill.names() == ({"store_kv"} if not fused else set())
    sequence = prompt + [5]
    for _ in range(3):  # capture, then replays
        with KernelCalls(paged, *fused) as decode, ModelWatch(impl) as watch:
            engine.decode(["r"], [sequence])
        assert {n: decode.counts[n] for n in (store, "paged_decode_attention")} == \
            {store: layers, "paged_decode_attention": layers}
        assert decode.counts["store_kv"] == (layers if not fused else 0)
        sequence = sequence + [5]
    assert not watch.model_calls, f"the last step ran the model's code: {watch.model_calls[:3]}"
    assert sum(s["replays"] for s in engine.graph_stats().values()) >= 2


@interpreted
def test_replaying_the_triton_step_equals_running_it_eagerly_bit_for_bit(impl):
    ckpt = tiny_checkpoint(FIXTURE)
    graphed = impl.build(ckpt)
    replayed = decode_logits(graphed, steps=3)
    eager = decode_logits(impl.build(ckpt, use_graphs=False), steps=3)
    assert sum(s["replays"] for s in graphed.graph_stats().values()) >= 2
    for step, (a, b) in enumerate(zip(replayed, eager)):
        assert torch.equal(a, b), f"step {step}"


@interpreted
def test_tokens_equal_v08s_with_pages_of_4_tokens_so_tables_span_many_pages(impl):
    ckpt = tiny_checkpoint(FIXTURE)
    params = GenerationParams(max_new_tokens=5, ignore_eos=True)
    engine = impl.build(ckpt, block_size=4)
    ours = engine.generate(prompts(), params)
    v08 = implementations.load("v08_paged_gqa_py").build(ckpt, block_size=4)
    assert ours == v08.generate(prompts(), params)
    assert max(len(p) for p in prompts()) + 5 > 4 * 4  # some table holds five pages or more


# --- on the GPU: the kernels compiled, the step a CUDA graph --------------------------------

@pytest.mark.gpu
def test_cuda_float32_tokens_equal_v08s_with_small_pages_and_the_step_replays(impl):
    ckpt = tiny_checkpoint(FIXTURE)
    params = GenerationParams(max_new_tokens=16, ignore_eos=True)
    engine = impl.build(ckpt, device="cuda", block_size=4)
    ours = engine.generate(prompts(), params)
    v08 = implementations.load("v08_paged_gqa_py").build(ckpt, device="cuda", block_size=4)
    assert ours == v08.generate(prompts(), params)
    assert sum(s["replays"] for s in engine.graph_stats().values()) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_graph_replay_of_the_triton_step_stays_near_the_eager_step(impl, dtype):
    # cuBLAS may choose other matmul kernels inside a capture, so replay and eager agree within
    # the dtype's tolerance, compared as whole logit vectors.
    ckpt = tiny_checkpoint(FIXTURE)
    graphed = impl.build(ckpt, device="cuda", dtype=dtype)
    replayed = decode_logits(graphed, steps=4)
    eager = decode_logits(impl.build(ckpt, device="cuda", dtype=dtype, use_graphs=False), steps=4)
    assert sum(s["replays"] for s in graphed.graph_stats().values()) >= 3
    for step, (a, b) in enumerate(zip(replayed, eager)):
        assert torch.isfinite(a).all(), f"step {step}"
        error = (a - b).norm() / b.norm()
        assert error <= tolerance(dtype)["rtol"], f"step {step}: relative error {error:.2e}"
