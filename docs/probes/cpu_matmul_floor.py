"""The CPU main job's floor: SmolLM2-135M's matrix products for one token, alone, on this CPU
(2 threads). Thirty layers of seven weight matrices each (q, k, v, o, gate, up, down), distinct
tensors so that none stays in cache, then the tied LM head; float32 and bfloat16. Medians of 5
rounds of 10 tokens."""
import time

import torch

torch.set_num_threads(2)
HIDDEN, KV, MLP, VOCAB, LAYERS = 576, 192, 1536, 49152, 30
SHAPES = [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN), (MLP, HIDDEN),
          (MLP, HIDDEN), (HIDDEN, MLP)]


def median_ms(fn, rounds=5, n=10):
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n * 1e3)
    return sorted(times)[rounds // 2]


for dtype in (torch.float32, torch.bfloat16):
    layers = [[torch.randn(shape).to(dtype) for shape in SHAPES] for _ in range(LAYERS)]
    head = torch.randn(VOCAB, HIDDEN).to(dtype)
    x, wide = torch.randn(1, HIDDEN).to(dtype), torch.randn(1, MLP).to(dtype)

    def token():
        for weights in layers:
            for w in weights:
                torch.nn.functional.linear(x if w.shape[1] == HIDDEN else wide, w)

    layer_ms = median_ms(token)
    head_ms = median_ms(lambda: torch.nn.functional.linear(x, head))
    print(f"{dtype}: layers {layer_ms:.1f} ms, LM head {head_ms:.1f} ms, "
          f"together {layer_ms + head_ms:.1f} ms a token")
