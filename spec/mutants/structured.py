"""Structured output (v19): the mask a request's grammar puts on each draw, the matcher kept in
step with its tokens, and the order a step with a grammar runs in. Each mutant still draws
tokens and finishes requests; the page notices through the oracle's masked draws, the answers
jsonschema checks, and the request whose grammar cannot go on."""
from spec.mutants import Edit, Mutant

SAMPLER = "v19_structured_output/sampler.py"
GRAMMAR = "v19_structured_output/grammar.py"
PAGE = "spec/test_v19_structured_output.py"
GOLDEN = f"{PAGE}::test_constrained_tokens_are_the_oracles_draws_over_the_allowed_tokens"
PARSES = f"{PAGE}::test_every_answer_parses_and_validates_against_its_drawn_schema"
DEAD = f"{PAGE}::test_a_grammar_that_cannot_go_on_fails_its_request_alone_naming_it"
AHEAD = f"{PAGE}::test_with_overlap_a_constrained_decode_is_launched_ahead_and_drawn_again_once_read"
PADDING = ("spec/test_grammar_compile.py::test_a_model_vocabulary_past_the_tokenizers_is_never_"
           "allowed_nor_accepted")
HARNESS = "torchlet/grammar.py"
REFUSED = ("spec/test_grammar_compile.py::test_a_version_without_structured_output_refuses_a_"
           "grammar_and_queues_nothing")

PROPERTY = "structured output"
V19 = ("v19",)

MUTANTS = [
    Mutant("grammar-padding-bits-left-as-they-were", PROPERTY, (
        Edit(HARNESS, "            words[self.words:] = 0\n", "            pass\n"),),
        (PADDING,), (), "a matcher leaves the bits past the tokenizer's ids as the block held "
                        "them: a model's padding ids allowed wherever a row started allowing "
                        "all"),
    Mutant("grammar-padding-last-word-left-whole", PROPERTY, (
        Edit(HARNESS, "            words[self.words - 1] &= (1 << self.spelled % 32) - 1\n",
             "            pass\n"),),
        (PADDING,), (), "the bits xgrammar sets past its vocabulary in a row's last word are "
                        "kept: padding ids just past the tokenizer's allowed"),
    Mutant("grammar-told-the-models-vocabulary", PROPERTY, (
        Edit(HARNESS, "tokenizer, vocab_size=min(len(tokenizer), vocab_size),",
             "tokenizer, vocab_size=vocab_size,"),),
        (PADDING,), (), "xgrammar told the model's vocabulary: its padding ids are special "
                        "tokens to it, the same masks, each accept ~17x slower"),
    Mutant("v19-unconstrained-row-left-unwritten", PROPERTY, (
        Edit(GRAMMAR, "                words[i] = ALL\n                continue\n",
             "                continue\n"),),
        (GOLDEN,), V19, "an unconstrained request's row of a step's masks is left as the block's "
                        "memory held it: its neighbour's draw masked by whatever was there"),
    Mutant("v19-mask-after-the-draw", PROPERTY, (
        Edit(SAMPLER,
             "            return super().draw_lanes(MASKED[variant], self.grammar.masked(logits, "
             "bitmask),\n                                      positions, *settings)\n",
             "            drawn = super().draw_lanes(MASKED[variant], logits, positions, *settings)\n"
             "            masked = self.grammar.masked(logits, bitmask)\n"
             "            ok = masked.gather(-1, drawn[:, None])[:, 0] > float(\"-inf\")\n"
             "            return torch.where(ok, drawn, masked.argmax(dim=-1))\n"),),
        (GOLDEN,), V19, "the decode draws from the unmasked logits and takes the masked argmax "
                        "where the grammar refuses the draw: valid, but not the seeded race "
                        "over the allowed tokens"),
    Mutant("v19-matcher-misses-the-last-token", PROPERTY, (
        Edit(GRAMMAR, "        while tracked.taken < len(tokens):\n",
             "        while tracked.taken < len(tokens) - 1:\n"),),
        (GOLDEN, PARSES), V19, "the matcher is not advanced by the request's last token: each "
                               "mask is one token behind"),
    Mutant("v19-no-rollback-after-guesses", PROPERTY, (
        Edit(GRAMMAR, "        matcher.rollback(taken)\n", ""),),
        (GOLDEN,), V19, "the guesses a verifying pass walked the matcher through stay taken "
                        "when the pass rejects them"),
    Mutant("v19-launch-ahead-not-drawn-again", PROPERTY, (
        Edit(SAMPLER, "        if not rows:\n            return drawn\n",
             "        return drawn\n"),),
        (GOLDEN, AHEAD), V19, "a decode launched ahead keeps the draws it made without the "
                              "masks"),
    Mutant("v19-drawn-again-at-the-fed-position", PROPERTY, (
        Edit(SAMPLER, "[len(r.sequence) for r in chosen]", "[len(r.sequence) - 1 for r in chosen]"),),
        (GOLDEN, AHEAD), V19, "the constrained rows of a launch are drawn again with the race of "
                              "the position before"),
    Mutant("v19-grammar-steps-run-in-order", PROPERTY, (
        Edit("v17_speculative_decoding/loop.py", "        if self.scheduler.guesses():\n",
             "        if self.scheduler.guesses() or any(r.params.grammar is not None\n"
             "                                           for r in batch.requests):\n"),),
        (AHEAD,), V19, "no decode is launched ahead of a constrained request: the masks' fill "
                       "is not hidden behind the GPU's step"),
    Mutant("v19-masked-graphs-never-replayed", PROPERTY, (
        Edit(SAMPLER, "        return next(masked for masked, way in MASKED.items() if way == "
                      "unmasked)\n",
             "        return unmasked\n"),),
        (GOLDEN, PARSES), V19, "the masks are filled but the decode step replays the unmasked "
                               "graphs"),
    Mutant("v19-bits-read-from-the-top", PROPERTY, (
        Edit(GRAMMAR, "        allowed = ((bitmask.unsqueeze(-1) >> bits) & 1).bool().flatten(-2)\n",
             "        allowed = ((bitmask.unsqueeze(-1) >> (31 - bits)) & 1).bool().flatten(-2)\n"),),
        (GOLDEN, PARSES), V19, "token t read from bit 31 - t % 32 of its word"),
    Mutant("v19-dead-end-draws-anyway", PROPERTY, (
        Edit(GRAMMAR, "            self.cannot_go_on(requests[i], self.tracked[requests[i].id].matcher)\n",
             ""),),
        (DEAD,), V19, "a request whose grammar allows nothing draws from every token and "
                      "goes on"),
    Mutant("v03-a-grammar-taken-and-ignored", PROPERTY, (
        Edit("v03_request_states/loop.py", "grammar=self.sampler.constrains)\n",
             "grammar=True)\n"),),
        (REFUSED,), ("v03",), "a version that cannot apply a grammar queues a request with one, "
                             "and its draws ignore it"),
]
