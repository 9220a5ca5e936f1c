"""Rows a decode pass runs over nano-vllm's workload, under four rules, counted from the
workload's output lengths (no model): v07-v19's lanes (a pass covers the highest lane in use, a
lane a request's for life) and v20's (requests move down where that shrinks the bucket: the pass
covers the live count's bucket), each with v07's buckets doubling all the way (as they did before
issue 48's last change) and as they are now (doubling to 32, then one every 32 lanes).

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
    rows = {"highest lane in use, doubling": 0, "highest lane in use, every 32 (v19)": 0,
            "live count, doubling": 0, "live count, every 32 (v20)": 0}
    steps = live_total = 0
    for t in range(1, max(outs)):  # token t of each request, its first from the prefill
        live = [i for i, n in enumerate(outs) if n > t]
        steps += 1
        live_total += len(live)
        rows["highest lane in use, doubling"] += doubling(max(live) + 1)
        rows["highest lane in use, every 32 (v19)"] += every_32(max(live) + 1)
        rows["live count, doubling"] += doubling(len(live))
        rows["live count, every 32 (v20)"] += every_32(len(live))
    print(f"{steps} decode steps, {live_total / steps:.1f} live requests a step on average")
    for rule, n in rows.items():
        print(f"{rule:37s} {n:8,d} rows  {n / steps:6.1f} a step")


if __name__ == "__main__":
    main()
