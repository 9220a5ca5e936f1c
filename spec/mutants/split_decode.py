"""Split-context decode attention (v10): below one request x KV head pair per SM, each context is
cut into chunks, one program each, and a second launch combines each pair's partials."""
from spec.mutants import Edit, Mutant

KERNELS = "v10_triton_paged_gqa/paged_kernels.py"
PAGE = "spec/test_v10_paged_kernels.py"
MANY = f"{PAGE}::test_a_padding_row_with_context_zero_gives_zeros"
EDGES = f"{PAGE}::test_split_contexts_of_every_length_against_their_chunks_give_the_reference"
ORDER = (f"{PAGE}::test_a_requests_kv_heads_are_neighbouring_programs_that_read_one_set_of_"
         "token_rows")
FIXED = (f"{PAGE}::test_with_a_fixed_chunk_each_rows_result_is_the_same_bits_alone_and_in_any_"
         "batch")

MUTANTS = [
    Mutant("v10-split-combine-drops-the-last-chunk", "split decode attention", (
        Edit(KERNELS, "    live_splits = tl.minimum(tl.cdiv(tl.load(lens_ptr + b), chunk), splits)",
             "    live_splits = tl.minimum(tl.cdiv(tl.load(lens_ptr + b), chunk), splits) - 1"),),
        (MANY, EDGES), ("v10",), "the combine leaves out the chunk that holds the newest tokens"),
    Mutant("v10-split-chunks-overlap-by-a-token", "split decode attention", (
        Edit(KERNELS, "        hi = tl.minimum(lo + chunk, context)",
             "        hi = tl.minimum(lo + chunk + 1, context)"),),
        (MANY, EDGES), ("v10",), "each chunk also scores the next chunk's first token"),
    Mutant("v10-split-combine-forgets-to-rescale", "split decode attention", (
        Edit(KERNELS, "        big_acc = big_acc * rescale[:, None] + tl.sum(w[:, :, None] * acc_s, axis=0)",
             "        big_acc = big_acc + tl.sum(w[:, :, None] * acc_s, axis=0)"),),
        (MANY, EDGES), ("v10",), "the combine adds a chunk's sum without rescaling the ones before"),
    Mutant("v10-fixed-chunk-ignored", "split decode attention", (
        Edit(KERNELS, "    if fixed_chunk:\n        return _plan_fixed(max_context, fixed_chunk)",
             "    if False:\n        return _plan_fixed(max_context, fixed_chunk)"),),
        (FIXED,), ("v10",),
        "a fixed chunk is ignored: contexts are cut as the batch's shape plans, so a row's bits "
        "depend on the rows beside it"),
    Mutant("v10-a-requests-kv-heads-a-launch-apart", "split decode attention", (
        Edit(KERNELS, "    b = (pair // kv_heads).to(tl.int64)\n    kv_head = pair % kv_heads\n",
             "    b = (pair % (tl.num_programs(0) // kv_heads)).to(tl.int64)\n"
             "    kv_head = pair // (tl.num_programs(0) // kv_heads)\n"),),
        (ORDER,), ("v10",),
        "request-major order lost: the programs of one request's KV heads lie a batch apart, so "
        "each reads its part of the token rows at another time (the same numbers)"),
]
