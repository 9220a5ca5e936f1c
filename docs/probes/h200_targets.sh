# Issues 45-47's measurements on the H200, in two device calls of under 10 minutes each (about
# 4 and 7 minutes on an H100): `bash docs/probes/h200_targets.sh A`, then `... B`, with the wheels
# of docs/gpu.md carried in `.whl` (xgrammar and its needs, jsonschema, gguf, syrupy). Logs and
# the benches' JSON go under $OUT; each command is the one docs/gpu.md records.
set -o pipefail
case "$1" in A|B) ;; *) echo "usage: bash docs/probes/h200_targets.sh A|B" >&2; exit 2 ;; esac
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
torchlet() { python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "$1" in
A)
    date -u +%H:%M:%S
    # the modules that need openai or pexpect hold no gpu spec
    CI=1 timeout 240 python3 -m pytest -m gpu spec/ -q -rs -p no:cacheprovider -n 8 \
        --ignore=spec/test_chat.py --ignore=spec/test_serve.py \
        --ignore=spec/test_serve_browser.py --ignore=spec/test_serve_structured.py \
        2>&1 | tee $OUT/specs.log | grep -vE "^SKIPPED" | tail -6
    date -u +%H:%M:%S
    timeout 60 python3 docs/probes/serve_model_dir.py /tmp/qwdir --device cuda | tail -1
    torchlet bench structured --device cuda --model /tmp/qwdir --max-new-tokens 160 --quiet \
        --out $OUT/structured 2>&1 | tee $OUT/structured.log | tail -5
    date -u +%H:%M:%S
    timeout 90 python3 docs/probes/verify_cost.py --context 128 2>&1 | tee $OUT/verify.log \
        | grep -E "^batch|proposer"
    date -u +%H:%M:%S ;;
B)
    date -u +%H:%M:%S
    torchlet bench gpu-workload --versions v16,v17 --build-opt speculative_tokens=4 --quiet \
        --out $OUT/spec 2>&1 | tee $OUT/workload17.log | tail -4
    date -u +%H:%M:%S
    torchlet bench gpu-workload --versions v16,v18 --quantize int8 --quiet --out $OUT/int8 \
        2>&1 | tee $OUT/workload18.log | tail -4
    date -u +%H:%M:%S
    torchlet bench decode --versions v16,v18 --quantize int8 --batches 1,256 \
        --contexts 128,1024 --no-anchors --quiet --out $OUT/decode 2>&1 \
        | tee $OUT/decode.log | grep -E "^v1"
    date -u +%H:%M:%S ;;
esac
