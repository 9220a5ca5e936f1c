"""`torchlet bench structured`: what a JSON-schema constraint on every request costs a decode
step (v19), against the same requests with none.

One version, the newest with the structured_output capability unless --impl names one, on the
default model, built once. At each batch B, B chat prompts asking for a person as JSON run twice
through the step API, in turn: unconstrained (ignore_eos, --max-new-tokens each), then with
SCHEMA as every request's grammar (ending at eos once the JSON is complete, or at the limit).
A row gives the mean seconds of a decode step in which all B requests decode (no prompt
computed) in each run, their ratio, and how many constrained answers parse and validate against
the schema. A constrained step still launches the next decode ahead (v14), its constrained
rows drawn again once the host has the tokens, so on a GPU the ratio holds the fill not hidden
behind the GPU and the redraw."""
from __future__ import annotations

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from torchlet.contract import (QUANTIZED_WEIGHTS, STRUCTURED_OUTPUT, GenerationParams,
                               TorchletError)
from torchlet.running import (kernels_off, pick_version, resolve_device, resolve_dtype, run_mode,
                              serving_options, set_threads)

from .drive import warm_up
from .speculative import counts
from .workloads import Workload

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16},
                    "maxItems": 3},
    },
    "required": ["name", "age", "city", "hobbies"],
}
PROMPTS = (
    "Describe a made-up person as JSON with their name, age, city and hobbies.",
    "Invent a character for a story. Answer in JSON: name, age, city, hobbies.",
    "Give me a JSON record of a fictional teacher: name, age, city and hobbies.",
    "Make up a pen pal and describe them as JSON (name, age, city, hobbies).",
)


@dataclass(frozen=True)
class Constrained(Workload):
    """The workload, each request's grammar the schema's, ending at the model's eos."""

    grammar: Any = None
    eos: tuple[int, ...] = ()

    def params(self, i: int) -> GenerationParams:
        return GenerationParams(max_new_tokens=self.output_lens[i], eos_token_ids=self.eos,
                                grammar=self.grammar)


def valid(tokens: list[int], tokenizer, eos: tuple[int, ...]) -> bool:
    """Whether the answer parses and the schema accepts it (jsonschema where installed, the
    parse alone elsewhere)."""
    text = tokenizer.decode([t for t in tokens if t not in eos])
    try:
        answer = json.loads(text)
    except ValueError:
        return False
    try:
        import jsonschema
    except ImportError:
        return True
    try:
        jsonschema.validate(answer, SCHEMA)
    except jsonschema.ValidationError:
        return False
    return True


def full_steps(engine, workload: Workload, device: str) -> tuple[list[float], list]:
    """The workload through the step API: the seconds of each of its decode steps while every
    request decodes (the constrained answers end at different lengths, and a step of fewer
    rows costs less: only the full steps compare), and each request's tokens. A step's time
    runs from its start to its return, with no sync around it: a step that launched the next
    decode ahead returns while the GPU computes it, and the next step waits for it as a
    serving loop does, so the steps' times add up to the run's wall time."""
    from .drive import sync

    ids = [engine.add_request(list(p), workload.params(i)) for i, p in enumerate(workload.prompts)]
    times = []
    sync(device)
    while engine.has_unfinished():
        start = time.perf_counter()
        engine.step()
        took = time.perf_counter() - start
        stats = engine.last_step_stats()
        if stats.num_prefill_tokens == 0 and len(stats.decode_ids) == workload.num_requests:
            times.append(took)
    if not times:
        raise TorchletError("no decode step ran every request: raise --max-new-tokens")
    return times, [list(engine.output(i).tokens) for i in ids]


def measure(args, log) -> tuple[dict, str]:
    """The payload of structured.json and the device it ran on."""
    from torchlet.checkpoints import load_hf_dir
    from torchlet.engines import build_sized
    from torchlet.grammar import Compiler, Constraint
    from torchlet.text import load_tokenizer, prompt_ids, stop_ids

    from .main_job import load_model

    batches = counts(args.batches, "--batches", 1)
    if args.max_new_tokens < 1:
        raise TorchletError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    device = resolve_device(args.device)
    threads = set_threads(args.threads)
    version = pick_version(args.impl, args.impl_root, device, need=STRUCTURED_OUTPUT)
    if STRUCTURED_OUTPUT not in version.capabilities:
        raise TorchletError(f"{version.name} takes no grammar: bench structured needs a version "
                            f"with the {STRUCTURED_OUTPUT} capability (v19 and later)")
    model_dir, model_name = load_model(args)
    checkpoint = load_hf_dir(model_dir, quantized=QUANTIZED_WEIGHTS in version.capabilities)
    tokenizer = load_tokenizer(model_dir)
    eos = stop_ids(tokenizer, checkpoint.config.eos_token_ids)
    compiler = Compiler.for_tokenizer(tokenizer, checkpoint.config.vocab_size, eos)
    n, dtype = args.max_new_tokens, resolve_dtype(args.dtype, device)
    ids = [tuple(prompt_ids(tokenizer, p)) for p in PROMPTS]
    serving = serving_options(version, device)
    longest = max(map(len, ids)) + n
    rows = []
    with kernels_off(device, interpret=False):  # a CPU runs the PyTorch path, as generate does
        engine = build_sized(version, checkpoint, device=device, dtype=dtype,
                             max_model_len=longest, max_running=max(batches), **serving)
        grammar = compiler.compile(Constraint.json_schema(SCHEMA))
        for b in batches:
            prompts = tuple(ids[i % len(ids)] for i in range(b))
            free = Workload("none", prompts, (n,) * b)
            bound = Constrained("json schema", prompts, (n,) * b, grammar=grammar, eos=eos)
            # one-time costs out of the timing: graph captures (the masked graphs' too) and
            # what a constrained step runs outside them at this batch's shapes (the redraw of
            # the rows of a decode launched ahead): a kernel compiled inside the timed steps
            # costs a few hundred ms, which the mean would spread over every step
            warm_up(engine, free, stepwise=True)
            engine.generate([list(p) for p in prompts],
                            dataclasses.replace(bound.params(0), max_new_tokens=8))
            plain, _ = full_steps(engine, free, device)
            masked, answers = full_steps(engine, bound, device)
            good = sum(valid(t, tokenizer, eos) for t in answers)
            mean, median = statistics.fmean, statistics.median
            rows.append({"batch": b, "none_step_ms": 1e3 * mean(plain),
                         "json_step_ms": 1e3 * mean(masked), "ratio": mean(masked) / mean(plain),
                         "none_steps": len(plain), "json_steps": len(masked),
                         "none_step_ms_median": 1e3 * median(plain),
                         "json_step_ms_median": 1e3 * median(masked),
                         "none_step_ms_max": 1e3 * max(plain),
                         "json_step_ms_max": 1e3 * max(masked),
                         "json_tokens": sum(map(len, answers)), "valid": good, "answers": b})
            row = rows[-1]
            log(f"batch {b}: {row['json_step_ms']:.2f} ms a constrained decode step (median "
                f"{row['json_step_ms_median']:.2f}, max {row['json_step_ms_max']:.2f}), "
                f"{row['none_step_ms']:.2f} ms without (median {row['none_step_ms_median']:.2f}, "
                f"max {row['none_step_ms_max']:.2f}); {good} of {b} answers validate")
    mode = run_mode(version, device, serving, False).removeprefix(", ")
    dtype_name = str(dtype).removeprefix("torch.")
    job = {"name": "structured", "version": version.name, "model": model_name, "device": device,
           "dtype": dtype_name, "max_new_tokens": n, "batches": batches, "schema": SCHEMA,
           "describe": f"{version.name}{f' ({mode})' if mode else ''} on {model_name}, "
                       f"{dtype_name} on {device}, {threads}; chat prompts asking for a person "
                       f"as JSON, {n} tokens at most a request; unconstrained (eos ignored) "
                       f"against the schema's grammar on every request"}
    return {"workload": job, "rows": rows}, device
