"""Preemption (v08, and v14's steps ahead): a step preempts only as many requests as its tokens
need blocks for, a preempted request is readmitted before the requests that arrived after it,
and a step whose tokens a decode ahead computed preempts none of their requests. Each mutant
keeps every request's tokens (a preempted request is recomputed to the same ones), so only the
specs that watch who is preempted and who is admitted notice."""
from spec.mutants import Edit, Mutant

SCHEDULER = "v08_paged_gqa_py/scheduler.py"
OVERLAP = "v14_overlap/loop.py"
FEWEST = ("spec/test_v08_paged_engine.py::test_preemption_takes_the_fewest_requests_the_step_"
          "needs_and_readmits_them_before_later_ones")
AHEAD = ("spec/test_v14_overlap.py::test_a_step_after_a_decode_ahead_preempts_none_of_the_"
         "requests_that_decode_ran_for")

PROPERTY = "preemption"

MUTANTS = [
    Mutant("v08-preempts-one-more-than-needed", PROPERTY, (
        Edit(SCHEDULER, "            self.preempt(victim)\n"
                        "        return Batch(decode=decode, prefill=batch.prefill)",
             "            self.preempt(victim)\n"
             "        if 1 < len(decode) < len(batch.decode):  # and one more, to be safe\n"
             "            self.preempt(decode.pop())\n"
             "        return Batch(decode=decode, prefill=batch.prefill)"),),
        (FEWEST,), ("v08",),
        "a step that preempts takes one request more than its tokens need (while another is "
        "left to decode)"),
    Mutant("v08-preempted-request-queued-at-the-back", PROPERTY, (
        Edit(SCHEDULER, "        self.waiting.appendleft(request)",
             "        self.waiting.append(request)"),),
        (FEWEST,), ("v08",),
        "a preempted request waits behind the requests that arrived after it"),
    Mutant("v14-preempts-after-a-decode-ahead", PROPERTY, (
        Edit(OVERLAP, "        batch = self.scheduler.schedule(reserved=ahead is not None)",
             "        batch = self.scheduler.schedule()  # v08's preemption, whatever ran ahead"),),
        (AHEAD,), ("v14",),
        "a step after a decode ahead runs v08's preemption: a request whose next token has its "
        "block is thrown back and recomputed"),
]
