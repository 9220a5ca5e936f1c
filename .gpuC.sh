#!/usr/bin/env bash
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0
echo "commit $(cat .commit)"; date -u
for B in 2048 512; do echo "== mixed B=$B"; date -u
timeout 170 python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" bench mixed --versions v14,v15 --budget $B --quiet --decode-tokens 512 --long-len 8192 --every 16 --out /tmp/mx$B 2>&1 | grep -E "^v1[45]|p99 inter" | head -4; done
date -u
