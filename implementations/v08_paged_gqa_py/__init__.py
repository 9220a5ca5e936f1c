"""v08_paged_gqa_py: the KV cache as a pool of fixed-size blocks, each request reading its K/V
through a block table, attention over the table in readable PyTorch.

TEMPORARY: only the standalone pieces (pool, metadata, paged attention). The engine built on v07
replaces this file and keeps these exports.
"""
from torchlet.contract import PAGED_KV

from . import metadata, paged_attention
from .block_pool import BlockPool, PoolExhausted, kv_bytes_per_token

CAPABILITIES = (PAGED_KV,)

__all__ = ["CAPABILITIES", "BlockPool", "PoolExhausted", "kv_bytes_per_token", "metadata",
           "paged_attention"]
