"""`torchlet bench speculative`: what guessing k tokens a step and verifying them in one pass
buys (v17), against the same build with speculative_tokens=0 (v16's engine).

One version, the newest with the speculative capability unless --impl names one, on the default
model (SmolLM2-135M-Instruct): a trained model, since the n-gram proposer guesses right only
where an answer repeats its context, which random weights never do. It is built once for k = 0
and once for each other k, proposer (--proposers, as --proposer names them: ngram, self:N, a
draft model's path) and acceptance; every engine runs the same cells (a workload at a
batch size: its first B prompts, greedy, --max-new-tokens tokens each with eos ignored, so that
every row makes as many tokens) in the same order, the engines in turn at each cell, so that a
drift of the machine's speed reaches them alike, each after one untimed warm-up, and before
each cell the cell's prompts prefilled untimed (prime). A cell is
driven through the step API by drive.run_steps. What a row adds, from speculation_stats()
across its run: tokens per verify pass (tokens / verify_passes: a pass's requests together) and
the acceptance rate (accepted / proposed); and how many of its tokens equal the k = 0 run's,
which exact acceptance promises for all of them.
"""
from __future__ import annotations

from torchlet.contract import SPECULATIVE, TorchletError
from torchlet.running import (kernels_off, load_proposer, pick_version, resolve_device,
                              resolve_dtype, run_mode, self_draft_layers, serving_options,
                              set_threads)

from .drive import run_steps, warm_up
from .workloads import Workload

ACCEPTANCE = ("exact", "rejection")  # v17's acceptance option's values
# Prompts whose answer repeats spans of the prompt: a list to repeat as it is, or a short snippet
# of code to copy with one name changed (SmolLM2-135M-Instruct copies without making the rename).
# How they were chosen: 16 such prompts, written to need about 64 tokens of answer, were run once
# on that model with k=4 and 64 tokens; these are the 8 it copied most (2.2 to 3.5 tokens per
# verify pass; the others it answered instead of copying: 1.1 to 1.9). A copy workload, by design.
COPY = (
    'Repeat these steps word for word:\n1. Boil the water.\n2. Add the pasta.\n'
    '3. Stir for ten minutes.\n4. Drain the water.\n5. Add the sauce.\n'
    '6. Grate the cheese.\n7. Mix it all well.\n8. Serve it hot.',
    'Copy this class exactly, renaming Point to Vector:\nclass Point:\n'
    '    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n'
    '    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5',
    'Repeat this list of colours exactly:\n1. red\n2. orange\n3. yellow\n4. green\n'
    '5. blue\n6. indigo\n7. violet\n8. black\n9. white\n10. grey\n11. pink\n12. brown',
    "Copy this code exactly, renaming items to things:\nitems = ['a', 'b', 'c']\n"
    "for i, item in enumerate(items):\n    print(i, item)\nitems.append('d')\n"
    'print(len(items))\nprint(items[0], items[-1])',
    'Repeat this list of cities exactly:\n1. Paris, France\n2. Berlin, Germany\n'
    '3. Madrid, Spain\n4. Rome, Italy\n5. Lisbon, Portugal\n6. Vienna, Austria\n'
    '7. Prague, Czechia\n8. Dublin, Ireland',
    'Repeat this list exactly:\n1. red apples\n2. green pears\n3. ripe plums\n'
    '4. dried figs\n5. sweet dates\n6. fresh cherries\n7. sour lemons\n8. yellow bananas\n'
    '9. black grapes\n10. wild berries',
    'Copy this code exactly, renaming the variable n to count:\nn = 0\n'
    "for line in open('log.txt'):\n    if 'error' in line:\n        n += 1\n"
    "    elif 'warning' in line:\n        n += 2\nprint(n)\nprint('done', n)",
    'Repeat these names exactly, one a line:\nAlice Smith\nBob Jones\nCarol White\n'
    'David Brown\nEve Black\nFrank Green\nGrace Hall\nHenry King\nIvy Lee\nJack Moore',
)
# Plain questions: answers that repeat little of their prompt.
CHAT = (
    "What is the capital of France?", "Why is the sky blue?",
    "Give me three tips for better sleep.", "What does a compiler do?",
    "Write a haiku about autumn.", "How do plants make food?",
    "What is the difference between weather and climate?", "Tell me a fun fact about octopuses.",
)
WORKLOADS = {"copy": COPY, "chat": CHAT}


def counts(text: str, flag: str, least: int) -> list[int]:
    """A flag's comma-separated integers, each at least `least`, in order, none twice."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < least or len(set(values)) < len(values):
        raise TorchletError(f"{flag} takes distinct integers of at least {least} separated by "
                            f"commas, e.g. 1,8; got {text!r}")
    return values


def proposer_names(text: str) -> list[str]:
    """--proposers' comma-separated proposers (as --proposer takes them), in order, none twice;
    a self:N that is no number of layers is refused here, before the model loads."""
    names = [name.strip() for name in text.split(",")]
    if not all(names) or len(set(names)) < len(names):
        raise TorchletError(f"--proposers takes distinct proposers (ngram, self:N or a draft "
                            f"model's path) separated by commas, e.g. ngram,self:8; got {text!r}")
    for name in names:
        self_draft_layers(name, "--proposers")
    return names


def check_args(args) -> tuple[list[int], list[int], list[str]]:
    """(batches, ks, proposers), k = 0 first (every row is measured against it); one line if
    wrong."""
    if args.max_new_tokens < 1:
        raise TorchletError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    ks = counts(args.ks, "--ks", 0)
    return (counts(args.batches, "--batches", 1), [0] + [k for k in ks if k],
            proposer_names(args.proposers))


def builds(ks: list[int], proposers: list[str]) -> list[tuple[int, str | None, str | None]]:
    """(k, acceptance, proposer) of each engine: k = 0 once (acceptance and proposer decide
    nothing there), then each proposer at each k with each acceptance."""
    return [(0, None, None)] + [(k, a, p) for k in ks if k for p in proposers for a in ACCEPTANCE]


def cells(tokenizer, batches: list[int], n: int) -> list[Workload]:
    """Each workload at each batch: its first B prompts (over again past its 8), chat-templated,
    n tokens each."""
    from torchlet.text import prompt_ids

    out = []
    for name, prompts in WORKLOADS.items():
        ids = [tuple(prompt_ids(tokenizer, p)) for p in prompts]
        out += [Workload(name, tuple(ids[i % len(ids)] for i in range(b)), (n,) * b)
                for b in batches]
    return out


def measure(args, log) -> tuple[dict, str]:
    """The payload of speculative.json and the device it ran on."""
    from torchlet.checkpoints import load_hf_dir
    from torchlet.engines import build_sized
    from torchlet.text import load_tokenizer

    from .main_job import load_model

    batches, ks, proposers = check_args(args)
    device = resolve_device(args.device)
    if args.batch_invariant and not device.startswith("cuda"):
        raise TorchletError("--batch-invariant runs on the Triton kernels, which bench speculative "
                            "runs on a GPU only: add --device cuda")
    threads = set_threads(args.threads)
    version = pick_version(args.impl, args.impl_root, device, need=SPECULATIVE)
    if SPECULATIVE not in version.capabilities:
        raise TorchletError(f"{version.name} does not speculate: bench speculative needs a "
                            f"version with the {SPECULATIVE} capability (v17 and later)")
    model_dir, model_name = load_model(args)
    checkpoint, tokenizer = load_hf_dir(model_dir), load_tokenizer(model_dir)
    n, dtype = args.max_new_tokens, resolve_dtype(args.dtype, device)
    workloads = cells(tokenizer, batches, n)
    longest = max(len(p) for w in workloads for p in w.prompts) + n
    serving = serving_options(version, device)
    # each proposer's build option, loaded once (a self-draft shares the target's tensors)
    chosen = {name: load_proposer(name, checkpoint, "--proposers")[0] for name in proposers}
    engines = {}
    invariant = {"batch_invariant": True} if args.batch_invariant else {}
    with kernels_off(device, interpret=False):  # a CPU runs the PyTorch path, as generate does
        for k, acceptance, proposer in builds(ks, proposers):
            options = {"speculative_tokens": k} | ({"acceptance": acceptance,
                                                    "proposer": chosen[proposer]} if k else {})
            engines[k, acceptance, proposer] = engine = build_sized(
                version, checkpoint, device=device, dtype=dtype, max_model_len=longest,
                max_running=max(batches), **serving, **options, **invariant)
            warm_up(engine, workloads[0], stepwise=True)
        rows = []
        for workload in workloads:
            runs = {}
            for key, engine in engines.items():  # the engines in turn at each cell
                prime(engine, workload)
                before = engine.speculation_stats()
                row = run_steps(engine, workload, device, not args.quiet, tokens=True)
                runs[key] = (row, stats_between(before, engine.speculation_stats()))
            rows += cell_rows(workload, runs, log)
    mode = ", ".join(m for m in (run_mode(version, device, serving, False).removeprefix(", "),
                                 "batch-invariant" * bool(invariant)) if m)
    dtype_name = str(dtype).removeprefix("torch.")
    job = {"name": "speculative", "version": version.name, "model": model_name, "device": device,
           "dtype": dtype_name, "max_new_tokens": n, "batches": batches, "ks": ks,
           "proposers": proposers,
           "describe": f"{version.name}{f' ({mode})' if mode else ''} on {model_name}, "
                       f"{dtype_name} on {device}, "
                       f"{threads}; greedy, {n} new tokens a request (eos "
                       f"ignored); workloads copy (a list or code to repeat) and chat (plain "
                       f"questions), their first B prompts at batch B; proposers "
                       f"{', '.join(proposers)}"}
    return {"workload": job, "rows": rows, "notes": proposer_notes(rows)}, device


def prime(engine, workload: Workload) -> None:
    """The cell's prompts prefilled twice, a token each, untimed: the second time the prefix
    cache holds what the timed run will find, so its prompt passes have the timed run's shapes,
    and a graph of a new shape (v15's slice graphs, captured at a shape's first pass, 0.1 s or
    more on a GPU) is captured here, not in the timed run. A request of one token decodes
    nothing, so no verifying pass runs and the speculation policy, which judges passes, is left
    as it was."""
    from torchlet.contract import GenerationParams

    params = GenerationParams(max_new_tokens=1, ignore_eos=True)
    for _ in range(2):
        for prompt in workload.prompts:
            engine.add_request(list(prompt), params)
        while engine.has_unfinished():
            engine.step()


def stats_between(before: dict, after: dict) -> dict:
    """What one run added to the engine's speculation counters (they count from the build)."""
    return {key: after[key] - before[key] for key in after}


def cell_rows(workload: Workload, runs: dict, log) -> list[dict]:
    """One row per engine of a cell: its speed against k = 0's, and its tokens against them."""
    base, _ = runs[0, None, None]
    rows = []
    for (k, acceptance, proposer), (row, stats) in runs.items():
        same = sum(a == b for mine, theirs in zip(row["token_ids"], base["token_ids"])
                   for a, b in zip(mine, theirs))
        rows.append({
            "workload": workload.name, "batch": workload.num_requests, "k": k,
            "acceptance": acceptance, "proposer": proposer,
            "output_tokens": row["output_tokens"],
            "wall_s": row["wall_s"], "output_tok_s": row["output_tok_s"],
            "speedup": row["output_tok_s"] / base["output_tok_s"], "steps": row["steps"],
            "speculation": stats,
            "tokens_per_pass": stats["tokens"] / stats["verify_passes"]
            if stats["verify_passes"] else None,
            "acceptance_rate": stats["accepted"] / stats["proposed"] if stats["proposed"] else None,
            "same_as_k0": same, "of_k0": base["output_tokens"]})
        if acceptance == "exact" and same != base["output_tokens"]:
            log(f"warning: {workload.name} batch {workload.num_requests} k={k} exact {proposer}: "
                f"only {same} of {base['output_tokens']} tokens equal k=0's")
    return rows


def proposer_notes(rows: list[dict]) -> list[str]:
    """A sentence per proposer other than ngram, of its exact rows: how many of its guesses
    were kept and its speed against k = 0, per workload, so that the doc says it in words
    written from the run."""
    notes = []
    for proposer in dict.fromkeys(r["proposer"] for r in rows if r["proposer"] not in
                                  (None, "ngram")):
        mine = [r for r in rows if r["proposer"] == proposer and r["acceptance"] == "exact"]
        cells = "; ".join(f"{r['workload']} batch {r['batch']} k={r['k']}: "
                          + ("no guesses" if r["acceptance_rate"] is None else
                             f"{r['acceptance_rate']:.1%} of its guesses accepted")
                          + f", {r['speedup']:.2f}x k=0's tok/s" for r in mine)
        notes.append(f"Proposer {proposer}, exact acceptance: {cells}.")
    return notes


def check_lines(rows: list[dict]) -> tuple[list[str], bool]:
    """The exact rows' token check, as printed (and whether every one held)."""
    exact = [r for r in rows if r["acceptance"] == "exact"]
    same, total = sum(r["same_as_k0"] for r in exact), sum(r["of_k0"] for r in exact)
    held = same == total
    verdict = "all equal" if held else "MISMATCH"
    return [f"exact acceptance: {same} of {total} generated tokens equal the k=0 run's "
            f"({len(exact)} row{'' if len(exact) == 1 else 's'}): {verdict}"], held
