"""v10_triton_paged_gqa: paged decode attention and the KV store as Triton kernels.

What it introduces: a decode-attention kernel that follows each request's block table through the
paged KV cache with an online softmax (running max, running sum, rescaled accumulator), one
program per request and KV head serving all the query heads of that group; and a store kernel
that writes each new token's K/V into the slot the step names.

Why the previous version needs it: v08's PyTorch attention gathers every slot a padded table
names into a contiguous copy before the softmax, so each decode step copies the whole batch's
context and scores padding it then throws away. The kernel reads each live K/V tile once, straight
from its page, and never materializes the scores.

Core principle: the kernel equals a plain gathered softmax (spec/support/oracles/kernel_reference.py) for
pages in random physical order, partial last pages, GQA ratios 1, 2 and 7, contexts from 1 to
over 1000 tokens and batches that mix them. Every slot outside a context holds NaN, so a single
read past a context would show. The store writes exactly the named slots: the whole cache is
compared before and after.

Files to compare: implementations/v10_triton_paged_gqa/paged_kernels.py against
implementations/v08_paged_gqa_py/model.py (paged_decode_attention, store_kv).

A batch of few request x KV head pairs (fewer than the GPU's SMs) has each context split into
chunks, one program each (flash-decoding), and a second launch combines each pair's
partials: checked with contexts over many chunks (several combine steps), a
context of 0 beside split ones, contexts ending on either side of a chunk's edge, and tables
longer than their contexts.

Launched dependent (dependent=True, CUDA's programmatic dependent launch, for a caller that
chains kernels so on Hopper), every program of both launches lets the next launch start and
waits once for the launch before it; before it waits an attention program reads only what no
launch of a decode step's chain writes (the lengths, the tables and its first tile of the
older tokens' K/V), never q or a newest token's K/V, and the combine reads nothing: watched
load by load under the interpreter, the same bits as launched plainly.

In the cache a token's KV heads are one row; a request's KV heads are neighbouring programs
(the launch's first grid axis is request-major), which a GPU starts together, so each row's
parts are read at about the same time: checked from the rows and head parts each program
reads.

Tradeoff left visible: chunks are sized for the longest context a table can hold, so a table
much longer than its context leaves most splits empty; tiles are padded to 16 rows for tl.dot, so a GQA group of 7 computes 16 rows of scores; a bad
slot is not checked, since a check would need a host sync that breaks graph capture.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spec.support.oracles import kernel_reference as ref
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.inputs.kernel_targets import GPU_TARGETS, INTERPRETED, TARGETS, Target
from spec.support.watchers.dependent_reads import DependentReads
from spec.support.oracles.tolerances import assert_close
from torchlet.contract import TRITON_PAGED

# The kernels are v10's objects: later versions call them unchanged (kernel_mode.py).
pytestmark = pytest.mark.spec(needs=TRITON_PAGED, kernels=True, part="model")

GQA_RATIOS = (1, 2, 7)
seeds = st.integers(0, 2**32 - 1)


@pytest.fixture(scope="module")
def paged(impl):
    return impl.package.paged_kernels


def attend(paged, batch: ref.PagedBatch) -> torch.Tensor:
    return paged.paged_decode_attention(batch.q, batch.k_cache, batch.v_cache,
                                        batch.block_tables, batch.context_lens, batch.scale)


def expected(batch: ref.PagedBatch) -> torch.Tensor:
    return ref.paged_decode_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                                      batch.context_lens, batch.scale)


def head_dims(target):
    # Tiles are padded to 16 anyway, so CPU keeps heads tiny; the GPU takes real head sizes.
    return st.sampled_from([64, 80, 128] if target.on_gpu else [4, 12, 16])


# --- decode attention ----------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(data=st.data(), seed=seeds)
def test_decode_attention_equals_the_reference_over_pages_in_random_order(paged, target, data,
                                                                          seed):
    # Short contexts beside at most one long one: the interpreter's cost is per tile visited.
    lens = data.draw(st.lists(st.integers(1, 70), max_size=3), label="short contexts")
    lens += data.draw(st.lists(st.integers(71, 1100), min_size=0 if lens else 1, max_size=1),
                      label="long context")
    lens = data.draw(st.permutations(lens), label="context_lens")
    batch = ref.paged_batch(
        target, torch.Generator().manual_seed(seed), lens,
        block_size=data.draw(st.sampled_from([1, 5, 16, 64]), label="block_size"),
        kv_heads=data.draw(st.integers(1, 2), label="kv_heads"),
        group=data.draw(st.sampled_from(GQA_RATIOS), label="group"),
        head_dim=data.draw(head_dims(target), label="head_dim"))
    assert_close(attend(paged, batch), expected(batch), "paged attention")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("group", GQA_RATIOS)
def test_each_query_head_reads_the_kv_head_of_its_group(paged, target, group):
    batch = ref.paged_batch(target, torch.Generator().manual_seed(group), [9, 40], block_size=16,
                            kv_heads=3, group=group, head_dim=16)
    assert_close(attend(paged, batch), expected(batch), f"GQA {group}:1 attention")


@pytest.mark.parametrize("target", TARGETS)
def test_a_batch_mixing_contexts_of_1_and_over_1000_tokens(paged, target):
    batch = ref.paged_batch(target, torch.Generator().manual_seed(1), [1, 1031, 16, 33],
                            block_size=16, kv_heads=1, group=7, head_dim=16, pad_blocks=3)
    assert_close(attend(paged, batch), expected(batch), "mixed-length attention")


@pytest.mark.parametrize("target", TARGETS)
def test_slots_past_the_context_never_reach_the_output(paged, target):
    # The last pages are partial and the rest of each holds NaN, as do the null block the
    # table's padding points to and the spare blocks: any such read makes the output NaN.
    batch = ref.paged_batch(target, torch.Generator().manual_seed(2), [17, 31, 3], block_size=16,
                            kv_heads=2, group=2, head_dim=16, pad_blocks=4)
    out = attend(paged, batch)
    assert not out.isnan().any()
    assert_close(out, expected(batch), "partial-page attention")


# One program per pair over a short table; and two pairs over tables of 5,000 tokens, each
# context cut into about 40 chunks of one tile: at head_dim 128 a combine step takes 8 of their
# partials, so the running max moves from step to step and the sums before it must be rescaled.
PADDING_CASES = {"one-program": ([5, 1], 4, 8, 3), "split": ([4999, 300], 64, 128, 4)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", PADDING_CASES)
def test_a_padding_row_with_context_zero_gives_zeros(paged, target, case):
    lens, block_size, head_dim, seed = PADDING_CASES[case]
    batch = ref.paged_batch(target, torch.Generator().manual_seed(seed), lens,
                            block_size=block_size, kv_heads=1, group=2, head_dim=head_dim)
    batch.context_lens[1] = 0
    out = attend(paged, batch)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert_close(out[0], expected(batch)[0], "attention beside a padding row")


@pytest.mark.parametrize("target", TARGETS)
def test_split_contexts_of_every_length_against_their_chunks_give_the_reference(paged, target):
    """Tables of 512 tokens or more, few pairs: contexts that end inside a chunk, on its last
    token, on the next one's first, and tables longer than their context (empty chunks)."""
    for seed, lens in enumerate(([600, 1], [512, 513, 200], [767, 768, 769])):
        batch = ref.paged_batch(target, torch.Generator().manual_seed(10 + seed), lens,
                                block_size=16, kv_heads=2, group=2, head_dim=4, pad_blocks=8)
        assert_close(attend(paged, batch), expected(batch), f"contexts {lens}")


@pytest.mark.parametrize("target", TARGETS)
def test_with_a_fixed_chunk_each_rows_result_is_the_same_bits_alone_and_in_any_batch(paged,
                                                                                    target):
    """fixed_chunk cuts every context at the same places whatever the batch: a row alone (one
    pair, which the shape's plan would split finely) gives the very bits it gives among many
    rows (which the plan would not split) and beside a wider table; and the reference's values.
    Without the fixed chunk these plans cut the 700-token context at other places."""
    lens = [700, 300, 1, 513] + [40] * 60
    batch = ref.paged_batch(target, torch.Generator().manual_seed(5), lens, block_size=16,
                            kv_heads=2, group=2, head_dim=4, pad_blocks=8)
    chunk = 200  # rounded up to whole tiles by the kernel
    together = paged.paged_decode_attention(batch.q, batch.k_cache, batch.v_cache,
                                            batch.block_tables, batch.context_lens, batch.scale,
                                            fixed_chunk=chunk)
    assert_close(together, expected(batch), "fixed-chunk attention")
    for b in range(4):
        pages = -(-lens[b] // 16)
        for width in (pages, pages + 30):
            table = torch.zeros(1, width, dtype=torch.int32, device=batch.q.device)
            table[0, :pages] = batch.block_tables[b, :pages]
            alone = paged.paged_decode_attention(batch.q[b:b + 1], batch.k_cache, batch.v_cache,
                                                 table, batch.context_lens[b:b + 1],
                                                 batch.scale, fixed_chunk=chunk)
            assert torch.equal(alone[0], together[b]), f"row {b}, table of {width} pages"


# One program a pair (a short context), and a context split over programs with the combine's
# launch after them (past MIN_SPLIT_CONTEXT, for a GPU of DEFAULT_SMS).
DEPENDENT_CASES = {"one-program": [40], "split": [600]}


@pytest.mark.parametrize("case", DEPENDENT_CASES)
@pytest.mark.skipif(not INTERPRETED, reason="CPU kernels need TRITON_INTERPRET=1")
def test_launched_dependent_every_program_lets_the_next_launch_start_and_waits_before_it_reads(
        paged, case, monkeypatch):
    """dependent=True launches the kernels dependent on the launch before (CUDA's programmatic
    dependent launch): a kernel's programs may start while that launch still runs, and in a
    decode step that launch writes q and each row's newest K/V into the cache. So before it
    waits (gdc_wait) an attention program may read only what no launch of the chain writes:
    the lengths, the block tables and the K/V of the older tokens, the first tile of which it
    loads there, so that trip to memory overlaps the launch before. Watched under the
    interpreter (spec/support/watchers/dependent_reads.py, which records each program's loads
    and the two calls): every program of every launch, the combine's included where the
    context is split, lets the launch after it start and waits once; before the wait an
    attention program reads lengths, tables and caches only, never q and never a newest token's
    K/V row, and the older tokens' K/V are read there; the combine reads nothing before it waits
    (its partials are the launch before's); the output the same bits as launched plainly."""
    batch = ref.paged_batch(Target("cpu", torch.float32), torch.Generator().manual_seed(8),
                            DEPENDENT_CASES[case], block_size=16, kv_heads=2, group=2,
                            head_dim=4)
    plain = attend(paged, batch)
    reads = DependentReads(monkeypatch)
    dependent = paged.paged_decode_attention(batch.q, batch.k_cache, batch.v_cache,
                                             batch.block_tables, batch.context_lens,
                                             batch.scale, dependent=True)
    assert torch.equal(plain, dependent), "launched dependent, other bits"
    kernels = {p.kernel for p in reads.programs}
    assert len(kernels) == (2 if case == "split" else 1), kernels
    named = dict(q=batch.q, context_lens=batch.context_lens, block_tables=batch.block_tables,
                 k_cache=batch.k_cache, v_cache=batch.v_cache)
    newest = newest_rows(batch)
    early_caches = set()
    for p in reads.programs:
        where = f"{p.kernel} program {p.index}"
        assert p.lets_next_start, f"{where} never lets the launch after it start"
        assert p.waits == 1, f"{where} waits {p.waits} times for the launch before it"
        if p.kernel == "_combine_kernel":
            assert not p.before, f"{where} reads {sum(map(len, p.before))} addresses first"
            continue
        early = p.read_before_wait(named)
        assert early <= {"context_lens", "block_tables", "k_cache", "v_cache"}, \
            f"{where} reads {sorted(early)} before it waits"
        read = {int(a) for arr in p.before for a in arr.tolist()}
        assert not read & newest, f"{where} reads a newest token's K/V before it waits"
        early_caches |= early & {"k_cache", "v_cache"}
    assert early_caches == {"k_cache", "v_cache"}, "no older K/V is read before the wait"


@pytest.mark.parametrize("case", DEPENDENT_CASES)
@pytest.mark.skipif(not INTERPRETED, reason="CPU kernels need TRITON_INTERPRET=1")
def test_a_requests_kv_heads_are_neighbouring_programs_that_read_one_set_of_token_rows(
        paged, case, monkeypatch):
    """In the cache a token's KV heads are one row, and a GPU starts a launch's programs in the
    order of their first grid index. So one request's KV heads are neighbouring programs on
    that axis (program b * kv_heads + h is request b's head h), which run together and read the
    parts of the same rows at about the same time, instead of a launch's worth of programs
    apart. Watched under the interpreter: the grid index of each attention program and the
    cache rows and head parts it reads. Each request's kv_heads programs (each chunk's, where
    its context is split) read the same token rows, each its own head's part of them."""
    kv_heads = 3
    batch = ref.paged_batch(Target("cpu", torch.float32), torch.Generator().manual_seed(9),
                            DEPENDENT_CASES[case] + [23, 7], block_size=16, kv_heads=kv_heads,
                            group=2, head_dim=4)
    reads = DependentReads(monkeypatch)
    attend(paged, batch)
    cache = batch.k_cache
    start, end = cache.data_ptr(), cache.data_ptr() + cache.numel() * cache.element_size()
    row = kv_heads * cache.shape[3] * cache.element_size()
    part = cache.shape[3] * cache.element_size()
    seen = {}  # (first grid index, chunk) -> (token rows, head parts) of k_cache it read
    for p in reads.programs:
        if p.kernel != "_paged_decode_kernel":
            continue
        read = [a - start for arr in p.before + p.after for a in arr.tolist() if start <= a < end]
        seen[p.index[0], p.index[1:]] = ({a // row for a in read}, {a % row // part for a in read})
    chunks = {chunk for _, chunk in seen}
    assert len(seen) == batch.q.shape[0] * kv_heads * len(chunks), sorted(seen)
    for b in range(batch.q.shape[0]):
        for chunk in chunks:
            rows = [seen[b * kv_heads + h, chunk] for h in range(kv_heads)]
            for h, (tokens, heads) in enumerate(rows):
                assert not tokens or heads == {h}, \
                    f"program {b * kv_heads + h} reads head parts {heads}, not head {h}"
                assert tokens == rows[0][0], \
                    f"request {b}'s heads 0 and {h}, neighbouring programs, read other token rows"
    assert any(tokens for tokens, _ in seen.values()), "no program read K"


def newest_rows(batch) -> set[int]:
    """The byte addresses of each request's newest token's K and V rows (every KV head's) in
    the caches: what a decode step's q/k/v launch has just written."""
    addresses = set()
    block = batch.k_cache.shape[1]
    for r, n in enumerate(batch.context_lens.tolist()):
        if n == 0:
            continue
        slot = int(batch.block_tables[r, (n - 1) // block]) * block + (n - 1) % block
        for cache in (batch.k_cache, batch.v_cache):
            row = cache.view(-1, *cache.shape[2:])[slot]
            start = row.data_ptr()
            addresses |= set(range(start, start + row.numel() * row.element_size()))
    return addresses


def test_decode_attention_refuses_bad_tables_and_head_counts(paged):
    q, cache = torch.randn(1, 4, 8), torch.zeros(3, 4, 2, 8)
    tables, lens = torch.tensor([[1, 2]], dtype=torch.int32), torch.tensor([5], dtype=torch.int32)
    with pytest.raises(ValueError, match="int32"):
        paged.paged_decode_attention(q, cache, cache.clone(), tables.long(), lens, 1.0)
    with pytest.raises(ValueError, match="KV heads"):
        paged.paged_decode_attention(torch.randn(1, 3, 8), cache, cache.clone(), tables, lens, 1.0)
    with pytest.raises(ValueError, match="head_dim"):
        paged.paged_decode_attention(torch.randn(1, 4, 6), cache, cache.clone(), tables, lens, 1.0)
    with pytest.raises(ValueError, match="fixed_chunk must"):
        paged.paged_decode_attention(q, cache, cache.clone(), tables, lens, 1.0, fixed_chunk=-1)


# --- store ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@engine_settings()
@given(data=st.data(), seed=seeds)
def test_store_writes_exactly_the_named_slots_and_nothing_else(paged, target, data, seed):
    num_blocks = data.draw(st.integers(1, 6), label="num_blocks")
    block_size = data.draw(st.sampled_from([1, 3, 16]), label="block_size")
    kv_heads = data.draw(st.integers(1, 3), label="kv_heads")
    head_dim = data.draw(st.sampled_from([2, 12, 16]), label="head_dim")
    capacity = num_blocks * block_size
    # Distinct slots (two tokens never share one in a step), with -1 for padding tokens.
    slots = data.draw(st.lists(st.one_of(st.integers(0, capacity - 1), st.just(-1)),
                               min_size=1, max_size=8)
                      .filter(lambda s: len({x for x in s if x >= 0}) == sum(x >= 0 for x in s)),
                      label="slot_mapping")
    gen = torch.Generator().manual_seed(seed)
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k_cache, v_cache = target.randn(gen, *shape), target.randn(gen, *shape)
    k = target.randn(gen, len(slots), kv_heads, head_dim)
    v = target.randn(gen, len(slots), kv_heads, head_dim)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    for i, slot in enumerate(slots):
        if slot >= 0:
            want_k[slot // block_size, slot % block_size] = k[i]
            want_v[slot // block_size, slot % block_size] = v[i]

    paged.store_kv(k, v, k_cache, v_cache,
                   torch.tensor(slots, dtype=torch.int64, device=target.device))
    assert torch.equal(k_cache, want_k)
    assert torch.equal(v_cache, want_v)


@pytest.mark.parametrize("target", TARGETS)
def test_attention_reads_back_what_the_store_wrote(paged, target):
    # A decode step as the engine runs it: store each request's new token, then attend.
    batch = ref.paged_batch(target, torch.Generator().manual_seed(4), [6, 20], block_size=8,
                            kv_heads=2, group=2, head_dim=16)
    gen = torch.Generator().manual_seed(5)
    k, v = target.randn(gen, 2, 2, 16), target.randn(gen, 2, 2, 16)
    positions = batch.context_lens.long()  # the new token goes right after the context
    slots = batch.block_tables.long().gather(1, (positions // 8)[:, None])[:, 0] * 8 + positions % 8
    paged.store_kv(k, v, batch.k_cache, batch.v_cache, slots)
    batch.context_lens += 1
    out = attend(paged, batch)
    assert_close(out, expected(batch), "attention after store")


def test_store_refuses_slots_that_are_not_int64(paged):
    cache = torch.zeros(2, 4, 1, 8)
    with pytest.raises(ValueError, match="int64"):
        paged.store_kv(torch.ones(1, 1, 8), torch.ones(1, 1, 8), cache, cache.clone(),
                       torch.tensor([3], dtype=torch.int32))


# --- graph replay (GPU only) ---------------------------------------------------------------

@pytest.mark.parametrize("target", GPU_TARGETS)
def test_store_and_attention_replay_in_a_cuda_graph_with_new_inputs(paged, target):
    """Both kernels are captured once; replays read whatever the static inputs hold now."""
    batch = ref.paged_batch(target, torch.Generator().manual_seed(6), [40, 300, 7], block_size=16,
                            kv_heads=2, group=7, head_dim=128, spare_blocks=8)
    gen = torch.Generator().manual_seed(7)
    k, v = target.randn(gen, 3, 2, 128), target.randn(gen, 3, 2, 128)
    slots = torch.full((3,), -1, dtype=torch.int64, device="cuda")

    def step():
        paged.store_kv(k, v, batch.k_cache, batch.v_cache, slots)
        return attend(paged, batch)

    step()  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(3):
        positions = batch.context_lens.long()  # each request's new token follows its context
        slots.copy_(batch.block_tables.long().gather(1, (positions // 16)[:, None])[:, 0] * 16
                    + positions % 16)
        batch.context_lens += 1
        k.copy_(target.randn(gen, 3, 2, 128))
        v.copy_(target.randn(gen, 3, 2, 128))
        batch.q.copy_(target.randn(gen, 3, 14, 128))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, expected(batch), "replayed attention")


def test_under_fake_tensors_the_decode_op_promises_the_shape_and_dtype_it_returns(paged):
    """What graph recorders and torch.compile plan from, without launching the kernel."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    target = Target("cuda" if torch.cuda.is_available() else "cpu", torch.float32)
    batch = ref.paged_batch(target, torch.Generator().manual_seed(4), [6, 20], block_size=8,
                            kv_heads=2, group=2, head_dim=16)
    real = attend(paged, batch)
    with FakeTensorMode() as mode:
        fake = ref.PagedBatch(**{f: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                                 for f, v in vars(batch).items()})
        promised = attend(paged, fake)
    assert (tuple(promised.shape), promised.dtype) == (tuple(real.shape), real.dtype)
