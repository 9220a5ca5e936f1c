"""v00_full_recompute, page 1 of 3: the decoder's building blocks.

What it introduces: a Qwen2.5-style decoder written as plain functions over tensors: token
embedding, RMSNorm, RoPE with a configurable theta, grouped-query attention with optional q/k/v
bias, a SwiGLU MLP, and a tied or untied LM head.
Why: every later version changes how these blocks are scheduled and fed, never what they compute;
this page pins what they compute.
Core principle: each block equals Hugging Face's own module, loaded with the same tensors, in
float32 with eager attention. Both fixtures randomize every parameter, biases and norm weights
included, so a block that ignores one of them fails here.
Files: implementations/v00_full_recompute/model.py against transformers' modeling_qwen2.py and
modeling_llama.py.
Tradeoff left visible: the blocks work on one sequence at a time: no batching, no cache.
"""
import pytest
import torch

from spec.support.models.fixtures import TINY, tiny_checkpoint
from spec.support.oracles.oracle import HFLayers, hf_model
from torchlet.contract import GENERATE, layer_tensors

pytestmark = pytest.mark.spec(needs=GENERATE)

TOL = dict(atol=2e-5, rtol=2e-5)


@pytest.fixture(params=TINY, scope="module")
def setup(request):
    ckpt = tiny_checkpoint(request.param)
    return ckpt, HFLayers(hf_model(ckpt, torch.float32))


def hidden(ckpt, t=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, ckpt.config.hidden_size, generator=g)
    positions = torch.randperm(t * 3, generator=g)[:t].sort().values
    return x, positions


@pytest.mark.spec(part="model")
@torch.inference_mode()
def test_rms_norm_equals_hf(impl, setup):
    ckpt, hf = setup
    x, _ = hidden(ckpt)
    ours = impl.layers.rms_norm(x, ckpt.tensors["model.norm.weight"], ckpt.config.rms_eps)
    torch.testing.assert_close(ours, hf.norm(x), **TOL)


@pytest.mark.spec(part="model")
@torch.inference_mode()
def test_rope_equals_hf_at_scattered_positions(impl, setup):
    ckpt, hf = setup
    c = ckpt.config
    g = torch.Generator().manual_seed(1)
    q = torch.randn(7, c.num_heads, c.head_dim, generator=g)
    k = torch.randn(7, c.num_kv_heads, c.head_dim, generator=g)
    positions = torch.tensor([0, 1, 5, 17, 18, 100, 255])
    q_hf, k_hf = hf.apply_rope(q, k, positions)
    torch.testing.assert_close(impl.layers.apply_rope(q, positions, c.rope_theta), q_hf, **TOL)
    torch.testing.assert_close(impl.layers.apply_rope(k, positions, c.rope_theta), k_hf, **TOL)


@pytest.mark.spec(part="model")
@torch.inference_mode()
@pytest.mark.parametrize("layer", [0, 1])
def test_attention_equals_hf(impl, setup, layer):
    ckpt, hf = setup
    x, positions = hidden(ckpt)
    ours = impl.layers.attention(x, positions, layer_tensors(ckpt, layer), ckpt.config)
    torch.testing.assert_close(ours, hf.attention(layer, x, positions), **TOL)


@pytest.mark.spec(part="model")
@torch.inference_mode()
def test_mlp_equals_hf(impl, setup):
    ckpt, hf = setup
    x, _ = hidden(ckpt)
    torch.testing.assert_close(impl.layers.mlp(x, layer_tensors(ckpt, 0)), hf.mlp(0, x), **TOL)


@pytest.mark.spec(part="model")
@torch.inference_mode()
def test_decoder_layer_equals_hf(impl, setup):
    ckpt, hf = setup
    x, positions = hidden(ckpt)
    ours = impl.layers.decoder_layer(x, positions, layer_tensors(ckpt, 1), ckpt.config)
    torch.testing.assert_close(ours, hf.decoder_layer(1, x, positions), **TOL)


@torch.inference_mode()
def test_whole_model_logits_equal_hf(impl, setup):
    ckpt, hf = setup
    tokens = torch.randint(0, ckpt.config.vocab_size, (40,),
                           generator=torch.Generator().manual_seed(2)).tolist()
    ours = impl.build(ckpt).logits(tokens)
    torch.testing.assert_close(ours, hf.logits(tokens), atol=1e-4, rtol=1e-4)


def test_layers_see_the_biases_and_norm_weights(setup):
    """The fixture itself: biases and norm weights are far from Hugging Face's init (0 and 1),
    so the parity above would catch a block that skipped them."""
    ckpt, _ = setup
    for name, t in ckpt.tensors.items():
        if name.endswith("norm.weight"):
            assert (t - 1).abs().mean() > 0.1, name
        if name.endswith(".bias"):
            assert t.abs().mean() > 0.1, name
