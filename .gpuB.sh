#!/usr/bin/env bash
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0
T() { python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" "$@"; }
echo "commit $(cat .commit)"; date -u
echo "== gpu specs"; CI=1 timeout 200 python3 -m pytest -m "gpu or gpu2" spec/ -q -p no:cacheprovider -n 6 2>&1 | tail -3
echo "== split probe"; date -u; timeout 90 python3 docs/probes/context_attention_split.py .gpu/previous_ca.py 2>&1 | tail -14
echo "== mixed B=2048"; date -u
timeout 150 python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" bench mixed --versions v14,v15 --budget 2048 --quiet --decode-tokens 512 --long-len 8192 --every 16 --out /tmp/mx 2>&1 | grep -E "^v1[45]" | head -4
python3 docs/probes/serve_model_dir.py /tmp/m05 --device cuda > /dev/null || exit 1
S="--impl v14 --model /tmp/m05 --device cuda --dtype bfloat16 --max-running 256 --max-model-len 2048 --num-blocks 20000 --max-waiting 1024"
echo "== serve nano streamed"; date -u; timeout 70 python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" bench serve $S --rates inf --lengths nano-vllm --out /tmp/sn 2>&1 | grep "rate inf"
echo "== serve nano whole"; date -u; timeout 70 python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" bench serve $S --rates inf --lengths nano-vllm --no-stream --out /tmp/sw 2>&1 | grep "rate inf"
date -u
