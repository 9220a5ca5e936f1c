"""Tensor parallelism (v16): each mutant shards the model or keeps the ranks in step in a way
that one device never shows, so the specs that run 2 ranks over gloo must notice."""
from spec.mutants import Edit, Mutant

SHARD = "v16_tensor_parallel/shard.py"
MODEL = "v16_tensor_parallel/model.py"
LOOP = "v16_tensor_parallel/loop.py"
PAGE = "spec/test_v16_tensor_parallel.py"
GREEDY = f"{PAGE}::test_tp2_greedy_tokens_are_the_oracles"
LOGITS = f"{PAGE}::test_tp2_logits_equal_tp1s"
UNSEEDED = f"{PAGE}::test_an_unseeded_request_feeds_every_rank_the_tokens_rank_0_drew"
SHAPES = f"{PAGE}::test_tp2_greedy_tokens_of_declared_head_dims_and_more_gqa_ratios_are_the_oracles"
TP3 = f"{PAGE}::test_tp3_greedy_tokens_are_the_oracles"
HELD = f"{PAGE}::test_each_rank_holds_the_storage_of_its_half_of_an_evenly_split_model_alone"
WAITING = f"{PAGE}::test_aborting_a_waiting_request_leaves_every_rank_in_step"
REFUSED = f"{PAGE}::test_a_request_refused_on_rank_0_leaves_every_rank_in_step"
KV_CALLS = f"{PAGE}::test_a_refused_kv_cache_call_leaves_every_rank_in_step"
ONE_ROW_MLP = (f"{PAGE}::test_on_the_kernels_a_ranks_one_row_mlp_output_is_all_reduced_before_it_"
               "joins_the_stream")

PROPERTY = "tensor parallelism"
V16 = ("v16",)

MUTANTS = [
    Mutant("v16-o-bias-on-every-rank", PROPERTY, (
        Edit(SHARD, "            if shard.rank == 0:\n", "            if True:\n"),),
        (f"{LOGITS}[v16_tensor_parallel-uneven]", f"{GREEDY}[v16_tensor_parallel-uneven]"), V16,
        "every rank keeps o's bias, so the all-reduce adds it once per rank"),
    Mutant("v16-kv-heads-split-by-query-heads", PROPERTY, (
        Edit(SHARD, "            heads = range(kv.start * group, kv.stop * group)\n",
             "            heads = runs(config.num_heads, world)[rank]\n"),),
        (f"{LOGITS}[v16_tensor_parallel-uneven]",), V16,
        "query heads split evenly, apart from the KV heads they read: with 3 KV heads on 2 ranks "
        "rank 0 holds 3 query heads and 2 KV heads (the pass fails on the shapes)"),
    Mutant("v16-mlp-partial-sums-not-added", PROPERTY, (
        Edit(MODEL, "        partial_sum = super().mlp(x, w)\n        collective(dist.all_reduce, "
                    "partial_sum)\n",
             "        partial_sum = super().mlp(x, w)\n"),),
        (f"{LOGITS}[v16_tensor_parallel-tiny_llama]",), V16,
        "each rank keeps its own share of the MLP's down product: the layers read a partial sum"),
    Mutant("v16-logit-slices-gathered-without-the-padding-cut", PROPERTY, (
        Edit(MODEL, "        return torch.cat(slices, dim=-1)[..., :shard.vocab_size]\n",
             "        return torch.cat(slices, dim=-1)\n"),),
        (f"{LOGITS}[v16_tensor_parallel-uneven]",), V16,
        "a vocabulary that does not split evenly keeps the padded columns: logits wider than the "
        "vocabulary, their padding zeros"),
    Mutant("v16-embedding-without-the-shard-mask", PROPERTY, (
        Edit(MODEL, "        rows = self.table[local.clamp(0, len(self.vocab) - 1)] * "
                    "mine.unsqueeze(-1)\n",
             "        rows = self.table[local.clamp(0, len(self.vocab) - 1)]\n"),),
        (f"{LOGITS}[v16_tensor_parallel-tiny_llama]",), V16,
        "a token outside a rank's rows looks up its nearest row there, and the sum adds it"),
    Mutant("v16-seed-drawn-on-every-rank", PROPERTY, (
        Edit(LOOP, "        params = self.sampler.prepare(params)  # the seed every rank draws "
                     "with\n", ""),),
        (UNSEEDED,), V16,
        "each rank draws its own seed for an unseeded request: they sample different tokens and "
        "feed rank 0's embedding a mix"),
    Mutant("v16-head-dim-from-the-hidden-size", PROPERTY, (
        Edit(SHARD, "    d = ckpt.config.head_dim\n",
             "    d = ckpt.config.hidden_size // ckpt.config.num_heads\n"),),
        (f"{SHAPES}[v16_tensor_parallel-gqa4to1]",), V16,
        "the shards' rows and columns cut by hidden / heads: right only where head_dim is that"),
    Mutant("v16-shared-kv-head-split-over-every-rank", PROPERTY, (
        Edit(SHARD, "            mine = runs(group, len(sharing))[sharing.index(rank)]\n",
             "            mine = runs(group, world)[rank]\n"),),
        (f"{TP3}[v16_tensor_parallel-gqa6to2]",), V16,
        "a shared KV head's query heads split as if every rank shared it: right at TP=2, where "
        "they all do; at TP=3 with 2 KV heads, heads are lost"),
    Mutant("v16-shards-are-views-of-the-whole-tensors", PROPERTY, (
        Edit(SHARD, "    return t[r.start * scale:r.stop * scale].clone()\n",
             "    return t[r.start * scale:r.stop * scale]\n"),
        Edit(SHARD, "    return t[:, r.start * scale:r.stop * scale].clone()\n",
             "    return t[:, r.start * scale:r.stop * scale]\n")),
        (HELD,), V16,
        "each rank computes with its slices, views that keep the whole checkpoint tensors alive"),
    Mutant("v16-abort-of-a-waiting-request-kept-on-rank-0", PROPERTY, (
        Edit(LOOP, "        self.record(\"abort\", request_id)\n",
             "        if request.state.value != \"waiting\":  # it has not run anywhere yet\n"
             "            self.record(\"abort\", request_id)\n"),),
        (WAITING,), V16,
        "a request aborted while it waits is not sent: the other ranks run it later, and their "
        "batches differ from rank 0's"),
    Mutant("v16-unsendable-request-queued", PROPERTY, (
        Edit(LOOP, "        try:\n            pickle.dumps(args)\n"
                     "        except Exception as e:  # noqa: BLE001 - whatever pickling a "
                     "caller's object raises\n"
                     "            raise RequestError(f\"tensor parallel: {name}'s arguments "
                     "cannot be sent to the other \"\n"
                     "                               f\"ranks ({type(e).__name__}: {e})\") "
                     "from None\n", ""),),
        (REFUSED,), V16,
        "a request whose settings cannot be pickled is queued on rank 0; the next plan fails to "
        "send, and the calls in it reach no other rank"),
    Mutant("v16-kv-pass-sent-unchecked", PROPERTY, (
        Edit(LOOP, "        self.refuse_unpaired(request_ids, prompts)\n", ""),),
        (KV_CALLS,), V16,
        "a prefill of ids and prompts that do not pair up is sent: the other ranks fail on it "
        "with a ValueError, which they do not skip, and stop"),
    Mutant("v16-one-row-mlp-joins-the-stream-unreduced", PROPERTY, (
        Edit(MODEL, "    norms_fuse = False  # the MLP's partial sum",
             "    norms_fuse = True  # the MLP's partial sum"),),
        (ONE_ROW_MLP,), V16,
        "on the kernels a rank's one-row MLP output joins the stream inside v13's fused launch, "
        "its partial sum never all-reduced"),
]
