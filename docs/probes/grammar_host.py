"""Host time of v19's grammar part per decode step at batch B: GrammarMasks.masks over B
requests walking through one JSON answer of torchlet bench structured's schema, a token a step
(the default model's tokenizer, xgrammar's matchers), median of 5 runs; --profile adds cProfile.

    PYTHONPATH=. python docs/probes/grammar_host.py [B [VOCAB]] [--profile]

VOCAB: the model's ids (default the tokenizer's 49,152; 151,936 is the GPU bench's model)."""
import sys, time, json, cProfile, pstats
import torch
from types import SimpleNamespace
from torchlet.gguf_model import resolve_model
from torchlet.text import load_tokenizer
from torchlet.grammar import Compiler, Constraint
from torchlet.bench.structured import SCHEMA
from torchlet.contract import GenerationParams
from implementations.v19_structured_output.grammar import GrammarMasks

numbers = [int(a) for a in sys.argv[1:] if not a.startswith("--")]
B = numbers[0] if numbers else 64
d, _ = resolve_model(None, progress=False)
tok = load_tokenizer(d)
vocab = numbers[1] if len(numbers) > 1 else 49152
c = Compiler.for_tokenizer(tok, vocab, (tok.eos_token_id,))
g = c.compile(Constraint.json_schema(SCHEMA))
answer = tok.encode(json.dumps({"name": "Ann Lee", "age": 31, "city": "Paris", "hobbies": ["chess", "tea"]}), add_special_tokens=False)
params = GenerationParams(max_new_tokens=200, eos_token_ids=(tok.eos_token_id,), grammar=g)
reqs = [SimpleNamespace(id=i, params=params, tokens=[], finished=False) for i in range(B)]
gm = GrammarMasks(vocab)
steps = len(answer) - 1
def run():
    for r in reqs: r.tokens.clear()
    gm.tracked.clear()
    t = time.perf_counter()
    for s in range(steps):
        gm.masks(reqs)
        for r in reqs: r.tokens.append(answer[s])
    return (time.perf_counter() - t) / steps
run()
ts = sorted(run() for _ in range(5))
print(f"batch {B}: masks() {ts[2]*1e3:.3f} ms a step (median of 5, {steps} steps, vocab {vocab})")
if "--profile" in sys.argv:
    cProfile.run("run()", "/tmp/probe/prof")
    pstats.Stats("/tmp/probe/prof").sort_stats("tottime").print_stats(12)
