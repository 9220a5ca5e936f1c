"""Chunked prefill (v15): one token budget a step, decodes first, prompts in slices. Each mutant
breaks the budget, the order or a slice's rows in a way the tokens of an easy run may not show,
so the specs that read each step's stored rows must notice."""
from spec.mutants import Edit, Mutant

SCHEDULER = "v15_chunked_prefill/scheduler.py"
RUNNER = "v15_chunked_prefill/runner.py"
SLICES = "v15_chunked_prefill/slices.py"
PAGE = "spec/test_v15_chunked_prefill.py"
# The cheapest run that shows a slice's size and rows: a short prompt in slices of 4.
ALONE = (f"{PAGE}::test_a_prompt_alone_is_cut_into_slices_of_the_budget_and_gets_the_oracles_"
         f"tokens[v15_chunked_prefill-4]")
BESIDE = f"{PAGE}::test_every_running_decode_gets_its_row_in_every_step_beside_slices"
OLDEST = f"{PAGE}::test_the_rest_of_the_budget_goes_to_the_oldest_prompt_first"
CACHED = f"{PAGE}::test_a_cached_prefix_counts_as_computed"
LONG = f"{PAGE}::test_a_two_thousand_token_prompt_never_makes_a_step_compute_more_than_the_budget"
PREEMPTED = (f"{PAGE}::test_a_request_preempted_mid_prompt_starts_again_and_every_request_gets_"
             f"the_oracles_tokens")
SEEDED = f"{PAGE}::test_seeded_requests_sliced_draw_the_golden_samples"
DECODED = (f"{PAGE}::test_a_request_preempted_after_its_prompt_recomputes_its_prompt_and_tokens_"
           f"in_slices")
REPLAYED = (f"{PAGE}::test_a_slice_after_the_first_of_its_bucket_replays_a_graph_and_gets_the_"
            f"oracles_tokens")
WHOLE = (f"{PAGE}::test_a_step_computes_its_whole_budget_or_all_the_rows_there_are_under_any_"
         f"arrivals")
AT_ONCE = f"{PAGE}::test_a_prompt_waiting_is_sliced_at_once_and_no_request_waits_behind_it"
BUCKETS = (f"{PAGE}::test_slice_graphs_of_every_request_bucket_replay_and_give_the_oracles_"
           f"tokens")
COVERED = (f"{PAGE}::test_a_slice_bucket_rides_the_smallest_captured_graph_that_covers_it_until_"
           f"its_third_pass")
PICKED = (f"{PAGE}::test_a_slice_that_ends_a_prompt_picks_the_row_that_draws_by_an_index_made_on_"
          f"the_device[v15_chunked_prefill]")

PROPERTY = "chunked prefill"
V15 = ("v15",)

MUTANTS = [
    Mutant("v15-decodes-not-charged-to-the-budget", PROPERTY, (
        Edit(SCHEDULER, "        left = self.policy.budget - len(decode)\n",
             "        left = self.policy.budget\n"),),
        (BESIDE, LONG), V15,
        "the slices take the whole budget and the decodes come on top: a step computes more"),
    Mutant("v15-a-slice-takes-its-whole-prompt", PROPERTY, (
        Edit(SCHEDULER,
             "            rows.append(min(request.prefill_to - request.computed, left))\n",
             "            rows.append(request.prefill_to - request.computed)\n"),),
        (ALONE, LONG), V15,
        "a prompt is computed whole in the step it starts: v14's prefill under v15's name"),
    Mutant("v15-newest-prompt-sliced-first", PROPERTY, (
        Edit(SCHEDULER, "        while left > sum(r.prefill_to - r.computed for r in prefill) and "
                        "self.waiting and \\\n",
             "        while left and self.waiting and \\\n"),
        Edit(SCHEDULER, "            prefill.append(self.admit())\n",
             "            prefill.insert(0, self.admit())\n"),),
        (OLDEST,), V15,
        "requests are admitted while any row is left, and the rows go to the prompt admitted "
        "last first"),
    Mutant("v15-cached-prefix-computed-again", PROPERTY, (
        Edit(SCHEDULER, "        request.prefill_to = len(request.sequence)\n",
             "        request.prefill_to, request.computed = len(request.sequence), 0\n"),),
        (CACHED,), V15,
        "a shared prefix is not counted as computed: its rows are computed again (same tokens)"),
    Mutant("v15-slice-restarts-a-row-early", PROPERTY, (
        Edit(RUNNER, "            request.computed = end\n",
             "            request.computed = end - (end < len(request.sequence))\n"),),
        (ALONE, PREEMPTED), V15,
        "each slice but the last leaves its last row uncounted, so the next slice computes it "
        "again"),
    Mutant("v15-preempted-prompt-keeps-its-old-end", PROPERTY, (
        Edit(SCHEDULER, "        request.prefill_to = len(request.sequence)\n",
             "        request.prefill_to = request.prefill_to or len(request.sequence)\n"),),
        (DECODED,), V15,
        "a request preempted after its prompt recomputes only up to its prompt's end, then "
        "decodes from the wrong row"),
    Mutant("v15-first-token-drawn-after-a-middle-slice", PROPERTY, (
        Edit(SCHEDULER, "        self.sampled = [r for r, end in zip(self.prefill, self.ends) "
                        "if end == len(r.sequence)]\n",
             "        self.sampled = list(self.prefill)\n"),
        Edit(RUNNER,
             "            if end == len(request.sequence):\n                done.append(i)\n",
             "            done.append(i)\n            if end == len(request.sequence):\n"),),
        (ALONE, SEEDED), V15,
        "every slice draws a token from its last row, the middle ones too"),
    Mutant("v15-a-decode-starved-by-a-slice", PROPERTY, (
        Edit(SCHEDULER, "        left = self.policy.budget - len(decode)\n",
             "        if any(r.prefilling for r in self.running):\n"
             "            decode = decode[:1]  # a prompt being sliced holds the others back\n"
             "        left = self.policy.budget - len(decode)\n"),),
        (BESIDE,), V15,
        "while a prompt is sliced only the oldest running request decodes; the others wait"),
    Mutant("v15-one-prompt-admitted-at-a-time", PROPERTY, (
        Edit(SCHEDULER, "        while left > sum(r.prefill_to - r.computed for r in prefill) and "
                        "self.waiting and \\\n",
             "        while not prefill and self.waiting and \\\n"),),
        (WHOLE, AT_ONCE), V15,
        "a request waits while another prompt is being computed: the rows a prompt's last slice "
        "leaves go unused"),
    Mutant("v15-a-waiting-prompt-held-back-until-it-fits", PROPERTY, (
        Edit(SCHEDULER, "                self.policy.admits(self.waiting[0], self.running):\n",
             "                self.policy.admits(self.waiting[0], self.running) and (\n"
             "                    not self.running or len(self.waiting[0].sequence)\n"
             "                    <= left - sum(r.prefill_to - r.computed for r in prefill)):\n"),),
        (AT_ONCE, WHOLE), V15,
        "a prompt longer than the rows left waits for a step with room for all of it (v14's "
        "admission), unless nothing else runs"),
    Mutant("v15-a-long-prompt-blocks-admission", PROPERTY, (
        Edit(SCHEDULER, "        while left > sum(r.prefill_to - r.computed for r in prefill) and "
                        "self.waiting and \\\n",
             "        while left > sum(r.prefill_to - r.computed for r in prefill) and "
             "self.waiting and \\\n"
             "                not any(r.prefill_to > self.policy.budget for r in prefill) "
             "and \\\n"),),
        (AT_ONCE, WHOLE), V15,
        "while a prompt longer than the budget is computed, nobody else is admitted, even to the "
        "rows its last slice leaves"),
    Mutant("v15-a-row-held-back-per-prompt-in-progress", PROPERTY, (
        Edit(SCHEDULER, "        while left > sum(r.prefill_to - r.computed for r in prefill) and "
                        "self.waiting and \\\n",
             "        while left > sum(r.prefill_to - r.computed + 1 for r in prefill) and "
             "self.waiting and \\\n"),),
        (WHOLE,), V15,
        "each prompt being computed holds one row back from admission: a last slice that leaves "
        "so few rows leaves them unused"),
    Mutant("v15-slice-graph-bucket-leaves-out-the-padding-request", "slice graphs", (
        Edit(SLICES, "        return (num_rows, bucket(requests + (pad > 0), SMALLEST_REQUESTS),\n",
             "        return (num_rows, bucket(requests, SMALLEST_REQUESTS),\n"),),
        (BUCKETS,), V15,
        "the padding request is not counted in the request bucket: a pass of four requests and "
        "padding rows has no room for it"),
    Mutant("v15-slice-graph-replayed-across-request-buckets", "slice graphs", (
        Edit(SLICES, "        if key in self.graphs:\n"
                     "            device_flat, graph = self.graphs[key]\n",
             "        same = [k for k in self.graphs if (k[0], k[2]) == (key[0], key[2])]\n"
             "        if same:\n            device_flat, graph = self.graphs[same[0]]\n"),),
        (BUCKETS,), V15,
        "graphs are looked up by rows and context bound only: a pass replays the graph of "
        "another request bucket"),
    Mutant("v15-slice-graph-inputs-left-stale", "slice graphs", (
        Edit(SLICES, "            device_flat.copy_(torch.from_numpy(flat), non_blocking=True)\n",
             ""),),
        (REPLAYED,), V15,
        "a replayed slice reads the inputs its graph was captured with: it computes the first "
        "slice's rows again"),
    Mutant("v15-slice-graph-padding-rows-store-into-a-real-slot", "slice graphs", (
        Edit(SLICES, "        mapping[:total] = [s for c, a in zip(contexts, starts) for s in c[a:]]\n",
             "        mapping[:total] = [s for c, a in zip(contexts, starts) for s in c[a:]]\n"
             "        mapping[total:] = mapping[total - 1]\n"),),
        (REPLAYED,), V15,
        "the padding rows of a slice's bucket store their K/V over the slice's last row"),
    Mutant("v15-slice-graph-captured-at-every-pass", "slice graphs", (
        Edit(SLICES, "        if key in self.graphs:\n", "        if False:\n"),),
        (REPLAYED,), V15,
        "every slice pass captures its graph again (running the model's code and more): none "
        "replays"),
    Mutant("v15-slice-bucket-never-rides-a-cover", "slice graphs", (
        Edit(SLICES, "        return min(covering, default=own)", "        return own"),),
        (COVERED,), V15,
        "every new bucket is captured at its first pass, though a captured graph covers it: a "
        "stall where padding would do"),
    Mutant("v15-slice-bucket-rides-a-cover-forever", "slice graphs", (
        Edit(SLICES, "        if own in self.graphs or self.passes[own] >= CAPTURE_AT:",
             "        if own in self.graphs:"),),
        (COVERED,), V15,
        "a covered bucket is never captured: a shape that keeps coming pays its padding rows "
        "at every pass"),
    Mutant("v15-slice-bucket-rides-the-largest-cover", "slice graphs", (
        Edit(SLICES, "        return min(covering, default=own)",
             "        return max(covering, default=own)"),),
        (COVERED,), V15, "a covered pass rides the largest captured graph, not the smallest"),
    Mutant("v15-slice-cover-without-room-for-the-padding-request", "slice graphs", (
        Edit(SLICES, "num_requests >= requests + (pad > 0) and",
             "num_requests >= requests and"),),
        (COVERED,), V15,
        "a graph with no request left for the padding rows counts as a cover"),
    Mutant("v15-finished-rows-picked-by-a-host-list", PROPERTY, (
        Edit(RUNNER, "        rows = torch.stack([last[i] for i in done]) if done else last[:0]\n",
             "        rows = last[done]\n"),),
        (PICKED,), V15,
        "the rows that draw are picked with an index made from a host list: on a GPU its copy "
        "from pageable memory waits for the slice pass; the same tokens"),
]
