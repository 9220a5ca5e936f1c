"""v13_fused: fewer, larger kernels, the same tokens.

What it introduces: packed weights (each layer's q/k/v matrices stacked into one, and gate/up
into one, at load) and the kernels that read the packed outputs: rope_split turns q and k by RoPE
and lays out the heads of all three straight from the q/k/v GEMM's row (for Qwen3 it first
RMS-norms each q and k head by q_norm and k_norm, the step v09 ran as rms_norm launches), and
in a pass also writes each new k and v into its cache slot, where v10's store_kv ran a launch of
its own (rope_split_store); swiglu_packed reads both halves of the gate/up GEMM's row. A prefill's attention is one kernel a layer for all its
requests (context_attention), which reads each request's context from the paged cache by its
slots, its causal mask aligned to the bottom right when a cached prefix comes first; without
Triton, v12's gathers and one fused call per request (v02's causal_attention). At one row (a
batch-1 decode step) each layer's products are gemv kernels, cuBLAS's GEMMs elsewhere; down's
gemv reads [gate | up] and forms SwiGLU itself, the MLP's two norms run inside the products
about them (norm_gemv, and the next layer's q/k/v gemv, which adds down's pending partial sums
to the stream and norms the row in its programs), and the q/k/v gemv turns, splits and stores
the heads itself (gemv_rope_split; not for Qwen3, whose per-head norms run in rope_split after
the gemv); the attention and the o product after it run as one launch
(attend_project: its first programs attend as v10's kernel's do and write the heads' output,
the rest multiply it by o as the o gemv's do once every head is written, a hand-over within the
launch through a count in memory), where v10's plan runs that attention as one launch; on
Hopper and later those kernels launch dependent on the launch before them (programmatic
dependent launch: each starts early, reads its first weights, then waits for
the writes it reads). The greedy draw's argmax is argmax_rows, one read
of the logits (chunks of each row over programs, then a pick), which the sampler reaches through
the model's ops.

Why v12 needs it: a decode step is a chain of small launches. v12 runs seven GEMMs a layer, three
of them over the same normed rows and two over the next, then one RoPE kernel for q and another
for k; and every prefill gathers each request's context out of the cache and attends to it in a
call of its own, in every layer. At one row cuBLAS reads a layer's small matrices at a fraction of
the bandwidth (4.2-4.7 us for 1.6-2.1 MB on the H200), and down runs as two launches after
SwiGLU's own. torch's argmax over a 151,936-wide row gives the row one block: 54 us for 256 rows
on an H100, where chunks over programs take 31 (docs/perf-notes.md).

Core principle: fusion changes how many kernels run, never what they compute. The packed path's
logits equal v12's (float64, on the tiny fixtures, with and without a cached prefix) and its
tokens equal the oracle's (the shared golden specs); each kernel equals a float64 reference
within its dtype's tolerance, v copied bit for bit, and the stored split leaves the caches the
same bits store_kv leaves them. That the work really is fused is read from
the dispatched ops: a decode pass multiplies by four matrices a layer where v12 multiplied by
seven, at one row in four launches (the attention riding on o's) and no swiglu_packed, the MLP's two norms inside its two
products (norm_gemv, and down's partial sums formed inside the next q/k/v launch: one norm
launch and one sums-add-norm a step) and RoPE and the store inside the
q/k/v one (gemv_rope_split_store, no rope_split_store); every pass stores its K/V in
rope_split_store (at one row in gemv_rope_split_store) and runs no store_kv; and a prefill
runs one attention op a layer (one per request and layer without Triton), no softmax, and
gathers no context.
gemv equals a float64 product within its dtype's tolerance, with and without SwiGLU, with k split
over programs and not; norm_gemv and gemv_add_norm give the stream the bits of v09's
add_rms_norm and the product or normed stream within tolerance of the reference;
gemv_rope_split gives rope_split's q, k and v of the gemv within tolerance and stores the bits
it returns; handed a pending row it writes the stream settle writes, the bits of the chain, and
q, k and v within tolerance of settle's row. attend_project gives the o gemv of the heads' output
v10's kernel writes, the bits under the interpreter, and the reference's attention times o
within tolerance; watched program by program, each attention program stores its heads, then
counts itself done with release order, and each o program, its ticket taken, reads the heads
only after it has read its launch's every attention program done with acquire order, from L2 (on a
GPU, a graph of 24 such launches replayed 20 times on new queries multiplies each replay's own
heads); and where v10 splits a one-row context the attention launches as before and o reads its
output. Launched dependent, each program of those kernels lets the next launch start,
waits once, and reads nothing but its weights before it waits (its loads watched under the
interpreter); in a one-row decode step every layer kernel, the attention's launch included, is
launched so, the attention reading nothing the q/k/v launch writes before it waits; on a
Hopper GPU a replayed graph of such launches gives the bits of the same launches one after
another. argmax_rows equals torch's argmax, a tie's first index and a NaN included,
and a greedy engine's every draw runs it and no aten argmax.

Files to compare: implementations/v13_fused/{model.py, fused_kernels.py, gemv.py} against
implementations/v09_triton_basics/{model.py, kernels.py}; implementations/v13_fused/
{context_attention.py, attend_project.py} against implementations/v10_triton_paged_gqa/paged_kernels.py (the decode kernel they extend to
many rows, and to o's product)
and implementations/v12_prefix_cache/model.py (attend_context).

Tradeoff left visible: packing happens at load, so the layer tensors a v13 engine holds are no
longer Hugging Face's names (the Layers contract's functions still take HF-named tensors, and
then run v12's way); the kernels still return new tensors, so q, k and v are written once more
after the GEMM; and context_attention's grid is planned from shapes alone (no device read): for
the longest request, so the programs past a shorter request's rows start only to end, and where
few rows meet a long context (a slice late in a prompt) it splits the context over programs,
whose partials a second launch (v10's combine) merges. gemv serves one row only: at 4 and 16
rows its tensor-core variants moved a step by under 1% and made down slower, so a batch of two
runs cuBLAS's GEMMs again (docs/perf-notes.md). The dependent chain is a layer's: the step's
first norm (v09's), the LM head (cuBLAS's) and the argmax launch plainly, so a step's overlap
starts at the first layer's q/k/v product and ends at the last sums-add-norm.
"""
from __future__ import annotations

import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from hypothesis import example, given
from hypothesis import strategies as st

import implementations
from spec.support.oracles import kernel_reference as ref
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.dependent_reads import DependentReads
from spec.support.watchers.kernel_calls import AtenCalls, KernelCalls
from spec.support.inputs.kernel_targets import INTERPRETED, TARGETS, Target, interpreted
from spec.support.models.fixtures import QWEN3, SHAPE_PROMPTS, tiny_checkpoint
from spec.support.oracles.prompts import screened
from spec.support.oracles.tolerances import assert_close
from torchlet.contract import FUSED, GenerationParams

pytestmark = pytest.mark.spec(needs=FUSED)

FIXTURES = ("tiny_qwen2", "tiny_llama")
PROMPTS = [[17, 5, 300, 42, 99, 8, 250, 3, 9], [4, 4, 4, 4, 4], list(range(40, 61))]
seeds = st.integers(0, 2**32 - 1)
MATMULS = ("linear", "matmul", "mm", "addmm")
GEMVS = ("gemv", "norm_gemv", "gemv_partial", "gemv_rope_split_store",  # one-row products
         "attend_project")


@pytest.fixture(scope="module")
def fused(impl):
    return impl.package.fused_kernels


@pytest.fixture(scope="module")
def gemv(impl):
    return impl.package.gemv


@pytest.fixture(scope="module")
def context_kernel(impl):
    return impl.package.context_attention


@pytest.fixture(scope="module")
def v12():
    return implementations.load("v12_prefix_cache")


def kernel_inputs(target: Target, seed: int, tokens: int, n_q: int, n_kv: int, half: int):
    gen = torch.Generator().manual_seed(seed)
    qkv = target.randn(gen, tokens, (n_q + 2 * n_kv) * 2 * half)
    positions = torch.randint(0, 32768, (tokens,), generator=gen).to(target.device)
    return qkv, positions


# --- the kernels -------------------------------------------------------------------------------

@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(tokens=st.integers(1, 5), n_kv=st.integers(1, 4), group=st.integers(1, 5),
       half=st.one_of(st.sampled_from([1, 32, 64]), st.integers(1, 40)),
       theta=st.sampled_from([10000.0, 1000000.0]), seed=seeds)
def test_rope_split_turns_q_and_k_like_the_reference_and_copies_v(impl, fused, target, tokens,
                                                                  n_kv, group, half, theta, seed):
    n_q = n_kv * group
    qkv, positions = kernel_inputs(target, seed, tokens, n_q, n_kv, half)
    cos, sin = impl.package.kernels.rope_cos_sin(positions, 2 * half, theta)
    q, k, v = fused.rope_split(qkv, cos, sin, n_q, n_kv)
    heads = qkv.view(tokens, n_q + 2 * n_kv, 2 * half)
    assert_close(q, ref.rope(heads[:, :n_q], positions, theta), "q")
    assert_close(k, ref.rope(heads[:, n_q:n_q + n_kv], positions, theta), "k")
    assert torch.equal(v, heads[:, n_q + n_kv:]), "v must be copied as it is"
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous()


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(tokens=st.integers(1, 4), n_kv=st.integers(1, 3), group=st.integers(1, 5),
       half=st.sampled_from([8, 16, 32, 64]), eps=st.sampled_from([1e-6, 1e-5]), seed=seeds)
def test_with_qwen3s_norms_rope_split_norms_each_q_and_k_head_then_turns_it(
        impl, fused, target, tokens, n_kv, group, half, eps, seed):
    """Qwen3: each q head RMS-normed by q_norm and each k head by k_norm over its head_dim values,
    then rotated; v still copied as it is."""
    n_q = n_kv * group
    qkv, positions = kernel_inputs(target, seed, tokens, n_q, n_kv, half)
    gen = torch.Generator().manual_seed(seed + 1)
    q_norm, k_norm = target.randn(gen, 2 * half), target.randn(gen, 2 * half)
    cos, sin = impl.package.kernels.rope_cos_sin(positions, 2 * half, 10000.0)
    q, k, v = fused.rope_split(qkv, cos, sin, n_q, n_kv, q_norm, k_norm, eps)
    heads = qkv.view(tokens, n_q + 2 * n_kv, 2 * half)
    assert_close(q, ref.rope(ref.rms_norm(heads[:, :n_q], q_norm, eps), positions, 10000.0), "q")
    assert_close(k, ref.rope(ref.rms_norm(heads[:, n_q:n_q + n_kv], k_norm, eps), positions,
                             10000.0), "k")
    assert torch.equal(v, heads[:, n_q + n_kv:]), "v must be copied as it is"


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(data=st.data(), n_kv=st.integers(1, 3), group=st.integers(1, 3),
       half=st.sampled_from([1, 8, 32]), block_size=st.sampled_from([1, 3, 16]),
       norms=st.booleans(), seed=seeds)
def test_rope_split_with_a_store_writes_the_caches_as_store_kv_writes_its_k_and_v(
        impl, fused, target, data, n_kv, group, half, block_size, norms, seed):
    """With store=(k_cache, v_cache, slot_mapping) the same launch writes each token's k and v
    into its slot, the same bits as v10's store_kv(k, v, ...) writes there, a slot of -1
    nothing, every other slot untouched; q, k and v are what rope_split returns without it."""
    n_q, capacity = n_kv * group, 3 * block_size
    slots = data.draw(st.lists(st.one_of(st.integers(0, capacity - 1), st.just(-1)),
                               min_size=1, max_size=5)
                      .filter(lambda s: len({x for x in s if x >= 0}) == sum(x >= 0 for x in s)),
                      label="slot_mapping")
    qkv, positions = kernel_inputs(target, seed, len(slots), n_q, n_kv, half)
    gen = torch.Generator().manual_seed(seed + 1)
    qk_norms = (target.randn(gen, 2 * half), target.randn(gen, 2 * half)) if norms else ()
    cos, sin = impl.package.kernels.rope_cos_sin(positions, 2 * half, 10000.0)
    k_cache = target.randn(gen, 3, block_size, n_kv, 2 * half)
    v_cache = target.randn(gen, 3, block_size, n_kv, 2 * half)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=target.device)
    q, k, v = fused.rope_split(qkv, cos, sin, n_q, n_kv, *qk_norms)
    impl.package.paged_kernels.store_kv(k, v, want_k, want_v, slot_mapping)
    got = fused.rope_split(qkv, cos, sin, n_q, n_kv, *qk_norms,
                           store=(k_cache, v_cache, slot_mapping))
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v), slots
    assert all(torch.equal(a, b) for a, b in zip(got, (q, k, v)))


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(rows=st.integers(1, 3), vocab=st.one_of(st.sampled_from([1, 2047, 2048, 2049, 6000]),
                                               st.integers(1, 6000)),
       tied=st.lists(st.integers(0, 10**6), max_size=3), nan=st.integers(-1, 10**6), seed=seeds)
@example(rows=2, vocab=6000, tied=[700, 3], nan=-1, seed=0)            # a tie inside one chunk
@example(rows=2, vocab=6000, tied=[5999, 2500, 10], nan=-1, seed=0)    # a tie across chunks
@example(rows=1, vocab=2049, tied=[2048], nan=-1, seed=0)              # the largest alone, last
@example(rows=2, vocab=1500, tied=[1499], nan=-1, seed=0)              # one chunk, its last column
@example(rows=3, vocab=6000, tied=[100, 4100], nan=4096, seed=0)       # a NaN past the tie
def test_argmax_rows_is_each_rows_first_largest_index_a_nan_counted_largest(
        fused, target, rows, vocab, tied, nan, seed):
    """torch's argmax over the last dim: each row's largest value at the `tied` columns (so the
    first of them must win), and where `nan` >= 0 a NaN in the last row, which torch counts as
    the largest value."""
    gen = torch.Generator().manual_seed(seed)
    logits = target.randn(gen, rows, vocab, scale=3.0)
    for col in tied:
        logits[:, col % vocab] = 99.0
    if nan >= 0:
        logits[-1, nan % vocab] = float("nan")
    got = fused.argmax_rows(logits)
    assert got.dtype == torch.int64 and got.shape == (rows,)
    assert torch.equal(got, logits.argmax(dim=-1)), (got, logits.argmax(dim=-1))


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(rows=st.integers(1, 4), width=st.one_of(st.sampled_from([1, 1536, 4864]),
                                               st.integers(1, 1100)), seed=seeds)
def test_swiglu_packed_is_silu_of_the_first_half_times_the_second(fused, target, rows, width,
                                                                  seed):
    gen = torch.Generator().manual_seed(seed)
    gate_up = target.randn(gen, rows, 2 * width, scale=4.0)
    gate, up = gate_up.chunk(2, dim=-1)
    assert_close(fused.swiglu_packed(gate_up), ref.swiglu(gate, up), "swiglu_packed")


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(n=st.one_of(st.sampled_from([1, 1152]), st.integers(1, 300)),
       k=st.one_of(st.sampled_from([1, 896, 4864]), st.integers(1, 600)), bias=st.booleans(),
       swiglu=st.booleans(), rows=st.integers(1, 3), seed=seeds)
def test_gemv_is_the_row_times_the_weights_transposed_plus_the_bias(gemv, target, n, k, bias,
                                                                     swiglu, rows, seed):
    """With swiglu the row is [gate | up] and the product is silu(gate) * up's, rounded to the
    model dtype where swiglu_packed rounds it before a GEMM (the reference rounds there too, so
    the tolerance is the product's). A long k is split over programs: on the CPU a k over 256,
    on a GPU over 1,024. Given several rows, each row's result is the very bits it gets alone
    (what a batch-invariant product needs)."""
    gen = torch.Generator().manual_seed(seed)
    x = target.randn(gen, rows, 2 * k if swiglu else k, scale=2.0)
    w = target.randn(gen, n, k, scale=k ** -0.5)
    b = target.randn(gen, n) if bias else None
    if swiglu:
        gate, up = x.double().chunk(2, dim=-1)
        silu = torch.nn.functional.silu(gate).to(x.dtype).double()
        a = (silu * up).to(x.dtype).double()
    else:
        a = x.double()
    want = a @ w.double().T + (b.double() if bias else 0.0)
    out = gemv.gemv(x, w, b, swiglu=swiglu)
    assert_close(out, want, "gemv")
    for i in range(rows):
        assert torch.equal(out[i:i + 1], gemv.gemv(x[i:i + 1], w, b, swiglu=swiglu)), f"row {i}"


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(n=st.one_of(st.sampled_from([1, 1152]), st.integers(1, 300)),
       k=st.one_of(st.sampled_from([1, 896]), st.integers(1, 600)), bias=st.booleans(),
       rows=st.integers(1, 3), eps=st.sampled_from([1e-6, 1e-5]), seed=seeds)
def test_norm_gemv_is_the_norm_of_the_stream_times_the_weights_and_gives_the_stream(
        gemv, target, n, k, bias, rows, eps, seed):
    """norm_gemv(x, residual, norm, eps, w, b) is (rms_norm(x + residual) @ w.T + b, x +
    residual): the stream the very bits torch's add rounds (v09's add_rms_norm's), every row's
    of it, however many programs share the row's weights; the product the float64 reference's
    within its dtype's tolerance, the norm rounded to the dtype first as the layer rounds it.
    Each row's results are the bits it gets alone."""
    gen = torch.Generator().manual_seed(seed)
    x, residual = target.randn(gen, rows, k, scale=2.0), target.randn(gen, rows, k, scale=2.0)
    norm, w = target.randn(gen, k), target.randn(gen, n, k, scale=k ** -0.5)
    b = target.randn(gen, n) if bias else None
    out, stream = gemv.norm_gemv(x, residual, norm, eps, w, b)
    assert torch.equal(stream, x + residual), "the stream"
    h = ref.rms_norm(stream, norm, eps).to(x.dtype).double()
    assert_close(out, h @ w.double().T + (b.double() if bias else 0.0), "norm_gemv")
    for i in range(rows):
        alone = gemv.norm_gemv(x[i:i + 1], residual[i:i + 1], norm, eps, w, b)
        assert all(torch.equal(a, b_[i:i + 1]) for a, b_ in zip(alone, (out, stream))), i


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(contexts=st.lists(st.one_of(st.just(0), st.integers(1, 300)), min_size=1, max_size=2),
       kv_heads=st.integers(1, 3), group=st.integers(1, 5), head_dim=st.sampled_from([4, 16, 64]),
       n=st.one_of(st.sampled_from([1, 896]), st.integers(1, 100)),
       block_size=st.sampled_from([1, 4, 16]), bias=st.booleans(), seed=seeds)
# two requests, and o's k (384) past the interpreter's share of 256 columns: every draw's
# checks on the rows' and the shares' indexing, whatever Hypothesis draws besides
@example(contexts=[7, 300], kv_heads=2, group=3, head_dim=64, n=40, block_size=16, bias=True,
         seed=1)
def test_attend_project_is_the_o_gemv_of_the_heads_output_v10s_kernel_writes(
        impl, gemv, target, contexts, kv_heads, group, head_dim, n, block_size, bias, seed):
    """attend_project(Attention(q, caches, tables, lens, scale), w, b): the paged decode
    attention and the o projection of its heads merged, in one launch: under the interpreter
    the bits of gemv(attend(...) merged, w, b), two launches (the heads' output as v10's kernel
    writes it, the product as gemv sums it, k's shares included); on a GPU the same sums
    compiled in one kernel, within the dtype's tolerance; and within the dtype's tolerance of
    the float64 reference's attention times w. A context of 0 (an idle lane) gives the bias
    alone. Called again on the same inputs, the same bits (the launch leaves its count where it
    found it). The caches hold NaN outside the contexts, so a read past one shows."""
    ap = impl.package.attend_project
    gen = torch.Generator().manual_seed(seed)
    batch = ref.paged_batch(target, gen, contexts, block_size=block_size, kv_heads=kv_heads,
                            group=group, head_dim=head_dim)
    rows, width = len(contexts), kv_heads * group * head_dim
    w = target.randn(gen, n, width, scale=width ** -0.5)
    b = target.randn(gen, n) if bias else None
    attention = ap.Attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                             batch.context_lens, batch.scale)
    got = ap.attend_project(attention, w, b)
    assert got.shape == (rows, n) and got.dtype == target.dtype
    two_launches = gemv.gemv(ap.attend(attention).reshape(rows, width), w, b)
    if target.on_gpu:
        assert_close(got, two_launches, "the two launches' product")
    else:
        assert torch.equal(got, two_launches), "not the bits of the attention, then the o gemv"
    heads = ref.paged_decode_attention(batch.q, batch.k_cache, batch.v_cache,
                                       batch.block_tables, batch.context_lens, batch.scale)
    want = heads.reshape(rows, width) @ w.double().T + (b.double() if bias else 0.0)
    assert_close(got, want, "the attention times o")
    assert torch.equal(ap.attend_project(attention, w, b), got), "a second launch, other bits"


@pytest.mark.spec(part="model")
@interpreted
@pytest.mark.parametrize("dependent", [False, True])
def test_attend_project_hands_the_heads_to_o_within_its_launch_written_then_counted_then_read(
        impl, gemv, dependent, monkeypatch):
    """attend_project's programs hand the heads' output over within one launch, which on a GPU
    run side by side: watched under the interpreter program by program (every load with its
    cache modifier, store, barrier, wait and atomic, in order: spec/support/watchers/
    dependent_reads.py), over three launches in a row, for two requests and two KV heads. The
    first four programs of a launch each store their heads' output, then a barrier (every
    thread's stores made), then one atomic add with release order to a count, and nothing
    after; the count grows by four a launch, never lowered. Each other program takes a ticket
    from a second count (an atomic add, which grows by the launch's o programs a launch), then
    reads the first count with acquire order until it holds its launch's four (the watcher makes
    each program's first read find it one short, as a read on a GPU may: the program must read
    again) before it reads any address the attention stored, and reads those with the "cg"
    modifier (from L2: an SM's L1 is not kept coherent within a launch); together they read
    every head. Launched dependent (as on Hopper), an o program waits before its ticket and
    reads nothing but o's weight before its wait."""
    ap = impl.package.attend_project
    gen = torch.Generator().manual_seed(0)
    cpu = Target("cpu", torch.float32)
    batch = ref.paged_batch(cpu, gen, [5, 9], block_size=4, kv_heads=2, group=2, head_dim=8)
    w = cpu.randn(gen, 6, 32, scale=0.2)
    attention = ap.Attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                             batch.context_lens, batch.scale)
    monkeypatch.setattr(gemv, "launches_dependent", lambda x: dependent)
    reads = DependentReads(monkeypatch, lag=True)
    outs = [ap.attend_project(attention, w) for _ in range(3)]
    attending = 2 * 2
    programs = [p for p in reads.programs if p.kernel == "_attend_project_kernel"]
    per_launch = len(programs) // 3
    assert per_launch > attending and len(programs) == 3 * per_launch, len(programs)
    o_programs = per_launch - attending
    first_count = first_ticket = None
    for k in range(3):
        launch = programs[k * per_launch:(k + 1) * per_launch]
        heads = set()
        for i, p in enumerate(launch[:attending]):
            where = f"launch {k}, attention program {i}"
            kinds = [e[0] for e in p.events]
            assert "store" in kinds, f"{where} stores nothing"
            last_store = max(j for j, kind in enumerate(kinds) if kind == "store")
            assert kinds[last_store + 1:] == ["barrier", "atomic"], (
                f"{where} after its last store: {kinds[last_store + 1:]}")
            op, order, found = p.events[-1][2]
            assert (op, order) == ("ADD", "RELEASE"), f"{where}: {op} {order}"
            first_count = found[0] if first_count is None else first_count
            assert first_count % attending == 0, f"the count began a launch at {first_count}"
            assert found == [first_count + k * attending + i], f"{where} found the count {found}"
            heads |= {a for kind, addrs, _ in p.events if kind == "store" for a in addrs.tolist()}
        assert len(heads) == 2 * 4 * 8, "the heads stored are not every request's every head"
        read = set()
        for i, p in enumerate(launch[attending:]):
            where = f"launch {k}, o program {i}"
            atomics = [j for j, e in enumerate(p.events) if e[0] == "atomic"]
            assert atomics, f"{where} takes no ticket"
            ticket = p.events[atomics[0]][2]
            assert ticket[:2] == ("ADD", "RELAXED"), f"{where} takes its ticket by {ticket[:2]}"
            first_ticket = ticket[2][0] if first_ticket is None else first_ticket
            assert ticket[2] == [first_ticket + k * o_programs + i], f"{where}: ticket {ticket}"
            waits = [j for j, e in enumerate(p.events) if e[0] == "wait"]
            assert bool(waits) == dependent and (not waits or waits[0] < atomics[0]), (
                f"{where}: waits at {waits}, its ticket at {atomics[0]}")
            polls = [j for j in atomics if p.events[j][2][:2] == ("ADD", "ACQUIRE")]
            assert len(polls) >= 2, f"{where} reads the count {len(polls)} times: found one " \
                                    f"short, it must read again"
            assert p.events[polls[-1]][2][2] == [first_count + (k + 1) * attending], (
                f"{where} went on at the count {p.events[polls[-1]][2][2]}")
            for j, (kind, addrs, cache) in enumerate(p.events):
                touched = heads & set(addrs.tolist())
                if kind == "load" and touched:
                    assert j > polls[-1], f"{where} reads the heads before the count holds them"
                    assert cache == "cg", f"{where} reads the heads through L1 ({cache!r})"
                    read |= touched
                assert kind == "load" or not touched, f"{where} {kind}s the heads"
            if dependent:
                early = p.read_before_wait({"weight": w})
                assert early <= {"weight"}, f"{where} reads {sorted(early)} before its wait"
        assert read == heads, "the o programs leave heads unread"
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
def test_at_one_row_a_context_v10_splits_keeps_its_attention_launches_and_leaves_o_apart(
        impl, target):
    """The memory's decode attention at one row (decode_attention): where v10's plan splits the
    context over programs (a table of MIN_SPLIT_CONTEXT tokens or more), it launches v10's
    attention at once, whose output the o projection then reads, as before; with a shorter
    table it launches nothing and leaves the attention to o's launch (attend_project), or to
    attend, which launches v10's alone: the bits decode_attention would have given. (On a GPU
    only where the module's ON_GPU lets it: till then it launches v10's there too.)"""
    ap, pk = impl.package.attend_project, impl.package.paged_kernels
    held = 0 if ap.ON_GPU or not target.on_gpu else 1  # a short context's launches at once
    for context, pages, launched in ((pk.MIN_SPLIT_CONTEXT, 0, 1),
                                     (pk.MIN_SPLIT_CONTEXT - 2 * 16, 0, held),
                                     (30, pk.MIN_SPLIT_CONTEXT // 16, 1)):
        gen = torch.Generator().manual_seed(context)
        batch = ref.paged_batch(target, gen, [context], block_size=16, kv_heads=2, group=2,
                                head_dim=8, pad_blocks=pages or 1)
        inputs = (batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                  batch.context_lens, batch.scale)
        with KernelCalls(pk, ap) as calls:
            out = ap.decode_attention(*inputs)
        assert sum(calls.counts.values()) == launched, (context, dict(calls.counts))
        if not launched:
            with KernelCalls(pk, ap) as calls:
                out = ap.attend(out)
            assert dict(calls.counts) == {"paged_decode_attention": 1}, context
        assert torch.equal(out, pk.paged_decode_attention(*inputs)), context


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(n=st.one_of(st.sampled_from([1, 896]), st.integers(1, 300)),
       k=st.one_of(st.sampled_from([1, 4864]), st.integers(1, 600)), bias=st.booleans(),
       swiglu=st.booleans(), rows=st.integers(1, 3), eps=st.sampled_from([1e-6, 1e-5]),
       seed=seeds)
@example(n=40, k=40, bias=True, swiglu=False, rows=2, eps=1e-6, seed=0)  # a bias, small first
def test_gemv_add_norm_adds_the_product_to_the_stream_and_norms_it(
        impl, gemv, target, n, k, bias, swiglu, rows, eps, seed):
    """gemv_add_norm(x, w, b, residual, norm, eps, swiglu) is add_rms_norm(gemv(x, w, b,
    swiglu), residual, norm, eps): the stream the very bits of v09's add_rms_norm after gemv
    (k's split partials added in gemv's order, on the CPU past 256 columns), the normed stream
    within its dtype's tolerance of both that chain and the float64 reference."""
    gen = torch.Generator().manual_seed(seed)
    x = target.randn(gen, rows, 2 * k if swiglu else k, scale=2.0)
    w, residual = target.randn(gen, n, k, scale=k ** -0.5), target.randn(gen, rows, n)
    norm, b = target.randn(gen, n), target.randn(gen, n) if bias else None
    normed, stream = gemv.gemv_add_norm(x, w, b, residual, norm, eps, swiglu=swiglu)
    chain_normed, chain_stream = impl.package.kernels.add_rms_norm(
        gemv.gemv(x, w, b, swiglu=swiglu), residual, norm, eps)
    assert torch.equal(stream, chain_stream), "the stream"
    assert_close(normed, chain_normed, "against the chain")
    assert_close(normed, ref.rms_norm(chain_stream, norm, eps), "against the reference")


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(data=st.data(), n_kv=st.integers(1, 3), group=st.integers(1, 4),
       half=st.sampled_from([1, 4, 32]), k=st.one_of(st.sampled_from([1, 896]),
                                                     st.integers(1, 300)),
       bias=st.booleans(), block_size=st.sampled_from([1, 4, 16]), seed=seeds)
def test_gemv_rope_split_is_rope_split_of_the_gemv_and_stores_as_it_stores(
        impl, gemv, fused, target, data, n_kv, group, half, k, bias, block_size, seed):
    """gemv_rope_split(x, w, b, cos, sin, n_q, n_kv, store) is rope_split(gemv(x, w, b), cos,
    sin, n_q, n_kv, store=store) in one launch: q, k and v within the product's tolerance of
    that chain and of the float64 reference (v copied from the product); each token's k and v
    written into its slot as the very bits it returns, a slot of -1 nothing, every other slot
    untouched."""
    n_q, capacity = n_kv * group, 3 * block_size
    slots = data.draw(st.lists(st.one_of(st.integers(0, capacity - 1), st.just(-1)),
                               min_size=1, max_size=3)
                      .filter(lambda s: len({x for x in s if x >= 0}) == sum(x >= 0 for x in s)),
                      label="slot_mapping")
    gen = torch.Generator().manual_seed(seed)
    tokens, width = len(slots), (n_q + 2 * n_kv) * 2 * half
    x, w = target.randn(gen, tokens, k), target.randn(gen, width, k, scale=k ** -0.5)
    b = target.randn(gen, width) if bias else None
    positions = torch.randint(0, 32768, (tokens,), generator=gen).to(target.device)
    cos, sin = impl.package.kernels.rope_cos_sin(positions, 2 * half, 10000.0)
    k_cache = target.randn(gen, 3, block_size, n_kv, 2 * half)
    v_cache = target.randn(gen, 3, block_size, n_kv, 2 * half)
    before = k_cache.clone(), v_cache.clone()
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=target.device)
    q, keys, values = gemv.gemv_rope_split(x, w, b, cos, sin, n_q, n_kv,
                                           (k_cache, v_cache, slot_mapping))
    chain = fused.rope_split(gemv.gemv(x, w, b), cos, sin, n_q, n_kv)
    want = qkv_reference(x, w, b, positions, n_q, n_kv)
    for name, got, theirs, exact in zip("qkv", (q, keys, values), chain, want):
        assert_close(got, theirs, f"{name} against the chain")
        assert_close(got, exact, f"{name} against the reference")
    assert stored_as_returned((k_cache, v_cache), before, slots, keys, values), slots


def qkv_reference(rows: torch.Tensor, w: torch.Tensor, b, positions: torch.Tensor, n_q: int,
                  n_kv: int):
    """The float64 q, k and v heads of rows @ w.T (+ b), q's and k's turned by RoPE."""
    heads = (rows.double() @ w.double().T + (b.double() if b is not None else 0.0)).view(
        rows.shape[0], n_q + 2 * n_kv, -1)
    return (ref.rope(heads[:, :n_q], positions, 10000.0),
            ref.rope(heads[:, n_q:n_q + n_kv], positions, 10000.0), heads[:, n_q + n_kv:])


def stored_as_returned(caches, before, slots, keys, values) -> bool:
    """Whether the caches are `before` with token i's keys and values in slot slots[i] (-1:
    nowhere), and every other slot untouched."""
    want = [c.clone() for c in before]
    for i, slot in enumerate(slots):
        if slot >= 0:
            for cache, new in zip(want, (keys, values)):
                cache.view(-1, *new.shape[1:])[slot] = new[i]
    return all(torch.equal(c, w) for c, w in zip(caches, want))




@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(tokens=st.integers(1, 3), n_kv=st.integers(1, 2), group=st.integers(1, 3),
       half=st.sampled_from([1, 4, 32]),
       k=st.one_of(st.sampled_from([1, 896]), st.integers(1, 300)),
       inner=st.one_of(st.sampled_from([1, 600]), st.integers(1, 300)), bias=st.booleans(),
       down_bias=st.booleans(), eps=st.sampled_from([1e-6, 1e-5]), seed=seeds)
# small first: a row of two tiles, under a padded width (the shapes drawn reach it later)
@example(tokens=1, n_kv=1, group=1, half=4, k=200, inner=8, bias=False, down_bias=False,
         eps=1e-6, seed=0)
def test_gemv_rope_split_forms_a_pending_row_itself_as_settle_would_and_writes_its_stream(
        impl, gemv, target, tokens, n_kv, group, half, k, inner, bias, down_bias, eps, seed):
    """Handed a pending row (pending_add_norm's: a product's partial sums, the stream before
    it, the norm that follows), gemv_rope_split forms the row in its own programs: the stream
    it writes, every token's, is the very bits of v09's add_rms_norm after gemv (the product's
    k split on the CPU past 256 columns), which settle writes too; q, k and v within the
    product's tolerance of settle's normed row through gemv_rope_split, and of the float64
    reference; each token's k and v stored in its slot as the bits it returns, every other slot
    untouched."""
    n_q = n_kv * group
    width = (n_q + 2 * n_kv) * 2 * half
    gen = torch.Generator().manual_seed(seed)
    x, down = target.randn(gen, tokens, inner, scale=2.0), target.randn(gen, k, inner,
                                                                        scale=inner ** -0.5)
    residual, norm = target.randn(gen, tokens, k), target.randn(gen, k)
    db = target.randn(gen, k) if down_bias else None
    w = target.randn(gen, width, k, scale=k ** -0.5)
    b = target.randn(gen, width) if bias else None
    positions = torch.randint(0, 32768, (tokens,), generator=gen).to(target.device)
    cos, sin = impl.package.kernels.rope_cos_sin(positions, 2 * half, 10000.0)
    caches = target.randn(gen, 3, 4, n_kv, 2 * half), target.randn(gen, 3, 4, n_kv, 2 * half)
    slots = torch.randperm(12, generator=gen)[:tokens].to(target.device)

    def through(row):
        k_cache, v_cache = (c.clone() for c in caches)
        return gemv.gemv_rope_split(row, w, b, cos, sin, n_q, n_kv, (k_cache, v_cache, slots)), \
            (k_cache, v_cache)

    pending, stream = gemv.pending_add_norm(x, down, db, residual, norm, eps)
    stream.fill_(float("nan"))  # so a token whose stream no program writes is seen
    (q, keys, values), (k_cache, v_cache) = through(pending)
    chain_normed, chain_stream = impl.package.kernels.add_rms_norm(gemv.gemv(x, down, db),
                                                                    residual, norm, eps)
    assert torch.equal(stream, chain_stream), "the stream"
    settled, settled_stream = gemv.pending_add_norm(x, down, db, residual, norm, eps)
    want, _ = through(gemv.settle(settled))
    assert torch.equal(settled_stream, chain_stream), "settle's stream"
    exact = qkv_reference(ref.rms_norm(chain_stream, norm, eps).to(x.dtype), w, b, positions,
                          n_q, n_kv)
    for name, got, theirs, reference in zip("qkv", (q, keys, values), want, exact):
        assert_close(got, theirs, f"{name} against settle's row")
        assert_close(got, reference, f"{name} against the reference")
    assert stored_as_returned((k_cache, v_cache), caches, slots.tolist(), keys, values)


def one_row_products(impl, gemv, gen):
    """The four one-row products of a layer, each as a call and the tensors it reads by name:
    gemv with its k split (on the CPU past 256 columns, so a second launch adds the splits),
    norm_gemv, gemv_add_norm over [gate | up], gemv_rope_split with its store, and on a row
    left pending by down's product."""
    r = lambda *shape, scale=1.0: torch.randn(*shape, generator=gen) * scale
    x, w, b = r(1, 300), r(40, 300, scale=0.05), r(40)
    res, norm, gu, down = r(1, 300), r(300), r(1, 600), r(300, 300, scale=0.05)
    qkv_w, slots = r(32, 48, scale=0.1), torch.tensor([5], dtype=torch.int64)
    cos, sin = impl.package.kernels.rope_cos_sin(torch.tensor([7]), 8, 10000.0)
    caches = r(2, 4, 1, 8), r(2, 4, 1, 8)
    # down's partial sums made here, outside the launches watched: a pending row's q/k/v launch
    # must read them only after it waits
    pending, _ = gemv.pending_add_norm(gu, down, None, res, norm, 1e-6, swiglu=True)
    qkv_pending = r(32, 300, scale=0.05)
    return {
        "gemv": (lambda: gemv.gemv(x, w, b), dict(weight=w, x=x, bias=b)),
        "norm_gemv": (lambda: gemv.norm_gemv(x, res, norm, 1e-6, w, b),
                      dict(weight=w, x=x, residual=res, norm=norm, bias=b)),
        "gemv_add_norm": (lambda: gemv.gemv_add_norm(gu, down, None, res, norm, 1e-6,
                                                     swiglu=True),
                          dict(weight=down, x=gu, residual=res, norm=norm)),
        "gemv_rope_split": (lambda: gemv.gemv_rope_split(x[:, :48].contiguous(), qkv_w, None,
                                                         cos, sin, 2, 1, (*caches, slots)),
                            dict(weight=qkv_w, cos=cos, sin=sin, slots=slots,
                                 k_cache=caches[0], v_cache=caches[1])),
        "gemv_rope_split_pending": (
            lambda: gemv.gemv_rope_split(pending, qkv_pending, None, cos, sin, 2, 1,
                                         (*caches, slots)),
            dict(weight=qkv_pending, residual=res, norm=norm, stream=pending.stream, cos=cos,
                 sin=sin, slots=slots, k_cache=caches[0], v_cache=caches[1])),
    }


@pytest.mark.spec(part="model")
@interpreted
@pytest.mark.parametrize("op", ["gemv", "norm_gemv", "gemv_add_norm", "gemv_rope_split",
                                "gemv_rope_split_pending"])
def test_launched_dependent_each_program_reads_only_weights_before_it_waits_for_the_launch_before(
        impl, gemv, op, monkeypatch):
    """On Hopper (compute capability 9) the one-row products launch dependent on the launch
    before them (CUDA's programmatic dependent launch): a kernel starts while the one before it
    ends, so before it waits (gdc_wait) it may read only what no kernel writes, its weights.
    Watched under the interpreter, every load of every program (spec/support/watchers/
    dependent_reads.py), the module's launches_dependent made to say yes as on Hopper: each
    program of each launch (the split sums' and the norms' launches too) lets the launch after
    it start, waits once, and before that reads the weight matrix or nothing; the results the
    same bits as launched without it."""
    call, tensors = one_row_products(impl, gemv, torch.Generator().manual_seed(0))[op]
    plain = call()
    reads = DependentReads(monkeypatch)
    monkeypatch.setattr(gemv, "launches_dependent", lambda x: True)
    dependent = call()
    for want, got in zip(plain if isinstance(plain, tuple) else (plain,),
                         dependent if isinstance(dependent, tuple) else (dependent,)):
        assert torch.equal(want, got), f"{op}: launched dependent, other bits"
    named = {k: v for k, v in tensors.items() if v is not None}
    assert reads.programs, f"{op}: no program ran"
    for p in reads.programs:
        where = f"{op}: {p.kernel} program {p.index}"
        assert p.lets_next_start, f"{where} never lets the launch after it start"
        assert p.waits == 1, f"{where} waits {p.waits} times for the launch before it"
        early = p.read_before_wait(named) - {"weight"}
        assert not early, f"{where} reads {sorted(early)} before it waits ('?': a workspace)"



@pytest.mark.gpu
@pytest.mark.spec(part="model", kernels=True)
def test_on_hopper_a_replayed_chain_of_one_row_layers_launches_dependent_and_gives_the_same_bits(
        impl, gemv, monkeypatch):
    """On a GPU of compute capability 9 or later, a one-row layer's kernels (the q/k/v gemv
    that turns and stores, v10's paged decode attention and its combine over a 600-token
    context and the o gemv, or over a 300-token one attend_project, the attention and o in one
    launch, every other layer; norm_gemv, down's partial sums, which the next layer's q/k/v
    gemv adds to the stream and norms, the last layer's settled) are launched dependent
    (Triton's launch_pdl, read where Triton is called), and a CUDA graph of six such layers,
    replayed on a new row
    each time, gives the bits the same chain gives launched one after another
    (launches_dependent made to say no), the caches too: no kernel reads its input before the
    launch that writes it has ended."""
    import triton
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("dependent launch needs compute capability 9 (Hopper) or later")
    gen = torch.Generator().manual_seed(0)
    r = lambda *shape, scale=1.0: (torch.randn(*shape, generator=gen) * scale).to(
        "cuda", torch.bfloat16)
    hidden, inter, heads, kv_heads, head_dim, page, context = 896, 4864, 14, 2, 64, 64, 600
    layers = [(r(hidden), r((heads + 2 * kv_heads) * head_dim, hidden, scale=0.03),
               r(hidden, hidden, scale=0.03), r(2 * inter, hidden, scale=0.03),
               r(hidden, inter, scale=0.015), r(11, page, kv_heads, head_dim),
               r(11, page, kv_heads, head_dim)) for _ in range(6)]
    ap = impl.package.attend_project

    def at(tokens: int):  # (table, lens, slot, cos, sin) of a one-row context of `tokens`
        table = torch.randperm(10, generator=gen)[None, :-(-tokens // page)].to(
            "cuda", torch.int32) + 1
        position = torch.tensor([tokens - 1], device="cuda")
        slot = (table[0, (tokens - 1) // page].long() * page + (tokens - 1) % page).view(1)
        return (table, torch.tensor([tokens], dtype=torch.int32, device="cuda"), slot,
                *impl.package.kernels.rope_cos_sin(position, head_dim, 1e6))
    split, whole = at(context), at(300)  # 600 tokens v10 splits; 300 attend_project takes

    def chain(x, res):
        for i, (norm, qkv, o, gate_up, down, k_cache, v_cache) in enumerate(layers):
            table, lens, slot, cos, sin = whole if i % 2 else split
            q, _, _ = gemv.gemv_rope_split(x, qkv, None, cos, sin, heads, kv_heads,
                                           (k_cache, v_cache, slot))
            if i % 2:
                projected = ap.attend_project(
                    ap.Attention(q, k_cache, v_cache, table, lens, head_dim ** -0.5), o)
            else:
                projected = gemv.gemv(gemv.dependent_decode_attention(
                    q, k_cache, v_cache, table, lens, head_dim ** -0.5).view(1, hidden), o)
            gu, res = gemv.norm_gemv(projected, res, norm, 1e-6, gate_up)
            x, res = gemv.pending_add_norm(gu, down, None, res, norm, 1e-6, swiglu=True)
        return gemv.settle(x), res

    launched = []
    run = triton.runtime.jit.JITFunction.run

    def recording(self, *args, **kwargs):
        launched.append((self.fn.__name__, bool(kwargs.get("launch_pdl"))))
        return run(self, *args, **kwargs)

    x_in, res_in = r(1, hidden), r(1, hidden)
    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run", recording)
    chain(x_in, res_in)  # compiled before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain(x_in, res_in)
    assert {"_paged_decode_kernel", "_combine_kernel", "_attend_project_kernel"} <= {
        name for name, _ in launched}
    assert launched and all(pdl for _, pdl in launched), sorted(set(launched))
    rows = [(r(1, hidden, scale=2.0), r(1, hidden, scale=2.0)) for _ in range(4)]
    replayed = []
    for x, res in rows:
        x_in.copy_(x), res_in.copy_(res)
        graph.replay()
        replayed.append(tuple(t.clone() for t in out)
                        + tuple(c.clone() for layer in layers for c in layer[5:]))
    torch.cuda.synchronize()
    monkeypatch.setattr(gemv, "launches_dependent", lambda x: False)
    for i, ((x, res), got) in enumerate(zip(rows, replayed)):
        want = chain(x, res) + tuple(c for layer in layers for c in layer[5:])
        assert all(torch.equal(a, b) for a, b in zip(want, got)), f"replay {i}"


@pytest.mark.gpu
@pytest.mark.spec(part="model", kernels=True)
def test_on_a_gpu_every_replay_of_many_hand_overs_multiplies_the_heads_of_its_own_step(impl, gemv):
    """attend_project's o programs run beside its attention's on a GPU and read the heads'
    output the moment the count says every head is written. A CUDA graph of 24 such launches
    (Qwen2.5-0.5B's heads and o, each its own caches, a 300-token context: one launch of the
    attention each), replayed 20 times on new queries: every launch's product is the two
    launches' (the attention, then the o gemv) on that replay's queries within bfloat16's
    tolerance. A race (o reading heads not yet written, or the replay before's, or a count
    left raised) would multiply other heads: far outside it."""
    ap = impl.package.attend_project
    gen = torch.Generator().manual_seed(0)
    r = lambda *shape, scale=1.0: (torch.randn(*shape, generator=gen) * scale).to(
        "cuda", torch.bfloat16)
    heads, kv_heads, head_dim, page, context = 14, 2, 64, 16, 300
    table = torch.randperm(24, generator=gen)[None, :-(-context // page)].to(
        "cuda", torch.int32) + 1
    lens = torch.tensor([context], dtype=torch.int32, device="cuda")
    layers = [(r(1, heads, head_dim), r(25, page, kv_heads, head_dim),
               r(25, page, kv_heads, head_dim), r(896, heads * head_dim, scale=0.03))
              for _ in range(24)]

    def step():
        return [ap.attend_project(ap.Attention(q, k, v, table, lens, head_dim ** -0.5), o)
                for q, k, v, o in layers]

    step()  # compiled, and the counts made, before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for replay in range(20):
        for q, *_ in layers:
            q.copy_(r(1, heads, head_dim, scale=3.0))
        graph.replay()
        for i, ((q, k, v, o), got) in enumerate(zip(layers, outs)):
            apart = gemv.gemv(ap.attend(ap.Attention(q, k, v, table, lens, head_dim ** -0.5))
                              .reshape(1, -1), o)
            assert_close(got, apart, f"replay {replay}, launch {i}")


def context_batch(target: Target, seed: int, requests, kv_heads: int, group: int, head_dim: int,
                  block_size: int):
    """requests: (rows, cached tokens before them) each. A paged cache (pages in random order,
    NaN outside every context), each request's context slots, and ragged queries."""
    gen = torch.Generator().manual_seed(seed)
    contexts = [rows + cached for rows, cached in requests]
    batch = ref.paged_batch(target, gen, contexts, block_size=block_size, kv_heads=kv_heads,
                            group=group, head_dim=head_dim)
    slots = [ref.table_slots(t, n, block_size) for t, n in zip(batch.block_tables, contexts)]
    rows = [r for r, _ in requests]
    q = target.randn(gen, sum(rows), kv_heads * group, head_dim)
    return batch, q, rows, slots


def indptr(lengths, device) -> torch.Tensor:
    return torch.tensor([0] + list(lengths), device=device).cumsum(0)


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(requests=st.lists(st.tuples(st.integers(1, 70), st.integers(0, 70)), min_size=1,
                         max_size=3),
       kv_heads=st.integers(1, 3), group=st.integers(1, 3),
       head_dim=st.one_of(st.sampled_from([64]), st.integers(1, 24)),
       block_size=st.sampled_from([1, 4, 16]), seed=seeds)
def test_context_attention_gives_each_row_the_softmax_over_its_context_up_to_its_position(
        context_kernel, target, requests, kv_heads, group, head_dim, block_size, seed):
    """Rows come last in their context (a cached prefix first), so each sees the prefix and the
    rows before it; the cache's pages lie in random order and hold NaN outside the contexts."""
    batch, q, rows, slots = context_batch(target, seed, requests, kv_heads, group, head_dim,
                                          block_size)
    out = context_kernel.context_attention(
        q, batch.k_cache, batch.v_cache, indptr(rows, q.device), torch.cat(slots),
        indptr([len(s) for s in slots], q.device), max(len(s) for s in slots), batch.scale)
    assert_close(out, ref.context_attention(q, batch.k_cache, batch.v_cache, rows, slots,
                                            batch.scale), "context_attention")


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
def test_a_slice_late_in_a_long_context_gives_each_row_the_softmax_over_its_context(
        context_kernel, target):
    """Few rows over a context of 512 tokens or more (a prompt's slice late in it) leave the GPU
    idle unless the context is split over programs: rows before, on and after a chunk's first
    key, a context ending on a chunk's last key, a short request beside the long ones, and
    Qwen2.5-0.5B's group of 7 query heads a KV head."""
    for seed, (requests, kv_heads, group) in enumerate((([(3, 600)], 2, 7),
                                                        ([(20, 500), (1, 767), (5, 0)], 1, 2))):
        batch, q, rows, slots = context_batch(target, 20 + seed, requests, kv_heads, group, 8, 16)
        out = context_kernel.context_attention(
            q, batch.k_cache, batch.v_cache, indptr(rows, q.device), torch.cat(slots),
            indptr([len(s) for s in slots], q.device), max(len(s) for s in slots), batch.scale)
        assert_close(out, ref.context_attention(q, batch.k_cache, batch.v_cache, rows, slots,
                                                batch.scale), f"requests {requests}")


@pytest.mark.spec(part="model", kernels=True)
@pytest.mark.parametrize("target", TARGETS)
def test_with_a_fixed_chunk_a_requests_rows_are_the_same_bits_alone_and_beside_others(
        context_kernel, target):
    """fixed_chunk cuts every context at the same places whatever the pass: a request's rows
    alone (few rows over a long context, which the shape's plan splits) are the very bits they
    are beside a long prompt's rows and a longer context (which change the plan); and the
    reference's values."""
    requests = [(3, 600), (1, 40), (120, 1300)]  # on a CPU: alone, 128-token chunks; together, 256
    batch, q, rows, slots = context_batch(target, 31, requests, 3, 4, 8, 16)
    chunk = 256
    together = context_kernel.context_attention(
        q, batch.k_cache, batch.v_cache, indptr(rows, q.device), torch.cat(slots),
        indptr([len(s) for s in slots], q.device), max(len(s) for s in slots), batch.scale,
        fixed_chunk=chunk)
    assert_close(together, ref.context_attention(q, batch.k_cache, batch.v_cache, rows, slots,
                                                 batch.scale), "fixed-chunk context attention")
    starts = [0, 3, 4]
    for r in range(2):
        mine = q[starts[r]:starts[r] + rows[r]]
        alone = context_kernel.context_attention(
            mine, batch.k_cache, batch.v_cache, indptr(rows[r:r + 1], q.device), slots[r],
            indptr([len(slots[r])], q.device), len(slots[r]), batch.scale, fixed_chunk=chunk)
        assert torch.equal(alone, together[starts[r]:starts[r] + rows[r]]), f"request {r}"


@pytest.mark.spec(part="model", kernels=True)
def test_the_fused_kernels_refuse_bad_input_with_a_message_that_says_why(impl, fused, gemv,
                                                                        context_kernel):
    cos, sin = impl.package.kernels.rope_cos_sin(torch.arange(2), 8, 10000.0)
    with pytest.raises(ValueError, match="contiguous"):
        fused.rope_split(torch.randn(48, 2).t(), cos, sin, 4, 1)
    with pytest.raises(ValueError, match="heads"):
        fused.rope_split(torch.randn(2, 47), cos, sin, 4, 1)
    with pytest.raises(ValueError, match="cos"):
        fused.rope_split(torch.randn(2, 48), cos[:1].contiguous(), sin, 4, 1)
    cache, slots = torch.zeros(2, 4, 1, 8), torch.tensor([0, 5])
    for store, message in (((cache, cache.clone(), slots.int()), "slot_mapping must"),
                           ((cache, cache.clone(), slots[:1]), "slot_mapping must"),
                           ((torch.zeros(2, 4, 2, 8),) * 2 + (slots,), "cache heads"),
                           ((cache.double(), cache.double(), slots), "k_cache is"),
                           ((cache, cache.clone()), "k_cache, v_cache, slot_mapping")):
        with pytest.raises(ValueError, match=message):
            fused.rope_split(torch.randn(2, 48), cos, sin, 4, 1, store=store)
    with pytest.raises(ValueError, match="2 \\* width"):
        fused.swiglu_packed(torch.randn(2, 7))
    with pytest.raises(ValueError, match="float32|dtype"):
        fused.swiglu_packed(torch.ones(2, 8, dtype=torch.int64))
    for logits, message in ((torch.randn(2, 0), "vocab >= 1"), (torch.randn(4), "rows, vocab"),
                            (torch.ones(2, 3, dtype=torch.int64), "float32"),
                            (torch.randn(6, 2).t(), "columns must be contiguous")):
        with pytest.raises(ValueError, match=message):
            fused.argmax_rows(logits)
    for args, message in (((torch.randn(1, 4), torch.randn(3, 5)), "columns"),
                          ((torch.randn(1, 4), torch.randn(3, 4), None, True), "gate \\| up"),
                          ((torch.randn(1, 4), torch.randn(3, 4), torch.randn(4)), "bias must"),
                          ((torch.randn(1, 4), torch.randn(4, 3).t()), "contiguous")):
        with pytest.raises(ValueError, match=message):
            gemv.gemv(*args)
    x, w, norm = torch.randn(2, 4), torch.randn(3, 4), torch.randn(4)
    for args, message in (((x, x[:1], norm, 1e-6, w), "residual must be \\[2, 4\\]"),
                          ((x, x, norm[:3], 1e-6, w), "norm_weight must be \\[4\\]"),
                          ((x, x, norm, 1e-6, w[:0]), "at least one row"),
                          ((x, x.half(), norm, 1e-6, w), "residual is"),
                          ((x, x, norm, 1e-6, w[:, :3].contiguous()), "columns")):
        with pytest.raises(ValueError, match=message):
            gemv.norm_gemv(*args)
    for args, message in (((x, w, None, x, norm[:3], 1e-6), "residual must be \\[2, 3\\]"),
                          ((x, w, None, x[:, :3].contiguous(), norm, 1e-6),
                           "norm_weight must be \\[3\\]"),
                          ((x, w.T.contiguous(), None, x[:, :3].contiguous(), norm[:3], 1e-6),
                           "columns"),
                          ((x, w, None, x[:, :3].contiguous(), norm[:3], 1e-6, True),
                           "gate \\| up")):
        with pytest.raises(ValueError, match=message):
            gemv.gemv_add_norm(*args)
    ap = impl.package.attend_project
    cache = torch.zeros(3, 4, 2, 8)
    one = ap.Attention(torch.randn(1, 4, 8), cache, cache.clone(),
                       torch.tensor([[1, 2]], dtype=torch.int32),
                       torch.tensor([5], dtype=torch.int32), 0.5)
    for weight, bias, message in ((torch.randn(6, 31), None, "o's weight must be \\[n, 32\\]"),
                                  (torch.randn(32, 6).t(), None, "contiguous"),
                                  (torch.randn(6, 32).half(), None, "weight is"),
                                  (torch.randn(6, 32), torch.randn(5), "bias must be \\[6\\]")):
        with pytest.raises(ValueError, match=message):
            ap.attend_project(one, weight, bias)
    with pytest.raises(ValueError, match="context_lens must be int32"):
        ap.decode_attention(one.q, cache, cache.clone(), one.block_tables,
                            one.context_lens.long(), 0.5)
    with pytest.raises(ValueError, match="block_tables must be int32"):
        ap.attend_project(one._replace(block_tables=one.block_tables.long()), torch.randn(6, 32))
    x, w = torch.randn(2, 4), torch.randn(48, 4)
    cache = torch.zeros(2, 4, 1, 8)
    two_heads = (torch.zeros(2, 4, 2, 8),) * 2 + (slots,)
    for args, message in (((x, w, None, cos, sin, 4, 1, two_heads), "cache heads"),
                          ((x, w, None, cos[:1].contiguous(), sin, 4, 1, (cache,) * 2 + (slots,)),
                           "cos"),
                          ((x, w[:47], None, cos, sin, 4, 1, (cache, cache.clone(), slots)),
                           "heads of one width"),
                          ((x, w, None, cos, sin, 4, 1, None), "store must")):
        with pytest.raises(ValueError, match=message):
            gemv.gemv_rope_split(*args)
    batch, q, rows, slots = context_batch(Target("cpu", torch.float32), 0, [(3, 2)], 2, 2, 8, 4)
    good = dict(q=q, k_cache=batch.k_cache, v_cache=batch.v_cache, row_indptr=indptr(rows, "cpu"),
                context_slots=slots[0], context_indptr=indptr([5], "cpu"), max_context=5,
                scale=batch.scale)
    for change, message in ((dict(q=q[:, :3]), "share"), (dict(q=q.half()), "cache is|k_cache is"),
                            (dict(context_slots=slots[0].int()), "context_slots must"),
                            (dict(row_indptr=indptr([3, 0], "cpu")), "requests \\+ 1"),
                            (dict(q=q.transpose(1, 2)), "contiguous last"),
                            (dict(fixed_chunk=-1), "fixed_chunk must")):
        with pytest.raises(ValueError, match=message):
            context_kernel.context_attention(**{**good, **change})


@pytest.mark.spec(part="model", kernels=True)
def test_under_fake_tensors_each_fused_op_promises_what_it_returns(impl, fused, gemv,
                                                                   context_kernel):
    from torch._subclasses.fake_tensor import FakeTensorMode

    here = Target("cuda" if torch.cuda.is_available() else "cpu", torch.float32)
    qkv, positions = kernel_inputs(here, 0, 3, 4, 2, 4)
    cos, sin = impl.package.kernels.rope_cos_sin(positions, 8, 10000.0)
    gate_up = here.randn(torch.Generator().manual_seed(1), 3, 10)
    batch, q, rows, slots = context_batch(here, 2, [(3, 2), (1, 0)], 2, 2, 8, 4)
    calls = {"rope_split": lambda t: fused.rope_split(t["qkv"], t["cos"], t["sin"], 4, 2),
             "rope_split_store": lambda t: fused.rope_split(
                 t["qkv"], t["cos"], t["sin"], 4, 2,
                 store=(t["k_cache"], t["v_cache"], t["slots"][:3])),
             "swiglu_packed": lambda t: (fused.swiglu_packed(t["gate_up"]),),
             "argmax_rows": lambda t: (fused.argmax_rows(t["gate_up"]),),
             "gemv": lambda t: (gemv.gemv(t["gate_up"][:1], t["down"], t["bias"], swiglu=True),),
             "norm_gemv": lambda t: gemv.norm_gemv(t["down"][:2], t["res5"], t["down"][2], 1e-6,
                                                   t["down"], t["bias"]),
             "gemv_rope_split_store": lambda t: gemv.gemv_rope_split(
                 t["res7"][:, :5].contiguous(), t["wqkv"], None, t["cos"], t["sin"], 4, 2,
                 (t["k_cache"], t["v_cache"], t["slots"][:3])),
             "gemv_add_norm": lambda t: gemv.gemv_add_norm(t["gate_up"], t["down"], None,
                                                           t["res7"], t["bias"], 1e-6,
                                                           swiglu=True),
             "gemv_rope_split_pending": lambda t: gemv.gemv_rope_split(
                 gemv.pending_add_norm(t["gate_up"], t["down"], t["bias"], t["res7"],
                                       t["bias"], 1e-6, swiglu=True)[0],
                 t["wqkv7"], None, t["cos"], t["sin"], 4, 2,
                 (t["k_cache"], t["v_cache"], t["slots"][:3])),
             "attend_project": lambda t: (impl.package.attend_project.attend_project(
                 impl.package.attend_project.Attention(
                     t["q1"], t["k_cache"], t["v_cache"], t["table1"], t["len1"], 0.5),
                 t["wo"]),),
             "context_attention": lambda t: (context_kernel.context_attention(
                 t["q"], t["k_cache"], t["v_cache"], t["rows"], t["slots"], t["contexts"], 5,
                 batch.scale),)}
    down, bias = here.randn(torch.Generator().manual_seed(2), 7, 5), here.randn(
        torch.Generator().manual_seed(3), 7)
    real = dict(qkv=qkv, cos=cos, sin=sin, gate_up=gate_up, down=down, bias=bias, q=q,
                res5=here.randn(torch.Generator().manual_seed(4), 2, 5),
                res7=here.randn(torch.Generator().manual_seed(5), 3, 7),
                wqkv=here.randn(torch.Generator().manual_seed(6), 64, 5),
                wqkv7=here.randn(torch.Generator().manual_seed(7), 64, 7),
                q1=here.randn(torch.Generator().manual_seed(8), 1, 4, 8),
                wo=here.randn(torch.Generator().manual_seed(9), 6, 32),
                table1=torch.tensor([[1, 2]], dtype=torch.int32, device=here.device),
                len1=torch.tensor([5], dtype=torch.int32, device=here.device),
                k_cache=batch.k_cache, v_cache=batch.v_cache, rows=indptr(rows, here.device),
                slots=torch.cat(slots), contexts=indptr([5, 1], here.device))
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = {n: mode.from_tensor(t) for n, t in real.items()}
        promised = {name: call(fake) for name, call in calls.items()}
    for name, call in calls.items():
        got = call(real)
        assert [(tuple(t.shape), t.dtype) for t in promised[name]] == \
            [(tuple(t.shape), t.dtype) for t in got], name


# --- the engine: the same numbers, fewer ops ---------------------------------------------------

INTERPRETER = pytest.mark.skipif(not INTERPRETED, reason="CPU kernels need TRITON_INTERPRET=1")


@pytest.mark.parametrize("fixture,dtype,path", [
    pytest.param("tiny_llama", torch.float32, "torch", id="tiny_llama-float32-torch"),
    *[pytest.param(f, torch.float64, "torch", id=f"{f}-float64") for f in FIXTURES],
    # The kernels' own specs cover their maths; this one, their place in the engine, on the
    # fixture whose cached prefixes moved its logits most (tiny_qwen2 missed a top-left mask).
    pytest.param("tiny_llama", torch.float32, "kernels", id="tiny_llama-float32-kernels",
                 marks=INTERPRETER)])
def test_the_packed_path_gives_v12s_logits_and_tokens_with_and_without_a_cached_prefix(
        impl, v12, fixture, dtype, path, monkeypatch):
    """Run twice: the second run's prompts find their leading blocks cached, so their prefill
    attends from the bottom right of a longer context. Without the kernels both run v02's fused
    attention, and the packed GEMMs alone move the logits: to float64's rounding in float64, to
    float32's in float32; with them, one context_attention launch a layer against v12's call a
    request. v12 runs its layers' PyTorch path either way, as in every CPU spec but its
    kernels' own pages (spec/support/collection/kernel_mode.py): interpreted, its kernels cost this spec
    half its 30 s, and their agreement with that path is those pages' to check."""
    ckpt = tiny_checkpoint(fixture)
    params = GenerationParams(max_new_tokens=6)

    def runs(version, interpret: str):
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        engine = version.build(ckpt, dtype=dtype, block_size=4, use_graphs=False)
        tokens = [engine.generate(PROMPTS, params) for _ in range(2)]
        return engine, tokens, [engine.logits(prompt).double() for prompt in PROMPTS]

    here = os.environ.get("TRITON_INTERPRET", "0")  # kernel_mode's choice for impl's kernels
    mine, my_tokens, my_logits = runs(impl, here if path == "kernels" else "0")
    _, their_tokens, their_logits = runs(v12, "0")
    assert my_tokens == their_tokens
    assert mine.prefix_cache_stats()["hit_tokens"] > 0, "the second run found nothing cached"
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    for mine_row, theirs_row in zip(my_logits, their_logits):
        torch.testing.assert_close(mine_row, theirs_row, **tol)


@interpreted
def test_with_its_kernels_a_qwen3_checkpoint_gives_the_oracles_tokens(impl):
    """tiny_qwen3 on the kernels: rope_split norms each q and k head itself (the step is the
    version's), so the engine must hand it q_norm and k_norm."""
    cases = screened(QWEN3, SHAPE_PROMPTS)[:1]
    params = GenerationParams(max_new_tokens=6)
    engine = impl.build(tiny_checkpoint(QWEN3), block_size=4, use_graphs=False)
    with KernelCalls(impl.package.fused_kernels) as calls:
        out = engine.generate([list(p) for p, _ in cases], params)
    assert calls.counts["rope_split_store"] > 0
    assert out == [r.tokens[:6] for _, r in cases]


@interpreted
def test_with_its_kernels_every_layer_stores_its_new_k_v_in_rope_split_and_no_store_kv_runs(
        impl, fused):
    """A prefill, a prefill after a cached prefix, and decode steps, graphs off: in every pass
    each layer's new K/V reach their slots through rope_split_store, one launch where
    rope_split and v10's store_kv ran two, and store_kv never runs. The tokens are the
    oracle's (what the kernel writes is read back by every later step's attention)."""
    cases = screened("tiny_llama", SHAPE_PROMPTS)[:2]
    engine = impl.build(tiny_checkpoint("tiny_llama"), block_size=4, use_graphs=False)
    layers = tiny_checkpoint("tiny_llama").config.num_layers
    params = GenerationParams(max_new_tokens=4)
    for _ in range(2):  # the second run finds its prompts' leading blocks cached
        ids = [engine.add_request(list(p), params) for p, _ in cases]
        while engine.has_unfinished():
            with KernelCalls(fused, impl.package.paged_kernels, impl.package.gemv) as calls:
                engine.step()
            assert calls.counts["store_kv"] == 0 and calls.counts["rope_split"] == 0, calls.counts
            stored = calls.counts["rope_split_store"] + calls.counts["gemv_rope_split_store"]
            assert stored % layers == 0 < stored, dict(calls.counts)
        assert [engine.output(i).tokens for i in ids] == [r.tokens[:4] for _, r in cases]
    assert engine.prefix_cache_stats()["hit_tokens"] > 0


class GemmOutputs(AtenCalls):
    """The output widths of the matrix products a step runs, in order, and which op ran each:
    an aten product (under inference mode a linear or a matmul reaches the dispatcher as itself,
    not as the mm it runs) or the version's gemv kernel."""

    def __init__(self):
        super().__init__()
        self.widths: list[int] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        aten = getattr(func, "namespace", None) == "aten"
        if aten and func._opname in MATMULS or not aten and func._opname in GEMVS:
            if func._opname == "gemv_rope_split_store":  # (q, k, v): the product's heads
                self.widths.append(sum(t.shape[-2] * t.shape[-1] for t in out))
            else:
                self.widths.append((out[0] if isinstance(out, tuple) else out).shape[-1])
            self.ops.append("aten" if aten else func._opname)
        return out


def decode_step_widths(version, ckpt) -> list[int]:
    engine = version.build(ckpt, max_lanes=2, use_graphs=False)
    engine.add_request(PROMPTS[0], GenerationParams(max_new_tokens=4))
    engine.step()  # the prefill
    with GemmOutputs() as calls:
        engine.step()
    return calls.widths


def test_a_decode_pass_multiplies_by_four_matrices_a_layer_where_v12_multiplied_by_seven(
        impl, v12):
    ckpt = tiny_checkpoint("tiny_qwen2")
    c = ckpt.config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    layer = [q + 2 * kv, c.hidden_size, 2 * c.intermediate_size, c.hidden_size]
    assert decode_step_widths(impl, ckpt) == layer * c.num_layers + [c.vocab_size]
    unfused = [q, kv, kv, c.hidden_size, c.intermediate_size, c.intermediate_size, c.hidden_size]
    assert decode_step_widths(v12, ckpt) == unfused * c.num_layers + [c.vocab_size]


@interpreted
def test_with_its_kernels_a_batch_1_decode_step_multiplies_in_gemv_launches(impl, gemv, fused):
    """At one row every layer's product is a gemv, the down projection's reading [gate | up]
    itself, so no swiglu_packed runs, and the q/k/v gemv turning, splitting and storing the
    heads itself (gemv_rope_split_store), so no rope_split_store runs; the LM head, whose
    matrix has more rows than GEMV_MAX_N allows for a real model (not for this one), stays a
    GEMM. The MLP's norms run inside the products about them: [gate | up]'s forms the
    post-attention norm (norm_gemv); down's leaves its partial sums (gemv_partial), which the
    next layer's q/k/v gemv adds to the stream and norms itself, so the step runs one norm of
    its own (the first layer's input norm), no add_rms_norm, and one sums-add-norm launch (the
    last layer's, into the final norm). The o product rides on the attention's launch
    (attend_project: the attention's programs hand the heads' output to o's within the
    launch), so no paged_decode_attention of its own runs. A prompt's rows multiply in GEMMs."""
    ckpt = tiny_checkpoint("tiny_qwen2")
    c = ckpt.config
    layer = [(c.num_heads + 2 * c.num_kv_heads) * c.head_dim, c.hidden_size,
             2 * c.intermediate_size, c.hidden_size]
    assert max(layer) <= gemv.GEMV_MAX_N
    engine = impl.build(ckpt, max_lanes=2, use_graphs=False)
    engine.add_request(PROMPTS[0], GenerationParams(max_new_tokens=4))
    with GemmOutputs() as prefill:
        engine.step()
    with GemmOutputs() as decode, KernelCalls(fused, impl.package.kernels, gemv,
                                              impl.package.attend_project,
                                              impl.package.paged_kernels) as kernels:
        engine.step()
    assert prefill.widths == decode.widths == layer * c.num_layers + [c.vocab_size]
    assert prefill.ops == ["aten"] * (4 * c.num_layers + 1)
    assert decode.ops == (["gemv_rope_split_store", "attend_project", "norm_gemv",
                           "gemv_partial"] * c.num_layers + ["aten"])
    assert kernels.counts["attend_project"] == c.num_layers, dict(kernels.counts)
    assert kernels.counts["paged_decode_attention"] == 0, dict(kernels.counts)
    assert kernels.counts["swiglu_packed"] == kernels.counts["add_rms_norm"] == 0, kernels.counts
    assert kernels.counts["sum_add_norm"] == 1, dict(kernels.counts)
    assert kernels.counts["rope_split_store"] == 0, dict(kernels.counts)
    assert kernels.counts["rms_norm"] == 1, dict(kernels.counts)


@interpreted
def test_launched_dependent_a_batch_1_decode_step_chains_every_layer_kernel_attention_included(
        impl, gemv, monkeypatch):
    """On Hopper a one-row step's layers are a chain of launches each dependent on the one
    before: the q/k/v gemv, the attention with o's product (attend_project), [gate | up]'s
    norm_gemv, down's gemv and the sums-add-norm. Watched under the interpreter (spec/support/
    watchers/dependent_reads.py), launches_dependent made to say yes as on Hopper: every program
    of each of those kernels lets the launch after it start and waits once, and the attention's
    programs read before they wait nothing the layer's q/k/v launch writes (its queries, the
    newest token's K/V rows in the caches), though they read older K/V there; the step's tokens
    the same as launched plainly. (The fixtures' 256 positions never split the attention;
    v10's page checks its combine launched dependent.)"""
    ckpt = tiny_checkpoint("tiny_qwen2")

    def decode(dependent: bool):
        engine = impl.build(ckpt, max_lanes=2, use_graphs=False)
        rid = engine.add_request(PROMPTS[0], GenerationParams(max_new_tokens=3))
        engine.step()  # the prefill
        written: set[int] = set()  # byte addresses the step's q/k/v launches write
        real = gemv.gemv_rope_split

        def recording(x, weight, bias, cos, sin, n_q, n_kv, store):
            q, k, v = real(x, weight, bias, cos, sin, n_q, n_kv, store)
            k_cache, v_cache, slots = store
            rows = [c.view(-1, *c.shape[2:])[int(slot)] for c in (k_cache, v_cache)
                    for slot in slots.tolist() if slot >= 0]
            for t in [q] + rows:
                written.update(range(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
            return q, k, v

        with monkeypatch.context() as m:
            m.setattr(gemv, "launches_dependent", lambda x: dependent)
            m.setattr(gemv, "gemv_rope_split", recording)
            reads = DependentReads(m)
            engine.step()
        return list(engine.output(rid).tokens), reads.programs, written

    plain, _, _ = decode(False)
    tokens, programs, written = decode(True)
    assert tokens == plain and written
    layer = {"_gemv_rope_kernel", "_attend_project_kernel", "_gemv_kernel", "_norm_gemv_kernel",
             "_sum_add_norm_kernel"}
    assert layer <= {p.kernel for p in programs}, sorted(layer - {p.kernel for p in programs})
    for p in programs:
        if p.kernel in layer:
            where = f"{p.kernel} program {p.index}"
            assert p.lets_next_start and p.waits == 1, f"{where} is not launched dependent"
            if p.kernel == "_attend_project_kernel":
                early = {int(a) for arr in p.before for a in arr.tolist()}
                assert early, f"{where} reads no older K/V before it waits"
                assert not early & written, f"{where} reads the q/k/v launch's output first"



@interpreted
def test_at_two_rows_the_decode_attention_launches_plainly(impl, gemv, monkeypatch):
    """Only a one-row step chains its launches: at two rows the q/k/v product is cuBLAS's and
    rope_split's, launched plainly, so the attention after them has nothing to overlap and
    launches plainly too (its early loads cost a batch-256 step 0.2 ms on an H100). Watched
    under the interpreter, launches_dependent made to say yes as on Hopper: no program of a
    two-row step's attention waits for the launch before or lets the next one start."""
    engine = impl.build(tiny_checkpoint("tiny_qwen2"), max_lanes=2, use_graphs=False)
    for prompt in PROMPTS[:2]:
        engine.add_request(prompt, GenerationParams(max_new_tokens=3))
    engine.step()  # both prefills
    monkeypatch.setattr(gemv, "launches_dependent", lambda x: True)
    reads = DependentReads(monkeypatch)
    engine.step()
    attention = [p for p in reads.programs if p.kernel == "_paged_decode_kernel"]
    assert attention, "no decode attention ran"
    assert not any(p.waits or p.lets_next_start for p in attention)

@interpreted
def test_with_its_kernels_greedy_tokens_are_drawn_by_argmax_rows_and_no_aten_argmax_runs(
        impl, fused):
    """The greedy draw reads the logits once through the fused argmax, in the prefill's eager
    draw and in every decode step (a replayed graph's ops included); torch's argmax never runs.
    Each call hands back the first largest index of the rows it was given, and those are the
    tokens the requests get."""
    engine = impl.build(tiny_checkpoint("tiny_qwen2"))
    ids = [engine.add_request(p, GenerationParams(max_new_tokens=3)) for p in PROMPTS[:2]]
    with AtenCalls() as aten, ArgmaxRows(fused) as drawn:
        while engine.has_unfinished():
            engine.step()
    assert aten.counts["argmax"] == 0, dict(aten.counts)
    assert drawn.calls >= 3, drawn.calls  # a prefill's draw and two decode steps at least
    assert all(torch.equal(got, rows.argmax(dim=-1)) for rows, got in drawn.seen)
    tokens = [t for _, got in drawn.seen for t in got.tolist()]
    for i in ids:
        got = list(engine.output(i).tokens)
        assert len(got) == 3 and all(t in tokens for t in got), (got, tokens)


class ArgmaxRows(TorchDispatchMode):
    """Every argmax_rows call of one fused kernels module: the logits it read, what it gave."""

    def __init__(self, module):
        super().__init__()
        self.namespace, self.seen, self.calls = module.__name__.replace(".", "_"), [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "namespace", None) == self.namespace and func._opname == "argmax_rows":
            self.calls += 1
            self.seen.append((args[0].clone(), out.clone()))
        return out


def prefill_calls(impl, prompts, *modules):
    """The aten ops and the ops of `modules` that one prefill pass of these prompts dispatches."""
    engine = impl.build(tiny_checkpoint("tiny_qwen2"), dtype=torch.float32, use_graphs=False)
    for prompt in prompts:
        engine.add_request(prompt, GenerationParams(max_new_tokens=2))
    with AtenCalls() as aten, KernelCalls(*modules) as kernels:
        engine.step()  # every prefill, one pass
    return aten.counts, kernels.counts


@pytest.mark.spec(one_step_per_call=True)
def test_without_its_kernels_a_prefill_runs_one_attention_op_per_request_and_layer(impl,
                                                                                   monkeypatch):
    """In float32 on a CPU the fused call is one aten op (flash attention for CPU), and no
    softmax runs: v02's causal_attention, which v12's gathers feed."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    calls, _ = prefill_calls(impl, PROMPTS[:2])
    attention = {n: k for n, k in calls.items() if "scaled_dot_product" in n}
    layers = tiny_checkpoint("tiny_qwen2").config.num_layers
    assert sum(attention.values()) == 2 * layers, dict(calls)
    assert calls["softmax"] + calls["_softmax"] == 0, dict(calls)


@pytest.mark.spec(one_step_per_call=True)
@interpreted
def test_with_its_kernels_a_prefill_attends_in_one_op_a_layer_and_gathers_no_context(
        impl, context_kernel):
    """One context_attention a layer whatever the requests, and no index op reads K/V out of
    the cache: one prompt and three dispatch as many index ops (the embedding's and the last
    rows')."""
    layers = tiny_checkpoint("tiny_qwen2").config.num_layers
    one, one_kernel = prefill_calls(impl, PROMPTS[:1], context_kernel)
    three, three_kernel = prefill_calls(impl, PROMPTS, context_kernel)
    assert one_kernel["context_attention"] == three_kernel["context_attention"] == layers
    assert one["index"] == three["index"], (dict(one), dict(three))
    assert not any("scaled_dot_product" in n or "softmax" in n for n in three), dict(three)


# --- on a GPU: the kernels a decode step launches ----------------------------------------------

KERNELS_PER_LAYER = 12  # 2 norms, 4 GEMMs (+1 for a split-K reduction), RoPE, store, attention,
#                         SwiGLU, and one to spare; v12 launched 15 (docs/perf-notes.md)


def deeper(ckpt, times: int):
    """The checkpoint with its layers repeated `times` over: what it adds to a step is per layer."""
    from dataclasses import replace

    n = ckpt.config.num_layers
    tensors = {k: v for k, v in ckpt.tensors.items() if not k.startswith("model.layers.")}
    for name, t in ckpt.tensors.items():
        if name.startswith("model.layers."):
            i, rest = name.split(".", 3)[2:]
            for r in range(times):
                tensors[f"model.layers.{int(i) + r * n}.{rest}"] = t.clone()
    return type(ckpt)(replace(ckpt.config, num_layers=n * times), tensors)


def kernels_per_decode_step(impl, ckpt) -> float:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    engine = impl.build(ckpt, device="cuda", dtype=torch.bfloat16, max_lanes=2)
    engine.add_request(PROMPTS[0], GenerationParams(max_new_tokens=16))
    for _ in range(4):
        engine.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            engine.step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))) / 3


@pytest.mark.gpu
def test_a_replayed_decode_step_launches_at_most_the_budgeted_kernels_per_layer(impl):
    """Counted by the profiler (a replayed graph's kernels one by one) on the model and on the
    model with its layers repeated: the difference is what each layer launches."""
    ckpt = tiny_checkpoint("tiny_qwen2")
    shallow, deep = kernels_per_decode_step(impl, ckpt), kernels_per_decode_step(impl, deeper(ckpt, 3))
    per_layer = (deep - shallow) / (2 * ckpt.config.num_layers)
    assert per_layer <= KERNELS_PER_LAYER, (shallow, deep, per_layer)
    assert shallow - per_layer * ckpt.config.num_layers <= 30, "the step's fixed part grew"
