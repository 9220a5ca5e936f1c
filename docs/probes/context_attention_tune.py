"""v13's context_attention over a workload-like prefill (about 30 prompts of 100-1,024 tokens,
16,000 rows, nothing cached, pages of 256 tokens in random order), one layer's attention in
bf16: the kernel launched directly under tile and warp variants, then torch's flash attention
called once per request on K/V gathered out of the cache (what v13 did before)."""
import random

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import implementations

kernel = implementations.load("v13_fused").package.context_attention._context_attention_kernel
device, dtype = "cuda", torch.bfloat16
rng = random.Random(0)
lengths = []
while sum(lengths) < 16000:
    lengths.append(rng.randint(100, 1024))
rows, heads, kv_heads, head_dim, block = sum(lengths), 14, 2, 64, 256
num_blocks = sum(-(-n // block) for n in lengths) + 1
k_cache = torch.randn(num_blocks, block, kv_heads, head_dim, device=device, dtype=dtype)
v_cache = torch.randn_like(k_cache)
q = torch.randn(rows, heads, head_dim, device=device, dtype=dtype)
order, slots, used = torch.randperm(num_blocks - 1) + 1, [], 0
for n in lengths:
    table, used = order[used:used + -(-n // block)], used + -(-n // block)
    p = torch.arange(n)
    slots.append(table[p // block] * block + p % block)
slots = torch.cat(slots).to(device)
indptr = torch.tensor([0] + lengths).cumsum(0).to(device)


def launch(block_m, block_n, warps, stages):
    """One unsplit launch (this prefill's programs fill the GPU: the op would not split it) of
    a block_m tile of (row, query head) pairs a program: block_m // 7 rows of the group of 7."""
    out = torch.empty_like(q)
    rows_per_program = block_m // 7
    kernel[(triton.cdiv(max(lengths), rows_per_program), len(lengths), kv_heads)](
        q, k_cache, v_cache, out, out, out, indptr, slots, indptr, head_dim ** -0.5, q.stride(0),
        q.stride(1), k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1), kv_heads,
        heads // kv_heads, head_dim, 1, max(lengths), ROWS=rows_per_program, BLOCK_M=block_m,
        BLOCK_N=block_n, BLOCK_D=64, SPLIT=False, PRECISION="tf32", num_warps=warps,
        num_stages=stages)
    return out


def ms(fn, n=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


flops = sum(n * n / 2 for n in lengths) * heads * head_dim * 4
reference = launch(64, 64, 4, 2)
for variant in [(64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 4, 2), (128, 64, 8, 2),
                (64, 32, 4, 2), (128, 128, 8, 2), (64, 128, 4, 2), (256, 64, 8, 2)]:
    t = ms(lambda: launch(*variant))
    diff = (launch(*variant).float() - reference.float()).abs().max().item()
    print(f"BLOCK_M, BLOCK_N, warps, stages = {variant}: {t:.3f} ms, {flops / t / 1e9:.0f} "
          f"TFLOP/s, max diff {diff:.1e}")
keys, values = k_cache.flatten(0, 1)[slots], v_cache.flatten(0, 1)[slots]
spans = list(zip(indptr.tolist(), indptr.tolist()[1:]))


def per_request():
    for a, b in spans:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(
                q[a:b].transpose(0, 1)[None], keys[a:b].transpose(0, 1)[None],
                values[a:b].transpose(0, 1)[None], is_causal=True, enable_gqa=True)


print(f"flash attention per request, K/V gathered: {ms(per_request):.3f} ms")
