"""v07_cuda_graph, the graph component: capture a step once, replay it many times.

What it introduces: `graphs.capture(fn, static_inputs, constants=...)`, which runs fn once and
records it as a graph, and `graph.replay()`, which re-runs that graph over the same tensors; a
`GraphRunner` that keeps one graph per batch-size bucket (1, 2, 4, ... 32, then every 32 lanes),
pads a batch up to its bucket, captures each bucket once and only replays afterwards. On a GPU
the graph is a torch.cuda.CUDAGraph; on a CPU it is a stand-in that records the aten ops
(TorchDispatchMode) and replays that tape.
Why: after v06 the decode step reads fixed buffers at fixed addresses, but it still pays Python and
kernel-launch overhead for every op at every step. A graph pays it once, at capture.
Core principle: a graph remembers addresses and Python values, not your intentions. So: update
inputs in place and replay the captured tensors; declare every outside tensor the step reads;
Python scalars are frozen at capture; nothing inside the step may ask the host for a value
(`.item()`, `.tolist()`, `if tensor:`, nonzero, boolean masks). The CPU stand-in enforces the same
contract as CUDA, with GraphCaptureError, so it can be learned and checked without a GPU. And a
replay runs none of fn's Python: counted from outside (the specs wrap fn), fn is called at capture
only, and with graphs off at every run.
Files: implementations/v07_cuda_graph/graphs.py (capture) and runner.py (GraphRunner); the step
functions here come from the v00 layers (implementations/v00_full_recompute/model.py).
Tradeoff left visible: a batch of 3 runs the bucket-4 graph, so the padding lane is computed and
thrown away; one graph per bucket costs capture time and (on CUDA) memory, which the buckets share
through one pool. Past 32 lanes the buckets step by 32 rather than double (a batch of 130 runs 160
rows, not 256): four more graphs at 256 lanes, for at most 31 padded rows a step. CPU replay is
bit-equal to eager; CUDA replay is held to GPU_TOLERANCE.
"""
import random

import pytest
import torch

from implementations.v00_full_recompute import model as v00_model
from spec.support.models.fixtures import tiny_checkpoint
from torchlet.contract import GRAPH_REPLAY, TorchletError, cast_tensors, layer_tensors

pytestmark = pytest.mark.spec(needs=GRAPH_REPLAY, part="runner")

# cuBLAS may choose another algorithm inside a capture than in eager mode, so CUDA replay is
# allowed float32 rounding; on CPU the tape runs the very same kernels and must be bit-equal.
GPU_TOLERANCE = dict(rtol=1e-5, atol=1e-5)
MAX_BATCH = 8
TOKENS = 6


@pytest.fixture(scope="module")
def ckpt():
    return tiny_checkpoint("tiny_qwen2")


def layer_step(impl, ckpt, device="cpu"):
    """One decoder layer over hidden states and positions: (fn, weights). v00's layer, whose
    attention has no host reads (later versions split a ragged batch on the host)."""
    w = cast_tensors(layer_tensors(ckpt, 0), device, torch.float32)
    return (lambda x, positions: v00_model.decoder_layer(x, positions, w, ckpt.config)), w


def token_step(impl, ckpt, device="cpu"):
    """A decode-like step whose rows are independent: token ids -> embedding -> a residual MLP
    per layer -> final norm -> logits -> greedy token. Returns (fn, constants)."""
    c = ckpt.config
    t = cast_tensors(ckpt.tensors, device, torch.float32)
    layers = [cast_tensors(layer_tensors(ckpt, i), device, torch.float32)
              for i in range(c.num_layers)]
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])

    def step(token_ids):
        h = t["model.embed_tokens.weight"][token_ids]
        for w in layers:
            h = h + impl.layers.mlp(
                impl.layers.rms_norm(h, w["post_attention_layernorm.weight"], c.rms_eps), w)
        logits = impl.layers.rms_norm(h, t["model.norm.weight"], c.rms_eps) @ head.T
        return logits, logits.argmax(-1)

    return step, (t, layers)


def fill_hidden(x, positions, g):
    x.copy_(torch.randn(x.shape, generator=g))
    positions.copy_(torch.randint(0, 200, positions.shape, generator=g))


# --- CPU: replay equals eager ------------------------------------------------------------------

def test_replay_equals_eager_bit_for_bit_while_inputs_change_in_place(impl, ckpt):
    graphs = impl.package.graphs
    fn, w = layer_step(impl, ckpt)
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(TOKENS, ckpt.config.hidden_size)
    positions = torch.zeros(TOKENS, dtype=torch.long)
    fill_hidden(x, positions, g)
    graph = graphs.capture(fn, (x, positions), constants=w)
    first = graph.replay()
    address = first.data_ptr()
    for _ in range(20):
        fill_hidden(x, positions, g)
        out = graph.replay(x, positions)
        assert out is first and out.data_ptr() == address  # one output tensor, rewritten in place
        assert torch.equal(out, fn(x.clone(), positions.clone()))


def test_runner_captures_each_bucket_once_and_only_replays_in_steady_state(impl, ckpt):
    fn, constants = token_step(impl, ckpt)
    buckets = impl.package.default_buckets(MAX_BATCH)
    assert buckets == (1, 2, 4, 8)
    token_ids = torch.zeros(MAX_BATCH, dtype=torch.long)
    runner = impl.package.GraphRunner
    on = runner(fn, (token_ids,), buckets=buckets, constants=constants)
    off = runner(fn, (token_ids,), buckets=buckets, constants=constants, enabled=False)
    rng = random.Random(0)
    warm = [1, 2, 3, 5, 8]                                 # touches every bucket
    steady = [rng.randint(1, MAX_BATCH) for _ in range(25)]
    for step, n in enumerate(warm + steady):
        if step == len(warm):
            after_warm = on.stats()
            assert {b: s["captures"] for b, s in after_warm.items()} == {b: 1 for b in buckets}
        bucket = on.bucket_for(n)
        token_ids.copy_(torch.randint(0, ckpt.config.vocab_size, (MAX_BATCH,),
                                      generator=torch.Generator().manual_seed(step)))
        token_ids[n:] = 0                                  # padding lanes: a harmless token
        logits, tokens = on.run(n)
        assert logits.shape[0] == bucket
        eager_logits, eager_tokens = off.run(n)
        assert torch.equal(logits, eager_logits)
        assert tokens[:n].tolist() == eager_tokens[:n].tolist()  # graphs on == graphs off
    stats = on.stats()
    assert sum(s["captures"] for s in stats.values()) == len(buckets)  # nothing new in steady state
    assert stats == {b: {"captures": 1, "replays": after_warm[b]["replays"] +
                         sum(on.bucket_for(n) == b for n in steady)} for b in buckets}


def counted(fn):
    """fn, and a list that grows by one at each call: Python that runs shows up here."""
    calls = []

    def wrapper(*args):
        calls.append(1)
        return fn(*args)

    return wrapper, calls


def test_a_replay_never_calls_the_captured_function_and_graphs_off_call_it_every_run(impl, ckpt):
    graphs = impl.package.graphs
    fn, constants = token_step(impl, ckpt)
    step, calls = counted(fn)
    token_ids = torch.zeros(MAX_BATCH, dtype=torch.long)
    graph = graphs.capture(step, (token_ids,), constants=constants)
    captured = len(calls)                                  # capture runs fn to record it
    runner = impl.package.GraphRunner(step, (token_ids,), buckets=(1, 2, 4, 8), constants=constants)
    runner.capture_all()
    warm = len(calls)
    g = torch.Generator().manual_seed(1)
    for n in (8, 3, 1):
        token_ids.copy_(torch.randint(0, ckpt.config.vocab_size, (MAX_BATCH,), generator=g))
        bucket = runner.bucket_for(n)                      # fn itself, uncounted, eagerly:
        assert torch.equal(graph.replay()[0], fn(token_ids.clone())[0])
        assert torch.equal(runner.run(n)[0], fn(token_ids[:bucket].clone())[0])
    assert captured >= 1 and len(calls) == warm            # three steps, not one call of fn
    off = impl.package.GraphRunner(step, (token_ids,), buckets=(1, 2, 4, 8), constants=constants,
                             enabled=False)
    for n in (8, 1):
        off.run(n)
    assert len(calls) == warm + 2


def test_past_32_lanes_a_batch_runs_the_next_multiple_of_32_rows_not_the_next_power_of_two(impl):
    """v07's buckets for 256 lanes, seen from the step function: the rows of the view each run
    hands it (the CPU stand-in records by running fn, so a bucket's first run calls it), and
    every batch's rows of the result."""
    buckets = impl.package.default_buckets(256)
    assert buckets == (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256)
    assert impl.package.default_buckets(100)[-3:] == (64, 96, 100)
    seen = []

    def step(t):
        seen.append(t.shape[0])
        return t * 2
    runner = impl.package.GraphRunner(step, (torch.arange(256.0),), buckets=buckets)
    batches = (3, 33, 64, 65, 130, 200, 225)
    for n in batches:
        assert torch.equal(runner.run(n)[:n], torch.arange(float(n)) * 2)
    # each bucket's rows in the order its batch first came (a capture may call fn more than once)
    assert list(dict.fromkeys(seen)) == [4, 64, 96, 160, 224, 256]


def test_a_batch_is_padded_up_to_the_smallest_bucket_that_holds_it(impl):
    graphs = impl.package.graphs
    assert impl.package.default_buckets(6) == (1, 2, 4, 6)
    runner = impl.package.GraphRunner(lambda t: t * 2, (torch.zeros(MAX_BATCH),),
                                      buckets=(1, 2, 4, 8))
    assert [runner.bucket_for(n) for n in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    with pytest.raises(graphs.GraphCaptureError, match="largest bucket"):
        runner.bucket_for(9)


def test_capturing_every_bucket_up_front_leaves_only_replays_for_serving(impl):
    buffer = torch.arange(MAX_BATCH, dtype=torch.float32)
    runner = impl.package.GraphRunner(lambda t: t * 2, (buffer,), buckets=(1, 2, 4, 8))
    runner.capture_all()
    assert runner.stats() == {b: {"captures": 1, "replays": 0} for b in (1, 2, 4, 8)}
    buffer.add_(1)
    assert runner.run(3).tolist() == [2.0, 4.0, 6.0, 8.0]  # bucket 4, padding lane included
    assert runner.stats()[4] == {"captures": 1, "replays": 1}


# --- the contract: violations are caught with clear errors --------------------------------------

def test_replay_refuses_a_fresh_tensor_in_place_of_the_captured_input(impl, ckpt):
    graphs = impl.package.graphs
    fn, w = layer_step(impl, ckpt)
    x, positions = torch.randn(TOKENS, ckpt.config.hidden_size), torch.arange(TOKENS)
    graph = graphs.capture(fn, (x, positions), constants=w)
    with pytest.raises(graphs.GraphCaptureError, match="different tensor for static input 0"):
        graph.replay(x.clone(), positions)                 # same values, different memory
    with pytest.raises(TorchletError, match="in place"):   # GraphCaptureError is a TorchletError
        graph.replay(x, positions.clone())
    positions.resize_(TOKENS + 1)                          # the captured tensor itself moved
    with pytest.raises(graphs.GraphCaptureError, match="static input 1 moved or changed shape"):
        graph.replay()


def test_replay_refuses_a_constant_whose_data_moved(impl, ckpt):
    """Constants (weights, caches) are checked by where their data lives: one given new storage
    after capture (set_) would leave the graph reading the old memory."""
    graphs = impl.package.graphs
    fn, w = layer_step(impl, ckpt)
    x, positions = torch.randn(TOKENS, ckpt.config.hidden_size), torch.arange(TOKENS)
    graph = graphs.capture(fn, (x, positions), constants=w)
    graph.replay()
    name = sorted(w)[0]
    w[name].set_(w[name].clone())
    with pytest.raises(graphs.GraphCaptureError, match="constant .* moved"):
        graph.replay()


def test_capture_refuses_a_tensor_that_is_neither_a_static_input_nor_a_constant(impl):
    graphs = impl.package.graphs
    x, bias = torch.randn(4, 3), torch.randn(3)
    with pytest.raises(graphs.GraphCaptureError, match="neither a static input, nor a declared"):
        graphs.capture(lambda x: x + bias, (x,))
    # Declared, it is held by address like a weight or a KV cache: in-place updates show up.
    graph = graphs.capture(lambda x: x + bias, (x,), constants=[bias])
    bias.add_(1.0)
    assert torch.equal(graph.replay(), x + bias)


HOST_SYNCS = {
    "item": lambda x: x * x.sum().item(),
    "tolist": lambda x: x * x[0, 0].tolist(),
    "python if on a tensor": lambda x: x * 2 if x.sum() > 0 else x,
    "nonzero": lambda x: x.nonzero().float(),
    "boolean mask": lambda x: x[x > 0],
}


@pytest.mark.parametrize("name", HOST_SYNCS)
def test_a_host_sync_inside_capture_is_refused(impl, name):
    graphs = impl.package.graphs
    with pytest.raises(graphs.GraphCaptureError, match="host sync inside capture"):
        graphs.capture(HOST_SYNCS[name], (torch.randn(4, 3),))


def test_python_scalars_are_frozen_at_capture(impl):
    graphs = impl.package.graphs
    x = torch.randn(4, 3)
    scale = 2.0
    graph = graphs.capture(lambda x: x * scale, (x,))
    scale = 3.0                                            # eager sees it, the graph does not
    assert torch.equal(graph.replay(), x * 2.0)
    assert not torch.equal(graph.replay(), x * scale)
    # What changes per step must be a tensor among the static inputs.
    s = torch.tensor(2.0)
    graph = graphs.capture(lambda x, s: x * s, (x, s))
    s.fill_(3.0)
    assert torch.equal(graph.replay(), x * 3.0)


def test_a_tensor_made_from_python_data_inside_capture_is_frozen_and_fresh_at_each_replay(impl):
    graphs = impl.package.graphs
    x = torch.randn(4, 3)
    offsets = [1.0, 2.0, 3.0]

    def fn(x):
        b = torch.tensor(offsets)
        b.mul_(2)  # in place: a replay that handed out the captured tensor itself would double it
        return x + b

    graph = graphs.capture(fn, (x,))
    offsets[0] = 100.0  # a Python value, frozen at capture like a scalar
    expected = x + torch.tensor([2.0, 4.0, 6.0])
    assert torch.equal(graph.replay(), expected)
    assert torch.equal(graph.replay(), expected)


# --- the same specs on a GPU --------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_replay_equals_eager_within_tolerance_while_inputs_change_in_place(impl, ckpt):
    graphs = impl.package.graphs
    fn, w = layer_step(impl, ckpt, "cuda")
    g = torch.Generator().manual_seed(0)
    cpu_x = torch.zeros(TOKENS, ckpt.config.hidden_size)
    cpu_pos = torch.zeros(TOKENS, dtype=torch.long)
    x, positions = cpu_x.cuda(), cpu_pos.cuda()
    graph = graphs.capture(fn, (x, positions), constants=w)
    for _ in range(20):
        fill_hidden(cpu_x, cpu_pos, g)
        x.copy_(cpu_x)
        positions.copy_(cpu_pos)
        out = graph.replay(x, positions)
        assert out is graph.outputs
        torch.testing.assert_close(out, fn(x.clone(), positions.clone()), **GPU_TOLERANCE)


@pytest.mark.gpu
def test_cuda_runner_captures_each_bucket_once_into_one_shared_pool(impl, ckpt):
    graphs = impl.package.graphs
    fn, constants = token_step(impl, ckpt, "cuda")
    buckets = impl.package.default_buckets(MAX_BATCH)
    token_ids = torch.zeros(MAX_BATCH, dtype=torch.long, device="cuda")
    counted_fn, calls = counted(fn)
    runner = impl.package.GraphRunner(counted_fn, (token_ids,), buckets=buckets,
                                      constants=constants)
    runner.capture_all()
    captured = len(calls)                                  # warm-up and capture run fn's Python
    rng = random.Random(0)
    for step, n in enumerate([1, 2, 3, 5, 8] + [rng.randint(1, MAX_BATCH) for _ in range(25)]):
        token_ids.copy_(torch.randint(0, ckpt.config.vocab_size, (MAX_BATCH,),
                                      generator=torch.Generator().manual_seed(step)))
        token_ids[n:] = 0
        logits, tokens = runner.run(n)
        bucket = runner.bucket_for(n)
        eager_logits, _ = fn(token_ids[:bucket].clone())
        torch.testing.assert_close(logits, eager_logits, **GPU_TOLERANCE)
    assert {b: s["captures"] for b, s in runner.stats().items()} == {b: 1 for b in buckets}
    assert sum(s["replays"] for s in runner.stats().values()) == 30
    assert len(calls) == captured                          # 30 replays, no call of fn
    assert runner.pool is not None and all(g.pool is runner.pool for g in runner.graphs.values())


@pytest.mark.gpu
def test_cuda_capture_refuses_item_and_replay_refuses_a_fresh_tensor(impl):
    graphs = impl.package.graphs
    x = torch.randn(4, 3, device="cuda")
    with pytest.raises(graphs.GraphCaptureError, match="host sync inside capture"):
        graphs.capture(HOST_SYNCS["item"], (x,))
    graph = graphs.capture(lambda x: x * 2, (x,))
    with pytest.raises(graphs.GraphCaptureError, match="different tensor for static input 0"):
        graph.replay(x.clone())
