"""Is nano-vllm's workload bound by the host? `torchlet bench gpu-workload`'s run of the newest
version (a fresh engine each run, built and warmed up as the bench does), with its host's work
changed, alternating over rounds in one process:

- as it is;
- `+H ms`: each step() followed by H ms of busy host work. Where the GPU is the bound, the
  step launched ahead absorbs it and the wall time barely moves; where the host is, it grows
  by about H ms a step;
- `outputs share tokens`: `Request.output()` hands out the request's own token list instead of
  a copy (wrong for callers that keep outputs, harmless to the bench, which only reads their
  lengths): what copying every running request's tokens at every step costs.

Prints each run's wall and decode-step seconds, then each variant's median. GPU only.

    PYTHONPATH=. python3 docs/probes/workload_host.py [ROUNDS] [H_MS]
"""
import statistics
import sys
import time

import implementations
import torchlet.bench.run as run_module
from torchlet.bench import drive
from torchlet.bench.run import Job, ModelSpec, run_job
from torchlet.bench.workloads import QWEN25_05B, nano_vllm_workload
from torchlet.contract import MAX_RUNNING, MAX_STEP_TOKENS, RequestOutput

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
extra_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3
newest = implementations.version_names()[-1]
workload = nano_vllm_workload()
job = Job(newest, None, ModelSpec(config=QWEN25_05B, seed=0), workload, "cuda", "bfloat16",
          wishes={MAX_RUNNING: workload.num_requests, MAX_STEP_TOKENS: None}, progress=False)
request_class = implementations.load("v03_request_states").package.Request
copying_output = request_class.output
real_run_steps = drive.run_steps


def shared_output(self):
    return RequestOutput(self.id, self.shown_prompt, self.tokens, self.state,
                         self.finish_reason, self.described_error)


def slower_host(engine, *args):
    step = engine.step

    def step_then_work():
        outputs = step()
        until = time.perf_counter() + extra_ms / 1e3
        while time.perf_counter() < until:
            pass
        return outputs
    engine.step = step_then_work
    return real_run_steps(engine, *args)


VARIANTS = {"as it is": {}, f"+{extra_ms} ms a step": {"run_steps": slower_host},
            "outputs share tokens": {"output": shared_output}}
results = {name: [] for name in VARIANTS}
for _ in range(rounds):
    for name, patch in VARIANTS.items():
        run_module.run_steps = patch.get("run_steps", real_run_steps)
        request_class.output = patch.get("output", copying_output)
        row = run_job(job)
        results[name].append(row)
        print(f"{name:24s} wall {row['wall_s']:.3f} s, decode steps {row['decode_step_s']:.3f} s "
              f"({row['steps']} steps), host CPU {row['cpu_s']:.3f} s", flush=True)
run_module.run_steps, request_class.output = real_run_steps, copying_output
for name, rows in results.items():
    print(f"{name:24s} median wall {statistics.median(r['wall_s'] for r in rows):.3f} s, "
          f"decode steps {statistics.median(r['decode_step_s'] for r in rows):.3f} s")
