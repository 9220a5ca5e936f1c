"""`torchlet bench anchors`: what one decode step could cost, measured beside what it costs.

Three anchors per cell of batch x context, on the decode bench's shapes:
- the step's matmuls alone: every GEMM of one decode step (per layer q/k/v, o, gate/up, down,
  then the LM head) through torch's matmul, replayed as one CUDA graph;
- a plain-PyTorch static-cache step in the style of gpt-fast (static_step.py), compiled and
  replayed as one CUDA graph;
- the floor: the bytes the step must read over the bandwidth (floor.step_bytes).
On a CPU both run eagerly (no compile, no graph), a check that they run, not a figure.
"""
from __future__ import annotations

import time

import torch

from torchlet.contract import TorchletError

from .drive import sync
from .floor import physical_floor, step_bytes
from .micro import device_profile
from .static_step import StaticModel

PROFILED = 5  # steps under the profiler, for the GPU's own time and the kernels launched


def anchor_cell(checkpoint, batch: int, context: int, *, device: str, dtype, bandwidth: float,
                compile_mode: str = "default", steps: int = 20, warmup: int = 5) -> dict:
    """The three anchors of one cell. Every request sits at position `context` and each step
    decodes it there again (its token fed back), so each attends over context + 1 tokens and
    the cache never outgrows context + 1 (rounded up to 16: SDPA's masked kernels want that)."""
    config = checkpoint.config
    if context + 1 > config.max_position:
        raise TorchletError(f"context {context} + 1 exceeds the model's {config.max_position} "
                            f"positions")
    cuda = device.startswith("cuda")
    if cuda and compile_mode != "none":
        import torch._dynamo as dynamo
        dynamo.reset()  # each cell's shapes compile afresh, not against a recompile limit
    row = measure(checkpoint, batch, context, device, dtype, compile_mode, steps, warmup)
    if cuda:
        torch.cuda.empty_cache()  # the cell's model, caches and graphs are gone: give them back
    moved = step_bytes(config, batch, context, dtype.itemsize)
    return {**row, "bytes_per_step": moved, "floor_ms": 1e3 * moved / bandwidth}


@torch.inference_mode()
def measure(checkpoint, batch, context, device, dtype, compile_mode, steps, warmup) -> dict:
    cuda = device.startswith("cuda")
    model = StaticModel(checkpoint, batch, -(-(context + 1) // 16) * 16, device, dtype)
    for cache in model.k_cache + model.v_cache:
        cache.normal_()  # the context's K/V: what a step reads, whatever its values
    tokens = torch.randint(checkpoint.config.vocab_size, (batch,), device=device)
    positions = torch.full((batch,), context, device=device)

    def step():
        tokens.copy_(model.step(tokens, positions))

    matmuls = capture(model.matmuls()) if cuda else model.matmuls()
    static, how, note = timed_step(model, step, cuda, compile_mode)
    row = {"batch": batch, "context": context, "gemms_per_step": 4 * len(model.layers) + 1,
           "matmuls_ms": per_step_ms(matmuls, device, steps, warmup),
           "static_ms": per_step_ms(static, device, steps, warmup), "static_timed": how}
    if note:
        row["static_note"] = note
    if cuda:
        mm, st = (device_profile(lambda f=f: [f() for _ in range(PROFILED)], PROFILED)
                  for f in (matmuls, static))
        row.update(matmuls_gpu_ms=mm.get("gpu_ms_per_step"),
                   static_gpu_ms=st.get("gpu_ms_per_step"),
                   static_kernels=st.get("kernels_per_step"))
    return row


def timed_step(model: StaticModel, step, cuda: bool, compile_mode: str):
    """The step as it is timed, how, and why not as asked (or None). On a GPU: compiled and
    captured; if compiling fails, captured eagerly, with the failure as the note."""
    if not cuda:
        return step, "eager", None
    note = None
    if compile_mode != "none":
        try:
            model.compile(compile_mode)
            return capture(step), f"compile ({compile_mode}) + graph", None
        except Exception as e:  # noqa: BLE001  (the anchor still stands, uncompiled, and says so)
            first = (str(e).splitlines() or [""])[0]
            note = f"compile failed: {type(e).__name__}: {first[:160]}"
            model.layer_fn, model.head_fn = model.layer, model.head
            torch._dynamo.reset()
    return capture(step), "graph", note


def capture(fn):
    """fn captured as one CUDA graph, after two runs on a side stream (compilation, cuBLAS
    workspaces and the allocator's first blocks stay out of the capture): its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()

    def replay():
        graph.replay()
    # The graph reads fn's inputs (the matmuls' x, the step's tokens) at their addresses, and
    # only fn holds them: freed, a replay reads whatever the allocator put there (an illegal
    # address on the H200 at batch 256).
    replay.reads = fn
    return replay


def per_step_ms(fn, device: str, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    sync(device)
    return (time.perf_counter() - start) * 1e3 / steps


def workload_cell(workload, config) -> tuple[int, int]:
    """The workload's average decode step: requests decoding per decode pass, and the context
    each attends over, from the same counts as the floor's."""
    decode_rows = sum(n - 1 for n in workload.output_lens)
    floor = physical_floor(config, workload)
    return round(decode_rows / floor.decode_passes), round(floor.kv_tokens_read / decode_rows)


def workload_anchor_lines(anchor: dict, rows: list[dict]) -> list[str]:
    """The anchors beside the workload's table, against each version's pure decode steps."""
    where = f"batch {anchor['batch']}, context {anchor['context']}"
    if "error" in anchor:
        return [f"Anchors at this workload's average decode step ({where}): failed: "
                f"{anchor['error']}"]
    out = [f"Anchors at this workload's average decode step ({where}), in the same run: "
           f"matmuls alone {anchor['matmuls_ms']:.3f} ms, gpt-fast-style static-cache step "
           f"{anchor['static_ms']:.3f} ms ({anchor['static_timed']}), floor "
           f"{anchor['floor_ms']:.3f} ms."]
    for r in rows:
        steps = (r.get("steps") or 0) - (r.get("prefill_steps") or 0)
        if "error" not in r and r.get("decode_step_s") is not None and steps:
            out.append(f"- {r['version']}: {steps:,} pure decode steps, "
                       f"{1e3 * r['decode_step_s'] / steps:.3f} ms each on average.")
    return out


def anchor_summary(row: dict) -> str:
    where = f"anchors B={row['batch']} ctx={row['context']}"
    if "error" in row:
        return f"{where}: failed: {row['error']}"
    return (f"{where}: matmuls alone {row['matmuls_ms']:.3f} ms, static-cache step "
            f"{row['static_ms']:.3f} ms ({row['static_timed']}), floor {row['floor_ms']:.3f} ms"
            + (f"; {row['static_note']}" if row.get("static_note") else ""))


def anchor_columns(anchor: dict) -> dict:
    """What a decode row takes of its cell's anchors: their times, or why there are none."""
    if "error" in anchor:
        return {"anchors_error": anchor["error"]}
    return {k: v for k, v in anchor.items() if k not in ("batch", "context", "bytes_per_step")}
