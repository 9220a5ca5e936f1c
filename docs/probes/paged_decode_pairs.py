"""v10's paged decode attention against a kernel whose program takes every KV head of one
request (issue 48: at the Qwen2.5-0.5B shape, GQA 14:2 with head_dim 64, v10's programs each
read one head's 128-byte half of a token's 256-byte K/V row, and in a decode step at 256 x
1,024 the kernel reads at ~62% of an H100's bandwidth).

The variant (hp=2): one program a request; the queries are laid out block-diagonally, query
head r's 64 values in the columns of its own KV head and zeros elsewhere, so one tl.dot of
[heads, kv_heads * head_dim] by the tile's whole K rows [kv_heads * head_dim, N] gives each
head its own scores, and P @ V the whole rows, of which each head keeps its own columns. Twice
the multiply-adds (tensor cores idle here), whole 256-byte rows, 14 of 16 query rows used
instead of 7. Also v10's plan (hp=1) in both orders: batch-major (v10's grid before 0949aa1,
one request's heads a batch of programs apart) and with one request's programs adjacent
("heads first", v10's grid since), so the two halves of a row are read at about the same time.

Prints one line per variant: us one call a replay (L2 flushed, as bench kernel) and chained
(20 calls in a graph), % of the card's bandwidth (--bandwidth, default an H100's 3.35e12), the
largest difference from v10's op. GPU only. `python3 docs/probes/paged_decode_pairs.py`."""
import itertools
import sys

import torch
import triton
import triton.language as tl

import implementations
from torchlet.bench.micro import chain_ms, graphed, time_ms

paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
attend_tile = paged._attend_tile  # v10's online softmax over one tile
device, dtype = "cuda", torch.bfloat16
KV_HEADS, GROUP, HEAD_DIM, PAGE = 2, 7, 64, 16
CASES = [(256, 1024), (256, 1056), (131, 903), (64, 4096), (32, 1024)]
BANDWIDTH = float(sys.argv[sys.argv.index("--bandwidth") + 1]) if "--bandwidth" in sys.argv \
    else 3.35e12


@triton.jit
def _heads_kernel(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, scale,
                  q_sb, q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, out_sb, out_sh,
                  group, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, HP: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
                  HEAD_FASTEST: tl.constexpr):
    # One program = one request x HP KV heads (HP = 1: v10's plan). HEAD_FASTEST: the program
    # ids of one request's heads adjacent, so that they read the halves of the same rows
    # together.
    if HEAD_FASTEST:
        b = tl.program_id(1).to(tl.int64)
        kv0 = tl.program_id(0) * HP
    else:
        b = tl.program_id(0).to(tl.int64)
        kv0 = tl.program_id(1) * HP
    r = tl.arange(0, BLOCK_R)          # query heads kv0 * group ...
    c = tl.arange(0, HP * HEAD_DIM)    # the HP heads' columns of a token's K/V row
    own = ((c // HEAD_DIM)[None, :] == (r // group)[:, None]) & (r < HP * group)[:, None]
    heads = kv0 * group + r
    q = tl.load(q_ptr + b * q_sb + heads[:, None] * q_sh + (c % HEAD_DIM)[None, :], mask=own,
                other=0.0)
    col = (kv0 + c // HEAD_DIM) * cache_shead + c % HEAD_DIM
    context = tl.load(lens_ptr + b)
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, HP * HEAD_DIM], tl.float32)
    for start in tl.range(0, context, BLOCK_N, num_stages=STAGES):
        t = start + tl.arange(0, BLOCK_N)
        live = t < context
        page = tl.load(tables_ptr + b * tables_sb + t // PAGE, mask=live, other=0)
        slot = page.to(tl.int64) * cache_sblock + (t % PAGE) * cache_stok
        k_t = tl.load(k_ptr + slot[None, :] + col[:, None], mask=live[None, :], other=0.0)
        v = tl.load(v_ptr + slot[:, None] + col[None, :], mask=live[:, None], other=0.0)
        m, l, acc = attend_tile(q, k_t, v, live, m, l, acc, scale, "tf32")
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(out_ptr + b * out_sb + heads[:, None] * out_sh + (c % HEAD_DIM)[None, :],
             out.to(out_ptr.dtype.element_ty), mask=own)


def heads_op(q, k_cache, v_cache, tables, lens, scale, *, hp, block_n, warps, stages,
             head_fastest):
    batch, heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    group = heads // kv_heads
    grid = (kv_heads // hp, batch) if head_fastest else (batch, kv_heads // hp)
    _heads_kernel[grid](
        q, k_cache, v_cache, tables, lens, out, scale, q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), tables.stride(0),
        out.stride(0), out.stride(1), group, HEAD_DIM=head_dim, PAGE=block_size, HP=hp,
        BLOCK_R=max(16, triton.next_power_of_2(hp * group)), BLOCK_N=block_n, STAGES=stages,
        HEAD_FASTEST=head_fastest, num_warps=warps)
    return out


def case(batch, context):
    g = torch.Generator(device=device).manual_seed(batch * 7919 + context)
    pages = -(-context // PAGE)
    shape = (batch * pages + 1, PAGE, KV_HEADS, HEAD_DIM)
    k = torch.randn(shape, generator=g, device=device).to(dtype)
    v = torch.randn(shape, generator=g, device=device).to(dtype)
    order = torch.randperm(batch * pages, generator=torch.Generator().manual_seed(0)) + 1
    tables = order.view(batch, pages).to(device=device, dtype=torch.int32)
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    q = torch.randn(batch, KV_HEADS * GROUP, HEAD_DIM, generator=g, device=device).to(dtype)
    return q, k, v, tables, lens


def row(label, fn, inputs, want):
    cells = []
    for (batch, context), args in inputs.items():
        diff = (fn(*args).float() - want[batch, context].float()).abs().max().item()
        (replay,), _ = graphed([lambda a=args: fn(*a)], device)
        one = time_ms(replay, device, 50) * 1e3
        chained = chain_ms(lambda a=args: fn(*a), 20) * 1e3
        moved = batch * context * 2 * KV_HEADS * HEAD_DIM * 2
        cells.append(f"{batch}x{context} {one:5.1f}/{chained:5.1f} us "
                     f"{100 * moved / (one * 1e-6) / BANDWIDTH:3.0f}/"
                     f"{100 * moved / (chained * 1e-6) / BANDWIDTH:3.0f}% d{diff:.0e}")
    print(f"{label:30s} | " + " | ".join(cells), flush=True)


def main():
    inputs = {c: case(*c) for c in CASES}
    scale = HEAD_DIM ** -0.5
    want = {c: paged.paged_decode_attention(*a, scale) for c, a in inputs.items()}
    print(torch.cuda.get_device_name(), "| us one call / chained, % of", BANDWIDTH / 1e12,
          "TB/s", flush=True)
    row("v10 as it is", lambda *a: paged.paged_decode_attention(*a, scale), inputs, want)
    run = paged._paged_decode_kernel.run
    for warps, stages in [(4, 2), (8, 3), (4, 4)]:
        paged._paged_decode_kernel.run = lambda *a, w=warps, s=stages, **k: run(
            *a, **{"num_warps": w, "num_stages": s, **k})
        row(f"v10 warps={warps} stages={stages}",
            lambda *a: paged.paged_decode_attention(*a, scale), inputs, want)
    paged._paged_decode_kernel.run = run
    plans = [(1, n, 4, st, hf) for n in (64, 128) for st in (2, 3) for hf in (False, True)]
    plans += list(itertools.product((2,), (32, 64, 128), (4, 8), (2, 3), (False,)))
    for hp, block_n, warps, stages, head_fastest in plans:
        label = f"hp={hp} n={block_n} w={warps} s={stages}{' heads first' if head_fastest else ''}"
        try:
            row(label, lambda *a, o=dict(hp=hp, block_n=block_n, warps=warps, stages=stages,
                                         head_fastest=head_fastest): heads_op(*a, scale, **o),
                inputs, want)
        except Exception as error:  # noqa: BLE001  (a variant that fails to compile)
            print(f"{label}: {type(error).__name__}: {str(error)[:100]}", flush=True)


if __name__ == "__main__":
    main()
