"""v10's paged decode attention against variants of its kernel, timed in a CUDA graph of 20 calls
(bf16, GQA 14:2, head_dim 64, pages of 16 tokens in random order), each variant's output checked
against the real op's first. What varies (issue 30: batch 64 x 4,096 at 58% of 4.3 TB/s, target
70%):
- K's tile loaded as [N, D] rows (each token's head contiguous) and transposed in registers,
  instead of gathered as [D, N];
- the page size a compile-time constant (t // PAGE a shift), instead of an argument;
- num_stages (software pipelining of the tile loads), num_warps, BLOCK_N, programs per SM.
Prints one line per variant: us and % of 4.3 TB/s per case. GPU only. `--qwen3`: Qwen3-0.6B's
heads instead (GQA 16:8, head_dim 128), over tiles of 32 to 128 tokens (a 128 x 128 tile of K
and one of V, pipelined over 3 stages, fill most of an SM's shared memory)."""
import itertools
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

import implementations

sys.path.insert(0, str(Path(__file__).parent))
from paged_decode_tune import case, graph_us  # noqa: E402  (its inputs and its timing)

paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
device, dtype = "cuda", torch.bfloat16
CASES = [(1, 4096), (64, 1024), (64, 4096), (256, 1024), (256, 128)]
QWEN3 = "--qwen3" in sys.argv
HEADS = dict(kv_heads=8, group=2, head_dim=128) if QWEN3 else dict(kv_heads=2, group=7, head_dim=64)


@triton.jit
def _variant(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, part_ptr, scale,
             q_sb, q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, out_sb, out_sh,
             block_size, group, head_dim, chunk,
             BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
             SPLIT: tl.constexpr, K_ROWS: tl.constexpr, PAGE: tl.constexpr,
             STAGES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    q_mask = (g < group)[:, None] & (d < head_dim)[None, :]
    q = tl.load(q_ptr + b * q_sb + heads[:, None] * q_sh + d[None, :], mask=q_mask, other=0.0)
    context = tl.load(lens_ptr + b)
    if SPLIT:
        lo = tl.program_id(2) * chunk
        hi = tl.minimum(lo + chunk, context)
    else:
        lo = 0
        hi = context
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
        t = start + tl.arange(0, BLOCK_N)
        live = t < hi
        if PAGE > 0:
            page = tl.load(tables_ptr + b * tables_sb + t // PAGE, mask=live, other=0)
            slot = page.to(tl.int64) * cache_sblock + (t % PAGE) * cache_stok + kv_head * cache_shead
        else:
            page = tl.load(tables_ptr + b * tables_sb + t // block_size, mask=live, other=0)
            slot = (page.to(tl.int64) * cache_sblock + (t % block_size) * cache_stok
                    + kv_head * cache_shead)
        rows_mask = live[:, None] & (d < head_dim)[None, :]
        if K_ROWS:
            k = tl.load(k_ptr + slot[:, None] + d[None, :], mask=rows_mask, other=0.0)
            k_t = tl.trans(k)
        else:
            k_t = tl.load(k_ptr + slot[None, :] + d[:, None],
                          mask=live[None, :] & (d < head_dim)[:, None], other=0.0)
        scores = tl.dot(q, k_t) * scale
        scores = tl.where(live[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        rescale = tl.exp(m - m_new)
        l = l * rescale + tl.sum(p, axis=1)
        v = tl.load(v_ptr + slot[:, None] + d[None, :], mask=rows_mask, other=0.0)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    if SPLIT:
        row = head_dim + 2
        part = (part_ptr + ((b * tl.num_programs(1) + kv_head) * tl.num_programs(2)
                            + tl.program_id(2)) * group * row + g * row)
        if lo < context:
            tl.store(part[:, None] + d[None, :], acc, mask=q_mask)
            tl.store(part + head_dim, m, mask=g < group)
            tl.store(part + head_dim + 1, l, mask=g < group)
    else:
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        tl.store(out_ptr + b * out_sb + heads[:, None] * out_sh + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_mask)


def variant_op(q, k_cache, v_cache, tables, lens, scale, *, block_n, warps, stages, k_rows,
               page_const, per_sm):
    batch, heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    group = heads // kv_heads
    paged.BLOCK_N, paged.PROGRAMS_PER_SM = block_n, per_sm
    splits, chunk = paged._plan_splits(batch * kv_heads, tables.shape[1] * block_size,
                                       paged._num_sms(q.device))
    block_g, block_d = paged._pad(group), paged._pad(head_dim)
    block_s = min(triton.next_power_of_2(splits),
                  max(1, paged.COMBINE_FLOATS // (block_g * block_d)))
    part = out
    if splits > 1:
        part = torch.empty(batch * kv_heads * splits * group * (head_dim + 2),
                           dtype=torch.float32, device=q.device)
    _variant[(batch, kv_heads, splits)](
        q, k_cache, v_cache, tables, lens, out, part, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        tables.stride(0), out.stride(0), out.stride(1), block_size, group, head_dim, chunk,
        BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_N=block_n, SPLIT=splits > 1, K_ROWS=k_rows,
        PAGE=block_size if page_const else 0, STAGES=stages, num_warps=warps)
    if splits > 1:
        paged._combine_kernel[(batch, kv_heads)](
            part, lens, out, out.stride(0), out.stride(1), group, head_dim, chunk, splits,
            BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_S=block_s, PDL=False)
    return out


def row(label, fn):
    cells = []
    for batch, context in CASES:
        args = inputs[batch, context]
        us = graph_us(lambda: fn(*args))
        share = (batch * context * 2 * HEADS["kv_heads"] * HEADS["head_dim"] * 2
                 / (us * 1e-6) / 4.3e12 * 100)
        cells.append(f"B{batch}x{context} {us:6.1f} us {share:3.0f}%")
    print(f"{label:44s} | " + " | ".join(cells), flush=True)


inputs = {c: case(*c, **HEADS) for c in CASES}
defaults = (paged.BLOCK_N, paged.PROGRAMS_PER_SM)
row("v10 as it is", lambda *a: paged.paged_decode_attention(*a, 0.125))
grid = dict(block_n=(128, 256), warps=(4, 8), stages=(1, 2, 3), k_rows=(False, True),
            page_const=(False, True), per_sm=(2, 4))
if "--quick" in sys.argv:
    grid.update(block_n=(128,), warps=(4,), k_rows=(False,))
if QWEN3:
    grid.update(block_n=(32, 64, 128), k_rows=(False,), page_const=(True,))
for values in itertools.product(*grid.values()):
    options = dict(zip(grid, values))
    try:
        for c, args in inputs.items():
            paged.BLOCK_N, paged.PROGRAMS_PER_SM = defaults
            want = paged.paged_decode_attention(*args, 0.125)
            got = variant_op(*args, 0.125, **options)
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
        row(" ".join(f"{k}={int(v)}" for k, v in options.items()),
            lambda *a, o=options: variant_op(*a, 0.125, **o))
    except Exception as error:  # noqa: BLE001  (a variant that fails to compile or differs)
        print(f"{options}: {type(error).__name__}: {str(error)[:120]}", flush=True)
paged.BLOCK_N, paged.PROGRAMS_PER_SM = defaults
