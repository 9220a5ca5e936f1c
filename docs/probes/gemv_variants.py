"""A batch-1 decode step's projections: cuBLAS (F.linear; for down, swiglu_packed then F.linear,
v13's path before its gemv) against v13's gemv under its own plan and under others, on
Qwen2.5-0.5B's shapes in bfloat16 (issue 30: batch 1's 97 GEMMs took 0.654 ms, the weights'
read 0.23 ms of it at 4.3 TB/s).

Timing: one CUDA graph of 24 calls, each on its own copy of the weights (as a step's 24 layers
read theirs, so no call finds its weights in L2), replayed; us per call. A variant is v13's gemv
with gemv.plan replaced, its output checked against F.linear's first. What varies: the block of
weight rows and of columns a program reads, and the split of k over programs (a second launch
sums). Prints one line per shape: cuBLAS, v13's own plan, the four fastest others. (An earlier
form of this probe also timed 4 and 16 rows, with tensor cores: docs/perf-notes.md.) GPU
only."""
import itertools

import torch

import implementations

gemv = implementations.load("v13_fused").package.gemv
swiglu_packed = implementations.load("v13_fused").package.fused_kernels.swiglu_packed
device, dtype, LAYERS = "cuda", torch.bfloat16, 24
# name, weight rows n, k, bias, swiglu (Qwen2.5-0.5B: hidden 896, 14 + 2 x 2 heads of 64,
# intermediate 4864, vocabulary 151936)
SHAPES = [("qkv", 1152, 896, True, False), ("o", 896, 896, False, False),
          ("gate_up", 9728, 896, False, False), ("down", 896, 4864, False, True),
          ("lm_head", 151936, 896, False, False)]


def graph_us(fn, calls):
    fn(*calls[0])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            fn(*c)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (5 * len(calls)) * 1e3


def plans():
    return list(itertools.product((4, 8, 16), (256, 512, 1024), (1, 2, 4, 8)))


def label(p) -> str:
    return f"N{p[0]} K{p[1]} split{p[2]}"


def time_plans(variants, run, calls, want, err):
    """Each (label, plan function) of variants in gemv.plan's place: run's output (the first of a
    tuple) checked against want within 4x err, then timed as graph_us(run, calls). -> [(us,
    label)], fastest first; a wrong or failing plan (out of registers or shared memory) inf."""
    own, timed = gemv.plan, []
    for lab, plan in variants:
        gemv.plan = plan
        try:
            out = run(*calls[0])
            out = out[0] if isinstance(out, tuple) else out
            if (out.float() - want).abs().max().item() > 4 * err + 0.05:
                timed.append((float("inf"), f"{lab} WRONG"))
                continue
            timed.append((graph_us(run, calls), lab))
        except Exception as e:  # noqa: BLE001
            timed.append((float("inf"), f"{lab} {type(e).__name__}"))
        finally:
            gemv.plan = own
    return sorted(timed)


def main():
    torch.manual_seed(0)
    own = gemv.plan
    for name, n, k, has_bias, swiglu in SHAPES:
        copies = 2 if name == "lm_head" else LAYERS
        ws = [torch.randn(n, k, device=device, dtype=dtype) * 0.05 for _ in range(copies)]
        bias = torch.randn(n, device=device, dtype=dtype) if has_bias else None
        calls = [(w,) for w in ws]
        x = torch.randn(1, k * (2 if swiglu else 1), device=device, dtype=dtype)

        def cublas(w):
            return torch.nn.functional.linear(swiglu_packed(x) if swiglu else x, w, bias)

        def mine(w):
            return gemv.gemv(x, w, bias, swiglu=swiglu)

        want = cublas(ws[0]).float()
        err = (mine(ws[0]).float() - want).abs().max().item()
        line = [f"{name:8s} floor {n * k * 2 / 4.3e12 * 1e6:6.2f} us",
                f"cublas {graph_us(cublas, calls):6.2f}",
                f"v13 {graph_us(mine, calls):6.2f} ({label(own(n, k, True))}, err {err:.3f})"]
        timed = time_plans([(label(p), lambda *_, p=p: p) for p in plans()], mine, calls,
                           want, err)
        line.append("best " + ", ".join(f"{lab} {us:.2f}" for us, lab in timed[:4]))
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
