"""The draw: logits to one token per row, on the device, with no host sync.

Filters, in Hugging Face's order (its TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, MinPLogitsWarper, written with the same tensor ops so ties break the same
way): divide by the temperature; keep the tokens at least as large as the k-th largest (ties at
the k-th are kept); drop the smallest tokens while their cumulative probability stays at or
below 1 - top_p (the largest is always kept); drop tokens whose probability is below min_p
times the largest. vLLM applies min-p before top-k and top-p; Hugging Face is the oracle here.

The draw is an exponential race: argmax over tokens of p / E, E ~ Exp(1) independent per token,
picks token i with probability p_i. E comes from a counter-based hash of (seed, position, token
id), so a draw depends on nothing but the request: no generator state lives in the engine, and
a graph replays it with new seeds and positions written into its input buffers.
"""
from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash (the 'lowbias32' constants), on int64 tensors holding
    values in [0, 2^32): products wrap past 2^63, and the mask keeps their exact low 32 bits."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def uniforms(seed: torch.Tensor, position: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, vocab] float64 uniforms in (0, 1), a pure function of (seed, position, token id):
    (x + 0.5) / 2^24 for the hash's top 24 bits x. float64 holds every one exactly; float32
    cannot (from x = 2^23 up, x + 0.5 rounds to even, and 2^24 - 1 + 0.5 to 2^24, a u of 1
    whose E = -log(u) = 0 would win the race for a filtered token)."""
    seed = seed.long()
    lo, hi = seed & _MASK32, (seed >> 32) & _MASK32
    key = _mix32(_mix32(_mix32(lo) ^ hi) ^ (position.long() & _MASK32))
    key2 = _mix32(key ^ 0x9E3779B9)  # a second key, so no two (position, token) pairs collide
    tokens = torch.arange(vocab, device=seed.device)
    bits = _mix32(_mix32(key[:, None] ^ tokens) ^ key2[:, None])
    return ((bits >> 8).double() + 0.5) * (1.0 / (1 << 24))


def filter_logits(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                  top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Temperature, top-k, top-p, min-p, per row; filtered tokens get -inf. A row's off values
    (temperature 0, top_k 0, top_p 1, min_p 0) leave it as it is."""
    vocab = logits.shape[-1]
    scale = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    scores = logits / scale[:, None].to(logits.dtype)
    # top-k: the k-th largest score is the threshold; k of 0 means all of them
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, torch.full_like(top_k, vocab))
    kth = scores.sort(dim=-1, descending=True).values.gather(-1, (k.long() - 1)[:, None])
    scores = scores.masked_fill(scores < kth, -torch.inf)
    # top-p over the ascending sort, Hugging Face's way; the largest token always stays
    ascending, order = torch.sort(scores, descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= (1 - top_p.to(logits.dtype))[:, None]
    drop[..., -1:] = False
    drop &= (top_p < 1)[:, None]
    scores = scores.masked_fill(drop.scatter(-1, order, drop), -torch.inf)
    # min-p against the most likely token (which it never drops)
    probs = scores.softmax(dim=-1)
    floor = min_p.to(logits.dtype)[:, None] * probs.amax(dim=-1, keepdim=True)
    return scores.masked_fill(probs < floor, -torch.inf)


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
           top_p: torch.Tensor, min_p: torch.Tensor, seed: torch.Tensor,
           position: torch.Tensor) -> torch.Tensor:
    """One token id per row: the argmax where temperature is 0, else a draw from the filtered
    distribution keyed by (seed, position). Both are computed, and a where picks, so the step
    has one shape whatever its rows ask for."""
    logits = logits.float()  # a decode step's are in the model's dtype (v05's decode_step)
    logp = filter_logits(logits, temperature, top_k, top_p, min_p).log_softmax(dim=-1)
    # Exp(1), and its log, from the exact float64 uniforms; float32 from there on
    log_noise = (-uniforms(seed, position, logits.shape[-1]).log()).log().float()
    drawn = (logp - log_noise).argmax(dim=-1)  # argmax p / E, in logs
    return torch.where(temperature > 0, drawn, logits.argmax(dim=-1))

