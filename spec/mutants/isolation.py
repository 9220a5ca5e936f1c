"""Request validation and isolation: a malformed setting is refused before anything is queued, and
a request whose own work fails inside a step fails alone, freeing what it held. Each mutant still
runs every well-formed request exactly as the reference does."""
from spec.mutants import Edit, Mutant

MODULE = "spec/test_v03_request_isolation.py"
MALFORMED = (f"{MODULE}::test_random_malformed_settings_are_refused_when_added_naming_the_"
             f"setting_and_never_reach_a_step")
FAILING = (f"{MODULE}::test_a_request_failing_in_a_step_ends_alone_frees_what_it_held_and_the_"
           f"others_get_their_tokens")
CHECK = ("        prompt = check_request(prompt, params, self.config, "
         "sampling=self.sampler.samples,\n"
         "                               grammar=self.sampler.constrains)\n")
CATCH = ("            try:\n"
         "                request.append(token)\n"
         "            except Exception as error:  # noqa: BLE001  (whatever its settings raise)\n"
         "                request.fail(error)\n")
LEAVING = "        finished = [r for r in batch.requests if r.finished]\n"

MUTANTS = [
    Mutant("v03-an-unchecked-field", "bad-input atomicity", (
        Edit("v03_request_states/loop.py", CHECK,
             '        unchecked = GenerationParams(**{**vars(params), "eos_token_ids": ()})\n'
             "        prompt = check_request(prompt, unchecked, self.config, "
             "sampling=self.sampler.samples,\n"
             "                               grammar=self.sampler.constrains)\n"),),
        (MALFORMED,), ("v03",),
        "eos_token_ids is left out of the check: eos_token_ids=2 is queued and fails at its first "
        "token"),
    Mutant("v14-a-failing-request-fails-the-step", "bad-input atomicity", (
        Edit("v03_request_states/scheduler.py", CATCH, "            request.append(token)\n"),),
        (FAILING,), ("v14",),
        "a request's stop check that raises escapes the step, taking the other requests with it"),
    Mutant("v08-a-failed-request-keeps-its-blocks", "bad-input atomicity", (
        Edit("v03_request_states/scheduler.py", LEAVING,
             "        finished = [r for r in batch.requests\n"
             "                    if r.finished and r.error is None]\n"),),
        (FAILING,), ("v08",),
        "a request that failed in a step leaves the batch but is never freed: it keeps its blocks"),
    Mutant("v03-a-taken-request-stays", "bad-input atomicity", (
        Edit("v03_request_states/loop.py",
             "        if request.finished:\n            del self.requests[request_id]\n"
             "        return request.output()\n",
             "        return request.output()\n"),),
        (f"{MODULE}::test_two_thousand_requests_leave_the_engine_once_taken_and_its_memory_"
         f"stays_bounded",), ("v03",),
        "take() leaves a finished request in the engine's table: a long-running server's "
        "memory grows with every request it served"),
]
