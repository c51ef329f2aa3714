#!/usr/bin/env bash
# Prepared in session 110 (no device then): on a fresh GPU machine, main built there (v95's table.sh, PHASE=build:
# library + CLI + Python extension in /tmp/b, per-unit compile times), then the README's main job as a user runs it --
# `BUILD=/tmp/b scripts/bench.sh` (seed + dense, dual, the layer suite W4A16 on pieces and W4A4 NVFP4 on pieces; first
# run of the four-suite form) -- and the Python module's export check and describe() (bf24a0c's link, built on the GPU
# machine). Logs and the four JSON files under $OUT/c1. Then call5 (bench/results/v96/probe/call5.sh, carry
# .carry/peers) in the next call, on the same warm machine (it finds /tmp/b).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; mkdir -p $OUT/c1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PHASE=build NAME=c1_build bash bench/results/v95/probe/table.sh 2>&1 | tail -15 | tee $OUT/c1/build.txt
[ -f /tmp/b/built ] || { echo "build failed"; exit 3; }
cp /tmp/b/python/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=$PWD/../../python timeout 200 python3 -m pytest -q -rs -p no:cacheprovider \
  test_packaging.py test_lifetimes_gpu.py > $OUT/c1/module.txt 2>&1; echo "packaging + lifetimes rc $? $(tail -1 $OUT/c1/module.txt)")
for args in "rows 8 2880 2880 4 4096" "pieces 8 2880 2880 4 64"; do
  PYTHONPATH=$PWD/python timeout 90 python3 bench/results/v95/probe/describe_repro.py $args > $OUT/c1/rep_${args%% *}.txt 2>&1
  echo "${args%% *}: describe rc $? $(grep -c 'describe ok' $OUT/c1/rep_${args%% *}.txt) ok"
done
# (the call's 600 s: what is left of it, less 40 s for the copies below; bench.sh's suites write their JSON as they end)
left=$((560 - (SECONDS - t0))); [ $left -lt 60 ] && left=60
BUILD=/tmp/b timeout $left bash scripts/bench.sh > $OUT/c1/bench.txt 2>&1; echo "bench.sh rc $? [$((SECONDS - t0)) s]"
grep "^\[bench\]" $OUT/c1/bench.txt | grep -v "case " | tail -8
cp bench/results/latest*.json $OUT/c1/ 2>/dev/null
tar czf $OUT/c1.tgz -C $OUT c1; echo "call1 done [$((SECONDS - t0)) s]"
