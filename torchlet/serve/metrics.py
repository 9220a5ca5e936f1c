"""/metrics: the server's state in Prometheus' text format, through prometheus-client.

Counters and histograms are updated by the engine thread as tokens come and requests end
(prometheus-client's metrics are thread-safe); the gauges, and a speculative engine's own
counters (speculation_stats), are read from the worker's latest snapshot when scraped, so a
scrape never touches the engine. Each app has its own registry: two servers in one process (the
specs, the benchmark) do not share their numbers."""
from __future__ import annotations

import collections
import gc

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# speculation_stats() keys as counters (prometheus-client adds _total): name and help.
SPECULATION = {
    "verify_passes": ("torchlet_spec_verify_passes", "passes of the model that verified guessed "
                      "tokens (speculative decoding)"),
    "proposed": ("torchlet_spec_proposed_tokens", "tokens guessed and verified; accepted / "
                 "proposed is the acceptance rate"),
    "accepted": ("torchlet_spec_accepted_tokens", "guessed tokens kept by a verifying pass"),
    "tokens": ("torchlet_spec_tokens", "tokens verifying passes kept: the accepted guesses and "
               "one of the model's own a request; tokens / verify passes is the accepted tokens "
               "per target pass (a pass's requests together)"),
}
# Latency buckets from a CPU's tiny model (sub-millisecond steps) to a slow first token.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram("torchlet_time_to_first_token_seconds",
                              "from a request's arrival to its first token", buckets=BUCKETS,
                              registry=r)
        self.itl = Histogram("torchlet_inter_token_latency_seconds",
                             "between two tokens of a request (a step's tokens share its wait)",
                             buckets=BUCKETS, registry=r)
        self.generated = Counter("torchlet_generated_tokens", "tokens sent to clients", registry=r)
        self.ends = Counter("torchlet_requests_finished",
                            "requests ended, by reason: stop, length, aborted, error, shutdown",
                            ["reason"], registry=r)
        self.refusals = Counter("torchlet_requests_refused",
                                "requests answered with an error before anything was queued",
                                ["status"], registry=r)
        self.worker = None
        r.register(_Gauges(self))

    def tokens(self, waited: float, n: int, first: bool) -> None:
        """n tokens that came after `waited` seconds (since arrival for the first)."""
        self.generated.inc(n)
        if first:  # the first token's wait is its TTFT; the step's others came with it
            self.ttft.observe(waited)
            gaps = [0.0] * (n - 1)
        else:  # a step that brought several tokens (a decode ahead) spreads its wait over them
            gaps = [waited / n] * n
        for gap in gaps:
            self.itl.observe(gap)

    def ended(self, reason: str) -> None:
        self.ends.labels(reason).inc()

    def refused(self, status: int) -> None:
        self.refusals.labels(str(status)).inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _Gauges:
    """The snapshot's numbers at scrape time: gauges, and the engine's speculation counters."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def describe(self):
        return []  # collected lazily: the worker is attached after the registry is made

    def collect(self):
        worker = self.metrics.worker
        if worker is None:
            return
        s = worker.snapshot
        g = GaugeMetricFamily("torchlet_requests", "requests in the engine, by state",
                              labels=["state"])
        g.add_metric(["running"], len(s["running"]))
        g.add_metric(["waiting"], len(s["waiting"]))
        yield g
        yield GaugeMetricFamily("torchlet_gc_frozen_objects",
                                "objects frozen out of Python's garbage collector when the server "
                                "started (all alive then), which no collection scans",
                                value=gc.get_freeze_count())
        yield GaugeMetricFamily("torchlet_tokens_per_second",
                                "tokens generated per second over the last few seconds",
                                value=s["tokens_per_second"])
        pool, tables = s["pool"], s["tables"]
        if pool is not None:
            held = collections.Counter(b for t in tables.values() for b in t)
            shared = [b for b, n in held.items() if n > 1]
            g = GaugeMetricFamily("torchlet_kv_blocks", "K/V blocks of the pool, by state "
                                  "(shared: held by more than one request's table; cached: free "
                                  "and keeping a prefix's K/V for a later prompt until evicted)",
                                  labels=["state"])
            g.add_metric(["used"], pool["num_used"])
            g.add_metric(["free"], pool["num_free"])
            g.add_metric(["shared"], len(shared))
            if s["cached"] is not None:
                g.add_metric(["cached"], len(s["cached"]))
            yield g
        prefix = s["prefix"]
        if prefix is not None:
            queried = prefix["queried_tokens"]
            yield GaugeMetricFamily("torchlet_prefix_cache_hit_rate",
                                    "prompt tokens found cached, of those looked up",
                                    value=prefix["hit_tokens"] / queried if queried else 0.0)
        speculation = s.get("speculation")
        if speculation is not None:
            for key, (name, doc) in SPECULATION.items():
                yield CounterMetricFamily(name, doc, value=speculation[key])
