"""Rows a decode pass runs over nano-vllm's workload, under three lane rules, counted from the
workload's output lengths (no model): v07-v19's (a pass covers the highest lane in use, a lane a
request's for life), v20's (requests move down where that shrinks the bucket: the pass covers
the live count's bucket) and, for comparison, buckets one every 32 lanes past 32 (not built).

The model of the run: all 256 requests admitted before the first decode, request i in lane i
(bench gpu-workload's log shows 1,032 steps: 9 with prefill rows, then 1,023 decode steps),
each decoding until it has its output length.

    python docs/probes/live_rows.py
"""
import math

from torchlet.bench.workloads import nano_vllm_workload

LANES = 256


def doubling(n: int) -> int:
    return min(1 << max(n - 1, 0).bit_length(), LANES)


def every_32(n: int) -> int:
    return doubling(n) if n <= 32 else min(32 * math.ceil(n / 32), LANES)


def main() -> None:
    outs = nano_vllm_workload().output_lens
    rows = {"highest lane in use (v19)": 0, "live count, doubling (v20)": 0,
            "live count, every 32 (not built)": 0}
    steps = live_total = 0
    for t in range(1, max(outs)):  # token t of each request, its first from the prefill
        live = [i for i, n in enumerate(outs) if n > t]
        steps += 1
        live_total += len(live)
        rows["highest lane in use (v19)"] += doubling(max(live) + 1)
        rows["live count, doubling (v20)"] += doubling(len(live))
        rows["live count, every 32 (not built)"] += every_32(len(live))
    print(f"{steps} decode steps, {live_total / steps:.1f} live requests a step on average")
    for rule, n in rows.items():
        print(f"{rule:34s} {n:8,d} rows  {n / steps:6.1f} a step")


if __name__ == "__main__":
    main()
