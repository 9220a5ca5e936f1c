"""v18_quantized_weights: the model's matrices kept as small integers in groups, read as stored.

What it introduces: build(ckpt, weights="auto" | "float" | "gguf" | "int8" | "int4",
group_size=32). A checkpoint may hold contract QuantizedTensors (a GGUF file's Q8_0, Q4_0 and
Q4_1 blocks, as the file stores them); "auto" keeps them so, "int8" (per output channel) and
"int4" (groups of group_size columns, with zero points; the embedding and LM head stay int8)
quantize float matrices at load, "float"
dequantizes them all. Every product of a quantized matrix reads the integers, the embedding
dequantizes only the rows it looks up.

Why v17 needs it: at batch 1 a step's time is the time to read the weights; float32 reads 4
bytes a weight, int8 about 1, int4 about half of one (plus a scale a group).

Core principle: quantization is a change of weights, not of maths. The quantized engine's logits
are those of a float64 engine built on the dequantized weights, within float32 rounding, for
every format, for the spec's own GGUF blocks (made by the `gguf` package's quantizer) and for
the engine's int8 and int4, whose integers are the issue's definitions' (the spec quantizes
independently and the two engines' logits are bit for bit equal); greedy tokens are Hugging
Face's in float64 on those dequantized weights. The bytes a decode step reads are observed from
outside: every storage its ops read, summed, against the float engine's. On a float checkpoint
the engine runs v17's ops one for one (which is why v17's and earlier pages do not run again
here), and speculation keeps the quantized tokens. How close the integers stay to the float
model is a property of real weights: a real-model spec at the end of this page holds int8 and
int4 to top-1 agreement and KL bounds on the default model's chat prompts.

Files to compare: implementations/v18_quantized_weights/model.py (QuantizedWeights,
QuantizedOps) against implementations/v13_fused/model.py (PackedWeights, FusedOps.project);
quantize.py and the kernels (cpu_kernels.py, gpu_kernels.py) are new.

Tradeoff left visible: int4 loses accuracy that int8 keeps (16 levels a group); a prompt's
products (many rows) gain little from fewer bytes, and on a CPU dequantize blocks into a float
GEMM; a matrix whose column count is not whole 32-column runs stays float; quantized weights run
on one rank (splitting a group across ranks is not written).
"""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spec.support.collection import exports, trees
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.models.quantized import EIGHT_BIT, agreement, quantized
from spec.support.oracles.oracle import greedy, hf_model
from spec.support.oracles.prompts import MARGIN
from spec.support.watchers.op_trace import op_trace
from torchlet.contract import (QUANTIZED_WEIGHTS, BuildError, GenerationParams, QuantizedTensor,
                               dequantized)
from torchlet.running import triton_interpret

pytestmark = pytest.mark.spec(needs=QUANTIZED_WEIGHTS)

FIXTURE = "tiny_qwen2"  # hidden 64, intermediate 128: every matrix is whole 32-column runs
CKPT = tiny_checkpoint(FIXTURE)
F64 = torch.float64
TOL = dict(rtol=1e-4, atol=1e-4)  # float32 against float64 through two layers (about 2e-5 seen)
FORMATS = [("Q8_0", 32), ("Q4_0", 32), ("Q4_1", 32), ("int8", 32), ("int4", 32), ("int4", 64)]
PROMPT = list(range(3, 40))


@pytest.fixture(autouse=True)
def pytorch_layers():
    """Engines here take the layers' PyTorch path on a CPU: v18's own Triton kernels run on CUDA
    only (its CPU products are the C++ op), and the layers' kernels are v13's, checked
    interpreted on v13's page; the interpreter would cost this page minutes (an engine reads
    TRITON_INTERPRET when it is built)."""
    with triton_interpret(None if torch.cuda.is_available() else "0"):
        yield


@functools.lru_cache(maxsize=None)
def stored(kind: str, group: int):
    """The fixture with its matrices quantized by the spec, and the same dequantized."""
    q = quantized(CKPT, kind, group)
    return q, replace(q, tensors=dequantized(q.tensors))


@pytest.mark.parametrize("kind, group", FORMATS, ids=[f"{k}-{g}" for k, g in FORMATS])
def test_logits_are_a_float64_engine_on_the_dequantized_weights(impl, kind, group):
    q, floats = stored(kind, group)
    assert sum(isinstance(t, QuantizedTensor) for t in q.tensors.values()) >= 10
    expected = impl.build(floats, dtype=F64).logits(PROMPT)
    got = impl.build(q).logits(PROMPT)
    torch.testing.assert_close(got.double(), expected.double(), **TOL)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_the_engines_own_quantizer_makes_the_issues_integers(impl, kind):
    """weights="int8"/"int4" on the float fixture and the spec's own quantization of it, held as
    stored: bit for bit the same logits (the same integers and scales, the same kernels)."""
    own = impl.build(CKPT, weights=kind, group_size=32).logits(PROMPT)
    spec = impl.build(stored(kind, 32)[0]).logits(PROMPT)
    assert torch.equal(own, spec)


@pytest.mark.parametrize("kind", ["Q4_1", "int8"])
def test_greedy_tokens_are_hugging_faces_on_the_dequantized_weights(impl, kind):
    q, floats = stored(kind, 32)
    ref = greedy(hf_model(floats, F64), PROMPT, 12, stop_below=MARGIN)
    assert len(ref.tokens) >= 4, "the oracle is not confident enough to compare"
    engine = impl.build(q)
    got = engine.generate([PROMPT], GenerationParams(max_new_tokens=len(ref.tokens)))[0]
    assert got == ref.tokens


class Storages(TorchDispatchMode):
    """Bytes of every storage the ops under it read (each storage once), and which of them an
    op under it made (activations; a view's storage is its base's, read before)."""

    def __init__(self):
        super().__init__()
        self.read: dict[int, int] = {}
        self.made: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in tensors_in(list(args) + list((kwargs or {}).values())):
            s = t.untyped_storage()
            self.read[s.data_ptr()] = s.nbytes()
        out = func(*args, **(kwargs or {}))
        for t in tensors_in(out if isinstance(out, (list, tuple)) else [out]):
            if t.untyped_storage().data_ptr() not in self.read:
                self.made.add(t.untyped_storage().data_ptr())
        return out

    def held(self) -> int:
        """Bytes read of storages that were there before: weights, caches, buffers."""
        return sum(n for s, n in self.read.items() if s not in self.made)


def tensors_in(values) -> list:
    found = []
    for value in values:
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                found.append(t)
    return found


def decode_step_bytes(engine) -> tuple[int, int]:
    """(bytes of held storages, of all storages) one decode step's ops read."""
    rid = engine.add_request(PROMPT[:8], GenerationParams(max_new_tokens=4))
    engine.step()  # the prompt
    with Storages() as watch:
        engine.step()
    engine.abort(rid)
    return watch.held(), sum(watch.read.values())


BYTES = {"int8": 0.27, "int4": 0.16}  # the issue's bounds, of float32's bytes


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_decode_step_reads_a_fraction_of_the_float_bytes(impl, kind):
    """The issue's bounds are for the weights' storage: 0.27x float32 for int8, 0.16x for int4,
    whose embedding (the tied LM head) stays int8. Observed from outside, on a fixture with a
    small pool: the storages a decode step's ops read that were there before it (weights, K/V,
    buffers; not the activations its ops make), bounded by the matrices' shares plus what stays
    float (the float engine's same reads less its matrices); and everything the step reads, at
    most half the float engine's (a matrix made float for a product reads as float)."""
    sizes = dict(num_blocks=8, block_size=4, max_model_len=16)
    held_f, all_f = decode_step_bytes(impl.build(CKPT, weights="float", **sizes))
    matrices = {k: t.numel() * 4 for k, t in CKPT.tensors.items() if t.dim() == 2}
    rest = held_f - sum(matrices.values())  # what stays float: norms, K/V, inputs, tables
    assert 0 < rest < 0.2 * held_f
    bound = sum(b * BYTES["int8" if k in EIGHT_BIT else kind] for k, b in matrices.items())
    held_q, all_q = decode_step_bytes(impl.build(CKPT, weights=kind, group_size=32, **sizes))
    assert held_q <= bound + rest, (held_q, held_f, bound)
    assert all_q <= 0.5 * all_f, (all_q, all_f)


def test_on_a_float_checkpoint_it_runs_the_previous_versions_ops_one_for_one(impl):
    """What lets the earlier pages skip this version (spec/support/collection/rule.py): with
    weights="auto" on a float checkpoint, a prompt and two decode steps dispatch the ops of the
    version before it, in order, with the same shapes, and give its tokens."""
    source = exports.weights_source(impl)
    before = next(v for v in trees.versions(exports.tree_of(impl)) if v.name == source)

    def trace(version):
        engine = version.build(CKPT)
        return op_trace(lambda: engine.generate([PROMPT[:6]], GenerationParams(max_new_tokens=3)))

    assert trace(impl) == trace(before)


def test_speculation_keeps_the_quantized_tokens(impl):
    q = stored("Q4_1", 32)[0]
    params = GenerationParams(max_new_tokens=10)
    prompts = [PROMPT, [7, 8, 9, 7, 8, 9, 7, 8]]
    plain = impl.build(q).generate(prompts, params)
    guessing = impl.build(q, speculative_tokens=3, min_tokens_per_pass=0.0)
    assert guessing.generate(prompts, params) == plain
    assert guessing.speculation_stats()["verify_passes"] > 0


@pytest.mark.parametrize("options, named", [
    (dict(weights="int3"), "weights"),
    (dict(weights="gguf"), "gguf"),
    (dict(weights="int4", group_size=48), "group_size"),
])
def test_a_bad_weights_option_is_refused_in_one_line_naming_it(impl, options, named):
    with pytest.raises(BuildError) as refused:
        impl.build(CKPT, **options)
    assert named in str(refused.value) and "\n" not in str(refused.value)


# --- accuracy on the default model's weights -------------------------------------------------

ACCURACY = {"int8": (0.98, 0.01), "int4": (0.90, 0.05)}  # top-1 agreement at least, mean KL at most


@pytest.mark.real_model
def test_on_the_default_model_int8_and_int4_keep_the_float_models_top_token_and_distribution(impl):
    """On the chat prompts and the float model's greedy answers, at every distinct position (a
    position the prompts share counts once): int8 agrees with the float model's top token at
    0.98 of them and its distribution is within a mean KL of 0.01; int4 (groups of 32) at 0.90
    and 0.05. The float model is the default model's own: its Q4_1 blocks dequantized. int4's
    grid at group 32 is theirs, so it loses little here; at groups of 64 and 128 it measured
    0.82 and 0.75 (docs/probes/quantized_accuracy.py), which no bound here claims."""
    from spec.support.models import real_model as rm

    ckpt = rm.checkpoint()
    float_engine = impl.build(ckpt, weights="float", max_model_len=512)
    prompts = [list(rm.chat_ids(p)) for p in rm.CHAT_PROMPTS]
    answers = float_engine.generate(prompts, GenerationParams(max_new_tokens=rm.NEW_TOKENS))
    sequences = [p + a for p, a in zip(prompts, answers)]  # the float model's own answers
    expected = [float_engine.logits(s).double() for s in sequences]
    for kind, (agree, kl) in ACCURACY.items():
        engine = impl.build(ckpt, weights=kind, max_model_len=512)
        positions, agree_at, mean_kl = agreement(engine, expected, sequences)
        assert agree_at >= agree and mean_kl <= kl, (kind, positions, agree_at, mean_kl)
