"""v15's token budget, which also says how many tokens a step guesses.

The rule: every decoding request guesses speculative_tokens tokens, unless more than
speculate_below requests decode in the step, a request waits, or a prompt is being computed:
then none guesses; and none while the policy rests. Why a batch size: a
verifying pass computes k + 1 rows a request where a decode computes one, and while a decode
step reads every weight for few rows the extra rows are almost free (batch 1 on a GPU is bound
by weight reads); once a step's rows make it compute-bound the guesses cost what they may save,
and a step that guesses runs in order (the loop cannot launch the next decode before it knows
how many tokens each request kept). Guess rows are not charged to the budget: it bounds the
prompt slices beside the decodes, as in v15.

Why it rests: what a pass gains is a property of the text, not of the engine (a model that
copies its prompt keeps most guesses, one that writes new text few), and a pass that keeps
fewer tokens than it costs decode steps loses time. So the policy watches what the verifying
passes kept (observe, fed by the scheduler every step): once WINDOW passes have given their
requests fewer than min_tokens_per_pass tokens each on average, no step guesses for REST steps,
which then overlap as v14's do; after them it tries again, and each window in a row that fails
doubles the rest (up to LONGEST_REST steps): text that never copies costs a window of passes
every few hundred steps, not one every REST. A window that reaches the bar resets it. The bar
is what a pass costs against a plain decode step: about 1.2-1.3x on a CPU, 2x on the H200 when
the host built a slice pass's inputs (docs/benchmarks.md, bench speculative), so by default 1.3
on a CPU and 2 elsewhere; 0 never rests. Tokens are the same either way (exact acceptance):
only speed depends on it."""
from __future__ import annotations

from typing import Sequence

from torchlet.contract import BuildOption

from ..v16_tensor_parallel import TokenBudget

# Decoding requests above which a step guesses nothing (see the docstring).
SPECULATE_BELOW = 32
# Tokens a pass must give each request, on average, by device type (see the docstring).
MIN_TOKENS_PER_PASS = {"cpu": 1.3}
MIN_TOKENS_ELSEWHERE = 2.0


class SpeculationPolicy(TokenBudget):
    OPTIONS = TokenBudget.OPTIONS + (
        BuildOption("speculative_tokens", int, 0, "tokens each decoding request guesses a step "
                    "and verifies in one pass (0: none, the version before)", minimum=0),
        BuildOption("speculate_below", int, SPECULATE_BELOW, "a step with more decoding requests "
                    "than this guesses nothing", minimum=1),
        BuildOption("min_tokens_per_pass", float, None, "tokens a verifying pass must give each "
                    "request on average, or speculation rests a while (None: 1.3 on a CPU, 2 "
                    "elsewhere; 0: never rests)"),
    )

    # verifying passes judged together; steps the first rest lasts, and the longest (see above)
    WINDOW, REST, LONGEST_REST = 8, 32, 1024
    speculative_tokens, speculate_below, min_tokens_per_pass = 0, SPECULATE_BELOW, 0.0
    # what the passes since the last judgement gave: passes, request rows, tokens; steps to rest
    passes = rows = tokens = resting = 0
    failed = 0  # windows in a row under the bar

    @classmethod
    def assemble(cls, a) -> "SpeculationPolicy":
        """v15's budget and limits, and the two options."""
        policy = super().assemble(a)
        policy.speculative_tokens = a.options["speculative_tokens"]
        policy.speculate_below = a.options["speculate_below"]
        bar = a.options["min_tokens_per_pass"]
        policy.min_tokens_per_pass = (MIN_TOKENS_PER_PASS.get(a.device.type, MIN_TOKENS_ELSEWHERE)
                                      if bar is None else bar)
        return policy

    def observe(self, guesses: int, kept: Sequence[int]) -> None:
        """A step ran: it guessed `guesses` tokens a decode (0: none), and its decoding requests
        kept these many tokens each. Counts a resting step down, or judges WINDOW passes."""
        if not guesses:
            self.resting = max(self.resting - 1, 0)
            return
        self.passes, self.rows, self.tokens = (self.passes + 1, self.rows + len(kept),
                                               self.tokens + sum(kept))
        if self.passes == self.WINDOW:
            if self.tokens < self.min_tokens_per_pass * self.rows:
                self.resting = min(self.REST << self.failed, self.LONGEST_REST)
                self.failed += 1
            else:
                self.failed = 0
            self.passes = self.rows = self.tokens = 0

    def guesses(self, running: Sequence, waiting: Sequence) -> int:
        """Guesses per request in a step of these running requests, these waiting: none while
        a request waits or a prompt is being computed (the step's rows go to prompts first,
        and a verifying pass beside a slice pass is a second pass), nor where more than
        speculate_below requests decode. Counted only where speculation is on: a step of v16's
        asks at no cost."""
        if not self.speculative_tokens or waiting or self.resting:
            return 0
        if any(r.prefilling for r in running):
            return 0
        return self.speculative_tokens if 0 < len(running) <= self.speculate_below else 0
