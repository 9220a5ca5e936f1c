"""The benches' timing (harness mutants: they edit torchlet/bench/). bench mixed times each
version after a full collection with the heap frozen, so that no earlier version's objects are
scanned by a collection inside another's timed run; each mutant undoes one part of that, which
only the collector's own counts around the bench's drives show."""
from spec.mutants import Edit, Mutant

MIXED = "torchlet/bench/mixed.py"
FROZEN = ("spec/test_bench.py::test_mixed_times_each_version_after_a_full_collection_with_the_"
          "heap_frozen")
PROPERTY = "bench timing"

MUTANTS = [
    Mutant("bench-mixed-heap-not-frozen", PROPERTY, (
        Edit(MIXED, "    gc.collect()\n    gc.freeze()\n", "    gc.collect()\n"),),
        (FROZEN,), (), "the timed run starts with every object left to the collector"),
    Mutant("bench-mixed-no-collection-first", PROPERTY, (
        Edit(MIXED, "    gc.collect()\n    gc.freeze()\n", "    gc.freeze()\n"),),
        (FROZEN,), (),
        "the heap is frozen with the earlier version's garbage in it: never collected"),
    Mutant("bench-mixed-heap-left-frozen", PROPERTY, (
        Edit(MIXED, "    finally:\n        gc.unfreeze()\n", "    finally:\n        pass\n"),),
        (FROZEN,), (), "the heap stays frozen after the timed run, through the next version"),
]
