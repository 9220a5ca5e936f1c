# Issue 48's target commands on the GPU machine, in two device calls of under 10 minutes each
# (about 4 and 5 minutes on an H100): `bash docs/probes/issue48_targets.sh A`, then `... B`, with
# the wheels of docs/gpu.md carried in `.whl` (xgrammar and its needs, jsonschema, gguf, syrupy).
# Each command is one docs/gpu.md records. Logs go under $OUT; the benches' JSON and pictures go
# into one $OUT/results.tar, rewritten after each bench (the device hands back a few files only,
# and a call taken back midway still returns what it had): unpack it into docs/benchmarks/ and
# run `torchlet bench report` (set each JSON's environment.commit first where the device's git
# metadata is stale).
set -o pipefail
# `... AB` (about 8 minutes on an H100): the gpu specs, a step's kernels, then the decode step and
# the workload of the tree before a change (`.base`, a copy of its implementations/, carried
# with the wheels: `git archive REV implementations | tar -x -C .base --strip-components=1`)
# and after it, alternated, twice: the A/B docs/gpu.md quotes.
# With H200_ONLY=1 it runs nothing on another card (a call that names the nvidia-h200 kind may
# get an H100, and only an H200's figures answer the issue): one cheap try a session.
case "$1" in A|B|AB) ;; *) echo "usage: [H200_ONLY=1] bash docs/probes/issue48_targets.sh A|B|AB" >&2; exit 2 ;; esac
if [ "${H200_ONLY:-0}" = 1 ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    echo "not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader)): nothing run"; exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
# An executable, not a shell function: `timeout` runs programs only.
printf '#!/bin/sh\nexec python3 -c "import sys; from torchlet.cli import main; sys.exit(main())" "$@"\n' \
    > /tmp/torchlet && chmod +x /tmp/torchlet
export PATH=/tmp:$PATH
R=/tmp/results
mkdir -p $R
keep() { tar -cf $OUT/results.tar -C $R . ; }
stamp() { date -u +%H:%M:%S; }
gpu_specs() {  # the modules that need openai or pexpect hold no gpu spec
    CI=1 timeout 240 python3 -m pytest -m gpu spec/ -q -rs -p no:cacheprovider -n 8 \
        --ignore=spec/test_chat.py --ignore=spec/test_serve.py \
        --ignore=spec/test_serve_browser.py --ignore=spec/test_serve_structured.py \
        > $OUT/specs.log 2>&1; grep -E "^(FAILED|ERROR)" $OUT/specs.log; tail -1 $OUT/specs.log
}
step_kernels() {  # the kernels of one step at batch 1 x 128 and 256 x 1,024, by device time
    timeout 90 python3 docs/probes/step_kernels.py > $OUT/step_kernels.log 2>&1
    grep -E "^v20|^ +[0-9.]+ us" $OUT/step_kernels.log | head -24
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "$1" in
A)
    stamp
    timeout 120 torchlet bench gpu-workload --versions v19,v20 --repeats 3 --quiet \
        --out $R/workload 2>&1 | tee $OUT/workload.log | grep -E "^v|decode steps"; keep
    stamp
    timeout 120 torchlet bench decode --versions v20 --batches 1,256 --contexts 128,1024 \
        --quiet --out $R/decode 2>&1 | tee $OUT/decode.log | grep -E "^v20"; keep
    stamp
    timeout 60 torchlet bench kernel --batches 1,64,256 --contexts 1024,4096 --quiet \
        --out $R/kernel 2>&1 | tee $OUT/kernel.log | grep -E "^[0-9 ]+  "; keep
    stamp
    timeout 100 torchlet bench mixed --versions v14,v15 --decode-tokens 512 --long-len 8192 \
        --every 16 --budget 512 --quiet --out $R/mixed 2>&1 | tee $OUT/mixed.log | grep -E "^v1"
    keep
    stamp
    timeout 120 torchlet bench gpu-workload --model-shape qwen3-0.6b --versions v20 --quiet \
        --out $R/qwen3 2>&1 | tee $OUT/qwen3.log | grep -E "^v20|^floor"; keep
    stamp ;;
B)
    stamp
    gpu_specs
    stamp
    step_kernels
    stamp
    # v15's slowest steps under bench mixed's load and warm-up, and their host profile
    timeout 100 python3 docs/probes/mixed_stalls.py v15_chunked_prefill --show 8 --profile \
        --slow-quantile 0.99 > $OUT/stalls.log 2>&1
    grep -E "^v15|^  (arrival|other|step)" $OUT/stalls.log | cut -c1-150
    stamp
    timeout 60 torchlet bench kernel --model-shape qwen3-0.6b --batches 64,256 \
        --contexts 1024,4096 --quiet --out $R/kernel-qwen3 2>&1 | grep -E "^[0-9 ]+  "; keep
    stamp ;;
AB)
    [ -d .base ] || { echo "AB needs .base (carry it)" >&2; exit 2; }
    stamp
    gpu_specs
    stamp
    step_kernels
    for T in .base implementations .base implementations; do
        timeout 60 torchlet bench decode --versions v20 --batches 1,256 --contexts 128,1024 \
            --no-anchors --impl-root $T --quiet --out $R/decode-$T 2>&1 | grep -E "^v20" \
            | sed "s|^|$T |"; keep
    done
    stamp
    for T in .base implementations .base implementations; do
        timeout 90 torchlet bench gpu-workload --versions v20 --impl-root $T --quiet \
            --out $R/workload-$T 2>&1 | grep -E "^v20|decode steps" | sed "s|^|$T |"; keep
    done
    stamp ;;
esac
