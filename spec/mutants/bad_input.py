"""Bad-input atomicity: a refused or interrupted call leaves the engine as it was. Each mutant still
refuses what it should, with the right message; what it gets wrong is what it leaves behind."""
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
SLOT_CHECK = "        if len(prompt) + params.max_new_tokens > self.runner.cache.max_len:\n"
POLICY_CHECK = ("        self.scheduler.policy.check(Request(-1, prompt, params))"
                "  # reads prompt and params only\n")


def engine(version: str) -> str:
    return f"{version}/engine.py"


MUTANTS = [
    Mutant("v03-generate-queues-each-prompt-as-it-checks-it", "bad-input atomicity", (
        Edit(engine("v03_request_states"), CHECK_ALL_THEN_QUEUE, QUEUE_AS_CHECKED),),
        (GENERATE,), ("v03",),
        "generate queues prompt by prompt, so the good ones before a bad one stay queued"),
    Mutant("v04-step-budget-checked-only-when-queued", "bad-input atomicity", (
        Edit(engine("v03_request_states"), POLICY_CHECK, ""),),
        (GENERATE,), ("v04",),
        "the max_step_tokens refusal comes from Scheduler.add, after earlier prompts are queued"),
    Mutant("v05-generate-queues-each-prompt-as-it-checks-it", "bad-input atomicity", (
        Edit(engine("v05_decode_slots"), SLOT_CHECK,
             SLOT_CHECK.replace("if ", "if self.queuing and ")),
        Edit(engine("v05_decode_slots"), "    def slot_of(self, request_id) -> int | None:\n",
             "    queuing = False\n\n"
             "    def _enqueue(self, prompt, params):  # the slot's limit checked only here\n"
             "        self.queuing = True\n"
             "        try:\n"
             "            self._check_fits(prompt, params)\n"
             "        finally:\n"
             "            self.queuing = False\n"
             "        return super()._enqueue(prompt, params)\n\n"
             "    def slot_of(self, request_id) -> int | None:\n"),),
        (GENERATE,), ("v05",),
        "a prompt past max_model_len refuses the call after the prompts before it are queued"),
    Mutant("v06-stream-queues-before-it-checks", "bad-input atomicity", (
        Edit(engine("v03_request_states"),  # the stream v06 runs
             "        request_id = self.add_request(prompt, params)\n"
             "        request, sent = self.requests[request_id], 0\n",
             "        request_id = self._enqueue(prompt, params)\n"
             "        self._checked(prompt, params)\n"
             "        request, sent = self.requests[request_id], 0\n"),),
        (STREAM,), ("v06",), "a refused stream leaves its request queued"),
    Mutant("v07-interrupted-generate-keeps-its-requests", "bad-input atomicity", (
        Edit(engine("v03_request_states"),  # the generate v07 runs
             "            for i in ids:\n"
             "                self.abort(i)\n"
             "                del self.requests[i]\n",
             "            pass\n"),),
        (INTERRUPTED,), ("v07",),
        "a generate interrupted after its prefill leaves its requests running, holding cache"),
    Mutant("v08-pool-checked-only-when-queued", "bad-input atomicity", (
        Edit(engine("v08_paged_gqa_py"), "    def block_tables(self) -> dict:\n",
             "    def _check_fits(self, prompt, params):  # up front, only v04's limits\n"
             "        policy = self.scheduler.policy\n"
             "        self.scheduler.policy = policy.inner\n"
             "        try:\n"
             "            super()._check_fits(prompt, params)\n"
             "        finally:\n"
             "            self.scheduler.policy = policy\n\n"
             "    def block_tables(self) -> dict:\n"),),
        (GENERATE,), ("v08",),
        "up front only v04's limits: the pool refuses a prompt once those before it are queued"),
]
