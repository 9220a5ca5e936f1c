"""A batch-1 layer's MLP sublayer (issue 48's launches): the chain v13 ran before its norms moved
into the products (add_rms_norm, cuBLAS over [gate | up], down's gemv with its split sums,
add_rms_norm: five launches) against FusedOps.mlp_sublayer's two (norm_gemv over [gate | up],
then down's gemv and gemv_add_norm's launch that sums, adds and norms), on Qwen2.5-0.5B's and
Qwen3-0.6B's shapes in bfloat16; then norm_gemv under other plans (weight rows and columns a
program reads at a time).

Timing is docs/probes/gemv_variants.py's: one CUDA graph of 24 sublayers, each on its own copy of
the weights (a step's 24 layers read theirs), replayed; us per sublayer. Each variant's output is
checked against the chain's first. GPU only: `python3 docs/probes/mlp_norm_fusion.py`."""
import itertools
import sys
from pathlib import Path

import torch

import implementations

sys.path.insert(0, str(Path(__file__).parent))
from gemv_variants import graph_us, time_plans  # noqa: E402  (its timing and plan loop)

v13 = implementations.load("v13_fused").package
gemv, kernels = v13.gemv, v13.kernels
device, dtype, LAYERS, EPS = "cuda", torch.bfloat16, 24, 1e-6
SHAPES = [("qwen2.5-0.5b", 896, 4864), ("qwen3-0.6b", 1024, 3072)]  # hidden, intermediate


def main():
    torch.manual_seed(0)
    own = gemv.plan
    for name, hidden, inter in SHAPES:
        layers = [(torch.randn(2 * inter, hidden, device=device, dtype=dtype) * hidden ** -0.5,
                   torch.randn(hidden, inter, device=device, dtype=dtype) * inter ** -0.5)
                  for _ in range(LAYERS)]
        attended, residual = (torch.randn(1, hidden, device=device, dtype=dtype)
                              for _ in range(2))
        post, after = (torch.rand(hidden, device=device, dtype=dtype) + 0.5 for _ in range(2))

        def chain(gate_up_w, down_w):
            h, stream = kernels.add_rms_norm(attended, residual, post, EPS)
            gate_up = torch.nn.functional.linear(h, gate_up_w)
            return kernels.add_rms_norm(gemv.gemv(gate_up, down_w, None, swiglu=True), stream,
                                        after, EPS)

        def fused(gate_up_w, down_w):
            gate_up, stream = gemv.norm_gemv(attended, residual, post, EPS, gate_up_w)
            return gemv.gemv_add_norm(gate_up, down_w, None, stream, after, EPS, swiglu=True)

        def gate_up_only(gate_up_w, down_w):
            return torch.nn.functional.linear(attended, gate_up_w)

        want = chain(*layers[0])[0].float()
        err = (fused(*layers[0])[0].float() - want).abs().max().item()
        line = [f"{name}: floor {(3 * inter * hidden * 2) / 4.3e12 * 1e6:5.2f} us",
                f"chain {graph_us(chain, layers):6.2f}",
                f"cuBLAS gate/up alone {graph_us(gate_up_only, layers):6.2f}",
                f"fused {graph_us(fused, layers):6.2f} ({own(2 * inter, hidden, True)[:2]}, "
                f"err {err:.3f})"]
        # [gate | up]'s plan varied, down's gemv under its own
        variants = [(f"N{block_n} K{block_k}",
                     lambda n, k, on_gpu, p=(block_n, block_k): (
                         (*p, 1) if n == 2 * inter else own(n, k, on_gpu)))
                    for block_n, block_k in itertools.product((2, 4, 8, 16), (256, 512, 1024))]
        timed = time_plans(variants, fused, layers, want, err)
        line.append("norm_gemv plans: " + ", ".join(f"{lab} {us:.2f}" for us, lab in timed[:5]))
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
