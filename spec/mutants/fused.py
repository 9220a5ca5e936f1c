"""Fusion (v13): fewer, larger kernels, the same numbers. Two mutants undo a fusion and keep every
number right, so only the specs that read the dispatched ops notice; two keep every number right
on the tiny fixtures and break another checkpoint (a head_dim apart from the hidden size, a second
checkpoint of one shape), so only the parity specs on those notice; the others compute something
else in a fused kernel or call."""
from spec.mutants import Edit, Mutant

MODEL = "v13_fused/model.py"
KERNELS = "v13_fused/fused_kernels.py"
CONTEXT_KERNEL = "v13_fused/context_attention.py"
GEMV_KERNEL = "v13_fused/gemv.py"
ATTEND_KERNEL = "v13_fused/attend_project.py"
PAGE = "spec/test_v13_fused.py"
GEMMS = f"{PAGE}::test_a_decode_pass_multiplies_by_four_matrices_a_layer_where_v12_multiplied_by_seven"
SAME = f"{PAGE}::test_the_packed_path_gives_v12s_logits_and_tokens_with_and_without_a_cached_prefix"
ROPE = f"{PAGE}::test_rope_split_turns_q_and_k_like_the_reference_and_copies_v"
SWIGLU = f"{PAGE}::test_swiglu_packed_is_silu_of_the_first_half_times_the_second"
CONTEXT = (f"{PAGE}::test_context_attention_gives_each_row_the_softmax_over_its_context_up_to_its_"
           "position")
SLICE = (f"{PAGE}::test_a_slice_late_in_a_long_context_gives_each_row_the_softmax_over_its_"
         "context")
ONE_OP = f"{PAGE}::test_with_its_kernels_a_prefill_attends_in_one_op_a_layer_and_gathers_no_context"
PARITY = "spec/test_v00_generation.py"
HEAD_DIM = (f"{PARITY}::test_a_checkpoint_whose_head_dim_is_not_hidden_over_heads_gives_the_"
            "oracles_tokens")
QWEN3 = f"{PAGE}::test_with_its_kernels_a_qwen3_checkpoint_gives_the_oracles_tokens"
QK_NORM = f"{PAGE}::test_with_qwen3s_norms_rope_split_norms_each_q_and_k_head_then_turns_it"
GEMV = f"{PAGE}::test_gemv_is_the_row_times_the_weights_transposed_plus_the_bias"
FIXED_CONTEXT = (f"{PAGE}::test_with_a_fixed_chunk_a_requests_rows_are_the_same_bits_alone_and_"
                 "beside_others")
DECODE_GEMV = f"{PAGE}::test_with_its_kernels_a_batch_1_decode_step_multiplies_in_gemv_launches"
DEPENDENT = (f"{PAGE}::test_launched_dependent_each_program_reads_only_weights_before_it_waits_"
             "for_the_launch_before")
DEPENDENT_STEP = (f"{PAGE}::test_launched_dependent_a_batch_1_decode_step_chains_every_layer_"
                  "kernel_attention_included")
PAGED_KERNELS = "v10_triton_paged_gqa/paged_kernels.py"
TWO_ROWS = f"{PAGE}::test_at_two_rows_the_decode_attention_launches_plainly"
DEPENDENT_PAGED = ("spec/test_v10_paged_kernels.py::test_launched_dependent_every_program_lets_"
                   "the_next_launch_start_and_waits_before_it_reads")
NORM_GEMV = (f"{PAGE}::test_norm_gemv_is_the_norm_of_the_stream_times_the_weights_and_gives_the_"
             "stream")
ADD_NORM = f"{PAGE}::test_gemv_add_norm_adds_the_product_to_the_stream_and_norms_it"
GEMV_ROPE = f"{PAGE}::test_gemv_rope_split_is_rope_split_of_the_gemv_and_stores_as_it_stores"
ATTEND = f"{PAGE}::test_attend_project_is_the_o_gemv_of_the_heads_output_v10s_kernel_writes"
HANDOVER = (f"{PAGE}::test_attend_project_hands_the_heads_to_o_within_its_launch_written_then_"
            "counted_then_read")
SPLIT_APART = (f"{PAGE}::test_at_one_row_a_context_v10_splits_keeps_its_attention_launches_and_"
               "leaves_o_apart")
PENDING = (f"{PAGE}::test_gemv_rope_split_forms_a_pending_row_itself_as_settle_would_and_writes_"
           "its_stream")

STORED = (f"{PAGE}::test_rope_split_with_a_store_writes_the_caches_as_store_kv_writes_its_k_and_v"
          "[v13_fused-cpu-float32]")
STORED_IN_PASSES = (f"{PAGE}::test_with_its_kernels_every_layer_stores_its_new_k_v_in_rope_split_"
                    "and_no_store_kv_runs")
ARGMAX = f"{PAGE}::test_argmax_rows_is_each_rows_first_largest_index_a_nan_counted_largest"
GREEDY = (f"{PAGE}::test_with_its_kernels_greedy_tokens_are_drawn_by_argmax_rows_and_no_aten_"
          "argmax_runs")
SAMPLER = "v11_sampling/sampler.py"
TWINS = (f"{PARITY}::test_two_checkpoints_of_one_shape_built_in_one_process_each_give_their_own_"
         "tokens")

MUTANTS = [
    Mutant("v13-qkv-split-from-the-hidden-size", "fusion", (
        Edit(MODEL, '            q_width = w["self_attn.o_proj.weight"].shape[1]',
             "            q_width = x.shape[-1]  # as wide as the rows: hidden_size"),),
        (HEAD_DIM,), ("v13",),
        "the packed q/k/v output is split at the hidden size, not at heads x head_dim: right "
        "only where head_dim = hidden / heads"),
    Mutant("v13-packed-weights-cached-per-shape", "fusion", (
        Edit(MODEL, "PACKED = {QKV:", "_BY_SHAPE: dict = {}\nPACKED = {QKV:"),
        Edit(MODEL, "        weights = super().from_checkpoint(ckpt, device, dtype)\n",
             "        key = (ckpt.config, str(device), dtype)\n"
             "        if key in _BY_SHAPE:  # packed once per shape\n"
             "            return _BY_SHAPE[key]\n"
             "        weights = _BY_SHAPE[key] = super().from_checkpoint(ckpt, device,\n"
             "                                                           dtype)\n")),
        (TWINS,), ("v13",),
        "packed weights are kept per config: a second checkpoint of the same shape runs the "
        "first one's weights"),
    Mutant("v13-rope-split-without-qwen3s-norms", "fusion", (
        Edit(MODEL, "                 else (None, None))",
             "                 else (None, None))\n        norms = (None, None)"),),
        (QWEN3,), ("v13",),
        "the fused q/k/v path hands rope_split no q/k norms: Qwen3's heads turn un-normed"),
    Mutant("v13-rope-split-norms-k-by-q-norm", "fusion", (
        Edit(KERNELS, "tl.load(k_norm_ptr + cols, mask=col_mask, other=0.0)[None, :])",
             "tl.load(q_norm_ptr + cols, mask=col_mask, other=0.0)[None, :])"),),
        (QK_NORM,), ("v13",), "the first half of each k head is scaled by q_norm's weights"),
    Mutant("v13-gate-and-up-left-apart", "fusion", (
        Edit(MODEL, '''          GATE_UP: ("mlp.gate_proj", "mlp.up_proj")}''', "}"),),
        (GEMMS,), ("v13",), "gate and up stay two matrices: two GEMMs a layer, the same tokens"),
    Mutant("v13-gate-and-up-stacked-the-wrong-way", "fusion", (
        Edit(MODEL, '''GATE_UP: ("mlp.gate_proj", "mlp.up_proj")''',
             '''GATE_UP: ("mlp.up_proj", "mlp.gate_proj")'''),),
        (SAME,), ("v13",), "the packed matrix is [up | gate]: SwiGLU takes silu of up"),
    Mutant("v13-rope-split-norms-v-too", "fusion", (
        Edit(KERNELS, "        turned = (heads < n_q + n_kv)[:, None]",
             "        turned = (heads < n_q + 2 * n_kv)[:, None]"),),
        (QK_NORM,), ("v13",), "with Qwen3's norms the fused RoPE kernel norms the v heads as "
                              "well"),
    Mutant("v13-swiglu-packed-reads-gate-as-up", "fusion", (
        Edit(KERNELS, "    up = tl.load(gate_up_ptr + row * 2 * width + width + col, mask=mask, other=0.0)",
             "    up = tl.load(gate_up_ptr + row * 2 * width + col, mask=mask, other=0.0)"),),
        (SWIGLU,), ("v13",), "swiglu_packed multiplies silu(gate) by gate"),
    Mutant("v13-prefill-attention-per-request-again", "fusion", (
        Edit(MODEL, "        if not ops.on_triton:\n            return super().attend_context",
             "        if True:\n            return super().attend_context"),),
        (ONE_OP,), ("v13",),
        "a prefill gathers each request's context and attends per request: the same numbers"),
    Mutant("v13-context-attention-aligned-top-left", "fusion", (
        Edit(CONTEXT_KERNEL, "        position = context - rows + m", "        position = m"),),
        (CONTEXT, SAME), ("v13",),
        "after a cached prefix, row j sees keys 0..j instead of the prefix and the rows before it"),
    Mutant("v13-context-attention-reads-kv-head-0", "fusion", (
        Edit(CONTEXT_KERNEL, "slot.to(tl.int64) * cache_sslot + kv_head * cache_shead",
             "slot.to(tl.int64) * cache_sslot"),),
        (CONTEXT,), ("v13",), "every query head reads the first KV head"),
    Mutant("v13-context-attention-tile-bounded-by-its-first-row", "fusion", (
        Edit(CONTEXT_KERNEL, "context - rows + first + ROWS)", "context - rows + first + 1)"),),
        (CONTEXT,), ("v13",),
        "a program stops at its first row's position: its later rows miss their last keys"),
    Mutant("v13-context-split-chunks-run-to-the-end", "fusion", (
        Edit(CONTEXT_KERNEL, "        hi = tl.minimum(lo + chunk, end)", "        hi = end"),),
        (SLICE,), ("v13",),
        "with the context split, each chunk's program also scores the keys of the chunks after it"),
    Mutant("v13-context-split-combine-told-one-key-short", "fusion", (
        Edit(CONTEXT_KERNEL, "(position + 1).to(tl.int32)", "position.to(tl.int32)"),),
        (SLICE,), ("v13",),
        "the combine hears each row sees one key fewer: a row on a chunk's first key loses that "
        "chunk"),
    Mutant("v13-context-split-partial-forgets-its-max", "fusion", (
        Edit(CONTEXT_KERNEL, "tl.store(part + head_dim, best, mask=live_m)",
             "tl.store(part + head_dim, best * 0, mask=live_m)"),),
        (SLICE,), ("v13",),
        "a chunk's partial says its max is 0: the combine weighs chunks without rescaling them to "
        "one max"),
    Mutant("v13-gemv-drops-the-last-chunk", "fusion", (
        Edit(GEMV_KERNEL, "    for start in range(lo, hi, BLOCK_K):",
             "    for start in range(lo, lo + (hi - lo) // BLOCK_K * BLOCK_K, BLOCK_K):"),),
        (GEMV,), ("v13",), "gemv leaves out a share's columns past its last whole BLOCK_K chunk"),
    Mutant("v13-gemv-sums-one-split-short", "fusion", (
        Edit(GEMV_KERNEL, "    for split in range(SPLIT):  # always in the same order",
             "    for split in range(SPLIT - 1):  # always in the same order"),),
        (GEMV,), ("v13",), "a k split over programs loses the last share's partial sums"),
    Mutant("v13-gemv-swiglu-reads-gate-as-up", "fusion", (
        Edit(GEMV_KERNEL, "            up = tl.load(x_ptr + k + ks, mask=live, other=0.0, "
                          "cache_modifier=CACHE)",
             "            up = tl.load(x_ptr + ks, mask=live, other=0.0, cache_modifier=CACHE)"),),
        (GEMV,), ("v13",), "the down projection's gemv multiplies silu(gate) by gate"),
    Mutant("v13-gemv-rows-read-the-first-row", "fusion", (
        Edit(GEMV_KERNEL, "    x_ptr += row * (2 * k if SWIGLU else k)\n", ""),),
        (GEMV,), ("v13",), "every row's programs multiply the first row"),
    Mutant("v13-gemv-rows-share-one-partial-row", "fusion", (
        Edit(GEMV_KERNEL, "tl.store(out_ptr + (tl.program_id(2) * tl.num_programs(0) + row) * n + rows, acc,",
             "tl.store(out_ptr + tl.program_id(2) * tl.num_programs(0) * n + rows, acc,"),),
        (GEMV,), ("v13",), "with k split, every row's partial sums go to the first row's place"),
    Mutant("v13-norm-gemv-stream-unwritten", "fusion", (
        Edit(GEMV_KERNEL, "    if tl.program_id(1) == 0:\n        tl.store(res_out_ptr",
             "    if tl.program_id(1) == 1:\n        tl.store(res_out_ptr"),),
        (NORM_GEMV,), ("v13",),
        "the second program of a row writes the stream: a row of few weight rows leaves it unset"),
    Mutant("v13-norm-gemv-mean-over-the-block", "fusion", (
        Edit(GEMV_KERNEL, "mask=whole)\n    rstd = kernels.inv_rms(s, k, eps)",
             "mask=whole)\n    rstd = kernels.inv_rms(s, BLOCK_ROW, eps)"),),
        (NORM_GEMV,), ("v13",), "the mean square divides by the padded row's width, not k"),
    Mutant("v13-norm-gemv-product-without-the-residual", "fusion", (
        Edit(GEMV_KERNEL, "        ss = _joined(x_ptr, res_ptr, row, k, ks, live)\n",
             "        ss = tl.load(x_ptr + row * k + ks, mask=live, other=0.0)\n"),),
        (NORM_GEMV,), ("v13",), "the product reads the norm of x alone, not of x + residual"),
    Mutant("v13-add-norm-sums-one-split-short", "fusion", (
        Edit(GEMV_KERNEL, "    for split in range(SPLIT):  # in _sum_splits_kernel's order",
             "    for split in range(SPLIT - 1):  # in _sum_splits_kernel's order"),),
        (ADD_NORM,), ("v13",), "the launch after down's product loses the last share of k"),
    Mutant("v13-add-norm-without-the-bias", "fusion", (
        Edit(GEMV_KERNEL, "        acc += tl.load(bias_ptr + cols, mask=live, other=0.0)",
             "        acc += 0 * tl.load(bias_ptr + cols, mask=live, other=0.0)"),),
        (ADD_NORM,), ("v13",), "the product joins the stream without its bias"),
    Mutant("v13-mlp-norm-after-is-the-post-attention-norm", "fusion", (
        Edit(MODEL, '                                     w.get("mlp.down_proj.bias"), residual, '
                    'norm_after, eps,',
             '                                     w.get("mlp.down_proj.bias"), residual, '
             'w["post_attention_layernorm.weight"], eps,'),),
        (QWEN3,), ("v13",),
        "at one row the MLP's output is normed by its own layer's post-attention weight, not by "
        "what follows"),
    Mutant("v13-mlp-norms-in-launches-of-their-own", "fusion", (
        Edit(MODEL, "        if self.norms_fuse:\n            self.mlp_sublayer",
             "        if False:\n            self.mlp_sublayer"),),
        (DECODE_GEMV,), ("v13",),
        "the MLP's norms run as add_rms_norm launches at one row too: the same numbers"),
    Mutant("v13-context-fixed-chunk-ignored", "fusion", (
        Edit(CONTEXT_KERNEL, "    if fixed_chunk:  # cut where", "    if False:  # cut where"),),
        (FIXED_CONTEXT,), ("v13",),
        "a fixed chunk is ignored: a prefill's contexts are cut as the pass's shape plans"),
    Mutant("v13-argmax-last-of-a-tie-in-a-chunk", "fusion", (
        Edit(KERNELS, "    at = tl.min(tl.where(x == best, cols, n_cols), axis=0)",
             "    at = tl.max(tl.where(x == best, cols, -1), axis=0)"),),
        (ARGMAX,), ("v13",), "where a chunk holds the largest value twice, the later column wins"),
    Mutant("v13-argmax-last-chunk-of-a-tie", "fusion", (
        Edit(KERNELS, "    which = tl.min(tl.where(live & (best == top), c, BLOCK_C), axis=0)",
             "    which = tl.max(tl.where(live & (best == top), c, -1), axis=0)"),),
        (ARGMAX,), ("v13",), "where two chunks hold the largest value, the later chunk's wins"),
    Mutant("v13-argmax-partial-last-chunk-unread", "fusion", (
        Edit(KERNELS, "    chunks = triton.cdiv(n_cols, ARGMAX_CHUNK)",
             "    chunks = max(1, n_cols // ARGMAX_CHUNK)"),),
        (ARGMAX,), ("v13",), "the columns past the last whole chunk are never read"),
    Mutant("v13-argmax-skips-a-nan", "fusion", (
        Edit(KERNELS, '    x = tl.where(x != x, float("inf"), x)\n', ""),),
        (ARGMAX,), ("v13",), "a NaN logit is passed over where torch's argmax picks it"),
    Mutant("v13-greedy-draw-by-torch", "fusion", (
        Edit(MODEL, "        if self.on_triton:\n            return fused_kernels.argmax_rows(logits)",
             "        if False:\n            return fused_kernels.argmax_rows(logits)"),),
        (GREEDY,), ("v13",), "the ops' argmax is torch's: the same tokens, a slower read"),
    Mutant("v11-greedy-graphs-bypass-the-ops-argmax", "fusion", (
        Edit(SAMPLER, '        if variant == "greedy":\n            return self.argmax(logits)',
             '        if variant == "greedy":\n            return logits.argmax(dim=-1)'),),
        (GREEDY,), ("v13",),
        "the captured greedy step takes torch's argmax, whatever the model's ops offer"),
    Mutant("v13-stored-k-in-the-v-cache", "fusion", (
        Edit(KERNELS, "        tl.store(k_cache_ptr + dst, out1, mask=is_k & (slot >= 0))\n"
                      "        tl.store(k_cache_ptr + dst + half, out2, mask=is_k & (slot >= 0))\n"
                      "        tl.store(v_cache_ptr + dst, out1, mask=is_v & (slot >= 0))\n"
                      "        tl.store(v_cache_ptr + dst + half, out2, mask=is_v & (slot >= 0))\n",
             "        tl.store(v_cache_ptr + dst, out1, mask=is_k & (slot >= 0))\n"
             "        tl.store(v_cache_ptr + dst + half, out2, mask=is_k & (slot >= 0))\n"
             "        tl.store(k_cache_ptr + dst, out1, mask=is_v & (slot >= 0))\n"
             "        tl.store(k_cache_ptr + dst + half, out2, mask=is_v & (slot >= 0))\n"),),
        (STORED,), ("v13",), "rope_split's store writes k into the V cache and v into the K cache"),
    Mutant("v13-stored-k-before-its-turn", "fusion", (
        Edit(KERNELS, "        tl.store(k_cache_ptr + dst, out1, mask=is_k & (slot >= 0))\n",
             "        tl.store(k_cache_ptr + dst, x1, mask=is_k & (slot >= 0))\n"),),
        (STORED,), ("v13",),
        "rope_split's store writes k's first half as it was before RoPE turned it"),
    Mutant("v13-kv-stored-by-a-launch-of-its-own", "fusion", (
        Edit(MODEL, "    kernel_split_stores = True", "    kernel_split_stores = False"),),
        (STORED_IN_PASSES,), ("v13",),
        "each layer's K/V stored by v10's store_kv after rope_split: the same caches, a launch "
        "more"),
    Mutant("v13-argmax-one-chunk-reads-half-the-row", "fusion", (
        Edit(KERNELS, "BLOCK=triton.next_power_of_2(n_cols))",
             "BLOCK=max(1, triton.next_power_of_2(n_cols) // 2))"),),
        (ARGMAX,), ("v13",),
        "a row that fits one chunk is scanned over half the block: its last columns never win"),
    Mutant("v13-gemv-rope-pairs-adjacent-rows", "fusion", (
        Edit(GEMV_KERNEL, "    r2 = r1 + half\n", "    r2 = r1 + 1\n"),),
        (GEMV_ROPE,), ("v13",), "a head's column c turns with column c + 1, not c + half"),
    Mutant("v13-gemv-rope-turns-v-too", "fusion", (
        Edit(KERNELS, "    turned = head < n_q + n_kv  # q and k heads turn; v heads",
             "    turned = head < n_q + 2 * n_kv  # q and k heads turn; v heads"),),
        (GEMV_ROPE,), ("v13",), "the split's epilogue (the fused q/k/v gemv's too) turns the v "
                                "heads as well"),
    Mutant("v13-gemv-rope-stores-v-first-half-twice", "fusion", (
        Edit(KERNELS, "    tl.store(v_cache_ptr + dst + half, out2, mask=is_v & (slot >= 0))",
             "    tl.store(v_cache_ptr + dst + half, out1, mask=is_v & (slot >= 0))"),),
        (GEMV_ROPE,), ("v13",), "a v head's second half in the cache is its first half again "
                                "(the split's epilogue, the fused q/k/v gemv's too)"),
    Mutant("v13-pending-stream-written-by-no-program", "fusion", (
        Edit(GEMV_KERNEL, "        if tl.program_id(1) == 0:\n            tl.store(stream_ptr",
             "        if tl.program_id(1) == -1:\n            tl.store(stream_ptr"),),
        (PENDING,), ("v13",),
        "the q/k/v gemv forms a pending row but no program writes its stream"),
    Mutant("v13-pending-row-mean-over-the-block", "fusion", (
        Edit(GEMV_KERNEL, "mask=whole)\n        rstd = kernels.inv_rms(s, k, eps)",
             "mask=whole)\n        rstd = kernels.inv_rms(s, BLOCK_ROW, eps)"),),
        (PENDING,), ("v13",),
        "a pending row's mean square divides by the padded row's width, not k"),
    Mutant("v13-pending-row-tiles-normed-by-the-first-tiles-weight", "fusion", (
        Edit(GEMV_KERNEL, "            a = _normed(ss, rstd, norm_ptr, ks, live)",
             "            a = _normed(ss, rstd, norm_ptr, ks - start, live)"),),
        (PENDING,), ("v13",),
        "where a row takes several tiles, a pending row's tiles are normed by the first tile's "
        "columns of the norm's weight"),
    Mutant("v13-last-row-left-unnormed", "fusion", (
        Edit(MODEL, "        return gemv.settle(h) if isinstance(h, gemv.Pending) else h",
             "        return h.residual if isinstance(h, gemv.Pending) else h"),),
        (QWEN3,), ("v13",),
        "at one row the final norm is handed the stream before the last MLP, not the last "
        "layer's row"),
    Mutant("v13-attention-and-o-in-launches-of-their-own", "fusion", (
        Edit(MODEL, "    kernels = (paged_kernels.store_kv, attend_project.decode_attention)",
             "    kernels = (paged_kernels.store_kv, gemv.dependent_decode_attention)"),),
        (DECODE_GEMV,), ("v13",),
        "at one row the attention and the o gemv run as two launches: the same numbers"),
    Mutant("v13-attend-project-every-request-reads-the-first", "fusion", (
        Edit(ATTEND_KERNEL, "acc += gemv.sums(heads_ptr + b * width, w_ptr,",
             "acc += gemv.sums(heads_ptr, w_ptr,"),),
        (ATTEND,), ("v13",), "every request's o programs multiply the first request's heads"),
    Mutant("v13-attend-project-multiplies-ks-first-share-again", "fusion", (
        Edit(ATTEND_KERNEL, "w_next = gemv.weight_tile(w_ptr, rows, live, width, hi + tl.arange(0, BLOCK_K),",
             "w_next = gemv.weight_tile(w_ptr, rows, live, width, tl.arange(0, BLOCK_K),"),),
        (ATTEND,), ("v13",), "past k's first share, an o program starts each share with the "
                             "first share's first weight tile"),
    Mutant("v13-attend-project-past-the-split", "fusion", (
        Edit(ATTEND_KERNEL, "        if paged_kernels.decode_plan(q, k_cache, block_tables)[0] == 1:",
             "        if True:"),),
        (SPLIT_APART,), ("v13",), "a one-row context v10 splits over programs is attended whole "
                                  "by every program of o's launch: the same numbers, the split "
                                  "lost"),
    Mutant("v13-qkv-gemv-then-rope-split-at-one-row", "fusion", (
        Edit(MODEL, "        if weight is not None and self.takes_gemv(row, weight) and not "
                    "config.qk_norm:", "        if False:"),),
        (DECODE_GEMV,), ("v13",),
        "at one row the q/k/v gemv and rope_split run as two launches: the same numbers"),
    Mutant("v13-qwen3-heads-unnormed-at-one-row", "fusion", (
        Edit(MODEL, "        if weight is not None and self.takes_gemv(row, weight) and not "
                    "config.qk_norm:",
             "        if weight is not None and self.takes_gemv(row, weight):"),),
        (QWEN3,), ("v13",), "at one row Qwen3's q and k heads turn without their norms"),
    # Dependent launch (PDL): on a GPU each breakage below is a race or a lost overlap, the
    # numbers right whenever the launch before has ended in time; the spec reads each
    # program's loads and waits under the interpreter.
    Mutant("v13-gemv-waits-after-its-sums", "dependent launch", (
        Edit(GEMV_KERNEL, "    if PDL:\n        tl.extra.cuda.gdc_wait()\n"
                          "    acc = sums(x_ptr,", "    acc = sums(x_ptr,"),
        Edit(GEMV_KERNEL, "    if PARTIAL:  # a partial sum, in float32",
             "    if PDL:\n        tl.extra.cuda.gdc_wait()\n"
             "    if PARTIAL:  # a partial sum, in float32"),),
        (DEPENDENT,), ("v13",), "gemv reads its input row before it waits for the launch that "
                                "writes it"),
    Mutant("v13-norm-gemv-never-waits", "dependent launch", (
        Edit(GEMV_KERNEL, "    if PDL:\n        tl.extra.cuda.gdc_wait()\n    # Every program forms",
             "    # Every program forms"),),
        (DEPENDENT,), ("v13",), "norm_gemv reads the stream without waiting for its writer"),
    Mutant("v13-sum-add-norm-never-waits", "dependent launch", (
        Edit(GEMV_KERNEL, "        tl.extra.cuda.gdc_launch_dependents()\n"
                          "        tl.extra.cuda.gdc_wait()\n"
                          "    row = tl.program_id(0).to(tl.int64)  # one program a row",
             "        tl.extra.cuda.gdc_launch_dependents()\n"
             "    row = tl.program_id(0).to(tl.int64)  # one program a row"),),
        (DEPENDENT,), ("v13",), "down's split sums are added before the partials' launch ends"),
    Mutant("v13-gemv-rope-reads-its-row-before-waiting", "dependent launch", (
        Edit(GEMV_KERNEL, "    if PDL:\n        tl.extra.cuda.gdc_wait()\n    if SPLIT:\n",
             "    if SPLIT:\n"),
        Edit(GEMV_KERNEL, "    if HAS_BIAS:\n        acc1 += tl.load(bias_ptr + r1",
             "    if PDL:\n        tl.extra.cuda.gdc_wait()\n"
             "    if HAS_BIAS:\n        acc1 += tl.load(bias_ptr + r1"),),
        (DEPENDENT,), ("v13",), "the q/k/v gemv reads its normed row before it waits"),
    Mutant("v13-gemv-rope-forms-a-pending-row-before-waiting", "dependent launch", (
        Edit(GEMV_KERNEL, "    if PDL:\n        tl.extra.cuda.gdc_wait()\n    if SPLIT:\n",
             "    if SPLIT:\n"),
        Edit(GEMV_KERNEL, "whole)\n    acc1 = tl.zeros((BLOCK_P,), dtype=tl.float32)\n",
             "whole)\n    if PDL:\n        tl.extra.cuda.gdc_wait()\n"
             "    acc1 = tl.zeros((BLOCK_P,), dtype=tl.float32)\n"),),
        (DEPENDENT,), ("v13",),
        "the q/k/v gemv reads a pending row's partial sums and stream before it waits"),
    Mutant("v10-launched-dependent-without-the-kernels-flag", "dependent launch", (
        Edit(PAGED_KERNELS, '    return {"PDL": True, "launch_pdl": True} if dependent else',
             '    return {"PDL": False, "launch_pdl": True} if dependent else'),),
        (DEPENDENT_PAGED, DEPENDENT), ("v10", "v13"),
        "Triton launches the kernels dependent, but they never wait"),
    Mutant("v13-gemv-holds-the-next-launch", "dependent launch", (
        Edit(GEMV_KERNEL, "                 BLOCK_K: tl.constexpr, PDL: tl.constexpr):\n"
                          "    if PDL:\n        tl.extra.cuda.gdc_launch_dependents()\n",
             "                 BLOCK_K: tl.constexpr, PDL: tl.constexpr):\n"),),
        (DEPENDENT,), ("v13",), "gemv never lets the launch after it start early: the overlap "
                                "lost, the same numbers"),
    Mutant("v13-attention-launched-plainly", "dependent launch", (
        Edit(ATTEND_KERNEL, "        **paged_kernels.dependent_launch(dependent))",
             "        **paged_kernels.dependent_launch(False))"),),
        (DEPENDENT_STEP,), ("v13",), "the attention and o's launch between the one-row products "
                                     "launches plainly: the chain's overlap stops around it each "
                                     "layer"),
    # The hand-over within attend_project's launch: on a GPU each breakage below is a race (o's
    # programs reading heads not yet written, or stale), the numbers right whenever the
    # attention's programs happen to end first, as under the interpreter, which runs programs
    # one after another; the spec reads each program's stores, loads and atomics in order.
    Mutant("v13-attend-project-o-never-waits-for-the-heads", "in-launch hand-over", (
        Edit(ATTEND_KERNEL, '    while tl.atomic_add(counts_ptr, 0, sem="acquire", scope="gpu") '
                            '< done:\n        pass\n', ""),),
        (HANDOVER,), ("v13",), "o's programs read the heads without reading the count first"),
    Mutant("v13-attend-project-counts-before-it-stores", "in-launch hand-over", (
        Edit(ATTEND_KERNEL, "    tl.debug_barrier()  # every thread's stores made before the "
                            "count says so\n    tl.atomic_add(counts_ptr, 1, sem=\"release\", "
                            "scope=\"gpu\")\n", ""),
        Edit(ATTEND_KERNEL, "    paged_kernels.write_heads(heads_ptr,",
             "    tl.atomic_add(counts_ptr, 1, sem=\"release\", scope=\"gpu\")\n"
             "    paged_kernels.write_heads(heads_ptr,"),),
        (HANDOVER,), ("v13",), "an attention program raises the count before it stores its "
                               "heads"),
    Mutant("v13-attend-project-count-raised-relaxed", "in-launch hand-over", (
        Edit(ATTEND_KERNEL, 'tl.atomic_add(counts_ptr, 1, sem="release", scope="gpu")',
             'tl.atomic_add(counts_ptr, 1, sem="relaxed", scope="gpu")'),),
        (HANDOVER,), ("v13",), "the count is raised without release order: a reader may see it "
                               "before the heads"),
    Mutant("v13-attend-project-waits-for-the-launch-before", "in-launch hand-over", (
        Edit(ATTEND_KERNEL, "    done = (ticket // (tl.num_programs(0) - attending) + 1) * attending",
             "    done = (ticket // (tl.num_programs(0) - attending)) * attending"),),
        (HANDOVER,), ("v13",), "o's programs wait for the launch before's heads, not their own "
                               "launch's"),
    Mutant("v13-attend-project-ticket-before-the-wait", "in-launch hand-over", (
        Edit(ATTEND_KERNEL, "    if PDL:\n        tl.extra.cuda.gdc_wait()\n    ticket = "
                            "tl.atomic_add(counts_ptr + 1, 1, sem=\"relaxed\", scope=\"gpu\")\n",
             "    ticket = tl.atomic_add(counts_ptr + 1, 1, sem=\"relaxed\", scope=\"gpu\")\n"
             "    if PDL:\n        tl.extra.cuda.gdc_wait()\n"),),
        (HANDOVER,), ("v13",), "an o program takes its ticket before the launch before has "
                               "ended, whose o programs may not have taken theirs"),
    Mutant("v13-attend-project-heads-read-through-l1", "in-launch hand-over", (
        Edit(ATTEND_KERNEL, 'BLOCK_N, BLOCK_K, ".cg")', 'BLOCK_N, BLOCK_K, "")'),),
        (HANDOVER,), ("v13",), "o's programs read the heads with the default cache modifier, "
                               "where an SM's L1 may hold stale lines"),
    Mutant("v10-attention-reads-q-before-it-waits", "dependent launch", (
        Edit(PAGED_KERNELS, "        tl.extra.cuda.gdc_wait()\n        # The newest",
             "        q = tl.load(q_ptr + b * q_sb + heads[:, None] * q_sh + d[None, :], "
             "mask=q_mask)\n        tl.extra.cuda.gdc_wait()\n        # The newest"),),
        (DEPENDENT_PAGED, DEPENDENT_STEP), ("v10", "v13"),
        "the attention reads its queries before it waits for the launch that writes them"),
    Mutant("v10-attention-reads-the-newest-kv-before-it-waits", "dependent launch", (
        Edit(PAGED_KERNELS, "        older = live & (t < context - 1)", "        older = live"),),
        (DEPENDENT_PAGED, DEPENDENT_STEP), ("v10", "v13"),
        "before its wait the attention loads the newest token's K/V too, which the launch "
        "before is still writing"),
    Mutant("v13-attention-dependent-at-every-row-count", "dependent launch", (
        Edit(GEMV_KERNEL, "                                                dependent=q.shape[0] == 1\n"
                          "                                                and launches_dependent(q))",
             "                                                dependent=launches_dependent(q))"),),
        (TWO_ROWS,), ("v13",),
        "the attention launches dependent at every row count, where the launch before is plain"),
    Mutant("v10-attention-newest-kv-never-reloaded", "dependent launch", (
        Edit(PAGED_KERNELS, "        newest = live & (t == context - 1)",
             "        newest = live & (t < 0)"),),
        (DEPENDENT_PAGED,), ("v10",),
        "launched dependent, the attention never loads the newest token's K/V after its wait"),
    Mutant("v10-attention-newest-row-of-the-token-before", "dependent launch", (
        Edit(PAGED_KERNELS, "        t_new = context - 1 + d * 0", "        t_new = context - 2 + d * 0"),),
        (DEPENDENT_PAGED,), ("v10",),
        "launched dependent, the row loaded after the wait into the newest token's place is the "
        "token before's"),
    Mutant("v10-attention-loads-its-first-tile-after-the-wait", "dependent launch", (
        Edit(PAGED_KERNELS, "        t = lo + tl.arange(0, BLOCK_N)\n        live = t < hi\n"
                            "        older",
             "        tl.extra.cuda.gdc_wait()\n        t = lo + tl.arange(0, BLOCK_N)\n"
             "        live = t < hi\n        older"),
        Edit(PAGED_KERNELS, "older, on_d)\n        tl.extra.cuda.gdc_wait()\n", "older, on_d)\n"),),
        (DEPENDENT_PAGED, DEPENDENT_STEP), ("v10", "v13"),
        "launched dependent, the attention loads nothing before its wait: the first tile's trip "
        "to memory no longer overlaps the launch before"),
    Mutant("v10-combine-launched-plainly", "dependent launch", (
        Edit(PAGED_KERNELS, "            splits, BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_S=block_s, "
                            "**launch)",
             "            splits, BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_S=block_s, PDL=False)"),),
        (DEPENDENT_PAGED,), ("v10",), "a split context's combine launches plainly: it stops the "
                                      "chain, the same numbers"),
]
