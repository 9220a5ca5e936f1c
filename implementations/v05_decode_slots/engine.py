"""v04's step-wise engine over decode slots. A step runs two passes: the slot-shaped decode of
every running request, then the ragged prefill of the admitted ones, which takes their slots. A
request's slot is freed the step it finishes, as v04 frees its cache."""
from __future__ import annotations

from functools import partial

import torch

from torchlet.contract import (MAX_LEN, MAX_RUNNING, MAX_STEP_TOKENS, BuildOption, Checkpoint,
                               GenerationParams, RequestError)

from ..v04_continuous_batching import Batch, ContinuousBatching, Scheduler, StepEngine
from .runner import SlotRunner


class SlotEngine(StepEngine):
    """v04's StepEngine given a SlotRunner: what changes is the step's passes, the refusal of a
    request that outgrows a slot, and the slots the contract can ask about."""

    def _check_fits(self, prompt: list[int], params: GenerationParams) -> None:
        """A request that could outgrow a slot's rows is refused first, then as v04 refuses."""
        if len(prompt) + params.max_new_tokens > self.runner.cache.max_len:
            raise RequestError(
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
                f"exceeds max_model_len={self.runner.cache.max_len}, the rows a slot holds")
        super()._check_fits(prompt, params)

    def _forward(self, batch: Batch) -> torch.Tensor:
        """Two passes: the slot-shaped decode of the running requests, then the ragged prefill of
        the admitted ones (each its whole sequence), which takes their slots."""
        logits = []
        if batch.decode:
            logits.append(self.runner.decode([r.id for r in batch.decode],
                                             [r.sequence for r in batch.decode]))
        if batch.prefill:
            logits.append(self.runner.prefill([r.id for r in batch.prefill],
                                              [r.sequence for r in batch.prefill]))
        return torch.cat(logits)  # batch.requests order: decode, then prefill

    def slot_of(self, request_id) -> int | None:
        """The decode slot the request holds, None while waiting or once finished."""
        return self.runner.cache.slot_of(request_id)

    @property
    def num_decode_slots(self) -> int:
        return self.runner.num_slots


DEFAULT_SLOTS = 8
# The options slot_build takes, declared once: its refusal of any other names them and a harness
# reads them by role. Listed whole, not added to v04's: max_running now counts slots and has no
# default of its own.
SLOT_OPTIONS = (
    BuildOption("max_decode_slots", int, None, "decode slots, the requests running at once "
                f"(None: max_running, else {DEFAULT_SLOTS})", MAX_RUNNING, minimum=1),
    BuildOption("max_running", int, None, "v04's name for the slot count; given with "
                "max_decode_slots, the two must agree", minimum=1),
    BuildOption("max_step_tokens", int, None, "rows one step may feed (None: the model's "
                "context, or the slots if more)", MAX_STEP_TOKENS, minimum=1),
    BuildOption("max_model_len", int, None, "rows a slot holds: the longest prompt + output "
                "(None: the model's context)", MAX_LEN, minimum=1),
    BuildOption("poison_inactive_lanes", bool, False, "feed idle decode lanes random ids and "
                "positions"),
)


def refuse_unknown_options(version: str, known: tuple[BuildOption, ...], options: dict) -> None:
    """TypeError naming the options a build takes (known: its OPTIONS), when it was given any
    other."""
    if options:
        names = [o.name for o in known]
        raise TypeError(f"{version} takes {', '.join(names[:-1])} and {names[-1]}, "
                        f"got {sorted(options)}")


def slot_limits(checkpoint: Checkpoint, max_decode_slots: int | None, max_running: int | None,
                max_step_tokens: int | None, max_model_len: int | None) -> tuple[int, int]:
    """The slot count and the step budget the options give, or TypeError naming a bad one. The
    slots bound the running requests, so max_running (v04's name) is accepted as the slot count;
    max_step_tokens defaults to the model's context."""
    given = [n for n in (max_decode_slots, max_running) if n is not None]  # 0 is no default
    if len(given) == 2 and max_decode_slots != max_running:
        raise TypeError(f"max_decode_slots={max_decode_slots} and max_running={max_running} "
                        f"disagree: the slots are the running requests")
    slots = given[0] if given else DEFAULT_SLOTS
    if max_model_len is not None and not 1 <= max_model_len <= checkpoint.config.max_position:
        raise TypeError(f"max_model_len must be in 1..{checkpoint.config.max_position}, "
                        f"got {max_model_len}")
    if max_step_tokens is None:
        max_step_tokens = max(checkpoint.config.max_position, slots)
    return slots, max_step_tokens


def slot_scheduler(slots: int, budget: int) -> Scheduler:
    """v04's scheduler and policy, with one running request per slot."""
    return Scheduler(ContinuousBatching(slots, budget))


def slot_build(version: str, runner_class, engine_class, checkpoint: Checkpoint, *, device="cpu",
               dtype=torch.float32, max_decode_slots: int | None = None,
               max_running: int | None = None, max_step_tokens: int | None = None,
               max_model_len: int | None = None, poison_inactive_lanes: bool = False, **options):
    """An engine_class over a runner_class, built from this version's options:
    max_decode_slots, max_running and max_step_tokens as slot_limits reads them; max_model_len
    (the rows a slot holds) defaults to the model's context; poison_inactive_lanes fills idle
    lanes with random ids and positions. version names the build in its refusals."""
    refuse_unknown_options(version, SLOT_OPTIONS, options)
    slots, budget = slot_limits(checkpoint, max_decode_slots, max_running, max_step_tokens,
                                max_model_len)
    runner = runner_class(checkpoint, device, dtype, max_model_len, slots, poison_inactive_lanes)
    return engine_class(runner, slot_scheduler(slots, budget))


# This version's build: its options over the slot runner and the slot engine.
build = partial(slot_build, "v05", SlotRunner, SlotEngine)
