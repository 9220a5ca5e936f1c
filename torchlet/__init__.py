"""Torchlet harness: checkpoints, CLI, benchmarks. Implementations import only `torchlet.contract`."""
