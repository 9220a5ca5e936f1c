"""v15's token budget, which also says how many tokens a step guesses.

The rule: every decoding request guesses speculative_tokens tokens, unless more than
speculate_below requests decode in the step, a request waits, or a prompt is being computed:
then none guesses. Why a batch size: a
verifying pass computes k + 1 rows a request where a decode computes one, and while a decode
step reads every weight for few rows the extra rows are almost free (batch 1 on a GPU is bound
by weight reads); once a step's rows make it compute-bound the guesses cost what they may save,
and a step that guesses runs in order (the loop cannot launch the next decode before it knows
how many tokens each request kept). Guess rows are not charged to the budget: it bounds the
prompt slices beside the decodes, as in v15."""
from __future__ import annotations

from typing import Sequence

from torchlet.contract import BuildOption

from ..v16_tensor_parallel import TokenBudget

# Decoding requests above which a step guesses nothing (see the docstring).
SPECULATE_BELOW = 32


class SpeculationPolicy(TokenBudget):
    OPTIONS = TokenBudget.OPTIONS + (
        BuildOption("speculative_tokens", int, 0, "tokens each decoding request guesses a step "
                    "and verifies in one pass (0: none, the version before)", minimum=0),
        BuildOption("speculate_below", int, SPECULATE_BELOW, "a step with more decoding requests "
                    "than this guesses nothing", minimum=1),
    )

    speculative_tokens, speculate_below = 0, SPECULATE_BELOW

    @classmethod
    def assemble(cls, a) -> "SpeculationPolicy":
        """v15's budget and limits, and the two options."""
        policy = super().assemble(a)
        policy.speculative_tokens = a.options["speculative_tokens"]
        policy.speculate_below = a.options["speculate_below"]
        return policy

    def guesses(self, running: Sequence, waiting: Sequence) -> int:
        """Guesses per request in a step of these running requests, these waiting: none while
        a request waits or a prompt is being computed (the step's rows go to prompts first,
        and a verifying pass beside a slice pass is a second pass), nor where more than
        speculate_below requests decode. Counted only where speculation is on: a step of v16's
        asks at no cost."""
        if not self.speculative_tokens or waiting:
            return 0
        if any(r.prefilling for r in running):
            return 0
        return self.speculative_tokens if 0 < len(running) <= self.speculate_below else 0
