"""Tensor parallelism (v16): each mutant shards the model or keeps the ranks in step in a way
that one device never shows, so the specs that run 2 ranks over gloo must notice."""
from spec.mutants import Edit, Mutant

SHARD = "v16_tensor_parallel/shard.py"
MODEL = "v16_tensor_parallel/model.py"
ENGINE = "v16_tensor_parallel/engine.py"
PAGE = "spec/test_v16_tensor_parallel.py"
GREEDY = f"{PAGE}::test_tp2_greedy_tokens_are_the_oracles"
LOGITS = f"{PAGE}::test_tp2_logits_equal_tp1s"
UNSEEDED = f"{PAGE}::test_an_unseeded_request_feeds_every_rank_the_tokens_rank_0_drew"

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
    Mutant("v16-embedding-without-the-shard-mask", PROPERTY, (
        Edit(MODEL, "        rows = self.table[local.clamp(0, len(self.vocab) - 1)] * "
                    "mine.unsqueeze(-1)\n",
             "        rows = self.table[local.clamp(0, len(self.vocab) - 1)]\n"),),
        (f"{LOGITS}[v16_tensor_parallel-tiny_llama]",), V16,
        "a token outside a rank's rows looks up its nearest row there, and the sum adds it"),
    Mutant("v16-seed-drawn-on-every-rank", PROPERTY, (
        Edit(ENGINE, "        params = self.sampler.prepare(params)  # the seed every rank draws "
                     "with\n", ""),),
        (UNSEEDED,), V16,
        "each rank draws its own seed for an unseeded request: they sample different tokens and "
        "feed rank 0's embedding a mix"),
]
