#!/usr/bin/env bash
# Session 67, call 9 (one H200, the last device seconds): the dual drop-in / dual_gemm GPU tests after the
# review fixes (states read before planning, views checked against their parents, named errors).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
R=$OUT/r; mkdir -p $R; t0=$SECONDS
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_dual_gpu.py tests/python/test_api_surface.py \
  tests/python/test_dual_host.py tests/python/test_moe_layer_gpu.py -k "dual or api_surface or fused_experts or torch_op" > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed" $R/py.log | tail -6
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
