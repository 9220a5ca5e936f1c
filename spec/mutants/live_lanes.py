"""Live lanes (v20): the requests in high lanes move down before a pass where that shrinks its
bucket, and the sampler writes a moved request's settings into its new lane. Each mutant still
finishes every request; the page notices through the rows every product is fed (the token
meter), the oracle's samples (a moved request drawing with another lane's settings), the block
watch (two requests in one lane) and the tokens rejection keeps."""
from spec.mutants import Edit, Mutant

KV = "v20_live_lanes/kv.py"
SAMPLER = "v20_live_lanes/sampler.py"
PAGE = "spec/test_v20_live_lanes.py"
ANY = (f"{PAGE}::test_for_any_arrival_schedule_each_decode_pass_runs_the_smallest_bucket_"
       f"holding_the_live_requests")
MOVED = f"{PAGE}::test_requests_left_in_high_lanes_move_down_and_the_pass_shrinks_with_them"
GUESSING = f"{PAGE}::test_moved_requests_verifying_guesses_keep_the_oracles_samples"
REJECTION = f"{PAGE}::test_under_rejection_a_moved_request_keeps_the_tokens_it_keeps_alone"
SLICES = (f"{PAGE}::test_moves_beside_slices_a_prefix_cache_and_preemption_keep_every_lane_and_"
          f"block_right")
GRAMMAR = f"{PAGE}::test_constrained_requests_that_move_keep_their_grammars_draws"

PROPERTY = "live lanes"
V20 = ("v20",)
FOLLOW = "        self.follow(requests)\n"

MUTANTS = [
    Mutant("v20-lanes-never-move", PROPERTY, (
        Edit(KV, "            self.compact()\n", "            pass\n"),),
        (MOVED, ANY), V20, "no request ever moves: a pass covers the highest lane in use, as "
                           "v07's did"),
    Mutant("v20-moves-only-when-all-lanes-are-held", PROPERTY, (
        Edit(KV, "        if lanes and self.bucket(max(lanes) + 1) > self.bucket(len(lanes)):\n",
             "        if lanes and max(lanes) + 1 == self.num_lanes > self.bucket(len(lanes)):\n"),),
        (ANY, MOVED), V20, "requests move down only once the top lane is held: a pass below it "
                           "keeps a bucket too large"),
    Mutant("v20-moved-into-held-lanes", PROPERTY, (
        Edit(KV, "        holes = (lane for lane in range(live) if lane not in taken)\n",
             "        holes = iter(range(live))\n"),),
        (ANY, SLICES), V20, "requests move into the lowest lanes whether or not someone holds "
                           "them: two requests share a lane"),
    Mutant("v20-one-move-a-pass", PROPERTY, (
        Edit(KV, "        for request, lane in zip(above, holes, strict=False):\n",
             "        for request, lane in zip(above[:1], holes, strict=False):\n"),),
        (MOVED,), V20, "one request moves a pass: the pass shrinks a step late, or several"),
    Mutant("v20-moved-settings-not-written", PROPERTY, (
        Edit(SAMPLER, "        if moved:\n            self.bind(moved)\n", "        pass\n"),),
        (GRAMMAR, MOVED), V20, "a moved request draws with the settings its new lane's last "
                                "holder left there"),
    Mutant("v20-verify-reads-stale-settings", PROPERTY, (
        Edit(SAMPLER, "    def accept(self, logits: torch.Tensor, requests: Sequence,\n"
                      "               guesses: Sequence[Sequence[int]]) -> list[list[int]]:\n"
                      + FOLLOW,
             "    def accept(self, logits: torch.Tensor, requests: Sequence,\n"
             "               guesses: Sequence[Sequence[int]]) -> list[list[int]]:\n"),),
        (GUESSING,), V20, "a verifying pass drawn on the host reads the settings of a moved "
                          "request's new lane before they are written"),
    Mutant("v20-rejection-decided-on-stale-settings", PROPERTY, (
        Edit(SAMPLER, "    def draws_rows_alone(self, requests: Sequence) -> bool:\n" + FOLLOW,
             "    def draws_rows_alone(self, requests: Sequence) -> bool:\n"),),
        (REJECTION,), V20, "whether rejection needs the rows' probabilities is read from the "
                           "lanes before a moved request's settings are written: it is taken "
                           "for greedy, and its guesses are kept by agreement"),
]
