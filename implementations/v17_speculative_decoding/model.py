"""v16's model, with a batch-invariant mode (build option batch_invariant): every row's numbers
the same bits whatever rows share its pass. Exact acceptance keeps a request's tokens only where
a verifying pass computes each row's logits as a decode step would: the pass has k + 1 rows a
request, the step one, and the steps beside them other batches. Three of v16's kernels choose by
the pass's shape how to sum, and in bfloat16 those sums round apart:

- the products: v13's gemv for one row, cuBLAS's GEMMs, tiled by the row count, for more; here
  every product, the LM head's too, is v13's gemv, whose programs sum each row as a lone row;
- the decode attention (v10) and a prefill's (v13) split a context over programs by the batch's
  shape; here every context is cut every FIXED_CHUNK tokens, whatever the batch.

The rest (norms, RoPE, SwiGLU, the K/V store) already runs a program per row. The cost: every
row of a pass reads the weights through the gemv's programs (from the L2 cache after the first
row, at a handful of rows; at hundreds, the products run on CUDA cores), and a short batch's
contexts are split no finer than FIXED_CHUNK. On the Triton kernels only (a GPU, or float32
under TRITON_INTERPRET=1): elsewhere PyTorch's products choose by shape, and the build refuses."""
from __future__ import annotations

from functools import partial

from torchlet.contract import BuildError, BuildOption

from ..v16_tensor_parallel import FusedOps, ShardedModel, layers, paged_kernels

__all__ = ["FIXED_CHUNK", "InvariantAttention", "InvariantModel", "InvariantOps"]

# Tokens between the cuts of a context: two of the decode kernel's tiles, so that a batch-1 step
# over a 1,024-token context still runs 4 programs a KV head.
FIXED_CHUNK = 256


class InvariantOps(FusedOps):
    """v13's ops whose every product is the gemv kernel, at any row count and matrix size."""

    def takes_gemv(self, x, weight) -> bool:
        return self.on_triton

    def lm_head(self, weights, hidden):
        """The logits through project, so the gemv (not cuBLAS's GEMM) reads the LM head."""
        return self.project(hidden, weights.lm_head)


class InvariantAttention(layers.Memory):  # layers.Memory: v13's FusedContextAttention
    """v13's memory whose decode and prefill attention cut every context at the same places."""

    fixed_chunk = FIXED_CHUNK
    kernels = (paged_kernels.store_kv,
               partial(paged_kernels.paged_decode_attention, fixed_chunk=FIXED_CHUNK))


class InvariantModel(ShardedModel):
    """The model part: v16's; with batch_invariant, its ops InvariantOps and its memory
    InvariantAttention, on one rank and the Triton kernels."""

    OPTIONS = (BuildOption("batch_invariant", bool, False,
                           "every row's numbers the same bits in any batch, so that exact "
                           "acceptance keeps the tokens of speculative_tokens=0 in bfloat16 too "
                           "(on the Triton kernels; slower products)"),)

    @classmethod
    def assemble(cls, a):
        decoder = super().assemble(a)
        if not a.options["batch_invariant"]:
            return decoder
        if decoder.shard.world > 1:
            raise BuildError("batch_invariant runs on one rank: its products are not sharded")
        ops = InvariantOps().for_device(a.device, a.dtype)
        if not ops.on_triton:
            raise BuildError(f"batch_invariant runs on the Triton kernels: a CUDA device, or "
                             f"float32 under TRITON_INTERPRET=1 (here {a.device}, {a.dtype})")
        decoder.ops, decoder.Memory = ops, InvariantAttention
        return decoder
