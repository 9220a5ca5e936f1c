"""v15's runner, whose decodes may verify guesses: one pass computes each decoding request's
last token and its guesses, and the sampler keeps the guesses the engine's own draws agree
with, and one token of its own. The K/V of the rows after the kept ones is rolled back.

The pass, graphs on: each row is a decode lane of its own, in a graph of its own (one per
bucket of rows and way of drawing): row j of a request feeds its token at its position, with the
request's block table, attends over the rows up to its own (the guesses before it were stored
by this same pass, before attention), and draws as a decode step draws, with its request's
settings at the position after it. So a verifying pass is a decode step of k + 1 rows a
request: its inputs are a row each (no context listed on the host), its LM head and draws are
inside the graph, and the host reads back only the draws. Where the sampler cannot keep guesses
from the rows' own draws alone (rejection acceptance, a grammar's masks), and with graphs off,
the rows are a slice instead (v12's pass over the paged cache, in v15's slice graph) and the
sampler reads their logits (accept).

Where the batch guesses nothing this is v15's runner, graphs and all."""
from __future__ import annotations

from collections import Counter
from functools import cached_property, partial
from typing import Sequence

import numpy as np
import torch

from ..v16_tensor_parallel import (ChunkedRunner, DecodeBuffers, GraphRunner, default_buckets,
                                   metadata)

PAD = -1  # fills a row of kept tokens out to guesses + 1
# The decode inputs' fields since v08, in the order the decode step takes them (inputs.tensors).
FIELDS = ("token_ids", "positions", "block_tables", "context_lens", "slot_mapping")
# The ways a verify graph draws: v11's. A pass whose rows a grammar masks is a slice instead.
WAYS = ("sample", "greedy")


class SpeculativeRunner(ChunkedRunner):
    SERVES = ChunkedRunner.SERVES + ("speculation_stats",)
    verify_graphs_ready = False  # captured on a GPU before the first decode step

    def __init__(self, *parts, proposer, verify_rows: int = 0, **options):
        """v15's parts and the proposer; verify_rows: the most rows a verifying pass computes
        (the guesses a step may make, plus one, times the requests that may guess at once; 0
        where no step guesses)."""
        super().__init__(*parts, **options)
        self.proposer, self.verify_rows = proposer, verify_rows
        self.meter = Counter(verify_passes=0, requests=0, proposed=0, accepted=0, tokens=0,
                             graph_passes=0)

    @classmethod
    def assemble(cls, a) -> "SpeculativeRunner":
        k, guessing = a.options["speculative_tokens"], min(a.options["speculate_below"],
                                                           a.kv.num_lanes)
        return cls(a.checkpoint, a.device, a.dtype, a.model, a.kv, a.inputs, a.sampler,
                   proposer=a.proposer, use_graphs=a.options["use_graphs"],
                   verify_rows=(k + 1) * guessing if k else 0)

    def run(self, batch) -> torch.Tensor:
        """v15's tokens, one a request, where the batch guesses nothing; else, on the host, a row
        a request of the tokens it keeps (padded with PAD to guesses + 1): the decodes' from one
        verifying pass, then the prefills' first tokens. Where the proposer has no guess for any
        decode, the step is v15's (its decode graph), its tokens padded into rows."""
        if not batch.guesses:
            return super().run(batch)
        proposals = self.proposals(batch.decode, batch.guesses)
        if not any(proposals):
            return torch.tensor([[t] + [PAD] * batch.guesses
                                 for t in super().run(batch).tolist()])
        rows = self.verify(batch.decode, proposals, batch.guesses)
        if batch.prefill:
            rows += [[t] + [PAD] * batch.guesses for t in self.prefill_tokens(batch).tolist()]
        return torch.tensor(rows)

    def step_lanes(self, requests: Sequence):
        """v07's decode step. On a GPU, before the first, every verify graph is captured too
        (a verifying pass draws as a decode step does, one way or the other): a CUDA capture
        stalls its step 0.1-0.6 s a graph, so all of them at once, where v07 captures its own,
        rather than at some verifying step mid-run."""
        if self.verify_rows and self.use_graphs and self.device.type == "cuda" \
                and not self.verify_graphs_ready:
            self.verify_graphs_ready = True
            for graphs in self.verify_graphs.values():
                graphs.capture_all()
        return super().step_lanes(requests)

    def proposals(self, requests: Sequence, k: int) -> list[list[int]]:
        """The proposer's guesses, at most k, and no more than each request may still take after
        the token the pass gives it anyway."""
        return [list(p[:max(r.params.max_new_tokens - len(r.tokens) - 1, 0)])
                for r, p in zip(requests, self.proposer.propose(requests, k), strict=True)]

    @torch.inference_mode()
    def verify(self, requests: Sequence, proposals: Sequence[Sequence[int]],
               k: int) -> list[list[int]]:
        """The proposals, as far as free blocks hold their rows, computed with each request's
        last token in one pass; per request the tokens it keeps, padded with PAD to k + 1."""
        self.kv.grow(requests)  # each one's own row: the scheduler kept room for it
        guesses = []
        for request, proposal in zip(requests, proposals, strict=True):
            guess = list(proposal[:self.kv.extend(request, len(proposal))])
            request.guess(guess)
            guesses.append(guess)
        if self.use_graphs and self.sampler.draws_rows_alone(requests):
            kept = self.sampler.agreeing(guesses, self.draw_rows(requests))
        else:
            hidden, _ = self.forward_rows(requests, [len(r.sequence) for r in requests])
            kept = self.sampler.accept(self.model.lm_head(self.weights, hidden).float(),
                                       requests, guesses)
        for request, guess, tokens in zip(requests, guesses, kept):
            # rows kept: its last token's and those of the guesses it keeps (all but the last
            # token kept, which is the engine's own and has no row yet)
            keep = len(request.sequence) - len(guess) + len(tokens) - 1
            self.kv.roll_back(request, keep)
            request.settle()
            request.computed = keep
        self.meter.update(verify_passes=1, requests=len(requests),
                          proposed=sum(map(len, guesses)),
                          accepted=sum(len(t) - 1 for t in kept), tokens=sum(map(len, kept)))
        return [t + [PAD] * (k + 1 - len(t)) for t in kept]

    def draw_rows(self, requests: Sequence) -> list[list[int]]:
        """Per request, the engine's own draw after each of its uncomputed tokens (its last
        known token and its guesses): one replay of the verify graph whose rows are those
        tokens, each a decode lane (see above)."""
        counts = [len(r.sequence) - r.computed for r in requests]
        rows = [(r, p) for r in requests for p in range(r.computed, len(r.sequence))]
        # each request's table padded once, then repeated for its rows
        tables = np.full((len(requests), self.verify_buffers.device_tensors["block_tables"]
                          .shape[1]), metadata.NULL_BLOCK, dtype=np.int32)
        for i, r in enumerate(requests):
            table = self.kv.block_table(r.id)
            tables[i, :len(table)] = table
        self.verify_buffers.write(range(len(rows)), {
            "token_ids": [r.sequence[p] for r, p in rows], "positions": [p for _, p in rows],
            "context_lens": [p + 1 for _, p in rows],
            "slot_mapping": [self.kv.slot(r.id, p) for r, p in rows],
            "block_tables": np.repeat(tables, counts, axis=0),
            "owners": [r.lane for r, _ in rows]})
        way = self.sampler.variant(self.kv.lanes_in_use(), requests)
        _, drawn = self.verify_graphs[way].run(len(rows))
        self.meter["graph_passes"] += 1
        ends = np.cumsum(counts).tolist()
        drawn = drawn[:len(rows)].tolist()
        return [drawn[end - n:end] for end, n in zip(ends, counts)]

    @cached_property
    def verify_buffers(self):
        """The verify graphs' inputs: the decode inputs' fields, a row each, and each row's
        owner: the lane of its request, whose sampler settings it draws with."""
        fields = {name: (tuple(t.shape[1:]), t.dtype)
                  for name, t in zip(FIELDS, self.inputs.tensors, strict=True)}
        fields["owners"] = ((), torch.long)
        return DecodeBuffers(self.verify_rows, self.device, fields)

    @cached_property
    def verify_graphs(self) -> dict[str, GraphRunner]:
        """One set of graphs per way of v11's draw, one graph per bucket of rows."""
        return {way: GraphRunner(partial(self.verify_step, way), self.verify_buffers.tensors,
                                 buckets=default_buckets(self.verify_rows),
                                 constants=(self.weights, self.kv.kv,
                                            self.sampler.lane_tensors(way)),
                                 enabled=self.use_graphs)
                for way in WAYS}

    def verify_step(self, way: str, *tensors: torch.Tensor):
        """What a verify graph holds: the decode step over its rows, then each row's draw with
        its owner's settings at the position after its token (as captured_step draws)."""
        n = len(self.inputs.tensors)
        logits = self.decode_step(*tensors[:n])
        settings = [t.index_select(0, tensors[n]) for t in self.sampler.lane_tensors(way)]
        return logits, self.sampler.draw_lanes(way, logits, tensors[1] + 1, *settings)

    def speculation_stats(self) -> dict[str, int]:
        return dict(self.meter)
