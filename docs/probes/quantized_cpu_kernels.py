"""v18's CPU product (torchlet_q::linear) against F.linear in float32 and bfloat16, on
SmolLM2-135M's shapes: q/o [576, 576], k/v [192, 576], gate|up [3072, 576], down [576, 1536],
the LM head [49152, 576]; 1, 4 and 16 rows of x; at 1 and 2 threads.

Timing: each variant cycles through enough copies of its weight to read at least 64 MB (twice
this machine's L3), as a decode step reads 30 layers' weights that no cache holds; microseconds
per product, the median of 7 repeats of at least 20 ms each, the variants taking turns within
each repeat (this machine's 2 cores are shared; a neighbour's load then slows all alike). A cell reads "us (speedup over
float32, GB/s of weight read)"; a format's bytes are its storages' (q, scales, zeros, mins).

    PYTHONPATH=. python docs/probes/quantized_cpu_kernels.py"""
import statistics
import time

import torch
import torch.nn.functional as F

from implementations.v18_quantized_weights import cpu_kernels
from torchlet.contract.quantized import QuantizedTensor

SHAPES = [("q/o", 576, 576), ("k/v", 192, 576), ("gate|up", 3072, 576), ("down", 576, 1536),
          ("lm_head", 49152, 576)]
BATCHES, THREADS, FOOTPRINT = (1, 4, 16), (1, 2), 64 << 20


def quantized(gen, rows, cols, bits, group, zeros=None, mins=False):
    g = cols // group
    q = (torch.randint(-128, 128, (rows, cols), generator=gen, dtype=torch.int8) if bits == 8
         else torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8))
    z = torch.full((rows, g), zeros, dtype=torch.uint8) if zeros is not None else None
    m = (torch.randn(rows, g, generator=gen) * 0.01).half() if mins else None
    return QuantizedTensor(bits, q, (torch.rand(rows, g, generator=gen) * 0.01).half(), group,
                           z, m)


def variants(gen, n, k):
    """name -> (make one weight, product, bytes of one weight)"""
    def dense(dtype):
        return (lambda: torch.randn(n, k, generator=gen).to(dtype),
                lambda x, w: F.linear(x.to(w.dtype), w), n * k * dtype.itemsize)

    def quant(*fmt):
        return (lambda: quantized(gen, n, k, *fmt), cpu_kernels.linear,
                quantized(gen, n, k, *fmt).nbytes)
    return {"float32": dense(torch.float32), "bf16": dense(torch.bfloat16),
            "Q4_1": quant(4, 32, None, True), "Q8_0": quant(8, 32),
            "int8/ch": quant(8, k), "int4 g64": quant(4, 64, 8)}


def calls_for(fn, x, weights):
    """Products per repeat: every copy at least once, and at least 20 ms."""
    fn(x, weights[0])
    t = time.perf_counter()
    for w in weights:
        fn(x, w)
    return len(weights) * max(1, int(0.02 / (time.perf_counter() - t)))


def us_per_product(fn, x, weights, calls):
    t = time.perf_counter()
    for i in range(calls):
        fn(x, weights[i % len(weights)])
    return (time.perf_counter() - t) / calls * 1e6


def main():
    assert cpu_kernels.available(), cpu_kernels.build_error
    gen = torch.Generator().manual_seed(0)
    results = {}  # (threads, shape, m) -> {variant: (us, bytes)}
    for name, n, k in SHAPES:
        made = {v: ([make() for _ in range(-(-FOOTPRINT // nbytes))], fn, nbytes)
                for v, (make, fn, nbytes) in variants(gen, n, k).items()}
        for threads in THREADS:
            torch.set_num_threads(threads)
            for m in BATCHES:
                x = torch.randn(m, k, generator=gen)
                calls = {v: calls_for(fn, x, ws) for v, (ws, fn, _) in made.items()}
                times = {v: [] for v in made}
                for _ in range(7):  # variants take turns, so a load from elsewhere hits them alike
                    for v, (ws, fn, _) in made.items():
                        times[v].append(us_per_product(fn, x, ws, calls[v]))
                results[(threads, name, m)] = {v: (statistics.median(times[v]), made[v][2])
                                               for v in made}
        del made
    names = list(variants(gen, 1, 64))
    for threads in THREADS:
        print(f"\n{threads} thread{'s' * (threads > 1)}: us per product (x float32, GB/s)\n")
        print("| shape | M | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for name, n, k in SHAPES:
            for m in BATCHES:
                r = results[(threads, name, m)]
                base = r["float32"][0]
                cells = [f"{us:.0f} ({base / us:.2f}x, {b / us / 1e3:.0f})" for us, b in
                         (r[v] for v in names)]
                print(f"| {name} [{n}, {k}] | {m} | " + " | ".join(cells) + " |")
    print("\nbytes per weight matrix: " + ", ".join(
        f"{name} " + "/".join(f"{b / 1e6:.2f}" for _, b in results[(1, name, 1)].values())
        for name, _, _ in SHAPES) + " MB (" + "/".join(names) + ")")


if __name__ == "__main__":
    main()
