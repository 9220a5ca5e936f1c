"""Page contract: the model cache keeps one conversion per GGUF content, for every install.

What it shows: a GGUF file (the packaged SmolLM2, or any Llama/Qwen2 file given as `--model`)
is converted once into the user cache, under a key read from the file's content. Two installs
sharing the cache (two clones, two venvs) keep their conversions side by side: installs A, B, A
convert twice, not three times, and a copy of the same file with another mtime converts not at
all. `torchlet cache list` names each conversion and `clear` removes only what it is told to:
a key, its hash, or a prefix of either that names one conversion (an ambiguous one is refused).
A cache that cannot be created is one line, not a traceback.

Core principle: evidence from outside: conversions are counted at the conversion function, the
files are checked against the Hugging Face model that the GGUF was written from, and the CLI is
judged by its exit status and output.

Files to compare: torchlet/gguf_model.py (cache_key, resolve_model), torchlet/cache.py.

Tradeoff left visible: the files here are tiny float32 GGUFs written with the `gguf` package
(a conversion takes about 0.1 s, SmolLM2's about 10 s); only the readable name is read from the
real conversion, which spec/support/models/real_model.py makes once per machine.
"""
from __future__ import annotations

import os
import shutil

import pytest
import torch

from spec.support.models import real_model as rm
from spec.support.models.gguf_files import write_gguf
from torchlet import cli, gguf_model
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import CheckpointError
from torchlet.text import load_tokenizer


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    """Two installs' copies of `m.gguf` with different weights, and the models written."""
    root = tmp_path_factory.mktemp("installs")
    files, models = [], []
    for i, install in enumerate("ab"):
        (root / install).mkdir()
        files.append(root / install / "m.gguf")
        models.append(write_gguf(files[-1], "llama", seed=i + 1))
        os.utime(files[-1], ns=(10**18 + i, 10**18 + i))  # the old mtime key told them apart
    return files, models


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_model.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def conversions(monkeypatch):
    """The GGUF files converted from now on, in order."""
    converted, real = [], gguf_model.convert

    def counted(path, out, progress=False):
        converted.append(path)
        return real(path, out, progress)
    monkeypatch.setattr(gguf_model, "convert", counted)
    return converted


def installed(monkeypatch, path):
    """The default model of an install whose package holds `path`."""
    monkeypatch.setattr(gguf_model, "gguf_path", lambda: path)
    return gguf_model.default_model_dir(progress=False)


def test_installs_a_b_a_convert_twice_and_keep_both_conversions(ggufs, cache, conversions,
                                                                monkeypatch):
    (a, b), (model_a, model_b) = ggufs
    dirs = [installed(monkeypatch, f) for f in (a, b, a)]
    assert conversions == [a, b]
    assert dirs[0] == dirs[2] != dirs[1]
    for d, model in zip(dirs, (model_a, model_b, model_a)):
        embed = load_hf_dir(d).tensors["model.embed_tokens.weight"]
        assert torch.equal(embed, model.model.embed_tokens.weight)


def test_a_copy_of_the_file_with_another_mtime_reuses_the_conversion(ggufs, cache, conversions,
                                                                     monkeypatch, tmp_path):
    a = ggufs[0][0]
    copy = tmp_path / "other-venv" / a.name
    copy.parent.mkdir()
    shutil.copyfile(a, copy)
    os.utime(copy, ns=(10**9, 10**9))
    assert installed(monkeypatch, a) == installed(monkeypatch, copy)
    assert conversions == [a]


def test_the_key_reads_the_content_past_the_header(tmp_path):
    """Weights that differ beyond the first MiBs (a fine-tune) give another key."""
    header = b"GGUF" + bytes(gguf_model.HEAD)
    g = torch.Generator().manual_seed(0)
    keys = set()
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        weights = torch.randint(0, 256, (3 << 20,), generator=g, dtype=torch.uint8)
        (tmp_path / name / "m.gguf").write_bytes(header + weights.numpy().tobytes())
        keys.add(gguf_model.cache_key(tmp_path / name / "m.gguf"))
    assert len(keys) == 2


def run(capsys, *argv):
    capsys.readouterr()  # the test's own set-up (a model directory written first) is not the CLI's
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_converted(ggufs, cache):
    """Both installs' files converted: their (key, GGUF file) pairs."""
    return [(gguf_model.resolve_model(str(f), progress=False)[0].name, f) for f in ggufs[0]]


def test_cache_list_shows_each_conversions_key_name_size_date_and_gguf(capsys, two_converted):
    code, out, err = run(capsys, "cache", "list")
    assert code == 0, err
    rows = out.splitlines()
    assert len(rows) == 3 and rows[-1].startswith("2 conversions")
    for (key, gguf), row in zip(sorted(two_converted), rows):
        assert row.split()[0] == key
        assert "m (F32 GGUF)" in row and " MB" in row and row.endswith(str(gguf.resolve()))


def test_cache_clear_removes_the_keys_named_or_all_and_refuses_an_unknown_key(capsys, cache,
                                                                              two_converted):
    (kept, _), (gone, _) = two_converted
    code, out, err = run(capsys, "cache", "clear", "nowhere", gone)
    assert (code, len(err.splitlines())) == (1, 1) and "nowhere" in err
    assert (cache / "gguf" / gone).is_dir()  # a typo removes nothing
    code, out, err = run(capsys, "cache", "clear", gone)
    assert code == 0, err
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == [kept]
    code, out, err = run(capsys, "cache", "clear", "--all")
    assert code == 0, err
    assert list((cache / "gguf").iterdir()) == []
    assert run(capsys, "cache", "list")[1].startswith("no conversions")


def test_cache_clear_takes_a_unique_prefix_of_a_key_or_hash_and_refuses_an_ambiguous_one(
        capsys, cache, two_converted):
    (kept, _), (gone, _) = two_converted
    code, out, err = run(capsys, "cache", "clear", "m")  # both files were named m.gguf
    assert (code, out) == (1, "") and err.count("\n") == 1, err
    assert err == (f"torchlet: error: the key m matches 2 conversions: {min(kept, gone)}, "
                   f"{max(kept, gone)} (give more of it)\n")
    code, out, err = run(capsys, "cache", "clear", "m-zz")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert "no conversion with the key m-zz" in err
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == sorted([kept, gone])
    hashes = [k.split("-", 1)[1] for k in (gone, kept)]
    short = hashes[0][:len(os.path.commonprefix(hashes)) + 1]  # the shortest prefix that tells
    code, out, err = run(capsys, "cache", "clear", short)
    assert code == 0 and out.startswith(f"removed {gone} "), err
    code, out, err = run(capsys, "cache", "clear", kept[:3])  # "m-" and a hash digit: one left
    assert code == 0 and out.startswith(f"removed {kept} "), err
    assert list((cache / "gguf").iterdir()) == []


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_model_takes_a_gguf_file_and_gets_the_weights_it_was_written_from(family, cache,
                                                                          tmp_path):
    path = tmp_path / f"tiny-{family}.F32.gguf"
    model = write_gguf(path, family, seed=3)
    out, name = gguf_model.resolve_model(str(path), progress=False)
    assert name == f"tiny-{family} (F32 GGUF)"
    assert out.is_relative_to(cache)
    tensors = load_hf_dir(out).tensors
    expected = {k: v for k, v in model.state_dict().items() if k in tensors}
    assert set(tensors) == set(expected) and len(tensors) >= len(model.state_dict()) - 1
    for k, v in expected.items():  # q/k rows back in Hugging Face's order for Llama
        assert torch.equal(tensors[k], v), k
    tokenizer = load_tokenizer(out)
    assert tokenizer.decode(tokenizer.encode("héllo")) == "héllo"


@pytest.mark.parametrize("what, problem", [
    ("gemma.gguf", "unsupported GGUF architecture 'gemma'"),
    ("notes.gguf", "neither a GGUF file nor"),
    ("empty-dir", "without config.json"),
    ("missing.gguf", "does not exist"),
])
def test_a_model_that_cannot_be_read_is_one_line_and_leaves_nothing(what, problem, cache,
                                                                    tmp_path):
    path = tmp_path / what
    if what == "gemma.gguf":
        write_gguf(path, arch="gemma")
    elif what == "notes.gguf":
        path.write_text("not a model\n")
    elif what == "empty-dir":
        path.mkdir()
    with pytest.raises(CheckpointError, match=problem) as e:
        gguf_model.resolve_model(str(path), progress=False)
    assert "\n" not in str(e.value)
    assert not (cache / "gguf").exists() or list((cache / "gguf").iterdir()) == []


@pytest.mark.real_model
def test_the_default_model_has_a_readable_name_not_its_cache_key(conversions):
    converted = rm.model_dir()  # converts once, if this machine has never done so
    conversions.clear()
    assert gguf_model.resolve_model(None, progress=False) == (
        converted, "SmolLM2-135M-Instruct (Q4_1 GGUF)")
    assert conversions == []


def test_a_cache_dir_that_is_a_file_is_one_line_not_a_traceback(capsys, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(gguf_model.CACHE_ENV, str(blocker))
    code, out, err = run(capsys, "generate", "hi", "--impl", "v00")
    assert code == 1
    assert err.splitlines() == [f"torchlet: error: cannot create the model cache {blocker}/gguf: "
                                f"Not a directory (set {gguf_model.CACHE_ENV} to a writable "
                                f"directory)"]
