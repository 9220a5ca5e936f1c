"""v06_static_buffers: the decode step reads its inputs from tensors allocated once.

What it introduces: decode buffers. Everything per lane that the decode pass reads (token ids,
positions, active lanes) lives in tensors allocated at build and written in place at every step;
`engine.decode_buffers()` returns them by name, "token_ids" among them. On a GPU the new values
are written into host tensors (pinned) and copied over in one transfer per buffer. Prefill stays
dynamic.
Why v05 needs it: v05's decode shapes are fixed, but each step builds its inputs anew (three
torch.zeros, then a 0-dim tensor for every `t[i] = value`), at new addresses. A CUDA graph (v07)
replays its kernels on the addresses it captured: its inputs must be rewritten, never replaced.
Core principle: same memory, new values. Watched through the aten ops (spec/support/watchers/allocations.py)
at every step of random arrival schedules: decode_buffers() returns the same tensor objects, with
the same storage, shapes and dtypes, at every step; from the start of a decode step up to its last
write into the buffers, nothing allocates, not even the 0-dim tensor that `buf[i] = value` makes
(write through a numpy view of the host tensor instead); the decode pass then reads every buffer,
and its embedding lookup takes its ids from the token_ids buffer itself. And it is a refactor:
tokens and logits equal v05's.
Files: implementations/v06_static_buffers/inputs.py (DecodeBuffers, StaticInputs) against
implementations/v05_decode_lanes/inputs.py (LaneInputs.write); v06 swaps only the decode inputs,
which serve decode_buffers() on the engine.
Tradeoff left visible: the buffers hold every lane, and every step rewrites them whole, idle lanes
included, with a Python loop over the lanes. And only the inputs stand still: the model itself
still allocates its intermediates (masks, activations) at each step, and still launches every op
from Python, which v07's graphs remove.
"""
from collections import Counter
from contextlib import nullcontext

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import implementations
from spec.support.inputs import strategies as sts
from spec.support.watchers.allocations import OpLog, storage
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.decode_ahead import overlaps
from spec.support.inputs.scenarios import run_schedule
from torchlet.contract import STATIC_BUFFERS, GenerationParams

pytestmark = pytest.mark.spec(needs=STATIC_BUFFERS)

CKPT = tiny_checkpoint("tiny_qwen2")
CFG = CKPT.config
VOCAB = CFG.vocab_size
EMBEDDING = (VOCAB, CFG.hidden_size)
MAX_LEN = 8
PROMPT = [17, 5, 300, 42, 99, 8, 250]


def identity(buffers: dict) -> dict:
    """Each buffer with what a graph would have captured of it."""
    return {name: (t, t.data_ptr(), tuple(t.shape), t.dtype) for name, t in buffers.items()}


def assert_same_buffers(engine, at_build: dict) -> None:
    now = identity(engine.decode_buffers())
    assert now.keys() == at_build.keys()
    for name, (t, *seen) in at_build.items():
        assert now[name][0] is t, f"decode_buffers()[{name!r}] is a new tensor"
        assert now[name][1:] == tuple(seen), f"{name!r}: (data_ptr, shape, dtype) changed"


def check_decode_step(engine, log: OpLog) -> None:
    """What a step that only decodes did: wrote its inputs in place, then read them."""
    buffers = engine.decode_buffers()
    last = log.last_write_to(buffers.values())
    assert last is not None, "the decode step wrote nothing into its buffers"
    made = Counter(f"{op.name} -> {shape} {dtype}" for op in log.ops[:last + 1]
                   for shape, dtype in op.fresh)
    assert not made, (f"preparing the decode step allocated {dict(made)}; `t[i] = value` makes a "
                      f"0-dim tensor (aten.lift_fresh): write through a numpy view instead")
    read = set().union(*(op.reads for op in log.ops[last + 1:]))
    unread = [name for name, t in buffers.items() if storage(t) not in read]
    assert not unread, f"the decode pass did not read the buffers {unread}"
    assert log.lookups, "the decode step looked up no embedding"
    assert all(k.storage == storage(buffers["token_ids"]) for k in log.lookups), \
        "the decode pass's embedding lookup did not index with the token_ids buffer"


def drive(engine, schedule, on_step=None) -> list[int]:
    """Run an arrival schedule [(steps before adding, prompt, params)] to the end; on_step(stats,
    log) after every step that ran, log being that step's OpLog."""
    def step(ids):
        with OpLog(EMBEDDING) if on_step else nullcontext() as log:
            ran = engine.step()
        if ran and on_step:
            on_step(engine.last_step_stats(), log)

    return run_schedule(engine, schedule, step)


@pytest.mark.spec(engine_parts=True, one_step_per_call=True)
@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), slots=st.integers(1, 4))
@engine_settings()
def test_every_decode_step_reads_the_same_buffers_written_in_place_without_allocating(
        impl, schedule, slots):
    # float64 keeps Triton versions on their PyTorch path: the buffers are the point here
    engine = impl.build(CKPT, max_lanes=slots, dtype=torch.float64)
    at_build = identity(engine.decode_buffers())
    assert at_build["token_ids"][2] == (slots,), "one token id per decode lane"

    def on_step(stats, log):
        assert_same_buffers(engine, at_build)
        if stats.decode_ids and not stats.prefill_ids:  # prefill is dynamic: leave it out
            check_decode_step(engine, log)

    drive(engine, schedule, on_step)
    assert_same_buffers(engine, at_build)


@pytest.fixture(scope="module")
def v05():
    return implementations.load("v05_decode_lanes")


@pytest.mark.spec(one_step_per_call=True)
def test_a_decode_step_writes_in_place_where_v05_allocated_its_inputs(impl, v05):
    steps = {}
    for version in (impl, v05):
        engine = version.build(CKPT, max_lanes=4)
        engine.add_request(PROMPT, GenerationParams(max_new_tokens=3))
        engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=3))
        engine.step()
        with OpLog(EMBEDDING) as log:
            engine.step()
        steps[version.name] = (engine, log)
    engine, log = steps[impl.name]
    check_decode_step(engine, log)
    # The same watch sees v05 build its lanes anew before its pass: [4] tensors and 0-dim ones.
    _, v05_log = steps[v05.name]
    made = {fresh for op in v05_log.ops[:v05_log.lookups[0].at] for fresh in op.fresh}
    assert ((4,), torch.long) in made and ((), torch.long) in made


@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), slots=st.integers(1, 4),
       poison=st.booleans())
@pytest.mark.spec(engine_parts=True)
@engine_settings()
def test_for_any_arrival_schedule_the_tokens_equal_v05s(impl, v05, schedule, slots, poison):
    outputs = []
    for version, poisoned in ((v05, False), (impl, poison)):
        engine = version.build(CKPT, dtype=torch.float64, max_lanes=slots,
                               poison_inactive_lanes=poisoned)
        ids = drive(engine, schedule)
        outputs.append([engine.output(i).tokens for i in ids])
    assert outputs[1] == outputs[0]


def test_decode_logits_equal_v05s_step_after_step(impl, v05):
    prompts = {"a": PROMPT, "b": [9, 8, 7], "c": [4, 4, 4, 4, 4]}
    engines = [version.build(CKPT, dtype=torch.float64, max_lanes=4)
               for version in (v05, impl)]
    first = [e.prefill(list(prompts), list(prompts.values())) for e in engines]
    torch.testing.assert_close(first[1], first[0])
    seqs = {r: prompts[r] + [int(first[0][k].argmax())] for k, r in enumerate(prompts)}
    for step in range(4):
        if step == 2:  # b leaves: its lane turns idle
            for e in engines:
                e.release("b")
            del seqs["b"]
        logits = [e.decode(list(seqs), list(seqs.values())) for e in engines]
        torch.testing.assert_close(logits[1], logits[0])
        for k, r in enumerate(seqs):
            seqs[r] = seqs[r] + [int(logits[0][k].argmax())]


# --- on a GPU: the host waits once per step ----------------------------------------------------

@pytest.mark.gpu
def test_a_cuda_decode_step_makes_the_host_wait_once_for_its_tokens(impl):
    """Static buffers are staged in pinned memory and copied without waiting, and the rows the
    step hands back are picked the same way: the one synchronizing operation left is reading
    the new tokens back. Counted by CUDA's sync debug mode (it warns at each synchronizing
    call it knows)."""
    import warnings

    engine = impl.build(CKPT, device="cuda", max_lanes=4)
    ids = [engine.add_request(p, GenerationParams(max_new_tokens=8)) for p in (PROMPT, [5, 6, 7])]
    for _ in range(3):  # both prefilled, then decode steps (graphs captured, where there are)
        engine.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if "called a synchronizing" in str(w.message)]
    assert engine.last_step_stats().num_decode_tokens == len(ids)
    # From v14 the read-back waits on an event recorded right after the tokens' copy, which
    # waits for nothing launched after it and which this mode does not count: no sync at all.
    assert len(syncs) == (0 if overlaps(impl) else 1), syncs
