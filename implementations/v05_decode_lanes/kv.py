"""Decode lanes and the K/V memory behind them. A request takes the lowest free lane when it is
prefilled and keeps it until it finishes; its K/V rows live in that lane's max_len rows, and the
lane is its row in every decode pass. Each lane reserves max_len rows whatever the request uses: the
waste that memory taken as the tokens come (in blocks) would not have."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from torchlet.contract import MAX_LEN, MAX_RUNNING, BuildOption, ModelConfig, RequestError

DEFAULT_SLOTS = 8


class LaneKV:
    # Listed whole, not added to v04's: max_running now counts lanes and has no default of its
    # own (the policy, built after this part, reads the count it settles on).
    OPTIONS = (
        BuildOption("max_lanes", int, None, "decode lanes, the requests running at once "
                    f"(None: max_running, else {DEFAULT_SLOTS})", MAX_RUNNING, minimum=1),
        BuildOption("max_running", int, None, "v04's name for the lane count; given with "
                    "max_lanes, the two must agree", minimum=1),
        BuildOption("max_model_len", int, None, "rows a lane holds: the longest prompt + output "
                    "(None: the model's context)", MAX_LEN, minimum=1),
    )
    SERVES = ("lane_of", "num_lanes")  # the decode_lanes capability, served on the engine

    def __init__(self, config: ModelConfig, num_lanes: int, max_len: int, device, dtype):
        self.num_lanes, self.max_len = num_lanes, max_len
        self.held: dict[Hashable, object] = {}  # request id -> the request holding a lane
        self.kv = self.memory(config, device, dtype)

    @classmethod
    def assemble(cls, a) -> "LaneKV":
        return cls(a.config, *cls.limits(a), a.device, a.dtype)

    @staticmethod
    def limits(a) -> tuple[int, int]:
        """The lane count and the rows a request may hold, or TypeError naming a bad option.
        The lanes bound the running requests, so max_running (v04's name) is accepted as the
        lane count, and the policy reads the count settled here."""
        lanes, running = a.options["max_lanes"], a.options["max_running"]
        given = [n for n in (lanes, running) if n is not None]  # 0 is no default
        if len(given) == 2 and lanes != running:
            raise TypeError(f"max_lanes={lanes} and max_running={running} disagree: the "
                            f"lanes are the running requests")
        max_len, context = a.options["max_model_len"], a.config.max_position
        if max_len is not None and not 1 <= max_len <= context:
            raise TypeError(f"max_model_len must be in 1..{context}, got {max_len}")
        a.options["max_running"] = given[0] if given else DEFAULT_SLOTS
        return a.options["max_running"], max_len or context

    def memory(self, config: ModelConfig, device, dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (k, v) [lanes + 1, max_len, KV, D]: one lane more than the pass runs, the sink that
        inactive decode lanes write into."""
        shape = (self.num_lanes + 1, self.max_len, config.num_kv_heads, config.head_dim)
        return [(torch.zeros(shape, device=device, dtype=dtype),
                 torch.zeros(shape, device=device, dtype=dtype))
                for _ in range(config.num_layers)]

    def check(self, prompt: list[int], params) -> None:
        """Refuse a request that could outgrow a lane's rows."""
        if len(prompt) + params.max_new_tokens > self.max_len:
            raise RequestError(
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
                f"exceeds max_model_len={self.max_len}, the rows a lane holds")

    def place(self, requests: Sequence) -> None:
        """Each request takes the lowest free lane (request.lane); RequestError, taking none,
        unless all of them get one."""
        if len(requests) > self.num_free():
            raise RequestError(f"{len(requests)} requests to prefill but only {self.num_free()} "
                               f"free decode lanes")
        for request in requests:
            request.lane = self.free_lane(request.id)
            self.held[request.id] = request

    def free_lane(self, request_id: Hashable) -> int:
        """The lowest lane nobody holds."""
        if request_id in self.held:
            raise RequestError(f"request {request_id!r} already holds lane "
                               f"{self.held[request_id].lane}")
        taken = set(self.lanes_in_use())
        return next(s for s in range(self.num_lanes) if s not in taken)

    def lane_of(self, request_id: Hashable) -> int | None:
        """The decode lane the request holds, None while waiting or once finished."""
        request = self.held.get(request_id)
        return None if request is None else request.lane

    def num_free(self) -> int:
        return self.num_lanes - len(self.held)

    def num_tokens(self, request_id: Hashable) -> int:
        request = self.held.get(request_id)
        return 0 if request is None else request.computed

    def total_tokens(self) -> int:
        return sum(r.computed for r in self.held.values())

    def lanes_in_use(self) -> list[int]:
        return [r.lane for r in self.held.values()]

    def destinations(self, requests: Sequence) -> list[int]:
        """Where a prefill of these placed requests stores their rows, as the model's prefill
        pass takes it: each request's lane."""
        return [r.lane for r in requests]

    def free(self, request_id: Hashable) -> None:
        """The request gives its lane and K/V back (nothing of it is computed any more)."""
        request = self.held.pop(request_id, None)
        if request is not None:
            request.lane, request.computed = None, 0

    def kv_of(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the request's rows: per layer (k, v), each [tokens, KV, D]."""
        if request_id not in self.held:
            raise RequestError(f"request {request_id!r} has no cache")
        s, n = self.lane_of(request_id), self.num_tokens(request_id)
        return [(k[s, :n].clone(), v[s, :n].clone()) for k, v in self.kv]
