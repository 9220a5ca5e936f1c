"""A Hugging Face directory that `torchlet serve --model DIR` can load, of the Qwen2.5-0.5B shape
with random weights (those of `torchlet bench gpu-workload`, same seed) and the specs' byte
tokenizer: what `torchlet bench serve` sends its requests to on the H200, where no real
checkpoint can be downloaded. The embedding (tied, so also the LM head) is zero at every id but
the byte tokenizer's printable characters: the largest of their random logits is above the
others' 0, so every token streams as one character and the client sees each token arrive.
With --tokenizer DIR, DIR's tokenizer files (tokenizer.json, tokenizer_config.json) instead of
the byte tokenizer, padded to the model's vocabulary: what `torchlet bench structured` needs to
time a grammar as a real tokenizer makes it work (xgrammar's accept and fill cost per token
depend on the vocabulary: on this CPU an accept took ~30 us on the byte tokenizer padded to
151,936 ids, ~1 us on SmolLM2's). Copy SmolLM2's from the directory `torchlet generate` unpacks
its GGUF into (~/.cache/torchlet/gguf/...).
Usage: PYTHONPATH=. python docs/probes/serve_model_dir.py OUT [--device cuda] [--tokenizer DIR]"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from spec.support.models.hf_dirs import byte_tokenizer, printable_rows
from torchlet.checkpoints import hf_config_dict
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint

out = Path(sys.argv[1])
device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
out.mkdir(parents=True, exist_ok=True)
checkpoint = random_checkpoint(QWEN25_05B, 0, device=device, dtype=torch.bfloat16)
embed = checkpoint.tensors["model.embed_tokens.weight"]
keep = torch.zeros(embed.shape[0], dtype=torch.bool, device=embed.device)
keep[:len(printable_rows())] = printable_rows().to(embed.device)
embed[~keep] = 0
save_file({k: v.contiguous().cpu() for k, v in checkpoint.tensors.items()},
          str(out / "model.safetensors"))
config = hf_config_dict(QWEN25_05B)
config["torch_dtype"] = "bfloat16"
(out / "config.json").write_text(json.dumps(config, indent=1))
if "--tokenizer" in sys.argv:
    source = Path(sys.argv[sys.argv.index("--tokenizer") + 1])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((source / name).read_bytes())
else:
    byte_tokenizer().save_pretrained(str(out))
print(f"wrote {out}: {sum(t.numel() for t in checkpoint.tensors.values()) / 1e6:.0f}M parameters")
