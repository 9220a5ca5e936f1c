"""Scripted request schedules that more than one spec module compares across versions."""
from __future__ import annotations

from torchlet.contract import GenerationParams

PROMPT = [17, 5, 300, 42, 99, 8, 250]


def late_arrival(engine):
    """A (6 new tokens) is added and stepped once; then B (2 new tokens) arrives. Runs to the
    end and returns (a, b, [(decode_ids, prefill_ids) of every later step])."""
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=6))
    engine.step()
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=2))
    ran = []
    while engine.has_unfinished():
        engine.step()
        stats = engine.last_step_stats()
        ran.append((stats.decode_ids, stats.prefill_ids))
    return a, b, ran


def run_alone(engine, params, prompt=PROMPT):
    """One request, stepped until the engine has nothing left; its output."""
    request_id = engine.add_request(prompt, params)
    while engine.has_unfinished():
        engine.step()
    return engine.output(request_id)


def run_schedule(engine, schedule, step=None) -> list[int]:
    """schedule: [(steps to run before adding, prompt, params)]; then steps until every request
    is done. Returns the requests' ids, in schedule order. step(ids), where given, runs each step
    in place of engine.step(), ids being those added so far (a spec that watches or checks every
    step)."""
    ids = []
    run = (lambda: step(ids)) if step else engine.step
    for gap, prompt, params in schedule:
        for _ in range(gap):
            run()
        ids.append(engine.add_request(prompt, params))
    while engine.has_unfinished():
        run()
    return ids
