"""Graph replay: from v07 a steady-state decode step replays a captured graph. The first three
mutants keep every token right and graph_stats() reporting one capture per bucket and a replay per
step: the specs that watch the step from outside (spec/support/watchers/replay_watch.py, and a counted fn
on the capture page) kill them; the first passed every v07 spec before those existed. The last
three break what a replay computes."""
from spec.mutants import Edit, Mutant

GRAPHS = "v07_cuda_graph/graphs.py"
RUNNER = "v07_cuda_graph/runner.py"  # GraphRunner, one graph per bucket
REPLAY = "spec/test_v07_graph_replay.py"
CAPTURE = "spec/test_v07_graph_capture.py"
NO_MODEL_CODE = f"{REPLAY}::test_a_replayed_decode_step_runs_none_of_the_models_python_code"
FN_NOT_CALLED = (f"{CAPTURE}::test_a_replay_never_calls_the_captured_function_and_graphs_off_"
                 f"call_it_every_run")
EQUAL_LOGITS = (f"{REPLAY}::test_replay_logits_equal_eager_logits_bit_for_bit_while_the_batch_"
                f"changes")
EQUAL_REPLAY = f"{CAPTURE}::test_replay_equals_eager_bit_for_bit_while_inputs_change_in_place"
NO_FLOAT_COPY = (f"{REPLAY}::test_a_greedy_bfloat16_decode_step_draws_from_the_lm_heads_logits_and_"
                 f"makes_no_float_copy")

RUN_REPLAY = ('        self._counts[bucket]["replays"] += 1\n'
              '        return self.graphs[bucket].replay(*self._views[bucket])')
EXTERNAL_SLOTS = "        self._external_slots = [recorder.slots[id(t)] for t in self._external]"
READS = ("            reads = [(i, self._read(a, func)) for i, a in enumerate(args)\n"
         "                     if isinstance(a, torch.Tensor)]")
CPU_REPLAY = ("        self._pinned.check(inputs)\n"
              "        env: list = [None] * self._n_slots")

MUTANTS = [
    Mutant("v07-constants-unchecked-at-replay", "graph replay", (
        Edit(GRAPHS, "        if not moved and tuple(t.data_ptr() for t in self.external[n:]) != self.constant_ptrs:",
             "        if False:"),),
        (f"{CAPTURE}::test_replay_refuses_a_constant_whose_data_moved",), ("v07",),
        "a replay checks its static inputs only: a weight given new storage goes unnoticed"),
    Mutant("v07-eager-step-counted-as-replay", "graph replay", (
        Edit(RUNNER, RUN_REPLAY,
             '        self._counts[bucket]["replays"] += 1\n'
             '        with torch.no_grad():\n'
             '            return self.fn(*self._views[bucket])'),),
        (NO_MODEL_CODE, FN_NOT_CALLED), ("v07",),
        "the graph runner runs the step eagerly and still counts a replay"),
    Mutant("v07-silent-recapture-every-step", "graph replay", (
        Edit(RUNNER, RUN_REPLAY,
             "        self.graphs[bucket] = capture(self.fn, self._views[bucket],\n"
             "                                      constants=self.constants, pool=self.pool,\n"
             "                                      warmup=self.warmup)\n" + RUN_REPLAY),),
        (NO_MODEL_CODE, FN_NOT_CALLED), ("v07",),
        "every step captures its bucket again, uncounted, then replays it"),
    Mutant("v07-cpu-replay-reruns-the-function", "graph replay", (
        Edit(GRAPHS, "        self.pool = None  # memory is eager CPU memory; nothing to share",
             "        self.pool = None  # memory is eager CPU memory; nothing to share\n"
             "        self._fn = fn"),
        Edit(GRAPHS, CPU_REPLAY,
             "        self._pinned.check(inputs)\n"
             "        with torch.no_grad(), torch.inference_mode(self._inference):\n"
             "            fresh = self._fn(*self.static_inputs)\n"
             "            for static, new in zip(tree_leaves(self.outputs), tree_leaves(fresh)):\n"
             "                static.copy_(new)\n"
             "        return self.outputs\n"
             "        env: list = [None] * self._n_slots")),
        (NO_MODEL_CODE, FN_NOT_CALLED), ("v07",),
        "the CPU graph's replay calls the captured function and copies its results into the "
        "outputs"),
    Mutant("v07-inputs-frozen-at-capture", "graph replay", (
        # after the slots are looked up by id: the copies take the inputs' slots
        Edit(GRAPHS, EXTERNAL_SLOTS,
             EXTERNAL_SLOTS + "\n"
             "        n = len(self.static_inputs)\n"
             "        self._external = [t.clone() for t in self._external[:n]] + self._external[n:]"),),
        (EQUAL_REPLAY, EQUAL_LOGITS), ("v07",),
        "the CPU graph replays over copies of its static inputs taken at capture: new inputs "
        "never reach it"),
    Mutant("v07-replay-skips-the-tape", "graph replay", (
        Edit(GRAPHS, CPU_REPLAY,
             "        self._pinned.check(inputs)\n"
             "        return self.outputs\n"
             "        env: list = [None] * self._n_slots"),),
        (EQUAL_REPLAY, EQUAL_LOGITS), ("v07",),
        "replay returns the outputs computed at capture without running the recorded ops"),
    Mutant("v07-replay-fills-arguments-in-reverse", "graph replay", (
        Edit(GRAPHS, READS,
             READS + "\n"
             "            reads = [(i, slot) for (i, _), (_, slot) in zip(reads, reads[::-1])]"),),
        (EQUAL_REPLAY, EQUAL_LOGITS), ("v07",),
        "the CPU replay hands an op its tensor arguments in reverse order"),
    Mutant("v07-replays-the-smallest-bucket", "graph replay", (
        Edit(RUNNER, RUN_REPLAY,
             '        self._counts[bucket]["replays"] += 1\n'
             '        smallest = min(self.graphs)\n'
             '        return self.graphs[smallest].replay(*self._views[smallest])'),),
        (f"{CAPTURE}::test_runner_captures_each_bucket_once_and_only_replays_in_steady_state",
         EQUAL_LOGITS), ("v07",),
        "the runner replays the smallest graph captured so far, whatever the batch"),
    Mutant("v07-buckets-double-past-32", "graph replay", (
        Edit(RUNNER, "        b = b * 2 if b < BUCKET_STEP else b + BUCKET_STEP",
             "        b = b * 2"),),
        (f"{CAPTURE}::test_past_32_lanes_a_batch_runs_the_next_multiple_of_32_rows_not_the_next_"
         f"power_of_two",), ("v07",),
        "the buckets double all the way up: a batch of 130 runs 256 rows"),
    Mutant("v07-buckets-step-from-the-start", "graph replay", (
        Edit(RUNNER, "        b = b * 2 if b < BUCKET_STEP else b + BUCKET_STEP",
             "        b = b + BUCKET_STEP if b > 1 else BUCKET_STEP"),),
        (f"{CAPTURE}::test_past_32_lanes_a_batch_runs_the_next_multiple_of_32_rows_not_the_next_"
         f"power_of_two",), ("v07",),
        "no bucket between 1 and 32: a batch of 3 runs 32 rows"),
    Mutant("v05-decode-step-casts-its-logits", "graph replay", (
        Edit("v05_decode_lanes/runner.py",
             "        return self.model.lm_head(self.weights, hidden)\n",
             "        return self.model.lm_head(self.weights, hidden).float()\n"),),
        (NO_FLOAT_COPY,), ("v07",),
        "the decode step casts every lane's logits to float32 before its argmax: the same "
        "tokens, a [lanes, vocab] copy more"),
]
