"""Bad-input atomicity: a refused or interrupted call leaves the engine as it was, refused with the
contract's error. Each mutant but the last still refuses what it should, with the right message;
what it gets wrong is what it leaves behind. The last lets a bad call through to fail elsewhere."""
from spec.mutants import Edit, Mutant

MODULE = "spec/test_v03_refusals.py"
GENERATE = (f"{MODULE}::"
            "test_every_refused_generate_leaves_nothing_and_the_next_call_computes_as_if_fresh")
STREAM = f"{MODULE}::test_every_refused_stream_queues_nothing"
INTERRUPTED = f"{MODULE}::test_a_generate_interrupted_half_way_takes_back_what_it_queued"
CHECK_ALL_THEN_QUEUE = (
    "        prompts = [self._checked(p, params) for p in check_prompts(prompts)]"
    "  # all, then queue\n"
    "        ids = [self._enqueue(p, params) for p in prompts]\n")
QUEUE_AS_CHECKED = "        ids = [self.add_request(p, params) for p in check_prompts(prompts)]\n"
ENGINE = "v03_request_states/loop.py"  # the loop every later version runs
POLICY_CHECK = ("        self.scheduler.check(self.request(-1, prompt, params))"
                "  # reads prompt and params\n")
SLOT_CHECK = ("    def check(self, prompt: list[int], params) -> None:\n"
              "        \"\"\"Refuse a request that could outgrow a lane's rows.\"\"\"\n"
              "        if len(prompt) + params.max_new_tokens > self.max_len:\n")
POOL_CHECK = "        self.inner.check(request)\n        self.kv.check_alone(request)\n"


MUTANTS = [
    Mutant("v03-generate-queues-each-prompt-as-it-checks-it", "bad-input atomicity", (
        Edit(ENGINE, CHECK_ALL_THEN_QUEUE, QUEUE_AS_CHECKED),),
        (GENERATE,), ("v03",),
        "generate queues prompt by prompt, so the good ones before a bad one stay queued"),
    Mutant("v04-step-budget-checked-only-when-queued", "bad-input atomicity", (
        Edit(ENGINE, POLICY_CHECK, ""),),
        (GENERATE,), ("v04",),
        "the max_step_tokens refusal comes from Scheduler.add, after earlier prompts are queued"),
    Mutant("v05-generate-queues-each-prompt-as-it-checks-it", "bad-input atomicity", (
        # StepEngine._checked asks LaneKV.check up front; the mutant's check only points the
        # request class at it, and a request made to be queued (not _checked's id -1) checks
        Edit("v05_decode_lanes/kv.py", SLOT_CHECK,
             "    def check(self, prompt: list[int], params, queued: bool = False) -> None:\n"
             "        from .request import LaneRequest\n"
             "        LaneRequest.kv = self  # the lane's limit checked only when queued\n"
             "        if queued and len(prompt) + params.max_new_tokens > self.max_len:\n"),
        Edit("v05_decode_lanes/request.py",
             "    lane: int | None = field(default=None, repr=False, compare=False)"
             "  # set by the K/V memory\n",
             "    lane: int | None = field(default=None, repr=False, compare=False)"
             "  # set by the K/V memory\n"
             "    kv = None\n\n"
             "    def __post_init__(self):\n"
             "        super().__post_init__()\n"
             "        if self.id != -1 and self.kv is not None:\n"
             "            self.kv.check(self.prompt, self.params, queued=True)\n"),),
        (GENERATE,), ("v05",),
        "a prompt past max_model_len refuses the call after the prompts before it are queued"),
    Mutant("v06-stream-queues-before-it-checks", "bad-input atomicity", (
        Edit(ENGINE,  # the stream v06 runs
             "        request_id = self.add_request(prompt, params)\n"
             "        request, sent = self.requests[request_id], 0\n",
             "        request_id = self._enqueue(prompt, params)\n"
             "        self._checked(prompt, params)\n"
             "        request, sent = self.requests[request_id], 0\n"),),
        (STREAM,), ("v06",), "a refused stream leaves its request queued"),
    Mutant("v07-interrupted-generate-keeps-its-requests", "bad-input atomicity", (
        Edit(ENGINE,  # the generate v07 runs
             "            for i in ids:\n"
             "                self.abort(i)\n"
             "                del self.requests[i]\n",
             "            pass\n"),),
        (INTERRUPTED,), ("v07",),
        "a generate interrupted after its prefill leaves its requests running, holding cache"),
    Mutant("v08-pool-checked-only-when-queued", "bad-input atomicity", (
        # StepEngine._checked asks the policy with a request of id -1; Scheduler.add with the
        # queued one
        Edit("v08_paged_gqa_py/policy.py", POOL_CHECK,
             "        self.inner.check(request)\n"
             "        if request.id == -1:  # up front, only v04's limits\n"
             "            return\n"
             "        self.kv.check_alone(request)\n"),),
        (GENERATE,), ("v08",),
        "up front only v04's limits: the pool refuses a prompt once those before it are queued"),
    Mutant("v03-decode-of-a-request-never-prefilled-reaches-the-runner", "bad-input atomicity", (
        Edit(ENGINE, "            if request is None:  # even a first token needs its prompt's "
                     "K/V: prefill makes them\n"
                     "                raise RequestError(f\"request {r!r} has no cache: prefill it "
                     "first\")\n"
                     "            cached = request.computed\n",
             "            cached = 0 if request is None else request.computed\n"),),
        ("spec/test_v02_kv_cache.py::"
         "test_decode_refuses_a_request_that_was_never_prefilled_even_for_its_first_token",),
        ("v03",), "a one-token decode of an id with no cache passes the count check and fails "
                  "inside the runner with an AttributeError, not the contract's error"),
]
