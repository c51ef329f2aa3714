#!/usr/bin/env bash
# Session 67, call 8 (one H200): the whole Python GPU tier again after the fused_experts cache / native-path
# fix (options compared as the layer's floats on both paths).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
R=$OUT/r; mkdir -p $R; t0=$SECONDS
timeout 300 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/python > $R/py_gpu.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed" $R/py_gpu.log | tail -8
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
