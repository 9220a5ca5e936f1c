"""Host time per scheduled request in a decode step of the newest version (or VERSION), measured
from outside its step: the decode bench's own cells (torchlet.bench.micro.decode_step_bench) at
batch 1, 64 and 256, context 1024 (or --context N), on the Qwen2.5-0.5B shape in bf16.

Per step: its wall time; the GPU's kernel time (torch profiler); the time no kernel ran (wall -
kernels: what the step could still win by hiding the host); and the host's own time: the
profiled steps' wall time less the time the host sat blocked in CUDA synchronize and copy calls
(the profiler's own cost is in it: an upper bound). The last two also per request of the step.

`--cpu`: the CPU benchmark model at batch 1 and 4, context 32, Triton layers on their PyTorch
path: a check that the script runs, with no GPU columns.

    PYTHONPATH=. python docs/probes/host_per_request.py [VERSION] [--context N] [--cpu]
"""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("version", nargs="?", default=None)
parser.add_argument("--context", type=int, default=None)
parser.add_argument("--cpu", action="store_true")
args = parser.parse_args()
if args.cpu:
    os.environ["TRITON_INTERPRET"] = "0"  # the layers read it per call: their PyTorch path

import torch  # noqa: E402

import implementations  # noqa: E402
from torchlet.bench.micro import decode_step_bench  # noqa: E402
from torchlet.bench.workloads import CPU_MODEL, QWEN25_05B, random_checkpoint  # noqa: E402
from torchlet.contract import MAX_STEP_TOKENS, REQUEST_STATES  # noqa: E402

device, dtype = ("cpu", torch.float32) if args.cpu else ("cuda", torch.bfloat16)
if args.cpu:
    torch.set_num_threads(1)
config = CPU_MODEL if args.cpu else QWEN25_05B
context = args.context or (32 if args.cpu else 1024)
batches = (1, 4) if args.cpu else (1, 64, 256)
if args.version:
    version = implementations.load(args.version)
else:
    version = [v for v in implementations.discover() if hasattr(v.package, "build")
               and REQUEST_STATES in v.capabilities][-1]
checkpoint = random_checkpoint(config, 0, device=device, dtype=dtype)


def ms(value, per=1):
    return "n/a" if value is None else f"{value / per:.3f}"


print(f"{version.name}, context {context}, {device}; ms per decode step (per request: / batch)")
print("batch  wall  wall/req  kernels  no kernel  no kernel/req  host  host/req  host waits")
for batch in batches:
    row = decode_step_bench(version, checkpoint, batch, context, device=device, dtype=dtype,
                            wishes={MAX_STEP_TOKENS: 16384}, steps=20, warmup=5,
                            bandwidth=4.3e12)
    idle = row["host_ms_per_step"]
    waits, profiled = row.get("host_wait_ms_per_step"), row.get("profiled_ms_per_step")
    host = None if waits is None else profiled - waits
    print(f"{batch:5d}  {ms(row['ms_per_step'])}  {ms(row['ms_per_step'], batch)}  "
          f"{ms(row['gpu_ms_per_step'])}  {ms(idle)}  "
          f"{ms(idle, batch)}  {ms(host)}  {ms(host, batch)}  {ms(waits)}")
