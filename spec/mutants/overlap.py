"""Overlap (v14): the next decode runs ahead of the host's read-back, never ahead of what the
host knows. Each mutant keeps the tokens of a plain run right or breaks them only in the case
it names, so the specs that watch the step ahead from outside must notice."""
from spec.mutants import Edit, Mutant

LOOP = "v14_overlap/loop.py"
INPUTS = "v14_overlap/inputs.py"
PAGE = "spec/test_v14_overlap.py"
STORED = f"{PAGE}::test_when_a_step_returns_the_next_decode_has_stored_each_requests_last_token"
FED = f"{PAGE}::test_the_decode_ahead_feeds_each_lane_its_requests_last_token_at_the_next_position"
ORDER = f"{PAGE}::test_a_step_copies_its_tokens_out_before_it_writes_the_next_decodes_inputs"
LAST = f"{PAGE}::test_a_request_at_its_last_token_gets_no_decode_ahead"
STOPPED = f"{PAGE}::test_a_request_stopped_by_a_stop_token_or_aborted_leaves_the_others_their_tokens"
TIGHT = f"{PAGE}::test_on_a_tight_poisoned_pool_any_arrival_schedule_gets_its_solo_tokens"
OFF = f"{PAGE}::test_with_overlap_off_each_step_runs_in_order_as_v13s_does"
SEALED = f"{PAGE}::test_a_block_filled_by_a_decode_ahead_is_sealed_and_spares_a_later_prefill_its_rows"

PROPERTY = "overlap"
V14 = ("v14",)

MUTANTS = [
    Mutant("v14-ahead-fed-the-placeholder", PROPERTY, (
        Edit(INPUTS, "            buffers[0].index_copy_(0, self.lanes, self.fed)\n",
             "            pass  # the placeholder stays\n"),),
        (FED, STORED), V14,
        "the decode ahead reads the placeholder token id, not the token the step drew"),
    Mutant("v14-tokens-read-after-the-step-ahead", PROPERTY, (
        Edit(LOOP, "        read = self.start_read(tokens)\n"
                     "        self.ahead = self._decode_ahead(batch, tokens)\n",
             "        self.ahead = self._decode_ahead(batch, tokens)\n"
                     "        read = self.start_read(tokens)\n"),),
        (ORDER,), V14,
        "the tokens are copied out after the next decode is launched: on a GPU the wait waits "
        "for it too; the same tokens"),
    Mutant("v14-tokens-read-by-tolist", PROPERTY, (
        Edit(LOOP, "        buffer, copied = self.read_back\n",
             "        return tokens.tolist\n"
             "        buffer, copied = self.read_back\n"),),
        (ORDER,), V14,
        "the read-back is tolist() when asked: after the step ahead, which it waits for on a GPU"),
    Mutant("v14-ahead-for-a-requests-last-token-too", PROPERTY, (
        Edit(LOOP, "if len(r.tokens) + 1 < r.params.max_new_tokens]",
             "if len(r.tokens) + 1 <= r.params.max_new_tokens]"),),
        (LAST,), V14,
        "a request whose next token is its last still gets a decode ahead, a row for nothing"),
    Mutant("v14-ahead-rows-taken-in-order", PROPERTY, (
        Edit(LOOP, "        if len(requests) == len(self.requests):\n",
             "        if True:  # the first rows, whoever left\n"
             "            return list(range(len(requests)))\n"
             "        if len(requests) == len(self.requests):\n"),),
        (STOPPED, TIGHT), V14,
        "after a request stops or is aborted, the others take the first rows of the step ahead"),
    Mutant("v14-ahead-blocks-never-sealed", PROPERTY, (
        Edit(LOOP, "            self.kv.seal_filled([r for r in self.ahead.requests "
                     "if r.state is running])\n",
             "            pass  # sealed by nobody\n"),),
        (SEALED,), V14,
        "a block a decode ahead fills is never sealed: a later prompt recomputes it"),
    Mutant("v14-ahead-blocks-sealed-at-launch", PROPERTY, (
        Edit(LOOP, "            logits, drawn = self.runner.step_lanes(requests)\n",
             "            logits, drawn = self.runner.step_lanes(requests)\n"
             "            for r in requests:  # the placeholder stands for the drawn token\n"
             "                if self.kv.enabled and r.computed % self.kv.block_size == 0:\n"
             "                    self.kv.pool.seal(r.id, r.sequence + r.sequence[-1:])\n"),),
        (SEALED,), V14,
        "a block is sealed when the decode ahead is launched: its hash reads the placeholder"),
    Mutant("v14-overlap-off-ignored", PROPERTY, (
        Edit(LOOP, "        self.inputs, self.overlap = inputs, overlap\n",
             "        self.inputs, self.overlap = inputs, True\n"),),
        (OFF,), V14, "overlap=False still launches the next decode ahead"),
]
