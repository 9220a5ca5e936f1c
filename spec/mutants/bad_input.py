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
        Edit(engine("v05_decode_slots"), CHECK_ALL_THEN_QUEUE, QUEUE_AS_CHECKED),),
        (GENERATE,), ("v05",),
        "a prompt past max_model_len refuses the call after the prompts before it are queued"),
    Mutant("v06-stream-queues-before-it-checks", "bad-input atomicity", (
        Edit(engine("v06_static_buffers"),
             "        request_id = self.add_request(prompt, params)\n"
             "        request, sent = self.requests[request_id], 0\n",
             "        request_id = self._enqueue(prompt, params)\n"
             "        self._checked(prompt, params)\n"
             "        request, sent = self.requests[request_id], 0\n"),),
        (STREAM,), ("v06",), "a refused stream leaves its request queued"),
    Mutant("v07-interrupted-generate-keeps-its-requests", "bad-input atomicity", (
        Edit(engine("v07_cuda_graph"),
             "            for i in ids:\n"
             "                self.abort(i)\n"
             "                del self.requests[i]\n",
             "            pass\n"),),
        (INTERRUPTED,), ("v07",),
        "a generate interrupted after its prefill leaves its requests running, holding cache"),
    Mutant("v08-pool-checked-only-when-queued", "bad-input atomicity", (
        Edit(engine("v08_paged_gqa_py"), POLICY_CHECK,
             POLICY_CHECK.replace("policy.check", "policy.inner.check")),),
        (GENERATE,), ("v08",),
        "up front only v04's limits: the pool refuses a prompt once those before it are queued"),
]
