"""v12's runner with a prefill pass over slices: each request of the pass computes the next rows
of its sequence, wherever its K/V has got to, and only a request whose slice ends its sequence
has the LM head run on its last row and a token drawn."""
from __future__ import annotations

from typing import Sequence

import torch

from ..v14_overlap import PrefixRunner


class ChunkedRunner(PrefixRunner):
    def prefill_tokens(self, batch) -> torch.Tensor:
        """The tokens of the prefills whose slice ends their sequence, in batch.sampled order."""
        logits = self.prefill_slices(batch.prefill, batch.ends)
        self.sampler.bind(batch.sampled)
        return self.sampler.draw(logits, batch.sampled)

    @torch.inference_mode()
    def prefill_slices(self, requests: Sequence, ends: Sequence[int]) -> torch.Tensor:
        """Rows computed .. ends[i] of each placed request (the scheduler placed it when it was
        admitted); a request whose sequence is then all computed has its full blocks sealed for
        the prefix cache. Float logits [sampled, vocab] of those requests' last rows."""
        hidden, indptr = self.forward_rows(requests, ends)
        done = []
        for i, (request, end) in enumerate(zip(requests, ends)):
            request.computed = end
            if end == len(request.sequence):
                done.append(i)
                if self.kv.enabled:
                    self.kv.seal(request)
        last = self.model.last_rows(indptr)[done]
        return self.model.lm_head(self.weights, hidden[last]).float()
