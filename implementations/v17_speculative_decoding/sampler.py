"""v11's sampler, which also decides which guesses a verifying pass keeps (acceptance).

"exact" (the default) keeps a guess exactly when it equals the token the engine draws itself at
that position: the seeded draw is argmax p / E with E a function of (seed, position, token)
alone (v11's draw.py), so a request keeps every token the run without guesses would give it,
sampled or greedy, and the guesses change only how many passes it takes.

"rejection" is the textbook rule (Leviathan et al., Chen et al.): a guess g drawn from q is kept
with probability min(1, p(g) / q(g)); at the first one rejected the token is drawn from
max(0, p - q), renormalised. It keeps the distribution p, not the tokens of the run without
guesses. The proposers here guess deterministically (q is all on g), so a guess is kept with
probability p(g) and a rejected one is drawn again from p without g. Its uniforms come from the
request's seed and position too, so a seeded run repeats."""
from __future__ import annotations

from typing import Sequence

import torch

from torchlet.contract import BuildError, BuildOption

from ..v16_tensor_parallel import SeededSampler, draw

ACCEPTANCE = ("exact", "rejection")
# Keys the acceptance test's uniform off another stream than the draw's (seed ^ SALT).
SALT = 0x5DEECE66D


class SpeculativeSampler(SeededSampler):
    OPTIONS = (
        BuildOption("acceptance", str, "exact", "which guesses a verifying pass keeps: 'exact' "
                    "(those the engine draws itself: the tokens of speculative_tokens=0) or "
                    "'rejection' (the textbook rule: the same distribution, other tokens)"),
    )

    def __init__(self, num_lanes: int, device, acceptance: str = "exact", *, argmax=None):
        if acceptance not in ACCEPTANCE:
            raise BuildError(f"acceptance must be one of {', '.join(ACCEPTANCE)}, "
                             f"got {acceptance!r}")
        super().__init__(num_lanes, device, argmax=argmax)
        self.acceptance = acceptance

    @classmethod
    def assemble(cls, a) -> "SpeculativeSampler":
        return cls(a.kv.num_lanes, a.device, a.options["acceptance"], argmax=a.model.ops.argmax)

    def settle(self, requests: Sequence, logits: torch.Tensor,
               drawn: torch.Tensor) -> torch.Tensor:
        """Its draws read the lanes' settings and the logits alone, so a decode launched ahead
        of a step's read-back drew what the step in order would: drawn, as it is."""
        return drawn

    def draws_rows_alone(self, requests: Sequence) -> bool:
        """Whether what a verifying pass keeps follows from each row's own draw alone (agreeing):
        under exact acceptance, or where every request is greedy (both rules then keep the
        guesses equal to the argmax). Rejection needs the rows' probabilities (accept)."""
        return self.acceptance == "exact" or all(
            self.settings.host_np["temperature"][r.lane] <= 0 for r in requests)

    def agreeing(self, guesses: Sequence[Sequence[int]],
                 drawn: Sequence[list[int]]) -> list[list[int]]:
        """Per request, the tokens it keeps, given the engine's own draw after its last token
        and after each of its guesses (drawn[i] holds len(guesses[i]) + 1)."""
        return [keep_agreeing(g, row) for g, row in zip(guesses, drawn)]

    def accept(self, logits: torch.Tensor, requests: Sequence,
               guesses: Sequence[Sequence[int]]) -> list[list[int]]:
        """Per request, the tokens it keeps, from logits [sum(len(g) + 1), vocab]: request i's
        rows follow its last token and each of its guesses, which its sequence holds at its end
        during the pass (its j-th row draws at position len(sequence) - len(guesses[i]) + j)."""
        counts = [len(g) + 1 for g in guesses]
        lanes = torch.tensor([r.lane for r, n in zip(requests, counts) for _ in range(n)])
        positions = torch.tensor([len(r.sequence) - n + 1 + j for r, n in zip(requests, counts)
                                  for j in range(n)])
        # the lanes' settings (bind() wrote them), a row each, in draw.sample's order; read on
        # the host, so the greedy check below waits for no device
        host = [t[lanes] for t in self.settings.host.values()]
        if not bool((host[0] > 0).any()):
            # all greedy, where both rules keep the guesses equal to the argmax (a greedy p is
            # all on it): the argmax alone, since the filters' sorts and the hashes over the
            # whole vocabulary would cost a CPU more than the pass saves (v11's draw says so)
            return [keep_agreeing(g, row) for g, row in
                    zip(guesses, split(self.argmax(logits).tolist(), counts))]
        settings = [t.to(logits.device) for t in host]
        position = positions.to(logits.device)
        own = draw.sample(logits, *settings, position).tolist()  # the engine's own draws
        if self.acceptance == "exact":
            return [keep_agreeing(g, row) for g, row in zip(guesses, split(own, counts))]
        guessed = [t for g in guesses for t in list(g) + [0]]  # a last row guesses nothing
        kept, redrawn = rejection(logits, settings, position, torch.tensor(guessed,
                                                                          device=logits.device))
        return [keep_accepted(g, a, r, o) for g, a, r, o in
                zip(guesses, split(kept.tolist(), counts), split(redrawn.tolist(), counts),
                    split(own, counts))]


def split(values: list, counts: Sequence[int]) -> list[list]:
    out, start = [], 0
    for n in counts:
        out.append(values[start:start + n])
        start += n
    return out


def keep_agreeing(guesses: Sequence[int], own: list[int]) -> list[int]:
    """Exact acceptance: the guesses up to the first that differs from the engine's own draw at
    its position, then the engine's draw there (or after the last guess)."""
    j = 0
    while j < len(guesses) and guesses[j] == own[j]:
        j += 1
    return own[:j + 1]


def keep_accepted(guesses: Sequence[int], kept: list[bool], redrawn: list[int],
                  own: list[int]) -> list[int]:
    """Rejection acceptance: the guesses up to the first rejected, then its redraw from the
    residual; where none is rejected, the engine's own draw after the last guess."""
    for j in range(len(guesses)):
        if not kept[j]:
            return list(guesses[:j]) + [redrawn[j]]
    return list(guesses) + [own[len(guesses)]]


def rejection(logits: torch.Tensor, settings: list[torch.Tensor], position: torch.Tensor,
              guessed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: whether its guess is kept (u < p(guess), u a uniform of (seed ^ SALT, position)),
    and the token drawn from p without the guess (the residual max(0, p - q) for q all on the
    guess), by the same race as the draw. A greedy row's p is all on its argmax."""
    temperature, top_k, top_p, min_p, seed = settings
    logits = logits.float()
    p = draw.filter_logits(logits, temperature, top_k, top_p, min_p).softmax(dim=-1)
    greedy = torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(p.dtype)
    p = torch.where((temperature > 0)[:, None], p, greedy)
    u = draw.uniforms(seed ^ SALT, position, 1)[:, 0]
    kept = u < p.gather(-1, guessed[:, None])[:, 0].double()
    residual = p.scatter(-1, guessed[:, None], 0.0)
    log_noise = (-draw.uniforms(seed, position, logits.shape[-1]).log()).log().float()
    redrawn = (residual.log() - log_noise).argmax(dim=-1)
    return kept, redrawn
