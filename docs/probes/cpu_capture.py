"""v07's CPU graph: how long a capture (one recorded run) and a replay take on a toy function of
20 layers (a matmul, SiLU, a multiply-add and a cat each: 120 ops), medians of 30 captures and
200 replays, on one thread; the replay checked bit for bit against an eager run. With
PREVIOUS.py (e.g. `git show 5a82e10:implementations/v07_cuda_graph/graphs.py > /tmp/old.py`),
that module's too, so a change to the recorder is timed against the one before it.

    PYTHONPATH=. python docs/probes/cpu_capture.py [PREVIOUS.py]

Found (2026-12-07, the 2-core CPU, a spec run on the other core): 5a82e10's recorder 6.50 ms a
capture and 0.772 ms a replay; 3ed4650's (an op whose tensors are its own arguments written
down without pytree) 3.70 and 0.643."""
import importlib.util
import sys
import time

import torch

from implementations.v07_cuda_graph import graphs


def timed(module) -> tuple[float, float]:
    torch.manual_seed(0)
    weights = [torch.randn(64, 64) for _ in range(20)]
    x = torch.randn(4, 64)

    def layers(x):
        h = x
        for w in weights:
            h = torch.nn.functional.silu(h @ w) + h * 0.5
            h = torch.cat([h[:, :32], h[:, 32:]], dim=1)
        return h

    captures = []
    for _ in range(30):
        start = time.perf_counter()
        graph = module.capture(layers, [x], constants=weights)
        captures.append(time.perf_counter() - start)
    replays = []
    for _ in range(200):
        start = time.perf_counter()
        graph.replay()
        replays.append(time.perf_counter() - start)
    assert torch.equal(graph.replay(), layers(x)), "the replay differs from an eager run"
    return sorted(captures)[15] * 1e3, sorted(replays)[100] * 1e3


def main() -> None:
    torch.set_num_threads(1)
    modules = [("this tree", graphs)]
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location("previous_graphs", sys.argv[1])
        previous = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = previous  # dataclasses look their module up there
        spec.loader.exec_module(previous)
        modules.insert(0, (sys.argv[1], previous))
    for name, module in modules:
        capture_ms, replay_ms = timed(module)
        print(f"{name}: capture {capture_ms:.2f} ms, replay {replay_ms:.3f} ms")


if __name__ == "__main__":
    main()
