"""v12's paged memory, in which a request's K/V grows by several rows a pass and rolls back to the
rows its request keeps.

A verifying pass stores the row of each request's last token and of each of its guesses; the
request then keeps the rows whose tokens it kept. roll_back cuts its count back to them: the
rows after are never read again (a pass attends over a request's count only, and the next pass
writes over them), the blocks that hold none of the kept rows go back to the pool, and only
blocks full of kept rows are sealed for the prefix cache, so no cached block holds a guess the
pass rejected. With poison_free_blocks the rejected rows become NaN, even those left in a block
the request keeps: a read of one shows in the logits."""
from __future__ import annotations

from typing import Sequence

from ..v16_tensor_parallel import PrefixBlockPool, PrefixKV


class RollbackPool(PrefixBlockPool):
    """The prefix pool with truncate. Without the prefix cache (nothing hashed or shared) it
    behaves as v08's pool, as its base does."""

    def truncate(self, request_id: int, num_tokens: int) -> list[int]:
        """Keep the request's first num_tokens tokens: the blocks past the ones that hold them
        leave its table, last first, as free() lets go of them (a block nobody else holds goes to
        the free list). Returns the blocks that left."""
        table, size = self._tables[request_id], self.block_size
        keep = self.blocks_needed(num_tokens)
        gone = table[keep:]
        for block in reversed(gone):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                del self._refs[block]
                self._free[block] = None
        del table[keep:]
        self._tokens[request_id] = num_tokens
        chain = self._chain.get(request_id)
        if chain is not None:
            del chain[num_tokens // size:]
        return gone


class SpeculativeKV(PrefixKV):
    def make_pool(self, num_blocks: int, block_size: int) -> RollbackPool:
        """Always the rollback pool: with the prefix cache off nothing is hashed, and it is
        v08's pool with truncate."""
        hashing = {"block_hash": self.block_hash} if self.block_hash else {}
        return RollbackPool(num_blocks, block_size, on_evict=self._evicted, **hashing)

    def extend(self, request, count: int) -> int:
        """Room for up to count more rows of the request, taking blocks while any are free (the
        scheduler kept one row's room for each decode; guesses take what is left): how many
        rows it got."""
        got = 0
        while got < count and self.pool.can_append(request.id):
            self.pool.append_token(request.id)
            got += 1
        return got

    def roll_back(self, request, keep: int) -> None:
        """Keep the request's first `keep` rows (a prefix of its sequence, guesses included):
        the blocks past them go back to the pool, and its full blocks are sealed."""
        held = self.pool.num_tokens(request.id)
        if keep < held and self.poison_free_blocks:
            self.poison_rows(self.slots(request.id, keep, held - keep))
        self.pool.truncate(request.id, keep)
        if self.enabled:
            self.pool.seal(request.id, request.sequence[:keep])

    def poison_rows(self, slots: Sequence[int]) -> None:
        """Fill these slots' K and V with NaN in every layer."""
        for k, v in self.kv:
            k.view(-1, *k.shape[2:])[list(slots)] = float("nan")
            v.view(-1, *v.shape[2:])[list(slots)] = float("nan")
