"""What a many-row decode step could save by launching its attention dependent on the launch
before it (issue 48): at batch 256 the attention follows rope_split, a short plain launch, so
each layer pays the attention's launch and ramp after rope_split ends. Timed here, in a CUDA
graph of 24 layers' [producer -> attention] (bf16, Qwen2.5-0.5B's heads: GQA 14:2, head_dim
64, pages of 16 in random order):

- plain: a stand-in for rope_split (it writes q, as rope_split does, from a [B, 1,152] row)
  and v10's attention plan (request-major, 128-token tiles), both launched plainly;
- dependent: the producer lets the next launch start first thing (gdc_launch_dependents) and the
  attention, launched dependent, waits first thing (gdc_wait), then runs as before: only the
  launch and the programs' start overlap the producer, no load moves before the wait;
- dependent, no trigger: the attention launched dependent, the producer never letting it start
  early (what the attention costs launched so after a plain launch).

Prints us a layer (the graph's replays over 24) for each, at each batch x context. GPU only
(Hopper: programmatic dependent launch). `python3 docs/probes/attention_overlap.py`."""
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

import implementations
from torchlet.bench.micro import chain_ms

sys.path.insert(0, str(Path(__file__).parent))
import paged_decode_pairs as pairs  # noqa: E402  (its inputs)

paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
attend_tile = paged._attend_tile
device, dtype = pairs.device, pairs.dtype
KV_HEADS, GROUP, HEAD_DIM, PAGE = pairs.KV_HEADS, pairs.GROUP, pairs.HEAD_DIM, pairs.PAGE
LAYERS = 24
CASES = [(256, 128), (256, 1024), (131, 903), (64, 1024)]


@triton.jit
def _producer(x_ptr, q_ptr, n_q, width, TRIGGER: tl.constexpr, BLOCK: tl.constexpr):
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * width + c, mask=c < n_q)
    tl.store(q_ptr + row * n_q + c, (x.to(tl.float32) * 1.0001).to(x.dtype), mask=c < n_q)


@triton.jit
def _attention(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, scale, tables_sb,
               cache_sblock, cache_stok, kv_heads, group, HEAD_DIM: tl.constexpr,
               PAGE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
               WAIT: tl.constexpr):
    if WAIT:
        tl.extra.cuda.gdc_wait()
    pair = tl.program_id(0)  # request-major, as v10's grid
    b, kv_head = (pair // kv_heads).to(tl.int64), pair % kv_heads
    heads = kv_head * group + tl.arange(0, BLOCK_G)  # this KV head's query heads, padded
    ours = heads < (kv_head + 1) * group
    d = tl.arange(0, HEAD_DIM)
    rows = (b * kv_heads * group + heads)[:, None] * HEAD_DIM + d[None, :]
    q = tl.load(q_ptr + rows, mask=ours[:, None], other=0.0)
    context = tl.load(lens_ptr + b)
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    for start in range(0, context, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        live = t < context
        page = tl.load(tables_ptr + b * tables_sb + t // PAGE, mask=live, other=0)
        slot = page.to(tl.int64) * cache_sblock + (t % PAGE) * cache_stok + kv_head * HEAD_DIM
        k_t = tl.load(k_ptr + slot[None, :] + d[:, None], mask=live[None, :], other=0.0)
        v = tl.load(v_ptr + slot[:, None] + d[None, :], mask=live[:, None], other=0.0)
        m, l, acc = attend_tile(q, k_t, v, live, m, l, acc, scale, "tf32")
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(out_ptr + rows, out.to(out_ptr.dtype.element_ty), mask=ours[:, None])


def case(batch, context):
    """paged_decode_pairs.py's K/V, tables and lengths, and a [B, q | k | v] row a token."""
    q, k, v, tables, lens = pairs.case(batch, context)
    qkv = torch.randn(batch, (KV_HEADS * GROUP + 2 * KV_HEADS) * HEAD_DIM, device=device,
                      dtype=dtype)
    return qkv, k, v, tables, lens


def layer(args, trigger: bool, wait: bool):
    qkv, k, v, tables, lens = args
    batch, n_q = qkv.shape[0], KV_HEADS * GROUP * HEAD_DIM
    q = torch.empty(batch, n_q, device=device, dtype=dtype)
    out = torch.empty_like(q)

    def run():
        _producer[(batch,)](qkv, q, n_q, qkv.shape[1], TRIGGER=trigger,
                            BLOCK=triton.next_power_of_2(n_q))
        _attention[(batch * KV_HEADS,)](
            q, k, v, tables, lens, out, HEAD_DIM ** -0.5, tables.stride(0), k.stride(0),
            k.stride(1), KV_HEADS, GROUP, HEAD_DIM=HEAD_DIM, PAGE=PAGE, BLOCK_G=16,
            BLOCK_N=128, WAIT=wait, **({"launch_pdl": True} if wait else {}))
        return out
    return run


def main():
    print(torch.cuda.get_device_name(), "| us a layer (producer + attention)", flush=True)
    for batch, context in CASES:
        args = case(batch, context)
        want = layer(args, False, False)().clone()
        cells = []
        for label, trigger, wait in (("plain", False, False), ("dependent", True, True),
                                     ("dependent, no trigger", False, True)):
            run = layer(args, trigger, wait)
            assert torch.equal(run(), want), label
            cells.append(f"{label} {chain_ms(run, LAYERS) * 1e3:6.2f}")
        print(f"{batch} x {context}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
