"""v17_speculative_decoding, its batch-invariant mode: every row's numbers the same bits in any
pass, so that exact acceptance keeps the tokens of speculative_tokens=0 in bfloat16 too.

What it introduces: build option batch_invariant (model.py: InvariantModel). With it every
product, the LM head's included, is v13's gemv, whose programs sum each row as they sum a lone
row, and the decode and prefill attention cut every context every FIXED_CHUNK tokens, whatever
the batch's shape (v10's and v13's fixed_chunk).

Why v17 needs it: exact acceptance keeps a guess when it equals the engine's own draw at its
position, which it is only if the verifying pass computes that position's logits as a decode
step does. In float32 they agree closely enough; in bfloat16 a pass of k + 1 rows a request
runs other kernels than a one-row step (cuBLAS's GEMMs by the row count, attention split by the
batch's shape), and a near-tie flips: 52 of 64 tokens on the copy prompt (docs/benchmarks.md).

Core principle: seen from outside, a request's logits are the same bits alone and in a batch,
with speculation and without. The LM head's output rows are read from the dispatched gemv op:
every row a request computes alone at k = 0 is, bit for bit, among the rows of a batch that
speculates. On a CPU (float32, the interpreter) this and the dispatched ops (no aten product,
each attention told the fixed chunk) are checked; on a GPU in bfloat16 the tokens of k = 4 are
those of k = 0, alone and in a batch, greedy and seeded, graphs on, and the logits' rows as on
the CPU with graphs off.

Files to compare: implementations/v17_speculative_decoding/model.py against
implementations/v13_fused/model.py (FusedOps: project, takes_gemv); v13_fused/gemv.py (a row's
programs); v10_triton_paged_gqa/paged_kernels.py (_plan_fixed against _plan_splits).

Tradeoff left visible: every row of a pass runs the gemv's programs (the weights come from the
L2 cache after the first row at a few rows; at hundreds of rows the products run on CUDA cores
and are slower than cuBLAS's), so the mode is an option, off by default; it runs on one rank,
on the Triton kernels, and with float matrices only.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spec.test_v17_speculative_decoding import (CKPT, VOCAB, Scripted, greedy_cases,
                                                repetitive_cases, run_steps)
from torchlet.contract import SPECULATIVE, BuildError, GenerationParams

pytestmark = pytest.mark.spec(needs=SPECULATIVE)

NEW = 6
PRODUCTS = ("linear", "mm", "addmm", "matmul", "bmm")


class Watch(TorchDispatchMode):
    """What a run dispatches: the rows of every LM head product (a gemv's output as wide as the
    vocabulary), as bytes; the aten products; and the fixed_chunk each attention op is given."""

    def __init__(self):
        super().__init__()
        self.rows: list[bytes] = []
        self.aten_products = 0
        self.chunks: dict[str, set[int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name, space = func._opname, getattr(func, "namespace", None)
        if space == "aten" and name in PRODUCTS:
            self.aten_products += 1
        elif name == "gemv" and out.shape[-1] == VOCAB:
            # each row's bytes (bfloat16 has no numpy dtype: viewed as bytes)
            self.rows += [r.view(torch.uint8).numpy().tobytes()
                          for r in out.detach().cpu().contiguous()]
        elif name in ("paged_decode_attention", "context_attention"):
            self.chunks.setdefault(name, set()).add(args[-1])
        return out


def watched(impl, prompts, k: int, params=None, **options):
    engine = impl.build(CKPT, block_size=4, speculative_tokens=k, min_tokens_per_pass=0.0,
                        use_graphs=False, batch_invariant=True, **options)
    with Watch() as watch:
        tokens, _ = run_steps(engine, prompts, params or GenerationParams(max_new_tokens=NEW))
    return tokens, watch, engine


@pytest.mark.spec(kernel_path=True)  # the mode exists only on the kernels: there, on a CPU
def test_a_requests_logits_are_the_same_bits_alone_and_in_a_speculating_batch(impl):
    """Request A alone at k = 0, then A beside another at k = 2 whose guesses are the oracle's
    first token right and the next wrong (so every pass keeps a guess and rejects one): every
    LM-head row A computed alone is among the batch's rows bit for bit, so every token A drew
    alone it draws again; every product ran the gemv (no aten product) and every attention op
    was told the fixed chunk (alone, the decode steps' and the prompt's; in the batch, the
    verifying passes'); the batch's passes did verify guesses."""
    cases = greedy_cases()[:2]
    prompts = [list(p) for p, _ in cases]
    chunk = impl.package.FIXED_CHUNK
    alone, solo, _ = watched(impl, prompts[:1], 0)
    # what the lone run dispatched, before the batch runs (a run of the interpreter's kernels)
    assert solo.chunks == {"paged_decode_attention": {chunk}, "context_attention": {chunk}}
    assert solo.aten_products == 0
    together, batch, engine = watched(impl, prompts, 2, proposer=Scripted(cases, "mixed"))
    assert together[0] == alone[0]
    missing = [i for i, row in enumerate(solo.rows) if row not in set(batch.rows)]
    assert not missing, f"rows {missing} of {len(solo.rows)} computed alone differ in the batch"
    assert engine.speculation_stats()["verify_passes"] > 0
    assert "context_attention" in batch.chunks
    assert all(told == {chunk} for told in batch.chunks.values()), batch.chunks
    assert batch.aten_products == 0


def test_batch_invariant_off_the_triton_kernels_is_refused_in_one_line(impl):
    """float64 on a CPU runs PyTorch's products, which choose their sums by shape: the build
    says so in one line instead of promising what it cannot keep."""
    with pytest.raises(BuildError) as refused:
        impl.build(CKPT, dtype=torch.float64, batch_invariant=True)
    assert "Triton" in str(refused.value) and "\n" not in str(refused.value)


# --- on a GPU ----------------------------------------------------------------------------------

def gpu_cases():
    return [list(p) for p, _ in repetitive_cases()] + [[5, 9, 2, 7, 11, 3], [40, 41, 42, 43]]


@pytest.mark.gpu
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_in_bfloat16_speculation_keeps_every_token_of_k0_alone_and_in_a_batch(impl, sampled):
    """bfloat16 on CUDA, graphs on (a verifying pass replays a verify graph, a plain step the
    decode graph): with batch_invariant, k = 4's tokens are k = 0's, alone and in a batch of
    four, greedy and seeded; 32 tokens each, where bfloat16 near-ties on this tiny model are
    common."""
    params = GenerationParams(max_new_tokens=32, **(dict(temperature=0.8, seed=11) if sampled
                                                    else {}))
    runs = {}
    for k in (0, 4):
        engine = impl.build(CKPT, device="cuda", dtype=torch.bfloat16, block_size=4,
                            speculative_tokens=k, min_tokens_per_pass=0.0, batch_invariant=True)
        runs[k] = run_steps(engine, gpu_cases(), params)[0]
        runs[k, "alone"] = run_steps(engine, gpu_cases()[:1], params)[0]
    assert runs[4] == runs[0]
    assert runs[4, "alone"] == runs[0, "alone"] == runs[0][:1]


@pytest.mark.gpu
def test_in_bfloat16_a_requests_logits_are_the_same_bits_alone_and_in_a_speculating_batch(impl):
    """The CPU spec's check on CUDA in bfloat16, graphs off so that the dispatch sees each
    product."""
    prompts = gpu_cases()
    runs = {}
    for k, chosen in ((0, prompts[:1]), (4, prompts)):
        engine = impl.build(CKPT, device="cuda", dtype=torch.bfloat16, block_size=4,
                            speculative_tokens=k, min_tokens_per_pass=0.0, use_graphs=False,
                            batch_invariant=True)
        with Watch() as watch:
            tokens, _ = run_steps(engine, chosen, GenerationParams(max_new_tokens=24))
        runs[k] = tokens, watch
    assert runs[4][0][0] == runs[0][0][0]
    batch_rows = set(runs[4][1].rows)
    assert all(row in batch_rows for row in runs[0][1].rows)
