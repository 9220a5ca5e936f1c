"""Where the host's time goes in the two GPU steps whose targets are host-bound: a verifying
pass (v17, k = 4 guesses at batch 1, context 128, random weights of the Qwen2.5-0.5B shape in
bf16, a proposer that always guesses: verify_cost.py's setting) and a constrained decode step
(v19 at batch 64, bench structured's schema and prompts on the model dir it is given, made by
serve_model_dir.py). Each: warmed up, then (verify) STEPS steps timed plainly (ms a step),
then STEPS more under cProfile, the top functions by own time and by cumulative time. GPU only.

    PYTHONPATH=. python docs/probes/host_profile.py verify|structured [MODEL_DIR] [--batch B]
"""
import argparse
import cProfile
import io
import pstats
import time

import torch

import implementations
from torchlet.contract import SPECULATIVE, STRUCTURED_OUTPUT, GenerationParams

STEPS = 40
parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=("verify", "structured"))
parser.add_argument("model_dir", nargs="?", default="/tmp/qwdir")
parser.add_argument("--batch", type=int, default=None)
parser.add_argument("--top", type=int, default=28)
args = parser.parse_args()


def newest(capability):
    return [v for v in implementations.discover() if capability in v.capabilities][-1]


def timed_and_profiled(step, label, timed=True):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    if timed:
        start = time.perf_counter()
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        print(f"{label}: {(time.perf_counter() - start) * 1e3 / STEPS:.3f} ms a step, "
              f"{STEPS} steps", flush=True)
    start = time.perf_counter()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(STEPS):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    print(f"{label}: {(time.perf_counter() - start) * 1e3 / STEPS:.3f} ms a step profiled")
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(args.top)
        body = text.getvalue()
        print(f"--- {label}, by {key} (per {STEPS} steps) ---")
        print(body[body.find("ncalls"):], flush=True)


if args.mode == "verify":
    from torchlet.bench.workloads import QWEN25_05B, random_checkpoint
    version = newest(SPECULATIVE)
    checkpoint = random_checkpoint(QWEN25_05B, 0, device="cuda", dtype=torch.bfloat16)

    class Always:
        def propose(self, requests, k):
            return [[r.sequence[-1]] * k for r in requests]

    batch = args.batch or 1
    for k in (0, 4):
        new = (3 * STEPS + 10) * (k + 1) + 8
        engine = version.build(checkpoint, device="cuda", dtype=torch.bfloat16,
                               speculative_tokens=k, proposer=Always(), max_lanes=max(batch, 8),
                               prefix_cache=False, max_model_len=128 + new + 16)
        g = torch.Generator().manual_seed(batch)
        for _ in range(batch):
            prompt = torch.randint(3, QWEN25_05B.vocab_size, (128,), generator=g).tolist()
            engine.add_request(prompt, GenerationParams(max_new_tokens=new))
        timed_and_profiled(engine.step, f"{version.name} batch {batch} k {k}")
else:
    from torchlet.bench.structured import PROMPTS, SCHEMA, Constrained
    from torchlet.checkpoints import load_hf_dir
    from torchlet.engines import build_sized
    from torchlet.grammar import Compiler, Constraint
    from torchlet.running import serving_options
    from torchlet.text import load_tokenizer, prompt_ids, stop_ids
    version = newest(STRUCTURED_OUTPUT)
    checkpoint = load_hf_dir(args.model_dir, quantized=True)
    tokenizer = load_tokenizer(args.model_dir)
    eos = stop_ids(tokenizer, checkpoint.config.eos_token_ids)
    grammar = Compiler.for_tokenizer(tokenizer, checkpoint.config.vocab_size, eos).compile(
        Constraint.json_schema(SCHEMA))
    batch = args.batch or 64
    ids = [tuple(prompt_ids(tokenizer, p)) for p in PROMPTS]
    prompts = tuple(ids[i % len(ids)] for i in range(batch))
    n = 4 * STEPS + 40
    engine = build_sized(version, checkpoint, device="cuda", dtype=torch.bfloat16,
                         max_model_len=max(map(len, ids)) + n, max_running=batch,
                         **serving_options(version, "cuda"))
    # the answers of this model dir's random weights end after about 50 tokens: the profile
    # takes 40 steps after 3, all of them at the full batch (bench structured times both runs)
    work = Constrained("json", prompts, (n,) * batch, grammar=grammar, eos=eos)
    for i, p in enumerate(prompts):
        engine.add_request(list(p), work.params(i))
    engine.step()  # the prefill
    timed_and_profiled(engine.step, f"{version.name} batch {batch} json schema", timed=False)
    print(f"running after the profile: {len(engine.last_step_stats().decode_ids)} of {batch}")
