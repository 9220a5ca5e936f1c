"""Page contract: a request's output costs the same whatever its length, and never changes.

What it shows: engine.output() and each step()'s outputs hold the request's tokens as they were,
unchanged by the tokens that come after, without copying them: the bytes that 40 outputs of a
request with a long prompt and many tokens hold are those of 40 outputs of a short one (tracemalloc, from
outside). A step that copied every running request's token list cost the host
O(batch x tokens) a step (issue 48: at batch 256 and 1,000 tokens, a quarter of a million ids).

Files to compare: implementations/v03_request_states/request.py (output) and
torchlet/contract/values.py (TokenView)."""
from __future__ import annotations

import tracemalloc

import pytest

from spec.support.models.fixtures import tiny_checkpoint
from torchlet.contract import REQUEST_STATES, GenerationParams

pytestmark = pytest.mark.spec(needs=REQUEST_STATES, part="request")

CKPT = tiny_checkpoint("tiny_llama")
OUTPUTS = 40


def held_bytes(engine, request_id) -> int:
    """Bytes OUTPUTS outputs of the request hold, while they are held."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        outs = [engine.output(request_id) for _ in range(OUTPUTS)]
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(outs) == OUTPUTS
    return after - before


def test_an_output_holds_its_tokens_without_copying_them_and_they_never_change(impl):
    engine = impl.build(CKPT)
    short = engine.add_request([5, 6, 7], GenerationParams(max_new_tokens=1))
    long = engine.add_request(list(range(3, 63)), GenerationParams(max_new_tokens=100,
                                                                   ignore_eos=True))
    seen = []
    while engine.has_unfinished():
        seen += [o for o in engine.step() if o.request_id == long]
        seen.append(engine.output(long))
    final = engine.output(long)
    assert len(final.tokens) == 100 and len(engine.output(short).tokens) == 1
    # what each output held then is a prefix of the final tokens, unchanged by later steps
    assert len({len(o.tokens) for o in seen}) > 50
    for out in seen:
        assert list(out.tokens) == list(final.tokens)[:len(out.tokens)]
        assert list(out.prompt) == list(range(3, 63))
    # a 60-id prompt and 100 ids copied 40 times would hold about 40 x 1.3 KB more than the
    # short request's 3 and 1
    assert held_bytes(engine, long) <= held_bytes(engine, short) + 512
