"""v08_paged_gqa_py: the K/V cache as a pool of fixed-size blocks; each request reads its K/V
through a block table, attention over the table in readable PyTorch. Decode keeps v07's graph
replay; when the pool runs out, the request admitted last is preempted and recomputed later.

Swaps the K/V memory (kv.py: PagedKV over its BlockPool, with metadata.py's
FlashInfer-style view: the pool keeps each request's block table, asked for by request id),
the model (model.py: PagedDecoder, v02's decoder composing two parts swapped on their
own from here on: its ops, v05's PassOps, and its memory, PagedAttention: K/V stored and read
through the block tables by that file's PyTorch functions, and the paged passes), the
decode inputs (inputs.py: PagedInputs, each lane's table, length and new slot, in room each
request takes as it feeds a token), the policy (policy.py: PagedAdmission, admission over free
blocks) and the scheduler (scheduler.py: PreemptingScheduler, which preempts)."""
from torchlet.contract import PAGED_DECODE_ATTENTION, PAGED_KV

from ..v07_cuda_graph import CAPABILITIES as PREVIOUS
from ..v07_cuda_graph import PARTS as BEFORE
from ..v07_cuda_graph import Batch, ContinuousBatching, DecodeBuffers, GraphRunner, GraphedRunner, LaneRequest, PassOps, StepEngine, default_buckets, graphs
from . import metadata
# model.py's PyTorch paged attention, passed on to later versions (and the specs) by this name
from . import model as paged_attention
from .inputs import PagedInputs
from .kv import BlockPool, PagedKV, PoolExhausted
from .model import PagedAttention, PagedDecoder, layers
from .policy import PagedAdmission
from .scheduler import PreemptingScheduler

CAPABILITIES = PREVIOUS + (PAGED_KV,)
PARTS = BEFORE.replace("v08", kv=PagedKV, model=layers, inputs=PagedInputs,
                       policy=PagedAdmission, scheduler=PreemptingScheduler)
OPTIONS = PARTS.options
build = PARTS.build
# The decode attention the model calls, for a harness to time alone (torchlet bench kernel).
KERNELS = {PAGED_DECODE_ATTENTION: paged_attention.paged_decode_attention}

__all__ = ["Batch", "BlockPool", "CAPABILITIES", "ContinuousBatching", "DecodeBuffers", "GraphRunner", "GraphedRunner", "KERNELS", "LaneRequest", "OPTIONS", "PARTS", "PagedAdmission", "PagedAttention", "PagedDecoder", "PagedInputs", "PagedKV", "PassOps", "PoolExhausted", "PreemptingScheduler", "StepEngine", "build", "default_buckets", "graphs", "layers", "metadata", "paged_attention"]
