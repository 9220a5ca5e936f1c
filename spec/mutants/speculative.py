"""Speculative decoding (v17): guesses verified in one pass, the rejected rolled back. Each
mutant keeps the run going and breaks what is kept, what is rolled back or what is proposed, in a
way the specs that compare with the oracle, poison rejected rows or count blocks and steps must
notice."""
from spec.mutants import Edit, Mutant

KV = "v17_speculative_decoding/kv.py"
RUNNER = "v17_speculative_decoding/runner.py"
SAMPLER = "v17_speculative_decoding/sampler.py"
PROPOSER = "v17_speculative_decoding/proposer.py"
POLICY = "v17_speculative_decoding/policy.py"
SCHEDULER = "v17_speculative_decoding/scheduler.py"
LOOP = "v17_speculative_decoding/loop.py"
PAGE = "spec/test_v17_speculative_decoding.py"
EXACT = f"{PAGE}::test_exact_greedy_tokens_are_the_oracles_alone_and_in_a_batch"
SEEDED = f"{PAGE}::test_exact_seeded_samples_are_the_oracles_together_with_greedy_requests"
PER_PASS = f"{PAGE}::test_right_guesses_give_k_plus_one_tokens_a_pass"
DRAFT = f"{PAGE}::test_a_draft_identical_to_the_target_has_every_guess_accepted"
REPLAYS = f"{PAGE}::test_with_graphs_a_verifying_pass_replays_its_rows_and_their_draws"
UNREAD = f"{PAGE}::test_no_rejected_row_is_read_after_its_pass"
BLOCKS = f"{PAGE}::test_blocks_past_the_kept_rows_go_back_to_the_pool_after_every_step"
SEALED = f"{PAGE}::test_a_prompt_that_repeats_a_rejected_guess_run_finds_no_block_that_held_it"
DISTRIBUTION = f"{PAGE}::test_rejection_acceptance_keeps_the_targets_distribution"
CROWDED = f"{PAGE}::test_a_step_with_more_decodes_than_speculate_below_guesses_nothing"
MACHINE = (f"{PAGE}::test_verifying_passes_among_shared_blocks_decode_seal_free_and_eviction_keep_"
           f"every_invariant")
ON_RANKS = f"{PAGE}::test_at_tp2_the_ranks_propose_and_verify_alike_and_keep_the_oracles_tokens"
WAITING = f"{PAGE}::test_no_step_guesses_while_a_request_waits"
RESTS = f"{PAGE}::test_speculation_rests_where_passes_keep_fewer_tokens_than_the_bar"
NOTHING = f"{PAGE}::test_a_step_with_no_guess_to_verify_runs_the_plain_decode_step"
NGRAM = (f"{PAGE}::test_the_ngram_proposer_guesses_what_followed_the_latest_match_of_the_longest_"
         f"ngram")

PROPERTY = "speculative decoding"
INVARIANT = "batch invariance"
MODEL = "v17_speculative_decoding/model.py"
SAME_BITS = ("spec/test_v17_batch_invariant.py::test_a_requests_logits_are_the_same_bits_alone_"
             "and_in_a_speculating_batch")
V17 = ("v17",)

MUTANTS = [
    Mutant("v17-verify-rows-draw-at-the-fed-position", PROPERTY, (
        Edit(RUNNER, "self.sampler.draw_lanes(way, logits, tensors[1] + 1, *settings)",
             "self.sampler.draw_lanes(way, logits, tensors[1], *settings)"),),
        (SEEDED, REPLAYS), V17, "a verify graph's row draws with the race of its fed token's "
                                "position, not the next one's"),
    Mutant("v17-verify-rows-blind-to-earlier-guesses", PROPERTY, (
        Edit(RUNNER, '"context_lens": [p + 1 for _, p in rows]',
             '"context_lens": [r.computed + 1 for r, _ in rows]'),),
        (EXACT, PER_PASS), V17, "each row of a verify graph attends only up to its request's "
                                "last token, not to the guesses before it"),
    Mutant("v17-verify-rows-drawn-with-lane-0s-settings", PROPERTY, (
        Edit(RUNNER, "t.index_select(0, tensors[n])", "t.index_select(0, tensors[n] * 0)"),),
        (SEEDED, REPLAYS), V17, "every row of a verify graph draws with lane 0's sampler "
                                "settings"),
    Mutant("v17-verify-graphs-never-replayed", PROPERTY, (
        Edit(RUNNER, "        if self.use_graphs and self.sampler.draws_rows_alone(requests):\n",
             "        if False:\n"),),
        (REPLAYS,), V17, "a verifying pass runs as a slice with an eager LM head and draws, "
                         "graphs on"),
    Mutant("v17-policy-never-rests", PROPERTY, (
        Edit(POLICY, "self.resting = min(self.REST << self.failed, self.LONGEST_REST)\n",
             "self.resting = 0\n"),),
        (RESTS,), V17,
        "passes that keep one token each never make speculation rest: every step runs in order "
        "for nothing"),
    Mutant("v17-policy-rest-never-grows", PROPERTY, (
        Edit(POLICY, "                self.failed += 1\n", ""),),
        (RESTS,), V17,
        "windows that fail in a row rest REST steps each: text that never copies pays a window "
        "of passes every REST steps"),
    Mutant("v17-policy-rests-on-passes-that-pay", PROPERTY, (
        Edit(POLICY, "            if self.tokens < self.min_tokens_per_pass * self.rows:\n",
             "            if self.tokens <= self.min_tokens_per_pass * self.rows:\n"),),
        (RESTS,), V17,
        "a window whose passes reach the bar exactly rests anyway"),
    Mutant("v17-rejected-rows-counted-as-computed", PROPERTY, (
        Edit(RUNNER, "            request.computed = keep\n",
             "            request.computed = len(request.sequence)\n"),),
        (UNREAD, EXACT), V17,
        "a request's K/V count keeps its rejected rows: the next pass attends over them"),
    Mutant("v17-rejected-tail-left-in-the-pool", PROPERTY, (
        Edit(KV, "        self.pool.truncate(request.id, keep)\n",
             "        self.pool.truncate(request.id, held)\n"),
        Edit(KV, "            self.pool.seal(request.id, request.sequence[:keep])\n",
             "            self.pool.seal(request.id, request.sequence[:held])\n"),),
        (BLOCKS, SEALED), V17,
        "the blocks the guesses took stay with the request (and are sealed with the guesses' "
        "tokens)"),
    Mutant("v17-guessed-rows-sealed", PROPERTY, (
        Edit(KV, "        self.pool.truncate(request.id, keep)\n"
                 "        if self.enabled:\n"
                 "            self.pool.seal(request.id, request.sequence[:keep])\n",
             "        if self.enabled:\n"
             "            self.pool.seal(request.id, request.sequence[:held])\n"
             "        self.pool.truncate(request.id, keep)\n"),),
        (SEALED,), V17,
        "full blocks are sealed before the roll-back, rejected guesses' rows and tokens with them"),
    Mutant("v17-truncated-blocks-leak", PROPERTY, (
        Edit(KV, "            if self._refs[block] == 0:\n"
                 "                del self._refs[block]\n"
                 "                self._free[block] = None\n",
             "            if self._refs[block] == 0:\n"
                 "                del self._refs[block]\n"),),
        (MACHINE,), V17,
        "a block cut off a request's table never reaches the free list"),
    Mutant("v17-followers-skip-the-speculating-step", PROPERTY, (
        Edit("v16_tensor_parallel/loop.py",
             "                call = getattr(self, {\"enqueue\": \"_enqueue\", \"shards\": "
             "\"gather_shards\"\n",
             "                call = getattr(super(), {\"enqueue\": \"_enqueue\", \"shards\": "
             "\"gather_shards\"\n"),),
        (ON_RANKS,), V17,
        "a following rank runs v14's step, not its own version's: it launches decodes ahead "
        "while rank 0 verifies guesses in order"),
    Mutant("v17-first-disagreeing-guess-kept", PROPERTY, (
        Edit(SAMPLER, "    return own[:j + 1]\n",
             "    return own[:j] + (list(guesses[j:j + 1]) or own[j:j + 1])\n"),),
        (EXACT,), V17,
        "exact acceptance keeps the first guess that differs from the engine's draw"),
    Mutant("v17-draw-at-the-wrong-position", PROPERTY, (
        Edit(SAMPLER, "        positions = torch.tensor([len(r.sequence) - n + 1 + j",
             "        positions = torch.tensor([len(r.sequence) - n + j"),),
        (SEEDED, REPLAYS), V17,
        "a verifying row draws at its fed token's position, not the next: other seeded tokens"),
    Mutant("v17-rejection-redraws-from-q", PROPERTY, (
        Edit(SAMPLER, "    residual = p.scatter(-1, guessed[:, None], 0.0)\n",
             "    residual = torch.zeros_like(p).scatter(-1, guessed[:, None], 1.0)\n"),),
        (DISTRIBUTION,), V17,
        "a rejected guess is redrawn from the proposal q (all on the guess): it is kept anyway"),
    Mutant("v17-draft-proposes-after-the-prompt", PROPERTY, (
        Edit(PROPOSER, "        return self.engine.generate([list(r.sequence) for r in requests],\n",
             "        return self.engine.generate([list(r.prompt) for r in requests],\n"),),
        (DRAFT,), V17,
        "the draft's view is not rolled forward to the tokens kept: it guesses from the prompt"),
    Mutant("v17-guesses-not-kept", PROPERTY, (
        Edit(SCHEDULER, "                        request.extend(kept[:-1])\n",
             "                        request.extend([])\n"),),
        (PER_PASS, EXACT), V17,
        "a request takes only the last token of a verifying pass"),
    Mutant("v17-speculates-in-crowded-steps", PROPERTY, (
        Edit(POLICY, "        return self.speculative_tokens if 0 < len(running) <= "
                     "self.speculate_below else 0\n",
             "        return self.speculative_tokens if 0 < len(running) else 0\n"),),
        (CROWDED,), V17,
        "the policy's rule is gone: every step guesses, however many requests decode"),
    Mutant("v17-speculates-while-requests-wait", PROPERTY, (
        Edit(POLICY, "        if not self.speculative_tokens or waiting or self.resting:\n",
             "        if not self.speculative_tokens or self.resting:\n"),),
        (WAITING,), V17,
        "steps guess while requests wait for a lane: the running ones speculate, the queue waits"),
    Mutant("v17-verifies-nothing", PROPERTY, (
        Edit(RUNNER, "        if not any(proposals):\n", "        if False:\n"),),
        (NOTHING,), V17,
        "a step with no guess to verify runs a verifying pass of one row a request anyway"),
    Mutant("v17-ngram-first-occurrence", PROPERTY, (
        Edit(PROPOSER, "        for start in range(length - n - 1, -1, -1):",
             "        for start in range(0, length - n):"),),
        (NGRAM,), V17,
        "prompt lookup takes the earliest occurrence (and may match the tail itself)"),
    Mutant("v17-invariant-lm-head-a-gemm", INVARIANT, (
        Edit(MODEL, "        return self.project(hidden, weights.lm_head)",
             "        return super().lm_head(weights, hidden)"),),
        (SAME_BITS,), V17, "batch_invariant leaves the LM head to cuBLAS's GEMM, tiled by rows"),
    Mutant("v17-invariant-products-gemv-at-one-row-only", INVARIANT, (
        Edit(MODEL, "        return self.on_triton\n", "        return self.on_triton and x.shape[0] == 1\n"),),
        (SAME_BITS,), V17, "batch_invariant runs the gemv at one row only, as v13 does"),
    Mutant("v17-invariant-decode-attention-split-by-shape", INVARIANT, (
        Edit(MODEL, "partial(paged_kernels.paged_decode_attention, fixed_chunk=FIXED_CHUNK)",
             "partial(paged_kernels.paged_decode_attention, fixed_chunk=0)"),),
        (SAME_BITS,), V17, "batch_invariant's decode attention splits contexts by the batch"),
    Mutant("v17-invariant-prefill-attention-split-by-shape", INVARIANT, (
        Edit(MODEL, "    fixed_chunk = FIXED_CHUNK\n", "    fixed_chunk = 0\n"),),
        (SAME_BITS,), V17, "batch_invariant's prefill attention splits contexts by the pass"),
]
