"""The proposer part: guesses of each request's next tokens, cheaper than the target's pass.

The build option `proposer` picks it (Proposer.assemble): "ngram" (the default), a Checkpoint of
a draft model with the target's vocabulary, or any object with propose(requests, k) (a spec's
scripted guesses).

NgramProposer is prompt lookup: the last n tokens of a request's sequence are looked for earlier
in the same sequence, latest occurrence first, and the tokens that followed them are the guess
(n from `ngram` down to 1). It needs no second model and costs a scan of the sequence; it is
right where the answer copies its context (code edited in place, a list continued, a quote) and
proposes nothing where no n-gram repeats."""
from __future__ import annotations

from typing import Sequence

import torch.distributed as dist

from torchlet.contract import BuildError, BuildOption, Checkpoint, GenerationParams

from ..v16_tensor_parallel import PARTS as BEFORE


class Proposer:
    """The part as the recipe names it: assemble builds the proposer the options ask for."""

    OPTIONS = (
        BuildOption("proposer", object, "ngram", "what guesses: 'ngram' (prompt lookup), a "
                    "Checkpoint of a draft model with the same vocabulary, or an object with "
                    "propose(requests, k)"),
        BuildOption("ngram", int, 3, "the longest n-gram the n-gram proposer looks up (then "
                    "n - 1, down to 1)", minimum=1),
    )

    @classmethod
    def assemble(cls, a):
        chosen = a.options["proposer"]
        if isinstance(chosen, str) and chosen == "ngram":
            return NgramProposer(a.options["ngram"])
        if isinstance(chosen, Checkpoint):
            return DraftProposer.assemble(a, chosen)
        if callable(getattr(chosen, "propose", None)):
            return chosen
        raise BuildError(f"proposer must be 'ngram', a Checkpoint or an object with "
                         f"propose(requests, k), got {type(chosen).__name__}")


class NgramProposer:
    def __init__(self, ngram: int = 3):
        self.ngram = ngram

    def propose(self, requests: Sequence, k: int) -> list[list[int]]:
        """Per request, the up to k tokens that followed the latest earlier occurrence of its
        last n tokens, for the largest n that occurs; [] where none does."""
        return [lookup(r.sequence, self.ngram, k) for r in requests]


def lookup(sequence: Sequence[int], ngram: int, k: int) -> list[int]:
    """The up to k tokens after the latest occurrence of sequence's last n tokens that ends
    before the sequence does, for the largest n <= ngram that has one."""
    length = len(sequence)
    for n in range(min(ngram, length - 1), 0, -1):
        tail = list(sequence[length - n:])
        first = tail[0]
        for start in range(length - n - 1, -1, -1):  # latest first; never the tail itself
            if sequence[start] == first and list(sequence[start:start + n]) == tail:
                return list(sequence[start + n:start + n + k])
    return []


class DraftProposer:
    """A draft model's greedy tokens: the version before this one, built on the draft's
    checkpoint, generates k tokens after each request's sequence. Its prefix cache holds the
    full blocks of every sequence it has computed, so a proposal computes only the rows after
    the last full block its request shares with an earlier one, and k decode steps: the K/V of
    guesses the target rejected is never reused, since a cached block is found only by its
    tokens."""

    def __init__(self, engine):
        self.engine = engine

    @classmethod
    def assemble(cls, a, checkpoint: Checkpoint) -> "DraftProposer":
        if checkpoint.config.vocab_size != a.config.vocab_size:
            raise BuildError(f"the draft's vocabulary ({checkpoint.config.vocab_size} tokens) is "
                             f"not the target's ({a.config.vocab_size})")
        if dist.is_initialized() and dist.get_world_size() > 1:
            raise BuildError("a draft proposer runs on one rank's process only: use "
                             "proposer='ngram' with tensor parallelism")
        # sized and run as the target is: its lanes, its longest sequence and the k guesses
        # after it, its graphs or none (on a CPU the harness turns the graph stand-in off)
        longest = a.options["max_model_len"]
        if longest is not None:
            longest += a.options["speculative_tokens"]
        return cls(BEFORE.build(checkpoint, device=a.device, dtype=a.dtype, overlap=False,
                                max_lanes=a.kv.num_lanes, max_model_len=longest,
                                use_graphs=a.options["use_graphs"]))

    def propose(self, requests: Sequence, k: int) -> list[list[int]]:
        if not requests or k < 1:
            return [[] for _ in requests]
        return self.engine.generate([list(r.sequence) for r in requests],
                                    GenerationParams(max_new_tokens=k))
