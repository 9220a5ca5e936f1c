"""v08 page contract, part 2: batch metadata and attention through block tables.

What it introduces: each layer's cache is [num_blocks, block_size, kv_heads, head_dim]; a request's
K/V are scattered over the blocks of its table, in any physical order. Batch metadata follows
FlashInfer's words (kv_indptr, kv_indices, kv_last_page_len) and has a padded form (block_tables,
context_lens) whose shapes do not change from step to step. store_kv writes new K/V to the slots a
slot_mapping names; paged decode and prefill attention read K/V back through the tables.

Why v07 needs it: with a pool (test_v08_block_pool) a request's tokens are no longer contiguous,
so attention must follow the table instead of slicing a per-request buffer.

Core principle: paged attention equals plain causal attention on the gathered K/V, whatever the
physical order of the blocks, with grouped-query heads (query head h reads KV head h // group), and
reads no slot outside a request's context (the caches here start as NaN, so such a read shows).

Files to compare: implementations/v05_decode_lanes/model.py (lane_attention: attention over
per-slot buffers, the model v07 replays) with
implementations/v08_paged_gqa_py/{metadata.py, model.py}, and later
implementations/v10_triton_paged_gqa/paged_kernels.py (the same cache layout in a Triton kernel).

Tradeoff left visible: the PyTorch decode gathers every slot of the tables it is given into a
contiguous copy before attending, so it moves width * block_size tokens per request whatever the
real lengths. An eager engine step hands it tables cut to the step's longest one (page 3:
test_an_eager_step_reads_only_the_blocks_its_requests_hold_not_room_for_max_len); a graph
replays the full width it was captured with. v10's kernel reads blocks in place and stops at
each context length.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spec.support.oracles.paged_reference import causal_attention, new_cache, slot_at, write_tokens
from spec.support.inputs.paged_strategies import (GQA_RATIOS, Heads, PagedBatch, head_layouts,
                                           paged_batches)
from torchlet.contract import PAGED_KV

# The functions under test are the package's paged_attention and metadata modules, which v09 and
# later re-export from v08: they run once (spec/support/collection/parts.py, subject).
pytestmark = pytest.mark.spec(needs=PAGED_KV, subject=("paged_attention", "metadata"))


def random_kv(num_tokens: int, heads: Heads, generator: torch.Generator):
    shape = (num_tokens, heads.num_kv_heads, heads.head_dim)
    return (torch.randn(shape, generator=generator, dtype=torch.float64),
            torch.randn(shape, generator=generator, dtype=torch.float64))


def scattered_caches(batch, heads: Heads, generator: torch.Generator):
    """NaN caches holding each request's random K/V at the slots its table names."""
    k_cache = new_cache(batch.num_blocks, batch.block_size, heads.num_kv_heads, heads.head_dim)
    v_cache = new_cache(batch.num_blocks, batch.block_size, heads.num_kv_heads, heads.head_dim)
    contiguous = []
    for table, n in zip(batch.tables, batch.num_tokens):
        k, v = random_kv(n, heads, generator)
        write_tokens(k_cache, table, k)
        write_tokens(v_cache, table, v)
        contiguous.append((k, v))
    return k_cache, v_cache, contiguous


def assert_close(actual: torch.Tensor, expected: torch.Tensor):
    torch.testing.assert_close(actual.double(), expected.double(), rtol=1e-9, atol=1e-9)


# --- metadata ----------------------------------------------------------------------------------

@pytest.mark.spec(part="kv")
def test_metadata_of_a_scripted_batch_is_exact(impl):
    meta = impl.package.metadata.build([[5, 2], [7], [1, 3, 4]], [5, 4, 9], block_size=4)
    assert meta.kv_indptr.tolist() == [0, 2, 3, 6]
    assert meta.kv_indices.tolist() == [5, 2, 7, 1, 3, 4]
    assert meta.kv_last_page_len.tolist() == [1, 4, 1]   # a full last page counts 4, not 0
    assert meta.block_tables.tolist() == [[5, 2, 0], [7, 0, 0], [1, 3, 4]]
    assert meta.context_lens.tolist() == [5, 4, 9]
    for name in ("kv_indptr", "kv_indices", "kv_last_page_len", "block_tables", "context_lens"):
        assert getattr(meta, name).dtype == torch.int32, name


@pytest.mark.spec(part="kv")
@given(batch=paged_batches(), extra_width=st.integers(0, 3))
def test_kv_indptr_indices_and_last_page_lengths_agree_with_the_tables(impl, batch, extra_width):
    widest = max(len(t) for t in batch.tables)
    meta = impl.package.metadata.build(batch.tables, batch.num_tokens, batch.block_size,
                                       max_blocks=widest + extra_width)
    indptr, indices = meta.kv_indptr.tolist(), meta.kv_indices.tolist()
    assert len(indptr) == len(batch.tables) + 1 and indptr[0] == 0
    for b, (table, n) in enumerate(zip(batch.tables, batch.num_tokens)):
        assert indices[indptr[b]:indptr[b + 1]] == table
        last = meta.kv_last_page_len[b].item()
        assert 1 <= last <= batch.block_size
        assert (len(table) - 1) * batch.block_size + last == n
        row = meta.block_tables[b].tolist()
        assert row == table + [0] * (widest + extra_width - len(table))  # padding: null block
        assert meta.context_lens[b].item() == n
    assert indptr[-1] == len(indices)


@pytest.mark.spec(part="kv")
def test_metadata_refuses_a_table_that_does_not_match_its_token_count(impl):
    with pytest.raises(ValueError):
        impl.package.metadata.build([[1, 2]], [3], block_size=4)  # 3 tokens fill one block


@pytest.mark.spec(part="kv")
@given(batch=paged_batches(), data=st.data())
def test_slot_mapping_names_each_new_tokens_slot_and_pads_with_minus_one(impl, batch, data):
    starts = [data.draw(st.integers(0, n - 1)) for n in batch.num_tokens]
    counts = [data.draw(st.integers(0, n - s)) for n, s in zip(batch.num_tokens, starts)]
    pad = data.draw(st.integers(0, 3))
    slots = impl.package.metadata.slot_mapping(batch.tables, starts, counts, batch.block_size,
                                               pad_to=sum(counts) + pad)
    expected = [slot_at(t, p, batch.block_size)
                for t, s, c in zip(batch.tables, starts, counts) for p in range(s, s + c)]
    assert slots.dtype == torch.int64
    assert slots.tolist() == expected + [-1] * pad


# --- storing K/V -------------------------------------------------------------------------------

@pytest.mark.spec(part=("kv", "model"))
@given(batch=paged_batches(max_tokens=20), heads=head_layouts(), seed=st.integers(0, 2**16))
def test_store_kv_writes_exactly_the_named_slots_and_nothing_else(impl, batch, heads, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (batch.num_blocks, batch.block_size, heads.num_kv_heads, heads.head_dim)
    k_cache = torch.randn(shape, generator=g, dtype=torch.float64)
    v_cache = torch.randn(shape, generator=g, dtype=torch.float64)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    slots = [slot_at(t, p, batch.block_size)
             for t, n in zip(batch.tables, batch.num_tokens) for p in range(n)]
    slots = slots[::2] + [-1, -1]        # every other token, plus padding that stores nothing
    k, v = random_kv(len(slots), heads, g)
    impl.package.paged_attention.store_kv(k, v, k_cache, v_cache, torch.tensor(slots))

    flat_k = k_cache.view(-1, heads.num_kv_heads, heads.head_dim)
    flat_v = v_cache.view(-1, heads.num_kv_heads, heads.head_dim)
    expected_k = k_before.view_as(flat_k).clone()
    expected_v = v_before.view_as(flat_v).clone()
    for row, slot in enumerate(slots):
        if slot >= 0:
            expected_k[slot], expected_v[slot] = k[row], v[row]
    assert torch.equal(flat_k, expected_k)
    assert torch.equal(flat_v, expected_v)


# --- decode ------------------------------------------------------------------------------------

def decode_against_reference(impl, batch, heads: Heads, seed: int):
    g = torch.Generator().manual_seed(seed)
    k_cache, v_cache, contiguous = scattered_caches(batch, heads, g)
    meta = impl.package.metadata.build(batch.tables, batch.num_tokens, batch.block_size)
    q = torch.randn(len(batch.tables), heads.num_heads, heads.head_dim, generator=g,
                    dtype=torch.float64)
    scale = heads.head_dim ** -0.5
    out = impl.package.paged_attention.paged_decode_attention(
        q, k_cache, v_cache, meta.block_tables, meta.context_lens, scale)
    assert out.shape == q.shape
    for b, (k, v) in enumerate(contiguous):
        assert_close(out[b], causal_attention(q[b:b + 1], k, v, scale)[0])


@pytest.mark.spec(part="model")
@given(batch=paged_batches(), heads=head_layouts(), seed=st.integers(0, 2**16))
def test_decode_through_blocks_in_random_physical_order_equals_contiguous_attention(
        impl, batch, heads, seed):
    decode_against_reference(impl, batch, heads, seed)


@pytest.mark.spec(part="model")
@pytest.mark.parametrize("group", GQA_RATIOS)
def test_decode_serves_each_gqa_ratio_over_mixed_lengths_and_partial_last_pages(impl, group):
    # Lengths 1, 4 (one full page), 6 and 13 (partial last pages); blocks deliberately shuffled.
    batch = PagedBatch(block_size=4, num_blocks=12, tables=[[9], [2], [7, 3], [11, 1, 5, 8]],
                       num_tokens=[1, 4, 6, 13])
    decode_against_reference(impl, batch, Heads(2 * group, 2, 8), seed=group)


@pytest.mark.spec(part="model")
def test_decode_of_a_padding_row_with_no_context_gives_zeros_not_nan(impl):
    heads = Heads(4, 2, 4)
    k_cache = new_cache(3, 4, 2, 4, fill=0.0)   # a real engine zero-fills its cache
    v_cache = new_cache(3, 4, 2, 4, fill=0.0)
    q = torch.randn(2, 4, 4, dtype=torch.float64)
    k_cache[1, :2] = torch.randn(2, 2, 4, dtype=torch.float64)
    v_cache[1, :2] = torch.randn(2, 2, 4, dtype=torch.float64)
    out = impl.package.paged_attention.paged_decode_attention(
        q, k_cache, v_cache, torch.tensor([[1], [0]], dtype=torch.int32),
        torch.tensor([2, 0], dtype=torch.int32), heads.head_dim ** -0.5)
    assert_close(out[0], causal_attention(q[:1], k_cache[1, :2], v_cache[1, :2], 0.5)[0])
    assert torch.equal(out[1], torch.zeros(4, 4, dtype=torch.float64))


@pytest.mark.spec(part="model")
def test_decode_works_in_float32(impl):
    batch_tables = torch.tensor([[2, 1]], dtype=torch.int32)
    k_cache = torch.randn(3, 4, 1, 8)
    v_cache = torch.randn(3, 4, 1, 8)
    q = torch.randn(1, 2, 8)
    out = impl.package.paged_attention.paged_decode_attention(
        q, k_cache, v_cache, batch_tables, torch.tensor([7], dtype=torch.int32), 8 ** -0.5)
    k = torch.cat([k_cache[2], k_cache[1]])[:7]
    v = torch.cat([v_cache[2], v_cache[1]])[:7]
    assert out.dtype == torch.float32
    torch.testing.assert_close(out[0].double(), causal_attention(q, k, v, 8 ** -0.5)[0],
                               rtol=1e-5, atol=1e-5)


# --- prefill -----------------------------------------------------------------------------------

@pytest.mark.spec(part="model")
@given(batch=paged_batches(max_batch=3, max_tokens=24), heads=head_layouts(),
       data=st.data(), seed=st.integers(0, 2**16))
def test_prefill_attends_new_tokens_causally_over_the_cached_prefix(impl, batch, heads, data,
                                                                   seed):
    g = torch.Generator().manual_seed(seed)
    k_cache, v_cache, contiguous = scattered_caches(batch, heads, g)
    new = [data.draw(st.integers(1, n)) for n in batch.num_tokens]  # the rest is cached prefix
    qo_indptr = torch.tensor([0] + [sum(new[:b + 1]) for b in range(len(new))])
    q = torch.randn(sum(new), heads.num_heads, heads.head_dim, generator=g, dtype=torch.float64)
    meta = impl.package.metadata.build(batch.tables, batch.num_tokens, batch.block_size)
    scale = heads.head_dim ** -0.5
    out = impl.package.paged_attention.paged_prefill_attention(
        q, k_cache, v_cache, qo_indptr, meta.block_tables, meta.context_lens, scale)
    assert out.shape == q.shape
    for b, (k, v) in enumerate(contiguous):
        lo, hi = qo_indptr[b].item(), qo_indptr[b + 1].item()
        assert_close(out[lo:hi], causal_attention(q[lo:hi], k, v, scale))


@pytest.mark.spec(part=("kv", "model"))
def test_storing_a_prompt_then_prefilling_and_decoding_matches_contiguous_attention(impl):
    """The path an engine takes: store the prompt's K/V through slot_mapping, prefill, then
    append one token and decode, with a pool handing out the blocks."""
    pa, md = impl.package.paged_attention, impl.package.metadata
    heads, g = Heads(14, 2, 8), torch.Generator().manual_seed(0)
    pool = impl.package.BlockPool(10, block_size=4)
    pool.allocate("other", 3)                   # so "a" does not start at block 1
    table = pool.allocate("a", 7)
    k_cache = new_cache(10, 4, 2, 8)
    v_cache = new_cache(10, 4, 2, 8)
    k, v = random_kv(8, heads, g)
    q = torch.randn(8, 14, 8, generator=g, dtype=torch.float64)
    scale = 8 ** -0.5

    pa.store_kv(k[:7], v[:7], k_cache, v_cache, md.slot_mapping([table], [0], [7], 4))
    meta = md.build([table], [7], 4)
    prefill = pa.paged_prefill_attention(q[:7], k_cache, v_cache, torch.tensor([0, 7]),
                                         meta.block_tables, meta.context_lens, scale)
    assert_close(prefill, causal_attention(q[:7], k[:7], v[:7], scale))

    slot = pool.append_token("a")               # token 8 opens a second block
    pa.store_kv(k[7:], v[7:], k_cache, v_cache, torch.tensor([slot]))
    meta = md.build([pool.table("a")], [8], 4, max_blocks=4)
    decode = pa.paged_decode_attention(q[7:], k_cache, v_cache, meta.block_tables,
                                       meta.context_lens, scale)
    assert_close(decode, causal_attention(q[7:], k, v, scale))
    assert math.isfinite(decode.sum().item())
