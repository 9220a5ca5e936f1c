#!/usr/bin/env bash
# Call A: GPU specs, before/after the restructure (issue 25), serve through the server (issue 29).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0
T() { python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" "$@"; }
echo "commit $(cat .commit)"; date -u
echo "== gpu specs"; CI=1 timeout 300 python3 -m pytest -m "gpu or gpu2" spec/ -q -p no:cacheprovider -n 4 2>&1 | tail -4
python3 docs/probes/serve_model_dir.py /tmp/m05 --device cuda > /dev/null || exit 1
S="--impl v14 --model /tmp/m05 --device cuda --dtype bfloat16 --max-running 256 --max-model-len 2048 --num-blocks 20000 --max-waiting 1024"
echo "== serve nano streamed"; date -u
T bench serve $S --rates inf --lengths nano-vllm --out $OUT/serve-nano 2>&1 | tail -1
echo "== serve nano whole"; date -u
T bench serve $S --rates inf --lengths nano-vllm --no-stream --out $OUT/serve-nano-whole 2>&1 | tail -1
echo "== workload and decode, before (a55636d) and after"; date -u
for R in .gpu/old/implementations implementations; do
T bench gpu-workload --versions v14 --impl-root $R --out $OUT/gpuw-$(basename $(dirname $R)) --quiet 2>&1 | grep "^v14"
T bench decode --versions v14 --impl-root $R --batches 1 --contexts 128 --out $OUT/dec-$(basename $(dirname $R)) --quiet 2>&1 | grep "^v14"
done
T bench gpu-workload --versions v14 --impl-root .gpu/old/implementations --out $OUT/gpuw-old2 --quiet 2>&1 | grep "^v14"
T bench gpu-workload --versions v14 --out $OUT/gpuw-new2 --quiet 2>&1 | grep "^v14"
echo "== serve sharegpt"; date -u
T bench serve $S --rates 4,16,64,inf --requests 64 --out $OUT/serve-gpu 2>&1 | tail -6
date -u
