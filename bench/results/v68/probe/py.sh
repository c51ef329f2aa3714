#!/usr/bin/env bash
# v68 e: the transformers integration's weight_layout (main after 497b4ec; the extension of .carry/v105p, the same
# C++ as main's): (1) the transformers tests on both devices; (2, `bench`) hf_e2e rows vs pieces (gpt-oss and
# Qwen3 shapes, 4 layers, decode b 1 / 8 / 64, alternating rounds, no peers).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
V=/tmp/v105p; mkdir -p $V; xz -dc .carry/v105p/bins.tar.xz | tar xf - -C $V
cp $V/_fp4gemm*.so python/fp4gemm/
export PYTHONPATH=$PWD/python
if [ "${1:-}" != bench ]; then
(cd tests/python && timeout 200 python3 -m pytest -q -rs test_transformers_checkpoints.py test_transformers_gpu.py > $R/py_hf.txt 2>&1; echo "py hf rc $? [$((SECONDS - t0)) s]")
tail -6 $R/py_hf.txt
else
  timeout 240 python3 bench/hf_e2e.py --models gpt-oss,qwen3 --layers 4 --batches 1,8,64 --prefill 2048 --reps 50 \
    --layouts rows,pieces,rows,pieces --peers 0 --json $R/hf_e2e.json > $R/hf_e2e.txt 2>&1
  echo "hf_e2e rc $? [$((SECONDS - t0)) s]"; grep -A6 "^== " $R/hf_e2e.txt
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
