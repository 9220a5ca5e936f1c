"""Page contract: every version speaks like Hugging Face on the real SmolLM2-135M-Instruct model.

What it shows: the tiny fixtures prove the arithmetic; this spec proves the same version on a
real checkpoint (30 layers, 9 query heads over 3 KV heads, tied embeddings, the chat template),
where bugs that tiny shapes hide (head_dim 64, long prompts, RoPE at theta 1e5) would show.

Core principle: the oracle is Hugging Face's own LlamaForCausalLM reading the same converted
weights, decoding greedily in float32. Token parity is asserted only over the leading tokens the
oracle chose with a top-1/top-2 logit gap of at least MARGIN (0.05; float32 logits of a correct
runtime differ from the oracle's by about 1e-4 here), and the prompts are chosen so that this
horizon covers at least MIN_HORIZON tokens. All prompts go to one `generate` call, so batching
versions see ragged prompt lengths.

Files to compare: spec/support/models/real_model.py (what is cached per worker), torchlet/gguf_model.py
(the conversion) and any version's engine.

Which versions: v00 (the architecture on real weights) and the version the CLI serves with by
default here (the newest; on a CPU it serves as the CLI does: Triton kernels on their PyTorch
path, graphs off), the versions between are held to v00 token for token on the tiny fixtures. A
learner's tree (--impl-root) runs every version it has.
Tradeoff left visible: a full-recompute version pays seconds here; a version whose kernels would
run in the interpreter on a CPU (v09, v10 of a learner's tree) is skipped: that takes minutes.
"""
from __future__ import annotations

import os

import pytest
import torch

import implementations
from spec.support.models import real_model as rm
from torchlet.contract import GENERATE, QUANTIZED_WEIGHTS, GenerationParams
from torchlet.engines import build_sized
from torchlet.running import default_version, serving_options

pytestmark = [pytest.mark.spec(needs=GENERATE, quantized=True), pytest.mark.real_model]


def served_here(impl) -> bool:
    """v00 (the architecture, on real weights) and the version `torchlet generate` serves with
    by default on this machine. The versions between are held to v00 token for token by the
    tiny-fixture specs; running all twelve on 135M parameters would cost minutes of CPU."""
    versions = implementations.discover(implementations.REFERENCE_ROOT)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return impl.name in (versions[0].name, default_version(versions, device, quantized=True).name)


@pytest.fixture(scope="module")
def engine(impl):
    if impl.uses_triton and not torch.cuda.is_available() and \
            os.environ.get("TRITON_INTERPRET") == "1":  # spec/support/collection/kernel_mode.py's choice
        pytest.skip(f"{impl.name} runs Triton kernels; the CPU interpreter is too slow for 135M")
    if not served_here(impl) and not impl.package.__name__.startswith("torchlet_tree_"):
        pytest.skip("the real model runs on v00 and on the CLI's default version only")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    longest = max(len(rm.chat_ids(p)) for p in rm.CHAT_PROMPTS) + rm.NEW_TOKENS
    # sized to the prompts: buffers for the model's whole context (8192) cost minutes on a CPU
    # as the CLI hands it: the GGUF blocks as stored to a version that reads them (the oracle's
    # float weights are those blocks dequantized)
    ckpt = rm.stored_checkpoint() if QUANTIZED_WEIGHTS in impl.capabilities else rm.checkpoint()
    return build_sized(impl, ckpt, device=device, dtype=torch.float32,
                       max_model_len=longest, max_running=len(rm.CHAT_PROMPTS),
                       **serving_options(impl, device))


@pytest.fixture(scope="module")
def answers(engine):
    prompts = [list(rm.chat_ids(p)) for p in rm.CHAT_PROMPTS]
    return dict(zip(rm.CHAT_PROMPTS, engine.generate(prompts, GenerationParams(rm.NEW_TOKENS))))


@pytest.mark.parametrize("prompt", rm.CHAT_PROMPTS)
def test_the_oracle_is_confident_over_enough_tokens_to_compare(prompt):
    assert rm.reference(prompt).horizon(rm.MARGIN) >= rm.MIN_HORIZON


def test_greedy_tokens_match_hugging_face_over_the_confident_horizon(impl, answers):
    # One test per version, all prompts inside: separate items would let pytest (and xdist's
    # workers) build the same engine and run the same prompts more than once.
    wrong = []
    for prompt in rm.CHAT_PROMPTS:
        ref, got = rm.reference(prompt), answers[prompt]
        h = ref.horizon(rm.MARGIN)
        assert h >= rm.MIN_HORIZON, f"the oracle is unsure this early on {prompt!r}: choose another"
        assert len(got) == rm.NEW_TOKENS
        if got[:h] != ref.tokens[:h]:
            wrong.append(f"{prompt!r}: {impl.name} said {rm.answer(got[:h])!r}, "
                         f"Hugging Face said {rm.answer(ref.tokens[:h])!r}")
    assert not wrong, "\n".join(wrong)
    assert "Paris" in rm.answer(answers["What is the capital of France?"])
