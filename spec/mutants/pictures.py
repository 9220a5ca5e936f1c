"""Picture content: the docs site's pictures show the run they claim to draw
(spec/test_docs_pictures.py reads each back against the engine); and the compare page's method
view sets each method beside the one it takes the place of (spec/test_docs_methods.py), the
same property of another drawn view (spec/test_mutants.py names the properties). These
mutants edit the docs site, not a version (harness mutants: spec/mutants/__init__.py), each
misplacing what it was given while still drawing a plausible page."""
from spec.mutants import Edit, Mutant

DRAW = "torchlet/docs/draw.py"
METHODS = "torchlet/methods.py"
SPEC = "spec/test_docs_pictures.py"
METHODS_SPEC = "spec/test_docs_methods.py"
PROPERTY = "picture content"

MUTANTS = [
    Mutant("docs-timeline-rows-shifted-by-one-step", PROPERTY, (
        Edit(DRAW, "            cell = step.cells.get(r)\n            if cell is None:\n"
                   "                if run.aborted",
             "            cell = run.steps[max(0, run.steps.index(step) - 1)].cells.get(r)\n"
             "            if cell is None:\n                if run.aborted"),),
        (f"{SPEC}::test_the_timeline_shows_at_each_step_what_the_engine_says_each_request_did",),
        (), "the timeline draws each request's step k in the column of step k+1"),
    Mutant("docs-pool-tables-from-the-step-before", PROPERTY, (
        Edit(DRAW, "        step = run.step(number)\n",
             "        step = run.step(max(number - 1, run.steps[0].number))\n"),),
        (f"{SPEC}::test_the_pool_picture_holds_the_block_tables_the_engine_has_at_the_steps_"
         "it_draws",), (),
        "the pool drawn for step k shows the tables of step k-1"),
    Mutant("docs-lanes-drawn-bottom-up", PROPERTY, (
        Edit(DRAW, "            held = [r for (s, r), n in at.items() if s == step.number and n == lane]\n",
             "            held = [r for (s, r), n in at.items()\n"
             "                    if s == step.number and n == run.num_lanes - 1 - lane]\n"),),
        (f"{SPEC}::test_the_lanes_picture_puts_each_request_in_the_lane_lane_of_names",), (),
        "the lanes picture draws lane 0's request in the last lane's row"),
    Mutant("docs-kernels-ops-drawn-in-the-strip-of-the-op-before", PROPERTY, (
        Edit(DRAW, "            rows.setdefault(op.segment, []).append((i, op))\n",
             "            rows.setdefault(ops[max(i - 1, 0)].segment, []).append((i, op))\n"),),
        (f"{SPEC}::test_each_op_that_reads_a_layers_weights_is_drawn_in_that_layers_"
         "strip[v09]",), (),
        "the kernels picture draws each layer's first op in the previous layer's strip"),
    Mutant("docs-methods-paired-by-position-not-name", PROPERTY, (
        Edit(METHODS, "        same = next((o for o in left if o.name == m.name), None)\n",
             "        same = left[added.index(m)] if added.index(m) < len(left) else None\n"),),
        (f"{METHODS_SPEC}::test_a_swapped_parts_override_is_shown_beside_the_method_it_"
         "overrides",), (),
        "the compare page sets each changed method beside the older part's method in the same "
        "place in its class, not the one of its name"),
    Mutant("docs-shards-one-head-too-many", PROPERTY, (
        Edit(DRAW, "                    mine = start <= i < stop\n",
             "                    mine = start <= i <= stop\n"),),
        (f"{SPEC}::test_v16s_picture_shows_each_rank_holding_its_half_of_the_heads_the_mlp_and_"
         "the_vocabulary",), (),
        "the shards picture colours the head after a rank's range as its own too"),
]
