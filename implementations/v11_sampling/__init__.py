"""v11_sampling: v10 with a sampler: temperature, top-k, top-p and min-p (Hugging Face's order),
drawn on the device by an exponential race whose random numbers are a hash of (seed, position).
A seeded request's tokens depend on nothing but itself, and the draw runs inside the captured
decode step.

Parts: the sampler (sampler.py, exported as sampler), the runner whose captured step ends in it
and whose decode buffers carry each lane's settings (runner.py), and the engine whose _choose
takes the graph's draws and draws prefill rows (engine.py: SamplingEngine; build is v10's with
this runner and engine). From v10: the model functions (Triton layers, paged kernels), and
through v10 v08's engine, runner, block pool, cache, scheduler and paged metadata."""
from torchlet.contract import SAMPLING

from ..v10_triton_paged_gqa import CAPABILITIES as PREVIOUS
from ..v10_triton_paged_gqa import (KERNELS, OPTIONS, BlockPool, PagedCache, PoolExhausted,
                                    TritonPagedDecoder, graphs, kernels, layers, metadata,
                                    paged_attention, paged_build, paged_kernels)
from . import sampler
from .engine import SamplingEngine, build
from .runner import SamplingRunner

CAPABILITIES = PREVIOUS + (SAMPLING,)

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "BlockPool", "PagedCache", "PoolExhausted",
           "SamplingEngine", "SamplingRunner", "TritonPagedDecoder", "build", "graphs", "kernels",
           "layers", "metadata", "paged_attention", "paged_build", "paged_kernels", "sampler"]
