"""Paged K/V (v08): the block-table invariants as the decode step reads them, and the block
allocator. The first three mutants keep every report (block_tables(), paged_metadata()) right and
most tokens right too: only the specs that watch the step's own buffers and stores notice them
(spec/support/watchers/block_watch.py)."""
from spec.mutants import Edit, Mutant

KV = "v08_paged_gqa_py/kv.py"  # its PagedKV
INPUTS = "v08_paged_gqa_py/inputs.py"  # the decode inputs that read it
STATIC_INPUTS = "v06_static_buffers/inputs.py"  # DecodeBuffers, decode_buffers(): v08 inherits them
POOL = "v08_paged_gqa_py/kv.py"  # its BlockPool

PAGED = "spec/test_v08_paged_engine.py"
POISON = (f"{PAGED}::test_with_unowned_blocks_poisoned_no_live_request_sees_a_nan_through_"
          f"preemption_and_reuse")
TIGHT = (f"{PAGED}::test_on_a_tight_pool_any_arrival_schedule_gets_its_solo_tokens_and_frees_"
         f"every_block")
MEMORY = (f"{PAGED}::test_on_the_same_workload_a_pool_sized_to_its_peak_allocates_a_tenth_of_"
          f"v07s_reservation")
KV_BYTES = (f"{PAGED}::test_kv_bytes_are_the_blocks_a_request_holds_and_never_more_than_its_"
            f"tokens_need")
BLOCKS = "spec/test_v08_block_pool.py"
MACHINE = (f"{BLOCKS}::test_allocator_under_random_allocate_append_finish_abort_preempt_keeps_"
           f"every_invariant")
FREE_ORDER = f"{BLOCKS}::test_free_returns_a_requests_blocks_tail_first_to_the_end_of_the_free_list"
GROWTH = f"{BLOCKS}::test_a_token_takes_a_new_block_only_when_the_last_block_is_full"
LIVE = (f"{PAGED}::test_an_eager_step_reads_only_the_blocks_its_requests_hold_not_room_for_"
        f"max_len")

TABLES = "block table invariants"
ALLOCATOR = "block allocator"
V08 = ("v08",)

# v06's write zeroes every field of every lane before the lanes written take their values: the
# idle lanes' entries of v08's fields are zeros, the null block's. A mutant spares one field.
ZEROED = "        for t in h.values():\n            t.zero_()\n"


def kept(field: str, what: str) -> str:
    return (f"        for name, t in h.items():\n"
            f"            if name != {field!r}:  # idle lanes keep {what}\n"
            f"                t.zero_()\n")


GROW = "            self._tables[request_id].append(self._take())"
FREE = "        self._free.extend(reversed(table))"

MUTANTS = [
    Mutant("v08-idle-lanes-keep-a-stale-slot-mapping", TABLES, (
        Edit(STATIC_INPUTS, ZEROED, kept("slot_mapping", "the slot of the last request they "
                                          "carried")),),
        (POISON, TIGHT), V08,
        "an idle decode lane keeps writing K/V into the slot of the request it last carried"),
    Mutant("v08-idle-lanes-keep-a-stale-block-table", TABLES, (
        Edit(STATIC_INPUTS, ZEROED, kept("block_tables", "whatever table they carried before")),
        Edit(INPUTS, "                self.table_rows[lane] = NULL_BLOCK\n",
             "                # a shorter table keeps the longer one's tail as its padding\n"),),
        (POISON, TIGHT), V08,
        "idle lanes (and the padding of shorter tables) keep the previous step's table"),
    Mutant("v08-idle-lanes-keep-a-stale-context", TABLES, (
        Edit(STATIC_INPUTS, ZEROED, kept("context_lens", "the context of the request they "
                                          "carried")),),
        (POISON, TIGHT), V08,
        "an idle lane keeps its last context length and attends over the null block"),
    Mutant("v08-decoded-slot-in-the-first-block", TABLES, (
        Edit(INPUTS, '            "slot_mapping": [kv.slot(r.id, p) for r, p in zip(requests, '
                     'positions)],',
             '            "slot_mapping": [kv.block_table(r.id)[0] * kv.block_size\n'
             '                             + p % kv.block_size\n'
             '                             for r, p in zip(requests, positions)],'),),
        (POISON, TIGHT), V08,
        "a decoded token's K/V goes to its offset in the request's first block, not its last"),
    Mutant("v08-decode-buffers-are-copies", TABLES, (
        Edit(STATIC_INPUTS, "        return dict(self.buffers.device_tensors)",
             "        return {n: t.clone() for n, t in self.buffers.device_tensors.items()}"),),
        (POISON,), V08,
        "decode_buffers() hands out copies: not the tensors the step reads"),
    Mutant("v08-freed-blocks-keep-their-kv", TABLES, (
        Edit(KV, "                self.poison(self.released(request_id))",
             "                pass  # a freed block keeps its last owner's K/V"),),
        (POISON,), V08,
        "poison_free_blocks poisons at build only: a freed block keeps its K/V"),
    Mutant("v08-pool-reserves-per-slot", TABLES, (
        Edit(KV,
             "        shape = (self.num_blocks, self.block_size, config.num_kv_heads, "
             "config.head_dim)",
             "        num_blocks = max(self.num_blocks,\n"
             "                         self.num_lanes * -(-self.max_len // self.block_size) + 1)\n"
             "        shape = (num_blocks, self.block_size, config.num_kv_heads, "
             "config.head_dim)"),),
        (MEMORY,), V08,
        "the K/V tensors are sized for every lane's whole context, whatever num_blocks says"),
    Mutant("v08-kv-bytes-count-the-whole-context", TABLES, (
        Edit(KV, "        blocks = len(self.pool.table(request_id)) if request_id in self.held",
             "        blocks = -(-self.max_len // self.block_size) if request_id in self.held"),),
        (KV_BYTES,), V08,
        "kv_bytes() reports a whole context's blocks instead of the blocks held"),

    Mutant("v08-leaked-block", ALLOCATOR, (
        Edit(POOL, FREE, "        self._free.extend(reversed(table[1:]))  # the head stays out"),),
        (MACHINE, POISON), V08,
        "a freed request's first block never returns to the free list"),
    Mutant("v08-block-handed-to-two-requests", ALLOCATOR, (
        Edit(POOL, GROW, "            self._tables[request_id].append(self._free[0])"),),
        (MACHINE, POISON), V08,
        "a request growing into a new block takes it without removing it from the free list"),
    Mutant("v08-blocks-freed-head-first", ALLOCATOR, (
        Edit(POOL, FREE, "        self._free.extend(table)"),),
        (FREE_ORDER, MACHINE), V08,
        "free() returns a request's blocks head first instead of tail first"),
    Mutant("v08-table-not-grown-with-its-block", ALLOCATOR, (
        Edit(POOL, GROW, "            self._take()"),),
        (GROWTH, POISON), V08,
        "a request takes a new block off the free list but its table never names it"),
    Mutant("v08-eager-step-reads-the-whole-table", TABLES, (
        Edit(INPUTS, "        return tensors[:at] + (tensors[at][:, :width],) + tensors[at + 1:]",
             "        return tensors"),),
        (LIVE,), V08,
        "an eager decode gathers every lane's whole padded table, room for max_len tokens, as a "
        "graph does: same tokens, batching buys nothing on a CPU"),
]
