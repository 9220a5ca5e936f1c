"""The benches' timing (harness mutants: they edit torchlet/bench/). bench mixed, and every bench
that runs a workload through run_job (cpu, gpu-workload), time each version after a full
collection with the heap frozen, so that no collection inside a timed run scans the objects
that were alive before it; each mutant undoes one part of that, which only the collector's own
counts around the benches' timed runs show."""
from spec.mutants import Edit, Mutant

RUN = "torchlet/bench/run.py"
FROZEN = ("spec/test_bench.py::test_mixed_times_each_version_after_a_full_collection_with_the_"
          "heap_frozen")
JOB = ("spec/test_bench.py::test_a_workload_bench_times_each_version_after_a_full_collection_"
       "with_the_heap_frozen")
PROPERTY = "bench timing"
MICRO = "torchlet/bench/micro.py"
BUSY = "spec/test_bench.py::test_the_gpus_busy_time_counts_kernels_that_overlap_once"
DECODE = ("spec/test_bench.py::test_the_decode_bench_times_its_steps_after_a_full_collection_"
          "with_the_heap_frozen")

MUTANTS = [
    Mutant("bench-heap-not-frozen", PROPERTY, (
        Edit(RUN, "    gc.collect()\n    gc.freeze()\n", "    gc.collect()\n"),),
        (FROZEN,), (), "the timed run starts with every object left to the collector"),
    Mutant("bench-heap-frozen-without-a-collection", PROPERTY, (
        Edit(RUN, "    gc.collect()\n    gc.freeze()\n", "    gc.freeze()\n"),),
        (FROZEN,), (),
        "the heap is frozen with the earlier version's garbage in it: never collected"),
    Mutant("bench-heap-left-frozen", PROPERTY, (
        Edit(RUN, "    finally:\n        gc.unfreeze()\n", "    finally:\n        pass\n"),),
        (FROZEN,), (), "the heap stays frozen after the timed run, through the next version"),
    Mutant("bench-workload-run-unfrozen", PROPERTY, (
        Edit(RUN, "        with frozen_heap():\n            cpu_start = time.process_time()\n"
                  "            row = runner(engine, job.workload, job.device, job.progress)",
             "        if True:\n            cpu_start = time.process_time()\n"
             "            row = runner(engine, job.workload, job.device, job.progress)"),),
        (JOB,), (), "a workload bench times its run with every object left to the collector"),
    Mutant("bench-busy-time-sums-kernels", PROPERTY, (
        Edit(MICRO, "            busy += end - max(start, reach)\n",
             "            busy += end - start\n"),),
        (BUSY,), (), "a decode step's GPU time adds up kernels that overlap: with dependent "
                     "launches more than the step's wall time"),
    Mutant("bench-decode-steps-timed-unfrozen", PROPERTY, (
        Edit(MICRO, "    with frozen_heap():  # no collection scans", "    if True:  # no collection scans"),),
        (DECODE,), (), "a decode cell's timed steps run with the engine's objects left to the "
                       "collector"),
]
