"""v18's GPU products (implementations/v18_quantized_weights/gpu_kernels.py) against bf16 cuBLAS
(F.linear), on SmolLM2-135M's and Qwen3-0.6B's matrices, at M = 1, 8, 64 and 256 rows; and
the sweeps behind the module's constants: the gemv's blocks and split at one row, the row count
where the tensor-core matmul overtakes the gemv, the matmul's tiles, and dequantizing into a
bf16 scratch matrix then cuBLAS instead of the fused matmul. GPU only.

Formats: int8 per output channel, int4 in groups of 64 with zero points, Q4_1 (GGUF's int4 in
groups of 32 with mins). A decode step's matrices: each layer's packed q/k/v, o, packed
gate/up and down, then the LM head; "step" sums a shape's time times the layers (the LM head
once).

Timing, no CUDA graph: each call has a pair of torch.cuda.Events around it; a long
torch.cuda._sleep first keeps the GPU busy while the host queues every call, so the pairs time
the kernels, not the host's launches. Each call reads its own copy of the weights, in turn
(at least ~200 MB of copies, as a step's layers each read theirs), so no call finds its weights
in L2. Median of ITERS calls, in microseconds. Outputs are checked against the float64 product
of the dequantized weights first (relative Frobenius error). Writes everything as JSON to
$OUT/quantized_gpu_kernels.json (or the working directory); the tables go to stdout, the step
summary last. Usage: python docs/probes/quantized_gpu_kernels.py [table] [gemv] [crossover]
[tiles] (the stages to run, in order; the first three when none is named).
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from implementations.v18_quantized_weights import gpu_kernels as gk
from torchlet.contract import QuantizedTensor

DEV = "cuda"
DTYPE = torch.bfloat16  # x's and cuBLAS's weights' dtype
ITERS = 40
COPY_BYTES = 200e6
MODELS = {  # name -> (layers, [(matrix, n, k, per step)])
    "SmolLM2-135M": (30, [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576),
                          ("down", 576, 1536), ("lm_head", 49152, 576)]),
    "Qwen3-0.6B": (28, [("qkv", 3072, 1024), ("o", 1024, 2048), ("gate_up", 6144, 1024),
                        ("down", 1024, 3072), ("lm_head", 151936, 1024)]),
}
FORMATS = ("int8", "int4_g64", "Q4_1")
ROWS = (1, 8, 64, 256)
RESULTS: dict = {}


def quantized(fmt: str, n: int, k: int, gen: torch.Generator) -> QuantizedTensor:
    """Random weights of the format, made on the GPU (values are random, never zeros)."""
    groups = {"int8": k, "int4_g64": 64, "Q4_1": 32}[fmt]
    g = (n, k // groups)
    scales = (torch.rand(g, device=DEV, generator=gen) * 0.02 + 0.005).half()
    if fmt == "int8":
        q = torch.randint(-127, 128, (n, k), device=DEV, generator=gen, dtype=torch.int8)
        return QuantizedTensor(8, q, scales, k, name=fmt)
    q = torch.randint(0, 256, (n, k // 2), device=DEV, generator=gen, dtype=torch.uint8)
    if fmt == "int4_g64":
        z = torch.randint(0, 16, g, device=DEV, generator=gen, dtype=torch.uint8)
        return QuantizedTensor(4, q, scales, 64, zeros=z, name=fmt)
    mins = (torch.randn(g, device=DEV, generator=gen) * 0.05).half()
    return QuantizedTensor(4, q, scales, 32, mins=mins, name=fmt)


def copies_of(make, nbytes: int) -> list:
    count = min(128, max(2, math.ceil(COPY_BYTES / nbytes)))
    return [make() for _ in range(count)]


def median_us(fn, args_list) -> float:
    fn(*args_list[0])  # compile, warm
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(ITERS)]
    torch.cuda._sleep(40_000_000)  # ~20 ms of GPU time: the host queues all calls meanwhile
    for i, (start, end) in enumerate(pairs):
        start.record()
        fn(*args_list[i % len(args_list)])
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3


def rel_err(out: torch.Tensor, x: torch.Tensor, w: QuantizedTensor) -> float:
    ref = x.double() @ w.dequantize().double().T
    return ((out.double() - ref).norm() / ref.norm()).item()


# --- dequantize into a bf16 scratch matrix, then cuBLAS (the alternative to the fused matmul) --

@triton.jit
def _dequant_kernel(q_ptr, s_ptr, z_ptr, mn_ptr, out_ptr, N, K, n_groups, BITS: tl.constexpr,
                    GROUP: tl.constexpr, HAS_Z: tl.constexpr, HAS_MIN: tl.constexpr,
                    BLOCK_N: tl.constexpr, RUNS: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    c0 = tl.program_id(1) * RUNS * 32
    j = tl.arange(0, RUNS * 16)                      # low halves of RUNS runs of 32 columns
    cols = c0 + (j // 16) * 32 + j % 16
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    if BITS == 8:
        qa = tl.load(q_ptr + rows[:, None] * K + cols[None, :], mask=mask, other=0).to(tl.float32)
        qb = tl.load(q_ptr + rows[:, None] * K + cols[None, :] + 16, mask=mask,
                     other=0).to(tl.float32)
    else:
        b = tl.load(q_ptr + rows[:, None] * (K // 2) + c0 // 2 + j[None, :], mask=mask,
                    other=0).to(tl.int32)
        qa = (b & 0xF).to(tl.float32)
        qb = (b >> 4).to(tl.float32)
    g = rows[:, None] * n_groups + cols[None, :] // GROUP
    s = tl.load(s_ptr + g, mask=mask, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + g, mask=mask, other=0).to(tl.float32)
        qa -= z
        qb -= z
    wa = qa * s
    wb = qb * s
    if HAS_MIN:
        mn = tl.load(mn_ptr + g, mask=mask, other=0.0).to(tl.float32)
        wa += mn
        wb += mn
    dst = out_ptr + rows[:, None] * K + cols[None, :]
    tl.store(dst, wa.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + 16, wb.to(out_ptr.dtype.element_ty), mask=mask)


def dequant_then_cublas(x: torch.Tensor, w: QuantizedTensor) -> torch.Tensor:
    n, k = w.shape
    scratch = torch.empty(n, k, device=x.device, dtype=x.dtype)
    any_ = w.scales
    _dequant_kernel[(triton.cdiv(n, 16), triton.cdiv(k, 256))](
        w.q, w.scales, w.zeros if w.zeros is not None else any_,
        w.mins if w.mins is not None else any_, scratch, n, k, k // w.group, BITS=w.bits,
        GROUP=w.group, HAS_Z=w.zeros is not None, HAS_MIN=w.mins is not None, BLOCK_N=16,
        RUNS=8)
    return F.linear(x, scratch)


# --- the measurements ----------------------------------------------------------------------

def shapes_of(model):
    layers, shapes = MODELS[model]
    return [(name, n, k, 1 if name == "lm_head" else layers) for name, n, k in shapes]


def weights_for(fmt, n, k, gen):
    one = quantized(fmt, n, k, gen)
    return copies_of(lambda: quantized(fmt, n, k, gen), one.nbytes)


def step_ms(times: dict, model: str) -> float:
    return sum(times[name] * per for name, _, _, per in shapes_of(model)) / 1e3


def table(model: str, gen) -> None:
    """bf16 F.linear and gk.linear for each format, every shape and row count."""
    out = RESULTS.setdefault("table", {}).setdefault(model, {})
    for name, n, k, per in shapes_of(model):
        bf = copies_of(lambda: torch.randn(n, k, device=DEV, generator=gen,
                                           dtype=DTYPE) * 0.02, n * k * 2)
        qs = {fmt: weights_for(fmt, n, k, gen) for fmt in FORMATS}
        for m in ROWS:
            x = torch.randn(m, k, device=DEV, generator=gen, dtype=DTYPE)
            row = out.setdefault(str(m), {}).setdefault(name, {})
            row["bf16"] = median_us(F.linear, [(x, w) for w in bf])
            for fmt, ws in qs.items():
                err = rel_err(gk.linear(x, ws[0]), x, ws[0])
                assert err < 1e-2, (model, name, m, fmt, err)
                row[fmt] = median_us(gk.linear, [(x, w) for w in ws])
                row[fmt + "_err"] = err
                row[fmt + "_GBps"] = ws[0].nbytes / row[fmt] / 1e3
            row["bf16_GBps"] = n * k * 2 / row["bf16"] / 1e3
        del bf, qs
        torch.cuda.empty_cache()


def sweep(model: str, gen, rows, variants: dict, formats, label: str) -> None:
    """Step time (summed as `step_ms`) of each variant: name -> (setup(), fn(x, w))."""
    out = RESULTS.setdefault(label, {})
    for name, n, k, per in shapes_of(model):
        qs = {fmt: weights_for(fmt, n, k, gen) for fmt in formats}
        for m in rows:
            x = torch.randn(m, k, device=DEV, generator=gen, dtype=DTYPE)
            for vname, (setup, fn) in variants.items():
                setup()
                for fmt, ws in qs.items():
                    try:
                        err = rel_err(fn(x, ws[0]), x, ws[0])
                        assert err < 1e-2, err
                        t = median_us(fn, [(x, w) for w in ws])
                    except Exception as e:  # noqa: BLE001  (a variant that fails: say why)
                        print(f"  {label} {vname} {fmt} {name} M={m}: {type(e).__name__} {e}"[:300])
                        t = float("nan")
                    out.setdefault(f"{vname}|{fmt}|{m}", {})[name] = t
        del qs
        torch.cuda.empty_cache()
    defaults()


def defaults():
    gk.GEMV_PLANS, gk.MATMUL_TILES, gk.SPLIT_BELOW = DEFAULTS


DEFAULTS = (dict(gk.GEMV_PLANS), gk.MATMUL_TILES, gk.SPLIT_BELOW)


def gemv_variants():
    """One gemv plan for every matrix: (BLOCK_N, BLOCK_K int8, BLOCK_K int4, chunk)."""
    def plan(bn, k8, k4, chunk):
        def setup():
            one = (bn, {8: k8, 4: k4}, {8: chunk, 4: chunk})
            gk.GEMV_PLANS = {"few": one, "many": one}
        return setup, gk.gemv
    v = {f"N{bn} K{k8}/{k4} chunk{c}": plan(bn, k8, k4, c) for bn, k8, k4, c in
         [(4, 512, 1024, 2048), (2, 512, 1024, 2048), (8, 512, 1024, 2048),
          (4, 512, 1024, 1024), (4, 1024, 2048, 4096), (8, 256, 512, 1024),
          (4, 1024, 1024, 4096), (4, 1024, 1024, 2048)]}
    v["gk's own plans"] = (defaults, gk.gemv)
    return v


def matmul_variants():
    """Tiles (BLOCK_M, BLOCK_N, warps, stages) for every M, with and without splitting K; the
    dequantize-then-cuBLAS alternative; the gemv."""
    def tiles(t, split_below):
        def setup():
            gk.MATMUL_TILES, gk.SPLIT_BELOW = ((1 << 62, t),), split_below
        return setup, gk.matmul
    v = {f"BM{t[0]} BN{t[1]} w{t[2]} s{t[3]} split<{sb}": tiles(t, sb) for t in
         [(32, 64, 4, 4), (64, 64, 4, 4), (64, 128, 4, 4), (128, 64, 8, 3), (128, 128, 8, 3)]
         for sb in (0.0, 0.5, 1.0)}
    v["dequant+cuBLAS"] = (lambda: None, dequant_then_cublas)
    v["gk's own plans"] = (defaults, gk.matmul)
    return v


def summarize(label, model):
    print(f"\n== {label} ({model}: step ms = sum of shape medians x layers) ==")
    data = RESULTS[label]
    keys = sorted(data, key=lambda s: (s.split("|")[1], int(s.split("|")[2]), s))
    for key in keys:
        print(f"  {key:34s} {step_ms(data[key], model):8.4f}   " +
              " ".join(f"{s}:{t:7.2f}" for s, t in data[key].items()), flush=True)


def main():
    if not torch.cuda.is_available():
        sys.exit("GPU only")
    gen = torch.Generator(device=DEV).manual_seed(0)
    begin = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    # the copy ceiling: 1 GiB read + 1 GiB written
    a = torch.empty(2**29, device=DEV, dtype=torch.float16).normal_()
    b = torch.empty_like(a)
    t = median_us(torch.Tensor.copy_, [(b, a)])
    RESULTS["copy_TBps"] = 2 * a.numel() * 2 / t / 1e6
    print(f"copy: {RESULTS['copy_TBps']:.2f} TB/s", flush=True)
    del a, b
    path = os.path.join(os.environ.get("OUT", "."), "quantized_gpu_kernels.json")
    # what to run, in this order. On the H200 (first call): the table took 21 s with its
    # compiles; the gemv and crossover sweeps about two minutes together; tiles is the longest
    # (15 tile/split variants x 3 formats x 3 row counts): give it a call of its own.
    stages = sys.argv[1:] or ["table", "gemv", "crossover"]
    for stage in stages:
        if stage == "table":
            for model in MODELS:
                table(model, gen)
            print_table()
        elif stage == "gemv":
            sweep("Qwen3-0.6B", gen, (1,), gemv_variants(), FORMATS, "gemv plans, M=1")
            summarize("gemv plans, M=1", "Qwen3-0.6B")
        elif stage == "crossover":
            sweep("Qwen3-0.6B", gen, (4, 6, 8, 16),
                  {"gemv": (lambda: None, gk.gemv), "matmul": (lambda: None, gk.matmul)},
                  FORMATS, "gemv vs matmul")
            summarize("gemv vs matmul", "Qwen3-0.6B")
        elif stage == "tiles":
            sweep("Qwen3-0.6B", gen, (16, 64, 256), matmul_variants(), FORMATS, "matmul tiles")
            summarize("matmul tiles", "Qwen3-0.6B")
        else:
            sys.exit(f"unknown stage {stage}: table, gemv, crossover or tiles")
        print(f"[{stage} done at {time.time() - begin:.0f} s]", flush=True)
        with open(path, "w") as f:
            json.dump(RESULTS, f, indent=1)
    if "table" in stages:
        print_steps()


def print_table():
    for model in MODELS:
        data = RESULTS["table"][model]
        print(f"\n== {model}: us per call (median), bf16 F.linear vs gk.linear ==")
        for m in ROWS:
            for name, row in data[str(m)].items():
                print(f"  M={m:<3d} {name:8s} bf16 {row['bf16']:8.2f} "
                      f"({row['bf16_GBps']:5.0f} GB/s)" +
                      "".join(f"  {f} {row[f]:8.2f} ({row[f + '_GBps']:5.0f} GB/s)"
                              for f in FORMATS), flush=True)


def print_steps():
    print("\n== decode-step matmuls, ms (sum over layers + LM head) ==")
    for model in MODELS:
        for m in ROWS:
            per = {f: step_ms({s: r[f] for s, r in RESULTS['table'][model][str(m)].items()},
                              model) for f in ("bf16",) + FORMATS}
            print(f"  {model:13s} M={m:<3d} " + "  ".join(f"{f} {t:.4f}" for f, t in per.items()))

if __name__ == "__main__":
    main()
