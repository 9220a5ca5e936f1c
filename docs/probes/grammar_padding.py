"""What a model's padded vocabulary costs xgrammar's matcher: SmolLM2's tokenizer (49,152 ids)
told a vocabulary of 49,152 and of 151,936 ids (the GPU bench's model size), and the same
through torchlet.grammar's Compiler (which tells xgrammar the tokenizer's own ids whatever the
model's size): each accept_token and fill_next_token_bitmask of one JSON answer of `torchlet
bench structured`'s schema, 20 times over, medians and 90th percentiles in microseconds. The
ids past the tokenizer are "special" to xgrammar, and its accept looks each token up among them.

    PYTHONPATH=. python docs/probes/grammar_padding.py"""
import json
import time

import torch
import xgrammar as xgr

from torchlet.bench.structured import SCHEMA
from torchlet.gguf_model import resolve_model
from torchlet.grammar import Compiler, Constraint
from torchlet.text import load_tokenizer

tokenizer = load_tokenizer(resolve_model(None, progress=False)[0])
eos = tokenizer.eos_token_id
answer = tokenizer.encode(json.dumps({"name": "Ann Lee Smith", "age": 31, "city": "Paris",
                                      "hobbies": ["chess", "tea"]}), add_special_tokens=False)


def quantiles(times: list[float]) -> str:
    times = sorted(times)
    return (f"median {times[len(times) // 2] * 1e6:5.1f} us, "
            f"p90 {times[int(len(times) * 0.9)] * 1e6:5.1f} us")


def timed(make_matcher, words: int) -> None:
    accepts, fills = [], []
    row = torch.zeros(words, dtype=torch.int32)
    for _ in range(20):
        matcher = make_matcher()
        for token in answer:
            start = time.perf_counter()
            matcher.fill(row)
            fills.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert matcher.accept(token)
            accepts.append(time.perf_counter() - start)
    print(f"    accept {quantiles(accepts)}; fill {quantiles(fills)}")


class Raw:
    """xgrammar's matcher as the contract's, told `vocab` ids."""

    def __init__(self, compiled, words):
        self.xgr, self.words = xgr.GrammarMatcher(compiled, override_stop_tokens=[eos]), words

    def fill(self, row):
        self.xgr.fill_next_token_bitmask(row[:self.words].view(1, -1))

    def accept(self, token):
        return self.xgr.accept_token(token)


for vocab in (49152, 151936):
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=[eos])
    compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA))
    print(f"xgrammar told {vocab:,} ids ({vocab - len(tokenizer):,} past the tokenizer's):")
    timed(lambda: Raw(compiled, (vocab + 31) // 32), (vocab + 31) // 32)
grammar = Compiler.for_tokenizer(tokenizer, 151936, (eos,)).compile(Constraint.json_schema(SCHEMA))
print("torchlet.grammar, a model of 151,936 ids:")
timed(lambda: grammar.matcher((eos,)), (151936 + 31) // 32)
