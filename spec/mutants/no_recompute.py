"""No history recompute: from v02 a decode pass feeds each request its newest token only. Each
mutant keeps the tokens right and recomputes history anyway, so only the token meter notices."""
from spec.mutants import Edit, Mutant

METER = ("spec/test_v02_kv_cache.py::test_each_decode_pass_feeds_exactly_one_new_token_per_running_request",
         "spec/test_v02_kv_cache.py::test_work_for_n_tokens_grows_linearly_here_and_quadratically_in_v00")
RUNNER = "v02_kv_cache/runner.py"

MUTANTS = [
    Mutant("v02-decode-rebuilds-the-cache", "no history recompute", (
        Edit(RUNNER, "        return self.extend(request_ids, [[seq[-1]] for seq in sequences])",
             "        for r in request_ids:\n"
             "            self.kv.free(r)\n"
             "            self.kv.allocate(r)\n"
             "        return self.extend(request_ids, [list(seq) for seq in sequences])"),),
        METER, ("v02",), "decode drops the cache and prefills the whole sequence again"),
    Mutant("v02-decode-logits-from-a-full-pass", "no history recompute", (
        Edit(RUNNER, "        return self.extend(request_ids, [[seq[-1]] for seq in sequences])",
             "        self.extend(request_ids, [[seq[-1]] for seq in sequences])\n"
             "        full = [self.forward_ragged(list(s), self.model.req_indptr([len(s)]))[-1:]\n"
             "                for s in sequences]\n"
             "        return torch.cat(full)"),),
        METER, ("v02",), "decode keeps the cache up to date but takes its logits from a full pass"),
    Mutant("v02-prefill-runs-the-prompt-twice", "no history recompute", (
        Edit(RUNNER, "        for r in request_ids:\n            self.kv.allocate(r)\n"
                     "        return self.extend(request_ids, prompts)",
             "        for r in request_ids:\n            self.kv.allocate(r)\n"
             "        self.forward_ragged([t for p in prompts for t in p],\n"
             "                            self.model.req_indptr([len(p) for p in prompts]))\n"
             "        return self.extend(request_ids, prompts)"),),
        METER, ("v02",), "prefill computes every prompt twice, once without keeping the K/V"),
]
