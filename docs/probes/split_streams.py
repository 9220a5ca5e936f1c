"""Would a many-row decode step go faster as independent parts on concurrent streams? At 256 rows
a step's products are cuBLAS GEMMs of a few dozen tiles, which take ~4 us a launch whatever
their rows (docs/perf-notes.md, "A Triton GEMM for a decode step's many rows") and leave most
SMs idle, while the paged attention is bound by the memory. The rows of a decode step are
independent until the sampler, so the newest version's step (its runner's decode_step: the
layers and the LM head, no draw) split into k parts of B/k rows, each part's layers on a stream
of its own, lets one part's products run beside another's attention.

For each batch B (contexts of CONTEXT tokens, pages in the engine's order) and k in 1, 2, 4:
one CUDA graph of the step (k streams forked from the capture stream and joined back), replayed
REPLAYS times back to back, median of 5 timings: ms a step; and the largest difference of the
logits from k = 1's (a GEMM of other rows may sum in another order: not bits). GPU only.

    PYTHONPATH=. python3 docs/probes/split_streams.py [CONTEXT]
"""
import statistics
import sys

import torch

import implementations
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint
from torchlet.contract import GenerationParams

CONTEXT = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
BATCHES, SPLITS, REPLAYS = (256, 160, 128), (1, 2, 4), 20
device, dtype = "cuda", torch.bfloat16
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
newest = implementations.version_names()[-1]
engine = implementations.load(newest).build(ckpt, device=device, dtype=dtype, max_running=256,
                                            max_step_tokens=16384, max_model_len=2048)
for i in range(max(BATCHES)):
    engine.add_request([1000 + (i * 7 + j) % 50000 for j in range(CONTEXT)],
                       GenerationParams(max_new_tokens=64, ignore_eos=True))
for _ in range(40):  # the prefills, then decode steps: every lane holds a live request
    engine.step()
torch.cuda.synchronize()
runner = engine.runner
inputs = runner.inputs.tensors


def step(batch: int, k: int):
    """The step over lanes [0, batch) as k parts on k streams; logits [batch, vocab]."""
    rows = batch // k
    main = torch.cuda.current_stream()
    parts = []
    for p, stream in enumerate(streams[:k]):
        stream.wait_stream(main)
        with torch.cuda.stream(stream):
            parts.append(runner.decode_step(*(t[p * rows:(p + 1) * rows] for t in inputs)))
    for stream in streams[:k]:
        main.wait_stream(stream)
    return parts[0] if k == 1 else torch.cat(parts)


streams = [torch.cuda.Stream() for _ in range(max(SPLITS))]
print(f"{newest}, {torch.cuda.get_device_name()}, context {CONTEXT}: ms a step "
      f"(graph replayed {REPLAYS} times back to back, median of 5)")
pool = torch.cuda.graph_pool_handle()
with torch.inference_mode():
    for batch in BATCHES:
        reference = None
        for k in SPLITS:
            for _ in range(3):  # compile and warm the kernels of these shapes
                step(batch, k)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = step(batch, k)
            graph.replay()
            torch.cuda.synchronize()
            if reference is None:
                reference = logits.float().clone()
            diff = (logits.float() - reference).abs().max().item()
            times = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(REPLAYS):
                    graph.replay()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / REPLAYS)
            print(f"  B={batch:3d} k={k}: {statistics.median(times):.3f} ms "
                  f"(min {min(times):.3f}), logits max diff from k=1 {diff:.3g}", flush=True)
            del graph, logits
