"""What a verifying pass costs (v17), against a plain decode step of the same version with
speculative_tokens=0, at batch 1 and 8, context 128 (or --context N): the bench's verify-cost
measure, which needs no trained weights (acceptance does; `torchlet bench speculative` measures
that on the default model). Random weights of the Qwen2.5-0.5B shape in bf16 on a GPU (of
SmolLM2-135M's with --smollm2, the model bench speculative runs), of the CPU benchmark model in
float32 with --cpu.

Each engine's requests take a prompt of `context` random tokens; a proposer that always guesses
k tokens (the last one repeated) runs STEPS steps after WARMUP, timed from outside, every request
running throughout: a step's cost is one verifying pass of k + 1 rows a request, whatever it
keeps. Also the n-gram proposer's own cost: one propose() of 8 guesses over 8 sequences of
`context` tokens, against the plain step. On a GPU, then, batch 1's step at k = 0 and at k = 4
under the torch profiler: its kernels' time against its wall time, and its top kernels.

    PYTHONPATH=. python docs/probes/verify_cost.py [--context N] [--cpu] [--smollm2] [--no-graphs]
        [--batch-invariant]
"""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--context", type=int, default=128)
parser.add_argument("--cpu", action="store_true")
parser.add_argument("--smollm2", action="store_true",
                    help="random weights of SmolLM2-135M's shape (the default model, which bench "
                         "speculative runs) instead of Qwen2.5-0.5B's")
parser.add_argument("--no-graphs", action="store_true",
                    help="use_graphs=False: a verifying pass is a slice pass, its LM head and "
                         "draws eager (what torchlet generate runs on a CPU)")
parser.add_argument("--batch-invariant", action="store_true",
                    help="every engine (k = 0's too) built with batch_invariant=True: what v17's "
                         "exact-in-bfloat16 mode costs a step and a pass")
args = parser.parse_args()
if args.cpu:
    os.environ["TRITON_INTERPRET"] = "0"  # the layers read it per call: their PyTorch path

import torch  # noqa: E402

import implementations  # noqa: E402
from torchlet.bench.workloads import CPU_MODEL, QWEN25_05B, random_checkpoint  # noqa: E402
from torchlet.contract import SPECULATIVE, GenerationParams, ModelConfig  # noqa: E402

STEPS, WARMUP = 40, 10
device, dtype = ("cpu", torch.float32) if args.cpu else ("cuda", torch.bfloat16)
if args.cpu:
    torch.set_num_threads(1)
SMOLLM2_135M = ModelConfig(  # its converted GGUF's config.json
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
    num_kv_heads=3, head_dim=64, max_position=8192, rope_theta=100000.0, rms_eps=1e-5,
    tie_embeddings=True, family="llama")
config = SMOLLM2_135M if args.smollm2 else CPU_MODEL if args.cpu else QWEN25_05B
version = [v for v in implementations.discover() if SPECULATIVE in v.capabilities][-1]
checkpoint = random_checkpoint(config, 0, device=device, dtype=dtype)


class Always:
    """k guesses every step: the request's last token, repeated."""

    def propose(self, requests, k):
        return [[r.sequence[-1]] * k for r in requests]


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def warmed(batch: int, k: int):
    """An engine of `batch` requests past WARMUP steps, every request running for STEPS more
    (room for every guess kept)."""
    new = (STEPS + WARMUP) * (k + 1) + 8
    engine = version.build(checkpoint, device=device, dtype=dtype, speculative_tokens=k,
                           proposer=Always(), max_lanes=max(batch, 8), prefix_cache=False,
                           use_graphs=not args.no_graphs, batch_invariant=args.batch_invariant,
                           max_model_len=args.context + new + 16)
    g = torch.Generator().manual_seed(batch)
    for _ in range(batch):
        prompt = torch.randint(3, config.vocab_size, (args.context,), generator=g).tolist()
        engine.add_request(prompt, GenerationParams(max_new_tokens=new))
    for _ in range(WARMUP):
        engine.step()
    sync()
    return engine


def ms_per_step(batch: int, k: int) -> float:
    engine = warmed(batch, k)
    start = time.perf_counter()
    for _ in range(STEPS):
        engine.step()
    sync()
    return (time.perf_counter() - start) * 1000 / STEPS


print(f"{version.name} on {device}, {dtype}, context {args.context}: ms a step "
      f"(median of 3), and against k = 0")
for batch in (1, 8):
    base = None
    for k in (0, 2, 4, 8):
        runs = sorted(ms_per_step(batch, k) for _ in range(3))
        base = base or runs[1]
        print(f"batch {batch:2d}  k {k}: {runs[1]:8.3f} ms  {runs[1] / base:5.2f}x")

proposer = version.package.NgramProposer(3)


class Row:
    def __init__(self, sequence):
        self.sequence = sequence


g = torch.Generator().manual_seed(1)
rows = [Row(torch.randint(3, 50, (args.context,), generator=g).tolist()) for _ in range(8)]
start = time.perf_counter()
for _ in range(20):
    proposer.propose(rows, 8)
print(f"n-gram proposer, 8 sequences of {args.context} tokens, 8 guesses: "
      f"{(time.perf_counter() - start) * 1000 / 20:.3f} ms a call")

if device == "cuda":
    from torchlet.bench.micro import device_profile
    for k in (0, 4):
        engine = warmed(1, k)
        found = device_profile(lambda: [engine.step() for _ in range(10)], 10, top=6)
        print(f"batch 1, k {k}: {found.get('profiled_ms_per_step', 0):.3f} ms a step profiled, "
              f"{found.get('gpu_ms_per_step', 0):.3f} ms of kernels, "
              f"{found.get('kernels_per_step', 0):.0f} kernels; host blocked "
              f"{found.get('host_wait_ms_per_step', 0):.3f} ms")
        for name, ms, n in found.get("top_kernels", []):
            print(f"    {ms:.4f} ms  x{n:<6}  {name}")
