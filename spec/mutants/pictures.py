"""Picture content: the docs site's pictures show the run they claim to draw
(spec/test_docs_pictures.py reads each back against the engine). These mutants edit the
drawing, not a version (harness mutants: spec/mutants/__init__.py), each misplacing what it was
given while still drawing a plausible picture."""
from spec.mutants import Edit, Mutant

DRAW = "torchlet/docs/draw.py"
SPEC = "spec/test_docs_pictures.py"
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
]
