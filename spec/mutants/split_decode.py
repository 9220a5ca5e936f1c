"""Split-context decode attention (v10): below one request x KV head pair per SM, each context is
cut into chunks, one program each, and the last program of a pair to arrive combines them."""
from spec.mutants import Edit, Mutant

KERNELS = "v10_triton_paged_gqa/paged_kernels.py"
PAGE = "spec/test_v10_paged_kernels.py"
MANY = (f"{PAGE}::test_a_split_context_beside_a_padding_row_combines_its_chunks_and_the_row_"
        f"stays_zero")
BACK_TO_BACK = f"{PAGE}::test_split_launches_back_to_back_each_give_the_reference"

MUTANTS = [
    Mutant("v10-split-combine-drops-the-last-chunk", "split decode attention", (
        Edit(KERNELS, "            live_splits = tl.minimum(tl.cdiv(context, chunk), splits)",
             "            live_splits = tl.minimum(tl.cdiv(context, chunk), splits) - 1"),),
        (MANY, BACK_TO_BACK), ("v10",), "the combine leaves out the chunk that holds the newest tokens"),
    Mutant("v10-split-counters-never-reset", "split decode attention", (
        Edit(KERNELS, "            tl.store(counter, 0)\n", ""),),
        (BACK_TO_BACK,), ("v10",), "a launch leaves its arrival counters at the split count"),
]
