"""The greedy draw's argmax over the LM head's logits [B, 151,936] (bf16), torch's against two
Triton variants: (a) two launches, the first taking each row's chunks of CHUNK columns to a
(max, first index) pair, the second picking each row's first largest pair; (b) one program a row
walking its columns. Each checked against torch.argmax on random data (ties resolve to the first
index, as torch's do), timed in a CUDA graph of 20 calls over 4 rotating inputs. GPU only.

    PYTHONPATH=. python3 docs/probes/argmax_pass.py"""
import itertools

import torch
import triton
import triton.language as tl

from torchlet.bench.micro import chain_ms

VOCAB = 151936


@triton.jit
def _chunk_max(x_ptr, val_ptr, idx_ptr, n, stride, chunks, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=float("-inf")).to(tl.float32)
    best, at = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(val_ptr + row * chunks + c, best)
    tl.store(idx_ptr + row * chunks + c, at + c * CHUNK)


@triton.jit
def _pick(val_ptr, idx_ptr, out_ptr, chunks, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    v = tl.load(val_ptr + row * chunks + c, mask=c < chunks, other=float("-inf"))
    _, at = tl.max(v, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(out_ptr + row, tl.load(idx_ptr + row * chunks + at))


@triton.jit
def _row_walk(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    at = tl.zeros([BLOCK], tl.int32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=float("-inf")).to(tl.float32)
        better = x > best  # strictly: an earlier column keeps a tie
        best = tl.where(better, x, best)
        at = tl.where(better, cols, at)
    top = tl.max(best, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(best == top, at, 2147483647), axis=0))


def two_launch(x, chunk):
    rows, n = x.shape
    chunks = triton.cdiv(n, chunk)
    val = torch.empty(rows, chunks, device=x.device, dtype=torch.float32)
    idx = torch.empty(rows, chunks, device=x.device, dtype=torch.int32)
    out = torch.empty(rows, device=x.device, dtype=torch.int32)
    _chunk_max[(rows, chunks)](x, val, idx, n, x.stride(0), chunks, CHUNK=chunk, num_warps=4)
    _pick[(rows,)](val, idx, out, chunks, BLOCK=triton.next_power_of_2(chunks))
    return out


def row_walk(x, block, warps):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.int32)
    _row_walk[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=block, num_warps=warps)
    return out


def main():
    variants = {"torch.argmax": lambda x: x.argmax(-1)}
    for chunk in (2048, 4096, 8192):
        variants[f"two launches, chunk {chunk}"] = lambda x, c=chunk: two_launch(x, c)
    for block, warps in ((2048, 8), (4096, 8), (4096, 16)):
        variants[f"a program a row, {block} x {warps} warps"] = \
            lambda x, b=block, w=warps: row_walk(x, b, w)
    for rows in (1, 64, 131, 256):
        xs = [torch.randn(rows, VOCAB, device="cuda").to(torch.bfloat16) for _ in range(4)]
        xs[0][:, 7] = xs[0][:, 150000] = 99.0  # a tie: the first index wins
        cells = []
        for name, fn in variants.items():
            for x in xs:
                assert torch.equal(fn(x).long(), x.argmax(-1)), (name, rows)
            turn = itertools.count()  # each captured call reads the next input
            us = chain_ms(lambda: fn(xs[next(turn) % 4]), 20, replays=5) * 1e3
            cells.append(f"{name} {us:.1f}")
        print(f"B={rows} ({rows * VOCAB * 2 / 1e6:.1f} MB), us a call: " + " | ".join(cells))


if __name__ == "__main__":
    main()
