"""The scripted runs the docs site draws: a few lines per version, each chosen to show the
version's idea and the tradeoff its page names, run at build time on the tiny Qwen2 fixture on
the CPU (about 0.1 s each).

SCENARIOS is keyed by short version id ("v08"). A version without its own scenario gets
FALLBACK: three staggered requests, drawn as the step x request timeline (and its block pool
where it has one). To give a new version its picture, add an entry: options by role or by name
(only those the version declares are passed), a script over a Recorder, and the views to draw
(torchlet/docs/draw.py's VIEWS) with the steps the pool views show, or the step the kernels
view watches and the version it sets beside this one."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Callable

import torch

from torchlet.contract import (BLOCK_SIZE, MAX_LEN, MAX_RUNNING, MAX_STEP_TOKENS, NUM_BLOCKS,
                               Checkpoint, GenerationParams)
from torchlet.docs.record import Recorder, Run, kernels_on, record

FIXTURE = "tiny_qwen2"


def params(n: int, **kw) -> GenerationParams:
    return GenerationParams(max_new_tokens=n, ignore_eos=True, **kw)


def prompt(n: int, start: int = 10) -> list[int]:
    return list(range(start, start + n))


@dataclass
class Scenario:
    caption: str
    script: Callable[[Recorder], None]
    views: tuple[str, ...] = ("timeline",)
    roles: dict[str, int] = field(default_factory=dict)     # role -> value
    options: dict[str, object] = field(default_factory=dict)  # option name -> value
    pool_steps: tuple[int, ...] = ()                          # steps the pool views show
    watch: int = 0          # the step whose dispatched ops are recorded (the kernels view)
    against: str = ""       # the version whose run of the scenario the kernels view shows too
    ranks: int = 1          # a tensor-parallel run: the ranks it is sharded over


def _v03(r: Recorder):
    r.add(prompt(6), params(2))
    b = r.add(prompt(4, 40), params(6))
    r.add(prompt(5, 80), params(4))
    r.step(), r.step()
    r.abort(b)
    r.finish()


def _v04(r: Recorder):
    r.add(prompt(6), params(3))
    r.add(prompt(4, 40), params(5))
    r.step()
    r.add(prompt(5, 80), params(3))
    r.step()
    r.add(prompt(3, 120), params(2))
    r.finish()


def _lanes(r: Recorder):
    r.add(prompt(5), params(2))
    r.add(prompt(4, 40), params(6))
    r.add(prompt(6, 80), params(4))
    r.step(), r.step()
    r.add(prompt(3, 120), params(3))
    r.step()
    r.add(prompt(4, 160), params(2))
    r.finish()


def _graphs(r: Recorder):
    r.add(prompt(5), params(5))
    r.step(), r.step()
    r.add(prompt(4, 40), params(4))
    r.step(), r.step()
    r.add(prompt(6, 80), params(3))
    r.finish()


def _paged(r: Recorder):
    # 7 usable blocks of 4 tokens: three requests fit at first and outgrow the pool at step 5
    for n, start in ((5, 10), (7, 40), (3, 80)):
        r.add(prompt(n, start), params(6))
    r.finish()


def _sampling(r: Recorder):
    r.add(prompt(5), params(5, temperature=1.0, seed=7))
    r.add(prompt(4, 40), params(5))
    r.add(prompt(6, 80), params(5, temperature=0.8, top_k=20, seed=3))
    r.finish()


def _prefix(r: Recorder):
    shared = prompt(8, 200)
    r.add(shared + [31, 32], params(3))          # computes the 2 shared blocks
    r.step()
    r.add(shared + [51, 52, 53], params(3))      # finds them cached: computes its tail only
    r.step(), r.step(), r.step()
    r.add(shared + [71], params(2))              # after both left: revives the kept blocks
    r.finish()


def _overlap(r: Recorder):
    r.add(prompt(5), params(4))
    r.add(prompt(3, 40), params(6))
    r.step()
    r.add(prompt(4, 80), params(3))
    r.finish()


def _chunked(r: Recorder):
    # a 20-token prompt arrives beside a decoding request; a budget of 8 rows a step
    r.add(prompt(4), params(8))
    r.step()
    r.add(prompt(20, 40), params(3))
    r.finish()


def _kernels(r: Recorder):
    # step 1 prefills, step 2 decodes: the step the kernels view watches. One request: the
    # interpreter runs each row in turn, and at one row v13 multiplies in its gemv kernels
    r.add(prompt(5), params(2))
    r.finish()


def _fallback(r: Recorder):
    r.add(prompt(5), params(4))
    r.step()
    r.add(prompt(4, 40), params(3))
    r.step()
    r.add(prompt(6, 80), params(2))
    r.finish()


SMALL_POOL = {NUM_BLOCKS: 8, BLOCK_SIZE: 4, MAX_RUNNING: 4, MAX_LEN: 32}
SCENARIOS: dict[str, Scenario] = {
    "v03": Scenario("Three requests added at once, one aborted after step 2: each goes WAITING, "
                    "RUNNING (a prefill step, then one decode per step), FINISHED.", _v03),
    "v04": Scenario("Room for 2 running requests (max_running=2); two more arrive mid-run and "
                    "join at the step a place frees up.", _v04, roles={MAX_RUNNING: 2}),
    "v05": Scenario("Three lanes. A request keeps its lane until it finishes; a newcomer takes "
                    "the lowest free lane; every decode pass runs all three lanes.", _lanes,
                    views=("lanes", "timeline"), roles={MAX_RUNNING: 3, MAX_LEN: 32}),
    "v06": Scenario("The same run as v05's: the decode step's token_ids and positions are "
                    "written in place into tensors allocated once, one entry per lane.", _lanes,
                    views=("buffers", "lanes"), roles={MAX_RUNNING: 3, MAX_LEN: 32}),
    "v07": Scenario("Graphs on: the first decode step with a bucket's lane count captures it, "
                    "later ones replay it.", _graphs, views=("timeline",),
                    roles={MAX_RUNNING: 4, MAX_LEN: 32}, options={"use_graphs": True}),
    "v08": Scenario("A pool of 7 usable blocks of 4 tokens. Each request's last block is partly "
                    "empty (the wasted tail); at step 5 the pool runs out, so the request "
                    "admitted last is preempted and recomputed once the others finish.", _paged,
                    views=("timeline", "pool"), roles=SMALL_POOL, pool_steps=(1, 4, 5, 7)),
    "v09": Scenario("One decode step, every op it dispatched (views, which "
                    "launch nothing, left out), layer by layer: v08's norms, RoPE and SwiGLU are "
                    "several torch ops each; here each is one Triton kernel, and the residual "
                    "add rides in the norm after it.", _kernels, views=("kernels",),
                    roles={MAX_RUNNING: 1, MAX_LEN: 32}, watch=2, against="v08"),
    "v10": Scenario("The pool of v08's run as the Triton decode kernel is given it: each "
                    "request's block table, rows of 4 tokens, the last one partly filled.",
                    _paged, views=("pool", "timeline"), roles=SMALL_POOL, pool_steps=(3,)),
    "v11": Scenario("Two seeded sampled requests beside a greedy one: the tokens each step "
                    "took. A seeded request's tokens depend on its seed alone, not its batch.",
                    _sampling, views=("tokens",), roles={MAX_RUNNING: 4, MAX_LEN: 32}),
    "v12": Scenario("Three prompts share their first 8 tokens (2 blocks). The second finds "
                    "them cached and computes its own tail; the third arrives after both left "
                    "and revives the kept blocks. Counts are the tables holding a block.",
                    _prefix, views=("pool", "timeline"),
                    roles={NUM_BLOCKS: 12, BLOCK_SIZE: 4, MAX_RUNNING: 4, MAX_LEN: 32},
                    pool_steps=(1, 2, 5, 6)),
    "v13": Scenario("One decode step, op by op and layer by layer: v12 "
                    "projects q, k and v with three GEMMs and gate and up with two, and turns q "
                    "and k with two RoPE kernels; here one GEMM over packed weights for each, "
                    "one kernel for RoPE and the head split, one for SwiGLU over the packed "
                    "row.", _kernels, views=("kernels",), roles={MAX_RUNNING: 1, MAX_LEN: 32},
                    watch=2, against="v12"),
    "v14": Scenario("Overlap on: each step launches the next decode before reading its own "
                    "tokens, so a running request's cache holds one row ahead (marked +1).",
                    _overlap, roles={MAX_RUNNING: 4, MAX_LEN: 32}, options={"overlap": True}),
    "v15": Scenario("A 20-token prompt arrives beside a decoding request, with a budget of 8 "
                    "rows a step: the decode goes first, the prompt is computed in slices.",
                    _chunked, views=("timeline",), roles={MAX_STEP_TOKENS: 8, MAX_RUNNING: 4,
                                                          MAX_LEN: 48}),
}
SCENARIOS["v16"] = Scenario(
    "The model sharded over 2 ranks (2 processes over gloo), as each rank reports it: the query "
    "and KV heads it holds (its q/k/v rows and o columns), its rows of the MLP (gate and up rows, "
    "down columns) and of the vocabulary (embedding and LM head rows); then the run on them, "
    "which is v15's.", _fallback, views=("shards", "timeline"),
    roles={MAX_RUNNING: 4, MAX_LEN: 32}, ranks=2)
FALLBACK = Scenario("Three requests arriving one step apart, drawn step by step.", _fallback,
                    roles={MAX_RUNNING: 4, MAX_LEN: 32})


def short(version: str) -> str:
    return version.split("_")[0]


def scenario_for(version: str) -> Scenario:
    """The version's own scenario, else the fallback (with its pool views where it has one)."""
    if short(version) in SCENARIOS:
        return SCENARIOS[short(version)]
    return FALLBACK


def build_engine(version, scenario: Scenario, checkpoint):
    """The version's engine for the scenario: the options it declares, by role and by name;
    graphs and overlap off unless the scenario turns them on (on a CPU they show nothing). Build
    and run it inside engine_mode(scenario)."""
    return version.build(checkpoint, device=checkpoint_device(checkpoint), dtype=torch.float32,
                         **options_for(version, scenario))


def options_for(version, scenario: Scenario) -> dict:
    """The build options the version declares, of those the scenario gives by role and by
    name; graphs and overlap off unless it turns them on."""
    names = {o.name for o in version.options}
    options = {k: v for k, v in version.options_by_role(scenario.roles).items()
               if v is not None}
    options.update({k: False for k in ("use_graphs", "overlap") if k in names})
    options.update({k: v for k, v in scenario.options.items() if k in names})
    return options


def placed(scenario: Scenario, checkpoint) -> Checkpoint:
    """The checkpoint where the scenario runs: the CPU; but a scenario that watches its kernels
    runs on a GPU where there is one, since there they are compiled for it (Triton's interpreter,
    which runs them on the CPU, is chosen when they are defined, and only without a GPU). The
    engine is built from the tensors there, so an op that reads a weight reads one of these."""
    if not (scenario.watch and torch.cuda.is_available()):
        return checkpoint
    return Checkpoint(checkpoint.config, {k: t.to("cuda") for k, t in checkpoint.tensors.items()})


def checkpoint_device(checkpoint) -> str:
    return next(iter(checkpoint.tensors.values())).device.type


def checkpoint():
    from torchlet.checkpoints import load_hf_dir
    from torchlet.learner import REPO

    return load_hf_dir(REPO / "fixtures" / FIXTURE)


@contextlib.contextmanager
def on_cpu():
    """Triton layers on their PyTorch path (TRITON_INTERPRET=0), torch on one thread: the
    tensors are tiny, and a second thread costs more in hand-offs than it computes."""
    before, threads = os.environ.get("TRITON_INTERPRET"), torch.get_num_threads()
    os.environ["TRITON_INTERPRET"] = "0"
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if before is None:
            os.environ.pop("TRITON_INTERPRET")
        else:
            os.environ["TRITON_INTERPRET"] = before


@contextlib.contextmanager
def engine_mode(scenario: Scenario):
    """Where a scenario's engine is built and run: on_cpu, but with the Triton kernels on (on a
    CPU, the interpreter) where the scenario watches them. An engine's layers choose their
    kernels when it is built, and then run them at every step."""
    with on_cpu(), kernels_on() if scenario.watch else contextlib.nullcontext():
        yield


def run_scenario(version, checkpoint, scenario: Scenario | None = None) -> tuple[Scenario, Run]:
    """Build the version's engine and run its scenario (or the one given), recorded."""
    scenario = scenario or scenario_for(version.name)
    if scenario.ranks > 1:
        return scenario, run_on_ranks(version, scenario)
    checkpoint = placed(scenario, checkpoint)
    with engine_mode(scenario):
        engine = build_engine(version, scenario, checkpoint)
        return scenario, record(engine, version.name, scenario.script, checkpoint,
                                scenario.watch)


def run_on_ranks(version, scenario: Scenario) -> Run:
    """The scenario on a tensor-parallel version's ranks (this process and the others it starts,
    torchlet.parallel), with what each rank holds."""
    from pathlib import Path

    from torchlet.learner import REPO
    from torchlet.parallel import BuildSpec, Ranks

    root = str(Path(version.package.__file__).resolve().parents[1])
    spec = BuildSpec(version.name, str(REPO / "fixtures" / FIXTURE),
                     options=options_for(version, scenario), root=root, threads=1)
    with on_cpu(), Ranks(scenario.ranks) as ranks:
        engine = ranks.build(spec)
        run = record(engine, version.name, scenario.script)
        run.shards = engine.shards()
    return run
