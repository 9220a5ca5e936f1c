"""Why llama.cpp's answer to the main job's prompt differs from HF's from its first token: the
logits of HF's float32 model on the converted SmolLM2 weights against llama.cpp's on the Q4_1
file (llama-cpp-python, 1 thread) at every prompt position. Prints the lowest correlation of the
two logit vectors over the positions, and at the last one (where the answer's first token is
chosen) each side's two best tokens and their logits."""
import llama_cpp
import numpy as np
import torch
import transformers

from torchlet.checkpoints import load_hf_dir
from torchlet.gguf_model import default_model_dir, gguf_path
from torchlet.text import load_tokenizer, prompt_ids

torch.set_num_threads(1)
model_dir = default_model_dir(False)
tokenizer = load_tokenizer(model_dir)
ids = prompt_ids(tokenizer, "What is the capital of France?")
# the cache keeps GGUF's blocks, which transformers cannot read: its weights come dequantized
model = transformers.LlamaForCausalLM.from_pretrained(
    None, config=transformers.LlamaConfig.from_pretrained(model_dir),
    state_dict=dict(load_hf_dir(model_dir).tensors), dtype=torch.float32)
with torch.no_grad():
    hf = model(torch.tensor([ids])).logits[0].double().numpy()
llm = llama_cpp.Llama(model_path=str(gguf_path()), n_threads=1, n_ctx=128, logits_all=True,
                      verbose=False)
llm.eval(ids)
cpp = np.asarray(llm.scores[:len(ids)], dtype=np.float64)
corr = [np.corrcoef(a, b)[0, 1] for a, b in zip(hf, cpp)]
print(f"{len(ids)} prompt positions; lowest logit correlation {min(corr):.4f}, "
      f"largest logit difference {np.abs(hf - cpp).max():.2f}")
for name, logits in (("HF float32", hf[-1]), ("llama.cpp Q4_1", cpp[-1])):
    top = np.argsort(-logits)[:2]
    print(f"{name}: " + ", ".join(f"{tokenizer.decode([int(t)])!r} ({t}) {logits[t]:.3f}"
                                  for t in top))
