"""Seeded sampling (v11): the filters equal Hugging Face's, a draw depends on (seed, position)
only, and the decode draw happens inside the replayed step. Each mutant keeps greedy decoding
right, so only the sampling page's specs can notice it."""
from spec.mutants import Edit, Mutant

DRAW = "v11_sampling/draw.py"  # the filters and the draw
SAMPLER = "v11_sampling/sampler.py"  # the sampler part, SeededSampler
PACKAGE = "v11_sampling/__init__.py"
PAGE = "spec/test_v11_sampling.py"
FILTERS = f"{PAGE}::test_the_filters_equal_hugging_faces_warpers_row_by_row"
SCHEDULE = f"{PAGE}::test_a_seeded_request_draws_the_oracles_tokens_under_any_schedule"
GOLDEN = f"{PAGE}::test_seeded_samples_equal_the_oracles_alone_and_in_one_batch"
PREEMPT = f"{PAGE}::test_preemption_happens_under_the_tight_pool_and_the_recompute_draws_the_same"
IN_GRAPH = (f"{PAGE}::test_a_sampling_step_reads_the_lanes_settings_and_draws_inside_the_"
            f"replayed_graph")
MIXED = f"{PAGE}::test_greedy_and_seeded_requests_decoded_together_each_get_the_oracles_tokens"
UNSEEDED = f"{PAGE}::test_different_seeds_draw_differently_and_unseeded_requests_still_sample"
ONE_BIT = f"{PAGE}::test_seeds_that_differ_in_any_one_of_their_63_bits_draw_differently"
EXTREMES = f"{PAGE}::test_uniforms_equal_the_oracles_bit_for_bit_at_the_extreme_hash_values"
TOP_K_ONE = (f"{PAGE}::test_top_k_one_draws_the_greedy_token_for_every_seed_whose_stream_holds_"
             f"an_all_ones_hash")
SUPPORT = f"{PAGE}::test_a_sampled_token_is_always_inside_the_filtered_support"
ANY_SETTINGS = (f"{PAGE}::test_random_settings_valid_or_not_never_fail_a_step_nor_change_another_"
                f"requests_tokens")
GREEDY_AFTER = (f"{PAGE}::test_once_a_sampling_request_has_left_its_lane_all_greedy_steps_sort_"
                f"and_hash_nothing")

MUTANTS = [
    Mutant("v11-top-p-boundary-off-by-one", "seeded sampling", (
        Edit(DRAW, "    drop = cumulative <= (1 - top_p.to(logits.dtype))[:, None]",
             "    drop = cumulative < (1 - top_p.to(logits.dtype))[:, None]"),),
        (FILTERS,), ("v11",),
        "top-p keeps a token whose cumulative probability lands exactly on 1 - top_p"),
    Mutant("v11-temperature-after-top-p", "seeded sampling", (
        Edit(DRAW, "    scores = logits / scale[:, None].to(logits.dtype)\n",
             "    scores = logits\n"),
        Edit(DRAW, "    # min-p against the most likely token (which it never drops)\n",
             "    scores = scores / scale[:, None].to(logits.dtype)\n"
             "    # min-p against the most likely token (which it never drops)\n")),
        (FILTERS,), ("v11",),
        "the temperature divides the logits after top-k and top-p instead of before"),
    Mutant("v11-top-k-drops-ties-and-one-more", "seeded sampling", (
        Edit(DRAW, "gather(-1, (k.long() - 1)[:, None])",
             "gather(-1, (k.long() - 2).clamp(min=0)[:, None])"),),
        (FILTERS,), ("v11",),
        "top-k's threshold is the (k-1)-th largest logit"),
    Mutant("v11-seed-stream-keyed-by-lane", "seeded sampling", (
        Edit(SAMPLER, "        return sample(logits, *settings, positions)\n",
             "        temperature, top_k, top_p, min_p, seed = settings\n"
             "        lanes = torch.arange(positions.shape[0], device=positions.device)\n"
             "        return sample(logits, temperature, top_k, top_p, min_p, seed + lanes, "
             "positions)\n"),),
        (SCHEDULE, GOLDEN), ("v11",),
        "the decode draw's stream is keyed by the lane as well as the seed and position"),
    Mutant("v11-prefill-draw-one-position-early", "seeded sampling", (
        Edit(SAMPLER, "[len(r.sequence) for r in requests]",
             "[len(r.sequence) - 1 for r in requests]"),),
        (PREEMPT, GOLDEN), ("v11",),
        "a prefill's draw uses the stream of the last prompt token, not of the drawn one"),
    Mutant("v11-decode-draw-outside-the-graph", "seeded sampling", (
        Edit(PACKAGE, 'PARTS = BEFORE.replace("v11", sampler=SeededSampler)\n',
             "class EagerDraw(GraphedRunner):\n"
             "    def decode_tokens(self, requests):\n"
             "        return self.sampler.draw(self.decode(requests), requests)\n"
             "\n\n"
             'PARTS = BEFORE.replace("v11", sampler=SeededSampler, runner=EagerDraw)\n'),),
        (IN_GRAPH,), ("v11",),
        "the running requests' tokens are drawn eagerly from the logits after the replay"),
    Mutant("v11-sampling-lanes-replay-the-greedy-graph", "seeded sampling", (
        Edit(SAMPLER, "any(temperature[lane] > 0 for lane in lanes)",
             "any(temperature[lane] > 0 for lane in lanes[:1])"),),
        (MIXED,), ("v11",),
        "the fast path's check reads only the first lane: a batch whose later lanes sample "
        "takes the argmax for them"),
    Mutant("v11-unseeded-requests-share-a-seed", "seeded sampling", (
        Edit(SAMPLER, "seed=secrets.randbits(63))", "seed=0)"),),
        (UNSEEDED,), ("v11",),
        "a request without a seed gets seed 0, so every unseeded request draws alike"),
    Mutant("v11-seed-high-bits-dropped", "seeded sampling", (
        Edit(DRAW, "    lo, hi = seed & _MASK32, (seed >> 32) & _MASK32",
             "    lo, hi = seed & _MASK32, seed * 0  # a 32-bit seed"),),
        (ONE_BIT,), ("v11",),
        "the stream reads a seed's low 32 bits only: s and s + 2^32 k draw alike"),
    Mutant("v11-greedy-steps-sample-after-a-sampler-left", "seeded sampling", (
        Edit(SAMPLER, "any(temperature[lane] > 0 for lane in lanes)",
             "(temperature > 0).any()"),),  # every lane's last settings, in use or not
        (GREEDY_AFTER,), ("v11",),
        "once a sampling request has left its lane, all-greedy steps still sort and hash: the "
        "same argmax tokens"),
    Mutant("v11-uniforms-rounded-in-float32", "seeded sampling", (
        Edit(DRAW, "    return ((bits >> 8).double() + 0.5) * (1.0 / (1 << 24))",
             "    return ((bits >> 8).float() + 0.5) * (1.0 / (1 << 24))"),),
        (EXTREMES, TOP_K_ONE, SUPPORT), ("v11",),
        "the uniforms are made in float32, where x + 0.5 rounds from 2^23 up and the all-ones "
        "hash gives u = 1: E = 0 and that token wins, filtered or not"),
    Mutant("v11-a-failing-bind-fails-the-step", "bad-input atomicity", (
        Edit(SAMPLER, "            except Exception as error:  # noqa: BLE001  (whatever its "
                       "settings raise)\n                request.fail(error)\n",
             "            except ZeroDivisionError as error:  # nothing a write raises\n"
             "                request.fail(error)\n"),),
        (ANY_SETTINGS,), ("v11",),
        "a request's settings that cannot be written into its lane raise out of the step, "
        "failing every request in it"),
    Mutant("v11-a-request-failed-in-bind-takes-a-token", "bad-input atomicity", (
        Edit("v03_request_states/scheduler.py",
             "            if request.finished:  # it failed earlier in this step (a sampler's "
             "bind): no token\n                continue\n", ""),),
        (ANY_SETTINGS,), ("v11",),
        "a request failed while its settings were bound is still handed a token, and the stop "
        "check's complaint replaces its error"),
]
