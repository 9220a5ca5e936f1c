"""v15's engine on every rank, rank 0's driven and the others following it.

Every rank runs the same scheduler, K/V manager and sampler over the same events, as SGLang's
tensor-parallel workers do: v15's parts stay as they are, and no block table crosses a rank.
Only rank 0's engine is called; what changes state there (a request queued, aborted, a step) is
recorded as it happens, and each step sends the others that step's plan: the events since the
last step, then the step, one broadcast of a small list. Given the same events, every rank's
scheduler makes the same batches, its pool the same tables, and its sampler the same draws from
the same logits (the LM head's slices are gathered on every rank), so the ranks stay in step
without sending tokens. A request without a seed gets one on rank 0, sent with it.

A call rank 0 refuses must be refused alike everywhere, or the ranks fall out of step (a rank
left with a request or a pass the others lack meets their next collective with another size).
So rank 0 refuses before anything is sent what the others would not refuse as it does: a call
whose arguments cannot be pickled (it could never reach them), and a kv_cache or ragged pass
that would fail with another error than a RequestError (the only one they skip); the calls that
compute nothing (release, abort) are run or checked on rank 0 before they are sent.

The plan goes over the group's gloo ranks even beside NCCL (a CPU broadcast of a pickled list,
no GPU sync)."""
from __future__ import annotations

import pickle

import torch
import torch.distributed as dist

from torchlet.contract import COMPUTING, RequestError, TorchletError

from ..v15_chunked_prefill import OverlapEngine, graphs
from .model import collective

# The calls a plan carries that compute, each of which sends the plan at once: the loop's passes
# as its Protocol names them (contract COMPUTING: a pass added there and not sent here fails
# spec/test_part_protocols.py), and this engine's own gather of the shards. The others (enqueue,
# abort, release) wait in the plan.
COMPUTE = COMPUTING + ("shards",)


class TensorParallelEngine(OverlapEngine):
    """v14's loop (v15 keeps it), its state-changing calls sent to the other ranks."""

    def __init__(self, *parts, shard, **options):
        """v14's parts, and the model's shard: this rank's place among the ranks."""
        super().__init__(*parts, **options)
        self.shard = shard
        self.rank, self.world_size = shard.rank, shard.world
        self.pending: list[tuple] = []
        self.closed = False
        self.plans = None
        if self.world_size > 1 and dist.get_backend() != "gloo":
            self.plans = dist.new_group(backend="gloo")  # every rank builds, so every rank calls

    @classmethod
    def assemble(cls, a) -> "TensorParallelEngine":
        return cls(a.runner, a.kv, a.scheduler, a.sampler, a.request, inputs=a.inputs,
                   overlap=a.options["overlap"], shard=a.model.shard)

    # -- rank 0: record and send ------------------------------------------------------------------

    def record(self, name: str, *args) -> None:
        """Rank 0 with others: note a call for the plan; a computing one sends the plan now. A
        call that cannot be pickled is refused first: sent later, it would fail the whole plan,
        and the calls noted before it would reach no other rank."""
        if self.world_size == 1 or self.rank != 0:
            return
        if self.closed:
            raise TorchletError("tensor parallel: this engine is closed; its ranks have stopped")
        try:
            pickle.dumps(args)
        except Exception as e:  # noqa: BLE001 - whatever pickling a caller's object raises
            raise RequestError(f"tensor parallel: {name}'s arguments cannot be sent to the other "
                               f"ranks ({type(e).__name__}: {e})") from None
        self.pending.append((name, args))
        if name in COMPUTE:
            plan, self.pending = self.pending, []
            self.broadcast([plan])

    def broadcast(self, box: list) -> None:
        collective(dist.broadcast_object_list, box, src=0, group=self.plans)

    def close(self) -> None:
        if self.world_size > 1 and self.rank == 0 and not self.closed:
            self.pending.append(("close", ()))
            plan, self.pending = self.pending, []
            self.closed = True
            self.broadcast([plan])

    def _enqueue(self, prompt, params):
        params = self.sampler.prepare(params)  # the seed every rank draws with
        self.record("enqueue", list(prompt), params)
        return super()._enqueue(prompt, params)

    def abort(self, request_id: int) -> None:
        request = self._request(request_id)  # an unknown id is refused before it is sent
        self.record("abort", request_id)
        self.scheduler.abort(request)

    def step(self):
        self.record("step")
        return super().step()

    def prefill(self, request_ids, prompts):
        self.refuse_unpaired(request_ids, prompts)
        self.record("prefill", request_ids, prompts)
        return super().prefill(request_ids, prompts)

    def decode(self, request_ids, sequences):
        self.refuse_unpaired(request_ids, sequences, cached=True)
        self.record("decode", request_ids, sequences)
        return super().decode(request_ids, sequences)

    def refuse_unpaired(self, request_ids, rows, cached: bool = False) -> None:
        """Rank 0 with others: what a kv_cache pass would fail on with another error than a
        RequestError, refused before anything is sent: ids and token lists that do not pair up,
        an id that is no dict key, a decode of an id without a cache."""
        if self.world_size == 1 or self.rank != 0:
            return
        try:
            ids, rows = list(request_ids), list(rows)
            uncached = [r for r in ids if r not in self.direct]
        except TypeError as e:
            raise RequestError(f"a pass takes lists of request ids and token lists ({e})") from None
        if len(ids) != len(rows):
            raise RequestError(f"{len(ids)} request ids for {len(rows)} token lists")
        if cached and uncached:
            raise RequestError(f"decode of requests without a cache: {uncached!r}")

    def refuse_unbatchable(self, token_ids, req_indptr) -> None:
        """Rank 0 with others: a ragged batch the pass would fail on before its own checks (token
        ids that make no integer tensor, a req_indptr that is no tensor), refused before
        anything is sent."""
        if self.world_size == 1 or self.rank != 0:
            return
        try:
            torch.tensor(list(token_ids), dtype=torch.long)
        except (TypeError, ValueError, RuntimeError) as e:
            raise RequestError(f"token_ids must be a list of token ids ({e})") from None
        if not isinstance(req_indptr, torch.Tensor):
            raise RequestError(f"req_indptr must be a tensor, got {type(req_indptr).__name__}")

    def release(self, request_id) -> None:
        super().release(request_id)  # what it fails on (an id that is no dict key) is not sent
        self.record("release", request_id)

    def logits(self, token_ids):
        self.record("logits", token_ids)
        return super().logits(token_ids)

    def forward_ragged(self, token_ids, req_indptr):
        self.refuse_unbatchable(token_ids, req_indptr)
        self.record("forward_ragged", token_ids, req_indptr)
        return super().forward_ragged(token_ids, req_indptr)

    def shards(self) -> list[dict]:
        """What each rank holds, gathered from every rank: its ranges of the full model's query
        heads, KV heads, intermediate rows and vocabulary rows, and its bytes of weights and
        K/V."""
        self.record("shards")
        return self.gather_shards()

    def gather_shards(self) -> list[dict]:
        shard = self.shard
        mine = {part: [r.start, r.stop] for part, r in (
            ("heads", shard.heads), ("kv_heads", shard.kv_heads),
            ("intermediate", shard.intermediate), ("vocab", shard.vocab))}
        mine.update(weights=storage_bytes(self.runner.weights), kv=storage_bytes(self.kv.kv))
        if self.world_size == 1:
            return [mine]
        found = [None] * self.world_size
        collective(dist.all_gather_object, found, mine, group=self.plans)
        return found

    # -- the other ranks: follow ------------------------------------------------------------------

    def follow(self) -> None:
        """Run rank 0's plans, call by call, until it closes. A call rank 0 refused with a
        RequestError is refused here alike (the same checks of the same state), so it is
        skipped; an aborted request is dropped, since no caller reads it here."""
        if self.rank == 0:
            raise TorchletError("follow() runs on the ranks other than 0; rank 0 is driven")
        while True:
            box = [None]
            self.broadcast(box)
            for name, args in box[0]:
                if name == "close":
                    return
                if name == "abort":
                    request = self.requests.pop(args[0], None)
                    if request is not None:
                        self.scheduler.abort(request)
                    continue
                # This engine's own methods, a later version's overrides included: recording
                # and the refusals do nothing on a rank other than 0.
                call = getattr(self, {"enqueue": "_enqueue", "shards": "gather_shards"
                                      }.get(name, name))
                try:
                    call(*args)
                except RequestError:
                    pass
                if name == "step":  # rank 0's caller reads its finished outputs; none here
                    for request in [r for r in self.requests.values() if r.finished]:
                        del self.requests[request.id]


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind the tensors in a nest of them (a tied LM head and
    its embedding counted once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in graphs.tensors_in(tensors)}
    return sum(storages.values())
