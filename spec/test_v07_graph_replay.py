"""v07_cuda_graph, the engine: the decode step replayed as a graph.

What it introduces: v06's decode step (embedding, every layer, LM head, over the static decode
buffers and the lane cache) captured once per bucket of lanes (1, 2, 4, ... up to the lane count)
and replayed at every later step. Prefill stays eager. graph_stats() reports captures and replays
per bucket; build(..., use_graphs=False) runs the very same step eagerly.
Why v06 needs it: v06 made the step's inputs static, but each step still launches every kernel
from Python; replay launches the whole step at once.
Core principle: replay is invisible, and it is observed, not reported. Logits with graphs on equal
logits with graphs off bit for bit on CPU (the stand-in replays the same aten ops), and within
GPU_TOLERANCE on CUDA; tokens are equal; a bucket is captured once, and steady state only replays:
watched from outside (spec/support/watchers/replay_watch.py), a steady-state decode step runs none of the
model's Python code and dispatches none of its ops, while the same step with graphs off runs them
at every step; on CUDA it is one cudaGraphLaunch and no kernel of the model launched eagerly.
graph_stats() is the engine's own report: read, never the only evidence.
Files: implementations/v07_cuda_graph/runner.py (GraphedRunner) against
implementations/v05_decode_lanes/runner.py (LaneRunner, whose decode step it captures) and
implementations/v06_static_buffers/inputs.py (the buffers the graph reads); the graph machinery
is page 1, test_v07_graph_capture.py.
Tradeoff left visible: a step whose highest busy lane is 5 runs the bucket-8 graph, lanes 6 and 7
included, and the lane cache is read in full (max_len rows per lane) by every lane.
"""
import pytest
import torch
from hypothesis import given
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from spec.support.inputs import scenarios
from spec.support.inputs import strategies as sts
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.decode_ahead import unread
from spec.support.watchers.replay_watch import CudaStepWatch, ModelWatch
from torchlet.contract import GRAPH_REPLAY, GenerationParams

pytestmark = pytest.mark.spec(needs=GRAPH_REPLAY)

CKPT = tiny_checkpoint("tiny_qwen2")
VOCAB = CKPT.config.vocab_size
GPU_TOLERANCE = dict(rtol=1e-4, atol=1e-4)  # cuBLAS may pick other kernels inside a capture


def run_schedule(engine, schedule):
    return [engine.output(i).tokens for i in scenarios.run_schedule(engine, schedule)]


def changing_batches(engine, rounds=12):
    """Decode logits while the batch composition changes: requests join and leave between
    steps, so the bucket moves up and down. Driven through the kv_cache API by caller ids."""
    g = torch.Generator().manual_seed(3)
    live, seqs, out = [], {}, []
    for step in range(rounds):
        if step % 3 == 0 and len(live) < 5:  # join
            rid = f"r{step}"
            seqs[rid] = torch.randint(3, VOCAB, (int(torch.randint(1, 9, (1,), generator=g)),),
                                      generator=g).tolist()
            logits = engine.prefill([rid], [seqs[rid]])
            seqs[rid].append(int(logits[0].argmax()))
            live.append(rid)
        if step % 4 == 3 and len(live) > 1:  # leave
            engine.release(live.pop(0))
        logits = engine.decode(live, [seqs[r] for r in live])
        for r, row in zip(live, logits):
            seqs[r].append(int(row.argmax()))
        out.append(logits)
    return out


def test_replay_logits_equal_eager_logits_bit_for_bit_while_the_batch_changes(impl):
    graphed = changing_batches(impl.build(CKPT))
    eager = changing_batches(impl.build(CKPT, use_graphs=False))
    assert len(graphed) == len(eager)
    for a, b in zip(graphed, eager):
        assert torch.equal(a, b)


@given(schedule=sts.arrival_schedules(VOCAB, max_requests=4, max_len=6, max_new=4))
@engine_settings()
def test_tokens_with_graphs_equal_tokens_without(impl, schedule):
    # float64: no near-tie can flip a token, and the Triton versions take their PyTorch path, so
    # this many examples stay cheap under the interpreter (their Triton step is replayed in
    # test_v10_triton_engine.py).
    opts = dict(max_lanes=4, dtype=torch.float64)
    on = run_schedule(impl.build(CKPT, **opts), schedule)
    off = run_schedule(impl.build(CKPT, use_graphs=False, **opts), schedule)
    assert on == off


def test_each_bucket_is_captured_once_and_steady_state_only_replays(impl):
    engine = impl.build(CKPT, max_lanes=8, dtype=torch.float64)  # float64: see above
    params = GenerationParams(max_new_tokens=6)
    for n in (1, 2, 3, 5, 8):  # touches buckets 1, 2, 4, 8
        engine.generate([[7 + i, 9, 11] for i in range(n)], params)
    first = engine.graph_stats()
    assert {b: s["captures"] for b, s in first.items()} == {1: 1, 2: 1, 4: 1, 8: 1}
    for n in (8, 3, 1, 6):  # steady state: the same buckets again
        engine.generate([[20 + i, 4] for i in range(n)], params)
    second = engine.graph_stats()
    assert {b: s["captures"] for b, s in second.items()} == {1: 1, 2: 1, 4: 1, 8: 1}
    assert sum(s["replays"] for s in second.values()) > sum(s["replays"] for s in first.values())


def test_graphs_off_captures_nothing(impl):
    engine = impl.build(CKPT, use_graphs=False)
    engine.generate([[5, 6, 7]], GenerationParams(max_new_tokens=4))
    assert all(s["captures"] == 0 for s in engine.graph_stats().values())


# --- replay, observed from outside the engine -----------------------------------------------

STEADY = dict(max_lanes=8, dtype=torch.float64)  # float64: see above


def warm_every_bucket(engine):
    """One decode step at each bucket (1, 2, 4, 8), so that every later step can replay."""
    for n in (1, 2, 4, 8):
        engine.generate([[7 + i, 9, 11] for i in range(n)],
                        GenerationParams(max_new_tokens=2, ignore_eos=True))


def steady_state(engine, watch):
    """Eight requests, prefilled together, that leave highest slot first: the decode steps walk
    down the buckets 8, 4, 2, 1 with nobody arriving, so no step needs a prefill or a new graph.
    Each decode step runs under a fresh watch(); returns the tokens and the watches."""
    ids = [engine.add_request([20 + i, 4, 9], GenerationParams(max_new_tokens=9 - i,
                                                               ignore_eos=True))
           for i in range(8)]
    engine.step()  # the prefill of all eight
    watches = []
    while engine.has_unfinished():
        with watch() as seen:
            engine.step()
        watches.append(seen)
    return [engine.output(i).tokens for i in ids], watches


@pytest.fixture(scope="module")
def steady(impl):
    graphed = impl.build(CKPT, **STEADY)
    warm_every_bucket(graphed)
    eager = impl.build(CKPT, use_graphs=False, **STEADY)
    warm_every_bucket(eager)
    return (steady_state(graphed, lambda: ModelWatch(impl)),
            steady_state(eager, lambda: ModelWatch(impl)))


def test_a_replayed_decode_step_runs_none_of_the_models_python_code(steady):
    (_, replayed), _ = steady
    for step, watch in enumerate(replayed):
        assert watch.model_calls == [], \
            f"decode step {step} ran model code: {sorted(set(watch.model_calls))}"


@pytest.mark.spec(one_step_per_call=True)
def test_a_replayed_decode_step_dispatches_no_op_from_the_model_yet_does_the_steps_work(steady):
    (_, replayed), (_, eager) = steady
    for step, (watch, eager_watch) in enumerate(zip(replayed, eager)):
        assert watch.model_ops == [], f"decode step {step}"
        # Silence alone would also fit a step that computed nothing: the replay itself must
        # dispatch at least the ops that the model's code dispatches in the eager step.
        assert len(watch.ops) >= len(eager_watch.model_ops) > 0, f"decode step {step}"


@pytest.mark.spec(one_step_per_call=True)
def test_with_graphs_off_every_decode_step_runs_the_models_python_code(steady):
    # The other side of the two specs above: the watch sees the model when it runs.
    _, (_, eager) = steady
    assert len(eager) == 8
    for step, watch in enumerate(eager):
        assert watch.model_calls and watch.model_ops, f"decode step {step}"


def test_replayed_steady_state_tokens_equal_eager_tokens(steady):
    (graphed_tokens, _), (eager_tokens, _) = steady
    assert graphed_tokens == eager_tokens
    assert [len(t) for t in graphed_tokens] == [9 - i for i in range(8)]


class VocabOutputs(TorchDispatchMode):
    """The dtypes of the [rows, vocab] tensors that ops return, replayed graph ops included."""

    def __init__(self):
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[-1] == VOCAB:
                self.dtypes.append(t.dtype)
        return out


@pytest.mark.spec(part=("runner", "sampler"))
def test_a_greedy_bfloat16_decode_step_draws_from_the_lm_heads_logits_and_makes_no_float_copy(
        impl):
    # The argmax of the LM head's bfloat16 logits is the argmax of their float32 copy, which
    # would cost a step a read and a write of [lanes, vocab] (docs/perf-notes.md).
    engine = impl.build(CKPT, dtype=torch.bfloat16, max_lanes=4)
    eager = impl.build(CKPT, dtype=torch.bfloat16, max_lanes=4, use_graphs=False)
    params = GenerationParams(max_new_tokens=6, ignore_eos=True)
    prompts = [[20 + i, 4, 9] for i in range(3)]
    ids = [engine.add_request(p, params) for p in prompts]
    for _ in range(3):  # the prefill, then decodes that capture the bucket
        engine.step()
    with VocabOutputs() as seen:
        engine.step()
    assert torch.bfloat16 in seen.dtypes, "the step computed no [lanes, vocab] logits"
    assert torch.float32 not in seen.dtypes, f"[lanes, vocab] tensors of {seen.dtypes}"
    while engine.has_unfinished():
        engine.step()
    assert [engine.output(i).tokens for i in ids] == eager.generate(prompts, params)


@pytest.mark.gpu
def test_cuda_replay_equals_eager_within_tolerance_and_tokens_match_cpu(impl):
    graphed = changing_batches(impl.build(CKPT, device="cuda"))
    eager = changing_batches(impl.build(CKPT, device="cuda", use_graphs=False))
    for a, b in zip(graphed, eager):
        torch.testing.assert_close(a.cpu(), b.cpu(), **GPU_TOLERANCE)
    prompts = [[5, 6, 7], [100, 200], [42]]
    params = GenerationParams(max_new_tokens=8)
    assert impl.build(CKPT, device="cuda").generate(prompts, params) == \
        impl.build(CKPT).generate(prompts, params)


# What a replayed step may ask of the GPU besides its one cudaGraphLaunch (as measured on the H200):
# copies of any number (cudaMemcpyAsync: the inputs into the static buffers, host to device; the
# live lanes' row indices; the logits concatenated, device to device; the tokens read back, device
# to host), synchronizations, and at most HOST_KERNELS kernels that the engine's host code launches
# around the graph: the gather of the live lanes' logit rows (aten::index) and the argmax. None of
# the model's: with graphs off, one step of the tiny 2-layer model launches 70 to 120 kernels.
HOST_KERNELS = 2


@pytest.mark.gpu
def test_cuda_steady_state_step_is_one_graph_launch_and_no_eager_model_kernel(impl):
    # float32, the default: v09 and v10 run their Triton kernels, inside the graph.
    graphed = impl.build(CKPT, device="cuda", max_lanes=8)
    warm_every_bucket(graphed)
    _, replayed = steady_state(graphed, lambda: CudaStepWatch(impl))
    # From v14 each step launches the next one's decode: the last step's ran in the step
    # before it, so that step only reads its tokens back.
    launching = len(replayed) - unread(impl)
    for step, watch in enumerate(replayed):
        assert watch.launches.graphs == (step < launching), \
            f"decode step {step}: {watch.launches.calls}"
        # From v14 a step also copies its draws into the next step's token ids (index_copy_).
        assert watch.launches.kernels <= HOST_KERNELS + unread(impl), \
            f"decode step {step}: {watch.launches.calls}"
        assert not watch.model.model_calls and not watch.model.model_ops, \
            f"decode step {step} ran model code: {sorted(set(watch.model.model_calls))}"
    eager = impl.build(CKPT, device="cuda", max_lanes=8, use_graphs=False)
    _, off = steady_state(eager, lambda: CudaStepWatch(impl))
    for step, watch in enumerate(off[:launching]):  # the profiler sees eager kernels if any
        assert watch.launches.graphs == 0, f"decode step {step}: {watch.launches.calls}"
        assert watch.launches.kernels > 10 * HOST_KERNELS, f"decode step {step}"
        assert watch.model.model_calls, f"decode step {step}"
